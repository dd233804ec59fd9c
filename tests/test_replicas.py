"""Answers that hold from run to run (issue 22): replicas, replica-level
CIs, verdicts decided against a no-effect band, and a `compare` that judges
only what it can.  Synthetic data: nothing here measures."""
import math

import numpy as np
import pytest

from memfx.analysis.compare import (
    CHANGED,
    CHANGED_ANSWER,
    NOISY,
    NOT_JUDGED,
    REGRESSED,
    UNCHANGED,
    compare,
    compare_answers,
    history_spread,
)
from memfx.analysis.results import build_points, document
from memfx.model import stats
from memfx.model.answers import EFFECT_BAND, Answer, Question, combine_replicas, effect
from memfx.model.findings import (
    DETECTED,
    INCONCLUSIVE,
    MEASURED,
    NOT_DETECTED,
    band_verdict,
    effect_verdict,
    threshold,
)

# ---- the CI holds the spread between replicas --------------------------------

def _replica_groups(means, sd=0.01, n=11, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(m, sd, n) for m in means]


def test_hierarchical_ci_covers_the_spread_a_single_process_misses():
    means = [10.0, 10.5, 11.0, 11.5]
    groups = _replica_groups(means)
    grand = float(np.mean(means))
    one_lo, one_hi = stats.bootstrap_ci(groups[0])          # what one process says
    assert not one_lo <= grand <= one_hi
    lo, hi = stats.hierarchical_ci(groups)
    assert lo <= grand <= hi
    assert hi - lo > 10 * (one_hi - one_lo)
    # resampling the replicas: the interval reaches towards the outer replicas
    assert lo < 10.5 and hi > 11.0


def test_hierarchical_ci_of_one_replica_is_the_ordinary_bootstrap():
    (g,) = _replica_groups([5.0])
    assert stats.hierarchical_ci([g], seed=3) == stats.bootstrap_ci(g, seed=3)


def test_combine_replicas_covers_the_true_value_and_the_next_run():
    """The property the CI is for, in simulation: normal replicas whose
    between-process spread dwarfs each replica's own CI."""
    rng = np.random.default_rng(1)
    for r, want_true, want_next in ((2, 0.92, 0.88), (3, 0.92, 0.86)):
        hits_true = hits_next = 0
        trials = 2000
        for t in range(trials):
            v = 100 + rng.normal(0, 1, r)
            c = stats.combine_replicas(list(v), list(v - 0.05), list(v + 0.05))
            nxt = float(np.mean(100 + rng.normal(0, 1, r)))
            hits_true += c["ci_low"] <= 100 <= c["ci_high"]
            hits_next += c["ci_low"] <= nxt <= c["ci_high"]
        assert hits_true / trials >= want_true, (r, hits_true / trials)
        assert hits_next / trials >= want_next, (r, hits_next / trials)


def test_combine_replicas_never_narrower_than_the_replicas_own_cis():
    # two replicas that agree exactly: the CI is still what their own CIs say
    c = stats.combine_replicas([2.0, 2.0], [1.8, 1.8], [2.2, 2.2])
    assert c["value"] == pytest.approx(2.0)
    assert c["ci_low"] < 1.9 and c["ci_high"] > 2.1


def test_combine_replicas_needs_two_replicas_for_a_ci():
    c = stats.combine_replicas([3.0, None], [2.0, None], [4.0, None])
    assert c["value"] == pytest.approx(3.0) and c["ci_low"] is None and c["n"] == 1


def test_t_quantiles():
    assert stats._t_of(0.95, 1) == pytest.approx(12.706, abs=1e-3)
    assert stats._t_of(0.95, 2) == pytest.approx(4.303, abs=1e-3)
    assert stats._t_of(0.95, 30) == pytest.approx(2.042, abs=1e-3)


