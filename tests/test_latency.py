"""The latency experiment: chain construction, the size plan, parameter
parsing, and the analysis on a synthetic curve."""
import numpy as np
import pytest

from memfx.analysis.results import RunData
from memfx.experiments import get_experiment
from memfx.experiments.latency import chain_links, cycle_length, size_grid
from memfx.model.errors import ParamError

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


def test_size_grid_is_one_size_per_doubling_past_sparse_from():
    M = 1 << 20
    sizes = size_grid(4096, 960 * M, 2, anchors=[480 * M], sparse_from=64 * M)
    dense = [s for s in sizes if s <= 64 * M]
    assert np.allclose(np.diff(np.log2(dense)), 0.5, atol=0.01)
    # past 64 MiB: the octaves, both sides of the reported cache, the top
    assert [s // M for s in sizes if s > 64 * M] == [128, 256, 360, 512, 720, 960]
    assert size_grid(4096, 960 * M, 2, sparse_from=0) == size_grid(4096, 960 * M, 2)
    # a sparse_from at or below the bottom: octaves from there
    assert size_grid(128 * M, 960 * M, 3, sparse_from=64 * M) == \
        [128 * M, 256 * M, 512 * M, 960 * M]
    # above the top: no change
    assert size_grid(1024, 32 * M, 3, sparse_from=64 * M) == size_grid(1024, 32 * M, 3)


def test_plan_defaults_and_presets():
    exp = get_experiment("latency")
    quick = exp.resolve("quick")
    full = exp.resolve("full")
    pts = exp.plan(quick, MACHINE)
    assert {p.arm for p in pts} == {"random", "sequential"}
    assert max(p.params["size_bytes"] for p in pts) == 64 << 20
    # full: up to 2x the LLC (the memory window's top), both page sizes
    fpts = exp.plan(full, MACHINE)
    assert max(p.params["size_bytes"] for p in fpts) == 2 * (32 << 20)
    window = [s for s in {p.params["size_bytes"] for p in fpts} if s >= 1.5 * (32 << 20)]
    assert len(window) >= 2
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


# ---------------------------------------------------------------- analysis
# Synthetic points shaped like build_points' output: no measuring.

AMD_MACHINE = {"caches": [          # the sysfs view of this project's Zen 4 KVM guest
    {"level": 1, "type": "Data", "size_bytes": 32 << 10},
    {"level": 1, "type": "Instruction", "size_bytes": 32 << 10},
    {"level": 2, "type": "Unified", "size_bytes": 1 << 20},
    {"level": 3, "type": "Unified", "size_bytes": 32 << 20}],
    "memory": {"available_bytes": 16 << 30}}


def _point(arm, size, ns, pages="4k", noise=0.02, n=9, seed=0, share=None):
    rng = np.random.default_rng([seed, size, len(arm), len(pages)])
    vals = ns * (1 + noise * rng.standard_normal(n)) if n > 1 else np.array([float(ns)])
    med = float(np.median(vals))
    counters = {} if share is None else {"huge_page_share": share}
    return {"arm": arm, "params": {"size_bytes": int(size), "pages": pages, "npad": 7},
            "metric": "ns_per_load", "unit": "ns", "median": med, "values": vals.tolist(),
            "min": float(vals.min()), "max": float(vals.max()), "ci_low": med * 0.98,
            "ci_high": med * 1.02, "n": int(n), "rejected": 0, "cycles_est": med * 2.9,
            "cv": noise, "counters": counters, "method": "per-sample"}


def _steps(levels):
    """latency(size) of a staircase [(last size of the level, ns), ...]."""
    return lambda s: next(lat for cap, lat in levels if s <= cap)


def _points(curve, sizes, pages="4k", seq_scale=0.3, **kw):
    return [_point(arm, s, curve(s) * (seq_scale if arm == "sequential" else 1.0), pages, **kw)
            for s in sizes for arm in ("random", "sequential")]


def _analyze(points, machine=MACHINE, pages=("4k",)):
    from memfx.model.answers import complete_answers
    exp = get_experiment("latency")
    params = exp.resolve("full")
    params["pages"] = list(pages)
    data = RunData("latency", params, machine, points)
    given = exp.analyze(data)
    return {a.question.split(".", 1)[1]: a for a in complete_answers(exp.questions, given)}


def test_latency_declares_stable_questions():
    exp = get_experiment("latency")
    ids = [q.id for q in exp.questions]
    assert ids == ["latency.l1d", "latency.l2", "latency.l3", "latency.memory",
                   "latency.l1d_capacity", "latency.l2_capacity", "latency.l3_capacity",
                   "latency.tlb_reach", "latency.huge_page_benefit", "latency.prefetch_benefit"]
    assert all(q.seed == "004" for q in exp.questions)
    assert exp.declared("l2").better == "lower" and exp.declared("memory").unit == "ns"


def test_every_question_answered_once_on_a_clean_staircase():
    levels = [(48 << 10, 1.5), (2 << 20, 5.0), (32 << 20, 20.0), (1 << 40, 90.0)]
    a = _analyze(_points(_steps(levels), size_grid(1024, 128 << 20, 4)))
    assert len(a) == 10
    for name, lat in (("l1d", 1.5), ("l2", 5.0), ("l3", 20.0), ("memory", 90.0)):
        assert a[name].verdict == "measured"
        assert a[name].value == pytest.approx(lat, rel=0.05)
        assert a[name].ci_low <= a[name].value <= a[name].ci_high
        assert a[name].estimator and a[name].evidence
    assert any(d["unit"] == "cycles" for d in a["l2"].details)       # est. cycles in details
    for name, size in (("l1d_capacity", 48 << 10), ("l2_capacity", 2 << 20),
                       ("l3_capacity", 32 << 20)):
        assert a[name].verdict == "measured"
        assert 0.75 * size <= a[name].value <= 1.25 * size
        assert "as the" in a[name].because
    assert a["prefetch_benefit"].verdict == "detected"
    assert a["prefetch_benefit"].value == pytest.approx(1 / 0.3, rel=0.05)
    # 4 KiB pages only and every knee matches a cache: no TLB question to answer
    assert a["tlb_reach"].verdict == "not_detected"
    assert a["huge_page_benefit"].verdict == "not_measured"
    assert "pages=4k,thp" in a["huge_page_benefit"].because


def test_sizes_not_measured_are_not_concluded_about():
    """Issue 9: 'No latency step at L1d = 48K' on a run that never measured
    below 256K. A level the sweep did not reach is not_measured, with why."""
    levels = [(48 << 10, 1.5), (2 << 20, 5.0), (32 << 20, 20.0), (1 << 40, 90.0)]
    a = _analyze(_points(_steps(levels), size_grid(256 << 10, 24 << 20, 4)))
    for name in ("l1d", "l1d_capacity"):
        assert a[name].verdict == "not_measured"
        assert "256 KiB" in a[name].because and a[name].value is None
    assert a["l2"].value == pytest.approx(5.0, rel=0.05)
    # the sweep ended inside the L3 level: its end and memory were not measured
    assert a["l3"].value == pytest.approx(20.0, rel=0.05)
    assert a["l3_capacity"].verdict == "not_measured" and "still on the L3" in a["l3_capacity"].because
    for name in ("memory", "prefetch_benefit"):
        assert a[name].verdict == "not_measured"


def _shared_host_curve(s):
    """This project's EPYC guest, 4 KiB pages: L1d 1.4 ns to 32K, L2 5 ns,
    a ramp from 400K, L3 ~14 ns from 1.25 to 2.5 MiB only (shared), then a
    mixture that jumps between L3 and DRAM (3-5.5 MiB), DRAM from 6 MiB."""
    if s <= 32 << 10:
        return 1.4
    if s <= 400 << 10:
        return 5.0
    if s < 1200 << 10:
        return 5.0 * (14.0 / 5.0) ** (np.log2(s / (400 << 10)) / np.log2(3.0))
    if s <= 2560 << 10:
        return 14.0
    if s < 6 << 20:
        return 42.0 if round(np.log2(s) * 4) % 2 else 68.0     # the mixture: no plateau
    return 120.0


def test_levels_are_flat_plateaus_and_a_shared_l3_has_its_effective_capacity():
    """Issue 9: 'level 3: 5.15 ns' (the L2 edge) and 'level 4: 74 ns' (a
    mixture) were reported as levels; no L3 level at all; the L3 answer on a
    shared-cache host is 'effective capacity ~= X (sysfs says 32 MiB)'."""
    sizes = size_grid(1024, 64 << 20, 4, anchors=[32 << 10, 1 << 20, 32 << 20])
    a = _analyze(_points(_shared_host_curve, sizes), machine=AMD_MACHINE)
    assert a["l1d"].value == pytest.approx(1.4, rel=0.05)
    assert a["l2"].value == pytest.approx(5.0, rel=0.05)
    assert a["l3"].verdict == "measured" and a["l3"].value == pytest.approx(14.0, rel=0.05)
    plateaus = [d for q in ("l1d", "l2", "l3") for d in a[q].details if d["unit"] == "ns"]
    for d in plateaus:            # no level on the mixture or on a ramp
        assert not 30 < d["value"] < 100 and not 5.5 < d["value"] < 13
        assert d["sizes"] >= 3
    cap = a["l3_capacity"]
    assert 2560 << 10 <= cap.value <= 6 << 20
    assert "sysfs says 32 MiB" in cap.because and "effective capacity" in cap.because
    # 4 KiB pages only: the 3-5 MiB knee may be the TLB's; the answer says how to tell
    assert cap.verdict == "inconclusive" and "pages=4k,thp" in cap.because
    assert a["memory"].value == pytest.approx(120.0, rel=0.05)


def test_a_short_stretch_just_past_the_l2_is_not_the_l3s_plateau():
    """Replica 1 of a full survey on the 2-vCPU guest (L2 2 MiB): 26-28 ns
    from 1.94 to 2.12 MiB between the L2 (~6 ns) and the L3 (38-53 ns), read
    as the L3's plateau: latency.l3 27 ns and l3_capacity 2.5 MiB, where the
    other replicas read 8 and 12 MiB.  It ends within 25 % of the L2."""
    M = 1 << 20
    measured = [(0.25, 4.4), (0.31, 4.6), (0.40, 4.9), (0.50, 5.0), (0.63, 5.2), (0.79, 5.6),
                (1.00, 5.9), (1.26, 6.4), (1.37, 6.6), (1.50, 8.9), (1.59, 14.1), (1.78, 15.9),
                # the stretch (the refine's fine steps put five sizes in it)
                (1.90, 27.0), (1.94, 26.8), (2.00, 27.2), (2.06, 27.0), (2.12, 27.3),
                (2.52, 38.5), (3.00, 42.7),
                (3.17, 44.3), (4.00, 45.6), (5.04, 45.8), (6.35, 47.1), (8.00, 50.4),
                (10.08, 52.4), (10.99, 53.9), (11.99, 119.2), (12.70, 101.2), (14.25, 116.3),
                (16.00, 105.9), (16.95, 136.7), (20.16, 151.2), (25.40, 160.1), (32.00, 168.7)]
    small = [(s / 1024, 1.2) for s in (4, 8, 16, 32)] + [(0.0625, 4.0), (0.125, 4.1)]
    pts = []
    for mib, ns in small + measured:
        pts += [_point("random", int(mib * M), ns), _point("sequential", int(mib * M), ns * 0.3)]
    guest = {"caches": [{"level": 1, "type": "Data", "size_bytes": 48 << 10},
                        {"level": 2, "type": "Unified", "size_bytes": 2 << 20},
                        {"level": 3, "type": "Unified", "size_bytes": 480 << 20}],
             "memory": {"available_bytes": 16 << 30}}
    from memfx.experiments.latency import curve_levels
    stretch = [lv for lv in curve_levels([p for p in pts if p["arm"] == "random"])
               if 26 < lv.latency_ns < 28]
    assert stretch and stretch[0].flat and stretch[0].last_size > 2 * M   # past the L2
    a = _analyze(pts, machine=guest)
    assert a["l3"].verdict == "measured" and 38 <= a["l3"].value <= 54
    assert a["l3_capacity"].value is not None and 8 * M <= a["l3_capacity"].value <= 13 * M
    # the L2's answer keeps its own plateau's latency
    assert a["l2"].value == pytest.approx(5.0, rel=0.2)


def _tlb_knee_points(with_huge):
    """L2 = 1 MiB: 4 KiB pages step at ~539K (5 -> 7.5 ns: the L1 DTLB's
    reach), the L2 ends at 1 MiB; with huge pages there is no 539K step."""
    k4 = _steps([(32 << 10, 1.4), (540 << 10, 5.0), (1 << 20, 7.5), (6 << 20, 15.0),
                 (1 << 40, 120.0)])
    kh = _steps([(32 << 10, 1.4), (1 << 20, 5.0), (6 << 20, 14.0), (1 << 40, 100.0)])
    sizes = size_grid(1024, 64 << 20, 4, anchors=[32 << 10, 1 << 20, 32 << 20])
    pts = _points(k4, sizes)
    if with_huge:
        pts += _points(kh, sizes, pages="thp", share=1.0)
    return pts


def test_a_knee_is_a_cache_only_within_25_percent_and_tlb_only_when_huge_pages_lack_it():
    """Issue 9: factor 2 made a 539K TLB knee 'match L2 (1M)'."""
    a = _analyze(_tlb_knee_points(with_huge=True), machine=AMD_MACHINE, pages=("4k", "thp"))
    tlb = a["tlb_reach"]
    assert tlb.verdict == "detected"
    assert 430 << 10 <= tlb.value <= 700 << 10
    assert "huge pages lack" in tlb.because
    cap = a["l2_capacity"]
    assert 0.75 * (1 << 20) <= cap.value <= 1.25 * (1 << 20) and "as the 1 MiB" in cap.because
    assert a["l2"].value == pytest.approx(5.0, rel=0.05)
    assert a["huge_page_benefit"].verdict == "detected"
    assert a["huge_page_benefit"].value == pytest.approx(1.2, rel=0.05)


def test_without_huge_pages_an_unexplained_knee_is_cache_or_tlb():
    a = _analyze(_tlb_knee_points(with_huge=False), machine=AMD_MACHINE)
    tlb = a["tlb_reach"]
    assert tlb.verdict == "not_measured" and "pages=4k,thp" in tlb.because
    assert "cache or TLB" in tlb.because
    # the 539K knee is attributed to no cache; the L2 capacity is the 1M knee
    knee_539 = [d for d in tlb.details if 430 << 10 <= d["value"] <= 700 << 10]
    assert knee_539 and knee_539[0]["matches_cache"] is None
    assert knee_539[0]["verdict"] == "unknown"
    assert 0.75 * (1 << 20) <= a["l2_capacity"].value <= 1.25 * (1 << 20)


def test_a_knee_that_huge_pages_passed_earlier_is_no_tlb_knee():
    """Measured on the guest: with huge pages the shared L3 ran out at ~2M,
    with 4 KiB pages at ~4M. At the 4 KiB knee the huge-page curve is flat
    (already in memory), yet huge pages are no faster there: not the TLB."""
    k4 = _steps([(32 << 10, 1.4), (1 << 20, 5.0), (4 << 20, 16.0), (1 << 40, 130.0)])
    kh = _steps([(32 << 10, 1.4), (1 << 20, 5.0), (2 << 20, 16.0), (1 << 40, 130.0)])
    sizes = size_grid(1024, 64 << 20, 4, anchors=[32 << 10, 1 << 20, 32 << 20])
    pts = _points(k4, sizes) + _points(kh, sizes, pages="thp", share=1.0)
    cap = _an_l3_cache_knee_between(pts, 3 << 20, 6 << 20)
    assert "sysfs says 32 MiB" in cap.because


def _an_l3_cache_knee_between(pts, low, high):
    """The knee between low and high is a cache's (not a TLB's), no knee is
    a TLB's, and latency.l3_capacity is measured there: its answer."""
    a = _analyze(pts, machine=AMD_MACHINE, pages=("4k", "thp"))
    knee = next(d for d in a["tlb_reach"].details if low <= d["value"] <= high)
    assert knee["verdict"] == "cache (no reported size)"
    assert a["tlb_reach"].verdict == "not_detected"
    cap = a["l3_capacity"]
    assert cap.verdict == "measured" and low <= cap.value <= high
    return cap


def test_one_noisy_huge_page_point_past_the_knee_does_not_make_a_cache_knee_a_tlb_knee():
    """Issue 22's A/As on a guest: the effective L3 (~11 MiB) ends an octave
    past the STLB's reach, and the huge-page point just past the knee read
    low once (the shared L3 held that one cell).  Judged at the knee's two
    bracketing sizes alone, that point made the L3's end a 'TLB knee' and
    latency.l3_capacity inconclusive in one replica of three; judged plateau
    against plateau, huge pages show the step too."""
    k4 = _steps([(32 << 10, 1.4), (1 << 20, 5.0), (11 << 20, 40.0), (1 << 40, 155.0)])

    def kh(s):
        return 45.0 if (11 << 20) < s <= (12 << 20) else k4(s)

    sizes = size_grid(1024, 64 << 20, 4, anchors=[32 << 10, 1 << 20, 32 << 20])
    assert any((11 << 20) < s <= (12 << 20) for s in sizes)       # the noisy cell is measured
    pts = _points(k4, sizes) + _points(kh, sizes, pages="thp", share=1.0)
    cap = _an_l3_cache_knee_between(pts, 10 << 20, 13 << 20)
    assert "with huge pages too" in cap.because


def test_huge_pages_only():
    levels = [(32 << 10, 1.4), (1 << 20, 5.0), (32 << 20, 20.0), (1 << 40, 90.0)]
    pts = _points(_steps(levels), size_grid(1024, 64 << 20, 4), pages="thp", share=1.0)
    a = _analyze(pts, machine=AMD_MACHINE, pages=("thp",))
    assert a["l2"].value == pytest.approx(5.0, rel=0.05) and "thp pages" in a["l2"].because
    assert a["tlb_reach"].verdict == "not_measured"
    assert a["huge_page_benefit"].verdict == "not_measured"


def test_huge_page_points_count_only_when_backed_by_huge_pages():
    pts = _tlb_knee_points(with_huge=False)
    k4 = {(p["arm"], p["params"]["size_bytes"]): p["median"] for p in pts}
    # "thp" points that the kernel did not back: the same curve as 4 KiB pages
    pts += [_point(arm, s, ns, "thp", share=0.0) for (arm, s), ns in k4.items()]
    a = _analyze(pts, machine=AMD_MACHINE, pages=("4k", "thp"))
    assert a["huge_page_benefit"].verdict == "not_measured"
    assert "backed" in a["huge_page_benefit"].because
    assert a["tlb_reach"].verdict != "not_detected"      # no evidence that it is a cache


def test_points_with_fewer_than_three_samples_are_not_concluded_from():
    levels = [(48 << 10, 1.5), (2 << 20, 5.0), (32 << 20, 20.0), (1 << 40, 90.0)]
    sizes = size_grid(1024, 128 << 20, 4)
    pts = _points(_steps(levels), sizes)
    # one-sample outliers inside the L2 and L3 levels (n=1: no CI, no conclusion)
    for s in (300 << 10, 310 << 10, 320 << 10, 5 << 20, 5200 << 10, 5400 << 10):
        pts.append(_point("random", s, 60.0, n=1))
    a = _analyze(pts)
    assert a["l2"].value == pytest.approx(5.0, rel=0.05)
    assert a["l3"].value == pytest.approx(20.0, rel=0.05)
    assert len([d for d in a["l2"].details if d["unit"] == "ns"]) == 1
    for ans in a.values():
        assert not any("size_bytes=307200" in k for k in ans.evidence)


def test_bimodal_points_are_not_read_as_a_plateau():
    """Issue 16: on a shared last-level cache a point's samples can split
    between 'resident' and 'evicted by a neighbour'.  Five of nine samples at
    the L3 latency make a median that looks like an L3 plateau; flagged
    bimodal (as build_points flags them), those points are no level."""
    from memfx.analysis.results import build_points
    levels = [(48 << 10, 1.5), (2 << 20, 5.0), (32 << 20, 20.0), (1 << 40, 90.0)]
    sizes = size_grid(1024, 128 << 20, 4)
    pts = [p for p in _points(_steps(levels), sizes)
           if not (p["arm"] == "random" and 2 << 20 < p["params"]["size_bytes"] <= 32 << 20)]
    contended = [s for s in sizes if 2 << 20 < s <= 32 << 20]
    samples = [{"arm": "random", "point": {"size_bytes": s, "pages": "4k", "npad": 7},
                "metric": "ns_per_load", "unit": "ns", "length": 1000, "ns": v * 1000, "value": v,
                "counters": {}, "rejected": False}
               for s in contended for v in [20.0, 20.2, 19.9, 20.1, 20.3, 90.0, 91.0, 89.5, 90.5]]
    built = build_points(samples)
    assert all("bimodal" in p["flags"] and p["median"] == pytest.approx(20.2, rel=0.01) for p in built)
    a = _analyze(pts + built)
    assert a["l2"].value == pytest.approx(5.0, rel=0.05)
    assert a["l3"].verdict == "inconclusive" and a["l3"].value is None
    # it says why, and does not claim that nothing was measured there
    assert "bimodal" in a["l3"].because and "two groups" in a["l3"].because
    assert "was measured" not in a["l3"].because
    for ans in a.values():
        assert not any(f"size_bytes={s}," in k or k.endswith(f"size_bytes={s}")
                       for k in ans.evidence for s in contended), ans.question
    # unflagged, the same medians would have made an L3 plateau at 20 ns
    for p in built:
        p["flags"] = []
    assert _analyze(pts + built)["l3"].value == pytest.approx(20.0, rel=0.05)


def test_no_cache_sizes_reported():
    levels = [(48 << 10, 1.5), (1 << 40, 90.0)]
    a = _analyze(_points(_steps(levels), size_grid(1024, 1 << 20, 4)), machine={"caches": []})
    assert a["l1d"].verdict == "not_measured" and "reports no L1d" in a["l1d"].because
    assert a["memory"].verdict == "not_measured"


def test_refine_measures_huge_pages_around_unexplained_knees_only():
    exp = get_experiment("latency")
    params = exp.resolve("quick")
    data = RunData("latency", params, AMD_MACHINE, _tlb_knee_points(with_huge=False))
    extra = exp.refine(data, params, AMD_MACHINE)
    huge = sorted({p.params["size_bytes"] for p in extra if p.params["pages"] == "thp"})
    assert huge, "no huge-page points around the 539K knee"
    assert all(p.arm == "random" for p in extra if p.params["pages"] == "thp")
    # around the 539K knee (and the 1-6M knee, which no cache explains either)
    assert any(400 << 10 <= s <= 700 << 10 for s in huge)
    # not around the L1d knee (32K) nor the L2 knee (1M): caches explain them
    assert not any(s < 300 << 10 for s in huge)
    assert not any(768 << 10 <= s <= 1400 << 10 for s in huge)
    # with huge pages swept, or refine off, no extra huge-page points
    params_thp = dict(params, pages=["4k", "thp"])
    assert not [p for p in exp.refine(data, params_thp, AMD_MACHINE)
                if p.params["pages"] == "thp"]
    assert exp.refine(data, dict(params, refine=False), AMD_MACHINE) == []


def test_refine_steps_past_sparse_from_are_half_as_fine():
    exp = get_experiment("latency")
    params = exp.resolve("full")
    assert params["sparse_from"] == 64 << 20
    M = 1 << 20
    levels = [(48 << 10, 1.5), (2 * M, 5.0), (160 * M, 40.0), (1 << 40, 120.0)]
    sizes = size_grid(4096, 960 * M, 3, sparse_from=64 * M)
    data = RunData("latency", params, MACHINE, _points(_steps(levels), sizes))
    extra = sorted({p.params["size_bytes"] for p in exp.refine(data, params, MACHINE)
                    if p.params["pages"] == "4k"})
    past = [s for s in extra if s > 64 * M]
    assert past and all(128 * M < s < 256 * M for s in past)
    assert len(past) == 3                        # 4 per doubling, not 7 (8 per doubling)
    below = [s for s in extra if s < 4 * M]
    assert len(below) >= 4                       # the cache knees keep 8 per doubling
    nothing_sparse = exp.refine(data, dict(params, sparse_from=0), MACHINE)
    assert len([p for p in nothing_sparse if p.params["size_bytes"] > 64 * M
                and p.params["pages"] == "4k"]) > len(past) * len(exp.arms)


def test_plot_shows_every_sample_the_cache_bands_and_the_knees():
    """The plot reads the answers: a line at each capacity answer's knee,
    dashed lines at the TLB knees of latency.tlb_reach (no finding ids)."""
    from memfx.report.plots import figure_for, spec_marks
    from plot_checks import band_span, figure_summary
    exp = get_experiment("latency")
    levels = [(48 << 10, 1.5), (2 << 20, 5.0), (32 << 20, 20.0), (1 << 40, 90.0)]
    pts = _points(_steps(levels), size_grid(1024, 256 << 20, 4))
    a = _analyze(pts)
    answers = [a[q.id.split(".", 1)[1]].as_dict(q) for q in exp.questions]
    doc = {"experiment": "latency", "run_id": "x", "machine": MACHINE,
           "params": {"pages": ["4k"]}, "points": pts, "answers": answers, "findings": []}
    (ax,) = figure_summary(figure_for(doc))
    assert sorted(ax["curve_labels"]) == ["random", "sequential"]
    assert all(len(c.get_xdata()) == len(pts) // 2 for c in ax["curves"])
    assert ax["scatter_points"] == sum(len(p["values"]) for p in pts)
    assert (ax["xscale"], ax["yscale"]) == ("log", "log")
    assert ax["xlabel"] == "working set (bytes)"
    # the data and unified caches sysfs reports, each a shaded band up to its size
    assert [t for t in ax["texts"] if t.endswith("(sysfs)")] == [
        "L1d 48 KiB (sysfs)", "L2 2 MiB (sysfs)", "L3 32 MiB (sysfs)"]
    assert [band_span(b)[1] for b in ax["bands"]] == [48 << 10, 2 << 20, 32 << 20]
    assert band_span(ax["bands"][0])[0] == 1024                  # the first from the smallest size
    # one mark per capacity answer, at its value
    ends = [t for t in ax["texts"] if " ends ~" in t]
    assert [t.split()[0] for t in ends] == ["L1d", "L2", "L3"]
    assert len(spec_marks(doc, exp.plots[0])) == 3


def test_plot_marks_tlb_knees_and_draws_each_page_size():
    from memfx.report.plots import figure_for, spec_marks
    from plot_checks import figure_summary
    exp = get_experiment("latency")
    a = _analyze(_tlb_knee_points(with_huge=True), machine=AMD_MACHINE, pages=("4k", "thp"))
    answers = [a[q.id.split(".", 1)[1]].as_dict(q) for q in exp.questions]
    marks = spec_marks({"answers": answers}, exp.plots[0])
    assert any(label.startswith("L2 ends") and style == "-" for _, label, style in marks)
    tlb = [size for size, label, style in marks if label.startswith("TLB knee") and style == "--"]
    assert tlb == [answers[7]["value"]]                        # latency.tlb_reach's knee
    # a quick run's params say 4k only, yet it may hold huge-page points: a curve each
    doc = {"experiment": "latency", "run_id": "r", "params": {"pages": ["4k"]},
           "machine": AMD_MACHINE, "answers": answers, "findings": [],
           "points": _tlb_knee_points(with_huge=True)}
    (ax,) = figure_summary(figure_for(doc))
    assert sorted(ax["curve_labels"]) == ["random 4k", "random thp", "sequential 4k",
                                          "sequential thp"]


def _sample(length, ns, arm="random", size=4096):
    return {"arm": arm, "point": {"size_bytes": size}, "metric": "ns_per_load", "unit": "ns",
            "value": ns / length, "length": length, "ns": ns, "cycles_est": ns * 2,
            "counters": {}, "rejected": False, "reason": None}


def test_points_use_one_estimator_and_report_the_call_overhead():
    """Every point: the median of the per-sample values of the longest run
    length (one estimator, named in `method`); the N/2N fit only reports the
    fixed cost per call."""
    from memfx.analysis.results import ESTIMATOR, build_points
    n = 1000
    # fixed overhead of 500 ns per sample, 3 ns per load
    samples = [_sample(n, 500 + 3 * n + j) for j in range(7)] + \
              [_sample(2 * n, 500 + 6 * n + j) for j in range(7)]
    samples.append(dict(_sample(n, 10 ** 9), rejected=True, reason="context_switch"))
    (p,) = build_points(samples)
    assert p["method"] == ESTIMATOR
    assert p["median"] == pytest.approx((500 + 6 * n + 3) / (2 * n))
    assert p["call_overhead_ns"] == pytest.approx(503.0)   # the median sample adds 3 ns
    # its standard error from the samples' spread (MAD 2 ns in both lengths):
    # sqrt((2N * se)^2 + (N * se)^2) / N with se = 1.2533 * 1.4826 * 2 / sqrt(7)
    se = 1.2533 * 1.4826 * 2 / 7 ** 0.5
    assert p["call_overhead_se_ns"] == pytest.approx(5 ** 0.5 * se, rel=1e-3)
    assert p["rejected"] == 1 and p["n"] == 7
    assert p["min"] <= p["ci_low"] <= p["median"] <= p["ci_high"] <= p["max"]


def test_a_negative_call_overhead_comes_with_the_noise_that_explains_it():
    """No fixed cost, noisy samples: the N/2N intercept can come out below
    zero (seen: -24 us at 1 MiB); its standard error says it is noise."""
    from memfx.analysis.results import build_points
    rng = np.random.default_rng(5)
    n = 10_000
    samples = [_sample(length, 20.0 * length * (1 + 0.02 * rng.standard_normal()))
               for length in (n, 2 * n) for _ in range(9)]
    (p,) = build_points(samples)
    assert p["call_overhead_ns"] is not None and p["call_overhead_se_ns"] > 0
    assert abs(p["call_overhead_ns"]) < 3 * p["call_overhead_se_ns"]
    # the spread of 2 % of 200 us per short sample is what the error is made of
    assert 1_000 < p["call_overhead_se_ns"] < 20_000


def test_points_keep_their_estimator_when_the_difference_is_noise():
    """The estimator does not change per point: a noisy N/2N fit (here the
    longer run is faster) leaves the median alone."""
    from memfx.analysis.results import ESTIMATOR, build_points
    n = 1000
    samples = [_sample(n, 100_000.0 + j) for j in range(7)] + \
              [_sample(2 * n, 90_000.0 + j) for j in range(7)]
    (p,) = build_points(samples)
    assert p["method"] == ESTIMATOR
    assert p["median"] == pytest.approx(90_003.0 / (2 * n))
    assert p["min"] <= p["median"] <= p["max"]


@pytest.mark.measuring
def test_min_size_equal_to_max_size_measures_exactly_that_size(tmp_path):
    """Issue 16: `--set min_size=X --set max_size=X` measures X and nothing
    else -- no cache anchor, no refinement step, no huge-page extra -- in
    both arms (or the one chosen with --set arms=...)."""
    import json

    from conftest import run_cli
    db = str(tmp_path / "one.db")
    exp = get_experiment("latency")
    for preset in ("quick", "full"):
        pts = exp.plan(exp.resolve(preset, {"min_size": "48K", "max_size": "48K"}), MACHINE)
        assert {p.params["size_bytes"] for p in pts} == {48 << 10}
    for arms, expected in (("all", {"random", "sequential"}), ("random", {"random"})):
        p = run_cli("run", "latency", "--set", "min_size=48K", "--set", "max_size=48K",
                    "--set", "samples=3", "--set", "min_sample_ms=0.05", "--set", f"arms={arms}",
                    "--json", "-q", db=db)
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        assert {pt["params"]["size_bytes"] for pt in doc["points"]} == {48 << 10}
        assert {pt["params"]["pages"] for pt in doc["points"]} == {"4k"}
        assert {pt["arm"] for pt in doc["points"]} == expected


def test_quick_measures_huge_pages_at_every_octave_so_each_run_can_classify_its_knees():
    """Issue 22: with huge pages only around each replica's own knees, a
    step the pooled curve found could lack them and l3_capacity read
    inconclusive in one survey of five.  The quick plan has them at 1 MiB,
    2 MiB, ... max_size in every run; `huge_from=0` turns them off."""
    exp = get_experiment("latency")
    params = exp.resolve("quick", {})
    huge = sorted(p.params["size_bytes"] for p in exp.plan(params, MACHINE)
                  if p.params["pages"] == "thp")
    assert huge == [1 << k for k in range(20, 27)]          # 1 MiB .. 64 MiB
    assert all(p.arm == "random" for p in exp.plan(params, MACHINE) if p.params["pages"] == "thp")
    off = exp.resolve("quick", {"huge_from": "0"})
    assert not [p for p in exp.plan(off, MACHINE) if p.params["pages"] == "thp"]
    both = exp.resolve("quick", {"pages": "4k,thp"})        # a swept thp curve needs no extra
    assert len([p for p in exp.plan(both, MACHINE) if p.params["pages"] == "thp"]) == \
        len([p for p in exp.plan(both, MACHINE) if p.params["pages"] == "4k"])


def test_a_level_rests_on_the_same_planned_working_sets_whatever_a_run_refined():
    """Issue 22: two runs' evidence keys are equal.  A level's latency is
    read at the planned sizes of 2-4x the cache below (the L1d at 1/8-1/2
    of itself), not over whatever its plateau spans once refine() has put
    fine steps at the knees a run found; where those sizes are not on the
    level's plateau (an L3 that holds far less than it reports) the answer
    takes the plateau, and says so."""
    from memfx.experiments.latency import level_window
    exp = get_experiment("latency")
    params = exp.resolve("full")
    params["pages"] = ["4k"]
    grid = sorted({p.params["size_bytes"] for p in exp.plan(params, MACHINE)})
    levels = [(48 << 10, 1.5), (2 << 20, 5.0), (32 << 20, 20.0), (1 << 40, 90.0)]
    evidence = []
    for fine in ([40 << 10, 44 << 10, 1900 << 10], [52 << 10, 1700 << 10, 2200 << 10]):
        a = _analyze(_points(_steps(levels), sorted(set(grid) | set(fine))))
        evidence.append({n: a[n].evidence for n in ("l1d", "l2", "l3")})
        caps = {"l1d": (48 << 10, 0), "l2": (2 << 20, 48 << 10), "l3": (32 << 20, 2 << 20)}
        for name, (cap, below) in caps.items():
            lo, hi = level_window(cap, below)
            sizes = [int(k.split("size_bytes=")[1]) for k in a[name].evidence]
            assert len(sizes) >= 2 and all(lo <= s <= hi and s in grid for s in sizes), name
            assert a[name].value == pytest.approx(dict(levels)[cap], rel=0.05)
            assert "the random chase reads it at" in a[name].because, name
    assert evidence[0] == evidence[1]
    assert level_window(2 << 20, 48 << 10) == (96 << 10, 192 << 10)
    assert level_window(256 << 10, 64 << 10) == (128 << 10, 128 << 10)      # half of its own
    # an L3 reported at 32 MiB that holds 6 MiB: its window (4-8 MiB) ends
    # in memory, so the answer is the plateau's, from past 2 MiB to 6 MiB
    short = [(48 << 10, 1.5), (2 << 20, 5.0), (6 << 20, 20.0), (1 << 40, 90.0)]
    a = _analyze(_points(_steps(short), grid))
    sizes = [int(k.split("size_bytes=")[1]) for k in a["l3"].evidence]
    assert a["l3"].value == pytest.approx(20.0, rel=0.05)
    assert all(2 << 20 < s <= 6 << 20 for s in sizes) and min(sizes) < 4 << 20
    assert "stays flat at that from" in a["l3"].because
