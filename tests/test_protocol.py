"""The measurement protocol (issue 16): steady state before every timed
sample, selectable arms, one size when min_size = max_size, one estimator
per point with min <= median <= max, bimodal points flagged."""
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memfx.analysis.results import ESTIMATOR, build_points, point_cautions
from memfx.experiments import get_experiment
from memfx.experiments.base import Experiment, Point, Trial
from memfx.model.errors import ParamError
from memfx.running import worker as _worker

MACHINE = {"caches": [{"level": 1, "type": "Data", "size_bytes": 32 << 10},
                      {"level": 2, "type": "Unified", "size_bytes": 1 << 20},
                      {"level": 3, "type": "Unified", "size_bytes": 32 << 20}],
           "memory": {"available_bytes": 16 << 30}}


# ---- a lab whose kernels are cold after every switch -------------------------------

class ColdStartLab:
    """Stands in for memfx.lab.lab.Lab: every trial runs at `steady` ns per iteration,
    but after another trial ran it starts (1 + amplitude) times slower and
    decays to steady with a time constant of `tau` iterations (its working
    set being brought back into the caches and TLBs)."""

    def __init__(self, steady, amplitude=1.0, tau=3000, count=1000):
        self.steady, self.amplitude, self.tau, self.count = steady, amplitude, tau, count
        self.current, self.since = None, {}

    def _run(self, trial, count):
        key = trial.kernel
        if self.current != key:
            self.current, self.since[key] = key, 0
        x0 = self.since[key]
        x1 = x0 + count
        self.since[key] = x1
        excess = self.amplitude * self.tau * (math.exp(-x0 / self.tau) - math.exp(-x1 / self.tau))
        return self.steady[key] * (count + excess)

    def warm(self, trial, count):
        return self._run(trial, count) / count

    def calibrate(self, trial):
        return self.count

    def cycles_per_tick(self):
        return 1.0, 0.0

    def core_speed(self):
        return 300.0            # GB/s of the lab's L1d read: a core at one speed

    def sample(self, trial, count, cycles_per_tick):
        ns = self._run(trial, count)
        return {"metric": "ns_per_load", "unit": "ns", "value": ns / count, "length": count,
                "ns": ns, "ticks": ns, "cycles_est": ns, "counters": {}, "rejected": False,
                "reason": None}

    def release(self):
        pass


class TwoArms(Experiment):
    name = "two_arms_test"
    arms = ("slow", "fast")

    def plan(self, params, machine):
        return [Point(a, {"size_bytes": 1 << 30}) for a in self.arms]

    def prepare(self, point, params, lab):
        # one pass over the working set: 5000 iterations (the transient of
        # ColdStartLab decays with tau = 3000, i.e. within about a pass)
        return Trial(point.arm, metric="time", difference=True, warmup=5000)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_cold_start_after_every_switch_does_not_bias_the_estimate(seed):
    """Interleaving samples of two arms with no re-warm put every sample in
    the transient (~1.7x the steady time here); every figure must now be
    within 2 % of the steady state."""
    exp = TwoArms()
    steady = {"slow": 300.0, "fast": 2.0}
    lab = ColdStartLab(steady)
    params = {"samples": 9}
    cell = exp.plan(params, {})
    recs = _worker.measure_cell(exp, cell, params, lab, random.Random(seed))
    points = {p["arm"]: p for p in build_points(recs)}
    for arm, want in steady.items():
        p = points[arm]
        assert p["n"] == 9
        assert p["median"] == pytest.approx(want, rel=0.02)
        assert p["max"] == pytest.approx(want, rel=0.02)   # not even one sample in the transient
        assert p["counters"]["settled"] == 1


def test_settle_makes_at_least_one_pass_over_the_working_set():
    lab = ColdStartLab({"k": 1.0}, amplitude=0.0)
    trial = Trial("k", metric="time")
    state = _worker.settle(lab, trial, count=1000, cycles_per_tick=1.0, pass_iters=50_000)
    assert lab.since["k"] >= 50_000
    assert state["settled"] == 1