def test_points_carry_replica_medians_and_a_replica_level_ci():
    def samples(replica, centre, length):
        return [{"arm": "a", "point": {"size_bytes": 4096}, "metric": "ns_per_load",
                 "unit": "ns", "value": centre + 0.001 * i, "length": length,
                 "ns": (centre + 0.001 * i) * length, "cycles_est": None, "counters": {},
                 "rejected": False, "replica": replica} for i in range(9)]
    # each replica calibrates its own run length: both count
    (p,) = build_points(samples(0, 4.0, 1000) + samples(1, 5.0, 1300))
    assert p["n"] == 18
    assert p["replicas"] == pytest.approx([4.004, 5.004])
    assert p["ci_low"] < 4.1 and p["ci_high"] > 4.9


# ---- verdicts with a margin --------------------------------------------------

def test_one_verdict_rule_decides_answers_and_details_alike():
    """findings.band_verdict is the rule; effect_verdict only adds the sample
    count and the default band (issue 44: two rules with 3 % and 5 % bands)."""
    band = (0.95, 1.05)
    for lo, hi in ((1.10, 1.30), (0.97, 1.03), (1.02, 1.08), (0.5, 0.9)):
        assert effect_verdict(1.0, lo, hi, 9, 9, band=band) == band_verdict(band, lo, hi)
    assert effect_verdict(1.0, 0.97, 1.03, 1, 9, band=band) == INCONCLUSIVE


def test_band_verdict():
    band = (0.95, 1.05)
    assert band_verdict(band, 1.10, 1.30) == DETECTED
    assert band_verdict(band, 0.50, 0.90) == DETECTED
    assert band_verdict(band, 0.97, 1.03) == NOT_DETECTED
    assert band_verdict(band, 0.97, 1.08) == INCONCLUSIVE
    assert band_verdict(band, None, None) == INCONCLUSIVE


Q_EFFECT = Question("toy.effect", "Is a slower than b?", "ratio", "004", "ratio of medians",
                    band=EFFECT_BAND)
Q_THRESHOLD = Question("toy.far", "Is it far dearer?", "ratio", "004", "above 2x",
                       band=(0.0, 2.0))
Q_KNEE = Question("toy.found", "Is there a crossover?", "bytes", "002", "a crossing exists")
Q_COUNT = Question("toy.ranges", "Which strategy wins where?", "ranges", "002", "ranges")


def test_effect_band_comes_from_the_named_threshold():
    b = threshold("effect_band")
    assert Q_EFFECT.no_effect_band() == (pytest.approx(1 - b), pytest.approx(1 + b))
    assert Q_THRESHOLD.no_effect_band() == (0.0, 2.0)
    assert Q_KNEE.no_effect_band() is None
    assert Q_EFFECT.as_dict()["band"] == [pytest.approx(1 - b), pytest.approx(1 + b)]


def test_effect_uses_the_question_band():
    rng = np.random.default_rng(0)
    a = rng.normal(1.04, 0.001, 40)      # 4 %: outside effect_min (3 %), inside the 5 % band
    b = rng.normal(1.00, 0.001, 40)
    assert effect(Q_EFFECT, a, b, "").verdict == NOT_DETECTED


def _answer(q, verdict, value, lo=None, hi=None, because="x"):
    return Answer(q.id, verdict, because, value, lo, hi).as_dict(q)


def test_combined_effect_verdict_is_decided_by_the_replica_ci_against_the_band():
    pooled = _answer(Q_EFFECT, DETECTED, 1.06, 1.05, 1.07)        # one process: "detected"
    reps = [_answer(Q_EFFECT, DETECTED, 1.06, 1.05, 1.07),
            _answer(Q_EFFECT, NOT_DETECTED, 1.01, 1.00, 1.02)]
    out = combine_replicas(Q_EFFECT, pooled, reps)
    assert out["verdict"] == INCONCLUSIVE                          # the CI now spans the edge
    assert out["ci_low"] < 1.05 < out["ci_high"]
    assert [r["value"] for r in out["replicas"]] == [1.06, 1.01]
    assert "across replicas" in out["because"]
    # replicas that agree far outside the band: detected, with a replica CI
    reps = [_answer(Q_EFFECT, DETECTED, 2.0, 1.9, 2.1), _answer(Q_EFFECT, DETECTED, 2.1, 2.0, 2.2)]
    out = combine_replicas(Q_EFFECT, _answer(Q_EFFECT, DETECTED, 2.05, 2.0, 2.1), reps)
    assert out["verdict"] == DETECTED and out["ci_scope"] == "2 replicas"
    assert out["ci_low"] <= 2.05 <= out["ci_high"]


