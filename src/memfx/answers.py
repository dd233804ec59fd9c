"""Questions and answers: the unit in which memfx reports.

An experiment declares its questions once, each with a stable id
(``fill.zero_store_elimination``), the question in words, the seed it comes
from, its unit and the comparison that decides it.  Every analysis of a run
gives exactly one :class:`Answer` per declared question -- ``not_measured``
with the reason when the sweep did not reach it -- so two runs, two surveys
or two machines can be compared question by question (``memfx compare``).

The sub-results an answer rests on (every crossover, every matrix cell, every
cache level) hang under it as ``details``; the points it rests on are named
by their point keys in ``evidence``.

Pure data and pure functions: imports only numpy, the standard library and
memfx's statistics, so it loads without the C core.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np

from . import stats
from .findings import (DETECTED, INCONCLUSIVE, MEASURED, NOT_DETECTED, effect_verdict,
                       jsonable, threshold)

NOT_MEASURED = "not_measured"
ANSWER_VERDICTS = (DETECTED, NOT_DETECTED, INCONCLUSIVE, MEASURED, NOT_MEASURED)

# Which direction of a value is an improvement, for `memfx compare`.
LOWER, HIGHER, NEITHER = "lower", "higher", ""

_ID = re.compile(r"^[a-z][a-z0-9_]*\.[a-z0-9_]+$")

__all__ = ["Question", "Answer", "NOT_MEASURED", "ANSWER_VERDICTS", "LOWER", "HIGHER",
           "NEITHER", "point_key", "evidence_keys", "not_measured", "measured",
           "effect", "pooled_values", "complete_answers"]


@dataclass(frozen=True)
class Question:
    """A question an experiment answers on every run.

    ``id`` is ``<experiment>.<name>`` and never changes meaning; ``decides``
    says in words which comparison gives the verdict; ``better`` says which
    direction of ``value`` is an improvement (``lower`` for a latency,
    ``higher`` for a bandwidth, empty for an effect whose size is neither)."""

    id: str
    asks: str
    unit: str
    seed: str
    decides: str
    better: str = NEITHER
    # The seed's own question: the report opens with one card per headline.
    headline: bool = False

    def __post_init__(self):
        if not _ID.match(self.id):
            raise ValueError(f"question id {self.id!r} is not of the form experiment.name "
                             f"(lower case, digits and _)")
        if self.better not in (LOWER, HIGHER, NEITHER):
            raise ValueError(f"question {self.id}: better must be 'lower', 'higher' or ''")

    @property
    def experiment(self) -> str:
        return self.id.split(".", 1)[0]

    def as_dict(self) -> Dict[str, Any]:
        return {"question": self.id, "asks": self.asks, "seed": self.seed, "unit": self.unit,
                "decides": self.decides, "better": self.better, "headline": self.headline}


@dataclass
class Answer:
    """One question's answer on one run.

    ``value`` (in the question's unit) with its CI ``ci_low``..``ci_high``;
    ``because`` is the one sentence a user reads first; ``estimator`` names
    which figure of the points the value uses (e.g. "median of samples",
    "p10: best sustained"); ``details`` are the sub-results, each a dict
    with at least ``label`` and ``value``."""

    question: str
    verdict: str
    because: str
    value: Optional[float] = None
    ci_low: Optional[float] = None
    ci_high: Optional[float] = None
    evidence: List[str] = field(default_factory=list)
    details: List[Dict[str, Any]] = field(default_factory=list)
    estimator: str = ""

    def __post_init__(self):
        if self.verdict not in ANSWER_VERDICTS:
            raise ValueError(f"answer to {self.question}: verdict {self.verdict!r} is not one of "
                             f"{', '.join(ANSWER_VERDICTS)}")
        for name in ("value", "ci_low", "ci_high"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float, np.number))
                                      and math.isfinite(float(v))):
                setattr(self, name, None)
        if self.ci_low is not None and self.ci_high is not None and self.ci_low > self.ci_high:
            self.ci_low, self.ci_high = self.ci_high, self.ci_low

    def as_dict(self, question: Optional[Question] = None) -> Dict[str, Any]:
        q = question.as_dict() if question else {"question": self.question}
        out = dict(q)
        out.update(verdict=self.verdict, value=self.value, ci_low=self.ci_low,
                   ci_high=self.ci_high, because=self.because, estimator=self.estimator,
                   evidence=list(self.evidence), details=list(self.details))
        return jsonable(out)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Answer":
        return cls(question=str(d["question"]), verdict=str(d["verdict"]),
                   because=str(d.get("because") or ""), value=d.get("value"),
                   ci_low=d.get("ci_low"), ci_high=d.get("ci_high"),
                   evidence=list(d.get("evidence") or []), details=list(d.get("details") or []),
                   estimator=str(d.get("estimator") or ""))


# --------------------------------------------------------------------------
# point keys


def point_key(point: Mapping[str, Any]) -> str:
    """Stable key of a point (arm and swept parameters, sorted):
    ``random|npad=7|pages=4k|size_bytes=32768``."""
    params = point.get("params") or {}
    return "|".join([str(point.get("arm", "?"))] + [f"{k}={params[k]}" for k in sorted(params)])


def evidence_keys(points: Iterable[Mapping[str, Any]]) -> List[str]:
    return [point_key(p) for p in points]


# --------------------------------------------------------------------------
# building answers


def not_measured(q: Question, reason: str) -> Answer:
    """The sweep (or the machine) did not reach this question; ``reason`` says why."""
    return Answer(question=q.id, verdict=NOT_MEASURED, because=reason)


def pooled_values(points: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """Every per-sample value of the given points, as one array."""
    parts = [np.asarray(p.get("values") or [], float) for p in points]
    parts = [a[np.isfinite(a)] for a in parts if a.size]
    return np.concatenate(parts) if parts else np.array([])


def measured(q: Question, values, because: str, *, evidence=(), details=(),
             estimator: str = "median of samples", value: Optional[float] = None,
             seed: int = 0) -> Answer:
    """A MEASURED answer: the median of ``values`` (or ``value``) with a
    bootstrap CI; no CI from fewer than ``min_ci_samples`` values."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    if v.size == 0 and value is None:
        return not_measured(q, because or "no samples")
    med = float(np.median(v)) if value is None else float(value)
    lo = hi = None
    if v.size >= threshold("min_ci_samples"):
        lo, hi = stats.bootstrap_ci(v, confidence=threshold("ci_level"), seed=seed)
    return Answer(question=q.id, verdict=MEASURED, because=because, value=med, ci_low=lo,
                  ci_high=hi, evidence=list(evidence), details=list(details),
                  estimator=estimator)


def effect(q: Question, a, b, because: str, *, evidence=(), details=(),
           estimator: str = "ratio of medians", effect_min: Optional[float] = None,
           seed: int = 0) -> Answer:
    """An effect answer: median(a)/median(b) with a bootstrap CI; verdict by
    :func:`findings.effect_verdict` (named thresholds effect_min, min_samples)."""
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size == 0 or b.size == 0:
        return not_measured(q, "one side of the comparison has no samples")
    r = stats.ratio_of_medians(a, b, confidence=threshold("ci_level"), seed=seed)
    verdict = effect_verdict(r["ratio"], r["ci_low"], r["ci_high"], r["n_a"], r["n_b"],
                             effect_min=effect_min)
    lo, hi = (r["ci_low"], r["ci_high"]) if min(a.size, b.size) >= threshold("min_ci_samples") \
        else (None, None)
    return Answer(question=q.id, verdict=verdict, because=because, value=r["ratio"],
                  ci_low=lo, ci_high=hi, evidence=list(evidence), details=list(details),
                  estimator=estimator)


def complete_answers(questions: Sequence[Question], given: Iterable[Answer],
                     failure: Optional[str] = None) -> List[Answer]:
    """Exactly one answer per declared question, in declaration order.

    Questions the analysis did not answer become ``not_measured`` (with
    ``failure`` as the reason when the analysis failed).  An answer to an
    undeclared question, or two answers to one question, is a bug in the
    experiment and raises ValueError."""
    declared = {q.id: q for q in questions}
    by_id: Dict[str, Answer] = {}
    for a in given:
        if a.question not in declared:
            raise ValueError(f"answer to undeclared question {a.question!r} "
                             f"(declared: {', '.join(declared)})")
        if a.question in by_id:
            raise ValueError(f"two answers to question {a.question!r}")
        by_id[a.question] = a
    reason = failure or "the analysis gave no answer (the sweep did not reach it)"
    return [by_id.get(q.id) or not_measured(q, reason) for q in questions]
