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

A second experiment, `fill_alloc` (the package fill_alloc), times calloc vs
malloc+memset vs mmap first touch on fresh and recycled memory with page
faults counted (the seed's footnote: calloc can skip zeroing memory it knows
is fresh).  The kernel checks are in kernels.py; the answers, the cache
levels and the level ratio in analysis.py (both re-exported here).
"""
from __future__ import annotations

import numpy as np

from ...model.answers import HIGHER, Question
from ...model.errors import MemfxError, ParamError
from ...model.machine_view import Fingerprint
from ...model.plotspec import PlotSpec
from ...model.units import format_size
from .._sweep import SPARSE_FROM
from ..base import Experiment, Param, Point, Trial, register
from ..levels import data_caches as level_caches
from ..levels import declared_sizes
from .analysis import (  # noqa: F401
    _SKL_CLIENT,
    ALL_SIZES,
    FAMILIES,
    KERNELS,
    L2_EVENT_SOURCE,
    L2_EVICTION_EVENTS,
    NONZERO_ORDER,
    PRIMARY_ORDER,
    RATIO_ESTIMATOR,
    SEED_EFFECT,
    VALUE_WORDS,
    FillAnswers,
    _kernel_order,
    _points_by,
    _row_verdict,
    _unreached,
    fill_level,
    fill_levels,
    kernel_label,
    l2_eviction_events,
    level_ratio,
    primary_kernel,
    ratio_table,
    ratio_verdict,
    value_words,
    zero_ratio_table,
)
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


VALUES = ("zero", "one", "ones", "random", "zero_volatile", "one_zero")
ZERO_ARMS = ("zero", "zero_volatile")
NONZERO_ARMS = ("one", "ones", "random")

# One kernel call fills the whole region, as a program's memset does (issue
# 16).  Filling large regions in 1 MiB calls (a cursor sweeping the region,
# kernels/fill.c's rotating mode, kept as the `chunk` parameter) measured a
# different thing: libc memset and rep stosb pick their strategy from the
# length of ONE call (glibc's non_temporal_threshold; the CPU's fast-string
# microcode for long rep stosb), so 1 MiB calls never reached the streaming
# path a single large call takes (and read well below tinymembench's
# memset: docs/machine-notes.md, "Fill").
DEFAULT_CHUNK = 0        # the `chunk` parameter: 0 = one call per fill
# Warm-up of small regions: enough fills to write this many bytes.
WARM_BYTES = 8 << 20
# what the argument carries in the zero_volatile arm: deliberately not zero,
# so a kernel that ignored the volatile word would fail verification
VOLATILE_DECOY = 0x5A

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


# ---- the zero effect per kernel family and level -------------------------------------------


# ---- the experiment ----------------------------------------------------------------------

@register
class Fill(FillAnswers, Experiment):
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