def test_settle_gives_up_at_its_time_cap():
    """A kernel that keeps getting faster never settles; the cap ends it."""
    class EverFaster(ColdStartLab):
        calls = 0

        def _run(self, trial, count):
            self.calls += 1
            return 1000.0 * count * 0.9 ** self.calls

    lab = EverFaster({"k": 1000.0})
    trial = Trial("k", metric="time")
    state = _worker.settle(lab, trial, count=1000, cycles_per_tick=1.0, max_seconds=0.01)
    assert state["settled"] == 0
    assert 0 < state["settle_ms"] <= 10 + 2     # the budget, plus the block that crossed it


def test_a_visits_settle_completes_a_pass_longer_than_its_time_cap():
    """Arms that share a region (fill's value arms) rely on the visit's
    re-warm writing the whole region: its budget is never below one pass,
    while a plain settle stops at the cap."""
    lab = ColdStartLab({"k": 1000.0}, amplitude=0.0)          # 1 us per iteration
    trial = Trial("k", metric="time")
    capped = _worker.settle(lab, trial, count=100, cycles_per_tick=1.0, pass_iters=20_000,
                            max_seconds=0.005)
    assert capped["settled"] == 0 and lab.since["k"] < 20_000
    lab = ColdStartLab({"k": 1000.0}, amplitude=0.0)
    state = _worker.settle(lab, trial, count=100, cycles_per_tick=1.0, pass_iters=20_000,
                           max_seconds=0.005, whole_pass=True)
    assert lab.since["k"] >= 20_000 and state["settled"] == 1


def test_a_chunked_stream_settles_pass_by_pass():
    """A stream in chunks (Trial.chunks) that speeds up over many passes (a
    fresh working set on a guest) is compared whole pass against whole
    pass (within the re-warm's budget of 3 passes): blocks of a few chunks
    each look steady inside the drift."""
    class Blocks(ColdStartLab):
        sizes = []

        def sample(self, trial, count, cycles_per_tick):
            self.sizes.append(count)
            return super().sample(trial, count, cycles_per_tick)

    lab = Blocks({"k": 1.0}, amplitude=1.0, tau=5 * 64)      # a transient of ~5 passes
    trial = Trial("k", metric="bandwidth", chunks=64)
    state = _worker.settle(lab, trial, count=2, cycles_per_tick=1.0, pass_iters=64,
                           max_seconds=10.0, whole_pass=True)
    assert min(lab.sizes) >= 64                               # every block a whole pass
    assert lab.since["k"] >= 3 * 64 and state["settle_blocks"] >= 3   # up to its 3-pass budget
    # the same stream settled in blocks of a few chunks stops inside the transient
    lab = Blocks({"k": 1.0}, amplitude=1.0, tau=5 * 64)
    _worker.settle(lab, Trial("k", metric="bandwidth"), count=2, cycles_per_tick=1.0,
                   pass_iters=64, max_seconds=10.0, whole_pass=True)
    assert lab.since["k"] < 3 * 64


def test_a_point_with_long_samples_takes_fewer_within_arm_seconds():
    """arm_seconds caps one arm's timed seconds per cell: an arm whose
    samples are long takes fewer (never below 3), the short arm all of
    them; 0 turns the cap off."""
    exp = TwoArms()
    steady = {"slow": 300.0, "fast": 2.0}        # x 1000 iterations: 0.3 ms and 2 us a sample
    for arm_seconds, slow_n in ((0.0005, 3), (0.002, 6), (0, 9)):
        params = {"samples": 9, "arm_seconds": arm_seconds}
        recs = _worker.measure_cell(exp, exp.plan(params, {}), params, ColdStartLab(steady),
                                    random.Random(1))
        points = {p["arm"]: p for p in build_points(recs)}
        assert points["slow"]["n"] == slow_n and points["fast"]["n"] == 9
    assert _worker.samples_within(11, 0.5, 150e6) == 3       # a 960 MiB copy's calls
    assert _worker.samples_within(11, 0.5, 1e6) == 11
    assert _worker.samples_within(11, 0.5, None) == 11
    assert _worker.samples_within(5, 0.5, 126e6) == 3        # quick fill's DRAM passes


