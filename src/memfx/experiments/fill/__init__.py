"""Hardware store elimination: does this CPU care about the value it stores?

Seed 000 ("Hardware Store Elimination"): on Skylake client, filling a region
that no longer fits in L2 with zeros ran ~17-18% faster than filling it with
ones; ~63% of the L2 evictions became silent and half of the DRAM writes
disappeared.  Other machines showed nothing, and microcode changed it.

Arms are fill VALUES, interleaved at every (kernel, size) cell so drift hits
them alike.  Every kernel writes the LOW BYTE of the value to every byte of
the region (see kernels/fill.c): the fill pattern is a byte replicated to the
store width, so scalar, vector, rep stosb and memset kernels write the same
bytes.  One compiled function serves every value.

  zero           0x00
  one            0x01 (seed 000's fill1 wrote int 1; here every byte is 0x01)
  ones           0xff (-1, all bits set)
  random         a non-zero byte drawn from the run's seed (never 0x00, 0x01, 0xff)
  zero_volatile  0x00, but re-read through a volatile pointer at every pass and
                 never taken from the argument: the seed's own check that the
                 effect does not hinge on a zeroing idiom (xor reg, reg).  The
                 plain `zero` arm already loads its value from memory (the
                 argument block) and broadcasts it through and+imul, so no arm
                 ever stores a register produced by an idiom.
  one_zero       passes alternate 0x01 and 0x00 (write b over a, as in the
                 seed's proposal to let ones escape before zeros overwrite them)

Swept: kernel (scalar 4/8 B, SSE 16 B, AVX2 32 B, AVX-512 64 B, rep stosb,
libc memset, non-temporal movnti / movntdq) and region size from 100 B to
beyond the last-level cache, with sizes on both sides of every cache size
the OS reports.  Metric: GB/s (bytes written per second).  One kernel call
fills the whole region, as a program does (libc and rep stosb choose their
strategy from the length of one call); the `chunk` parameter fills large
regions in fixed-size calls instead, for comparison.

Answers (one per declared question, every run): fill.zero_store_elimination
rests on zero_ratio_table -- per kernel and cache level (each size assigned to
the smallest reported cache that holds it, DRAM beyond the last) the
zero/non-zero bandwidth ratio, the median over the level's sizes of per-size
ratios of medians, with a bootstrap CI that resamples sizes and then samples
within each size, and a verdict by the named thresholds effect_min and
min_samples; the answer's value, verdict and sentence come from those rows
and nothing else, and every kernel family or level not measured is listed
with the reason.  Where a PMU exists and memfx knows the CPU model's
encodings, fill.l2_evictions counts L2_LINES_OUT.SILENT / NON_SILENT per line
written; elsewhere it is not_measured with the reason.

A second experiment, `fill_alloc` (fill_alloc.py), times calloc vs
malloc+memset vs mmap first touch on fresh and recycled memory with page
faults counted (the seed's footnote: calloc can skip zeroing memory it knows
is fresh).  The kernel checks are in _fill_checks.py, the cache levels and
the level ratio in _fill_ratio.py (both re-exported here).
"""
from __future__ import annotations

import math

import numpy as np

from ...model import answers as ans
from ...model.answers import HIGHER, Question
from ...model.details import detail
from ...model.errors import MemfxError, ParamError
from ...model.findings import DETECTED, INCONCLUSIVE, NOT_DETECTED, effect_verdict, threshold
from ...model.machine_view import Fingerprint
from ...model.plotspec import PlotSpec
from ...model.units import format_size
from .._sweep import SPARSE_FROM
from ..base import Experiment, Param, Point, Trial, register
from ..levels import data_caches as level_caches
from ..levels import declared_sizes
from .analysis import ALL_SIZES, fill_level, fill_levels, level_ratio, ratio_verdict  # noqa: F401
from .kernels import (  # noqa: F401
    FILL_ALTERNATE,
    FILL_ROTATE,
    FILL_VALUE_FROM_SRC,
    SLOT_BYTES,
    check_kernel,
    check_rotating,
    final_byte,
)

SEED = "000"

# Kernel short names (the `kernel` parameter) -> table row and required ISA.
KERNELS = {
    "scalar4": ("fill_scalar4", ""),
    "scalar8": ("fill_scalar8", ""),
    "sse": ("fill_sse", "sse2"),
    "avx2": ("fill_avx2", "avx2"),
    "avx512": ("fill_avx512", "avx512f"),
    "rep_stosb": ("fill_rep_stosb", ""),
    "memset": ("fill_memset", ""),
    "nt_movnti": ("fill_nt_movnti", "sse2"),
    "nt_sse": ("fill_nt_sse", "sse2"),
}
# The kernel the per-level verdicts are about: seed 000 used AVX2 stores;
# the first of these that was measured is chosen.
PRIMARY_ORDER = ("avx2", "avx512", "sse", "scalar8", "rep_stosb", "memset", "scalar4",
                 "nt_sse", "nt_movnti")

VALUES = ("zero", "one", "ones", "random", "zero_volatile", "one_zero")
ZERO_ARMS = ("zero", "zero_volatile")
NONZERO_ARMS = ("one", "ones", "random")

