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

Analysis: each size or cell is judged against those on the same code path
(entry_paths: the sizes copied with the same move width whose moves tile
the entry; matrix_classes: the failure level of loads of the same width
from stores of the same class), never against all of them at once: a
renamed 4-byte pair (~1 cycle), a vector forward (~9) and a failure (~20)
are three levels, not two.  Six declared questions (see `questions`);
ld_blocks.store_forward (or AMD's equivalent) is counted per entry where a
PMU exists.
"""
from __future__ import annotations

import mmap
import struct

import numpy as np

from .. import stats
from ..answers import (EFFECT_BAND, LOWER, NEITHER, Answer, Question, effect, evidence_keys,
                       measured, not_measured, pooled_values)
from ..errors import ParamError
from ..findings import DETECTED, INCONCLUSIVE, NOT_DETECTED, effect_verdict, threshold
from ..plotspec import Mark, PlotSpec
from .base import Experiment, Param, Point, Trial, register

SEED = "003"
MATRIX_SIZES = (1, 2, 4, 8, 16, 32, 64)
WINDOW_BYTES = 64            # the store's cache line: the matrix window
ENTRY_MAX_BYTES = 64
MAX_MOVES = 4                # the C kernels take up to 4 moves per copy
SLOT_DISTANCE = 128          # bytes between the entry slots A, B and C
TWO_STORE_OFFSETS = tuple(range(1, 17))   # second store's offset d; 16 = no overlap
SEED_ENTRY, SEED_REFERENCE = 28, 32
SEED_WIDEST = 16             # the seed's compiler copied with 16-byte (SSE) moves
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


# ---- classification by path (pure) ----------------------------------------
#
# A size or cell is judged against the cells that take the same code path:
# an entry copied with 16-byte moves against the other sizes copied with
# 16-byte moves, never against 4- or 8-byte general-register copies, which
# recent AMD cores may not route through the store buffer at all (memory
# renaming: a same-address, same-size store/load pair completes in about
# one cycle; AMD Software Optimization Guide for family 19h, "Memory
# Renaming"/"Store-to-Load Forwarding").  Mixing the paths compared a
# 9-cycle vector forward with a 1-cycle renamed GPR pair and called the
# vector sizes failures.

def move_width(size, widest=16):
    """Width of the moves copy_shape uses for `size` bytes (its code path)."""
    shape = copy_shape(size, widest)
    return shape[0][1] if shape else 0


def _ns_to_cycles(points):
    """Median est. cycles per ns over the points that carry a calibration, or None."""
    cpn = [c for c in (cycles_per_ns(p) for p in points) if c]
    return float(np.median(cpn)) if cpn else None


def entry_paths(by_size, widest, fail_ratio=FAIL_RATIO):
    """Which entry sizes fail to forward, judged per move width.

    `by_size`: {entry size: point (dict with "values", "median")} of the
    dependent copy arm for one `widest`.  Within one move width the sizes
    whose moves tile the entry (no two moves overlap: 16, 32, 48, 64 with
    16-byte moves) are the reference: every load of their copy reads
    exactly one earlier store of its own size and address, which x86 cores
    forward.  Tiling sizes more than `fail_ratio` slower than the fastest
    of them are left out of the reference and judged like the others.  Each
    other size is compared with the pooled reference samples (ratio of medians, CI):
    it fails when the ratio is >= `fail_ratio` with its CI above
    1 + effect_min, forwards when the whole CI is below `fail_ratio`, else
    it is uncertain.

    Returns one dict per move width measured, narrowest first:
    {move_bytes, widest, sizes, forwarding, failing, uncertain, by_size:
    {size: {ratio, ci_low, ci_high, status, extra_cycles}}, ratio, ci_low,
    ci_high (failing pooled vs reference), reference_cycles,
    failing_cycles, penalty_cycles, compared (bool)}."""
    e = threshold("effect_min")
    groups = {}
    for s, p in by_size.items():
        if p.get("values"):
            groups.setdefault(move_width(s, widest), []).append(s)
    out = []
    for m in sorted(groups):
        sizes = sorted(groups[m])
        pts = [by_size[s] for s in sizes]
        cpn = _ns_to_cycles(pts)
        tiling = [s for s in sizes if not shape_overlaps(copy_shape(s, widest))]
        g = {"points": evidence_keys(pts), "move_bytes": m, "widest": widest, "sizes": sizes, "forwarding": [],
             "failing": [], "uncertain": [], "by_size": {}, "ratio": None, "ci_low": None,
             "ci_high": None, "reference_cycles": None, "failing_cycles": None,
             "penalty_cycles": None, "compared": False}
        if tiling:
            fastest = min(by_size[s]["median"] for s in tiling)
            ref = [s for s in tiling if by_size[s]["median"] < fail_ratio * fastest]
            g["forwarding"] = list(ref)
            ref_vals = pooled_values([by_size[s] for s in ref])
            ref_med = float(np.median(ref_vals))
            for s in sizes:
                if s in ref:
                    g["by_size"][s] = {"status": "forwards", "reference": True}
                    continue
                r = stats.ratio_of_medians(by_size[s]["values"], ref_vals)
                if r["ratio"] >= fail_ratio and r["ci_low"] > 1 + e:
                    status = "fails"
                elif r["ci_high"] < fail_ratio:
                    status = "forwards"
                else:
                    status = "uncertain"
                {"fails": g["failing"], "forwards": g["forwarding"],
                 "uncertain": g["uncertain"]}[status].append(s)
                g["compared"] = True
                g["by_size"][s] = {
                    "status": status, "ratio": r["ratio"], "ci_low": r["ci_low"],
                    "ci_high": r["ci_high"],
                    "extra_cycles": ((by_size[s]["median"] - ref_med) * cpn) if cpn else None}
            g["forwarding"].sort()
            g["uncertain"].sort()
            if cpn:
                g["reference_cycles"] = ref_med * cpn
            if g["failing"]:
                fail_vals = pooled_values([by_size[s] for s in g["failing"]])
                r = stats.ratio_of_medians(fail_vals, ref_vals)
                g["ratio"] = r["ratio"]
                if min(r["n_a"], r["n_b"]) >= threshold("min_ci_samples"):
                    g.update(ci_low=r["ci_low"], ci_high=r["ci_high"])
                if cpn:
                    g["failing_cycles"] = float(np.median(fail_vals)) * cpn
                    g["penalty_cycles"] = g["failing_cycles"] - g["reference_cycles"]
        else:
            g["uncertain"] = [s for s in sizes if shape_overlaps(copy_shape(s, widest))]
            for s in g["uncertain"]:
                g["by_size"][s] = {"status": "not compared: no size copied with the same "
                                             "moves that tile the entry was measured"}
            # single moves (1 byte; or only tiling sizes measured) have nothing to fail
            g["forwarding"] = []
        out.append(g)
    return out


def contained_rule(store, load, offset):
    """For a smaller load inside its store, the rule that decides forwarding on
    common cores (Agner Fog, microarchitecture guide, "store forwarding"): a
    small load inside one aligned 8 bytes or crossing an 8-byte boundary, a
    vector load at a multiple of 16 or elsewhere, a load from the upper half
    of a 64-byte store.  None for other cells."""
    if cell_kind(store, load, offset) != "contained" or load >= store:
        return None
    if store == 64 and offset >= 32:
        return "load from the upper half of a 64-byte store"
    if load <= 8:
        return ("small load crossing an 8-byte boundary"
                if offset // 8 != (offset + load - 1) // 8
                else "small load inside one aligned 8 bytes")
    return "vector load at a multiple of 16" if offset % 16 == 0 else \
        "vector load at another offset"


def store_class(store):
    """'gpr' for general-register stores (<= 8 bytes), 'vector' above."""
    return "gpr" if store <= 8 else "vector"


def matrix_classes(cells, fail_ratio=FAIL_RATIO):
    """Which matrix cells fail to forward, judged per path.

    `cells`: {(store, load, offset): point}.  A load that reads bytes its
    store did not write (cell_kind 'partial') cannot be forwarded by any x86
    core (the load must lie inside the store: Intel Optimization Reference
    Manual, "Store Forwarding"; AMD Software Optimization Guide for family
    19h, "Store-to-Load Forwarding Restrictions"), so the partial cells of a
    path give its failure level: loads of the same width from stores of the
    same class (general register or vector), falling back to the same load
    width, then to all partial cells.  A cell forwards when even the top of
    its CI is `fail_ratio` times faster than that level, fails when even the
    bottom of its CI is within `fail_ratio` of it, and is uncertain between.
    A level from the path's own cells, not a split of all cells into two
    levels: a renamed 4-byte pair at 1 cycle, a vector forward at 9 and a
    failure at 20 are three levels, and the two-level split put the 9-cycle
    forwards with the failures.

    Returns ({cell: status}, {cell: failure level ns or None})."""
    partial = {c: p for c, p in cells.items() if cell_kind(*c) == "partial" and p.get("median")}

    def level(pred):
        v = [p["median"] for c, p in partial.items() if pred(c)]
        return float(np.median(v)) if v else None

    status, levels = {}, {}
    for c, p in cells.items():
        s, l, _ = c
        f = (level(lambda x: x[1] == l and store_class(x[0]) == store_class(s))
             or level(lambda x: x[1] == l) or level(lambda x: True))
        levels[c] = f
        med = p.get("median")
        if f is None or not med:
            status[c] = "uncertain"
            continue
        hi = p.get("ci_high") or med
        lo = p.get("ci_low") or med
        if f / hi >= fail_ratio:
            status[c] = "forwards"
        elif f / max(lo, 1e-12) < fail_ratio:
            status[c] = "fails"
        else:
            status[c] = "uncertain"
    return status, levels


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


def attach_store_forward_counter(lab):
    """Add the blocked-forwarding event to the Lab's hardware counter group
    (read with every sample); returns a one-line note of what happened."""
    from ..machine import cpu_identity
    event = store_forward_event(*cpu_identity(lab.cpuid))
    if event is None:
        return "not available: no encoding known for this CPU model"
    return lab.perf.add_raw_event(COUNTER_NAME, event["config"])


# ---- running kernels directly (verification and tests) -------------------

def run_kernel(kernels, name, buf, dst_off, src, size, value, count, aux):
    """One call of a kernel row (kernels = memfx._lab.kernel_table())."""
    from .._lab import call_kernel
    return call_kernel(kernels[name].index, buf, dst_off, src, 0, size, value, count, aux)


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
    from .._lab import isa_supported
    return isa_supported(isa)


@register
class StoreForward(Experiment):
    name = "store-forward"
    order = 50
    title = "Store-to-load forwarding: entry copies, the forwarding matrix, two stores"
    question = ("When does a load get its bytes from an older store in flight, and what does "
                "it cost when it cannot (e.g. a 28-byte entry copied with overlapping moves)?")
    seeds = (SEED,)
    arms = ENTRY_ARMS + ("matrix",) + PAIR_ARMS
    questions = (
        Question("store_forward.entry_28_vs_32",
                 "Is a 28-byte entry, copied with two overlapping 16-byte moves, slower than a "
                 "32-byte one, as in the seed?", "x", SEED,
                 "ratio of medians of ns per entry, 28 vs 32 bytes, moves of up to 16 bytes, in "
                 "the seed's append loop (the dependent copy loop when append was not run)",
                 better=LOWER, headline=True, band=EFFECT_BAND),
        Question("store_forward.failing_entry_sizes",
                 "Which entry sizes fail to forward when copied the way compilers do, and what "
                 "does a failure cost?", "x", SEED,
                 "per move width, each size whose moves overlap vs the sizes copied with the "
                 "same moves that tile the entry (ratio of medians; fails at >= 1.5x); value: "
                 "the failing sizes of the 16-byte-move path vs its forwarding sizes",
                 better=LOWER),
        Question("store_forward.fix_in_registers",
                 "With the entry kept in registers and stored with the same moves (the seed's "
                 "fix), is a 28-byte entry still slower than a 32-byte one?", "x", SEED,
                 "ratio of medians, registers arm, 28 vs 32 bytes, moves of up to 16 bytes",
                 better=LOWER, band=EFFECT_BAND),
        Question("store_forward.matrix",
                 "Which store/load sizes and offsets fail to forward, and what does a failure "
                 "cost?", "cycles", SEED,
                 "each cell measured vs the failure level of loads of its width from stores of "
                 "its class (loads reading past their store); penalty: failing cell minus the "
                 "forwarding cells of the same store and load sizes", better=LOWER),
        Question("store_forward.split_penalty",
                 "Does a 16-byte load spanning two in-flight 16-byte stores (at 0 and 12, the "
                 "seed's shape) fail to forward, and what does it cost?", "cycles", SEED,
                 "difference of medians, load spanning both stores vs a load inside the younger "
                 "store, in one cell; verdict from the ratio's CI", better=LOWER),
        Question("store_forward.blocked_per_entry",
                 "How many loads are blocked from forwarding per 28-byte entry copy "
                 "(ld_blocks.store_forward or AMD's equivalent)?", "per entry", SEED,
                 "median over samples of the counter / entries copied", better=NEITHER),
    )
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
    # the entry-size curve (every sample; shaded: the sizes whose copy with
    # 16-byte moves fails to forward), the two-store sweep, and one heatmap
    # per load size: rows store size, columns load offset, colour = round trip
    plots = (
        PlotSpec("entry", "entry copies: ns per entry by entry size", x="entry_bytes",
                 series=("arm", "widest"),
                 hide_constant=True, select={"part": "entry"}, xticks=tuple(range(0, 65, 4)),
                 xlabel="entry size S (bytes)", ylabel="ns per entry",
                 marks=(Mark("store_forward.failing_entry_sizes", details=True,
                             at="failing_sizes", where={"widest": 16}, band=True,
                             legend="fails to forward (moves of up to 16 B)"),)),
        PlotSpec("two_stores", "two stores, then one 16-byte load", x="second_store_offset",
                 select={"part": "two_stores"},
                 xlabel="second 16-byte store at offset d (first at 0)",
                 ylabel="ns per round trip"),
        PlotSpec("matrix", "store-to-load forwarding", kind="heatmap", x="load_offset",
                 y_param="store_bytes", select={"part": "matrix"}, facets=("load_bytes",),
                 facet_title="load {load_bytes} B", value="cycles_est", clip_percentile=98,
                 xlabel="load offset (bytes)", y_axis_label="store size (bytes)",
                 ylabel="store→load round trip"),
    )

    presets = {
        "quick": {"samples": 5, "min_sample_ms": 0.2, "offsets": "edges"},   # x 3 replicas
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
        copy_paths = self._copy_paths(data)
        out = [self._entry_28_vs_32(data, copy_paths), self._failing_sizes(data, copy_paths),
               self._fix_in_registers(data), self._matrix(data), self._split_penalty(data),
               self._blocked_per_entry(data)]
        return [a for a in out if a is not None]

    def _entry_point(self, data, arm, widest, size):
        pts = [p for p in data.select(arm, part="entry", widest=widest, entry_bytes=size)
               if p.get("values")]
        return pts[0] if pts else None

    def _widths(self, data):
        return sorted({p["params"]["widest"] for p in data.select(None, part="entry")})

    def _copy_paths(self, data):
        """{widest: entry_paths(...)} of the dependent copy arm."""
        out = {}
        for w in self._widths(data):
            by_size = {p["params"]["entry_bytes"]: p
                       for p in data.select("copy", part="entry", widest=w) if p.get("values")}
            if by_size:
                out[w] = entry_paths(by_size, w)
        return out

    @staticmethod
    def _status(paths, widest, size):
        for g in paths.get(widest, ()):
            if size in g["by_size"]:
                return g["by_size"][size]["status"]
        return None

    def _seed_width(self, widths):
        return SEED_WIDEST if SEED_WIDEST in widths else (min(widths) if widths else None)

    def _entry_28_vs_32(self, data, paths):
        q = self.declared("store_forward.entry_28_vs_32")
        widths = self._widths(data)
        details, chosen = [], None
        for w in widths:
            for arm in ENTRY_ARMS:
                a = self._entry_point(data, arm, w, SEED_ENTRY)
                b = self._entry_point(data, arm, w, SEED_REFERENCE)
                if not (a and b):
                    continue
                r = stats.ratio_of_medians(a["values"], b["values"])
                enough = min(r["n_a"], r["n_b"]) >= threshold("min_ci_samples")
                details.append({
                    "label": f"{arm}, moves of up to {w} B: {SEED_ENTRY} B "
                             f"({_moves(SEED_ENTRY, w)}) vs {SEED_REFERENCE} B "
                             f"({_moves(SEED_REFERENCE, w)})",
                    "value": r["ratio"], "unit": "x",
                    "ci_low": r["ci_low"] if enough else None,
                    "ci_high": r["ci_high"] if enough else None,
                    "verdict": effect_verdict(r["ratio"], r["ci_low"], r["ci_high"], r["n_a"],
                                              r["n_b"]),
                    "arm": arm, "widest": w, "cycles_28": a.get("cycles_est"),
                    "cycles_32": b.get("cycles_est"),
                    "points": evidence_keys([a, b])})
                if w == self._seed_width(widths) and arm != "registers" and (
                        chosen is None or arm == "append"):
                    chosen = (arm, w, a, b)
        if chosen is None:
            return not_measured(q, f"the sweep did not measure both {SEED_ENTRY}- and "
                                   f"{SEED_REFERENCE}-byte entries in the copy or append arm")
        arm, w, a, b = chosen
        where = {"append": "in the seed's append loop", "copy": "in dependent round trips",
                 "registers": "stored from registers"}[arm]
        ans = effect(q, a["values"], b["values"], "", evidence=evidence_keys([a, b]),
                     details=details, estimator=f"ratio of medians, {arm} arm, moves of up to "
                                                f"{w} B")
        # What this run measured about the two sizes' forwarding, in round trips.
        s28, s32 = self._status(paths, w, SEED_ENTRY), self._status(paths, w, SEED_REFERENCE)
        if s28 and s32:
            fwd = (f"; in this run's round trips {SEED_ENTRY} B {_status_words(s28)} and "
                   f"{SEED_REFERENCE} B {_status_words(s32)}")
        else:
            fwd = "; the dependent copy arm was not measured at both sizes (no forwarding verdict)"
        # no leading yes/no: the verdict is shown beside the sentence
        ans.because = (f"A {SEED_ENTRY}-byte entry ({_moves(SEED_ENTRY, w)}) costs "
                       f"{_x(ans)} a {SEED_REFERENCE}-byte one ({_moves(SEED_REFERENCE, w)}) "
                       f"{where}{fwd}")
        return ans

    def _failing_sizes(self, data, paths):
        q = self.declared("store_forward.failing_entry_sizes")
        if not paths:
            return not_measured(q, "the entry part (dependent copy arm) was not measured")
        details, texts = [], {}
        for w, groups in sorted(paths.items()):
            for g in groups:
                m = g["move_bytes"]
                if not g["compared"]:
                    continue
                fail, fwd, unc = g["failing"], g["forwarding"], g["uncertain"]
                if fail and g["penalty_cycles"] is not None:
                    text = (f"{m}-byte moves: {as_ranges(fail)} ({g['failing_cycles']:.0f} vs "
                            f"{g['reference_cycles']:.0f} cycles for {as_ranges(fwd)})")
                elif fail:
                    text = (f"{m}-byte moves: {as_ranges(fail)} ({_fmt(g['ratio'], 'x')} "
                            f"{as_ranges(fwd)})")
                else:
                    text = f"{m}-byte moves: none (vs {as_ranges(fwd)})"
                if unc:
                    text += f"; uncertain {as_ranges(unc)}"
                details.append({
                    "label": f"moves of {m} B (widest {w} B): " + (
                        f"{as_ranges(fail)} fail to forward" if fail else "none fails"),
                    "value": g["ratio"], "unit": "x",
                    "ci_low": g["ci_low"], "ci_high": g["ci_high"],
                    "verdict": DETECTED if fail else (INCONCLUSIVE if unc else NOT_DETECTED),
                    "widest": w, "move_bytes": m, "sizes_measured": as_ranges(g["sizes"]),
                    "failing_sizes": fail, "forwarding_sizes": fwd, "uncertain_sizes": unc,
                    "reference_cycles": g["reference_cycles"],
                    "failing_cycles": g["failing_cycles"],
                    "penalty_cycles": g["penalty_cycles"],
                    "fails_exactly_where_moves_overlap": sorted(fail) == sorted(
                        s for s in g["sizes"] if shape_overlaps(copy_shape(s, w))),
                    "by_size": {str(s): v for s, v in sorted(g["by_size"].items())},
                    "points": g["points"]})
                texts.setdefault(w, []).append(text)
        if not details:
            return not_measured(q, "no move width had both a size whose moves overlap and a "
                                   "size whose moves tile the entry (the reference) measured")
        w0 = self._seed_width(list(paths))
        if w0 not in texts:         # the seed's widest compared nothing: the others
            w0 = min(texts)
        # the headline: the seed's path (16-byte moves) when it fails, else the
        # widest moves that do
        candidates = [g for g in paths[w0] if g["compared"] and g["failing"]]
        headline = next((g for g in candidates if g["move_bytes"] == SEED_WIDEST),
                        candidates[-1] if candidates else None)
        verdicts = [d["verdict"] for d in details if d["widest"] == w0]
        verdict = (DETECTED if DETECTED in verdicts else
                   INCONCLUSIVE if INCONCLUSIVE in verdicts else NOT_DETECTED)
        lead = {DETECTED: "Sizes that fail to forward",
                NOT_DETECTED: "No size fails to forward",
                INCONCLUSIVE: "No size clearly fails to forward, some are uncertain"}[verdict]
        # widest moves (the seed's path) first
        because = (f"{lead}, by move width, vs the sizes whose moves tile the entry (moves "
                   f"of up to {w0} B): " + "; ".join(reversed(texts[w0])))
        return Answer(question=q.id, verdict=verdict, because=because,
                      value=headline["ratio"] if headline else None,
                      ci_low=headline["ci_low"] if headline else None,
                      ci_high=headline["ci_high"] if headline else None,
                      evidence=[k for d in details for k in d["points"]], details=details,
                      estimator=("ratio of medians of the pooled failing sizes vs the pooled "
                                 "forwarding sizes of the same move width"
                                 + (f" ({headline['move_bytes']}-byte moves)" if headline
                                    else "")))

    def _fix_in_registers(self, data):
        q = self.declared("store_forward.fix_in_registers")
        widths = self._widths(data)
        w = self._seed_width(widths)
        a = self._entry_point(data, "registers", w, SEED_ENTRY) if w else None
        b = self._entry_point(data, "registers", w, SEED_REFERENCE) if w else None
        if not (a and b):
            return not_measured(q, f"the registers arm was not measured at both {SEED_ENTRY} "
                                   f"and {SEED_REFERENCE} bytes")
        details = []
        for arm in ("registers", "append", "copy"):
            x = self._entry_point(data, arm, w, SEED_ENTRY)
            y = self._entry_point(data, arm, w, SEED_REFERENCE)
            if x and y:
                details.append({"label": f"{arm}: {SEED_ENTRY} B vs {SEED_REFERENCE} B",
                                "value": float(np.median(x["values"]) / np.median(y["values"])),
                                "unit": "x", "ci_low": None, "ci_high": None, "arm": arm,
                                "ns_28": x["median"], "ns_32": y["median"],
                                "cycles_28": x.get("cycles_est"), "cycles_32": y.get("cycles_est"),
                                "points": evidence_keys([x, y])})
        ans = effect(q, a["values"], b["values"], "", evidence=evidence_keys([a, b]),
                     details=details, estimator=f"ratio of medians, registers arm, moves of up "
                                                f"to {w} B")
        through = next((d for d in details if d["arm"] in ("append", "copy")), None)
        ref = (f" (through memory, {through['arm']} arm: {through['value']:.2f}x)"
               if through else "")
        ans.because = ({NOT_DETECTED: "The fix removes the penalty",
                        DETECTED: ("The penalty remains" if ans.value > 1 else
                                   "With the fix the 28-byte entry is faster"),
                        INCONCLUSIVE: "Not clear whether the fix removes the penalty"}.get(
                           ans.verdict, "")
                       + f"; from registers a {SEED_ENTRY}-byte entry costs {_x(ans)} a "
                         f"{SEED_REFERENCE}-byte one{ref}")
        return ans

    def _matrix(self, data):
        q = self.declared("store_forward.matrix")
        pts = [p for p in data.select("matrix", part="matrix") if p.get("median")]
        if not pts:
            return not_measured(q, "the matrix part was not measured")
        cell = lambda p: (p["params"]["store_bytes"], p["params"]["load_bytes"],  # noqa: E731
                          p["params"]["load_offset"])
        cells = {cell(p): p for p in pts}
        status, levels = matrix_classes(cells)
        if all(v is None for v in levels.values()):
            return not_measured(q, f"none of the {len(pts)} cells measured has a load reading "
                                   f"past its store: no failure level to compare with")
        cpn = _ns_to_cycles(pts)
        scale, unit = (cpn, "cycles") if cpn else (1.0, "ns")
        fwd = {c for c, s in status.items() if s == "forwards"}
        fail = {c for c, s in status.items() if s == "fails"}
        unc = {c for c, s in status.items() if s == "uncertain"}

        def reference(s, l):
            for pick in (lambda c: c[:2] == (s, l),
                         lambda c: c[1] == l and store_class(c[0]) == store_class(s),
                         lambda c: c[1] == l, lambda c: True):
                same = [cells[c]["median"] for c in fwd if pick(c)]
                if same:
                    return float(np.median(same))
            return None

        penalties = {}
        for c in fail:
            ref = reference(c[0], c[1])
            if ref is not None:
                penalties[c] = (cells[c]["median"] - ref) * scale
        details = []
        kinds = {}
        for c in cells:
            d = kinds.setdefault(cell_kind(*c), {"cells": 0, "forwards": 0, "fails": 0,
                                                 "uncertain": 0})
            d["cells"] += 1
            d[status[c]] += 1
        for k, d in sorted(kinds.items()):
            details.append({"label": f"{k} loads: {d['fails']} of {d['cells']} measured fail",
                            "value": d["fails"] / d["cells"], "unit": "share", "ci_low": None,
                            "ci_high": None,
                            "verdict": DETECTED if d["fails"] else (
                                INCONCLUSIVE if d["uncertain"] else NOT_DETECTED),
                            "kind": k, **d})
        # loads inside a bigger store, by the rule that decides them on common cores
        rules = {}
        for c in cells:
            rule = contained_rule(*c)
            if rule:
                d = rules.setdefault(rule, {"cells": 0, "forwards": 0, "fails": 0,
                                            "uncertain": 0})
                d["cells"] += 1
                d[status[c]] += 1
        for rule, d in sorted(rules.items()):
            details.append({"label": f"{rule}: {d['fails']} of {d['cells']} measured fail",
                            "value": d["fails"] / d["cells"], "unit": "share", "ci_low": None,
                            "ci_high": None,
                            "verdict": DETECTED if d["fails"] else (
                                INCONCLUSIVE if d["uncertain"] else NOT_DETECTED),
                            "rule": rule, **d})
        for s, l in sorted({c[:2] for c in cells}):
            mine = sorted(c for c in cells if c[:2] == (s, l))
            f_off = [c[2] for c in mine if c in fail]
            pen = [penalties[c] for c in mine if c in penalties]
            details.append({
                "label": f"store {s} B / load {l} B: "
                         + (f"fails at offsets {as_ranges(f_off)}" if f_off else
                            "forwards at every offset measured"
                            if all(c in fwd for c in mine) else "no failure measured"),
                "value": float(np.median(pen)) if pen else None, "unit": unit,
                "ci_low": None, "ci_high": None,
                "verdict": (DETECTED if f_off else INCONCLUSIVE
                            if any(c in unc for c in mine) else NOT_DETECTED),
                "store_bytes": s, "load_bytes": l,
                "offsets_measured": as_ranges([c[2] for c in mine]),
                "failing_offsets": as_ranges(f_off),
                "forwarding_offsets": as_ranges([c[2] for c in mine if c in fwd]),
                "uncertain_offsets": as_ranges([c[2] for c in mine if c in unc]),
                "cycles" if cpn else "ns": {str(c[2]): cells[c]["median"] * scale for c in mine},
                "points": evidence_keys([cells[c] for c in mine])})
        n = len(cells)
        evidence = evidence_keys(pts)
        if penalties:
            ans = measured(q, list(penalties.values()), "", evidence=evidence, details=details,
                           estimator=f"median over failing cells of (cell - the forwarding cells "
                                     f"of the same store/load sizes), {unit}")
            ans.verdict = DETECTED
            part = kinds.get("partial", {})
            cont = kinds.get("contained", {})
            ans.because = (f"{len(fail)} of the {n} cells measured fail to forward "
                           f"({part.get('fails', 0)} of {part.get('cells', 0)} loads reading past "
                           f"their store, {cont.get('fails', 0)} of {cont.get('cells', 0)} loads "
                           f"inside it), costing +{ans.value:.1f} {unit} over the cells that "
                           f"forward" + (f"; {len(unc)} uncertain" if unc else ""))
            return ans
        verdict = INCONCLUSIVE if unc else NOT_DETECTED
        return Answer(question=q.id, verdict=verdict,
                      because=(f"None of the {n} cells measured fails to forward"
                               + (f" ({len(unc)} uncertain)" if unc else "")),
                      evidence=evidence, details=details, estimator="")

    def _split_penalty(self, data):
        q = self.declared("store_forward.split_penalty")
        rows = {}
        for d in TWO_STORE_OFFSETS:
            a = data.select("load_spans_both", part="two_stores", second_store_offset=d)
            b = data.select("load_in_younger", part="two_stores", second_store_offset=d)
            if a and b and a[0]["values"] and b[0]["values"]:
                rows[d] = (a[0], b[0])
        d = SEED_SECOND_STORE if SEED_SECOND_STORE in rows else min(
            (x for x in rows if x < 16), default=None, key=lambda x: abs(x - SEED_SECOND_STORE))
        if d is None:
            return not_measured(q, "the two_stores part was not measured at an overlapping "
                                   "second store (d < 16)")
        span, young = rows[d]
        cpn = cycles_per_ns(span) or cycles_per_ns(young)
        scale, unit = (cpn, "cycles") if cpn else (1.0, "ns")
        a = np.asarray(span["values"], float) * scale
        b = np.asarray(young["values"], float) * scale
        diff, lo, hi = median_difference(a, b)
        r = stats.ratio_of_medians(a, b)
        verdict = effect_verdict(r["ratio"], r["ci_low"], r["ci_high"], r["n_a"], r["n_b"])
        details = []
        for x, (p, y) in sorted(rows.items()):
            c = cycles_per_ns(p) or cpn or 1.0
            details.append({"label": f"second store at {x}" + (" (no overlap: control)"
                                                                  if x >= 16 else ""),
                            "value": (p["median"] - y["median"]) * c, "unit": unit,
                            "ci_low": None, "ci_high": None, "second_store_offset": x,
                            "spanning": p["median"] * c, "in_younger": y["median"] * c,
                            "ratio": p["median"] / y["median"],
                            "points": evidence_keys([p, y])})
        if min(a.size, b.size) < threshold("min_ci_samples"):
            lo = hi = None
        shape = f"16-byte stores at 0 and {d}, 16-byte load at 0"
        if verdict == DETECTED and diff > 0:
            because = (f"A load spanning both stores costs +{diff:.1f} {unit} over a load "
                       f"inside the younger one ({shape}; {r['ratio']:.2f}x)")
        elif verdict == NOT_DETECTED:
            because = f"A load spanning both stores forwards ({shape}: {diff:+.1f} {unit})"
        elif verdict == DETECTED:
            because = (f"A load spanning both stores is faster ({shape}: {diff:+.1f} "
                       f"{unit})")
        else:
            because = (f"A load spanning both stores: {diff:+.1f} {unit} vs a load inside the younger store "
                       f"({shape})")
        return Answer(question=q.id, verdict=verdict, because=because, value=diff, ci_low=lo,
                      ci_high=hi, evidence=evidence_keys([span, young]), details=details,
                      estimator=f"difference of medians (load spanning both - load inside the "
                                f"younger store), {unit}, bootstrap CI")

    def _blocked_per_entry(self, data):
        q = self.declared("store_forward.blocked_per_entry")
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
        if not per_size:
            pmu = (data.machine or {}).get("pmu") or {}
            why = ("no encoding of the event is known for this CPU model" if event is None
                   else pmu.get("reason") or "no hardware PMU")
            return not_measured(q, f"blocked store forwards not counted: {why}")
        medians = {k: float(np.median(v)) for k, v in sorted(per_size.items())}
        size = SEED_ENTRY if SEED_ENTRY in per_size else next(iter(medians))
        details = [{"label": f"{k} B entry", "value": v, "unit": "per entry", "ci_low": None,
                    "ci_high": None, "entry_bytes": k} for k, v in medians.items()]
        ans = measured(q, per_size[size], "", details=details,
                       estimator=f"median of {event['name']} (raw "
                                 f"0x{event['config']:04x}) / entries, per sample")
        ans.because = (f"{ans.value:.2f} blocked forwards per {size}-byte entry copy "
                       f"({event['name']}, raw 0x{event['config']:04x}; "
                       f"encoding from {event['source']})")
        return ans


def _moves(size, widest):
    return " + ".join(f"{w}@{o}" for o, w in copy_shape(size, widest))


def _x(ans):
    if ans.value is None:
        return "?"
    ci = (f" [{ans.ci_low:.2f}, {ans.ci_high:.2f}]" if ans.ci_low is not None
          and ans.ci_high is not None else "")
    return f"{ans.value:.2f}x{ci}"


def _fmt(v, unit):
    return "?" if v is None else f"{v:.2f}{unit}"


def _status_words(status):
    return {"fails": "fails to forward", "forwards": "forwards"}.get(status, "is uncertain")



__all__ = ["StoreForward", "copy_shape", "shape_overlaps", "shape_table", "matrix_cells",
           "valid_offsets", "edge_offsets", "entry_paths", "matrix_classes", "move_width",
           "simulate_forward", "simulate_two_stores", "store_forward_event"]