class ScriptedPasses(ColdStartLab):
    """Each whole pass of a chunked stream runs at the next of `gbps` (then
    at the last one): a fresh 64 MiB read on a KVM guest whose host cache
    takes the set in over a few passes, after a 2-pass plateau."""

    def __init__(self, gbps, pass_iters):
        super().__init__({"k": 1.0}, amplitude=0.0)
        self.gbps, self.pass_iters, self.passes = list(gbps), pass_iters, 0

    def sample(self, trial, count, cycles_per_tick):
        rate = self.gbps[min(self.passes, len(self.gbps) - 1)]
        self.passes += count // self.pass_iters
        ns = count / rate
        return {"metric": "gb_per_s", "unit": "GB/s", "value": rate, "length": count,
                "ns": ns, "ticks": ns, "cycles_est": ns, "counters": {}, "rejected": False,
                "reason": None}


# measured on the 480 MiB-LLC guest (a fresh 64 MiB read, GB/s per pass)
FRESH_64M_READ = [11.0, 11.0, 13.3, 19.6, 23.9, 23.7, 25.6, 25.8, 25.2, 24.2, 25.7, 25.4]


def test_a_fresh_chunked_stream_is_not_settled_by_its_early_plateau():
    """Its first two passes agree within the tolerance; compared with the
    previous pass only, the settle stopped there and the samples caught the
    ramp.  A fresh stream's pass must be no faster than the two before it."""
    lab = ScriptedPasses(FRESH_64M_READ, pass_iters=8)
    trial = Trial("k", metric="bandwidth", chunks=8)
    state = _worker.settle(lab, trial, count=1, cycles_per_tick=1.0, pass_iters=8,
                           whole_pass=True, fresh=True)
    assert state["settled"] == 1
    assert FRESH_64M_READ[lab.passes] >= 24.0        # the next sample runs at the plateau
    # a later visit (the region no longer fresh) still stops at two agreeing passes
    lab = ScriptedPasses(FRESH_64M_READ, pass_iters=8)
    _worker.settle(lab, trial, count=1, cycles_per_tick=1.0, pass_iters=8, whole_pass=True)
    assert lab.passes == 2 and FRESH_64M_READ[lab.passes] < 14


def test_the_warm_up_pass_just_before_is_the_settles_first_block():
    """A steady stream whose warm-up pass ran right before needs one more
    block, not two (one pass of a 960 MiB random read is 0.5 s)."""
    trial = Trial("k", metric="bandwidth", chunks=8)
    lab = ScriptedPasses([20.0] * 6, pass_iters=8)
    _worker.settle(lab, trial, count=1, cycles_per_tick=1.0, pass_iters=8, whole_pass=True)
    assert lab.passes == 2
    lab = ScriptedPasses([20.0] * 6, pass_iters=8)
    state = _worker.settle(lab, trial, count=1, cycles_per_tick=1.0, pass_iters=8,
                           whole_pass=True, warmed_ns_per_iter=1 / 20.0)
    assert lab.passes == 1 and state["settled"] == 1


def test_a_settle_starts_no_pass_its_budget_cannot_hold():
    """A fresh stream whose warm-up pass alone used the budget (one pass of
    a 960 MiB random read: 0.5 s) is sampled next, not passed over again
    only to end unsettled (a fresh stream compares a pass with the two
    before it); a shorter warm-up pass still gets its pass."""
    trial = Trial("k", metric="bandwidth", chunks=8)
    lab = ScriptedPasses([0.02] * 6, pass_iters=8)     # 400 ns a pass
    state = _worker.settle(lab, trial, count=1, cycles_per_tick=1.0, pass_iters=8,
                           whole_pass=True, fresh=True, warmed_ns_per_iter=50.0,
                           max_seconds=300e-9)
    assert lab.passes == 0 and state["settled"] == 0 and state["settle_blocks"] == 0
    assert state["ns_per_iter"] == 50.0
    # nor, past the cap, one that could find it steady (a set no cache
    # holds: its first visit compares a pass with the one before)
    lab = ScriptedPasses([0.02] * 6, pass_iters=8)
    state = _worker.settle(lab, trial, count=1, cycles_per_tick=1.0, pass_iters=8,
                           whole_pass=True, warmed_ns_per_iter=50.0, max_seconds=500e-9)
    assert lab.passes == 0 and state["settled"] == 0
    lab = ScriptedPasses([0.02] * 6, pass_iters=8)
    state = _worker.settle(lab, trial, count=1, cycles_per_tick=1.0, pass_iters=8,
                           whole_pass=True, warmed_ns_per_iter=50.0, max_seconds=1e-6)
    assert lab.passes == 1 and state["settled"] == 1


