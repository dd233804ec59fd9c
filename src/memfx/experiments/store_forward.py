"""Store-to-load forwarding: which loads get their bytes straight from an
older store, and what does it cost when they cannot?

Seed 003 ("A tale of two copies", Jeff Wendling): 28-byte entries were about
2x slower than 32-byte ones.  The compiler copied each 28-byte entry with two
overlapping 16-byte moves (offsets 0 and 12) and the next step read the copy
back with a 16-byte load spanning both stores, which the CPU cannot forward
from its store buffer: the load waits until both stores reach L1
(ld_blocks.store_forward counted a billion blocks instead of two million).

Three parts, each a set of kernels in kernels/storefwd.c:

entry        Copy an S-byte entry (S = 1..64) the way compilers do: the
             widest power-of-two moves up to `widest` bytes, the last one
             moved back to end at S when S is not a multiple of the move
             width (copy_shape).  Arms:
               copy       ping-pong A -> B -> A: each copy's loads read the
                          previous copy's stores, so one entry costs one
                          store->load round trip (dependent loop);
               append     the seed's benchmark loop: constant entry A copied to
                          a temporary B, then B to C (throughput);
               registers  the seed's fix: the entry stays in registers and is
                          stored to C with the same moves, nothing reads it back.
matrix       One store of s bytes at the start of a cache line, then a load of
             l bytes at offset o whose value is the next store's data.  The
             window is the store's 64-byte line: every o with 0 <= o,
             o + l <= 64 and o < s (the load reads at least one stored byte;
             no line splits, which have costs of their own).
two_stores   The seed's exact shape: 16-byte stores at 0 and at d (d = 1..16),
             then a 16-byte load at 0 (spanning both, for d < 16) or at d
             (inside the younger store), interleaved in one cell.

Analysis: forwarding and failing cells separate into two latency levels
(split_levels); the failure penalty is taken against the nearest cells that
forward.  ld_blocks.store_forward (or AMD's equivalent) is counted per entry
where a PMU exists.
"""
from __future__ import annotations

import mmap
import struct

import numpy as np

from .. import stats
from ..errors import ParamError
from ..findings import (DETECTED, INCONCLUSIVE, MEASURED, NOT_DETECTED, Finding,
                        effect_finding, effect_verdict, threshold)
from .base import Experiment, Param, Point, Trial, register

SEED = "003"
MATRIX_SIZES = (1, 2, 4, 8, 16, 32, 64)
WINDOW_BYTES = 64            # the store's cache line: the matrix window
ENTRY_MAX_BYTES = 64
MAX_MOVES = 4                # the C kernels take up to 4 moves per copy
SLOT_DISTANCE = 128          # bytes between the entry slots A, B and C
TWO_STORE_OFFSETS = tuple(range(1, 17))   # second store's offset d; 16 = no overlap
SEED_ENTRY, SEED_REFERENCE = 28, 32
SEED_SECOND_STORE = 12       # the seed's 28-byte copy: moves at 0 and 12
ENTRY_ARMS = ("copy", "append", "registers")
PAIR_ARMS = ("load_spans_both", "load_in_younger")
ENTRY_KERNEL_PREFIX = {"copy": "sf_entry_copy", "append": "sf_entry_append",
                       "registers": "sf_entry_regs"}
# A round trip that takes at least this many times the forwarding level is a
# forwarding failure.  Failures cost about 2-4x a forwarded round trip on
# recent Intel and AMD cores (Agner Fog, microarchitecture guide, "store
# forwarding stalls"); a 50 % rise is far above noise and above the 1-2 cycles
# that register-class moves or vector widths add.
FAIL_RATIO = 1.5
WIDEST_ISA = {16: "sse2", 32: "avx", 64: "avx512f"}
MOVE_ISA = {1: "", 2: "", 4: "", 8: "", 16: "sse2", 32: "avx", 64: "avx512f"}
COUNTER_NAME = "ld_blocks_store_forward"
# One run length per sample instead of the N/2N difference: a call costs
# ~100 ns against samples of >= 50 us (< 0.2 %), while some cells switch
# between two speeds from one call to the next (the forwarding predictor
# of recent cores, e.g. a 4-byte store/load pair at 2 or 5 cycles), and a
# difference of two medians taken at two lengths breaks on such bimodal
# cells (it even went negative here).
SAMPLE_DIFFERENCE = False


# ---- copy shapes ----------------------------------------------------------