# One kernel call fills the whole region, as a program's memset does (issue
# 16).  Filling large regions in 1 MiB calls (a cursor sweeping the region,
# kernels/fill.c's rotating mode, kept as the `chunk` parameter) measured a
# different thing: libc memset and rep stosb pick their strategy from the
# length of ONE call (glibc's non_temporal_threshold; the CPU's fast-string
# microcode for long rep stosb), so 1 MiB calls never reached the streaming
# path a single large call takes -- memfx reported 35.2 / 31.9 GB/s for
# memset at 64 MiB / 1 GiB where tinymembench measured 43.8 / 41.2.
DEFAULT_CHUNK = 0        # the `chunk` parameter: 0 = one call per fill
# Warm-up of small regions: enough fills to write this many bytes.
WARM_BYTES = 8 << 20
# what the argument carries in the zero_volatile arm: deliberately not zero,
# so a kernel that ignored the volatile word would fail verification
VOLATILE_DECOY = 0x5A

# Seed 000's effect: zeros ~17-18% faster beyond L2 on Skylake client.
SEED_EFFECT = 1.17
# Region size anchors: a point at each of these factors of every cache size.
ANCHOR_FACTORS = (0.5, 2.0)
# Rough single-core fill bandwidth used only for run-time estimates (bytes/s).
_EST_BANDWIDTH = 8e9

# ---- L2 eviction counters (seed 000, Fig. 2) ---------------------------------
#
# Raw encodings differ per generation (e.g. L2_LINES_OUT is event 0x26 on
# Sapphire Rapids / Granite Rapids per Intel's perfmon files), so memfx only
# uses encodings it has a source for, chosen by CPU model, and says so.
# Source: Intel perfmon, SKL/events/skylake_core.json, which mapfile.csv
# assigns to GenuineIntel-6-4E, -5E, -8E, -9E, -A5, -A6 (Skylake, Kaby Lake,
# Coffee Lake, Comet Lake client); the same in Linux
# tools/perf/pmu-events/arch/x86/skylake/cache.json:
#   L2_LINES_OUT.SILENT      EventCode 0xF2 UMask 0x1
#   L2_LINES_OUT.NON_SILENT  EventCode 0xF2 UMask 0x2
# perf raw config for Intel core events: event in bits 0-7, umask in 8-15.
PERF_TYPE_RAW = 4
_SKL_CLIENT = {"l2_lines_out_silent": 0x01F2, "l2_lines_out_non_silent": 0x02F2}
L2_EVICTION_EVENTS = {("GenuineIntel", 6, m): _SKL_CLIENT
                      for m in (0x4E, 0x5E, 0x8E, 0x9E, 0xA5, 0xA6)}
L2_EVENT_SOURCE = ("Intel perfmon SKL/events/skylake_core.json (mapfile.csv: family 6 models "
                   "4E/5E/8E/9E/A5/A6): L2_LINES_OUT.SILENT event 0xF2 umask 0x1, "
                   "L2_LINES_OUT.NON_SILENT event 0xF2 umask 0x2")


def l2_eviction_events(vendor, family, model):
    """(events {name: raw config}, note) for this CPU, or (None, why not).
    Unknown models get None: memfx never guesses an encoding."""
    key = (vendor, family, model)
    if key in L2_EVICTION_EVENTS:
        return dict(L2_EVICTION_EVENTS[key]), f"encodings from {L2_EVENT_SOURCE}"
    m = f"{model:#x}" if isinstance(model, int) else str(model)
    return None, (f"no L2_LINES_OUT encodings in memfx's table for {vendor} family {family} "
                  f"model {m}; not guessing (they differ between generations)")


def attach_l2_events(lab, identity=None):
    """Add the L2 eviction events to the worker's hardware counter group
    (Lab.perf.add_raw_event) so every sample carries them.  Returns a status
    dict (never raises): counting, no_pmu, unknown_model or open_failed."""
    from ...lab.machine import cpu_identity
    vendor, family, model = identity or cpu_identity(lab.cpuid)
    events, note = l2_eviction_events(vendor, family, model)
    if events is None:
        return {"status": "unknown_model", "note": note}
    if not lab.perf.has_hardware:
        return {"status": "no_pmu", "note": lab.perf.notes.get("hw", "no hardware counter group")}
    notes = [lab.perf.add_raw_event(name, config, PERF_TYPE_RAW) for name, config in events.items()]
    failed = [n for n in notes if n.startswith("not available")]
    if failed:
        return {"status": "open_failed", "note": "; ".join(failed)}
    return {"status": "counting", "note": note, "events": {n: hex(c) for n, c in events.items()}}


# ---- values --------------------------------------------------------------------

def random_byte(seed):
    """The `random` arm's fill byte: drawn from the run's seed, never 0x00, 0x01 or 0xff."""
    return int(np.random.default_rng([int(seed), 0xF111]).integers(2, 255))


# The value arms in words, for the answers' sentences.
VALUE_WORDS = {"zero": "zero bytes", "one": "0x01 bytes", "ones": "0xFF bytes",
               "random": "a random non-zero byte", "zero_volatile": "zero bytes read through "
               "a volatile pointer", "one_zero": "passes alternating 0x01 and 0x00"}


def value_words(arm):
    """A value arm as words ("one" -> "0x01 bytes")."""
    return VALUE_WORDS.get(arm, f"the {arm} value")


def arm_setup(arm, seed):
    """(value argument, aux, src word) for one value arm."""
    if arm == "zero":
        return 0x00, 0, 0
    if arm == "one":
        return 0x01, 0, 0
    if arm == "ones":
        return 0xFF, 0, 0
    if arm == "random":
        return random_byte(seed), 0, 0
    if arm == "zero_volatile":
        return VOLATILE_DECOY, FILL_VALUE_FROM_SRC, 0x00
    if arm == "one_zero":
        return 0x01, FILL_ALTERNATE | (0x00 << 8), 0
    raise ParamError(f"values: unknown value arm {arm!r}; choose from {', '.join(VALUES)}")


