"""The answer model: declared questions, exactly one answer each, stable ids,
and a toy experiment registered from outside the package's module list."""
import numpy as np
import pytest

from memfx.analysis.results import document
from memfx.experiments import REGISTRY, get_experiment
from memfx.experiments.base import Experiment, Param, Point, Trial, register
from memfx.model import answers as ans
from memfx.model.answers import Answer, Question, complete_answers
from memfx.model.findings import DETECTED, MEASURED, NOT_DETECTED

Q1 = Question("toy.speed", "How fast is the toy?", "ns", "004", "median of samples",
              better=ans.LOWER)
Q2 = Question("toy.effect", "Is arm a slower than arm b?", "ratio", "004", "ratio of medians")


def test_question_ids_are_checked():
    with pytest.raises(ValueError):
        Question("NoDot", "?", "ns", "004", "x")
    with pytest.raises(ValueError):
        Question("toy.x", "?", "ns", "004", "x", better="faster")
    assert Q1.experiment == "toy"


def test_complete_answers_fills_missing_and_refuses_undeclared():
    got = complete_answers([Q1, Q2], [Answer("toy.effect", DETECTED, "because")])
    assert [a.question for a in got] == ["toy.speed", "toy.effect"]
    assert got[0].verdict == ans.NOT_MEASURED and "sweep did not reach" in got[0].because
    with pytest.raises(ValueError, match="undeclared"):
        complete_answers([Q1], [Answer("toy.other", DETECTED, "x")])
    with pytest.raises(ValueError, match="two answers"):
        complete_answers([Q1], [Answer("toy.speed", MEASURED, "x")] * 2)
    failed = complete_answers([Q1], [], failure="analysis failed: boom")
    assert failed[0].because == "analysis failed: boom"


def test_no_ci_from_fewer_than_three_samples():
    a = ans.measured(Q1, [5.0, 6.0], "two samples")
    assert a.value == 5.5 and a.ci_low is None and a.ci_high is None
    b = ans.measured(Q1, [5.0, 6.0, 5.5, 5.2], "four")
    assert b.ci_low is not None and b.ci_low <= b.value <= b.ci_high


def test_effect_answer_verdicts():
    rng = np.random.default_rng(1)
    slow = 2.0 + rng.normal(0, 0.01, 30)
    fast = 1.0 + rng.normal(0, 0.01, 30)
    assert ans.effect(Q2, slow, fast, "x").verdict == DETECTED
    same = ans.effect(Q2, fast, fast[::-1], "x")
    assert same.verdict == NOT_DETECTED and same.ci_low <= 1.0 <= same.ci_high
    assert ans.effect(Q2, [], fast, "x").verdict == ans.NOT_MEASURED


def test_non_finite_values_are_dropped_and_ci_ordered():
    a = Answer("toy.speed", MEASURED, "x", value=float("nan"), ci_low=3.0, ci_high=1.0)
    assert a.value is None and (a.ci_low, a.ci_high) == (1.0, 3.0)
    with pytest.raises(ValueError):
        Answer("toy.speed", "maybe", "x")


def test_point_key_is_stable_and_sorted():
    p = {"arm": "random", "params": {"size_bytes": 4096, "pages": "4k"}}
    assert ans.point_key(p) == "random|pages=4k|size_bytes=4096"
    assert ans.point_key({"arm": "random", "params": {"pages": "4k", "size_bytes": 4096}}) \
        == ans.point_key(p)


class _Toy(Experiment):
    """A toy effect: proves that one module with questions, plan, prepare and
    analyze is all an experiment needs (no list elsewhere to edit)."""
    name = "toy"
    question = "toy"
    seeds = ("004",)
    arms = ("a", "b")
    params = [Param("size", "size", 4096, "bytes", "8K")]
    presets = {"quick": {}, "full": {}}
    questions = (Q1, Q2)

    def plan(self, params, machine):
        return [Point(arm, {"size_bytes": params["size"]}) for arm in self.arms]

    def prepare(self, point, params, lab):   # pragma: no cover - not run here
        return Trial("fill_gpr", size=point.params["size_bytes"])

    def analyze(self, data):
        a = data.values("a")
        b = data.values("b")
        return [ans.measured(self.declared("speed"), a, "arm a",
                             evidence=ans.evidence_keys(data.select("a"))),
                ans.effect(self.declared("effect"), a, b, "a vs b")]


