"""The assoc experiment (seed 004): col_sum is exact, ways and sets come out
of synthetic stride curves, the leading-dimension answer, bad input."""
import json

import numpy as np
import pytest

from conftest import run_cli
from memfx.analysis.results import document
from memfx.experiments import get_experiment
from memfx.experiments.assoc import capacity, ways_and_sets
from memfx.lab import _core
from memfx.model.answers import NOT_MEASURED
from memfx.model.findings import DETECTED, MEASURED

KERNELS = {r["name"]: i for i, r in enumerate(_core.kernels())}
MACHINE = {"line_bytes": 64,
           "caches": [{"level": 1, "type": "Data", "size_bytes": 48 << 10, "ways": 12, "sets": 64,
                       "line_bytes": 64},
                      {"level": 2, "type": "Unified", "size_bytes": 2 << 20, "ways": 16,
                       "sets": 2048, "line_bytes": 64}]}


def _lab():
    from memfx.lab.lab import Lab
    return Lab(cpu=-1, hardware_counters=False)


@pytest.mark.measuring
@pytest.mark.parametrize("n, ld, count", [(1, 1, 1), (7, 7, 3), (9, 16, 20), (33, 40, 33)])
def test_col_sum_sums_the_columns_exactly_and_returns_where_it_stopped(n, ld, count):
    m = np.random.default_rng(n).integers(-50, 50, size=(n, ld)).astype(np.float64)
    out = np.zeros(1)
    got = _core.run(KERNELS["col_sum"], out, 0, m, 0, n * 8, 0, count, ld, [], None)[3]
    assert got == count % n
    assert out[0] == sum(m[:, k % n].sum() for k in range(count))


@pytest.mark.measuring
def test_col_sum_footprint_refuses_a_matrix_too_small_and_skips_a_short_leading_dimension():
    m = np.zeros((4, 8))
    with pytest.raises(ValueError):
        _core.run(KERNELS["col_sum"], np.zeros(1), 0, m, 0, 5 * 8, 0, 1, 8, [], None)
    out = np.full(1, 3.0)
    assert _core.run(KERNELS["col_sum"], out, 0, m, 0, 4 * 8, 0, 1, 3, [], None)[3] == 0
    assert out[0] == 3.0                                  # ld < n: nothing touched
    assert _core.footprint(KERNELS["col_sum"], 4 * 8, 1, 8) == (8, (3 * 8 + 4) * 8, 0)


def test_capacity_needs_two_points_above_the_threshold():
    assert capacity([1, 2, 4, 8, 9, 16], [1, 1, 1, 1, 5, 5], 2.0) == (8, True)
    assert capacity([1, 2, 3, 4, 5], [1, 9, 1, 1, 1], 2.0) == (5, False)   # one stray point
    assert capacity([1, 2], [5, 5], 2.0) == (0, True)


