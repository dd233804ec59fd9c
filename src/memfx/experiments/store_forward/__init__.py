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

The copy shapes, the matrix and the kernel checks are in kernels.py; the
answers, the classification by path and the pure analysis helpers in
analysis.py (both re-exported here).
"""
from __future__ import annotations

import mmap

import numpy as np

from ...model.answers import (
    EFFECT_BAND,
    LOWER,
    NEITHER,
    Question,
)
from ...model.errors import ParamError
from ...model.plotspec import Mark, PlotSpec
from ..base import Experiment, Param, Point, Trial, register
from .analysis import (  # noqa: F401
    _INTEL_UMASK_02,
    _INTEL_UMASK_82,
    COUNTER_NAME,
    ENTRY_ARMS,
    FAIL_RATIO,
    SEED_ENTRY,
    SEED_REFERENCE,
    SEED_SECOND_STORE,
    SEED_WIDEST,
    TWO_STORE_OFFSETS,
    StoreForwardAnswers,
    _moves,
    _ns_to_cycles,
    _status_words,
    _x,
    as_ranges,
    contained_rule,
    cycles_per_ns,
    entry_paths,
    matrix_classes,
    median_difference,
    move_width,
    store_class,
    store_forward_event,
)
from .kernels import (  # noqa: F401
    ENTRY_KERNEL_PREFIX,
    ENTRY_MAX_BYTES,
    MATRIX_SIZES,
    MAX_MOVES,
    MOVE_ISA,
    SLOT_DISTANCE,
    WINDOW_BYTES,
    _isa_ok,
    cell_kind,
    check_entry,
    check_forward,
    check_two_stores,
    copy_shape,
    edge_offsets,
    entry_kernel,
    entry_pattern,
    forward_isa,
    forward_kernel,
    matrix_cells,
    run_kernel,
    shape_overlaps,
    shape_table,
    simulate_forward,
    simulate_two_stores,
    valid_offsets,
)

SEED = "003"
PAIR_ARMS = ("load_spans_both", "load_in_younger")
WIDEST_ISA = {16: "sse2", 32: "avx", 64: "avx512f"}
# One run length per sample instead of the N/2N difference: a call costs
# ~100 ns against samples of >= 50 us (< 0.2 %), while some cells switch
# between two speeds from one call to the next (the forwarding predictor
# of recent cores, e.g. a 4-byte store/load pair at 2 or 5 cycles), and a
# difference of two medians taken at two lengths breaks on such bimodal
# cells (it even went negative here).
SAMPLE_DIFFERENCE = False


# ---- the hardware counter -------------------------------------------------


def attach_store_forward_counter(lab):
    """Add the blocked-forwarding event to the Lab's hardware counter group
    (read with every sample); returns a one-line note of what happened."""
    from ...lab.machine import cpu_identity
    event = store_forward_event(*cpu_identity(lab.cpuid))
    if event is None:
        return "not available: no encoding known for this CPU model"
    return lab.perf.add_raw_event(COUNTER_NAME, event["config"])


@register
class StoreForward(StoreForwardAnswers, Experiment):
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
                 better=LOWER, band=EFFECT_BAND,
                 # host-shared: the two arms differ by a few per cent of a loop bound
                 # by the core's store buffer, which a guest's vCPU shares with
                 # whatever the host runs on the same core's other hardware thread;
                 # its value moved between host states minutes apart beyond its
                 # replicas' spread in the A/As (docs/stability.md)
                 host_shared=True),
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
        "full": {"samples": 7, "min_sample_ms": 0.5, "widest": "16,32,64"},
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
            points += [Point("matrix", {"part": "matrix", "store_bytes": s, "load_bytes": ld,
                                        "load_offset": o}) for s, ld, o in cells]
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
            s, ld, o = p["store_bytes"], p["load_bytes"], p["load_offset"]
            return Trial(forward_kernel(s, ld), size=0, dst=line, aux=o, value=0x0123456789ABCDEF,
                         metric="time", difference=SAMPLE_DIFFERENCE, warmup=2000,
                         extra={"kind": cell_kind(s, ld, o)})
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
                for s, ld, o in matrix_cells(params["store_sizes"], params["load_sizes"],
                                            params["offsets"]):
                    if kernels[forward_kernel(s, ld)].supported:
                        check_forward(kernels, s, ld, o, int(rng.integers(1, 1 << 62)), 3, buf, rng)
            if "two_stores" in parts:
                for d in TWO_STORE_OFFSETS:
                    for o in (0, d):
                        check_two_stores(kernels, d, o, int(rng.integers(1, 1 << 62)), 3, buf, rng)
        finally:
            buf.close()
        lab.perf.notes["store_forward"] = attach_store_forward_counter(lab)


__all__ = ["StoreForward", "copy_shape", "shape_overlaps", "shape_table", "matrix_cells",
           "valid_offsets", "edge_offsets", "entry_paths", "matrix_classes", "move_width",
           "simulate_forward", "simulate_two_stores", "store_forward_event"]
