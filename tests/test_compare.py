"""memfx compare: question-by-question verdicts, ratio CIs, thresholds."""
import math

import pytest

from memfx.analysis import compare as cmp


def _ans(qid, value, lo=None, hi=None, verdict="measured", better="lower", unit="ns"):
    return {"question": qid, "asks": "?", "unit": unit, "better": better, "verdict": verdict,
            "value": value, "ci_low": lo, "ci_high": hi}


def test_regression_improvement_and_unchanged_follow_the_declared_direction():
    a = [_ans("latency.l2", 7.0, 6.9, 7.1), _ans("bw.read", 40.0, 39, 41, better="higher"),
         _ans("latency.l1d", 1.0, 0.99, 1.01)]
    b = [_ans("latency.l2", 10.5, 10.3, 10.7), _ans("bw.read", 60.0, 59, 61, better="higher"),
         _ans("latency.l1d", 1.01, 1.0, 1.02)]
    doc = cmp.compare(a, b, 0.05)
    v = {r["question"]: r["verdict"] for r in doc["rows"]}
    assert v == {"latency.l2": cmp.REGRESSED, "bw.read": cmp.IMPROVED,
                 "latency.l1d": cmp.UNCHANGED}
    assert doc["regressed"] == ["latency.l2"]
    row = doc["rows"][0]
    assert row["ratio"] == pytest.approx(1.5)
    assert row["ratio_ci_low"] < 1.5 < row["ratio_ci_high"]


def test_a_change_whose_ci_includes_no_change_is_not_a_regression():
    doc = cmp.compare([_ans("latency.l2", 7.0, 5.0, 9.0)], [_ans("latency.l2", 7.8, 5.5, 10.0)])
    # +11 % is beyond the 5 % band, but the CI reaches back into it
    assert doc["rows"][0]["verdict"] == cmp.INCONCLUSIVE and not doc["regressed"]


def test_threshold_decides():
    a, b = [_ans("latency.l2", 10.0, 9.99, 10.01)], [_ans("latency.l2", 10.4, 10.39, 10.41)]
    assert cmp.compare(a, b, 0.05)["rows"][0]["verdict"] == cmp.UNCHANGED
    assert cmp.compare(a, b, 0.02)["rows"][0]["verdict"] == cmp.REGRESSED


def test_effect_questions_change_but_do_not_regress_and_flipped_verdicts_are_named():
    a = [_ans("fill.zero_store_elimination", 1.17, 1.1, 1.2, "detected", better=""),
         _ans("copy.rep_movsb_step", 2.4, 2.3, 2.5, "detected", better="")]
    b = [_ans("fill.zero_store_elimination", 1.0, 0.99, 1.01, "not_detected", better=""),
         _ans("copy.rep_movsb_step", 1.2, 1.15, 1.25, "detected", better="")]
    v = {r["question"]: r["verdict"] for r in cmp.compare(a, b)["rows"]}
    assert v == {"fill.zero_store_elimination": cmp.CHANGED_ANSWER,
                 "copy.rep_movsb_step": cmp.CHANGED}


def test_missing_or_valueless_sides_are_not_comparable():
    a = [_ans("latency.l3", None, verdict="not_measured"), _ans("latency.l2", 7.0)]
    b = [_ans("latency.l3", 30.0), _ans("latency.memory", 100.0)]
    rows = {r["question"]: r for r in cmp.compare(a, b)["rows"]}
    assert rows["latency.l3"]["verdict"] == cmp.NOT_COMPARABLE
    assert rows["latency.l2"]["verdict"] == cmp.NOT_COMPARABLE
    assert "only in A" in rows["latency.l2"]["reason"]
    assert "only in B" in rows["latency.memory"]["reason"]


def test_no_ci_on_either_side_gives_a_ratio_without_ci():
    r, lo, hi = cmp.ratio_ci(_ans("x.y", 2.0), _ans("x.y", 3.0, 2.9, 3.1))
    assert r == pytest.approx(1.5) and lo is None and hi is None


