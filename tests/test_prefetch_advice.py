"""The prefetch part of `memfx advise` (issue 10): advice derived from the
prefetch answers, then checked by a separate measurement whose verdict --
not the run's -- decides whether the advice is confirmed."""
import json

import numpy as np
import pytest

from memfx.advice import advise as A
from memfx.model.findings import DETECTED, INCONCLUSIVE, NOT_DETECTED
from memfx.store.store import Store


def _samples(arm, params, ns, n=7, rel=0.002):
    return [{"arm": arm, "point": dict(params), "metric": "ns_per_node", "unit": "ns",
             "value": ns * f, "length": 1000, "ns": ns * f * 1000, "counters": {},
             "rejected": False}
            for f in np.linspace(1 - rel, 1 + rel, n)]


LIST = {"part": "list", "level": "short", "nodes": 8}


def _stream(d, stride=64):
    return {"part": "stream", "stride_bytes": stride, "distance": d, "region_bytes": 1 << 27}


def _run_samples(unguarded, guarded, stream=None):
    """A prefetch run: the seed's loop on the short list, and the streaming
    loop as {d: (none ns, prefetch ns)}."""
    s = _samples("unguarded", LIST, unguarded) + _samples("guarded", LIST, guarded) \
        + _samples("none", LIST, 1.0)
    for d, (none, pf) in (stream or {}).items():
        s += _samples("none", _stream(d), none) + _samples("prefetch", _stream(d), pf)
    return s


def _doc(samples, params=None):
    from memfx.analysis.results import document
    run = {"id": "r1", "experiment": "prefetch", "status": "complete",
           "params": params or {"seed": 1, "region": 1 << 27}, "machine": {}}
    return document(run, samples)


def _items(doc):
    return {i["id"]: i for i in A.prefetch_proposals(doc)}


def test_advice_is_derived_from_the_answers():
    guard = _items(_doc(_run_samples(2.0, 1.0, {2: (1.0, 0.99), 8: (1.0, 0.5)})))
    g = guard["prefetch.guard_null"]
    assert g["claim"] == "faster" and g["advice"].startswith("guard it")
    assert g["rests_on"]["answer"] == "prefetch.seed_loop" and g["rests_on"]["verdict"] == DETECTED
    assert g["check_params"] == {"parts": ["list"], "levels": ["short"],
                                 "arms": ["unguarded", "guarded"]}
    d = guard["prefetch.stream_distance"]
    assert d["claim"] == "faster" and "prefetch 8 elements (512 B) ahead" in d["advice"]
    assert d["check_params"]["strides"] == [64] and d["check_params"]["stream_distances"] == [8]
    assert d["check_params"]["region"] == 1 << 27          # the run's region, re-measured
    same = _items(_doc(_run_samples(1.0, 1.0, {8: (1.0, 1.0)})))
    assert same["prefetch.guard_null"]["claim"] == "no_gain"
    assert same["prefetch.guard_null"]["advice"].startswith("no need to guard")
    assert same["prefetch.stream_distance"]["claim"] == "no_gain"
    assert "no software prefetch" in same["prefetch.stream_distance"]["advice"]


def test_no_advice_without_the_parts_that_answer_it():
    doc = _doc(_samples("t0", {"part": "cost", "mode": "throughput", "target": "null"}, 0.4))
    items = _items(doc)
    assert all(i["advice"] is None and "check_params" not in i for i in items.values())
    assert "list part" in items["prefetch.guard_null"]["reason"]


@pytest.mark.parametrize("claim,verdict,ratio,decision", [
    ("faster", DETECTED, 1.5, A.CONFIRMED),
    ("faster", NOT_DETECTED, 1.01, A.CONTRADICTED),
    ("faster", DETECTED, 0.8, A.CONTRADICTED),
    ("faster", INCONCLUSIVE, 1.2, A.CHECK_INCONCLUSIVE),
    ("no_gain", NOT_DETECTED, 1.0, A.CONFIRMED),
    ("no_gain", DETECTED, 0.8, A.CONFIRMED),       # the alternative measured slower
    ("no_gain", DETECTED, 1.3, A.CONTRADICTED),
    ("no_gain", INCONCLUSIVE, 1.02, A.CHECK_INCONCLUSIVE),
    ("faster", None, None, A.CHECK_INCONCLUSIVE),
])
def test_check_decision(claim, verdict, ratio, decision):
    assert A.check_decision(claim, verdict, ratio)[0] == decision


def _fresh(unguarded, guarded, none, prefetch, d=8, rel=0.002):
    """A fake measuring worker: records what it was asked to measure and
    returns samples of the requested cells with the given medians."""
    calls = []

    def measure(name, params, machine):
        calls.append((name, params))
        out = []
        if "list" in params["parts"]:
            for level in params["levels"]:
                p = dict(LIST, level=level)
                out += _samples("unguarded", p, unguarded, rel=rel)
                out += _samples("guarded", p, guarded, rel=rel)
        if "stream" in params["parts"]:
            for stride in params["strides"]:
                for dist in params["stream_distances"]:
                    out += _samples("none", _stream(dist, stride), none, rel=rel)
                    out += _samples("prefetch", _stream(dist, stride), prefetch, rel=rel)
        return out
    return measure, calls