# ---- sizes and cache levels --------------------------------------------------------

def size_grid(lo, hi, points, anchors=(), factors=ANCHOR_FACTORS, sparse_from=0):
    """`points` geometric sizes from lo to hi (none past sparse_from but hi;
    0 = no sparse part), plus anchor*f for every anchor and factor inside
    [lo, hi]; sorted, de-duplicated."""
    points = max(2, int(points))
    sizes = {int(round(lo * (hi / lo) ** (i / (points - 1)))) for i in range(points)}
    if sparse_from:
        sizes = {s for s in sizes if s <= sparse_from} | {int(hi)}
    for a in anchors:
        for f in factors:
            s = int(a * f)
            if lo <= s <= hi:
                sizes.add(s)
    return sorted(sizes)


def primary_kernel(kernels):
    for k in PRIMARY_ORDER:
        if k in kernels:
            return k
    return sorted(kernels)[0] if kernels else None



# ---- the zero effect per kernel family and level -------------------------------------------

# Kernel -> family, for the zero/non-zero table: the store-elimination answer
# must cover every kind of store: the zero effect can differ by store width
# and kind (issue 16; docs/machine-notes.md, "Fill").
FAMILIES = {
    "scalar4": "scalar", "scalar8": "scalar", "sse": "SSE", "avx2": "AVX2",
    "avx512": "AVX-512", "rep_stosb": "rep stosb", "memset": "memset",
    "nt_movnti": "NT", "nt_sse": "NT",
}
# The non-zero arm a ratio is taken against: the first of these measured.
NONZERO_ORDER = ("one", "ones", "random")


RATIO_ESTIMATOR = ("median over the level's sizes of per-size ratios of medians; two-stage "
                   "bootstrap CI (sizes, then samples within each size)")


def kernel_label(k):
    """'AVX2 (avx2)', or just the name where the family is the kernel (memset)."""
    fam = FAMILIES.get(k, k)
    return k if fam.replace(" ", "_").lower() == k else f"{fam} ({k})"


def _kernel_order(k):
    return list(KERNELS).index(k) if k in KERNELS else len(KERNELS)


def _points_by(pts):
    """{(kernel, size, arm): point} of bandwidth points with samples."""
    return {(p["params"]["kernel"], p["params"]["size_bytes"], p["arm"]): p for p in pts}


def ratio_table(data, a_arm, b_arms, kernels=None):
    """Bandwidth of arm `a_arm` over the first measured of `b_arms`, per
    kernel and cache level, as plain data (a pure function of a RunData).

    Every size goes to the smallest reported cache that holds it, DRAM
    beyond the last (`fill_level`); a level's ratio is level_ratio's median
    over its sizes of per-size ratios of medians, with the two-stage
    bootstrap CI.  Returns [{kernel, family, level, ratio, ci_low, ci_high,
    n, sizes, a_arm, b_arm, gbps_a, gbps_b}] in kernel order (KERNELS), then
    level order; n = the smallest per-size sample count of either arm;
    gbps_* = the median over the level's sizes of each arm's point median.
    Kernels or levels without both arms are left out."""
    fp = Fingerprint.of(data.machine)
    vals = {}
    for p in data.points:
        if p.get("metric") == "gb_per_s" and p.get("values"):
            vals[(p["params"]["kernel"], p["params"]["size_bytes"], p["arm"])] = p["values"]
    arms = {a for _, _, a in vals}
    b_arm = next((a for a in b_arms if a in arms), None)
    if a_arm not in arms or b_arm is None:
        return []
    kernels = sorted({k for k, _, _ in vals if kernels is None or k in kernels}, key=_kernel_order)
    sizes = sorted({s for _, s, _ in vals})
    rows = []
    for k in kernels:
        for lv in fill_levels(fp):
            both = [s for s in sizes if fill_level(fp, s) == lv
                    and (k, s, a_arm) in vals and (k, s, b_arm) in vals]
            r = level_ratio([(vals[(k, s, a_arm)], vals[(k, s, b_arm)]) for s in both],
                            min_samples=threshold("min_samples"))
            if r is None:
                continue
            rows.append({"kernel": k, "family": FAMILIES.get(k, k), "level": lv,
                         "ratio": r["ratio"], "ci_low": r["ci_low"], "ci_high": r["ci_high"],
                         "n": min(r["n_a"], r["n_b"]), "sizes": r["sizes"],
                         "a_arm": a_arm, "b_arm": b_arm,
                         "gbps_a": float(np.median([np.median(vals[(k, s, a_arm)]) for s in both])),
                         "gbps_b": float(np.median([np.median(vals[(k, s, b_arm)]) for s in both]))})
    return rows


def zero_ratio_table(data):
    """Zero / non-zero fill bandwidth per kernel and cache level (ratio_table
    of the `zero` arm over the first measured of `one`, `ones`, `random`):
    [{kernel, family, level, ratio, ci_low, ci_high, n, sizes, zero_arm,
    nonzero_arm, gbps_zero, gbps_nonzero}].  The store-elimination answer is
    computed from these rows and nothing else, so the table beside it cannot
    contradict it."""
    out = []
    for r in ratio_table(data, "zero", NONZERO_ORDER):
        r = dict(r)
        r["zero_arm"], r["nonzero_arm"] = r.pop("a_arm"), r.pop("b_arm")
        r["gbps_zero"], r["gbps_nonzero"] = r.pop("gbps_a"), r.pop("gbps_b")
        out.append(r)
    return out


