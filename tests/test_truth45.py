"""Issue 45: a count at its step (tlb.l1_entries, tlb.l2_entries) is the last
size that stays fast, its CI never narrower than the measured sizes around
the step, and refinement brings that bracket within the declared
resolution.  Synthetic curves only."""
import pytest

from memfx.analysis.results import RunData, build_points, document
from memfx.experiments import get_experiment
from memfx.experiments.tlb import REFINE_POINTS, count_at_step, page_grid, tlb_knees
from memfx.model.findings import MEASURED

# 48 KiB L1d and 2 MiB L2: 768 and 32768 lines (one line per page)
MACHINE = {"caches": [{"level": 1, "type": "Data", "size_bytes": 48 << 10, "line_bytes": 64},
                      {"level": 2, "type": "Unified", "size_bytes": 2 << 20, "line_bytes": 64}]}
PARAMS = {"resolution_entries": 2, "resolution_pct": 2.0, "refine": True}


def curve(l1, l2):
    """ns per load with an L1 TLB of l1 entries, L1d of 768 lines, L2 TLB of l2."""
    return lambda n: 2.0 + 3.0 * (n > l1) + 5.0 * (n > 768) + 18.0 * (n > l2)


def samples(ns_of, sizes, replica=0, k=5):
    return [{"arm": "4k", "point": {"page_count": n}, "metric": "ns_per_load", "unit": "ns",
             "value": ns_of(n) * (1 + 0.002 * i), "length": 1000,
             "ns": ns_of(n) * 1000 * (1 + 0.002 * i), "cycles_est": None, "counters": {},
             "rejected": False, "replica": replica}
            for n in sizes for i in range(k)]


def answers(s, params=PARAMS):
    run = {"id": "r", "experiment": "tlb", "status": "complete", "params": dict(params),
           "machine": MACHINE}
    return {a["question"]: a for a in document(run, s)["answers"]}


def bracket(sizes, count):
    """The measured sizes around a step after `count` entries."""
    return max(n for n in sizes if n <= count), min(n for n in sizes if n > count)


@pytest.mark.parametrize("l1", [70, 81, 96, 97, 99, 101, 120])
@pytest.mark.parametrize("per_octave", [2, 3, 6])
def test_a_step_between_two_measured_sizes_never_gets_a_narrower_ci(l1, per_octave):
    sizes = page_grid(16, 16384, per_octave)
    a = answers(samples(curve(l1, 2000), sizes))["tlb.l1_entries"]
    low, high = bracket(sizes, l1)
    assert a["verdict"] == MEASURED
    # the count is the last size that stays fast, and the CI holds the bracket
    assert a["value"] == low
    assert a["ci_low"] <= low and a["ci_high"] >= high
    assert a["ci_low"] <= l1 <= a["ci_high"]


@pytest.mark.parametrize("l2", [1700, 2048, 3072, 5000])
def test_the_l2_count_is_bracketed_by_the_sizes_measured(l2):
    sizes = page_grid(16, 16384, 3)
    a = answers(samples(curve(96, l2), sizes))["tlb.l2_entries"]
    low, high = bracket(sizes, l2)
    assert a["verdict"] == MEASURED and a["value"] == low
    assert a["ci_low"] <= low and a["ci_high"] >= high


def test_count_at_step_widens_a_tight_bracket_to_the_resolution():
    sizes = page_grid(16, 16384, 3)
    fast = curve(96, 2048)
    levels = tlb_knees((sizes, [fast(n) for n in sizes]), [768, 32768])[0]
    lv = levels[0][1]
    count, lo, hi, first_slow = count_at_step(lv, sizes + [97], 2)
    assert (count, first_slow) == (lv.knee_low, 97)
    assert lo == lv.knee_low - 2 and hi == max(97, lv.knee_low + 2)