def test_a_warm_up_pass_does_not_cut_a_fresh_streams_ramp():
    """The warm-up is the ramp's first pass; the settle still ends on the plateau."""
    trial = Trial("k", metric="bandwidth", chunks=8)
    lab = ScriptedPasses(FRESH_64M_READ, pass_iters=8)
    warm = lab.sample(trial, 8, 1.0)                  # the warm-up pass
    state = _worker.settle(lab, trial, count=1, cycles_per_tick=1.0, pass_iters=8,
                           whole_pass=True, fresh=True, warmed_ns_per_iter=warm["ns"] / 8)
    assert state["settled"] == 1
    assert FRESH_64M_READ[lab.passes] >= 24.0


class WarmedPasses(ScriptedPasses):
    """ScriptedPasses whose warm-up is a pass of the script too."""

    def warm(self, trial, count):
        return self.sample(trial, count, 1.0)["ns"] / count


class OneStream(Experiment):
    name = "one_stream_test"
    arms = ("read",)

    def __init__(self, span):
        self.span = span

    def plan(self, params, machine):
        return [Point("read", {"size_bytes": self.span})]

    def prepare(self, point, params, lab):
        return Trial("k", metric="bandwidth", difference=False, size=self.span // 8, chunks=8,
                     warmup=8)


def test_a_rejected_block_restarts_the_comparison_not_the_pass():
    """A steady chase whose short blocks are switched out now and then (the
    loaded chase beside its loader: 5 % of 1.3 ms blocks) still finishes
    its pass and settles; restarting the pass at every rejection, a pass of
    ~64 blocks almost never finished and the re-warm ran to its budget."""
    class SometimesSwitchedOut(ColdStartLab):
        calls = 0

        def sample(self, trial, count, cycles_per_tick):
            rec = super().sample(trial, count, cycles_per_tick)
            self.calls += 1
            if self.calls % 10 == 0:
                rec.update(rejected=True, reason="context_switch")
            return rec

    lab = SometimesSwitchedOut({"k": 300.0}, amplitude=0.0)
    trial = Trial("k", metric="time")
    state = _worker.settle(lab, trial, count=4000, cycles_per_tick=1.0, pass_iters=1 << 18,
                           whole_pass=True, max_seconds=1.0)
    assert state["settled"] == 1
    assert lab.since["k"] < 1.2 * (1 << 18)               # one pass and a few blocks
    # a block right after a rejection is not compared with one before it
    lab = SometimesSwitchedOut({"k": 300.0}, amplitude=0.0)
    lab.calls = 9                                          # the first block is rejected
    state = _worker.settle(lab, trial, count=4, cycles_per_tick=1.0, pass_iters=1,
                           whole_pass=True, max_seconds=1.0)
    assert state["settled"] == 1 and state["settle_blocks"] == 3


def test_a_fresh_stream_no_cache_can_hold_settles_like_any_other():
    """A first visit waits for a pass no faster than the two before it only
    when some cache could take the set in (below uncacheable_from: DRAM_FROM
    x the LLC); a steady stream past it is settled by the warm-up pass and
    one more, not two (a 960 MiB read: ~0.1 s a pass)."""
    params = {"samples": 3}

    def passes(span, uncacheable_from):
        lab = WarmedPasses([20.0] * 12, pass_iters=8)
        lab.count = 1                                   # a sample is one chunk: no pass
        exp = OneStream(span)
        _worker.measure_cell(exp, exp.plan(params, {}), params, lab, random.Random(1),
                             uncacheable_from)
        return lab.passes

    assert passes(1 << 30, 1 << 30) == 2               # the warm-up + one pass
    assert passes(1 << 30, None) == 3                  # no LLC known: the fresh rule
    assert passes((1 << 30) - 8, 1 << 30) == 3         # a set a cache could hold
    assert _worker.stream_span(Trial("k", size=4096, chunks=8)) == 32768
    assert _worker.stream_span(Trial("k", size=4096)) == 0