def _row_verdict(r):
    """detected / not_detected / inconclusive of one table row (named
    thresholds effect_min and min_samples)."""
    return effect_verdict(r["ratio"], r["ci_low"], r["ci_high"], r["n"], r["n"])


def _unreached(data, fp, table):
    """not_measured detail rows: every kernel absent from the table (not in
    this run's `kernels`, the CPU lacks its ISA, or no sample survived), so
    the answer names every kernel family, and levels the sweep did not reach
    for the kernels measured."""
    out = []
    done = {(r["kernel"], r["level"]) for r in table}
    measured = list(dict.fromkeys(r["kernel"] for r in table))
    asked = [k for k in (data.params or {}).get("kernels") or [] if k in KERNELS]
    sizes = [p["params"]["size_bytes"] for p in data.points if "size_bytes" in (p.get("params") or {})]
    largest = max(sizes) if sizes else 0
    for k in KERNELS:
        if k not in measured:
            isa = KERNELS[k][1]
            if k not in asked:
                why = f"not in this run's kernels (--set kernels=...,{k})"
            elif isa:
                why = f"needs {isa}, or no zero/non-zero pair of samples survived"
            else:
                why = "no zero/non-zero pair of samples survived"
            out.append(detail(kernel_label(k), kernel=k, family=FAMILIES[k],
                              level=None, value=None, unit="ratio", ci=None,
                              verdict=ans.NOT_MEASURED, reason=why))
    for k in measured:
        for lv in fill_levels(fp):
            if (k, lv) not in done:
                out.append(detail(f"{kernel_label(k)} {lv}", kernel=k,
                                  family=FAMILIES.get(k, k), level=lv, value=None,
                                  unit="ratio", ci=None,
                                  verdict=ans.NOT_MEASURED,
                                  reason=f"the sweep did not reach {lv} (largest region "
                                         f"{format_size(largest)})" if largest else "no sizes"))
    return out


# ---- the experiment ----------------------------------------------------------------------