def test_ratio_ci_width_adds_both_sides_in_quadrature():
    a, b = _ans("x.y", 1.0, math.exp(-0.1), math.exp(0.1)), _ans("x.y", 1.0, 1.0, 1.0)
    r, lo, hi = cmp.ratio_ci(a, b)
    assert (lo, hi) == (pytest.approx(math.exp(-0.1)), pytest.approx(math.exp(0.1)))
    r2, lo2, hi2 = cmp.ratio_ci(a, a)
    assert math.log(hi2) == pytest.approx(0.1 * math.sqrt(2))


@pytest.mark.parametrize("text,value", [("5%", 0.05), ("0.1", 0.1), (" 12.5% ", 0.125)])
def test_parse_threshold(text, value):
    assert cmp.parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "abc", "-5%", "0", "nan", "5000%"])
def test_parse_threshold_rejects(text):
    with pytest.raises(ValueError):
        cmp.parse_threshold(text)


def test_markdown_lists_every_question():
    doc = cmp.compare([_ans("latency.l2", 7.0, 6.9, 7.1)], [_ans("latency.l2", 10.5, 10.3, 10.7)])
    md = cmp.markdown(doc)
    assert "| `latency.l2` |" in md and "regressed" in md and md.count("\n|") >= 3


def _replicated(qid, values, own=0.01):
    """An answer measured in replicas with these values (each with a CI of
    +-own on the log scale) and the pooled value their geometric mean."""
    reps = [{"replica": i, "verdict": "measured", "value": v,
             "ci_low": v * math.exp(-own), "ci_high": v * math.exp(own)}
            for i, v in enumerate(values)]
    g = math.exp(sum(math.log(v) for v in values) / len(values))
    a = _ans(qid, g, g * 0.5, g * 2.0)        # the answer's own (wide, t(1)) CI
    a["replicas"] = reps
    return a


def test_ratio_ci_pools_the_replica_spread_of_both_sides():
    # log spread: replicas +-0.05 around their mean on both sides -> pooled
    # variance 2 * 0.05^2 * 2 / 2 = 0.005; se = sqrt(0.005 * (1/2 + 1/2))
    a = _replicated("x.y", [math.exp(-0.05), math.exp(0.05)])
    b = _replicated("x.y", [3 * math.exp(-0.05), 3 * math.exp(0.05)])
    r, lo, hi = cmp.ratio_ci(a, b)
    half = 4.3027 * math.sqrt(0.005)
    assert r == pytest.approx(3.0)
    assert math.log(hi / r) == pytest.approx(half, rel=1e-3)
    assert math.log(r / lo) == pytest.approx(half, rel=1e-3)
    # far narrower than the answers' own CIs combined (ln 2 each side)
    assert half < 0.5 * 1.96 * math.hypot(math.log(2) / 1.96, math.log(2) / 1.96)


def test_ratio_ci_never_narrower_than_the_replicas_own_cis():
    a = _replicated("x.y", [1.0, 1.0], own=0.2)     # replicas agree by chance
    b = _replicated("x.y", [1.0, 1.0], own=0.2)
    r, lo, hi = cmp.ratio_ci(a, b)
    # each replica's own se is 0.2 / z; two per side: z * sqrt(se^2/2 + se^2/2) = 0.2
    assert math.log(hi) == pytest.approx(0.2, rel=1e-3)


def test_ratio_ci_falls_back_to_the_answers_cis_without_replicas():
    a = _replicated("x.y", [1.0, 1.1])
    a["replicas"] = a["replicas"][:1]                 # one replica value only
    b = _replicated("x.y", [1.0, 1.1])
    r, lo, hi = cmp.ratio_ci(a, b)
    assert math.log(hi / r) == pytest.approx(math.hypot(math.log(2), math.log(2)), rel=1e-3)


