"""The copy experiment: byte-exact kernels (C verifier and an independent
Python reference), no overlapping regions, and the analysis (crossovers,
best ranges, the rep movsb step) on synthetic curves."""
import math
import random

import numpy as np
import pytest

from memfx.analysis.results import RunData
from memfx.experiments import get_experiment
from memfx.experiments.copy import (
    MODES,
    SIMPLICITY,
    STRATEGIES,
    best_ranges,
    check_no_overlap,
    comparable_sizes,
    fill_sizes,
    find_crossovers,
    find_step,
    geometric_sizes,
    small_sizes,
    ties_by_size,
)
from memfx.lab import _core
from memfx.lab.core import kernel_table
from memfx.lab.lab import Lab
from memfx.model.errors import ParamError

ROWS = kernel_table()
COPY_SET = sorted(n for n, r in ROWS.items() if r.group in ("copy", "set") and r.supported)
EXP = get_experiment("copy")
MACHINE = {"caches": [{"level": 1, "type": "Data", "size_bytes": 48 << 10},
                      {"level": 2, "type": "Unified", "size_bytes": 2 << 20}],
           "memory": {"available_bytes": 8 << 30},
           "flags": {"erms": True, "fsrm": True, "fzrm": False, "fsrs": True, "fsrc": False}}


# ---------------------------------------------------------------- kernels

def test_every_strategy_has_a_row_with_declared_traffic():
    for op in ("copy", "set"):
        for arm in STRATEGIES[op]:
            row = ROWS[f"{op}_{arm}"]
            assert row.group == op and row.op == "call" and row.ops_per_iter == 1
            assert row.write_per_byte == 1 and row.read_per_byte == (1 if op == "copy" else 0)
    assert ROWS["rmw_add_loop"].read_per_byte == 2 and ROWS["rmw_add_loop"].write_per_byte == 1


@pytest.mark.measuring
@pytest.mark.parametrize("name", COPY_SET)
def test_kernel_byte_exact_sizes_0_to_4096_all_misalignments(name):
    """Every size 0..4096 with every src misalignment 0..63 and a dst
    misalignment rotating with the size (all 64 x 64 pairs met), guard bytes
    on both sides untouched, source unchanged; then every one of the 64 x 64
    pairs for sizes 0..160; then each timing mode (aux) with 3 calls."""
    idx = ROWS[name].index
    assert _core.verify_copy(idx, 4096, 64) is None
    assert _core.verify_copy(idx, 160, 64, True) is None
    for aux in (1, 2, 3):
        assert _core.verify_copy(idx, 300, 64, False, aux, 3) is None


@pytest.mark.measuring
def test_verifier_catches_wrong_kernels():
    """The checks must fail on a kernel that is wrong: told one byte too many
    (writes past the end), one too few (last byte missing), or checked
    against another operation's reference."""
    movsb, stosb = ROWS["copy_rep_movsb"].index, ROWS["set_rep_stosb"].index
    assert "wrote past the destination" in _core.verify_copy(movsb, 64, 8, False, 0, 1, None, 1)
    assert "wrong byte" in _core.verify_copy(movsb, 64, 8, False, 0, 1, None, -1)
    assert "wrong byte" in _core.verify_copy(stosb, 64, 8, False, 0, 1, "copy", 0)
    assert "wrong byte" in _core.verify_copy(movsb, 64, 8, False, 0, 1, "set", 0)
    assert "no verifier" in _core.verify_copy(ROWS["chase_ptr"].index, 8, 8)


@pytest.mark.measuring
@pytest.mark.parametrize("name", COPY_SET)
def test_kernel_against_python_reference_through_run(name):
    """The timed path (_core.run) on plain bytearrays, checked with Python
    slicing: random sizes and offsets, 1..3 calls, every mode."""
    row = ROWS[name]
    rng = random.Random(name)
    src = bytearray(rng.getrandbits(8) for _ in range(9000))
    for _ in range(40):
        size = rng.choice([0, 1, 7, 8, 15, 16, 31, 63, 64, 65, 127, 128, 129, 255, 256, 257,
                           1000, 4095, 4096, 4097, rng.randrange(0, 8192)])
        so, do = rng.randrange(0, 64), rng.randrange(0, 64)
        dst = bytearray(b"\xee" * 8300)
        value = rng.randrange(256) | 0xABCD00
        aux = rng.choice(list(MODES.values()) + [3])
        _core.run(row.index, dst, 64 + do, src, so, size, value, rng.randrange(1, 4), aux)
        want = bytes(src[so:so + size]) if row.group == "copy" else bytes([value & 0xFF]) * size
        assert dst[64 + do:64 + do + size] == want, (name, size, so, do, aux)
        assert dst[:64 + do] == b"\xee" * (64 + do)
        assert dst[64 + do + size:] == b"\xee" * (len(dst) - 64 - do - size)