@register
class Fill(Experiment):
    name = "fill"
    order = 20
    title = "Fill bandwidth by stored value (hardware store elimination)"
    question = ("Does this CPU care about the value it stores: is filling memory with zeros "
                "faster than with ones, and in which cache level?")
    seeds = (SEED,)
    arms = VALUES
    params = [
        Param("kernels", "list:str", list(KERNELS),
              "fill kernels to sweep (skipped where the CPU lacks their ISA)",
              "avx2,rep_stosb", choices=tuple(KERNELS)),
        Param("values", "list:str", list(VALUES),
              "fill values (the arms): zero, one, ones (0xff), random, zero_volatile "
              "(zero re-read through a volatile pointer), one_zero (alternating passes)",
              "zero,one", choices=VALUES),
        Param("min_size", "size", 100, "smallest region, bytes", "1K", minimum=16),
        Param("max_size", "size", "auto",
              "largest region, bytes; auto = 2x the last-level cache, bounded by free memory "
              "(every value arm holds its own region)", "256M"),
        Param("points", "int", 40, "geometric region sizes between min and max (cache anchors added)",
              "12", minimum=2, maximum=400),
        Param("sweep", "str", "grid", "region sizes: grid = `points` geometric sizes plus the "
              "cache anchors (the curves); levels = one declared size per cache level and DRAM "
              "(levels.declared_sizes -- the same cells every run)", "levels",
              choices=("grid", "levels")),
        Param("sparse_from", "size", SPARSE_FROM,
              "with sweep=grid: above this size only the cache anchors (0.5x and 2x each "
              "cache) and max_size, no geometric sizes; 0 = `points` sizes up to max_size, bytes",
              "0", minimum=0),
        Param("chunk", "size", DEFAULT_CHUNK,
              "bytes per kernel call in regions larger than this (a cursor sweeps the region); "
              "0 = one call fills the whole region, as a program's memset does", "1M", minimum=0),
    ]
    presets = {
        # nt_sse: non-temporal fills are where zeros can run several times
        # faster (issue 16), so the quick answer covers them too.
        # 5 samples x 3 replicas (COMMON_PRESETS), not 11 x 2, at one declared
        # size per level: a 17-size grid's extra sizes decide nothing the
        # level cells do not, at most of a replica's time
        # Kernels: the seed's AVX2 fill and memset, and NT; scalar and rep
        # stosb are the full preset's (each 1 GiB DRAM cell costs ~1 s here)
        "quick": {"kernels": "avx2,memset,nt_sse",
                  "values": "zero,one,zero_volatile", "sweep": "levels",
                  "points": 12, "samples": 5, "min_sample_ms": 1.0},
        # 5 samples x 3 replicas as in quick (the replicas make the CI);
        # past sparse_from (64 MiB) the cache anchors and max_size only: the
        # grid's cells between the L3 anchor and DRAM were a third of a full
        # replica (docs/machine-notes.md, "Fill")
        "full": {"points": 16, "samples": 5, "min_sample_ms": 1.0},
    }

    questions = (
        Question("fill.zero_store_elimination", "Does this CPU store zeros faster than other "
                 "values?", "ratio", SEED,
                 "zero / non-zero fill bandwidth for every kernel family (scalar, SSE, AVX2, "
                 "AVX-512, rep stosb, memset, NT) and cache level (zero_ratio_table); detected "
                 "if any cell's CI lies above 1 + effect_min, not detected if every cell's CI "
                 "lies within 1 ± effect_min; value = the cell with the largest ratio",
                 headline=True),
        Question("fill.zero_loaded_from_memory", "Does it matter whether the zero comes from a "
                 "volatile load rather than the argument (no zeroing idiom)?", "ratio", SEED,
                 "zero_volatile / zero bandwidth per level, primary kernel; detected if any "
                 "level's CI lies outside 1 ± effect_min; value = the level furthest from 1"),
        Question("fill.nonzero_values_alike", "Are all non-zero values (0x01, 0xff, a random "
                 "byte) stored at the same speed?", "ratio", SEED,
                 "ones / one and random / one bandwidth per level, primary kernel; detected if "
                 "any differs beyond effect_min; value = the cell furthest from 1"),
        Question("fill.alternating_passes", "Do passes alternating ones and zeros (zeros never "
                 "written over zeros) fill at the speed of ones?", "ratio", SEED,
                 "one_zero / one bandwidth per level, primary kernel; detected if any level "
                 "differs beyond effect_min; value = the level furthest from 1"),
        Question("fill.bandwidth", "What fill bandwidth does each kernel reach per cache level?",
                 "GB/s", SEED, "median GB/s of the best kernel at the largest region measured "
                 "(non-zero value); every kernel and level in details", better=HIGHER,
                 host_shared=True),
        Question("fill.l2_evictions", "Which share of L2 evictions is silent when filling zeros "
                 "beyond L2 (L2_LINES_OUT.SILENT / NON_SILENT)?", "ratio", SEED,
                 "median over zero-arm samples beyond L2 of silent / (silent + non-silent) "
                 "evictions; needs a PMU and known encodings for the CPU model", scale="linear"),
    )
    plots = (
        PlotSpec("avx2", "AVX2 fill bandwidth by stored value", select={"kernel": "avx2"},
                 series=("arm",), size_x=True, xlabel="region size (bytes)",
                 ylabel="fill bandwidth (GB/s)"),
        PlotSpec("string", "rep stosb and libc memset by stored value",
                 select={"kernel": ("rep_stosb", "memset")}, series=("kernel", "arm"),
                 size_x=True, xlabel="region size (bytes)", ylabel="fill bandwidth (GB/s)"),
        PlotSpec("narrow", "scalar and SSE fills by stored value",
                 select={"kernel": ("scalar4", "scalar8", "sse", "avx512")},
                 series=("kernel", "arm"), size_x=True, xlabel="region size (bytes)",
                 ylabel="fill bandwidth (GB/s)"),
        PlotSpec("nt", "non-temporal fills by stored value",
                 select={"kernel": ("nt_movnti", "nt_sse")}, series=("kernel", "arm"),
                 size_x=True, xlabel="region size (bytes)", ylabel="fill bandwidth (GB/s)"),
    )

    # -- plan --
    def max_bytes(self, params, machine):
        avail = (machine.get("memory") or {}).get("available_bytes") or (4 << 30)
        arms = max(1, len(params["values"]))
        fit = int(avail * 0.5 / (arms + 1))          # +1: the volatile arm's value page mapping
        if params["max_size"] != "auto":
            return params["max_size"]
        return min(2 * Fingerprint.of(machine).llc_bytes, fit)

    @staticmethod
    def supported_kernels(names, machine):
        """(kept, skipped) by the ISA each kernel needs: machine flags when the
        fingerprint has them, else the running CPU."""
        flags = machine.get("flags") or {}
        keep, skip = [], []
        for k in names:
            isa = KERNELS[k][1]
            if not isa:
                ok = True
            elif flags:
                ok = bool(flags.get(isa))
            else:
                # no fingerprint flags: keep it; verify() and prepare() ask the
                # lab (the running CPU) and say so if it lacks the ISA
                ok = True
            (keep if ok else skip).append(k)
        return keep, skip

    def plan(self, params, machine):
        lo, hi = params["min_size"], self.max_bytes(params, machine)
        if hi < lo:
            raise ParamError(f"max_size ({format_size(hi)}) is below min_size ({format_size(lo)})")
        kernels, skipped = self.supported_kernels(params["kernels"], machine)
        if not kernels:
            raise ParamError(f"kernels: this CPU supports none of {', '.join(params['kernels'])}")
        values = list(dict.fromkeys(params["values"]))
        avail = (machine.get("memory") or {}).get("available_bytes")
        if avail and hi * (len(values) + 1) > avail * 0.8:
            raise ParamError(f"max_size {format_size(hi)} does not fit: {len(values)} value arms "
                             f"need {format_size(hi * len(values))} and {format_size(avail)} is available")
        anchors = [c.size_bytes for c in Fingerprint.of(machine).caches]
        # sizes outermost: consecutive cells share a size, so each arm's region
        # is mapped and faulted in once per size and keeps its own contents
        if params.get("sweep") == "levels":
            sizes = [s for _, s in declared_sizes(level_caches(machine), lo, hi)] or [lo, hi]
        else:
            sizes = size_grid(lo, hi, params["points"], anchors, sparse_from=params.get(
                "sparse_from") or 0)     # runs stored before it: 0
        # Every kernel gets the zero arm and one non-zero arm (the zero /
        # non-zero table, zero_store_elimination); the other value arms are
        # read with the primary kernel only (zero_loaded_from_memory,
        # nonzero_values_alike, alternating_passes), so only it measures them:
        # zero_volatile with memset and NT was a third of their quick DRAM
        # cells, for nothing.
        nonzero = next((a for a in NONZERO_ORDER if a in values), None)
        primary = primary_kernel(kernels)
        return [Point(arm, {"size_bytes": s, "kernel": k})
                for s in sizes
                for k in kernels
                for arm in values
                if k == primary or arm in ("zero", nonzero)]

    def estimate_seconds(self, params, machine):
        pts = self.plan(params, machine)
        total = 1.0
        for p in pts:
            size = p.params["size_bytes"]
            chunk = params.get("chunk") or 0
            per_call = chunk if chunk and size > chunk else size
            one = max(params["min_sample_ms"] / 1000, per_call / _EST_BANDWIDTH)
            total += one * (params["samples"] + 3) + size / _EST_BANDWIDTH + 0.002
        return total

    # -- one trial --
    def prepare(self, point, params, lab):
        if "fill.pmu" not in lab.cache:            # once per run (per worker)
            lab.cache["fill.pmu"] = attach_l2_events(lab)
        size, kernel = point.params["size_bytes"], point.params["kernel"]
        isa = KERNELS[kernel][1]
        if isa and not lab.isa_supported(isa):
            raise MemfxError(f"kernel {kernel} needs {isa}, which this CPU lacks")
        value, aux, src_word = arm_setup(point.arm, params["seed"])
        # one region per size, kept across its cells and shared by the value
        # arms (room for the rotation slot): every visit of an arm starts with
        # a full sweep (the warm-up below, and _worker.settle's re-warm), which
        # gives the region that arm's value before anything is timed.  A region
        # per arm was three DRAM-sized regions to fault per replica, seconds
        # each (docs/machine-notes.md, "Fill").
        dst = lab.kept_mapping("fill.dst", size, room=SLOT_BYTES)
        src = None
        if aux & FILL_VALUE_FROM_SRC:
            # the pattern word lives in its own mapping; the core checks src
            # spans `size` bytes, so map that much but fault in one page only
            src = lab.kept_mapping(("fill.src", point.arm), size, room=SLOT_BYTES, prefault=False)
            np.frombuffer(src.buffer, dtype=np.uint64, count=1, offset=0)[0] = src_word
        extra = {"fill_byte": final_byte(value, aux, src_word, 1)}
        per_call = size
        chunk = params.get("chunk") or 0
        if chunk and size > chunk:
            # chunks through the region; warm-up = one full sweep (+1 chunk),
            # which also gives the region this arm's value before sampling
            per_call = chunk
            aux |= FILL_ROTATE | (size << 16)
            warm = -(-size // chunk) + 1
            extra["chunk_bytes"] = chunk
        else:
            # one call = one fill of the region; the warm-up (and every
            # re-warm, _worker.settle) is at least one full fill, which also
            # gives the region this arm's value before sampling
            warm = max(1, min(1 << 20, -(-WARM_BYTES // max(size, 1))))
        return Trial(KERNELS[kernel][0], size=per_call, dst=dst, src=src, value=value, aux=aux,
                     metric="bandwidth", difference=False, warmup=warm, extra=extra)

    def verify(self, lab, params):
        """Every planned kernel, byte-exact in C before anything is timed:
        sizes 0..4096 x dst offsets 0..63 with guard bytes on both sides for
        a non-zero and the zero pattern; every value arm (1 and 2 passes) on
        sizes 0..256."""
        rows = lab.kernels
        for k in params["kernels"]:
            row = rows.get(KERNELS[k][0])
            if row is None:
                raise MemfxError(f"no kernel {KERNELS[k][0]!r} in the core")
            if not row.supported:
                continue
            checks = [(random_byte(params["seed"]), 0, 0, 1, 4096), (0, 0, 0, 1, 4096)]
            for arm in params["values"]:
                v, aux, word = arm_setup(arm, params["seed"])
                checks += [(v, aux, word, 1, 256), (v, aux, word, 2, 256)]
            for arm in params["values"]:
                v, aux, word = arm_setup(arm, params["seed"])
                for region, chunk, calls in ((4000, 1000, 9), (3001, 700, 10)):
                    bad = check_rotating(lab, row.name, v, aux, word, region, chunk, calls)
                    if bad:
                        raise MemfxError(f"kernel {row.name} in rotating mode, {arm}: {bad}")
            for v, aux, word, count, max_size in checks:
                bad = lab.fill_check(row.name, v, aux, count, word, final_byte(v, aux, word, count),
                                     max_size, 64)
                if bad:
                    n, off, i, want, got = bad
                    raise MemfxError(f"kernel {row.name} is not byte-exact (value {v:#x}, aux {aux:#x}, "
                                     f"{count} passes): size {n}, dst offset {off}, byte {i}: "
                                     f"expected {want:#04x}, got {got:#04x}")

    # -- analysis --
    def analyze(self, data):
        fp = Fingerprint.of(data.machine)
        pts = [p for p in data.points if p.get("metric") == "gb_per_s" and p.get("values")]
        if not pts:
            return []
        kernels = sorted({p["params"]["kernel"] for p in pts}, key=_kernel_order)
        kp = primary_kernel(kernels)
        return [self._store_elimination(data, fp, pts),
                self._arm_answer("zero_loaded_from_memory", data, kp, "zero_volatile", ("zero",),
                                 "zero re-read through a volatile pointer vs zero from the argument"),
                self._arm_answer("nonzero_values_alike", data, kp, ("ones", "random"), ("one",),
                                 "other non-zero bytes (0xff, a random byte) vs 0x01"),
                self._arm_answer("alternating_passes", data, kp, "one_zero", ("one",),
                                 "passes alternating 0x01 and 0x00 vs 0x01 only"),
                self._bandwidth(data, fp, pts, kernels),
                self._counters_answer(data, fp, kp)]

    def _store_elimination(self, data, fp, pts):
        q = self.declared("zero_store_elimination")
        table = zero_ratio_table(data)
        if not table:
            return ans.not_measured(q, "needs the zero arm and a non-zero arm (one, ones or random) "
                                       "of the same kernel and size")
        by = _points_by(pts)
        details = []
        for r in table:
            keys = [ans.point_key(p) for (k, s, a), p in by.items()
                    if k == r["kernel"] and a in (r["zero_arm"], r["nonzero_arm"])
                    and fill_level(fp, s) == r["level"]]
            details.append(detail(f"{kernel_label(r['kernel'])} {r['level']}", value=r["ratio"],
                                  unit="ratio", ci_low=r["ci_low"], ci_high=r["ci_high"],
                                  verdict=_row_verdict(r), kernel=r["kernel"], family=r["family"],
                                  level=r["level"], n=r["n"], sizes=r["sizes"],
                                  gbps_zero=r["gbps_zero"], gbps_nonzero=r["gbps_nonzero"],
                                  nonzero_arm=r["nonzero_arm"], points=keys))
        details += _unreached(data, fp, table)
        measured_rows = [d for d in details if d["verdict"] != ans.NOT_MEASURED]
        faster = [d for d in measured_rows if d["verdict"] == DETECTED and d["value"] > 1]
        if faster:
            verdict = DETECTED
        elif all(d["verdict"] == NOT_DETECTED for d in measured_rows):
            verdict = NOT_DETECTED
        else:
            verdict = INCONCLUSIVE
        top = max(faster or measured_rows, key=lambda d: d["value"])
        nz = top["nonzero_arm"]
        outer = [d for d in measured_rows if d["level"] not in ("L1d", "L1", "L2", "all")]
        excluded = bool(outer) and all(d["ci_high"] < SEED_EFFECT for d in outer)
        if faster:
            cells = sorted(faster, key=lambda d: -d["value"])
            shown = "; ".join(f"{kernel_label(d['kernel'])} in {d['level']} {d['value']:.2f}x "
                              f"[{d['ci_low']:.2f}, {d['ci_high']:.2f}]" for d in cells[:4])
            more = f" and {len(cells) - 4} more cells" if len(cells) > 4 else ""
            quiet = sum(d["verdict"] == NOT_DETECTED for d in measured_rows)
            unsure = len(measured_rows) - len(cells) - quiet
            others = ([f"{quiet} within ±{threshold('effect_min'):.0%}"] if quiet else []) \
                + ([f"{unsure} inconclusive"] if unsure else [])
            because = (f"Zero bytes are stored faster than {value_words(nz)}: {shown}{more}"
                       + (f"; other kernel/level cells: {', '.join(others)}" if others else ""))
        else:
            lo = min(d["value"] for d in measured_rows)
            hi = max(d["value"] for d in measured_rows)
            levels = [lv for lv in fill_levels(fp) if any(d["level"] == lv for d in measured_rows)]
            fams = list(dict.fromkeys(d["family"] for d in measured_rows))
            span = f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}x"
            because = (f"Filling with zero bytes runs at {span} the bandwidth of filling with "
                       f"{value_words(nz)} in {levels[0]}..{levels[-1]} "
                       f"({', '.join(fams)})")
            if verdict == INCONCLUSIVE:     # why: the cell that decides nothing, and its CI
                d = max((d for d in measured_rows if d["verdict"] == INCONCLUSIVE),
                        key=lambda d: d["value"], default=top)
                e, few = threshold("effect_min"), threshold("min_samples")
                because += (f"; inconclusive: {kernel_label(d['kernel'])} in {d['level']} "
                            f"{d['value']:.2f}x [{d['ci_low']:.2f}, {d['ci_high']:.2f}] "
                            + (f"rests on {d['n']} samples (min_samples {few})" if d["n"] < few
                               else f"reaches across the edge of the no-effect band "
                                    f"{1 - e:.2f}-{1 + e:.2f}"))
            if excluded:
                because += f"; seed 000's {SEED_EFFECT - 1:.0%} excluded beyond L2"
        missing = [d for d in details if d["verdict"] == ans.NOT_MEASURED]
        if missing:
            kinds = sorted({d["kernel"] for d in missing if d["level"] is None}, key=_kernel_order)
            cells = sum(d["level"] is not None for d in missing)
            because += " (not measured: " + "; ".join(
                ([f"kernels {', '.join(kinds)}"] if kinds else [])
                + ([f"{cells} levels the sweep did not reach"] if cells else [])) + ")"
        return ans.Answer(question=q.id, verdict=verdict, because=because, value=top["value"],
                          ci_low=top["ci_low"], ci_high=top["ci_high"], evidence=top["points"],
                          details=details, estimator=RATIO_ESTIMATOR)

    def _arm_answer(self, name, data, kernel, a_arms, b_arms, what):
        """a/b bandwidth per level for one kernel: detected when any level differs."""
        q = self.declared(name)
        a_arms = (a_arms,) if isinstance(a_arms, str) else tuple(a_arms)
        rows = [r for a in a_arms for r in ratio_table(data, a, b_arms, kernels=(kernel,))]
        if not rows:
            return ans.not_measured(q, f"needs the value arm {' or '.join(a_arms)} and "
                                       f"{' or '.join(b_arms)} (--set values=...)")
        details = [detail(f"{r['a_arm']}/{r['b_arm']} {r['kernel']} {r['level']}",
                          value=r["ratio"], unit="ratio", ci_low=r["ci_low"],
                          ci_high=r["ci_high"], verdict=_row_verdict(r), kernel=r["kernel"],
                          level=r["level"], arms=[r["a_arm"], r["b_arm"]], n=r["n"],
                          sizes=r["sizes"]) for r in rows]
        differs = [d for d in details if d["verdict"] == DETECTED]
        if differs:
            verdict = DETECTED
        elif all(d["verdict"] == NOT_DETECTED for d in details):
            verdict = NOT_DETECTED
        else:
            verdict = INCONCLUSIVE
        top = max(differs or details, key=lambda d: abs(math.log(d["value"])))
        lo, hi = min(d["value"] for d in details), max(d["value"] for d in details)
        span = f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}x"
        levels = list(dict.fromkeys(d["level"] for d in details))
        because = f"{what}: {span} in {levels[0]}..{levels[-1]} ({kernel})"
        if differs:
            because += "; differs in " + ", ".join(f"{d['level']} {d['value']:.2f}x" for d in differs)
        elif verdict == NOT_DETECTED:
            because += f", within ±{threshold('effect_min'):.0%} everywhere"
        return ans.Answer(question=q.id, verdict=verdict, because=because, value=top["value"],
                          ci_low=top["ci_low"], ci_high=top["ci_high"], details=details,
                          evidence=[f"kernel={kernel}", f"level={top['level']}"],
                          estimator=RATIO_ESTIMATOR)

    def _bandwidth(self, data, fp, pts, kernels):
        """Median fill bandwidth of a non-zero value per kernel and level."""
        q = self.declared("bandwidth")
        arms = {p["arm"] for p in pts}
        arm = next((a for a in NONZERO_ORDER if a in arms), None) or sorted(arms)[0]
        mine = [p for p in pts if p["arm"] == arm]
        details = []
        for k in kernels:
            for lv in fill_levels(fp):
                ps = [p for p in mine if p["params"]["kernel"] == k
                      and fill_level(fp, p["params"]["size_bytes"]) == lv]
                if ps:
                    details.append(detail(f"{k} {lv}", kernel=k, level=lv,
                                          value=float(np.median([p["median"] for p in ps])),
                                          unit="GB/s", sizes=len(ps), arm=arm,
                                          points=ans.evidence_keys(ps)))
        largest = max(p["params"]["size_bytes"] for p in mine)
        at = [p for p in mine if p["params"]["size_bytes"] == largest]
        best = max(at, key=lambda p: p["median"])
        a = ans.measured(q, best["values"], "", evidence=[ans.point_key(best)], details=details,
                         estimator="median of samples, largest region measured")
        a.because = (f"{best['params']['kernel']} fills {format_size(largest)} with "
                     f"{value_words(arm)} at "
                     f"{a.value:.1f} GB/s ({fill_level(fp, largest)}); every kernel and level "
                     f"in details")
        return a

    def _counters_answer(self, data, fp, kp):
        """L2 silent/non-silent evictions per line written, or why they cannot be read."""
        q = self.declared("l2_evictions")
        cpu = data.machine.get("cpu") or {}
        pmu = data.machine.get("pmu") or {}
        events, note = l2_eviction_events(cpu.get("vendor"), cpu.get("family"), cpu.get("model"))
        line = data.machine.get("line_bytes") or 64
        per = {}
        for s in data.samples:
            c = s.get("counters") or {}
            if "l2_lines_out_silent" not in c or s.get("point", {}).get("kernel") != kp:
                continue
            size = s["point"]["size_bytes"]
            lines = (c.get("chunk_bytes") or size) * s["length"] / line
            d = per.setdefault((fill_level(fp, size), s["arm"]), {"silent": [], "non_silent": []})
            d["silent"].append(c["l2_lines_out_silent"] / lines)
            d["non_silent"].append(c.get("l2_lines_out_non_silent", 0) / lines)
        if not per:
            if pmu.get("available") is False:
                why = f"no hardware PMU ({pmu.get('reason')})"
            elif events is None:
                why = note
            else:
                why = "the L2_LINES_OUT events could not be opened"
            return ans.not_measured(q, f"L2_LINES_OUT.SILENT / NON_SILENT cannot be counted here: "
                                       f"{why}; the store-elimination verdict rests on timing alone")
        details = [detail(f"{lv} {arm}", level=lv, arm=arm,
                          value=float(np.median(d["silent"])), unit="silent evictions/line",
                          non_silent_per_line=float(np.median(d["non_silent"])))
                   for (lv, arm), d in sorted(per.items())]
        beyond = [lv for lv in fill_levels(fp) if lv not in ("L1d", "L1", "L2")]
        shares = [si / (si + ns) for (lv, arm), d in per.items() if arm == "zero" and lv in beyond
                  for si, ns in zip(d["silent"], d["non_silent"]) if si + ns > 0]
        if not shares:
            return ans.not_measured(q, "no zero-arm sample beyond L2 carried the L2 eviction counts")
        return ans.measured(q, shares, f"filling zeros beyond L2 ({kp}), "
                            f"{float(np.median(shares)):.0%} of L2 evictions are silent "
                            f"(events: {note})", details=details,
                            estimator="median over samples of silent / (silent + non-silent)")