def test_a_threshold_band_decides_above_and_below():
    reps = [_answer(Q_THRESHOLD, DETECTED, v, v - 0.1, v + 0.1) for v in (2.8, 3.0, 2.9)]
    assert combine_replicas(Q_THRESHOLD, reps[2], reps)["verdict"] == DETECTED
    reps = [_answer(Q_THRESHOLD, NOT_DETECTED, v, v - 0.1, v + 0.1) for v in (1.2, 1.3, 1.25)]
    assert combine_replicas(Q_THRESHOLD, reps[2], reps)["verdict"] == NOT_DETECTED
    # two replicas 7 % apart near the threshold: a t interval with one degree
    # of freedom reaches across it -- inconclusive, honestly
    reps = [_answer(Q_THRESHOLD, DETECTED, v, v - 0.1, v + 0.1) for v in (2.8, 3.0)]
    assert combine_replicas(Q_THRESHOLD, reps[0], reps)["verdict"] == INCONCLUSIVE


def test_other_verdicts_stand_only_when_every_replica_agrees():
    pooled = _answer(Q_KNEE, DETECTED, 12e6)
    reps = [_answer(Q_KNEE, DETECTED, 12e6), _answer(Q_KNEE, NOT_DETECTED, None)]
    out = combine_replicas(Q_KNEE, pooled, reps)
    assert out["verdict"] == INCONCLUSIVE and "replicas disagree" in out["because"]
    reps = [_answer(Q_KNEE, DETECTED, 12e6), _answer(Q_KNEE, DETECTED, 13e6)]
    assert combine_replicas(Q_KNEE, pooled, reps)["verdict"] == DETECTED


def test_counts_get_no_ci_and_one_replica_no_ci():
    out = combine_replicas(Q_COUNT, _answer(Q_COUNT, MEASURED, 6, 5, 7),
                           [_answer(Q_COUNT, MEASURED, 6, 5, 7), _answer(Q_COUNT, MEASURED, 6, 5, 7)])
    assert out["ci_low"] is None and out["ci_high"] is None
    # a choice among the values measured (a prefetch distance) is no estimate
    # either; a TLB's entries (a knee's page count) are, with a CI
    pick = Question("toy.distance", "Which distance?", "elements", "004", "fastest")
    out = combine_replicas(pick, _answer(pick, MEASURED, 32, 8, 32),
                           [_answer(pick, MEASURED, 8), _answer(pick, MEASURED, 32),
                            _answer(pick, MEASURED, 32)])
    assert out["ci_low"] is None and out["ci_high"] is None
    knee = Question("toy.entries", "How many entries?", "entries", "004", "knee")
    out = combine_replicas(knee, _answer(knee, MEASURED, 2048, 1900, 2200),
                           [_answer(knee, MEASURED, 2048, 1900, 2200),
                            _answer(knee, MEASURED, 2070, 1910, 2230)])
    assert out["ci_low"] is not None and out["ci_low"] < 2048 < out["ci_high"]
    q = Question("toy.ns", "How long?", "ns", "004", "median")
    out = combine_replicas(q, _answer(q, MEASURED, 5.0, 4.9, 5.1),
                           [_answer(q, MEASURED, 5.0, 4.9, 5.1), Answer(q.id, "not_measured", "no").as_dict(q)])
    assert out["ci_low"] is None and "1 of 2 replicas" in out["because"]


