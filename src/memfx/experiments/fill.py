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

Analysis: per cache level (each size is assigned to the smallest reported
cache that holds it, DRAM beyond the last) the zero/one bandwidth ratio as a
geometric mean over the level's sizes, with a bootstrap CI that resamples
within each size, and a verdict by the named thresholds effect_min and
min_samples.  Where a PMU exists and memfx knows the CPU model's encodings
it also counts L2_LINES_OUT.SILENT / NON_SILENT per line written; elsewhere
it says that the mechanism cannot be observed and the verdict is timing only.

A second experiment here, `fill_alloc`, times calloc vs malloc+memset vs mmap
first touch on fresh and recycled memory with page faults counted (the
seed's footnote: calloc can skip zeroing memory it knows is fresh).
"""
from __future__ import annotations

import math
import mmap

import numpy as np

from ..errors import MemfxError, ParamError
from ..findings import (DETECTED, INCONCLUSIVE, MEASURED, NOT_DETECTED, Finding,
                        effect_verdict, threshold)
from ..units import format_size
from .base import Experiment, Param, Point, Region, Trial, register

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

# aux bits understood by the fill kernels (kernels/fill.c)
FILL_VALUE_FROM_SRC = 1
FILL_ALTERNATE = 2
FILL_ROTATE = 4          # aux >> 16 = region bytes; size = bytes per call (a chunk)
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
SLOT_BYTES = 128         # cursor slot past a rotating region (64-byte aligned)
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


def cpu_identity(cpuid):
    """(vendor, display family, display model) from a cpuid(leaf, sub) function
    (Intel SDM Vol. 2A, CPUID leaf 01H: extended family/model rules)."""
    _, b, c, d = cpuid(0)
    vendor = b.to_bytes(4, "little") + d.to_bytes(4, "little") + c.to_bytes(4, "little")
    eax = cpuid(1)[0]
    base_family, base_model = (eax >> 8) & 0xF, (eax >> 4) & 0xF
    family = base_family + ((eax >> 20) & 0xFF if base_family == 0xF else 0)
    model = base_model | (((eax >> 16) & 0xF) << 4 if base_family in (6, 0xF) else 0)
    return vendor.decode("ascii", "replace"), family, model


def attach_l2_events(lab, identity=None):
    """Add the L2 eviction events to the worker's hardware counter group
    (Lab.perf.add_raw_event) so every sample carries them.  Returns a status
    dict (never raises): counting, no_pmu, unknown_model or open_failed."""
    from .. import _core
    vendor, family, model = identity or cpu_identity(_core.cpuid)
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


def final_byte(value, aux, src_word, count):
    """The byte every position holds after `count` >= 1 passes (the value semantic)."""
    if aux & FILL_ALTERNATE and count % 2 == 0:
        return (aux >> 8) & 0xFF
    if aux & FILL_VALUE_FROM_SRC:
        return src_word & 0xFF
    return value & 0xFF


def check_rotating(row_index, value, aux, src_word, region, chunk, calls):
    """Rotating mode through run(): `calls` chunks of `chunk` bytes over a
    `region`-byte area (at offset 5 in a guarded buffer).  Returns None when
    the bytes are what the value semantic says, else a message."""
    from .. import _core
    off, guard = 5, 0xA5
    buf = bytearray(64 + max(region, chunk) + SLOT_BYTES + 64)
    buf[:] = bytes([guard]) * len(buf)
    base = _core.address(buf)
    slot = ((base + off + region + 63) & ~63) - base
    buf[slot:slot + 16] = bytes(16)
    rot = aux | FILL_ROTATE | (region << 16)
    src = None
    if aux & FILL_VALUE_FROM_SRC:
        src = bytearray(max(8, chunk))
        src[:8] = int(src_word).to_bytes(8, "little")
    for _ in range(calls):
        _core.run(row_index, buf, off, src, 0, chunk, value, 1, rot)
    done = calls * chunk
    sweeps, cur = divmod(done, region)
    # bytes [0, cur) were last written in sweep `sweeps`, [cur, region) in sweep - 1
    want_new = final_byte(value, aux, src_word, sweeps + 1)
    want_old = final_byte(value, aux, src_word, sweeps) if sweeps else guard
    got = memoryview(buf)
    for lo, hi, want in ((0, off, guard), (off, off + cur, want_new), (off + cur, off + region, want_old),
                         (off + region, slot, guard), (slot + 16, len(buf), guard)):
        if bytes(got[lo:hi]) != bytes([want]) * (hi - lo):
            bad = next(i for i in range(lo, hi) if buf[i] != want)
            return f"byte {bad - off} (region {region}, chunk {chunk}, {calls} calls): " \
                   f"expected {want:#04x}, got {buf[bad]:#04x}"
    return None


def check_kernel(row_index, value, aux, src_word, count=1, max_size=4096, max_offset=64):
    """Byte-exact check in C (see _core.fill_check); None or a failure tuple."""
    from .. import _core
    return _core.fill_check(row_index, value, aux, count, src_word,
                            final_byte(value, aux, src_word, count), max_size, max_offset)


# ---- sizes and cache levels --------------------------------------------------------

def data_caches(machine):
    """[(label, size_bytes)] of the data/unified caches by level, one per level."""
    out = {}
    for c in machine.get("caches", []) or []:
        if c.get("type") not in ("Data", "Unified") or not c.get("size_bytes") or c.get("level") is None:
            continue
        lv = int(c["level"])
        out.setdefault(lv, (f"L{lv}" + ("d" if c["type"] == "Data" else ""), int(c["size_bytes"])))
    return [out[k] for k in sorted(out)]


def level_of(size, caches):
    """The level a region of `size` bytes lives in: the smallest reported cache
    that holds it, 'DRAM' beyond the last, 'all' when no cache is known."""
    if not caches:
        return "all"
    for label, cap in caches:
        if size <= cap:
            return label
    return "DRAM"


def level_names(caches):
    return [c[0] for c in caches] + ["DRAM"] if caches else ["all"]


def size_grid(lo, hi, points, anchors=(), factors=ANCHOR_FACTORS):
    """`points` geometric sizes from lo to hi, plus anchor*f for every anchor
    and factor inside [lo, hi]; sorted, de-duplicated."""
    points = max(2, int(points))
    sizes = {int(round(lo * (hi / lo) ** (i / (points - 1)))) for i in range(points)}
    for a in anchors:
        for f in factors:
            s = int(a * f)
            if lo <= s <= hi:
                sizes.add(s)
    return sorted(sizes)


# ---- statistics -----------------------------------------------------------------------

def level_ratio(pairs, confidence=None, n_boot=2000, seed=0, min_samples=None):
    """Ratio of two arms over several sizes: the median over sizes of the
    per-size ratios of medians, median(a_s)/median(b_s), with a two-stage
    percentile bootstrap CI: sizes are resampled with replacement, and each
    arm's samples within each size.  The first stage carries the size-to-size
    scatter of the ratio: each size has its own buffers, and in a VM a
    buffer can be slowed for seconds by the host whatever value it holds
    (seen here: one 4 MiB buffer at a quarter of its neighbours' speed), so
    placement effects differ between sizes but not between the samples of
    one size.  The median keeps one disturbed size from moving the estimate;
    working on per-size ratios keeps the spread of bandwidth across sizes out.

    pairs: [(a_values, b_values)] per size.  With min_samples, sizes where an
    arm has fewer samples are left out as long as another size has enough
    (they are counted in "dropped"); otherwise all sizes are used and the
    small n makes the verdict inconclusive.  Returns None when no size has
    samples in both arms, else {ratio, ci_low, ci_high, sizes, dropped, n_a,
    n_b} with n_a / n_b the smallest per-size sample counts (what the
    min_samples threshold of the verdict applies to)."""
    conf = threshold("ci_level") if confidence is None else confidence
    clean = []
    for a, b in pairs:
        a = np.asarray(a, float)
        b = np.asarray(b, float)
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        if a.size and b.size and np.median(a) > 0 and np.median(b) > 0:
            clean.append((a, b))
    if not clean:
        return None
    chosen = clean
    if min_samples:
        chosen = [(a, b) for a, b in clean if min(a.size, b.size) >= min_samples] or clean
    rng = np.random.default_rng(seed)
    nb = int(n_boot)
    logs, within = [], []
    for a, b in chosen:
        logs.append(math.log(float(np.median(a)) / float(np.median(b))))
        ba = np.median(a[rng.integers(0, a.size, (nb, a.size))], axis=1)
        bb = np.median(b[rng.integers(0, b.size, (nb, b.size))], axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            within.append(np.log(ba / bb))
    k = len(logs)
    within = np.array(within)                       # (sizes, n_boot)
    pick = rng.integers(0, k, (nb, k))              # stage 1: sizes with replacement
    boot = np.exp(np.median(within[pick, np.arange(nb)[:, None]], axis=1))
    boot = boot[np.isfinite(boot)]
    lo, hi = np.quantile(boot, [(1 - conf) / 2, 1 - (1 - conf) / 2]) if boot.size else (math.nan,) * 2
    return {"ratio": math.exp(float(np.median(logs))), "ci_low": float(lo), "ci_high": float(hi),
            "sizes": k, "dropped": len(clean) - k,
            "n_a": min(a.size for a, _ in chosen), "n_b": min(b.size for _, b in chosen)}


def ratio_verdict(r):
    """detected / not_detected / inconclusive for a level_ratio result, by the
    named thresholds effect_min and min_samples (findings.effect_verdict)."""
    if r is None:
        return INCONCLUSIVE
    return effect_verdict(r["ratio"], r["ci_low"], r["ci_high"], r["n_a"], r["n_b"])


def primary_kernel(kernels):
    for k in PRIMARY_ORDER:
        if k in kernels:
            return k
    return sorted(kernels)[0] if kernels else None


def _fmt_ratio(r):
    return f"{r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"


# ---- the zero effect per kernel family and level -------------------------------------------

# Kernel -> family, for the zero/non-zero table: the store-elimination answer
# must cover every kind of store (issue 16: beyond L3 on a Zen 5 guest, AVX2
# and AVX-512 fills of zeros were 1.08-1.17x faster while 4-byte scalar fills
# showed nothing, and non-temporal fills of zeros ran 2-3x faster).
FAMILIES = {
    "scalar4": "scalar", "scalar8": "scalar", "sse": "SSE", "avx2": "AVX2",
    "avx512": "AVX-512", "rep_stosb": "rep stosb", "memset": "memset",
    "nt_movnti": "NT", "nt_sse": "NT",
}
# The non-zero arm a ratio is taken against: the first of these measured.
NONZERO_ORDER = ("one", "ones", "random")


def zero_ratio_table(data):
    """Zero / non-zero fill bandwidth per kernel and cache level, as plain data.

    A pure function of a RunData: for every measured kernel and level (each
    size in the smallest reported cache that holds it, DRAM beyond the last;
    `level_of`), the ratio of the `zero` arm's bandwidth to the first
    measured of `one`, `ones`, `random` (level_ratio: median over the
    level's sizes of per-size ratios of medians, two-stage bootstrap CI).
    Returns [{kernel, family, level, ratio, ci_low, ci_high, n, sizes,
    zero_arm, nonzero_arm}] in kernel order (KERNELS), then level order;
    n = the smallest per-size sample count of either arm.  Kernels or levels
    without both arms are left out."""
    caches = data_caches(data.machine)
    vals = {}
    for p in data.points:
        if p.get("metric") == "gb_per_s" and p.get("values"):
            vals[(p["params"]["kernel"], p["params"]["size_bytes"], p["arm"])] = p["values"]
    arms = {a for _, _, a in vals}
    nonzero = next((a for a in NONZERO_ORDER if a in arms), None)
    if "zero" not in arms or nonzero is None:
        return []
    kernels = sorted({k for k, _, _ in vals},
                     key=lambda k: list(KERNELS).index(k) if k in KERNELS else len(KERNELS))
    sizes = sorted({s for _, s, _ in vals})
    rows = []
    for k in kernels:
        for lv in level_names(caches):
            pairs = [(vals[(k, s, "zero")], vals[(k, s, nonzero)]) for s in sizes
                     if level_of(s, caches) == lv and (k, s, "zero") in vals and (k, s, nonzero) in vals]
            r = level_ratio(pairs, min_samples=threshold("min_samples"))
            if r is None:
                continue
            rows.append({"kernel": k, "family": FAMILIES.get(k, k), "level": lv,
                         "ratio": r["ratio"], "ci_low": r["ci_low"], "ci_high": r["ci_high"],
                         "n": min(r["n_a"], r["n_b"]), "sizes": r["sizes"],
                         "zero_arm": "zero", "nonzero_arm": nonzero})
    return rows


# ---- the experiment ----------------------------------------------------------------------

@register
class Fill(Experiment):
    name = "fill"
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
        Param("chunk", "size", DEFAULT_CHUNK,
              "bytes per kernel call in regions larger than this (a cursor sweeps the region); "
              "0 = one call fills the whole region, as a program's memset does", "1M", minimum=0),
    ]
    presets = {
        "quick": {"kernels": "avx2,rep_stosb,memset,scalar8", "values": "zero,one,zero_volatile",
                  "points": 12, "samples": 15, "min_sample_ms": 1.0},
        "full": {"points": 40, "samples": 11, "min_sample_ms": 1.0},
    }

    def __init__(self):
        self._buffers = {}     # arm -> (size, mmap, Region); lives in the worker
        self._pmu = None

    # -- plan --
    def max_bytes(self, params, machine):
        caches = data_caches(machine)
        avail = (machine.get("memory") or {}).get("available_bytes") or (4 << 30)
        arms = max(1, len(params["values"]))
        fit = int(avail * 0.5 / (arms + 1))          # +1: the volatile arm's value page mapping
        if params["max_size"] != "auto":
            return params["max_size"]
        llc = caches[-1][1] if caches else 32 << 20
        return min(2 * llc, fit)

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
                from .. import _core
                ok = bool(_core.isa_supported(isa))
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
        anchors = [c[1] for c in data_caches(machine)]
        # sizes outermost: consecutive cells share a size, so each arm's region
        # is mapped and faulted in once per size and keeps its own contents
        return [Point(arm, {"size_bytes": s, "kernel": k})
                for s in size_grid(lo, hi, params["points"], anchors)
                for k in kernels
                for arm in values]

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

    # -- buffers, kept across the cells of one size --
    def _region(self, key, size, prefault=True):
        from .. import _core
        from .._lab import PAGE, check_fits
        got = self._buffers.get(key)
        if got and got[0] == size:
            return got[2]
        for k in [k for k, v in self._buffers.items() if v[0] != size]:
            try:
                self._buffers.pop(k)[1].close()
            except BufferError:
                pass
        check_fits(size)
        length = (size + SLOT_BYTES + PAGE - 1) // PAGE * PAGE   # room for the rotation slot
        try:
            m = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except OSError as e:
            raise MemfxError(f"cannot map {format_size(length)}: {e.strerror}") from None
        if prefault:
            _core.touch(m, 0, length, PAGE)
        region = Region(m, 0, size, _core.address(m))   # page-aligned
        self._buffers[key] = (size, m, region)
        return region

    # -- one trial --
    def prepare(self, point, params, lab):
        if self._pmu is None:
            self._pmu = attach_l2_events(lab)
        size, kernel = point.params["size_bytes"], point.params["kernel"]
        value, aux, src_word = arm_setup(point.arm, params["seed"])
        dst = self._region(("dst", point.arm), size)
        src = None
        if aux & FILL_VALUE_FROM_SRC:
            # the pattern word lives in its own mapping; the core checks src
            # spans `size` bytes, so map that much but fault in one page only
            src = self._region(("src", point.arm), size, prefault=False)
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
                    bad = check_rotating(row.index, v, aux, word, region, chunk, calls)
                    if bad:
                        raise MemfxError(f"kernel {row.name} in rotating mode, {arm}: {bad}")
            for v, aux, word, count, max_size in checks:
                bad = check_kernel(row.index, v, aux, word, count, max_size)
                if bad:
                    n, off, i, want, got = bad
                    raise MemfxError(f"kernel {row.name} is not byte-exact (value {v:#x}, aux {aux:#x}, "
                                     f"{count} passes): size {n}, dst offset {off}, byte {i}: "
                                     f"expected {want:#04x}, got {got:#04x}")

    # -- analysis --
    def analyze(self, data):
        caches = data_caches(data.machine)
        pts = [p for p in data.points if p.get("metric") == "gb_per_s" and p.get("values")]
        if not pts:
            return []
        vals = {}
        for p in pts:
            vals[(p["params"]["kernel"], p["params"]["size_bytes"], p["arm"])] = p["values"]
        kernels = sorted({k for k, _, _ in vals}, key=lambda k: list(KERNELS).index(k)
                         if k in KERNELS else 99)
        sizes = sorted({s for _, s, _ in vals})
        kp = primary_kernel(kernels)
        levels = [lv for lv in level_names(caches) if any(level_of(s, caches) == lv for s in sizes)]
        beyond_l2 = [lv for lv in levels if lv not in ("L1d", "L1", "L2")] or levels

        def ratio(kernel, a, b, lvls):
            pairs = [(vals[(kernel, s, a)], vals[(kernel, s, b)]) for s in sizes
                     if level_of(s, caches) in lvls and (kernel, s, a) in vals and (kernel, s, b) in vals]
            return level_ratio(pairs, min_samples=threshold("min_samples"))

        def in_levels(lvls):
            return [s for s in sizes if level_of(s, caches) in lvls]

        def med(kernel, arm, lvls):
            m = [float(np.median(vals[(kernel, s, arm)])) for s in in_levels(lvls)
                 if (kernel, s, arm) in vals]
            return float(np.median(m)) if m else None

        findings = []
        have_pair = any(a == "zero" for _, _, a in vals) and any(a == "one" for _, _, a in vals)
        per_level = {}
        if have_pair:
            for lv in levels:
                r = ratio(kp, "zero", "one", [lv])
                if r is None:
                    continue
                v = ratio_verdict(r)
                per_level[lv] = (r, v)
                lv_sizes = in_levels([lv])
                per_size = {format_size(s_): round(float(np.median(vals[(kp, s_, "zero")]))
                                                   / float(np.median(vals[(kp, s_, "one")])), 4)
                            for s_ in lv_sizes if (kp, s_, "zero") in vals and (kp, s_, "one") in vals}
                other_kernels = {}
                for k in kernels:
                    rk = ratio(k, "zero", "one", [lv])
                    if rk:
                        other_kernels[k] = {"ratio": rk["ratio"], "ci_low": rk["ci_low"],
                                            "ci_high": rk["ci_high"], "verdict": ratio_verdict(rk)}
                other_values = {}
                for arm in ("ones", "random"):
                    ra = ratio(kp, "zero", arm, [lv])
                    if ra:
                        other_values[f"zero/{arm}"] = {"ratio": ra["ratio"], "ci_low": ra["ci_low"],
                                                       "ci_high": ra["ci_high"]}
                findings.append(Finding(
                    id=f"zero_vs_one_{lv.lower()}",
                    claim=(f"Fill bandwidth zero/one, {kp} kernel, {lv} "
                           f"({format_size(min(lv_sizes))}B..{format_size(max(lv_sizes))}B, "
                           f"{len(lv_sizes)} sizes)"
                           + (f": zeros {'faster' if r['ratio'] > 1 else 'slower'} by "
                              f"{abs(r['ratio'] - 1):.1%}" if v == DETECTED else "")),
                    verdict=v, value=r["ratio"], unit="ratio", ci_low=r["ci_low"], ci_high=r["ci_high"],
                    evidence={"kernel": kp, "level": lv, "sizes": lv_sizes, "per_size_ratio": per_size, "sizes_used": r["sizes"],
                              "sizes_dropped_few_samples": r["dropped"], "n_zero": r["n_a"],
                              "n_one": r["n_b"], "gbps_zero": med(kp, "zero", [lv]),
                              "gbps_one": med(kp, "one", [lv]), "kernels": other_kernels,
                              "other_values": other_values, "effect_min": threshold("effect_min"),
                              "min_samples": threshold("min_samples"),
                              "level_rule": "smallest reported cache that holds the region; "
                                            "DRAM beyond the last"},
                    seed=SEED, experiment=self.name))
            findings.insert(0, self._headline(kp, per_level, beyond_l2))
            for k in kernels:
                if k == kp:
                    continue
                r = ratio(k, "zero", "one", beyond_l2)
                if r:
                    findings.append(Finding(
                        id=f"zero_vs_one_{k}", verdict=ratio_verdict(r), value=r["ratio"], unit="ratio",
                        ci_low=r["ci_low"], ci_high=r["ci_high"],
                        claim=f"Fill bandwidth zero/one, {k} kernel, {'+'.join(beyond_l2)}",
                        evidence={"kernel": k, "levels": beyond_l2, "sizes": r["sizes"],
                                  "n_zero": r["n_a"], "n_one": r["n_b"]},
                        seed=SEED, experiment=self.name))
        for a, b, fid, claim in (
                ("zero_volatile", "zero", "volatile_zero_vs_zero",
                 "Zero re-read through a volatile pointer vs zero from the argument (a zeroing idiom "
                 "is not what matters if this is not detected)"),
                ("ones", "one", "ones_vs_one", "Fill bandwidth 0xff/0x01: non-zero values alike"),
                ("random", "one", "random_vs_one", "Fill bandwidth random byte/0x01: non-zero values alike"),
                ("one_zero", "one", "alternating_vs_one",
                 "Alternating passes of ones and zeros (zeros never written over zeros) vs ones")):
            r = ratio(kp, a, b, beyond_l2)
            if r:
                findings.append(Finding(
                    id=fid, verdict=ratio_verdict(r), value=r["ratio"], unit="ratio",
                    ci_low=r["ci_low"], ci_high=r["ci_high"],
                    claim=f"{claim}; {kp} kernel, {'+'.join(beyond_l2)}",
                    evidence={"kernel": kp, "levels": beyond_l2, "arms": [a, b], "sizes": r["sizes"],
                              "n_a": r["n_a"], "n_b": r["n_b"]},
                    seed=SEED, experiment=self.name))
        findings.append(self._counters_finding(data, caches, kp))
        table = zero_ratio_table(data)
        if table:
            top = max(table, key=lambda r: r["ratio"])
            findings.append(Finding(
                id="zero_ratio_by_kernel",
                claim=(f"Fill bandwidth zero/{top['nonzero_arm']} per kernel and level (largest: "
                       f"{top['kernel']} in {top['level']}, {top['ratio']:.2f}x)"),
                verdict=MEASURED, value=top["ratio"], unit="ratio", ci_low=top["ci_low"],
                ci_high=top["ci_high"], evidence={"table": table}, seed=SEED, experiment=self.name))
        return findings

    def _headline(self, kp, per_level, beyond_l2):
        verdicts = {lv: v for lv, (r, v) in per_level.items()}
        det = [lv for lv, v in verdicts.items() if v == DETECTED and per_level[lv][0]["ratio"] > 1]
        if det:
            verdict = DETECTED
        elif verdicts and all(v == NOT_DETECTED for v in verdicts.values()):
            verdict = NOT_DETECTED
        else:
            verdict = INCONCLUSIVE
        focus = det or [lv for lv in beyond_l2 if lv in per_level] or list(per_level)
        best = max(focus, key=lambda lv: abs(math.log(per_level[lv][0]["ratio"]))) if focus else None
        r = per_level[best][0] if best else None
        summary = ", ".join(f"{lv} {_fmt_ratio(per_level[lv][0])} {v}" for lv, v in verdicts.items())
        outer = [per_level[lv][0] for lv in beyond_l2 if lv in per_level]
        excluded = bool(outer) and all(r_["ci_high"] < SEED_EFFECT for r_ in outer)
        return Finding(
            id="store_elimination",
            claim=(f"Zeros are stored faster than ones (hardware store elimination, seed 000), "
                   f"{kp} kernel" + (f": detected in {', '.join(det)}" if det else "")
                   + (f"; value shown for {best}" if best else "")
                   + (f"; an effect as large as seed 000's ({SEED_EFFECT - 1:.0%}) is excluded "
                      f"beyond L2" if excluded and not det else "")),
            verdict=verdict, value=r["ratio"] if r else None, unit="ratio",
            ci_low=r["ci_low"] if r else None, ci_high=r["ci_high"] if r else None,
            evidence={"kernel": kp, "level_shown": best, "per_level": summary,
                      "seed_effect": SEED_EFFECT, "seed_effect_excluded_beyond_l2": excluded,
                      "rule": "detected if any level's zero/one CI lies above 1 + effect_min; "
                              "not detected if every level's CI lies within 1 +- effect_min"},
            seed=SEED, experiment=self.name)

    def _counters_finding(self, data, caches, kp):
        """L2 silent/non-silent evictions per line written, or why they cannot be read."""
        cpu = data.machine.get("cpu") or {}
        pmu = data.machine.get("pmu") or {}
        events, note = l2_eviction_events(cpu.get("vendor"), cpu.get("family"), cpu.get("model"))
        uncore = [s for s in pmu.get("event_sources") or [] if s.startswith("uncore")]
        uncore_note = ("uncore memory-write counters (unc_arb_trk_requests.writes, uncore_imc "
                       "data_writes) are system-wide events that memfx does not read; "
                       + (f"uncore PMUs present: {', '.join(uncore)}" if uncore
                          else "this machine exposes no uncore PMU"))
        line = data.machine.get("line_bytes") or 64
        per = {}
        for s in data.samples:
            c = s.get("counters") or {}
            if "l2_lines_out_silent" not in c or s.get("point", {}).get("kernel") != kp:
                continue
            size = s["point"]["size_bytes"]
            lines = (s["counters"].get("chunk_bytes") or size) * s["length"] / line
            key = (level_of(size, caches), s["arm"])
            d = per.setdefault(key, {"silent": [], "non_silent": []})
            d["silent"].append(c["l2_lines_out_silent"] / lines)
            d["non_silent"].append(c.get("l2_lines_out_non_silent", 0) / lines)
        if per:
            table = {f"{lv} {arm}": {"silent_per_line": float(np.median(d["silent"])),
                                     "non_silent_per_line": float(np.median(d["non_silent"]))}
                     for (lv, arm), d in sorted(per.items())}
            beyond = [lv for lv in level_names(caches) if lv not in ("L1d", "L1", "L2")]
            z = [x for (lv, arm), d in per.items() if arm == "zero" and lv in beyond for x in d["silent"]]
            zt = [a + b for (lv, arm), d in per.items() if arm == "zero" and lv in beyond
                  for a, b in zip(d["silent"], d["non_silent"])]
            share = float(np.median(z) / np.median(zt)) if z and np.median(zt) > 0 else None
            return Finding(
                id="l2_silent_evictions",
                claim=f"Share of L2 evictions that are silent when filling zeros beyond L2 ({kp})",
                verdict=MEASURED, value=share, unit="ratio",
                evidence={"per_level": table, "events": events, "source": note, "uncore": uncore_note},
                seed=SEED, experiment=self.name)
        if pmu.get("available") is False:
            why = f"no hardware PMU ({pmu.get('reason')})"
        elif events is None:
            why = note
        else:
            why = "the L2_LINES_OUT events could not be opened"
        return Finding(
            id="l2_silent_evictions",
            claim=("The mechanism (L2_LINES_OUT.SILENT / NON_SILENT evictions, uncore memory writes) "
                   f"cannot be observed here: {why}; the verdicts above come from timing alone"),
            verdict=INCONCLUSIVE, value=None, unit="",
            evidence={"reason": why, "cpu": {k: cpu.get(k) for k in ("vendor", "family", "model")},
                      "encodings": note, "uncore": uncore_note},
            seed=SEED, experiment=self.name)


# ---- calloc vs malloc+memset vs mmap first touch ---------------------------------------

ALLOC_ARMS = {"calloc": "alloc_calloc", "malloc_memset": "alloc_malloc_memset", "mmap": "alloc_mmap",
              # page faults (seed 004, issue 13): first touch with THP, MAP_POPULATE (layout.c)
              "mmap_thp": "fault_mmap_thp", "mmap_populate": "fault_map_populate"}
ALLOC_RECYCLED = 1
ALLOC_CHECK = 2


@register
class FillAlloc(Experiment):
    name = "fill_alloc"
    title = "Zeroed memory: calloc vs malloc+memset vs mmap first touch"
    question = ("How much does calloc save over malloc+memset on fresh and on recycled memory, "
                "and what do the page faults cost?")
    seeds = (SEED,)
    arms = tuple(ALLOC_ARMS)
    params = [
        Param("sizes", "list:size", [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20],
              "allocation sizes, bytes", "1M,16M", minimum=4096),
        Param("memory", "list:str", ["fresh", "recycled"],
              "fresh = every block comes from the OS (mmap); recycled = freed heap memory is reused "
              "(glibc mmap disabled for the call)", "fresh", choices=("fresh", "recycled")),
    ]
    presets = {
        # first touches in a VM can be async page faults, during which the
        # guest switches tasks: samples of many ms are often rejected, so the
        # quick sizes stay small
        "quick": {"sizes": "256K,4M", "samples": 7, "min_sample_ms": 1.0},
        "full": {"samples": 11, "min_sample_ms": 2.0},
    }

    def plan(self, params, machine):
        avail = (machine.get("memory") or {}).get("available_bytes")
        big = max(params["sizes"])
        if avail and 2 * big > avail * 0.8:
            raise ParamError(f"sizes: {format_size(big)} does not fit in {format_size(avail)} available")
        return [Point(arm, {"size_bytes": s, "memory": mem})
                for mem in dict.fromkeys(params["memory"])
                for s in sorted(set(params["sizes"]))
                for arm in ALLOC_ARMS
                if not (arm.startswith("mmap") and mem == "recycled")]   # mmap memory is always fresh

    def prepare(self, point, params, lab):
        aux = ALLOC_RECYCLED if point.params["memory"] == "recycled" else 0
        return Trial(ALLOC_ARMS[point.arm], size=point.params["size_bytes"], aux=aux,
                     metric="time", difference=False, reject_page_faults=False, warmup=1)

    def verify(self, lab, params):
        """Every strategy must hand out zeroed memory, also after the heap was dirtied."""
        from .. import _core
        for arm, kname in ALLOC_ARMS.items():
            row = lab.kernels[kname]
            for mem in params["memory"]:
                aux = ALLOC_CHECK | (ALLOC_RECYCLED if mem == "recycled" else 0)
                for size in (4096, 100_000, min(params["sizes"])):
                    bad = _core.run(row.index, None, 0, None, 0, size, 0, 2, aux)[3]
                    if bad:
                        raise MemfxError(f"{arm} ({mem}) returned {bad} non-zero bytes of {size}")

    def analyze(self, data):
        pts = [p for p in data.points if p.get("values")]
        vals = {(p["arm"], p["params"]["memory"], p["params"]["size_bytes"]): p["values"] for p in pts}
        sizes = sorted({s for _, _, s in vals})
        findings = []
        for mem in ("fresh", "recycled"):
            for slow, fast, fid, claim in (
                    ("malloc_memset", "calloc", f"calloc_vs_malloc_memset_{mem}",
                     f"calloc is faster than malloc+memset on {mem} memory (time malloc+memset / calloc)"),
                    ("calloc", "mmap", f"mmap_vs_calloc_{mem}",
                     f"mmap first touch vs calloc on {mem} memory (time calloc / mmap)"),
                    ("mmap", "mmap_populate", f"populate_vs_touch_{mem}",
                     f"MAP_POPULATE vs first touch on {mem} memory (time touch / populate)"),
                    ("mmap", "mmap_thp", f"thp_vs_4k_first_touch_{mem}",
                     f"first touch with huge pages vs 4 KiB pages, {mem} memory (time 4k / thp)")):
                pairs = [(vals[(slow, mem, s)], vals[(fast, mem, s)]) for s in sizes
                         if (slow, mem, s) in vals and (fast, mem, s) in vals]
                r = level_ratio(pairs, min_samples=threshold("min_samples"))
                if r:
                    findings.append(Finding(
                        id=fid, claim=claim, verdict=ratio_verdict(r), value=r["ratio"], unit="ratio",
                        ci_low=r["ci_low"], ci_high=r["ci_high"],
                        evidence={"sizes": [s for s in sizes if (slow, mem, s) in vals],
                                  "n_a": r["n_a"], "n_b": r["n_b"], "metric": "ns per call (alloc, zero, "
                                  "touch every page, free)"},
                        seed=SEED, experiment=self.name))
        page = 4096
        faults = {}
        for s in data.samples:
            pf = (s.get("counters") or {}).get("page_faults")
            if pf is None:
                continue
            key = (s["arm"], s["point"]["memory"])
            faults.setdefault(key, []).append(pf / s["length"] / (s["point"]["size_bytes"] / page))
        for arm in ("mmap", "mmap_thp", "mmap_populate"):      # cost per 4 KiB page obtained
            big = max((s for a, m, s in vals if a == arm and m == "fresh"), default=None)
            if big:
                per = np.asarray(vals[(arm, "fresh", big)], float) / (big / page)
                findings.append(Finding(
                    id=f"ns_per_page_{arm}", claim=f"Time per 4 KiB page obtained (map, obtain, "
                    f"unmap), {arm}, {format_size(big)}B", verdict=MEASURED,
                    value=float(np.median(per)), unit="ns", evidence={"size_bytes": big},
                    seed=SEED, experiment=self.name))
        for (arm, mem), fs in sorted(faults.items()):
            findings.append(Finding(
                id=f"page_faults_{arm}_{mem}",
                claim=f"Page faults per 4 KiB page obtained, {arm}, {mem} memory",
                verdict=MEASURED, value=float(np.median(fs)), unit="faults/page",
                evidence={"samples": len(fs), "min": float(np.min(fs)), "max": float(np.max(fs))},
                seed=SEED, experiment=self.name))
        return findings