def test_a_revisit_within_the_tolerance_of_the_arms_last_speed_is_steady():
    """A later visit compares its first pass with the arm's last speed, both
    ways: equal ends the re-warm after one pass; a cold pass (slower) or a
    warming one (faster) does not."""
    trial = Trial("k", metric="bandwidth")
    lab = ScriptedPasses([20.0] * 6, pass_iters=1)
    state = _worker.settle(lab, trial, count=1, cycles_per_tick=1.0, pass_iters=1,
                           whole_pass=True, steady_ns_per_iter=1 / 20.0)
    assert lab.passes == 1 and state["settled"] == 1
    for first in (16.0, 25.0):                 # cold, then still warming up
        lab = ScriptedPasses([first, 20.0, 20.0, 20.0], pass_iters=1)
        _worker.settle(lab, trial, count=1, cycles_per_tick=1.0, pass_iters=1,
                       whole_pass=True, steady_ns_per_iter=1 / 20.0)
        assert lab.passes >= 2


def test_arms_that_differ_only_in_data_share_a_long_calls_calibration():
    """Fill's value arms at 960 MiB: one call lasts 120 samples; the second
    arm is neither warmed nor calibrated, and its count is 1."""
    class LongCalls(ColdStartLab):
        min_sample_ms = 1.0
        warmed, calibrated = [], []

        def warm(self, trial, count):
            self.warmed.append(trial.value)
            return 120e6

        def calibrate(self, trial):
            self.calibrated.append(trial.value)
            return 1

    class Values(TwoArms):
        arms = ("zero", "one")

        def prepare(self, point, params, lab):
            return Trial("fill", metric="bandwidth", size=1 << 30, warmup=1,
                         value=0 if point.arm == "zero" else 1)

    exp, lab = Values(), LongCalls({"fill": 120e6}, amplitude=0.0)
    recs = _worker.measure_cell(exp, exp.plan({}, {}), {"samples": 3}, lab, random.Random(2))
    assert lab.warmed == lab.calibrated == [0]
    assert {r["arm"] for r in recs} == {"zero", "one"} and all(r["length"] == 1 for r in recs)
    # a short call (under 10 samples) is calibrated arm by arm
    lab = LongCalls({"fill": 5e6}, amplitude=0.0)
    lab.warmed, lab.calibrated = [], []
    lab.warm = lambda trial, count: (lab.warmed.append(trial.value), 5e6)[1]
    _worker.measure_cell(exp, exp.plan({}, {}), {"samples": 3}, lab, random.Random(2))
    assert lab.warmed == [0, 1]


@pytest.mark.parametrize("arms", [("only",), ("slow", "fast")])
def test_only_the_trial_warmed_last_and_visited_first_counts_its_warm_up(monkeypatch, arms):
    calls = []
    real = _worker.settle

    def spy(lab, trial, *a, **k):
        calls.append((trial.kernel, k.get("warmed_ns_per_iter")))
        return real(lab, trial, *a, **k)

    monkeypatch.setattr(_worker, "settle", spy)

    class Streams(TwoArms):
        def prepare(self, point, params, lab):
            return Trial(point.arm, metric="time", difference=True, warmup=5000, chunks=5000)

    exp = Streams()
    exp.arms = arms
    lab = ColdStartLab({a: 2.0 for a in arms}, amplitude=0.0)
    _worker.measure_cell(exp, exp.plan({}, {}), {"samples": 4}, lab, random.Random(3))
    credited = [(k, w) for k, w in calls if w]
    assert calls[0][0] == arms[-1] if credited else calls[0][0] != arms[-1]
    assert credited == ([(arms[-1], pytest.approx(2.0))] if calls[0][0] == arms[-1] else [])


def test_visits_are_abba_and_split_the_samples():
    order = _worker.visit_order(3, random.Random(4))
    assert order[:3] == order[3:][::-1] and sorted(order[:3]) == [0, 1, 2]
    exp = TwoArms()
    lab = ColdStartLab({"slow": 1.0, "fast": 1.0}, amplitude=0.0)
    recs = _worker.measure_cell(exp, exp.plan({}, {}), {"samples": 5}, lab, random.Random(1))
    arms = [r["arm"] for r in recs]
    assert arms.count("slow") == arms.count("fast") == 10      # 5 samples x (N, 2N)
    switches = sum(a != b for a, b in zip(arms, arms[1:]))
    assert switches <= 2                                        # A A B B B B A A ...


# ---- build_points ---------------------------------------------------------------------

def _samples(values, arm="a", metric="ns_per_load", unit="ns", length=1000, **point):
    return [{"arm": arm, "point": point or {"size_bytes": 4096}, "metric": metric, "unit": unit,
             "value": float(v), "length": length, "ns": float(v) * length,
             "cycles_est": float(v) * length * 3, "counters": {}, "rejected": False,
             "reason": None} for v in values]


