"""The latency experiment: chain construction, the size plan, parameter
parsing, and the analysis on a synthetic curve."""
import numpy as np
import pytest

from memfx.errors import ParamError
from memfx.experiments import get_experiment
from memfx.experiments.latency import chain_links, cycle_length, size_grid
from memfx.results import RunData

MACHINE = {"caches": [
    {"level": 1, "type": "Data", "size_bytes": 48 << 10},
    {"level": 1, "type": "Instruction", "size_bytes": 32 << 10},
    {"level": 2, "type": "Unified", "size_bytes": 2 << 20},
    {"level": 3, "type": "Unified", "size_bytes": 32 << 20}],
    "memory": {"available_bytes": 16 << 30}}


@pytest.mark.parametrize("n", [1, 2, 3, 10, 4096, 100_000])
def test_random_chain_is_one_cycle_over_every_element(n):
    order = np.random.default_rng(n).permutation(n)
    nxt = chain_links(order)
    assert sorted(nxt.tolist()) == list(range(n))     # a permutation: every element once
    assert cycle_length(nxt, start=int(order[0])) == n  # and a single cycle


def test_sequential_chain_walks_in_address_order():
    nxt = chain_links(np.arange(5))
    assert nxt.tolist() == [1, 2, 3, 4, 0]


def test_size_grid_is_geometric_and_brackets_caches():
    sizes = size_grid(1024, 64 << 20, 2, anchors=[48 << 10, 2 << 20])
    assert sizes[0] == 1024 and sizes[-1] == 64 << 20
    assert sizes == sorted(set(sizes))
    for a in (48 << 10, 2 << 20):
        assert any(s < a for s in sizes) and any(s > a for s in sizes)
        assert int(a * 0.75) in sizes and int(a * 1.5) in sizes
    ratios = np.diff(np.log2([s for s in size_grid(1024, 1 << 20, 4)]))
    assert np.allclose(ratios, 0.25, atol=0.01)


def test_plan_defaults_and_presets():
    exp = get_experiment("latency")
    quick = exp.resolve("quick")
    full = exp.resolve("full")
    pts = exp.plan(quick, MACHINE)
    assert {p.arm for p in pts} == {"random", "sequential"}
    assert max(p.params["size_bytes"] for p in pts) == 64 << 20
    # full: up to 4x the LLC, both page sizes
    fpts = exp.plan(full, MACHINE)
    assert max(p.params["size_bytes"] for p in fpts) == 4 * (32 << 20)
    assert {p.params["pages"] for p in fpts} == {"4k", "thp"}
    # every point has both arms (they are interleaved per cell)
    cells = {}
    for p in fpts:
        cells.setdefault(tuple(sorted(p.params.items())), set()).add(p.arm)
    assert all(arms == {"random", "sequential"} for arms in cells.values())


@pytest.mark.parametrize("overrides, message", [
    ({"nosuch": "1"}, "unknown parameter"),
    ({"max_size": "lots"}, "expected a size"),
    ({"npad": "x"}, "expected an integer"),
    ({"pages": "1g"}, "must be one of"),
    ({"samples": "1"}, "must be >="),
    ({"refine": "maybe"}, "true or false"),
])
def test_bad_parameters_are_one_line_errors(overrides, message):
    with pytest.raises(ParamError) as e:
        get_experiment("latency").resolve("quick", overrides)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_plan_refuses_sizes_that_do_not_fit():
    exp = get_experiment("latency")
    p = exp.resolve("quick", {"max_size": "64G"})
    with pytest.raises(ParamError, match="does not fit"):
        exp.plan(p, MACHINE)
    p = exp.resolve("quick", {"min_size": "1M", "max_size": "64K"})
    with pytest.raises(ParamError, match="below"):
        exp.plan(p, MACHINE)


def _synthetic_points(levels, sizes, noise=0.02, seed=0):
    rng = np.random.default_rng(seed)
    pts = []
    for arm, scale in (("random", 1.0), ("sequential", 0.3)):
        for s in sizes:
            true = next(lat for cap, lat in levels if s <= cap)
            vals = true * scale * (1 + noise * rng.standard_normal(9))
            med = float(np.median(vals))
            pts.append({"arm": arm, "params": {"size_bytes": s, "pages": "4k", "npad": 7},
                        "metric": "ns_per_load", "unit": "ns", "median": med, "values": vals.tolist(),
                        "ci_low": med * 0.98, "ci_high": med * 1.02, "n": 9, "rejected": 0,
                        "cycles_est": med * 2.5, "cv": noise})
    return pts