@pytest.fixture
def toy():
    register(_Toy)
    yield get_experiment("toy")
    REGISTRY.pop("toy", None)


def _samples(arm, base, n=9):
    return [{"arm": arm, "point": {"size_bytes": 4096}, "metric": "ns_per_call", "unit": "ns",
             "value": base + 0.01 * i, "length": 100, "ns": (base + 0.01 * i) * 100,
             "cycles_est": None, "counters": {}, "rejected": False} for i in range(n)]


def test_toy_experiment_document_has_one_answer_per_question(toy):
    run = {"id": "r1", "experiment": "toy", "status": "complete", "params": {}, "machine": {}}
    doc = document(run, _samples("a", 2.0) + _samples("b", 1.0), experiment=toy)
    assert doc["schema_version"] == 4
    assert [a["question"] for a in doc["answers"]] == ["toy.speed", "toy.effect"]
    speed, effect = doc["answers"]
    assert speed["verdict"] == MEASURED and speed["unit"] == "ns" and speed["seed"] == "004"
    assert speed["evidence"] == ["a|size_bytes=4096"]
    assert effect["verdict"] == DETECTED and effect["value"] == pytest.approx(2.0, rel=0.02)
    # schema version 3: answers only, no round-1 findings
    assert "findings" not in doc


def test_toy_experiment_failing_analysis_gives_not_measured(toy, monkeypatch):
    def boom(data):
        raise RuntimeError("boom")
    monkeypatch.setattr(toy, "analyze", boom)
    run = {"id": "r1", "experiment": "toy", "status": "complete", "params": {}, "machine": {}}
    doc = document(run, _samples("a", 2.0), experiment=toy)
    assert {a["verdict"] for a in doc["answers"]} == {ans.NOT_MEASURED}
    assert any("boom" in w["message"] for w in doc["warnings"])


def test_machine_id_ignores_volatile_state():
    from memfx.lab.machine import machine_id
    fp = {"cpu": {"vendor": "X", "family": 6, "model": 1, "microcode": "0x1"},
          "memory": {"total_bytes": 8 << 30, "available_bytes": 5 << 30},
          "tsc": {"hz": 2.0e9}, "power": {"governor": "powersave"}, "caches": []}
    other = {**fp, "memory": {"total_bytes": (8 << 30) + 4096, "available_bytes": 1 << 30},
             "tsc": {"hz": 2.0001e9}, "power": {"governor": "performance"}}
    assert machine_id(fp) == machine_id(other)
    upgraded = {**fp, "cpu": {**fp["cpu"], "microcode": "0x2"}}
    assert machine_id(upgraded) != machine_id(fp)
    assert machine_id(fp).startswith("m-")


def test_an_inconclusive_answer_says_why():
    base = {"question": "x.y", "verdict": "inconclusive", "band": [0.95, 1.05],
            "decides": "ratio of medians a/b"}
    across = ans.explain_inconclusive(dict(base, because="81x faster", value=81.0,
                                           ci_low=0.5, ci_high=300.0))
    assert across["because"].startswith("81x faster; inconclusive: its CI 0.5–300 reaches "
                                         "across the edge of the no-effect band 0.95–1.05")
    beyond = ans.explain_inconclusive(dict(base, because="81x faster", value=81.0,
                                           ci_low=60.0, ci_high=90.0))
    assert "although its CI 60–90 lies beyond" in beyond["because"]
    assert "ratio of medians a/b" in beyond["because"]
    none = ans.explain_inconclusive(dict(base, because="", value=1.2))
    assert none["because"].startswith("Inconclusive: there is no CI")
    said = dict(base, because="replicas disagree: detected in 1 of 2", ci_low=1, ci_high=2)
    assert ans.explain_inconclusive(said) == said
    detected = dict(base, verdict="detected", because="8x", ci_low=7, ci_high=9)
    assert ans.explain_inconclusive(detected) == detected


def test_every_seed_has_its_question_in_words():
    from memfx.experiments import all_experiments
    seeds = {q.seed for e in all_experiments() for q in e.questions if q.headline}
    assert seeds <= set(ans.SEEDS)
    for title, question in ans.SEEDS.values():
        assert title and question.endswith("?")