def test_a_cold_first_block_does_not_move_the_point():
    """Samples whose first block ran 2x slow (a transient) do not bias the
    median or the best sustained figure."""
    vals = [200.0, 200.0] + [100.0 + 0.1 * i for i in range(13)]
    (p,) = build_points(_samples(vals))
    assert p["median"] == pytest.approx(100.6, rel=1e-3)
    assert p["best"] == p["p10"] < p["median"]


def test_a_bimodal_point_is_flagged_with_its_two_groups():
    rng = np.random.default_rng(1)
    vals = np.concatenate([rng.normal(100, 1, 8), rng.normal(170, 1.5, 7)])
    (p,) = build_points(_samples(vals))
    assert p["flags"] == ["bimodal"]
    assert p["modes"]["low"] == pytest.approx(100, rel=0.03)
    assert p["modes"]["high"] == pytest.approx(170, rel=0.03)
    assert p["modes"]["low_share"] == pytest.approx(8 / 15)
    assert p["best"] < 103                 # the best sustained figure is the fast group
    cautions = point_cautions([p])
    assert any(c["id"] == "bimodal_points" for c in cautions)


def test_a_unimodal_noisy_point_is_not_flagged():
    rng = np.random.default_rng(2)
    for _ in range(20):
        (p,) = build_points(_samples(rng.normal(100, 5, 15)))
        assert p["flags"] == []
        assert "modes" not in p


def test_bandwidth_best_is_the_high_quantile():
    (p,) = build_points(_samples([10, 11, 12, 13, 14, 30, 31], metric="gb_per_s", unit="GB/s"))
    assert p["best_quantile"] == "p90" and p["best"] == p["p90"]
    (q,) = build_points(_samples([10, 11, 12, 13, 14]))
    assert q["best_quantile"] == "p10" and q["best"] == q["p10"]


def test_no_confidence_interval_from_fewer_than_three_samples():
    (p,) = build_points(_samples([5.0, 6.0]))
    assert p["n"] == 2 and p["ci_low"] is None and p["ci_high"] is None
    (q,) = build_points(_samples([5.0, 6.0, 7.0]))
    assert q["ci_low"] is not None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1000, 2000]),
                          st.floats(min_value=0.5, max_value=5000, allow_nan=False),
                          st.booleans()),
                min_size=1, max_size=40))
def test_min_median_max_are_ordered_on_every_point(stream):
    samples = []
    for length, per_op, rejected in stream:
        s = _samples([per_op], length=length)[0]
        s["rejected"] = rejected
        samples.append(s)
    for p in build_points(samples):
        assert p["method"] == ESTIMATOR
        if p["median"] is None:
            continue
        assert p["min"] <= p["p10"] <= p["median"] <= p["p90"] <= p["max"]
        if p["ci_low"] is not None:
            assert p["min"] <= p["ci_low"] <= p["median"] <= p["ci_high"] <= p["max"]


# ---- arms and sizes -----------------------------------------------------------------------

def test_arms_random_measures_only_random():
    exp = get_experiment("latency")
    params = exp.resolve("quick", {"arms": "random", "max_size": "1M"})
    points = exp.plan(params, MACHINE)
    assert points and {p.arm for p in points} == {"random"}


def test_arms_default_to_every_arm_and_are_validated():
    exp = get_experiment("latency")
    assert exp.resolve("quick")["arms"] == ["random", "sequential"]
    with pytest.raises(ParamError, match="arms"):
        exp.resolve("quick", {"arms": "random,zigzag"})
    fill = get_experiment("fill")
    params = fill.resolve("quick", {"arms": "zero,one", "max_size": "1M", "points": "3"})
    assert {p.arm for p in fill.plan(params, MACHINE)} == {"zero", "one"}


def test_refine_honours_the_arms_too():
    from memfx.analysis.results import RunData
    exp = get_experiment("latency")
    params = exp.resolve("quick", {"arms": "random", "min_size": "4K", "max_size": "4M"})
    sizes = [p.params["size_bytes"] for p in exp.plan(params, MACHINE)]
    points = []
    for s in sizes:
        ns = 1.0 if s <= 32 << 10 else 4.0 if s <= 1 << 20 else 12.0
        points += build_points(_samples([ns] * 5, arm="random", size_bytes=s, pages="4k", npad=7))
    data = RunData("latency", params, MACHINE, points)
    extra = exp.refine(data, params, MACHINE)
    assert extra and {p.arm for p in extra} == {"random"}