def test_check_re_measures_the_chosen_arms_with_another_seed_and_decides_on_that():
    doc = _doc(_run_samples(2.0, 1.0, {2: (1.0, 0.99), 8: (1.0, 0.5)}))
    items = A.prefetch_proposals(doc)
    # the fresh measurement disagrees with the run on the guard, agrees on the distance
    measure, calls = _fresh(unguarded=1.0, guarded=1.0, none=1.0, prefetch=0.5)
    A.prefetch_check(items, {"seed": 1}, {}, measure=measure)
    (name, params), = calls                                   # one separate worker run
    assert name == "prefetch" and params["seed"] == 1 + A.PREFETCH_CHECK_SEED_OFFSET
    assert sorted(params["parts"]) == ["list", "stream"] and params["levels"] == ["short"]
    assert sorted(params["arms"]) == ["guarded", "none", "prefetch", "unguarded"]
    assert params["strides"] == [64] and params["stream_distances"] == [8]
    assert params["samples"] == A.PREFETCH_CHECK_SAMPLES
    by = {i["id"]: i for i in items}
    g = by["prefetch.guard_null"]
    assert g["decision"] == A.CONTRADICTED and g["check"]["verdict"] == NOT_DETECTED
    assert g["check"]["ratio"] == pytest.approx(1.0, abs=0.01)
    assert g["check"]["ci_low"] <= g["check"]["ratio"] <= g["check"]["ci_high"]
    assert g["check"]["ratio_is"] == "unguarded / guarded"
    s = by["prefetch.stream_distance"]
    assert s["decision"] == A.CONFIRMED and s["check"]["ratio"] == pytest.approx(2.0, rel=0.01)
    assert s["check"]["median_ns"] == pytest.approx({"none": 1.0, "prefetch": 0.5}, rel=0.01)


def test_a_wide_check_is_inconclusive_not_confirmed():
    items = A.prefetch_proposals(_doc(_run_samples(1.0, 1.0, {8: (1.0, 1.0)})))
    measure, _ = _fresh(unguarded=1.05, guarded=1.0, none=1.05, prefetch=1.0, rel=0.3)
    A.prefetch_check(items, {"seed": 1}, {}, measure=measure)
    for i in items:
        assert i["decision"] == A.CHECK_INCONCLUSIVE, i
        assert i["check"]["ci_low"] < 1 + 0.03 < i["check"]["ci_high"]


def _store_run(store, samples):
    rid = store.begin_run("prefetch", {"seed": 1, "region": 1 << 27}, "quick", {})
    store.add_samples(rid, samples)
    store.finish_run(rid, "complete")
    return rid


def test_prefetch_advice_from_the_store_checked_and_unchecked(db_path):
    with Store(db_path) as store:
        part = A.prefetch_advice(store, check=True)
        assert part["items"] == [] and "no complete prefetch run" in part["reason"]
        rid = _store_run(store, _run_samples(1.0, 1.0, {8: (1.0, 1.0)}))
        unchecked = A.prefetch_advice(store, check=False)
        assert unchecked["run_id"] == rid
        assert all(i["decision"] == A.UNCHECKED and i["checked"] is False
                   for i in unchecked["items"])
        measure, calls = _fresh(unguarded=1.0, guarded=1.0, none=1.0, prefetch=1.0)
        checked = A.prefetch_advice(store, check=True, measure=measure)
        assert len(calls) == 1
        assert [i["decision"] for i in checked["items"]] == [A.CONFIRMED, A.CONFIRMED]
        json.dumps(checked, allow_nan=False)

        def broken(name, params, machine):
            raise A.MemfxError("worker exited with status 1")
        failed = A.prefetch_advice(store, check=True, measure=broken)
        assert all(i["decision"] == A.UNCHECKED and "check failed" in i["check_reason"]
                   for i in failed["items"])
        assert [r["id"] for r in store.runs()] == [rid]        # the check stores no run


def test_the_report_shows_the_prefetch_advice():
    from memfx.report.report import advice_summary_html
    items = A.prefetch_proposals(_doc(_run_samples(1.0, 1.0, {8: (1.0, 1.0)})))
    measure, _ = _fresh(unguarded=1.0, guarded=1.0, none=1.0, prefetch=1.0)
    A.prefetch_check(items, {"seed": 1}, {}, measure=measure)
    for i in items:
        i.pop("check_params", None)
    html = advice_summary_html({"kind": "memfx-advice", "gcc": {}, "glibc": {},
                                "prefetch": {"run_id": "r1", "items": items}})
    assert "no need to guard it" in html and "unguarded / guarded" in html
    assert html.count("confirmed") >= 2


@pytest.mark.measuring
def test_the_check_really_measures_in_a_separate_worker():
    """The real measuring worker (nothing faked): every item gets a check with
    a ratio inside its CI and one of the decisions; no timing is asserted."""
    doc = _doc(_run_samples(1.0, 1.0, {8: (1.0, 1.0)}), params={"seed": 1, "region": 4 << 20})
    items = A.prefetch_proposals(doc)
    assert items[1]["check_params"]["region"] == 4 << 20
    A.prefetch_check(items, {"seed": 1}, {}, samples=5)
    for i in items:
        assert i["checked"] is True, i
        assert i["decision"] in (A.CONFIRMED, A.CONTRADICTED, A.CHECK_INCONCLUSIVE)
        c = i["check"]
        assert c["ci_low"] <= c["ratio"] <= c["ci_high"] and min(c["n"]) >= 3
        assert set(c["median_ns"]) == set(i["arms"])