def test_a_run_with_two_replicas_answers_from_both(monkeypatch):
    """The analysis of a stored run: each replica analysed alone, then combined."""
    def samples(replica, a, b):
        out = []
        for arm, centre in (("aligned", a), ("split", b)):
            for i in range(9):
                v = centre * (1 + 0.001 * i)
                out.append({"arm": arm, "point": {"width": 8, "offset": 0 if arm == "aligned" else 60,
                                                  "position": "line", "mode": "load"},
                            "metric": "ns_per_access", "unit": "ns", "value": v, "length": 1000,
                            "ns": v * 1000, "cycles_est": None, "counters": {},
                            "rejected": False, "replica": replica})
        return out
    run = {"id": "r", "experiment": "misaligned", "status": "complete", "params": {}, "machine": {}}
    doc = document(run, samples(0, 1.0, 2.0) + samples(1, 1.0, 2.2))
    answered = [a for a in doc["answers"] if a.get("replicas")]
    assert answered, [a["because"] for a in doc["answers"]]
    for a in answered:
        assert len(a["replicas"]) == 2


# ---- compare -----------------------------------------------------------------

def _row(a, b, limit=0.05, **kw):
    return compare_answers(a, b, limit, **kw)


def _num(q, value, lo, hi, verdict=MEASURED, **extra):
    return dict(question=q, unit="ns", better="lower", verdict=verdict, value=value,
                ci_low=lo, ci_high=hi, **extra)


def test_counts_are_equal_or_different_never_ratios():
    a = dict(question="copy.best_strategy", unit="ranges", verdict=MEASURED, value=9,
             details=[{"label": "rep_movsb 32K-32M"}])
    b = dict(a, value=6)
    row = _row(a, b)
    assert row["verdict"] == CHANGED and row["ratio_ci_low"] is None
    assert _row(a, dict(a))["verdict"] == UNCHANGED
    # the same count of different ranges is a different set
    c = dict(a, details=[{"label": "avx2 32K-32M"}])
    assert _row(a, c)["verdict"] == CHANGED


def test_rows_without_a_ci_are_not_judged():
    row = _row(_num("x.y", 10.0, None, None), _num("x.y", 20.0, None, None))
    assert row["verdict"] == NOT_JUDGED
    row = _row(_num("x.y", 10.0, 9.9, 10.1), _num("x.y", 20.0, None, None))
    assert row["verdict"] == NOT_JUDGED


def test_regressed_only_when_the_ratio_ci_clears_the_band():
    assert _row(_num("x.y", 10, 9.9, 10.1), _num("x.y", 12, 11.9, 12.1))["verdict"] == REGRESSED
    # the point moved 20 % but the CI reaches back into the band
    assert _row(_num("x.y", 10, 8, 12), _num("x.y", 12, 10, 14))["verdict"] == "inconclusive"


def test_not_detected_twice_is_unchanged_and_inconclusive_is_no_changed_answer():
    a = dict(question="f.z", unit="ratio", verdict=NOT_DETECTED, value=1.00, ci_low=0.99,
             ci_high=1.01)
    b = dict(a, value=1.04, ci_low=1.035, ci_high=1.045)
    assert _row(a, b)["verdict"] == UNCHANGED
    c = dict(a, verdict=DETECTED, value=1.5, ci_low=1.4, ci_high=1.6)
    assert _row(a, c)["verdict"] == CHANGED_ANSWER
    d = dict(c, verdict=INCONCLUSIVE, value=1.5, ci_low=1.4, ci_high=1.6)
    assert _row(c, d)["verdict"] != CHANGED_ANSWER


