"""memfx compare: question-by-question verdicts, ratio CIs, thresholds."""
import math

import pytest

from memfx import compare as cmp


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
    assert doc["rows"][0]["verdict"] == cmp.UNCHANGED and not doc["regressed"]


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
