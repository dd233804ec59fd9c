"""Typed documents (issue 44): details and answers are built through the
model's constructors, and their JSON form is made only at the document edge.

- no dict literal with a "label" key (a detail built by hand) anywhere in
  src/memfx outside the model: such a dict bypasses detail()'s checks, and
  a renamed key would fail only when a reader looks for it;
- no dict literal shaped as an answer (a "question" and a "verdict" key)
  in the experiments, which return Answers;
- Detail and Answer survive their JSON round trip, key order included (the
  report's tables take their first columns in that order);
- every warning is a Caution of the catalogue (findings.WARNINGS: id, text,
  hint), never a dict built by hand.
"""
import ast
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from memfx.model.answers import Answer, Question, measured
from memfx.model.details import Detail, detail
from memfx.model.findings import (
    DETECTED,
    INCONCLUSIVE,
    NOT_MEASURED,
    WARNINGS,
    Caution,
    Verdict,
    caution,
    jsonable,
    run_status_caution,
)

SRC = Path(__file__).resolve().parent.parent / "src" / "memfx"
MODEL = SRC / "model"

# Modules whose "label" dicts are not details: a fleet column, a machine
# list and a curve range of `compare` (documents of their own), and the
# worker's protocol message
NOT_DETAILS = {"analysis/documents.py", "analysis/fleet.py", "analysis/compare_curves.py",
               "running/worker.py"}