@pytest.mark.measuring
def test_rmw_add_loop_reference():
    row = ROWS["rmw_add_loop"]
    assert _core.verify_copy(row.index, 1024, 64) is None
    a = np.arange(37, dtype=np.uint64) * 3
    b = np.arange(37, dtype=np.uint64) + (1 << 40)
    ab, bb = bytearray(a.tobytes()), bytearray(b.tobytes())
    _core.run(row.index, ab, 0, bb, 0, len(ab), 0, 2, 0)
    assert np.array_equal(np.frombuffer(ab, dtype=np.uint64), a + 2 * b)


# ---------------------------------------------------------------- overlap

def test_check_no_overlap():
    check_no_overlap(0x1000, 0x2000, 0x1000)          # adjacent is fine
    check_no_overlap(0x1000, 0x1000, 0)               # nothing copied
    for src, dst in ((0x1000, 0x1000), (0x1000, 0x1fff), (0x1fff, 0x1000)):
        with pytest.raises(ParamError, match="overlap"):
            check_no_overlap(src, dst, 0x1000)


def _bare_lab():
    lab = Lab.__new__(Lab)       # buffers only: no pinning, no perf counters
    lab.buffers, lab.cache = [], {}
    lab.kernels = ROWS
    return lab


def test_prepare_never_overlaps_and_uses_the_right_kernel():
    lab = _bare_lab()
    params = EXP.resolve("quick", {"max_size": "64K", "src_offset": 5, "dst_offset": 3})
    try:
        for p in EXP.plan(params, MACHINE)[::7]:
            t = EXP.prepare(p, params, lab)
            assert t.kernel == f"{p.params['op']}_{p.arm}"
            assert t.size == p.params["size_bytes"] and t.aux == MODES[p.params["mode"]]
            assert t.dst.address % 4096 == 3
            if p.params["op"] == "copy":
                assert t.src.address % 4096 == 5
                s, d, n = t.src.address, t.dst.address, t.size
                assert s + n <= d or d + n <= s
            else:
                assert t.src is None
    finally:
        EXP._cache = None
        lab.release()


# ---------------------------------------------------------------- plan and params

def test_plan_quick_and_full_shapes():
    q = EXP.plan(EXP.resolve("quick"), MACHINE)
    assert {p.params["mode"] for p in q} == {"throughput"}
    assert {p.params["op"] for p in q} == {"copy", "set"}
    sizes = sorted({p.params["size_bytes"] for p in q})
    assert sizes[:16] == list(range(1, 17)) and 128 in sizes and 136 in sizes
    assert max(sizes) == 32 << 20
    assert all(p.params["size_bytes"] >= 4096 for p in q if p.arm == "nt")
    full = EXP.resolve("full")
    f = EXP.plan(full, MACHINE)
    fsizes = sorted({p.params["size_bytes"] for p in f})
    # every size to 16 B, then every 4th size to small_max (256 B)
    assert fsizes[:76] == list(range(1, 17)) + list(range(20, 257, 4))
    # auto: a footprint of 2x the largest cache: a set of 2x it, a copy of 1x
    assert max(fsizes) == 4 << 20
    assert max(p.params["size_bytes"] for p in f if p.params["op"] == "copy") == 2 << 20
    assert all(p.params["size_bytes"] <= full["latency_max_size"]
               for p in f if p.params["mode"] != "throughput")
    assert {p.params["mode"] for p in f} == set(MODES)