def copy_shape(size, widest=16):
    """The moves a compiler uses to copy `size` bytes: [(offset, width), ...].

    width = the largest power of two <= min(size, widest); full moves at
    0, width, 2*width, ...; when size is not a multiple of width, one more
    move ending exactly at `size` (overlapping the previous one), e.g.
    copy_shape(28) == [(0, 16), (12, 16)].  This is the overlapping-tail
    strategy GCC and Clang use for small fixed-size memcpy and the Go compiler
    used in the seed."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ParamError(f"entry size must be a non-negative integer, got {size!r}")
    if widest not in (1, 2, 4, 8, 16, 32, 64):
        raise ParamError(f"widest move must be a power of two from 1 to 64 bytes, got {widest!r}")
    if size == 0:
        return []
    width = 1
    while width * 2 <= min(size, widest):
        width *= 2
    moves = [(k * width, width) for k in range(size // width)]
    if size % width:
        moves.append((size - width, width))
    if len(moves) > MAX_MOVES:
        raise ParamError(f"copying {size} bytes with {widest}-byte moves takes {len(moves)} moves; "
                         f"the kernels take at most {MAX_MOVES}: use a wider move")
    return moves


def shape_overlaps(shape):
    """True when two moves of the shape write a common byte."""
    spans = sorted(shape)
    return any(a_off + a_w > b_off for (a_off, a_w), (b_off, _) in zip(spans, spans[1:]))


def shape_table(shape):
    """The shape as the C kernels read it (struct sf_shape in storefwd.c):
    uint32 n, then n (uint32 offset, uint32 width) pairs, zero padded."""
    out = struct.pack("<I", len(shape))
    for off, width in shape:
        out += struct.pack("<II", off, width)
    return out + bytes(8 * (MAX_MOVES - len(shape)))


def entry_kernel(arm, shape):
    """Kernel row name for an entry arm and a copy shape (by its move width)."""
    width = shape[0][1] if shape else 1
    return f"{ENTRY_KERNEL_PREFIX[arm]}_w{width}"


def entry_pattern(size):
    """The entry's bytes: distinct, non-zero, so a misplaced move shows."""
    return bytes((37 * i + 11) & 0xFF or 1 for i in range(size))


# ---- the forwarding matrix -----------------------------------------------

def valid_offsets(store, load, window=WINDOW_BYTES):
    """Offsets o of an l-byte load that reads at least one byte of an s-byte
    store at offset 0 and stays inside the window [0, window)."""
    return list(range(0, min(store - 1, window - load) + 1))