def test_analysis_finds_levels_and_matches_sysfs():
    exp = get_experiment("latency")
    levels = [(48 << 10, 1.5), (2 << 20, 5.0), (32 << 20, 20.0), (1 << 40, 90.0)]
    sizes = size_grid(1024, 256 << 20, 4)
    params = exp.resolve("full")
    params["pages"] = ["4k"]
    data = RunData("latency", params, MACHINE, _synthetic_points(levels, sizes))
    f = {x.id: x for x in exp.analyze(data)}
    for i, (_, lat) in enumerate(levels, 1):
        assert f[f"level{i}_latency"].value == pytest.approx(lat, rel=0.1)
    for name, size in (("knee_l1d", 48 << 10), ("knee_l2", 2 << 20), ("knee_l3", 32 << 20)):
        assert f[name].verdict == "detected"
        assert size / 1.5 <= f[name].value <= size * 1.5
    assert f["prefetch_benefit"].value == pytest.approx(1 / 0.3, rel=0.1)


def test_plot_shows_every_sample_the_cache_bands_and_the_knees():
    from plot_checks import band_span, figure_summary

    from memfx.plots import figure_for
    exp = get_experiment("latency")
    levels = [(48 << 10, 1.5), (2 << 20, 5.0), (32 << 20, 20.0), (1 << 40, 90.0)]
    params = exp.resolve("full")
    params["pages"] = ["4k"]
    pts = _synthetic_points(levels, size_grid(1024, 256 << 20, 4))
    found = exp.analyze(RunData("latency", params, MACHINE, pts))
    doc = {"experiment": "latency", "run_id": "x", "machine": MACHINE, "params": params,
           "points": pts, "findings": [f.as_dict() for f in found]}
    (ax,) = figure_summary(figure_for(doc))
    assert sorted(ax["curve_labels"]) == ["random", "sequential"]
    assert all(len(c.get_xdata()) == len(pts) // 2 for c in ax["curves"])
    assert ax["scatter_points"] == sum(len(p["values"]) for p in pts)
    assert (ax["xscale"], ax["yscale"]) == ("log", "log")
    assert ax["xlabel"] == "working set (bytes)"
    # the data and unified caches sysfs reports, each a shaded band up to its size
    assert [t for t in ax["texts"] if t.endswith("(sysfs)")] == [
        "L1d 48KB (sysfs)", "L2 2MB (sysfs)", "L3 32MB (sysfs)"]
    assert len(ax["bands"]) == 3
    assert [band_span(b)[1] for b in ax["bands"]] == [48 << 10, 2 << 20, 32 << 20]
    assert band_span(ax["bands"][0])[0] == 1024                  # the first from the smallest size
    knees = [f for f in doc["findings"] if f["id"].startswith("knee") and f["verdict"] == "detected"]
    assert len([t for t in ax["texts"] if t.startswith(" knee")]) == len(knees) == 3


def test_analysis_says_when_a_reported_cache_shows_no_step():
    exp = get_experiment("latency")
    # an L3 that the OS reports but that behaves like memory (as in some VMs)
    levels = [(48 << 10, 1.5), (2 << 20, 5.0), (1 << 40, 90.0)]
    params = exp.resolve("full")
    params["pages"] = ["4k"]
    data = RunData("latency", params, MACHINE, _synthetic_points(levels, size_grid(1024, 256 << 20, 4)))
    f = {x.id: x for x in exp.analyze(data)}
    assert f["knee_l3"].verdict == "not_detected"
    assert f["knee_l2"].verdict == "detected"


def _sample(length, ns, arm="random", size=4096):
    return {"arm": arm, "point": {"size_bytes": size}, "metric": "ns_per_load", "unit": "ns",
            "value": ns / length, "length": length, "ns": ns, "cycles_est": ns * 2,
            "counters": {}, "rejected": False, "reason": None}


def test_points_use_the_n_2n_difference_of_medians():
    from memfx.results import build_points
    n = 1000
    # fixed overhead of 500 ns per sample, 3 ns per load
    samples = [_sample(n, 500 + 3 * n + j) for j in range(7)] + \
              [_sample(2 * n, 500 + 6 * n + j) for j in range(7)]
    samples.append(dict(_sample(n, 10 ** 9), rejected=True, reason="context_switch"))
    (p,) = build_points(samples)
    assert p["method"] == "N/2N difference"
    assert p["median"] == pytest.approx(3.0, abs=1e-9)      # overhead cancelled
    assert p["rejected"] == 1 and p["n"] == 14
    assert p["ci_low"] <= 3.0 <= p["ci_high"]


def test_points_fall_back_when_the_difference_is_noise():
    """A negative per-load time is impossible: when the N/2N difference's CI
    reaches zero the point keeps the per-sample estimate and says so."""
    from memfx.results import build_points
    n = 1000
    samples = [_sample(n, 100_000.0 + j) for j in range(7)] + \
              [_sample(2 * n, 90_000.0 + j) for j in range(7)]
    (p,) = build_points(samples)
    assert p["method"].startswith("per-sample")
    assert p["median"] == pytest.approx(90_003.0 / (2 * n))
    assert p["ci_low"] > 0