def test_a_noisy_run_reads_noisy_unless_the_ratio_clears_the_margin():
    a = _num("x.y", 10, 9.9, 10.1)
    b = _num("x.y", 10.8, 10.7, 10.9, noisy=True)       # 8 %: beyond 5 %, not beyond 2 x 5 %
    assert _row(a, b)["verdict"] == NOISY
    doc = compare([a], [b])
    assert doc["regressed"] == [] and doc["noisy"] == ["x.y"]
    c = _num("x.y", 13, 12.9, 13.1, noisy=True)
    assert _row(a, c)["verdict"] == REGRESSED


def test_history_widens_the_band():
    a = _num("x.y", 10, 9.9, 10.1)
    b = _num("x.y", 11, 10.9, 11.1)                      # +10 %
    assert _row(a, b)["verdict"] == REGRESSED
    history = [10, 11.5, 9.2, 10.8, 9.5]                  # the machine swings ~10 % run to run
    spread = history_spread(history)
    assert spread > 0.05
    row = _row(a, b, spread=spread, n_history=len(history))
    assert row["verdict"] == UNCHANGED and row["band_source"].startswith("history")
    assert row["band"] > 0.05
    assert history_spread([10, 11]) is None               # too few earlier surveys
    doc = compare([a], [b], history={"x.y": history}, n_history=5)
    assert doc["regressed"] == [] and "history" in doc["band"]


def test_a_history_where_two_surveys_agree_still_has_a_spread():
    # a MAD of three values is zero when two agree: the band then was the
    # threshold, and the next survey's drift read as a regression
    spread = history_spread([10.0, 10.0, 11.5])
    assert spread == pytest.approx(float(np.std(np.log([10, 10, 11.5]), ddof=1)))
    a = _num("x.y", 10, 9.9, 10.1)
    b = _num("x.y", 11, 10.9, 11.1)
    assert _row(a, b, spread=spread, n_history=3)["verdict"] == UNCHANGED


def test_a_host_shared_value_in_a_guest_gets_the_drift_band_until_there_is_history():
    a = dict(_num("x.y", 10, 9.9, 10.1), host_shared=True)
    b = dict(_num("x.y", 11.5, 11.4, 11.6), host_shared=True)        # +15 %
    assert _row(a, b)["verdict"] == REGRESSED                        # bare metal: the threshold
    row = compare_answers(a, b, 0.05, guest=True)
    assert row["verdict"] == UNCHANGED and row["band"] == pytest.approx(0.254, abs=0.002)
    assert row["band_source"].startswith("guest drift")
    # any other absolute figure gets the clock's band (9 %) in a guest
    plain = compare_answers(_num("x.y", 10, 9.9, 10.1), _num("x.y", 11.5, 11.4, 11.6), 0.05,
                            guest=True)
    assert plain["verdict"] == REGRESSED and plain["band"] == pytest.approx(0.089, abs=0.002)
    assert "clock" in plain["band_source"]
    # a ratio of two arms keeps the threshold in a guest
    r = compare_answers(dict(_num("x.y", 2.0, 1.99, 2.01), unit="ratio"),
                        dict(_num("x.y", 2.2, 2.19, 2.21), unit="ratio"), 0.05, guest=True)
    assert r["band_source"] == "threshold"
    # a real move beyond the drift band is still a regression
    c = dict(_num("x.y", 14, 13.9, 14.1), host_shared=True)
    assert compare_answers(a, c, 0.05, guest=True)["verdict"] == REGRESSED
    # history, where there is enough, replaces the guest drift band, but in a
    # guest never narrows an absolute figure's band below the clock's (9 %)
    row = compare_answers(a, b, 0.05, spread=0.01, n_history=4, guest=True)
    assert row["band_source"].startswith("guest clock") and row["verdict"] == REGRESSED
    assert row["band"] == pytest.approx(0.089, abs=0.002)
    assert compare_answers(a, b, 0.05, spread=0.01, n_history=4)["band_source"] == "threshold"
    doc = compare([a], [b], guest=True)
    assert doc["guest"] and "25%" in doc["band"] and doc["regressed"] == []