def test_refine_brings_each_bracket_within_the_declared_resolution():
    exp = get_experiment("tlb")
    sizes = page_grid(16, 16384, 3)
    truth = curve(97, 1900)
    first = samples(truth, sizes)
    data = RunData("tlb", PARAMS, MACHINE, build_points(first), first)
    extra = exp.refine(data, PARAMS, MACHINE)
    added = sorted(p.params["page_count"] for p in extra)
    assert added and all(p.arm == "4k" for p in extra) and not set(added) & set(sizes)
    assert len(added) <= 2 * REFINE_POINTS
    both = sorted(set(sizes) | set(added))
    a = answers(first + samples(truth, added))
    for q, count in (("tlb.l1_entries", 97), ("tlb.l2_entries", 1900)):
        low, high = bracket(both, count)
        res = max(2, low * 0.02)
        assert a[q]["value"] == low and high - low <= 2 * res
        assert a[q]["ci_low"] <= count <= a[q]["ci_high"]
        assert a[q]["ci_high"] - a[q]["ci_low"] <= 4 * res
    # refine off: nothing added
    assert exp.refine(data, dict(PARAMS, refine=False), MACHINE) == []


def test_a_ramp_in_two_steps_is_one_tlb_not_two():
    # a 96-entry DTLB whose ramp pauses on a short plateau (97..120 pages)
    # before the L2 TLB hits: the second knee is the same TLB's, and the
    # L2 TLB is the step at 2048
    def ramp(n):
        return 2.0 + 1.0 * (n > 96) + 2.0 * (n > 120) + 5.0 * (n > 768) + 18.0 * (n > 2048)
    sizes = sorted(set(page_grid(16, 16384, 6)) | set(range(96, 200, 6)))
    a = answers(samples(ramp, sizes))
    assert a["tlb.l1_entries"]["value"] == 96
    low, high = bracket(sizes, 2048)
    assert a["tlb.l2_entries"]["value"] == low
    assert a["tlb.l2_entries"]["ci_low"] <= 2048 <= a["tlb.l2_entries"]["ci_high"]


def test_replicas_on_one_grid_do_not_narrow_the_bracket():
    """Three replicas measured on the same grid each bracket the step by the
    sizes around it: combined, the CI still holds that bracket (a Student-t
    interval over them read 99 [97.3, 101] from brackets of 96 and 102)."""
    sizes = page_grid(16, 16384, 3)
    s = sum((samples(curve(99, 2000), sizes, replica=r) for r in range(3)), [])
    a = answers(s)["tlb.l1_entries"]
    low, high = bracket(sizes, 99)
    assert a["ci_low"] <= low and a["ci_high"] >= high, (a["ci_low"], a["ci_high"])


def test_an_l2_tlb_ramp_that_starts_within_2x_of_the_l1d_is_a_tlb():
    """An L2 TLB whose ramp starts at 1,400 pages, 1.8x the L1d's 768 lines,
    and rises gradually to 2,400: the L1d's step is bracketed on its own (the
    grid measures 0.9x and 1.1x each cache's capacity in lines) and the ramp
    is the L2 TLB, its count where it leaves the plateau."""
    def ramp(n):
        slow = min(1.0, max(0.0, (n - 1400) / 1000))
        return 2.0 + 3.0 * (n > 96) + 5.0 * (n > 768) + 18.0 * slow

    exp = get_experiment("tlb")
    sizes = page_grid(16, 16384, 3, cache_lines=[768, 32768])
    assert {691, 844} <= set(sizes)
    first = samples(ramp, sizes)
    data = RunData("tlb", PARAMS, MACHINE, build_points(first), first)
    added = [p.params["page_count"] for p in exp.refine(data, PARAMS, MACHINE)]
    a = answers(first + samples(ramp, added))
    assert a["tlb.l1_entries"]["ci_low"] <= 96 <= a["tlb.l1_entries"]["ci_high"]
    l2 = a["tlb.l2_entries"]
    assert l2["verdict"] == MEASURED
    # the last size on the plateau, where the ramp leaves it (not past it),
    # within the declared resolution once refined
    assert 1290 <= l2["value"] <= 1550, l2["value"]
    assert l2["ci_low"] <= l2["value"] <= l2["ci_high"]
    assert l2["ci_high"] - l2["ci_low"] <= 4 * max(2, l2["value"] * 0.02)


def test_the_grid_brackets_every_cache_capacity_in_lines():
    sizes = page_grid(16, 16384, 3, cache_lines=[512, 768, 32768])
    for lines in (512, 768):
        assert int(lines * 0.9) in sizes and int(lines * 1.1) in sizes
    assert max(sizes) == 16384       # a capacity beyond the sweep adds nothing