@pytest.mark.parametrize("size", ["1G", "256M", "4K"])
def test_min_size_equal_to_max_size_measures_one_size(size):
    exp = get_experiment("latency")
    params = exp.resolve("quick", {"min_size": size, "max_size": size, "pages": "4k,thp"})
    points = exp.plan(params, MACHINE)
    assert {p.params["size_bytes"] for p in points} == {params["max_size"]}
    assert len(points) == 4                          # 2 arms x 2 page sizes


def test_arms_keep_the_controls_derived_from_them():
    exp = get_experiment("aliasing")
    every = {p.arm for p in exp.plan(exp.resolve("quick"), MACHINE)}
    assert any(a.endswith(":control") for a in every)
    arm = sorted(a for a in every if a in exp.arms)[0]
    params = exp.resolve("quick", {"arms": arm})
    assert {p.arm for p in exp.plan(params, MACHINE)} == {arm, arm + ":control"}


def test_a_preemption_is_tolerated_only_in_long_samples_that_barely_waited():
    from memfx.lab.sampling import PREEMPT_MAX_SHARE, PREEMPT_MIN_SAMPLE_NS, _preemption_negligible
    long_ns = 3 * PREEMPT_MIN_SAMPLE_NS
    assert _preemption_negligible(long_ns, 0.5 * PREEMPT_MAX_SHARE * long_ns)
    assert not _preemption_negligible(long_ns, 2 * PREEMPT_MAX_SHARE * long_ns)
    assert not _preemption_negligible(long_ns, None)                 # no schedstat: reject
    assert not _preemption_negligible(PREEMPT_MIN_SAMPLE_NS / 10, 0)  # short: always reject


@pytest.mark.measuring
def test_lab_reads_its_run_queue_wait():
    from memfx.lab.lab import Lab
    lab = Lab(hardware_counters=False)
    try:
        w = lab._run_queue_wait()
        if w is None:
            pytest.skip("no /proc/thread-self/schedstat (kernel without CONFIG_SCHED_INFO)")
        assert isinstance(w, int) and w >= 0
        assert lab._run_queue_wait() >= w
    finally:
        lab.perf.close()


def test_a_rejected_sample_is_followed_by_a_re_warm():
    """A preempted sample means another task polluted the caches: the next
    sample must not be taken cold."""
    class Preempted(ColdStartLab):
        calls = 0

        def sample(self, trial, count, cycles_per_tick):
            rec = super().sample(trial, count, cycles_per_tick)
            self.calls += 1
            if self.calls % 13 == 0:         # now and then: preempted, and the cache is gone
                rec.update(rejected=True, reason="context_switch")
                self.current = None
            return rec

    exp = TwoArms()
    lab = Preempted({"slow": 300.0, "fast": 2.0})
    recs = _worker.measure_cell(exp, exp.plan({}, {}), {"samples": 9}, lab, random.Random(5))
    points = build_points(recs)
    assert sum(p["rejected"] for p in points) > 0
    for p in points:
        assert p["max"] == pytest.approx(p["min"], rel=0.02)


class _CountsVerify(Experiment):
    name = "counts_verify_test"
    verified = []

    def plan(self, params, machine):
        return []

    def verify(self, lab, params):
        self.verified.append(params["seed"])


@pytest.mark.measuring
def test_only_the_first_replica_verifies_the_kernels(monkeypatch):
    """The byte-exact checks run once per run, in replica 0's worker; the
    later replicas time the same kernels of the same core."""
    import memfx.experiments as experiments
    exp = _CountsVerify()
    monkeypatch.setattr(experiments, "get_experiment", lambda name: exp)
    params = {"seed": 1, "cpu": -1, "min_sample_ms": 0.1, "samples": 3}
    for replica in (0, 1, 2):
        out = []
        _worker.measure({"experiment": exp.name, "params": params, "machine": {},
                         "replica": replica}, out.append)
        assert [m["type"] for m in out] == ["info", "plan"]
    assert exp.verified == [1]