def test_a_dram_sized_copy_warms_with_one_call_not_two():
    """Trial.warmup is also the re-warm's pass: from ONE_WARM_CALL_FROM one
    call streams both buffers, so two would double every visit's re-warm."""
    from types import SimpleNamespace

    from memfx.experiments.copy import ONE_WARM_CALL_FROM
    params = EXP.resolve("full")
    buf = SimpleNamespace(buffer=SimpleNamespace(closed=False), address=0, offset=0)
    for size, warmup in ((ONE_WARM_CALL_FROM // 2, 2), (ONE_WARM_CALL_FROM, 1)):
        lab = SimpleNamespace(cache={"copy": ((size, 0, 0), buf, buf)})
        point = [p for p in EXP.plan(dict(params, max_size=size, sparse_from=0), MACHINE)
                 if p.params["size_bytes"] == size][0]
        assert EXP.prepare(point, params, lab).warmup == warmup


def test_sizes_above_sparse_from_are_one_per_doubling():
    """A DRAM-sized copy is ~0.1 s a call: past sparse_from the grid thins
    to one size per doubling (refine adds sizes where curves cross)."""
    big = dict(MACHINE, memory={"available_bytes": 64 << 30})
    params = EXP.resolve("full", {"max_size": "960M"})
    assert params["sparse_from"] == 64 << 20
    sizes = [s for s in EXP.sizes(params, big) if s > 256]
    above = [s for s in sizes if s >= 64 << 20]
    assert above == [64 << 20, 128 << 20, 256 << 20, 512 << 20, 960 << 20]
    below = [s for s in sizes if s < 64 << 20]
    ratios = np.diff(np.log2(below))
    assert np.allclose(ratios, 1 / params["per_octave"], atol=0.01)
    # 0 = per_octave everywhere; a sparse_from below small_max = octaves from there
    dense = EXP.sizes(EXP.resolve("full", {"max_size": "960M", "sparse_from": "0"}), big)
    assert len([s for s in dense if s > 64 << 20]) == 2 * len(above) - 2
    octaves = [s for s in EXP.sizes(EXP.resolve("full", {"max_size": "1M", "sparse_from": "1"}),
                                    big) if s > 256]
    assert octaves == [1 << k for k in range(9, 21)]


@pytest.mark.parametrize("override", [
    {"strategies": "rep_movsb,warp_drive"}, {"ops": "copy,move"}, {"modes": "fast"},
    {"small_step": 0}, {"max_size": "lots"}, {"max_size": "100T"}, {"strategies": ""},
    {"value": 256}, {"dst_offset": 4096}, {"samples": "many"},
])
def test_bad_params_are_param_errors(override):
    with pytest.raises(ParamError):
        EXP.plan(EXP.resolve("quick", override), MACHINE)


def test_strategy_selection():
    p = EXP.resolve("quick", {"strategies": "rep_movsb,rep_stosb,libc", "ops": "copy,set"})
    arms = {(x.params["op"], x.arm) for x in EXP.plan(p, MACHINE)}
    assert arms == {("copy", "rep_movsb"), ("copy", "libc"), ("set", "rep_stosb"), ("set", "libc")}


def test_size_helpers():
    assert small_sizes(64, 8) == list(range(1, 17)) + [24, 32, 40, 48, 56, 64]
    g = geometric_sizes(256, 4096, 2)
    assert g == [362, 512, 724, 1024, 1448, 2048, 2896, 4096]
    assert geometric_sizes(256, 256, 4) == []
    assert fill_sizes(128, 136, 16) == list(range(129, 136))
    f = fill_sizes(1 << 20, 8 << 20, 3)
    assert len(f) == 3 and all((1 << 20) < s < (8 << 20) for s in f)
    assert fill_sizes(7, 8, 4) == []


# ---------------------------------------------------------------- crossovers

def curve(fn, sizes, noise=0.02):
    """{size: (median, ci_low, ci_high)} with a CI of +-noise."""
    return {s: (fn(s), fn(s) * (1 - noise), fn(s) * (1 + noise)) for s in sizes}


SIZES = sorted(set(range(1, 257)) | set(geometric_sizes(256, 1 << 20, 4)))


def test_planted_crossover_at_2k_found_within_its_bracket():
    # a: fixed start-up cost, fast per byte; b: no start-up, slow per byte;
    # equal at 2048 bytes exactly.
    a = curve(lambda s: 30 + s / 128, SIZES)
    b = curve(lambda s: 14 + s / 64, SIZES)
    found = find_crossovers(a, b, "rep_movsb", "gpr_unrolled")
    assert len(found) == 1
    c = found[0]
    assert c.low < 2048 < c.high and c.low <= c.size <= c.high
    assert abs(math.log2(c.size / 2048)) < 0.15
    assert (c.faster_below, c.faster_above) == ("gpr_unrolled", "rep_movsb")
    assert c.ratio_low > 1.1 and c.ratio_high > 1.1


def test_no_crossover_when_one_always_wins():
    a = curve(lambda s: 10 + s / 50, SIZES)
    b = curve(lambda s: 20 + s / 25, SIZES)
    assert find_crossovers(a, b, "x", "y") == []
    # equal curves tie everywhere
    assert find_crossovers(a, dict(a), "x", "y") == []


def test_single_noisy_point_is_not_a_crossover_but_two_real_ones_are():
    a = curve(lambda s: 10.0, SIZES)
    b = curve(lambda s: 20.0, SIZES)
    b[100] = (5.0, 4.9, 5.1)                     # one outlier
    assert find_crossovers(a, b, "x", "y") == []
    # b faster only between 64 and 128 bytes: two crossovers
    b2 = curve(lambda s: 5.0 if 64 <= s <= 128 else 20.0, SIZES)
    found = find_crossovers(a, b2, "x", "y")
    assert [(c.low, c.high) for c in found] == [(63, 64), (128, 129)]
    assert [c.faster_below for c in found] == ["x", "y"]


def test_crossover_needs_separated_cis():
    a = curve(lambda s: 30 + s / 128, SIZES, noise=0.5)   # huge CIs: everything ties
    b = curve(lambda s: 14 + s / 64, SIZES, noise=0.5)
    found = find_crossovers(a, b, "x", "y")
    assert all(c.high / c.low > 2 for c in found)         # at best, a wide bracket


# ---------------------------------------------------------------- best ranges

def test_best_ranges_merge_and_prefer_the_simpler_on_ties():
    sizes = list(range(1, 257)) + [512, 1024, 4096]
    curves = {
        "rep_movsb": curve(lambda s: 4.0 if s <= 128 else 14.0 + s / 100, sizes),
        "gpr_unrolled": curve(lambda s: 2.0 + s / 16, sizes),
        "avx512": curve(lambda s: 4.05 if s <= 128 else 5.0 + s / 200, sizes),  # ties movsb <= 128
        "libc": curve(lambda s: 30.0, sizes),
    }
    ranges = best_ranges(curves, SIMPLICITY["copy"])
    # gpr wins while 2 + s/16 is clearly below 4 (s < 26); then rep_movsb and
    # avx512 tie up to 128 and avx512 wins after: as few ranges as possible
    # means avx512 from 26 on
    assert [r["strategy"] for r in ranges] == ["gpr_unrolled", "avx512"]
    assert ranges[0]["min_size"] == 1 and ranges[-1]["max_size"] == 4096
    # (gpr stays acceptable while within 10 % of the best (4.0), up to 38 bytes)
    assert ranges[0]["max_size"] == 38 and ranges[1]["min_size"] == 39
    # when the tie lasts to the end of a range, the simpler strategy gets it
    small = list(range(1, 257))
    curves = {"rep_movsb": curve(lambda s: 4.0 if s <= 128 else 50.0, small),
              "avx512": curve(lambda s: 4.05 if s <= 128 else 50.0, small),
              "gpr_unrolled": curve(lambda s: 2.0 + s / 16, small),
              "libc": curve(lambda s: 30.0, small)}
    ranges = best_ranges(curves, SIMPLICITY["copy"])
    assert [r["strategy"] for r in ranges] == ["gpr_unrolled", "rep_movsb", "gpr_unrolled"]
    assert ranges[1]["max_size"] == 128 and ranges[2]["min_size"] == 129
    # the ties beside the ranges (what compare tells a reversal from): at
    # 100 B rep_movsb and avx512 tie and gpr_unrolled is 2.2x slower
    ties = dict((s, t) for s, t in ties_by_size(curves))
    assert ties[100] == ["avx512", "rep_movsb"] and ties[200] == ["gpr_unrolled"]
    assert sorted(ties) == small


def test_best_ranges_forgive_one_isolated_size_and_skip_partial_sizes():
    sizes = list(range(1, 65))
    a = curve(lambda s: 5.0, sizes)
    b = curve(lambda s: 8.0, sizes)
    b[30] = (4.5, 4.4, 4.6)                      # b wins at one size by 10 %
    assert best_ranges({"x": a, "y": b}, ["x", "y"]) == [
        {"strategy": "x", "min_size": 1, "max_size": 64}]
    b[30] = (2.0, 1.9, 2.1)                      # a real win is a range
    assert [r["strategy"] for r in best_ranges({"x": a, "y": b}, ["x", "y"])] == ["x", "y", "x"]
    # a size measured for one strategy only (refinement) is not compared;
    # a strategy measured only from some size on does not veto smaller sizes
    c = curve(lambda s: 1.0, range(40, 65))
    del c[50]
    assert comparable_sizes({"x": a, "y": b, "nt": c}) == [s for s in range(1, 65) if s != 50]
    # a size only one strategy reached compares nothing
    assert comparable_sizes({"x": a, "nt": c}) == [s for s in range(40, 65) if s != 50]
    assert comparable_sizes({"x": a}) == sizes


# ---------------------------------------------------------------- the step

def step_values(step_at=128, lo=4.0, hi=13.0, sizes=None, seed=0):
    rng = np.random.default_rng(seed)
    sizes = sizes or list(range(1, 17)) + list(range(24, 257, 8)) + list(range(129, 136))
    return {s: (lo if s <= step_at else hi) * (1 + 0.03 * rng.standard_normal(5)) for s in sizes}


def test_rep_movsb_step_found_between_128_and_129():
    st = find_step(step_values(), 256)
    assert (st.low, st.high) == (128, 129)
    assert 3.0 < st.ratio < 3.5 and st.ci_low > 3.0
    # with the coarse grid only, the bracket is the grid step
    st = find_step(step_values(sizes=list(range(1, 17)) + list(range(24, 257, 8))), 256)
    assert (st.low, st.high) == (128, 136)


def test_no_step_on_flat_or_ramp_curves():
    sizes = list(range(1, 257))
    rng = np.random.default_rng(1)
    flat = {s: 4.0 * (1 + 0.05 * rng.standard_normal(5)) for s in sizes}
    assert find_step(flat, 256) is None
    ramp = {s: (2.0 + s / 8) * np.ones(5) for s in sizes}  # 2 -> 34 ns, steadily
    assert find_step(ramp, 256) is None
    assert find_step(step_values(step_at=300), 256) is None


# ---------------------------------------------------------------- answers

from memfx.experiments import copy as C  # noqa: E402

QIDS = [q.id for q in EXP.questions]


def _points(model, sizes, op="copy", mode="throughput", seed=3, spread=0.01):
    rng = np.random.default_rng(seed)
    points = []
    for arm, fn in model.items():
        for s in sizes:
            vals = fn(s) * (1 + spread * rng.standard_normal(5))
            points.append({"arm": arm, "params": {"op": op, "size_bytes": s, "mode": mode},
                           "median": float(np.median(vals)), "ci_low": float(vals.min()),
                           "ci_high": float(vals.max()), "values": vals.tolist(), "n": 5,
                           "rejected": 0, "metric": "ns_per_call", "unit": "ns"})
    return points


SYN_SIZES = list(range(1, 17)) + list(range(24, 257, 8)) + [512, 1024, 2048, 4096, 8192, 16384,
                                                            32768, 65536]
SYN_MODEL = {
    "rep_movsb": lambda s: (4.0 if s <= 128 else 13.0) + s / 200,
    "gpr_unrolled": lambda s: 2.0 + s / 12,
    "avx512": lambda s: 3.0 + s / 150,
    "libc": lambda s: 3.5 + s / 160,
}


def synthetic_run(mode="throughput"):
    return RunData("copy", {"small_max": 256}, MACHINE, _points(SYN_MODEL, SYN_SIZES, mode=mode))


def by_id(answers):
    return {a.question: a for a in answers}


def test_questions_are_declared_once_with_stable_ids():
    assert len(QIDS) == len(set(QIDS)) == 12
    for qid in ("copy.rep_movsb_step", "copy.rep_stosb_step", "copy.best_strategy",
                "copy.rep_movsb_crossover", "copy.nt_crossover", "copy.peak_copy_bandwidth",
                "copy.peak_set_bandwidth", "copy.libc_vs_best"):
        assert qid in QIDS
    assert EXP.declared("peak_set_bandwidth").better == "higher"
    assert EXP.declared("libc_vs_best").better == "lower"


def test_analyze_answers_each_question_of_the_op_once():
    a = by_id(EXP.analyze(synthetic_run()))
    assert sorted(a) == sorted(q for q in QIDS if q in {
        "copy.rep_movsb_step", "copy.best_strategy", "copy.rep_movsb_crossover",
        "copy.nt_crossover", "copy.peak_copy_bandwidth", "copy.libc_vs_best"})
    step = a["copy.rep_movsb_step"]
    assert step.verdict == "detected" and step.value == 136 and step.ci_low == 129
    assert "FSRM yes" in step.because and step.evidence == [
        "rep_movsb|mode=throughput|op=copy|size_bytes=128",
        "rep_movsb|mode=throughput|op=copy|size_bytes=136"]
    # rep movsb (13 + s/200) overtakes the best loop (avx512, 3 + s/150) at 6000 B
    rx = a["copy.rep_movsb_crossover"]
    assert rx.verdict == "detected" and rx.ci_low == 4096 and rx.ci_high == 16384
    assert abs(math.log2(rx.value / 6000)) < 0.3
    assert "avx512 wins at 4 KiB" in rx.because
    # no NT measured: not_measured with the reason, nothing concluded
    assert a["copy.nt_crossover"].verdict == "not_measured"
    assert "nt" in a["copy.nt_crossover"].because
    best = a["copy.best_strategy"]
    (ranges,) = [d for d in best.details if d.get("kind") == "ranges"]
    assert ranges["ranges"] == C.strategy_ranges(synthetic_run().points, "copy", "throughput")
    assert best.value == len(ranges["ranges"]) and ranges["ranges"][0]["min_size"] == 1
    for d in (d for x in a.values() for d in x.details):
        assert {"label", "value", "unit", "ci_low", "ci_high"} <= set(d)


def test_a_pair_crossing_back_and_forth_is_one_detail_not_three_answers():
    """Round 1 gave crossover_copy_a_vs_b, _2, _3 (37 lines on a real run);
    now each pair is one detail, under the answer it belongs to, with all
    its crossings, and there is one answer per declared question."""
    sizes = list(range(1, 400, 3))
    model = {"rep_movsq": lambda s: 5.0 if s <= 40 or 100 < s <= 200 else 20.0,
             "gpr_unrolled": lambda s: 10.0,
             "rep_movsb": lambda s: 30.0, "libc": lambda s: 40.0}
    answers = C.analyze_points(_points(model, sizes), MACHINE, {"small_max": 256},
                               traffic=lambda op, arm: (lambda n: (n, n)))
    assert len(answers) == 6 and len({x.question for x in answers}) == 6
    pairs = [d for x in answers for d in x.details
             if d.get("kind") == "crossover" and {d["a"], d["b"]} == {"rep_movsq", "gpr_unrolled"}]
    assert len(pairs) == 1
    assert [(c["low"], c["high"]) for c in pairs[0]["crossings"]] == [(40, 43), (100, 103),
                                                                        (199, 202)]
    owner = next(x for x in answers if pairs[0] in x.details)
    assert owner.question == "copy.best_strategy"
    # rep movsb vs the loops belongs to the rep movsb answer, libc pairs to libc's
    rep = by_id(answers)["copy.rep_movsb_crossover"]
    assert all("rep_movsb" in (d["a"], d["b"]) for d in rep.details if d.get("kind") == "crossover")


def test_peak_bandwidth_traffic_comes_from_the_kernel_row():
    """A set only writes: its GB/s is bytes written / time, and the answer
    says so (round 1 said "read+write traffic" for memset)."""
    sizes = [4096, 65536]
    pts = _points({"rep_stosb": lambda s: s / 10.0, "gpr_unrolled": lambda s: s / 5.0}, sizes,
                  op="set", spread=0.0) + \
        _points({"rep_movsb": lambda s: s / 10.0}, sizes, op="copy", spread=0.0)
    a = by_id(C.analyze_points(pts, MACHINE, {}))           # the real kernel rows
    st = a["copy.peak_set_bandwidth"]
    assert st.value == pytest.approx(10.0) and "read" not in st.because
    assert "1 written" in st.because and st.evidence[0].startswith("rep_stosb|")
    cp = a["copy.peak_copy_bandwidth"]
    assert cp.value == pytest.approx(20.0) and "1 read + 1 written" in cp.because
    # a row that declared other traffic would change the figure: no special case by op
    a = by_id(C.analyze_points(pts, MACHINE, {}, traffic=lambda op, arm: (lambda n: (2 * n, n))))
    assert a["copy.peak_set_bandwidth"].value == pytest.approx(30.0)
    a = by_id(C.analyze_points(pts, MACHINE, {}, traffic=lambda op, arm: None))
    assert a["copy.peak_set_bandwidth"].verdict == "not_measured"


def test_rep_never_beating_the_loops_is_not_detected_and_libc_ratio():
    model = {"rep_movsb": lambda s: 50.0 + s / 10, "gpr_unrolled": lambda s: 2.0 + s / 12,
             "libc": lambda s: 2.0 * (2.0 + s / 12)}
    a = by_id(C.analyze_points(_points(model, SYN_SIZES), MACHINE, {"small_max": 256},
                               traffic=lambda op, arm: (lambda n: (n, n))))
    assert a["copy.rep_movsb_crossover"].verdict == "not_detected"
    assert a["copy.rep_movsb_crossover"].value is None
    assert a["copy.libc_vs_best"].value == pytest.approx(2.0, rel=0.05)
    assert a["copy.rep_movsb_step"].verdict == "not_detected"


def test_other_modes_answer_when_throughput_is_missing_and_refine_fills_brackets():
    data = synthetic_run("chained")
    a = by_id(EXP.analyze(data))
    assert a["copy.rep_movsb_step"].verdict == "detected"
    assert "(chained)" in a["copy.rep_movsb_step"].because
    assert [d["mode"] for d in a["copy.best_strategy"].details if d.get("kind") == "ranges"] \
        == ["chained"]
    params = EXP.resolve("quick", {"modes": "chained", "ops": "copy"})
    extra = EXP.refine(data, params, MACHINE)
    have = {(p["arm"], p["params"]["size_bytes"]) for p in data.points}
    assert extra and all((p.arm, p.params["size_bytes"]) not in have for p in extra)
    step_sizes = {p.params["size_bytes"] for p in extra if p.arm == "rep_movsb"}
    assert set(range(129, 136)) <= step_sizes
    assert all(p.params["mode"] == "chained" and p.params["op"] == "copy" for p in extra)


def test_refine_leaves_range_boundaries_past_sparse_from_alone():
    """Past sparse_from a boundary between two non-key loops (sse -> avx2
    here, between 8 and 16 KiB) is not refined: at DRAM sizes it moved from
    run to run and cost every arm three of the dearest sizes."""
    sizes = [4096, 8192, 16384, 32768, 65536]
    model = {"sse": lambda s: 1 + s / (100 if s <= 8192 else 50),
             "avx2": lambda s: 1 + s / 70, "rep_movsb": lambda s: 3 + s / 40}
    data = RunData("copy", {"small_max": 256}, MACHINE, _points(model, sizes))
    bracket = {p.params["size_bytes"] for p in EXP.refine(data, EXP.resolve(
        "quick", {"ops": "copy", "sparse_from": "0"}), MACHINE)}
    assert bracket and all(8192 < s < 16384 for s in bracket)
    assert EXP.refine(data, EXP.resolve("quick", {"ops": "copy", "sparse_from": "4K"}),
                      MACHINE) == []


def test_plot_draws(tmp_path):
    from memfx.report.plots import plot_document
    data = synthetic_run()
    doc = {"experiment": "copy", "run_id": "t", "machine": MACHINE, "params": {},
           "points": data.points,
           "answers": [x.as_dict() for x in EXP.analyze(data)], "findings": []}
    out = plot_document(doc, str(tmp_path / "c.png"))
    assert out == str(tmp_path / "c.png") and (tmp_path / "c.png").read_bytes().startswith(b"\x89PNG")
    from memfx.report.plots import figure_for
    from plot_checks import figure_summary
    full, zoom = figure_summary(figure_for(doc))
    arms = {p["arm"] for p in data.points}
    for ax in (full, zoom):
        assert sorted(ax["curve_labels"]) == sorted(arms)      # one line per strategy
        assert ax["legend"] == ax["curve_labels"]
    # the full view shows every sample and one band per data/unified cache
    assert full["scatter_points"] == sum(len(p["values"]) for p in data.points)
    assert all(len(c.get_xdata()) == len(data.points) // len(arms) for c in full["curves"])
    assert full["xscale"] == "log" and full["xlabel"] == "copy size (bytes)"
    caches = [c for c in MACHINE["caches"] if c["type"] in ("Data", "Unified")]
    assert len(full["bands"]) == len(caches)
    # the axis ends near the largest size (64K): L2 (2M) is far beyond it, so
    # its band is clipped and its label left out
    assert [t for t in full["texts"] if t.endswith("(sysfs)")] == ["L1d 48 KiB (sysfs)"]
    assert full["ax"].get_xlim()[1] < 2 << 20
    # the zoom is linear and stops at the fine part of the sweep
    assert zoom["xscale"] == "linear" and zoom["scatter_points"] < full["scatter_points"]
    # the marks the declared plot draws from the answers: the rep movsb step
    # (red, in both views) and the envelope crossing (purple, full view only)
    from memfx.report.plots import spec_marks
    calls, zoomed = EXP.plots
    facet = {"op": "copy", "mode": "throughput"}
    steps = [(x, label) for m in calls.marks if m.colour == "red" for x, label in m.items(doc, facet)]
    assert [x for x, _ in steps] == [136] and "step" in steps[0][1]
    assert len([1 for m in calls.marks if m.colour == "purple" for _ in m.items(doc, facet)]) == 1
    assert [x for m in zoomed.marks for x, _ in m.items(doc, facet)] == [136]
    assert not [x for m in calls.marks for x, _ in m.items(doc, {"op": "set", "mode": "throughput"})]
    assert len(spec_marks(doc, calls)) >= 2
    red = [ln for ln in full["curves"]]                       # curves are not marks
    assert all(len(ln.get_xdata()) > 2 for ln in red)


@pytest.mark.measuring
def test_tiny_end_to_end_run(tmp_path):
    import memfx
    doc = memfx.run("copy", db=str(tmp_path / "c.db"), ops="copy",
                    strategies="rep_movsb,gpr_unrolled", small_max=32, small_step=8,
                    max_size="1K", samples=3, min_sample_ms=0.05, modes="throughput,latency",
                    verify_max_size=64, per_octave=1)
    assert doc["status"] == "complete"
    assert {p["params"]["mode"] for p in doc["points"]} == {"throughput", "latency"}
    assert all(p["metric"] == "ns_per_call" for p in doc["points"])
    assert [a["question"] for a in doc["answers"]] == QIDS
    a = {x["question"]: x for x in doc["answers"]}
    assert [d["mode"] for d in a["copy.best_strategy"]["details"] if d.get("kind") == "ranges"] \
        == ["throughput", "latency"]
    assert a["copy.peak_set_bandwidth"]["verdict"] == "not_measured"     # ops=copy only
    assert a["copy.nt_crossover"]["verdict"] == "not_measured"
    assert "findings" not in doc


def test_fill_pattern_is_nonzero_and_periodic():
    from memfx.experiments.copy import fill_pattern
    buf = bytearray(3 * (251 << 12) + 77)
    fill_pattern(buf, 5, len(buf) - 5)
    a = np.frombuffer(buf, dtype=np.uint8)
    assert a[:5].tolist() == [0] * 5 and a[5:].min() >= 1
    assert np.array_equal(a[5:5 + 251], a[5 + 251:5 + 502])


def test_a_best_strategy_range_of_one_size_says_so():
    from memfx.experiments.copy import _ranges_text
    text = _ranges_text([{"strategy": "avx512", "min_size": 32, "max_size": 16 << 20},
                         {"strategy": "rep_movsb", "min_size": 32 << 20,
                          "max_size": 32 << 20}])
    assert text == "avx512 32 B–16 MiB; rep_movsb at 32 MiB only"