def edge_offsets(store, load, window=WINDOW_BYTES):
    """A subset of valid_offsets where forwarding rules change: aligned start,
    misaligned start, the middle, the load ending at the store's end, one
    byte past it, and one byte of overlap."""
    valid = set(valid_offsets(store, load, window))
    wanted = {0, 1, store // 2, store - load, store - load + 1, store - 1,
              load, store // 2 - load // 2}
    return sorted(valid & wanted)


def matrix_cells(store_sizes=MATRIX_SIZES, load_sizes=MATRIX_SIZES, offsets="all",
                 window=WINDOW_BYTES):
    """Every (store, load, offset) cell, each once, in a stable order."""
    pick = valid_offsets if offsets == "all" else edge_offsets
    return [(s, l, o) for s in sorted(set(store_sizes)) for l in sorted(set(load_sizes))
            for o in pick(s, l, window)]


def cell_kind(store, load, offset):
    """'contained' when the load reads only stored bytes, else 'partial'."""
    return "contained" if offset + load <= store else "partial"


def forward_kernel(store, load):
    return f"sf_fwd_s{store}_l{load}"


def forward_isa(store, load):
    return MOVE_ISA[max(store, load)]


def simulate_forward(memory, store, load, offset, value, count):
    """Reference model of sf_fwd_s<store>_l<load>: the register starts as the
    8 bytes of `value` (zero-extended), each iteration stores its low `store`
    bytes at 0 and loads `load` bytes at `offset` (zero-extended).  Returns
    the low 8 bytes of the final register; `memory` is updated in place."""
    reg = value.to_bytes(8, "little") + bytes(56)
    for _ in range(count):
        memory[0:store] = reg[:store]
        reg = bytes(memory[offset:offset + load]) + bytes(64 - load)
    return int.from_bytes(reg[:8], "little")


def simulate_two_stores(memory, second, offset, value, count):
    """Reference model of sf_two_stores_16 (16-byte stores at 0 and `second`,
    16-byte load at `offset`)."""
    reg = value.to_bytes(8, "little") + bytes(8)
    for _ in range(count):
        memory[0:16] = reg
        memory[second:second + 16] = reg
        reg = bytes(memory[offset:offset + 16])
    return int.from_bytes(reg[:8], "little")


# ---- analysis helpers (pure) ---------------------------------------------

def split_levels(values, min_ratio=FAIL_RATIO):
    """Split latencies into a fast and a slow level (optimal two-group split of
    log latency).  Returns (slow_mask, threshold, ratio): ratio = median(slow)
    / median(fast); when it is below `min_ratio` (one level only: flat data)
    the mask is all False and threshold None."""
    v = np.asarray(values, dtype=float)
    mask = np.zeros(v.size, dtype=bool)
    ok = np.isfinite(v) & (v > 0)
    if ok.sum() < 3:
        return mask, None, 1.0
    idx = np.flatnonzero(ok)
    order = idx[np.argsort(v[idx])]
    y = np.log(v[order])
    best = None
    for k in range(1, y.size):
        cost = ((y[:k] - y[:k].mean()) ** 2).sum() + ((y[k:] - y[k:].mean()) ** 2).sum()
        if best is None or cost < best[0]:
            best = (cost, k)
    k = best[1]
    fast, slow = v[order[:k]], v[order[k:]]
    ratio = float(np.median(slow) / np.median(fast))
    if ratio < min_ratio:
        return mask, None, ratio
    cut = float(np.sqrt(fast.max() * slow.min()))
    mask[order[k:]] = True
    return mask, cut, ratio


def classify(points, value_key="median"):
    """Points (dicts with value_key, ci_low) -> (failing, forwarding, cut,
    ratio).  A point fails when it is on the slow level and its CI lies
    above the cut between the levels; slow points whose CI reaches below the
    cut are left out of both lists (uncertain)."""
    vals = [p.get(value_key) for p in points]
    mask, cut, ratio = split_levels([np.nan if v is None else v for v in vals])
    failing, forwarding = [], []
    for p, slow in zip(points, mask):
        if p.get(value_key) is None:
            continue
        if not slow:
            forwarding.append(p)
        elif p.get("ci_low") is None or p["ci_low"] > cut:
            failing.append(p)
    return failing, forwarding, cut, ratio


def as_ranges(sizes):
    """[3, 5, 6, 7, 9] -> '3, 5-7, 9'."""
    out, run = [], []
    for s in sorted(sizes):
        if run and s == run[-1] + 1:
            run.append(s)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [s]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ", ".join(out)


def nearest_forwarding(size, forwarding_sizes):
    """The forwarding sizes just below and just above `size` (None if none)."""
    below = [s for s in forwarding_sizes if s < size]
    above = [s for s in forwarding_sizes if s > size]
    return (max(below) if below else None), (min(above) if above else None)


def cycles_per_ns(point):
    """The point's est. cycles per ns (its calibration), or None."""
    if point.get("cycles_est") and point.get("median"):
        return point["cycles_est"] / point["median"]
    return None


def median_difference(a, b, n_boot=2000, seed=0):
    """median(a) - median(b) with a percentile bootstrap CI (both resampled)."""
    x, y = np.asarray(a, float), np.asarray(b, float)
    rng = np.random.default_rng(seed)
    bx = np.median(x[rng.integers(0, x.size, (n_boot, x.size))], axis=1)
    by = np.median(y[rng.integers(0, y.size, (n_boot, y.size))], axis=1)
    alpha = (1 - threshold("ci_level")) / 2
    lo, hi = np.quantile(bx - by, [alpha, 1 - alpha])
    return float(np.median(x) - np.median(y)), float(lo), float(hi)


# ---- the hardware counter -------------------------------------------------

# Raw perf encodings of "load blocked because store forwarding failed".
# Intel LD_BLOCKS.STORE_FORWARD is event 0x03: umask 0x02 from Sandy Bridge to
# Ice Lake / Tiger Lake / Rocket Lake (intel/perfmon RKL/events/rocketlake_core.json,
# Linux tools/perf/pmu-events/arch/x86/{jaketown,rocketlake}/pipeline.json),
# umask 0x82 on Golden Cove cores (intel/perfmon SPR/events/sapphirerapids_core.json,
# ADL/events/alderlake_goldencove_core.json).  Family-6 model numbers per
# intel/perfmon mapfile.csv.  AMD family 19h (Zen 3/4): ls_bad_status2.stli_other,
# event 0x24 umask 0x02 (Linux tools/perf/pmu-events/arch/x86/amdzen3/memory.json).
_INTEL_UMASK_02 = {0x2A, 0x2D, 0x3A, 0x3E, 0x3C, 0x45, 0x46, 0x3F, 0x3D, 0x47, 0x4F, 0x56,
                   0x4E, 0x5E, 0x8E, 0x9E, 0xA5, 0xA6, 0x55, 0x7D, 0x7E, 0x6A, 0x6C, 0x8C,
                   0x8D, 0xA7}
_INTEL_UMASK_82 = {0x8F, 0xCF, 0x97, 0x9A, 0xB7, 0xBA, 0xBF}


def store_forward_event(vendor, family, model):
    """{'name', 'config', 'source'} of the blocked-forwarding event for this
    CPU, or None when no encoding is known for it."""
    if vendor == "GenuineIntel" and family == 6:
        if model in _INTEL_UMASK_02:
            return {"name": "LD_BLOCKS.STORE_FORWARD", "config": 0x0203,
                    "source": "intel/perfmon (event 0x03 umask 0x02)"}
        if model in _INTEL_UMASK_82:
            hybrid = model in {0x97, 0x9A, 0xB7, 0xBA, 0xBF}
            note = " (P-cores; E-cores use umask 0x02)" if hybrid else ""
            return {"name": "LD_BLOCKS.STORE_FORWARD", "config": 0x8203,
                    "source": "intel/perfmon (event 0x03 umask 0x82)" + note}
    if vendor == "AuthenticAMD" and family == 0x19:
        return {"name": "ls_bad_status2.stli_other", "config": 0x0224,
                "source": "Linux perf amdzen3 memory.json (event 0x24 umask 0x02)"}
    return None


def cpu_identity():
    """(vendor, family, model) from CPUID leaves 0 and 1 (Intel SDM Vol. 2A, CPUID)."""
    from .. import _core
    _, ebx, ecx, edx = _core.cpuid(0)
    vendor = struct.pack("<III", ebx, edx, ecx).decode("ascii", "replace")
    eax = _core.cpuid(1)[0]
    family = (eax >> 8) & 0xF
    model = (eax >> 4) & 0xF
    if family == 0xF:
        family += (eax >> 20) & 0xFF
    if family in (6, 0xF) or family > 0xF:
        model |= ((eax >> 16) & 0xF) << 4
    return vendor, family, model


def attach_store_forward_counter(lab):
    """Add the blocked-forwarding event to the Lab's hardware counter group
    (read with every sample); returns a one-line note of what happened."""
    event = store_forward_event(*cpu_identity())
    if event is None:
        return "not available: no encoding known for this CPU model"
    return lab.perf.add_raw_event(COUNTER_NAME, event["config"])


# ---- running kernels directly (verification and tests) -------------------

def run_kernel(kernels, name, buf, dst_off, src, size, value, count, aux):
    """One call of a kernel row (kernels = memfx._lab.kernel_table())."""
    from .. import _core
    return _core.run(kernels[name].index, buf, dst_off, src, 0, size,
                     value & 0xFFFFFFFFFFFFFFFF, count, aux)[3]


def check_entry(kernels, arm, size, widest, align, count, buf=None):
    """Run one entry kernel on fresh slots and check it copied exactly the
    entry's `size` bytes: the destination slot holds them, nothing around any
    slot changed, the source slot is intact.  Raises AssertionError."""
    shape = copy_shape(size, widest)
    name = entry_kernel(arm, shape)
    buf = buf if buf is not None else mmap.mmap(-1, 4096)
    garbage = bytes([0xEE]) * 1024
    buf[0:1024] = garbage
    entry = entry_pattern(size)
    a = 64 + align
    buf[a:a + size] = entry
    table = bytearray(4096)
    table[:4 + 8 * MAX_MOVES] = shape_table(shape)
    result = run_kernel(kernels, name, buf, a, table, size, 0, count, SLOT_DISTANCE)
    # copy fills B (ping-pong A<->B), append fills B (the temporary) and C,
    # registers fills C only
    written = {"copy": (1,), "append": (1, 2), "registers": (2,)}[arm]
    expect = bytearray(garbage)
    expect[a:a + size] = entry
    for k in written if count else ():
        expect[a + k * SLOT_DISTANCE:a + k * SLOT_DISTANCE + size] = entry
    got = bytes(buf[0:1024])
    if got != bytes(expect):
        bad = [i for i in range(1024) if got[i] != expect[i]]
        raise AssertionError(f"{name} ({arm}, {size} bytes, shape {shape}, align {align}, "
                             f"count {count}) wrote the wrong bytes at offsets {bad[:8]}")
    want = int.from_bytes(entry[:8], "little") if count else 0
    if result != want:
        raise AssertionError(f"{name} returned {result:#x}, expected {want:#x}")


def check_forward(kernels, store, load, offset, value, count, buf=None, rng=None):
    """Run one matrix kernel and compare memory and result to simulate_forward."""
    rng = rng or np.random.default_rng(0)
    buf = buf if buf is not None else mmap.mmap(-1, 4096)
    init = bytes(rng.integers(0, 256, 128, dtype=np.uint8))
    buf[0:128] = init
    model = bytearray(init)
    want = simulate_forward(model, store, load, offset, value, count)
    got = run_kernel(kernels, forward_kernel(store, load), buf, 0, None, 0, value, count, offset)
    if bytes(buf[0:128]) != bytes(model) or got != want:
        raise AssertionError(f"{forward_kernel(store, load)} at offset {offset}: memory or result "
                             f"differs from the model (got {got:#x}, expected {want:#x})")


def check_two_stores(kernels, second, offset, value, count, buf=None, rng=None):
    rng = rng or np.random.default_rng(0)
    buf = buf if buf is not None else mmap.mmap(-1, 4096)
    init = bytes(rng.integers(0, 256, 128, dtype=np.uint8))
    buf[0:128] = init
    model = bytearray(init)
    want = simulate_two_stores(model, second, offset, value, count)
    got = run_kernel(kernels, "sf_two_stores_16", buf, 0, None, 0, value, count,
                     second | (offset << 8))
    if bytes(buf[0:128]) != bytes(model) or got != want:
        raise AssertionError(f"sf_two_stores_16 (second store at {second}, load at {offset}) "
                             f"differs from the model")


def _isa_ok(isa, machine):
    if not isa:
        return True
    flags = (machine or {}).get("flags") or {}
    if isa in flags:
        return bool(flags[isa])
    from .. import _core
    return bool(_core.isa_supported(isa))


@register
class StoreForward(Experiment):
    name = "store-forward"
    title = "Store-to-load forwarding: entry copies, the forwarding matrix, two stores"
    question = ("When does a load get its bytes from an older store in flight, and what does "
                "it cost when it cannot (e.g. a 28-byte entry copied with overlapping moves)?")
    seeds = (SEED,)
    arms = ENTRY_ARMS + ("matrix",) + PAIR_ARMS
    params = [
        Param("parts", "list:str", ["entry", "matrix", "two_stores"],
              "which parts to measure: entry (size sweep), matrix, two_stores", "entry,two_stores",
              choices=("entry", "matrix", "two_stores")),
        Param("entry_min", "int", 1, "smallest entry size, bytes", "16", minimum=1,
              maximum=ENTRY_MAX_BYTES),
        Param("entry_max", "int", ENTRY_MAX_BYTES, "largest entry size, bytes", "32", minimum=1,
              maximum=ENTRY_MAX_BYTES),
        Param("entry_arms", "list:str", list(ENTRY_ARMS),
              "entry arms: copy (dependent store->load round trip), append (the seed's loop), "
              "registers (the seed's fix)", "copy,registers", choices=ENTRY_ARMS),
        Param("widest", "list:int", [16],
              "widest move the copy uses, bytes (16 = SSE, as in the seed; 32 = AVX; 64 = AVX-512)",
              "16,32", choices=(16, 32, 64)),
        Param("entry_align", "int", 0, "byte offset of each entry slot inside its cache line "
              "(the seed's entries sat at 0x7c)", "60", minimum=0, maximum=63),
        Param("store_sizes", "list:int", list(MATRIX_SIZES), "matrix store sizes, bytes", "8,16",
              choices=MATRIX_SIZES),
        Param("load_sizes", "list:int", list(MATRIX_SIZES), "matrix load sizes, bytes", "4,16",
              choices=MATRIX_SIZES),
        Param("offsets", "str", "all",
              "matrix load offsets: all (every valid offset) or edges (where rules change)",
              "edges", choices=("all", "edges")),
    ]
    presets = {
        "quick": {"samples": 9, "min_sample_ms": 0.2, "offsets": "edges"},
        "full": {"samples": 11, "min_sample_ms": 0.5, "widest": "16,32,64"},
    }

    # -- plan --
    def plan(self, params, machine):
        lo, hi = params["entry_min"], params["entry_max"]
        if lo > hi:
            raise ParamError(f"entry_min ({lo}) is above entry_max ({hi})")
        parts = set(params["parts"])
        points = []
        if "entry" in parts:
            widest = [w for w in params["widest"] if _isa_ok(WIDEST_ISA[w], machine)]
            if not widest:
                raise ParamError(f"widest: none of {params['widest']} is supported by this CPU")
            for w in widest:
                for size in range(lo, hi + 1):
                    copy_shape(size, w)          # validates
                    for arm in params["entry_arms"]:
                        points.append(Point(arm, {"part": "entry", "entry_bytes": size,
                                                  "widest": w, "align": params["entry_align"]}))
        if "matrix" in parts:
            cells = [c for c in matrix_cells(params["store_sizes"], params["load_sizes"],
                                             params["offsets"])
                     if _isa_ok(forward_isa(c[0], c[1]), machine)]
            if not cells:
                raise ParamError("the matrix selects no cell this CPU supports")
            points += [Point("matrix", {"part": "matrix", "store_bytes": s, "load_bytes": l,
                                        "load_offset": o}) for s, l, o in cells]
        if "two_stores" in parts:
            points += [Point(arm, {"part": "two_stores", "second_store_offset": d})
                       for d in TWO_STORE_OFFSETS for arm in PAIR_ARMS]
        return points

    def estimate_seconds(self, params, machine):
        pts = self.plan(params, machine)
        per_point = params["samples"] * 2 * params["min_sample_ms"] * 1.4 / 1000 + 0.006
        return 2.0 + len(pts) * per_point

    # -- one trial --
    def prepare(self, point, params, lab):
        p = point.params
        if p["part"] == "entry":
            size, align = p["entry_bytes"], p["align"]
            shape = copy_shape(size, p["widest"])
            slots = lab.buffer(3 * SLOT_DISTANCE + 64, align=4096, offset=align)
            garbage = bytes([0xEE]) * (3 * SLOT_DISTANCE)
            slots.buffer[slots.offset:slots.offset + len(garbage)] = garbage
            slots.buffer[slots.offset:slots.offset + size] = entry_pattern(size)
            table = lab.buffer(4096)
            table.buffer[table.offset:table.offset + 4 + 8 * MAX_MOVES] = shape_table(shape)
            return Trial(entry_kernel(point.arm, shape), size=size, dst=slots, src=table,
                         aux=SLOT_DISTANCE, metric="time", difference=SAMPLE_DIFFERENCE,
                         warmup=2000,
                         extra={"moves": len(shape), "move_bytes": shape[0][1],
                                "overlap": shape_overlaps(shape)})
        line = lab.buffer(4096, align=4096)
        line.buffer[line.offset:line.offset + 128] = bytes(range(1, 129))
        if p["part"] == "matrix":
            s, l, o = p["store_bytes"], p["load_bytes"], p["load_offset"]
            return Trial(forward_kernel(s, l), size=0, dst=line, aux=o, value=0x0123456789ABCDEF,
                         metric="time", difference=SAMPLE_DIFFERENCE, warmup=2000,
                         extra={"kind": cell_kind(s, l, o)})
        d = p["second_store_offset"]
        o = 0 if point.arm == "load_spans_both" else d
        return Trial("sf_two_stores_16", size=0, dst=line, aux=d | (o << 8),
                     value=0x0123456789ABCDEF, metric="time", difference=SAMPLE_DIFFERENCE,
                     warmup=2000)

    def verify(self, lab, params):
        """Every kernel the plan uses against its reference, before any timing:
        entry copies for every size 0..64 at several alignments and counts
        (odd and even: the ping-pong ends in either slot), matrix kernels and
        the two-store kernel against their models.  Then attach the
        blocked-forwarding counter where a PMU exists."""
        kernels = lab.kernels
        parts = set(params["parts"])
        buf = mmap.mmap(-1, 4096)
        rng = np.random.default_rng(params["seed"])
        try:
            if "entry" in parts:
                for w in params["widest"]:
                    if not kernels[f"sf_entry_copy_w{w}"].supported:
                        continue
                    for size in range(0, ENTRY_MAX_BYTES + 1):
                        for arm in params["entry_arms"]:
                            for align, count in ((0, 1), (params["entry_align"], 2), (13, 3),
                                                 (63, 5)):
                                check_entry(kernels, arm, size, w, align, count, buf)
            if "matrix" in parts:
                for s, l, o in matrix_cells(params["store_sizes"], params["load_sizes"],
                                            params["offsets"]):
                    if kernels[forward_kernel(s, l)].supported:
                        check_forward(kernels, s, l, o, int(rng.integers(1, 1 << 62)), 3, buf, rng)
            if "two_stores" in parts:
                for d in TWO_STORE_OFFSETS:
                    for o in (0, d):
                        check_two_stores(kernels, d, o, int(rng.integers(1, 1 << 62)), 3, buf, rng)
        finally:
            buf.close()
        lab.perf.notes["store_forward"] = attach_store_forward_counter(lab)

    # -- analysis --
    def analyze(self, data):
        findings = []
        findings += self._entry_findings(data)
        findings += self._matrix_findings(data)
        findings += self._two_store_findings(data)
        findings.append(self._counter_finding(data))
        return findings

    def _entry_curve(self, data, arm, widest):
        pts = [p for p in data.select(arm, part="entry", widest=widest) if p.get("median")]
        return sorted(pts, key=lambda p: p["params"]["entry_bytes"])

    def _entry_findings(self, data):
        out = []
        widths = sorted({p["params"]["widest"] for p in data.select(None, part="entry")})
        for w in widths:
            curve = self._entry_curve(data, "copy", w)
            if len(curve) < 3:
                continue
            failing, forwarding, cut, ratio = classify(curve)
            fail_sizes = [p["params"]["entry_bytes"] for p in failing]
            fwd_sizes = [p["params"]["entry_bytes"] for p in forwarding]
            by_size = {p["params"]["entry_bytes"]: p for p in curve}
            penalties = {}
            for s in fail_sizes:
                below, above = nearest_forwarding(s, fwd_sizes)
                refs = [by_size[x] for x in (below, above) if x is not None]
                if not refs:
                    continue
                ref_ns = float(np.mean([r["median"] for r in refs]))
                cpn = cycles_per_ns(by_size[s])
                penalties[s] = {"ns": by_size[s]["median"], "ratio": by_size[s]["median"] / ref_ns,
                                "extra_ns": by_size[s]["median"] - ref_ns,
                                "extra_cycles": ((by_size[s]["median"] - ref_ns) * cpn
                                                 if cpn else None),
                                "vs_sizes": [x for x in (below, above) if x is not None]}
            predicted = sorted(s for s in by_size if shape_overlaps(copy_shape(s, w)))
            uncertain = sorted(set(by_size) - set(fail_sizes) - set(fwd_sizes))
            if fail_sizes:
                pooled_fail = np.concatenate([np.asarray(by_size[s]["values"], float)
                                              for s in fail_sizes])
                pooled_fwd = np.concatenate([np.asarray(by_size[s]["values"], float)
                                             for s in fwd_sizes])
                r = stats.ratio_of_medians(pooled_fail, pooled_fwd)
                value, lo, hi = r["ratio"], r["ci_low"], r["ci_high"]
                extra = [v["extra_cycles"] for v in penalties.values() if v["extra_cycles"]]
                more = f", +{np.median(extra):.0f} cycles" if extra else ""
                claim = (f"Entries copied with {w}-byte-max moves fail to forward at sizes "
                         f"{as_ranges(fail_sizes)}: {value:.1f}x the nearby sizes that forward"
                         f"{more}")
                verdict = DETECTED
            else:
                value, lo, hi = ratio, None, None
                claim = f"No entry size copied with {w}-byte-max moves fails to forward"
                verdict = NOT_DETECTED
            cyc = [p["cycles_est"] for p in forwarding if p.get("cycles_est")]
            out.append(Finding(
                id=f"entry_failing_sizes_w{w}", claim=claim, verdict=verdict, value=value,
                unit="x", ci_low=lo, ci_high=hi, seed=SEED, experiment=self.name,
                evidence={"failing_sizes": fail_sizes, "forwarding_sizes": fwd_sizes,
                          "uncertain_sizes": uncertain, "level_ratio": ratio, "cut_ns": cut,
                          "penalty_by_size": penalties,
                          "overlapping_shapes": predicted,
                          "fails_exactly_where_moves_overlap": predicted == sorted(fail_sizes),
                          "forwarded_cycles": float(np.median(cyc)) if cyc else None}))
            # the seed's comparison: 28 vs 32 bytes, in each entry arm
            for arm, what in (("copy", "copied and read back (dependent round trip)"),
                              ("append", "in the seed's append loop (copy to a temporary, "
                                         "then to the buffer)"),
                              ("registers", "stored from registers (the seed's fix)")):
                a = data.select(arm, part="entry", widest=w, entry_bytes=SEED_ENTRY)
                b = data.select(arm, part="entry", widest=w, entry_bytes=SEED_REFERENCE)
                if not (a and b and a[0]["values"] and b[0]["values"]):
                    continue
                shape = copy_shape(SEED_ENTRY, w)
                moves = " + ".join(f"{wd}@{off}" for off, wd in shape)
                f = effect_finding(
                    f"entry{SEED_ENTRY}_vs_{SEED_REFERENCE}_{arm}_w{w}",
                    f"A {SEED_ENTRY}-byte entry ({moves}) {what} costs X times a "
                    f"{SEED_REFERENCE}-byte entry", a[0]["values"], b[0]["values"],
                    seed=SEED, experiment=self.name)
                f.claim = f.claim.replace("X times", f"{f.value:.2f}x")
                f.evidence.update(cycles_a=a[0].get("cycles_est"), cycles_b=b[0].get("cycles_est"),
                                  shape=shape)
                out.append(f)
        return out

    def _matrix_findings(self, data):
        pts = [p for p in data.select("matrix", part="matrix") if p.get("median")]
        if len(pts) < 3:
            return []
        key = "cycles_est" if all(p.get("cycles_est") for p in pts) else "median"
        unit = "cycles" if key == "cycles_est" else "ns"
        # the CI bound in the unit being classified
        failing, forwarding, cut, ratio = classify(
            [dict(p, ci_low=(p["ci_low"] * cycles_per_ns(p) if key == "cycles_est"
                             and p.get("ci_low") is not None else p.get("ci_low")))
             for p in pts], key)
        cell = lambda p: (p["params"]["store_bytes"], p["params"]["load_bytes"],  # noqa: E731
                          p["params"]["load_offset"])
        fwd = {cell(p): p[key] for p in forwarding}
        fail = {cell(p): p[key] for p in failing}

        def reference(s, l):
            same = [v for (a, b, _), v in fwd.items() if (a, b) == (s, l)]
            if same:
                return float(np.median(same))
            same_load = [v for (_, b, _), v in fwd.items() if b == l]
            if same_load:
                return float(np.median(same_load))
            return float(np.median(list(fwd.values()))) if fwd else None

        penalties = {c: v - reference(c[0], c[1]) for c, v in fail.items()
                     if reference(c[0], c[1]) is not None}
        kinds = {}
        for p in pts:
            c = cell(p)
            k = cell_kind(*c)
            d = kinds.setdefault(k, {"cells": 0, "forward": 0, "fail": 0})
            d["cells"] += 1
            d["forward"] += c in fwd
            d["fail"] += c in fail
        fail_map = {}
        rules = {}
        for p in pts:
            s, l, o = c = cell(p)
            if cell_kind(s, l, o) != "contained" or l >= s:
                continue
            if s == 64 and o >= 32:
                rule = "load from the upper half of a 64-byte store"
            elif l <= 8:
                rule = ("small load crossing an 8-byte boundary" if o // 8 != (o + l - 1) // 8
                        else "small load inside one aligned 8 bytes")
            else:
                rule = ("vector load at a multiple of 16" if o % 16 == 0
                        else "vector load at another offset")
            d = rules.setdefault(rule, {"cells": 0, "forward": 0})
            d["cells"] += 1
            d["forward"] += c in fwd
        for (s, l, o) in sorted(fail):
            fail_map.setdefault(f"store {s} / load {l}", []).append(o)
        fail_map = {k: as_ranges(v) for k, v in fail_map.items()}
        if penalties:
            vals = np.array(list(penalties.values()))
            lo, hi = stats.bootstrap_ci(vals)
            value = float(np.median(vals))
            claim = (f"Forwarding matrix: {len(fail)} of {len(pts)} store/load cells fail to "
                     f"forward, costing +{value:.1f} {unit} over cells that forward")
            verdict = DETECTED
        else:
            value, lo, hi = None, None, None
            claim = f"Forwarding matrix: every one of {len(pts)} store/load cells forwards"
            verdict = NOT_DETECTED
        return [Finding(id="matrix_failure_penalty", claim=claim, verdict=verdict, value=value,
                        unit=unit, ci_low=lo, ci_high=hi, seed=SEED, experiment=self.name,
                        evidence={"cells": len(pts), "failing": len(fail), "forwarding": len(fwd),
                                  "uncertain": len(pts) - len(fail) - len(fwd),
                                  "level_ratio": ratio, "cut": cut,
                                  "forwarded_median": float(np.median(list(fwd.values())))
                                  if fwd else None,
                                  "by_kind": kinds, "failing_offsets": fail_map,
                                  "smaller_contained_loads": rules,
                                  "fastest_cells": [
                                      {"store": c[0], "load": c[1], "offset": c[2], unit: v}
                                      for c, v in sorted(fwd.items(), key=lambda x: x[1])[:5]]})]

    def _two_store_findings(self, data):
        rows = {}
        for d in TWO_STORE_OFFSETS:
            a = data.select("load_spans_both", part="two_stores", second_store_offset=d)
            b = data.select("load_in_younger", part="two_stores", second_store_offset=d)
            if a and b and a[0]["values"] and b[0]["values"]:
                rows[d] = (a[0], b[0])
        if not rows:
            return []
        d = SEED_SECOND_STORE if SEED_SECOND_STORE in rows else min(
            (x for x in rows if x < 16), default=None, key=lambda x: abs(x - SEED_SECOND_STORE))
        if d is None:
            return []
        span, young = rows[d]
        cpn = cycles_per_ns(span) or cycles_per_ns(young)
        scale = cpn or 1.0
        unit = "cycles" if cpn else "ns"
        a = np.asarray(span["values"], float) * scale
        b = np.asarray(young["values"], float) * scale
        diff, lo, hi = median_difference(a, b)
        r = stats.ratio_of_medians(a, b)
        verdict = effect_verdict(r["ratio"], r["ci_low"], r["ci_high"], r["n_a"], r["n_b"])
        per_d = {}
        for x, (p, q) in sorted(rows.items()):
            c = cycles_per_ns(p) or 1.0
            per_d[x] = {"spanning": p["median"] * c, "in_younger": q["median"] * c,
                        "extra": (p["median"] - q["median"]) * c}
        if verdict == DETECTED and diff > 0:
            claim = (f"Loads spanning two in-flight stores fail to forward on this CPU: "
                     f"+{diff:.1f} {unit} (16-byte stores at 0 and {d}, 16-byte load at 0)")
        elif verdict == NOT_DETECTED:
            claim = (f"Loads spanning two in-flight stores forward on this CPU (16-byte stores at "
                     f"0 and {d}: {diff:+.1f} {unit})")
        else:
            claim = (f"Loads spanning two in-flight stores: {diff:+.1f} {unit} vs a load inside "
                     f"the younger store (inconclusive)")
        return [Finding(id="two_stores_spanning_load", claim=claim, verdict=verdict, value=diff,
                        unit=unit, ci_low=lo, ci_high=hi, seed=SEED, experiment=self.name,
                        evidence={"second_store_offset": d, "ratio": r["ratio"],
                                  "ratio_ci": [r["ci_low"], r["ci_high"]],
                                  "by_second_store_offset": per_d,
                                  "control_no_overlap": per_d.get(16)})]

    def _counter_finding(self, data):
        cpu = (data.machine or {}).get("cpu") or {}
        event = store_forward_event(cpu.get("vendor"), cpu.get("family"), cpu.get("model"))
        per_size = {}
        for s in data.samples:
            if s.get("arm") != "copy" or (s.get("point") or {}).get("part") != "entry":
                continue
            n = (s.get("counters") or {}).get(COUNTER_NAME)
            if n is None or not s.get("length"):
                continue
            per_size.setdefault(s["point"]["entry_bytes"], []).append(n / s["length"])
        evidence = {"event": event["name"] if event else None,
                    "raw_config": f"0x{event['config']:04x}" if event else None,
                    "encoding_source": event["source"] if event else None,
                    "cpu": {k: cpu.get(k) for k in ("vendor", "family", "model")}}
        if not per_size:
            pmu = (data.machine or {}).get("pmu") or {}
            why = ("no encoding known for this CPU model" if event is None
                   else pmu.get("reason") or "no hardware PMU")
            evidence["reason"] = why
            return Finding(id="ld_blocks_store_forward_per_entry",
                           claim=f"Blocked store forwards per entry (ld_blocks.store_forward): "
                                 f"not available ({why})",
                           verdict=INCONCLUSIVE, unit="per entry", seed=SEED,
                           experiment=self.name, evidence=evidence)
        medians = {k: float(np.median(v)) for k, v in sorted(per_size.items())}
        evidence["per_entry_by_size"] = medians
        size = SEED_ENTRY if SEED_ENTRY in per_size else next(iter(medians))
        vals = per_size[size]
        lo, hi = stats.bootstrap_ci(vals)
        return Finding(id="ld_blocks_store_forward_per_entry",
                       claim=f"Blocked store forwards per {size}-byte entry copy "
                             f"({event['name']}, raw {evidence['raw_config']})",
                       verdict=MEASURED, value=medians[size], unit="per entry", ci_low=lo,
                       ci_high=hi, seed=SEED, experiment=self.name, evidence=evidence)


__all__ = ["StoreForward", "copy_shape", "shape_overlaps", "shape_table", "matrix_cells",
           "valid_offsets", "edge_offsets", "split_levels", "classify", "simulate_forward",
           "simulate_two_stores", "store_forward_event"]