def test_a_move_beyond_the_band_that_the_ci_does_not_clear_is_inconclusive():
    a = _ans("x.y", 1.0, 0.7, 1.4)
    b = _ans("x.y", 1.5, 1.05, 2.1)
    row = cmp.compare_answers(a, b, 0.2)
    assert row["verdict"] == cmp.INCONCLUSIVE and "reaches back" in row["reason"]
    # within the band with a wide CI: unchanged, not inconclusive
    assert cmp.compare_answers(a, _ans("x.y", 1.1, 0.77, 1.54), 0.2)["verdict"] == cmp.UNCHANGED
    # the same move with replicas that agree is a regression
    a2 = _replicated("x.y", [0.98, 1.02])
    b2 = _replicated("x.y", [1.47, 1.53])
    assert cmp.compare_answers(a2, b2, 0.2)["verdict"] == cmp.REGRESSED


def test_tlb_entries_are_an_estimate_compared_with_its_ci_not_a_count():
    """A TLB's entries are where a knee lies (with the bracketing page
    counts as CI): 1 % apart is unchanged, where counts (ranges, ways)
    compare as equal or different."""
    a = [_ans("tlb.l2_entries", 2048.0, 1900.0, 2200.0, better="", unit="entries"),
         _ans("copy.best_strategy", 9, better="", unit="ranges")]
    b = [_ans("tlb.l2_entries", 2070.0, 1910.0, 2230.0, better="", unit="entries"),
         _ans("copy.best_strategy", 6, better="", unit="ranges")]
    v = {r["question"]: r["verdict"] for r in cmp.compare(a, b, 0.05)["rows"]}
    assert v == {"tlb.l2_entries": cmp.UNCHANGED, "copy.best_strategy": cmp.CHANGED}


def test_a_chosen_distance_is_compared_as_equal_or_different():
    a = [_ans("prefetch.stream_distance", 32, better="", unit="elements")]
    same = cmp.compare(a, [_ans("prefetch.stream_distance", 32, better="", unit="elements")])
    other = cmp.compare(a, [_ans("prefetch.stream_distance", 8, better="", unit="elements")])
    assert same["rows"][0]["verdict"] == cmp.UNCHANGED
    assert other["rows"][0]["verdict"] == cmp.CHANGED and other["rows"][0]["ratio_ci_low"] is None


def _distance_ans(choice, tied):
    """prefetch.stream_distance as the analysis gives it: the choice, and per
    distance whether it is tied with the fastest."""
    a = _ans("prefetch.stream_distance", float(choice), better="", unit="elements")
    a["details"] = [{"label": f"stride 64 d={d}", "distance": d, "choice": d, "tied": d in tied,
                     "value": 1.1, "unit": "ratio"} for d in (2, 8, 32)]
    return a


def test_choices_that_differ_only_where_a_tie_fell_the_other_way_are_unchanged():
    """8 in one survey (32 within 10 % of it), 32 in the next (8 not within
    10 % there): an A/A read "changed" in 6 of 10 pairs."""
    a, b = _distance_ans(8, {8, 32}), _distance_ans(32, {32})
    row = cmp.compare([a], [b])["rows"][0]
    assert row["verdict"] == cmp.UNCHANGED and "tie" in row["reason"]
    # neither choice tied with the best on the other side: changed, and why
    row = cmp.compare([_distance_ans(2, {2})], [b])["rows"][0]
    assert row["verdict"] == cmp.CHANGED and "2 elements is not tied" in row["reason"]
    # the same choice: unchanged; no ties kept (older documents): as before
    assert cmp.compare([a], [_distance_ans(8, {8})])["rows"][0]["verdict"] == cmp.UNCHANGED
    old = [_ans("prefetch.stream_distance", 8.0, better="", unit="elements")]
    assert cmp.compare(old, [b])["rows"][0]["verdict"] == cmp.CHANGED