def test_a_calm_history_does_not_narrow_a_guests_clock_band():
    """An A/A on a KVM guest: latency.l1d read 1.31-1.35 ns in the three
    surveys of its history, then 1.32 and 1.42 ns (the host's clock) -- with
    the history's own band (5 %) that pair read "regressed"."""
    a = dict(question="latency.l1d", unit="ns", better="lower", verdict="measured", value=1.32,
             ci_low=1.30, ci_high=1.34, replicas=[{"value": v} for v in (1.31, 1.32, 1.33)])
    b = dict(a, value=1.42, ci_low=1.40, ci_high=1.44,
             replicas=[{"value": v} for v in (1.41, 1.42, 1.43)])
    spread = history_spread([1.35, 1.34, 1.31])
    assert compare_answers(a, b, 0.05, spread, 3)["verdict"] == REGRESSED        # bare metal
    row = compare_answers(a, b, 0.05, spread, 3, guest=True)
    assert row["verdict"] != REGRESSED and row["band_source"].startswith("guest clock")
    # a history wider than the clock's band keeps its own
    wide = history_spread([1.2, 1.45, 1.3])
    assert compare_answers(a, b, 0.05, wide, 3, guest=True)["band_source"].startswith("history")
    # a ratio of two arms has no clock to drift with
    r = dict(a, unit="ratio")
    row = compare_answers(r, dict(b, unit="ratio"), 0.05, spread, 3, guest=True)
    assert row["band_source"] == "threshold" and row["verdict"] not in (UNCHANGED, INCONCLUSIVE)
    doc = compare([a], [b], history={"latency.l1d": [1.35, 1.34, 1.31]}, n_history=3, guest=True)
    assert doc["regressed"] == [] and "9%" in doc["band"]


def test_a_share_that_can_be_zero_gets_no_negative_ci():
    c = stats.combine_replicas([0.0, 0.003])          # zero blocks the log scale
    assert c["ci_low"] == 0.0 and c["ci_high"] > 0.003
    c = stats.combine_replicas([-1.0, 1.0])           # a signed quantity keeps its sign
    assert c["ci_low"] < 0


def test_a_share_question_combines_on_the_linear_scale():
    q = Question("toy.share", "Does it trap?", "ratio", "001", "share", band=(0.0, 0.05),
                 scale="linear")
    reps = [_answer(q, NOT_DETECTED, 0.005, 0.004, 0.006),
            _answer(q, NOT_DETECTED, 1e-5, 0.0, 2e-5)]
    out = combine_replicas(q, reps[0], reps)
    assert out["ci_high"] < 0.05 and out["ci_low"] == 0.0      # on the log scale: 1e10
    assert out["verdict"] == NOT_DETECTED


def test_a_host_shared_answer_measured_in_a_guest_has_a_ci_wide_enough_for_the_drift():
    q = Question("x.bw", "?", "GB/s", "004", "median", better="higher", host_shared=True)
    pooled = {"question": "x.bw", "verdict": MEASURED, "value": 12.0}
    per = [{"verdict": MEASURED, "value": v, "ci_low": v * 0.99, "ci_high": v * 1.01}
           for v in (11.9, 12.0, 12.1)]
    tight = combine_replicas(q, pooled, per)
    wide = combine_replicas(q, pooled, per, guest=True)
    assert tight["ci_high"] / tight["ci_low"] < 1.1
    # 1.96 x 8 % in quadrature: the next survey's 10 % drift falls inside
    assert wide["ci_low"] < 12.0 / 1.1 and wide["ci_high"] > 12.0 * 1.1
    assert "drift" in wide["ci_scope"]
    # another absolute figure gets the clock's drift (3 %), a count or a
    # ratio of two arms none
    plain = Question("x.l1", "?", "GB/s", "004", "median", better="higher")
    clock = combine_replicas(plain, pooled, per, guest=True)
    assert wide["ci_low"] < clock["ci_low"] < tight["ci_low"] * 0.96
    ratio = Question("x.q", "?", "ratio", "004", "ratio")
    assert combine_replicas(ratio, pooled, per, guest=True)["ci_low"] == tight["ci_low"]
    # an effect decided by its band is decided on the widened CI
    eff = Question("x.r", "?", "ratio", "004", "ratio", band=EFFECT_BAND, host_shared=True)
    pooled = {"question": "x.r", "verdict": DETECTED, "value": 1.12}
    per = [{"verdict": DETECTED, "value": v, "ci_low": v - 0.01, "ci_high": v + 0.01}
           for v in (1.11, 1.12, 1.13)]
    assert combine_replicas(eff, pooled, per)["verdict"] == DETECTED
    assert combine_replicas(eff, pooled, per, guest=True)["verdict"] == INCONCLUSIVE