def cache_model(stride, lines, ways, way_size):
    """Lines held at a stride by an LRU cache of `ways` x (way_size / line) sets."""
    sets_used = max(1, way_size // stride)
    return lines <= ways * sets_used


def synthetic(strides, lines, l1=(12, 4096), l2=(16, 128 << 10)):
    samples = []

    def add(params, ns):
        samples.extend({"arm": "chase", "point": params, "metric": "ns_per_load", "unit": "ns",
                        "value": ns * (1 + 0.001 * i), "length": 1000,
                        "ns": ns * 1000 * (1 + 0.001 * i), "cycles_est": None, "counters": {},
                        "rejected": False} for i in range(5))
    for s in strides:
        for m in lines:
            ns = 1.0 if cache_model(s, m, *l1) else 4.0 if cache_model(s, m, *l2) else 40.0
            add({"part": "stride", "stride_bytes": s, "lines": m}, ns)
    add({"part": "ref", "level": "l2", "size_bytes": 1 << 20}, 4.0)
    add({"part": "ref", "level": "beyond_l2", "size_bytes": 8 << 20}, 40.0)
    return samples


def _answers(samples):
    run = {"id": "r", "experiment": "assoc", "status": "complete", "params": {},
           "machine": MACHINE}
    return {a["question"]: a for a in document(run, samples)["answers"]}


def test_ways_and_sets_from_a_synthetic_stride_curve():
    strides = [1 << k for k in range(10, 20)]
    lines = list(range(1, 21)) + [24, 28, 32, 40, 48, 56, 64]
    a = _answers(synthetic(strides, lines))
    assert a["assoc.l1_ways"]["verdict"] == MEASURED and a["assoc.l1_ways"]["value"] == 12
    assert a["assoc.l1_sets"]["value"] == 64 and "sysfs says 64" in a["assoc.l1_sets"]["because"]
    assert a["assoc.l2_ways"]["value"] == 16 and "sysfs says 16" in a["assoc.l2_ways"]["because"]
    assert a["assoc.l2_sets"]["value"] == 2048
    assert a["assoc.leading_dimension"]["verdict"] == NOT_MEASURED
    assert list(a) == [q.id for q in get_experiment("assoc").questions]


def test_sets_not_measured_when_no_stride_is_below_the_way_size():
    a = _answers(synthetic([4096, 8192], list(range(1, 17))))
    assert a["assoc.l1_ways"]["value"] == 12
    assert a["assoc.l1_sets"]["verdict"] == NOT_MEASURED
    assert "smaller strides" in a["assoc.l1_sets"]["because"]


def test_ways_direct():
    curves = {s: (list(range(1, 40)), [1.0 if cache_model(s, m, 8, 4096) else 9.0
                                        for m in range(1, 40)]) for s in (1024, 2048, 4096, 8192)}
    ways, way_size, sets, caps = ways_and_sets(curves, 3.0)
    assert (ways, way_size, sets) == (8, 4096, 64)
    assert caps[1024] == (32, True)


def test_leading_dimension_answer():
    def add(arm, ld, ns):
        return [{"arm": arm, "point": {"part": "matrix", "n": 1024, "ld": ld},
                 "metric": "ns_per_column", "unit": "ns", "value": ns * (1 + 0.001 * i),
                 "length": 10, "ns": ns * 10, "cycles_est": None, "counters": {},
                 "rejected": False} for i in range(6)]
    a = _answers(add("ld_pow2", 1024, 4096.0) + add("ld_padded", 1032, 1024.0))
    ld = a["assoc.leading_dimension"]
    assert ld["verdict"] == DETECTED and ld["value"] == pytest.approx(4.0, rel=0.01)
    assert "(4.00x)" in ld["because"] and "pad the rows" in ld["because"]
    assert a["assoc.l1_ways"]["verdict"] == NOT_MEASURED


@pytest.mark.measuring
def test_bad_input_is_one_line_and_exit_2(tmp_path):
    db = str(tmp_path / "r.db")
    p = run_cli("run", "assoc", "--set", "strides=3000", db=db)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "power of two" in p.stderr
    p = run_cli("run", "assoc", "--set", "lines=0", db=db)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "lines" in p.stderr


@pytest.mark.measuring
def test_small_run_finds_the_l1_ways(tmp_path):
    db = str(tmp_path / "r.db")
    p = run_cli("run", "assoc", "--quick", "--json", "--set", "strides=1K,4K,8K",
                "--set", "lines=1,2,4,8,16,20,24,32,40,48,64", "--set", "samples=3",
                "--set", "min_sample_ms=0.2", "--set", "parts=stride", db=db)
    assert p.returncode == 0, p.stderr
    a = {x["question"]: x for x in json.loads(p.stdout)["answers"]}
    assert a["assoc.l1_ways"]["verdict"] in (MEASURED, NOT_MEASURED)
    assert a["assoc.leading_dimension"]["verdict"] == NOT_MEASURED


def test_declared_plots_draw_the_stride_curves_and_the_matrix_bars(tmp_path):
    import matplotlib

    from memfx.report.plots import figure_for
    s = synthetic([4096, 8192], [1, 8, 9, 16])
    s += [{"arm": arm, "point": {"part": "matrix", "n": 1024, "ld": ld}, "metric": "ns_per_column",
           "unit": "ns", "value": ns, "length": 10, "ns": ns * 10, "cycles_est": None,
           "counters": {}, "rejected": False} for arm, ld, ns in
          (("ld_pow2", 1024, 4000.0), ("ld_padded", 1032, 1000.0)) for _ in range(3)]
    run = {"id": "r", "experiment": "assoc", "status": "complete", "params": {},
           "machine": MACHINE}
    fig = figure_for(document(run, s, include_values=True))
    axes = {ax.get_title(): ax for ax in fig.get_axes()}
    stride = next(ax for t, ax in axes.items() if "spaced" in t)
    assert sorted(len(line.get_xdata()) for line in stride.get_lines())[-2:] == [4, 4]
    matrix = next(ax for t, ax in axes.items() if "leading dimension" in t)
    assert len(matrix.patches) == 2
    matplotlib.pyplot.close(fig)


def test_a_fall_past_the_way_size_plateau_is_not_the_l1_ways():
    """12 lines at 4-64 KiB strides and 6 at 128-256 KiB (lines an L2 way
    size apart, which huge pages put in one L2 set): the L1d has 12 ways,
    the fall at 128 KiB is said, not taken; with no plateau the smallest
    capacity stands."""
    def curve(cap):
        lines = [1, 2, 4, 6, 7, 8, 9, 10, 12, 16, 24, 32, 48, 64]
        return lines, [1.7 if m <= cap else 5.5 for m in lines]
    curves = {2048: curve(24), 4096: curve(12), 8192: curve(12), 131072: curve(6),
              262144: curve(6)}
    ways, way_size, sets, caps = ways_and_sets(curves, 3.0)
    assert (ways, way_size, sets) == (12, 4096, 64)
    # quick's strides without a second stride at the plateau: the minimum
    ways, way_size, _, _ = ways_and_sets({2048: curve(24), 4096: curve(12),
                                          131072: curve(6)}, 3.0)
    assert (ways, way_size) == (6, 131072)


def test_the_sentence_names_the_next_count_measured_not_one_more():
    a = _answers(synthetic([2048, 4096, 8192], [1, 2, 4, 8, 12, 16, 24, 32, 48]))
    assert a["assoc.l1_ways"]["value"] == 12
    assert "12 lines stay in the L1d and 16 do not" in a["assoc.l1_ways"]["because"]


def test_a_fall_past_the_plateau_bounds_the_strides_the_sentence_claims():
    """12 lines at 4 and 8 KiB strides, 6 at 128 KiB: the sentence claims
    the 12 for 4-8 KiB, not for every stride from 4 KiB on."""
    strides = [2048, 4096, 8192, 131072]
    lines = [1, 2, 4, 6, 7, 8, 9, 10, 12, 16, 24, 32]
    samples = synthetic(strides, lines)
    for smp in samples:
        p = smp["point"]
        if p.get("part") == "stride" and p["stride_bytes"] == 131072 and 6 < p["lines"] <= 12:
            smp["value"] = smp["value"] * 3 + 3.0      # past the midpoint, as the L2 set's fall
    a = _answers(samples)["assoc.l1_ways"]
    assert a["value"] == 12, a["because"]
    assert a["because"].startswith("at strides of 4 KiB to 8 KiB, 12 lines stay"), a["because"]
    assert "at a stride of 128 KiB only 6 stay" in a["because"]