def _ranges_ans(ranges, ties):
    """copy.best_strategy as the copy analysis gives it: the ranges and,
    per size, the strategies tied with the fastest."""
    a = _ans("copy.best_strategy", float(len(ranges)), better="", unit="ranges")
    a["details"] = [{"label": "copy ranges (throughput)", "kind": "ranges", "op": "copy",
                     "mode": "throughput", "value": float(len(ranges)), "unit": "ranges",
                     "ranges": [{"strategy": s, "min_size": lo, "max_size": hi}
                                for s, lo, hi in ranges],
                     "ties": [[size, sorted(t)] for size, t in ties]}]
    return a


def test_ranges_that_differ_only_where_a_tie_fell_the_other_way_are_unchanged():
    """Issue 22's A/A: copy.best_strategy read 'avx512 32 B-32 MiB' in one
    survey and '... avx512 32 B-640 KiB; rep_movsb 768 KiB-32 MiB' in the
    next (rep movsb within 10 % of avx512 there in the first): `compare`
    called 8 of 10 pairs of one machine 'changed'."""
    sizes = [32, 1024, 1 << 20, 32 << 20]
    a = _ranges_ans([("avx512", 32, 32 << 20)],
                    [(s, {"avx512", "rep_movsb"} if s >= 1 << 20 else {"avx512"})
                     for s in sizes])
    b = _ranges_ans([("avx512", 32, 1024), ("rep_movsb", 1 << 20, 32 << 20)],
                    [(s, {"rep_movsb"} if s >= 1 << 20 else {"avx512"}) for s in sizes])
    row = cmp.compare([a], [b])["rows"][0]
    assert row["verdict"] == cmp.UNCHANGED and "tie" in row["reason"]
    # a reversal: each side's pick is clearly slower than the other's pick
    # on the other side
    c = _ranges_ans([("avx512", 32, 1024), ("rep_movsb", 1 << 20, 32 << 20)],
                    [(s, {"rep_movsb"} if s >= 1 << 20 else {"avx512"}) for s in sizes])
    d = _ranges_ans([("avx512", 32, 32 << 20)], [(s, {"avx512"}) for s in sizes])
    row = cmp.compare([c], [d])["rows"][0]
    assert row["verdict"] == cmp.CHANGED
    assert "1 MiB: rep_movsb is the fastest in A" in row["reason"]
    # answers that keep no ties (older documents) compare as equal or different
    for x in (c, d):
        del x["details"][0]["ties"]
    assert cmp.compare([c], [d])["rows"][0]["verdict"] == cmp.CHANGED


def test_a_value_one_of_the_other_sides_replicas_had_is_a_host_state_it_saw():
    """Three replicas of a point at a cache's edge read 118, 123 and 226 ns,
    the next survey's 106, 208 and 222: the medians moved 1.7x, but each
    side saw the other's level in one of its replicas.  Replicas that never
    met stay a regression."""
    a = _replicated("latency.l2", [118.0, 123.0, 226.0])
    b = _replicated("latency.l2", [106.0, 208.0, 222.0])
    a["value"], b["value"] = 123.0, 208.0          # the medians
    for side in (a, b):
        side["ci_low"], side["ci_high"] = side["value"] * 0.97, side["value"] * 1.03
    row = cmp.compare([a], [b])["rows"][0]
    assert row["verdict"] == cmp.HOST_STATE
    assert "a level A saw" in row["reason"] and "118" in row["reason"]
    assert cmp.replica_range(a) == (118.0, 226.0)
    apart = _replicated("latency.l2", [100.0, 102.0, 104.0])
    later = _replicated("latency.l2", [150.0, 152.0, 155.0])
    assert cmp.compare([apart], [later])["rows"][0]["verdict"] == cmp.REGRESSED
    # one replica is no range
    assert cmp.replica_range(_replicated("latency.l2", [100.0])) is None