def test_every_point_of_a_one_replica_run_gets_a_bootstrap_ci():
    # the CI method was once shadowed by the loop's own CI after the first
    # point: every later point of a one-replica run read NaN
    samples = [{"arm": a, "point": {"size_bytes": s}, "metric": "ns_per_load", "unit": "ns",
                "value": 1.0 + 0.01 * i + s / 1e6, "length": 10, "ns": 10.0,
                "counters": {}, "rejected": False}
               for a in ("x", "y") for s in (4096, 8192) for i in range(7)]
    pts = build_points(samples)
    assert len(pts) == 4
    for p in pts:
        assert math.isfinite(p["ci_low"]) and p["ci_low"] <= p["median"] <= p["ci_high"]


def test_compare_takes_its_history_from_before_the_earlier_side(monkeypatch):
    # surveys between A and B may already be after the change asked about
    from memfx.analysis import documents
    seen = {}

    def fake_history(store, machine, exclude=(), before=None, most=5):
        seen.update(machine=machine, exclude=set(exclude), before=before)
        return None, 0
    monkeypatch.setattr(documents, "machine_history", fake_history)
    a = {"machine_id": "m-1", "survey_id": "s-a", "started": "2026-11-26T00:10:00Z"}
    b = {"machine_id": "m-1", "survey_id": "s-b", "started": "2026-11-26T00:40:00Z"}
    documents.compare_history(None, b, a)
    assert seen == {"machine": "m-1", "exclude": {"s-a", "s-b"},
                    "before": "2026-11-26T00:10:00Z"}
    assert documents.compare_history(None, a, dict(b, machine_id="m-2")) == (None, 0)


def test_an_overruled_pooled_claim_is_quoted_after_what_the_replicas_decided():
    q = Question("x.fix", "?", "ns", "004", "median", better="lower")
    pooled = {"question": "x.fix", "verdict": DETECTED, "value": 2.0,
              "because": "The fix removes the penalty."}
    per = [{"verdict": v, "value": 2.0, "ci_low": 1.9, "ci_high": 2.1}
           for v in (DETECTED, NOT_DETECTED, DETECTED)]
    out = combine_replicas(q, pooled, per)
    assert out["verdict"] == INCONCLUSIVE
    assert out["because"].startswith("Replicas disagree: detected in 2 of 3")
    assert "(every replica's samples pooled: the fix removes the penalty)" in out["because"]