def _dict_literals(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            yield node, keys


def test_no_detail_is_a_dict_built_by_hand():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if path.is_relative_to(MODEL) or rel in NOT_DETAILS:
            continue
        for node, keys in _dict_literals(path):
            if "label" in keys:
                found.append(f"{rel}:{node.lineno}")
    assert found == [], ("details are built with memfx.model.details.detail(...), not as "
                         "dicts: " + ", ".join(found))


def test_the_exempt_label_dicts_are_what_they_claim():
    # an exemption that no longer holds a "label" dict is dropped, not kept
    for rel in NOT_DETAILS:
        assert any("label" in keys for _, keys in _dict_literals(SRC / rel)), rel


def test_no_answer_is_a_dict_built_in_an_experiment():
    found = []
    for path in sorted((SRC / "experiments").rglob("*.py")):
        for node, keys in _dict_literals(path):
            if {"question", "verdict"} <= keys:
                found.append(f"{path.relative_to(SRC).as_posix()}:{node.lineno}")
    assert found == [], "experiments return Answer objects: " + ", ".join(found)


def test_answers_refuse_a_hand_built_detail():
    with pytest.raises(TypeError, match="detail"):
        Answer("x.y", DETECTED, "", details=[{"label": "a", "value": 1.0}])
    a = Answer("x.y", DETECTED, "")
    a.details = [{"label": "a"}]               # replaced after __init__: caught at the edge
    with pytest.raises(TypeError, match="detail"):
        a.as_dict()


def test_detail_round_trip_keeps_keys_values_and_order():
    d = detail("L2 4 KiB", size_bytes=4096, value=np.float64(1.25), unit="ratio",
               ci_low=1.1, ci_high=np.float64(1.4), verdict=DETECTED, points=["a|x=1"],
               **{"ns_fresh": 3.5}, nested={"k": [1, 2]})
    j = d.to_json()
    assert list(j) == ["label", "size_bytes", "value", "unit", "ci_low", "ci_high", "verdict",
                       "points", "ns_fresh", "nested"]
    assert j["verdict"] == "detected" and type(j["verdict"]) is str
    back = Detail.from_json(json.loads(json.dumps(jsonable(j))))
    assert back == d and list(back) == list(j) and back.to_json() == jsonable(j)
    assert (back.label, back.value, back.unit, back.ci_low, back.ci_high, back.verdict) == \
        ("L2 4 KiB", 1.25, "ratio", 1.1, 1.4, "detected")
    assert back.extra["size_bytes"] == 4096 and back["ns_fresh"] == 3.5
    assert pickle.loads(pickle.dumps(back)) == back


def test_a_detail_writes_only_the_keys_it_was_given():
    d = detail("faults", value=2.0, unit="faults/page", arm="mmap")
    assert d.to_json() == {"label": "faults", "value": 2.0, "unit": "faults/page", "arm": "mmap"}
    assert "ci_low" not in d and d.ci_low is None and d.get("ci_low", "absent") == "absent"
    assert detail("n").to_json() == {"label": "n"}
    # a None it was given is written as null, as the dict it replaces did
    assert detail("m", value=None, ci_low=None).to_json() == \
        {"label": "m", "value": None, "ci_low": None}


def test_ci_stands_for_both_bounds_in_its_place():
    d = detail("a", value=1.0, ci=(0.9, 1.1), unit="x")
    assert list(d) == ["label", "value", "ci_low", "ci_high", "unit"]
    assert (d.ci_low, d.ci_high) == (0.9, 1.1)
    assert detail("b", ci=None).to_json() == {"label": "b", "ci_low": None, "ci_high": None}
    assert list(d.updated(ci=None)) == list(d) and d.updated(ci=None).ci_low is None
    with pytest.raises(TypeError):
        detail("c", ci=None, ci_low=1.0)


def test_detail_checks_its_typed_fields():
    with pytest.raises(TypeError):
        detail(3, value=1.0)
    with pytest.raises(TypeError):
        detail("a", value="fast")
    with pytest.raises(TypeError):
        detail("a", ci_low=True)
    with pytest.raises(TypeError):
        detail("a", unit=None)
    with pytest.raises(ValueError):
        Detail.from_json({"value": 1.0})                       # no label


def test_a_detail_is_immutable_and_changed_by_copy():
    d = detail("a", value=1.0, unit="x", arm="libc")
    with pytest.raises(Exception):
        d.value = 2.0
    with pytest.raises(TypeError):
        d["value"] = 2.0
    e = d.updated(value=2.0, tied=True)
    assert list(e) == ["label", "value", "unit", "arm", "tied"] and e.value == 2.0
    assert d.value == 1.0
    assert list(e.without("arm", "absent")) == ["label", "value", "unit", "tied"]
    with pytest.raises(ValueError):
        e.without("label")


def test_answer_round_trip_through_json():
    q = Question("x.effect", "does it?", "ratio", "000", "ratio of medians", band=(0.95, 1.05))
    det = [detail("L1d", value=1.3, unit="ratio", ci_low=1.2, ci_high=1.4, verdict=DETECTED,
                  level="L1d"),
           detail("DRAM", value=None, unit="ratio", verdict=NOT_MEASURED, reason="not reached")]
    a = measured(q, [1.0, 1.1, 1.2, 1.3], "because", evidence=["a|n=1"], details=det)
    j = a.to_json(q)
    assert j == a.as_dict(q)
    assert [list(d) for d in j["details"]] == [list(d) for d in det]
    text = json.dumps(j)
    back = Answer.from_json(json.loads(text))
    assert back.verdict is Verdict.MEASURED and back.details == det
    assert all(isinstance(d, Detail) for d in back.details)
    assert json.dumps(back.to_json(q)) == text


def test_verdicts_read_and_print_as_their_words():
    assert Verdict("inconclusive") is INCONCLUSIVE
    assert INCONCLUSIVE == "inconclusive" and {"inconclusive": 1}[INCONCLUSIVE] == 1
    assert f"{DETECTED}" == str(DETECTED) == "detected"
    assert json.dumps({"v": DETECTED}) == '{"v": "detected"}'
    assert type(jsonable(DETECTED)) is str
    with pytest.raises(ValueError):
        Answer("x.y", "maybe", "")


# ---------------------------------------------------------------- the warning catalogue

def test_no_warning_is_a_dict_built_by_hand():
    # a warning's dict ({"id", "message", ...}) is made by Caution.as_dict,
    # from a caution of the catalogue (findings.caution)
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.is_relative_to(MODEL):
            continue
        for node, keys in _dict_literals(path):
            if {"id", "message"} <= keys:
                found.append(f"{path.relative_to(SRC).as_posix()}:{node.lineno}")
    assert found == [], "warnings are built with findings.caution(...): " + ", ".join(found)


def test_every_caution_id_written_is_in_the_catalogue():
    used = set()
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                name = getattr(node.func, "attr", getattr(node.func, "id", None))
                # lab/machine.py's add() is its cautions' shorthand for caution()
                if (name == "caution" or (name == "add" and path.name == "machine.py")) \
                        and isinstance(node.args[0].value, str):
                    used.add(node.args[0].value)
    assert {"noisy_points", "busy_machine", "hypervisor", "analysis", "other_machine"} <= used
    assert used - set(WARNINGS) == set()


def test_a_caution_takes_its_advice_from_the_catalogue():
    c = caution("governor", "governor is 'powersave'", "powersave", "performance")
    assert c.advice == WARNINGS["governor"].hint and c.advice
    assert list(c.as_dict()) == ["id", "message", "value", "threshold", "advice"]
    # a note is written as its id and message, and reads back as one
    n = caution("analysis", "it failed")
    assert n.as_dict() == {"id": "analysis", "message": "it failed"}
    assert Caution.from_dict(n.as_dict()) == n
    assert caution("survey_over_budget", "slow", preset="quick").advice.endswith(
        "the slowest experiment's quick preset")
    with pytest.raises(KeyError, match="catalogue"):
        caution("no_such_warning", "?")
    with pytest.raises(Exception):
        c.advice = ""                                          # frozen


def test_a_run_that_stopped_says_so_with_the_words_it_always_had():
    assert run_status_caution("interrupted").as_dict() == {
        "id": "run_interrupted",
        "message": "run is interrupted: results cover only the points measured before it stopped"}
    assert run_status_caution(None).as_dict()["id"] == "run_None"


def test_the_machines_cautions_come_from_the_catalogue():
    from memfx.lab.machine import cautions
    fp = {"hypervisor": {"present": True, "vendor": "KVM"}, "power": {"governor": "powersave",
          "turbo": True}, "memory": {"thp_enabled": "always", "available_bytes": 1 << 20},
          "pmu": {"available": False, "reason": "none"}, "flags": {"invariant_tsc": False},
          "kernel": {"perf_event_paranoid": 3}, "cpu": {"smt_active": True, "smt": 2}}
    got = cautions(fp)
    assert {c["id"] for c in got} == {"hypervisor", "governor", "turbo", "smt", "thp_always",
                                      "no_pmu", "no_invariant_tsc", "perf_event_paranoid",
                                      "low_memory"}
    for c in got:
        assert list(c) == ["id", "message", "value", "threshold", "advice"]
        assert c["advice"] == WARNINGS[c["id"]].hint
