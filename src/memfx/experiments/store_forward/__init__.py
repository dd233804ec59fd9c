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

The copy shapes, the matrix and the kernel checks are in
_store_forward_kernels.py, the classification by path and the pure analysis
helpers in _store_forward_analysis.py (both re-exported here).
"""
from __future__ import annotations

import mmap

import numpy as np

from ...model import stats
from ...model.answers import (
    EFFECT_BAND,
    LOWER,
    NEITHER,
    Answer,
    Question,
    effect,
    evidence_keys,
    measured,
    not_measured,
)
from ...model.details import detail
from ...model.errors import ParamError
from ...model.findings import DETECTED, INCONCLUSIVE, NOT_DETECTED, effect_verdict, threshold
from ...model.plotspec import Mark, PlotSpec
from ...model.units import format_estimate, format_value
from ..base import Experiment, Param, Point, Trial, register
from .analysis import (  # noqa: F401
    FAIL_RATIO,
    _ns_to_cycles,
    as_ranges,
    contained_rule,
    cycles_per_ns,
    entry_paths,
    matrix_classes,
    median_difference,
    move_width,
    store_class,
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
TWO_STORE_OFFSETS = tuple(range(1, 17))   # second store's offset d; 16 = no overlap
SEED_ENTRY, SEED_REFERENCE = 28, 32
SEED_WIDEST = 16             # the seed's compiler copied with 16-byte (SSE) moves
SEED_SECOND_STORE = 12       # the seed's 28-byte copy: moves at 0 and 12
ENTRY_ARMS = ("copy", "append", "registers")
PAIR_ARMS = ("load_spans_both", "load_in_younger")
WIDEST_ISA = {16: "sse2", 32: "avx", 64: "avx512f"}
COUNTER_NAME = "ld_blocks_store_forward"
# One run length per sample instead of the N/2N difference: a call costs
# ~100 ns against samples of >= 50 us (< 0.2 %), while some cells switch
# between two speeds from one call to the next (the forwarding predictor
# of recent cores, e.g. a 4-byte store/load pair at 2 or 5 cycles), and a
# difference of two medians taken at two lengths breaks on such bimodal
# cells (it even went negative here).
SAMPLE_DIFFERENCE = False


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
    from ...lab.machine import cpu_identity
    event = store_forward_event(*cpu_identity(lab.cpuid))
    if event is None:
        return "not available: no encoding known for this CPU model"
    return lab.perf.add_raw_event(COUNTER_NAME, event["config"])


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
                details.append(detail(
                    f"{arm}, moves of up to {w} B: {SEED_ENTRY} B "
                    f"({_moves(SEED_ENTRY, w)}) vs {SEED_REFERENCE} B "
                    f"({_moves(SEED_REFERENCE, w)})",
                    value=r["ratio"], unit="x",
                    ci_low=r["ci_low"] if enough else None,
                    ci_high=r["ci_high"] if enough else None,
                    verdict=effect_verdict(r["ratio"], r["ci_low"], r["ci_high"], r["n_a"],
                                           r["n_b"], band=q.no_effect_band()),
                    arm=arm, widest=w, cycles_28=a.get("cycles_est"),
                    cycles_32=b.get("cycles_est"),
                    points=evidence_keys([a, b])))
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
                    text = (f"{m}-byte moves: {as_ranges(fail)} ({format_value(g['ratio'], 'x')} "
                            f"{as_ranges(fwd)})")
                else:
                    text = f"{m}-byte moves: none (vs {as_ranges(fwd)})"
                if unc:
                    text += f"; uncertain {as_ranges(unc)}"
                details.append(detail(
                    f"moves of {m} B (widest {w} B): " + (
                        f"{as_ranges(fail)} fail to forward" if fail else "none fails"),
                    value=g["ratio"], unit="x",
                    ci_low=g["ci_low"], ci_high=g["ci_high"],
                    verdict=DETECTED if fail else (INCONCLUSIVE if unc else NOT_DETECTED),
                    widest=w, move_bytes=m, sizes_measured=as_ranges(g["sizes"]),
                    failing_sizes=fail, forwarding_sizes=fwd, uncertain_sizes=unc,
                    reference_cycles=g["reference_cycles"],
                    failing_cycles=g["failing_cycles"],
                    penalty_cycles=g["penalty_cycles"],
                    fails_exactly_where_moves_overlap=sorted(fail) == sorted(
                        s for s in g["sizes"] if shape_overlaps(copy_shape(s, w))),
                    by_size={str(s): v for s, v in sorted(g["by_size"].items())},
                    points=g["points"]))
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
                details.append(detail(f"{arm}: {SEED_ENTRY} B vs {SEED_REFERENCE} B",
                                      value=float(np.median(x["values"]) / np.median(y["values"])),
                                      unit="x", ci=None, arm=arm,
                                      ns_28=x["median"], ns_32=y["median"],
                                      cycles_28=x.get("cycles_est"), cycles_32=y.get("cycles_est"),
                                      points=evidence_keys([x, y])))
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

        def reference(s, ld):
            for pick in (lambda c: c[:2] == (s, ld),
                         lambda c: c[1] == ld and store_class(c[0]) == store_class(s),
                         lambda c: c[1] == ld, lambda c: True):
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
            details.append(detail(f"{k} loads: {d['fails']} of {d['cells']} measured fail",
                                  value=d["fails"] / d["cells"], unit="share", ci=None,
                                  verdict=DETECTED if d["fails"] else (
                                      INCONCLUSIVE if d["uncertain"] else NOT_DETECTED),
                                  kind=k, **d))
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
            details.append(detail(f"{rule}: {d['fails']} of {d['cells']} measured fail",
                                  value=d["fails"] / d["cells"], unit="share", ci=None,
                                  verdict=DETECTED if d["fails"] else (
                                      INCONCLUSIVE if d["uncertain"] else NOT_DETECTED),
                                  rule=rule, **d))
        for s, ld in sorted({c[:2] for c in cells}):
            mine = sorted(c for c in cells if c[:2] == (s, ld))
            f_off = [c[2] for c in mine if c in fail]
            pen = [penalties[c] for c in mine if c in penalties]
            details.append(detail(
                f"store {s} B / load {ld} B: "
                + (f"fails at offsets {as_ranges(f_off)}" if f_off else
                   "forwards at every offset measured"
                   if all(c in fwd for c in mine) else "no failure measured"),
                value=float(np.median(pen)) if pen else None, unit=unit, ci=None,
                verdict=(DETECTED if f_off else INCONCLUSIVE
                         if any(c in unc for c in mine) else NOT_DETECTED),
                store_bytes=s, load_bytes=ld,
                offsets_measured=as_ranges([c[2] for c in mine]),
                failing_offsets=as_ranges(f_off),
                forwarding_offsets=as_ranges([c[2] for c in mine if c in fwd]),
                uncertain_offsets=as_ranges([c[2] for c in mine if c in unc]),
                **{"cycles" if cpn else "ns": {str(c[2]): cells[c]["median"] * scale
                                               for c in mine}},
                points=evidence_keys([cells[c] for c in mine])))
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
            details.append(detail(f"second store at {x}" + (" (no overlap: control)"
                                                               if x >= 16 else ""),
                                  value=(p["median"] - y["median"]) * c, unit=unit,
                                  ci=None, second_store_offset=x,
                                  spanning=p["median"] * c, in_younger=y["median"] * c,
                                  ratio=p["median"] / y["median"],
                                  points=evidence_keys([p, y])))
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
        details = [detail(f"{k} B entry", value=v, unit="per entry", ci=None, entry_bytes=k)
                   for k, v in medians.items()]
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
    return format_estimate(ans.value, ans.ci_low, ans.ci_high, "x") or "?"


def _status_words(status):
    return {"fails": "fails to forward", "forwards": "forwards"}.get(status, "is uncertain")



__all__ = ["StoreForward", "copy_shape", "shape_overlaps", "shape_table", "matrix_cells",
           "valid_offsets", "edge_offsets", "entry_paths", "matrix_classes", "move_width",
           "simulate_forward", "simulate_two_stores", "store_forward_event"]