def test_a_choice_most_replicas_did_not_make_gives_way_to_theirs():
    """prefetch.stream_distance: the pooled samples chose 2 where two of
    three replicas chose 8 (every other survey of that A/A read 8)."""
    q = Question("x.distance", "?", "elements", "004", "argmin")
    pooled = {"question": "x.distance", "verdict": MEASURED, "value": 2.0,
              "because": "2 elements ahead."}
    per = [{"verdict": MEASURED, "value": v} for v in (2.0, 8.0, 8.0)]
    out = combine_replicas(q, pooled, per)
    assert out["value"] == 8.0 and out["ci_low"] is None
    # what was found first, then the pooled samples' claim (issue 42)
    assert out["because"].startswith("8 elements, the choice of 2 of 3 replicas, each analysed "
                                     "alone (every replica's samples pooled: 2 elements ahead")
    # no majority (or the majority's own choice): the pooled choice stands
    for votes in ((2.0, 8.0, 32.0), (2.0, 2.0, 8.0)):
        out = combine_replicas(q, pooled, [{"verdict": MEASURED, "value": v} for v in votes])
        assert out["value"] == 2.0 and out["because"] == pooled["because"]
    # a count of ranges is not a choice: its value stays the pooled one
    ranges = Question("x.ranges", "?", "ranges", "002", "ranges")
    out = combine_replicas(ranges, dict(pooled, value=3.0),
                           [{"verdict": MEASURED, "value": v} for v in (5.0, 5.0, 3.0)])
    assert out["value"] == 3.0


def test_a_pooled_value_no_replica_supports_gives_way_to_the_replicas_estimate():
    """A knee of the pooled curve at 55.9 KB while every replica read
    50.8-51.1 KB: the answer takes the replicas' estimate and says what the
    pooled samples read, instead of stretching the CI to the pooled figure
    (compare then saw a 10 % move between two runs that agreed)."""
    q = Question("x.capacity", "?", "bytes", "004", "knee")
    pooled = {"question": "x.capacity", "verdict": MEASURED, "value": 55902.0,
              "because": "The L1d holds about 54.6 KiB."}
    per = [{"verdict": MEASURED, "value": v, "ci_low": v * 0.98, "ci_high": v * 1.02}
           for v in (50817.0, 51139.0, 50918.0)]
    out = combine_replicas(q, pooled, per)
    assert out["value"] == pytest.approx(50958, rel=0.002)
    assert out["ci_high"] < 55902 and out["ci_low"] <= out["value"] <= out["ci_high"]
    assert out["because"].startswith("49.8 KiB by the replicas, each analysed alone (every "
                                     "replica's samples pooled: the L1d holds about 54.6 KiB")
    # a pooled value inside the replicas' range (or on its edge, to rounding) stands
    inside = combine_replicas(q, dict(pooled, value=51000.0), per)
    assert inside["value"] == 51000.0 and inside["because"] == pooled["because"]
    edge = [{"verdict": MEASURED, "value": 64.0 * (1 - 3e-16), "ci_low": 64.0 * (1 - 3e-16),
             "ci_high": 64.0 * (1 - 3e-16)} for _ in range(3)]
    assert combine_replicas(q, dict(pooled, value=64.0), edge)["value"] == 64.0


def test_a_pooled_ratio_beyond_every_replica_gives_way_to_the_replicas_estimate():
    """prefetch.stream_gain in an A/A on a Zen 4 guest: the ratio of the
    pooled medians of two arms read 1.145 where the replicas read 1.05,
    1.047 and 1.121 (each arm's pooled median fell in a different replica's
    level), inside their wide t interval: the answer takes the replicas'
    geometric mean, and a ratio inside their range stands."""
    q = Question("x.gain", "?", "ratio", "004", "none / prefetch", better="higher",
                 band=(0.95, 1.05))
    pooled = {"question": "x.gain", "verdict": INCONCLUSIVE, "value": 1.145,
              "because": "1.15x the loop without prefetch."}
    per = [{"verdict": INCONCLUSIVE, "value": v, "ci_low": v * 0.95, "ci_high": v * 1.05}
           for v in (1.05, 1.047, 1.121)]
    out = combine_replicas(q, pooled, per)
    assert out["value"] == pytest.approx((1.05 * 1.047 * 1.121) ** (1 / 3), rel=1e-9)
    assert out["ci_low"] < out["value"] < out["ci_high"] < 1.2
    assert out["because"].startswith("1.07x by the replicas")
    inside = combine_replicas(q, dict(pooled, value=1.06), per)
    assert inside["value"] == 1.06 and inside["because"].startswith("1.15x")
