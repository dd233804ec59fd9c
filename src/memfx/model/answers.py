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
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import stats
from .details import Detail
from .findings import (
    DETECTED,
    INCONCLUSIVE,
    MEASURED,
    NOT_DETECTED,
    NOT_MEASURED,
    Verdict,
    band_verdict,
    effect_verdict,
    jsonable,
    threshold,
)
from .units import format_ci, format_number, format_value

ANSWER_VERDICTS = tuple(Verdict)

# Which direction of a value is an improvement, for `memfx compare`.
LOWER, HIGHER, NEITHER = "lower", "higher", ""

_ID = re.compile(r"^[a-z][a-z0-9_]*\.[a-z0-9_]+$")

# A question's no-effect band: 1 +- the named threshold effect_band.
EFFECT_BAND = "effect_band"
# Units whose values are counts of things found (ranges of a strategy
# table, knees, ways, sets) or a choice among the values measured (the
# prefetch distance, in elements, that ran fastest): compared as equal or
# different, never as ratios, and given no CI (a t interval over replicas
# that chose 8, 32 and 32 read "2.8-147 elements").  Not "entries": a TLB's
# entries are the page count where a knee of the curve lies, an estimate
# with a CI (the pages bracketing it), and two surveys 1 % apart read
# "changed" as a count.
DISCRETE_UNITS = frozenset({"ranges", "levels", "ways", "sets", "elements"})
# Discrete answers whose value is one choice (not a count of the ranges or
# levels their details list): the replicas' majority is their estimate.
CHOICE_UNITS = frozenset({"ways", "sets", "elements"})
# Counts located at a step of a swept curve (a TLB's entries: the last page
# count that stays fast): each replica's CI is the bracket of the sizes it
# measured around the step, a resolution and not a sampling error, so
# replicas on the same grid do not narrow it; the combined CI holds every
# replica's bracket (a Student-t floor over three replicas read 99
# [97.3, 101] from brackets of 96 and 102 pages).
BRACKET_UNITS = frozenset({"entries"})

__all__ = ["Question", "Answer", "Detail", "Verdict", "NOT_MEASURED", "ANSWER_VERDICTS",
           "LOWER", "HIGHER", "NEITHER", "point_key", "evidence_keys", "not_measured", "measured",
           "effect", "pooled_values", "complete_answers", "EFFECT_BAND", "DISCRETE_UNITS",
           "combine_replicas", "SEEDS", "explain_inconclusive"]


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
    # An effect question's no-effect band: EFFECT_BAND (1 +- the threshold
    # effect_band) or (low, high) in the question's unit.  Its verdict is
    # detected when the CI lies wholly outside the band, not detected when
    # wholly inside, inconclusive otherwise.  None: not an effect question.
    band: Any = None
    # The scale on which replicas are combined: "log" (times, bandwidths,
    # ratios: multiplicative) or "linear" (a share that can be zero).
    scale: str = "log"
    # The value rests on what a VM's host shares with its other guests (the
    # last-level cache, memory) or decides for it (which physical cores run
    # its vCPUs): between sessions minutes apart it drifts more than its
    # replicas spread within one (guest_drift_cv).
    host_shared: bool = False

    def __post_init__(self) -> None:
        if not _ID.match(self.id):
            raise ValueError(f"question id {self.id!r} is not of the form experiment.name "
                             f"(lower case, digits and _)")
        if self.better not in (LOWER, HIGHER, NEITHER):
            raise ValueError(f"question {self.id}: better must be 'lower', 'higher' or ''")

    @property
    def experiment(self) -> str:
        return self.id.split(".", 1)[0]

    def no_effect_band(self) -> Optional[Tuple[float, float]]:
        """(low, high) of the no-effect band, or None."""
        if self.band is None:
            return None
        if self.band == EFFECT_BAND:
            b = threshold("effect_band")
            return (1.0 - b, 1.0 + b)
        low, high = self.band
        return (float(low), float(high))

    @property
    def discrete(self) -> bool:
        return self.unit in DISCRETE_UNITS

    def as_dict(self) -> Dict[str, Any]:
        band = self.no_effect_band()
        return {"question": self.id, "asks": self.asks, "seed": self.seed, "unit": self.unit,
                "decides": self.decides, "better": self.better, "headline": self.headline,
                "band": list(band) if band else None, "host_shared": self.host_shared}


@dataclass
class Answer:
    """One question's answer on one run.

    ``value`` (in the question's unit) with its CI ``ci_low``..``ci_high``;
    ``because`` is the one sentence a user reads first; ``estimator`` names
    which figure of the points the value uses (e.g. "median of samples",
    "p10: best sustained"); ``details`` are the sub-results, each a
    :class:`~memfx.model.details.Detail` (built by ``details.detail``).
    ``as_dict``/``from_dict`` are its document form, made only where a
    document is written or read."""

    question: str
    verdict: Verdict
    because: str
    value: Optional[float] = None
    ci_low: Optional[float] = None
    ci_high: Optional[float] = None
    evidence: List[str] = field(default_factory=list)
    details: List[Detail] = field(default_factory=list)
    estimator: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in ANSWER_VERDICTS:
            raise ValueError(f"answer to {self.question}: verdict {self.verdict!r} is not one of "
                             f"{', '.join(ANSWER_VERDICTS)}")
        self.verdict = Verdict(self.verdict)
        _check_details(self.question, self.details)
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
        # details may have been replaced since __init__ (answer.details = [...])
        _check_details(self.question, self.details)
        out.update(verdict=self.verdict, value=self.value, ci_low=self.ci_low,
                   ci_high=self.ci_high, because=self.because, estimator=self.estimator,
                   evidence=list(self.evidence), details=[d.to_json() for d in self.details])
        made: Dict[str, Any] = jsonable(out)
        return made

    # the document form's names beside Detail's (to_json/from_json)
    def to_json(self, question: Optional[Question] = None) -> Dict[str, Any]:
        return self.as_dict(question)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Answer":
        return cls.from_dict(d)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Answer":
        return cls(question=str(d["question"]), verdict=Verdict(str(d["verdict"])),
                   because=str(d.get("because") or ""), value=d.get("value"),
                   ci_low=d.get("ci_low"), ci_high=d.get("ci_high"),
                   evidence=list(d.get("evidence") or []),
                   details=[Detail.from_json(x) for x in d.get("details") or []],
                   estimator=str(d.get("estimator") or ""))


def _check_details(question: str, details: Sequence[Any]) -> None:
    """Details are Details: a dict built by hand bypasses the one
    constructor and its checks (a renamed key would pass unseen)."""
    for d in details:
        if not isinstance(d, Detail):
            raise TypeError(f"answer to {question}: a detail is built with "
                            f"memfx.model.details.detail(...), not {type(d).__name__}: {d!r}"[:300])


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


def measured(q: Question, values: Iterable[float], because: str, *,
             evidence: Iterable[str] = (), details: Iterable[Detail] = (),
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


def effect(q: Question, a: Iterable[float], b: Iterable[float], because: str, *,
           evidence: Iterable[str] = (), details: Iterable[Detail] = (),
           estimator: str = "ratio of medians", effect_min: Optional[float] = None,
           seed: int = 0) -> Answer:
    """An effect answer: median(a)/median(b) with a bootstrap CI; verdict by
    the question's no-effect band (:func:`band_verdict`), or, given
    ``effect_min`` or for a question without a band, by
    :func:`findings.effect_verdict` (named thresholds effect_min, min_samples)."""
    va, vb = np.asarray(a, float), np.asarray(b, float)
    va, vb = va[np.isfinite(va)], vb[np.isfinite(vb)]
    if va.size == 0 or vb.size == 0:
        return not_measured(q, "one side of the comparison has no samples")
    r = stats.ratio_of_medians(va, vb, confidence=threshold("ci_level"), seed=seed)
    band = q.no_effect_band() if effect_min is None else None
    verdict = effect_verdict(r["ratio"], r["ci_low"], r["ci_high"], int(r["n_a"]), int(r["n_b"]),
                             effect_min=effect_min, band=band)
    lo, hi = (r["ci_low"], r["ci_high"]) if min(va.size, vb.size) >= threshold("min_ci_samples") \
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


# --------------------------------------------------------------------------
# replicas: one answer from the answers of independent worker processes


def widen_for_drift(value: float, lo: float, hi: float, cv: float) -> Tuple[float, float]:
    """(lo, hi) widened on the log scale: each half-width h becomes
    sqrt(h^2 + (z cv)^2), z of the ci_level normal interval."""
    z = {0.90: 1.645, 0.95: 1.960, 0.99: 2.576}.get(round(threshold("ci_level"), 2), 1.960)
    d = z * cv
    h_lo, h_hi = math.log(value / lo), math.log(hi / value)
    return (value * math.exp(-math.hypot(h_lo, d)), value * math.exp(math.hypot(h_hi, d)))


# Units of absolute figures: between sessions they move with the clock the
# host gives a guest's vCPU (guest_clock_cv); ratios of two arms cancel it.
# Cycles too: without a PMU they are TSC ticks times a cycles-per-tick
# estimate (a dependent-add chain timed beside each block), which follows
# the same host clock.
CLOCK_UNITS = ("ns", "GB/s", "cycles")


def guest_drift_cv(unit: str, host_shared: bool) -> float:
    """The run-to-run CV a value of this kind is assumed to drift by between
    sessions of a VM guest that replicas within one session do not see:
    guest_drift_cv for what rests on the host's shared cache or memory,
    guest_clock_cv for other absolute figures, 0 for the rest."""
    if host_shared:
        return threshold("guest_drift_cv")
    if unit in CLOCK_UNITS:
        return threshold("guest_clock_cv")
    return 0.0


def _within(value: float, low: float, high: float) -> bool:
    """low <= value <= high, or on an end to rounding."""
    return (low <= value <= high or math.isclose(value, low, rel_tol=1e-9)
            or math.isclose(value, high, rel_tol=1e-9))


def combine_replicas(q: Question, pooled: Mapping[str, Any],
                     per_replica: Sequence[Optional[Mapping[str, Any]]],
                     seed: int = 0, guest: bool = False) -> Dict[str, Any]:
    """The answer of a run measured in several replicas (worker processes).

    ``pooled`` is the answer of the analysis of every replica's samples
    together (its value is the answer's value); ``per_replica`` the answer
    of each replica analysed alone (None where its analysis failed).

    - The CI is the replica-level one (stats.combine_replicas: the Student-t
      interval over the replicas' values, never narrower than their own CIs
      imply), widened to hold the pooled value -- unless the pooled value
      lies outside it or beyond every replica's own value: the answer then
      takes the replicas' estimate and says so; a value measured by fewer
      than two replicas gets no CI: a CI from one process is not a CI.
    - Discrete answers (counts: ranges, knees, ways) get no CI.
    - An effect question (with a band) is decided by that CI against its
      band; any other detected / not detected verdict stands only when every
      replica that answered agrees, else it is inconclusive.
    - ``replicas`` keeps each replica's verdict, value and CI.
    - ``guest`` (measured in a VM guest) widens the CI by z x
      guest_drift_cv(unit, host_shared) in quadrature on the log scale:
      replicas minutes apart do not see the host's drift over tens of
      minutes, and a CI that the next run falls outside of is a bug."""
    out = dict(pooled)
    out["replicas"] = [
        {"replica": i, "verdict": a.get("verdict"), "value": a.get("value"),
         "ci_low": a.get("ci_low"), "ci_high": a.get("ci_high")} if a else
        {"replica": i, "verdict": NOT_MEASURED, "value": None, "ci_low": None, "ci_high": None}
        for i, a in enumerate(per_replica)]
    if pooled.get("verdict") == NOT_MEASURED:
        return out
    answered = [a for a in per_replica if a and a.get("verdict") != NOT_MEASURED]
    valued = [a for a in answered if a.get("value") is not None]
    value = pooled.get("value")
    notes = []
    lo = hi = None
    overruled = None
    if q.discrete:
        out["ci_scope"] = "none (a count or a choice)"
        votes = [a["value"] for a in valued]
        top = max(set(votes), key=votes.count) if votes else None
        if (q.unit in CHOICE_UNITS and value is not None and top is not None
                and votes.count(top) * 2 > len(votes) and top != value):
            # a choice the pooled samples made that most replicas did not
            # (prefetch.stream_distance: pooled 2, replicas 2, 8, 8 in an
            # A/A whose other surveys all read 8)
            # what was found leads (issue 42); the pooled claim follows it
            overruled = (f"{format_value(top, q.unit)}, the choice of {votes.count(top)} of "
                         f"{len(votes)} replicas, each analysed alone")
            value = out["value"] = top
    elif value is not None and len(valued) >= 2:
        c = stats.combine_replicas([a["value"] for a in valued],
                                   [a.get("ci_low") for a in valued],
                                   [a.get("ci_high") for a in valued],
                                   confidence=threshold("ci_level"), seed=seed,
                                   log=None if q.scale == "log" else False)
        c_value, c_low, c_high = c["value"], c["ci_low"], c["ci_high"]
        if c_value is not None and c_low is not None and c_high is not None:
            reads = [a["value"] for a in valued]
            if not (_within(value, c_low, c_high)
                    and _within(value, min(reads), max(reads))):
                # the pooled analysis read a figure no replica supports (the
                # pooled curve's knee at 55.9 KB, every replica's at
                # 50.8-51.1 KB in an A/A): the replicas are the evidence,
                # and a CI stretched to the pooled figure made compare see
                # a 10 % move between two runs that agreed.  Beyond every
                # replica's own value, too: a ratio of the pooled medians of
                # two arms can take its numerator's median from one
                # replica's level and its denominator's from another's
                # (an A/A's compare read a 15 % regression of replicas that
                # agreed: docs/machine-notes.md, "Replicas overrule pooled")
                overruled = (f"{format_value(c_value, q.unit)} by the replicas, each "
                             f"analysed alone")
                value = out["value"] = c_value
            lo, hi = min(c_low, value), max(c_high, value)
            if q.unit in BRACKET_UNITS:
                lows = [a["ci_low"] for a in valued if a.get("ci_low") is not None]
                highs = [a["ci_high"] for a in valued if a.get("ci_high") is not None]
                lo, hi = min([lo] + lows), max([hi] + highs)
        out["ci_scope"] = f"{len(valued)} replicas"
        states = host_states(q, valued)
        if states:
            out["states"] = states
            if lo is not None and hi is not None:
                # a CI over the replicas holds every state they saw
                lo = min([lo] + [st["ci_low"] if st["ci_low"] is not None else st["value"]
                                 for st in states])
                hi = max([hi] + [st["ci_high"] if st["ci_high"] is not None else st["value"]
                                 for st in states])
        drift = guest_drift_cv(q.unit, q.host_shared) if guest else 0.0
        if lo is not None and hi is not None and drift > 0 and q.scale == "log" and lo > 0 \
                and value > 0:
            lo, hi = widen_for_drift(value, lo, hi, drift)
            out["ci_scope"] += f" + the host's drift (CV {drift:.0%}, a guest)"
    elif value is not None:
        notes.append(f"measured by {len(valued)} of {len(per_replica)} replicas: no "
                     f"replica-level CI")
        out["ci_scope"] = "none (one replica)"
    out["ci_low"], out["ci_high"] = lo, hi
    verdict = pooled.get("verdict")
    band = q.no_effect_band()
    if band is not None and verdict in (DETECTED, NOT_DETECTED, INCONCLUSIVE):
        decided = band_verdict(band, lo, hi)
        if decided != verdict:
            values = ", ".join(format_number(a["value"]) for a in valued)
            notes.append(f"{decided.replace('_', ' ')} across replicas ({values}): "
                         f"CI {format_ci(lo, hi)} against the no-effect band "
                         f"{format_ci(*band)}")
        verdict = decided
    elif verdict in (DETECTED, NOT_DETECTED):
        others = [a.get("verdict") for a in answered]
        if any(v != verdict for v in others):
            agree = sum(v == verdict for v in others)
            notes.append(f"replicas disagree: {verdict.replace('_', ' ')} in {agree} of "
                         f"{len(others)}")
            verdict = INCONCLUSIVE
    states = out.get("states")
    if states:
        verdicts = {st["verdict"] for st in states}
        said = states_text(states, len(valued), q.unit)
        if {DETECTED, NOT_DETECTED} <= verdicts and verdict != INCONCLUSIVE:
            # each state is real: a verdict from one of them is half the truth
            verdict = INCONCLUSIVE
            notes.insert(0, f"the host was in two states that disagree: {said}")
        else:
            notes.append(f"the host was in two states: {said}")
    out["verdict"] = verdict
    if overruled:
        notes.insert(0, overruled)
    if notes:
        said = str(out.get("because") or "").rstrip(". ")
        if (verdict != pooled.get("verdict") or overruled) and said:
            # the replicas overrule the pooled sentence: lead with what they
            # decided, and quote the pooled claim as such ("The fix removes
            # the penalty; ... inconclusive across replicas" read as a claim
            # its own verdict contradicted)
            lead = "; ".join(notes)
            out["because"] = (f"{lead[:1].upper()}{lead[1:]} (every replica's samples pooled: "
                              f"{said[:1].lower()}{said[1:]})")
        else:
            out["because"] = (said + "; " + "; ".join(notes)).lstrip("; ")
    return out


def host_states(q: Question, valued: Sequence[Mapping[str, Any]]
                ) -> Optional[List[Dict[str, Any]]]:
    """The host states the replicas of an answer fell into (stats.replica_states),
    each with its value, share, replicas, CI (the hull of its replicas' own)
    and verdict (against the question's band, else its
    replicas' majority); None when they form one state."""
    if q.discrete or len(valued) < 2:
        return None
    split = stats.replica_states([a["value"] for a in valued],
                                 [a.get("ci_low") for a in valued],
                                 [a.get("ci_high") for a in valued],
                                 min_separation=threshold("state_separation"),
                                 gap_spreads=threshold("state_gap_spreads"),
                                 gap_sigmas=threshold("state_gap_sigmas"),
                                 confidence=threshold("ci_level"))
    if not split:
        return None
    band = q.no_effect_band()
    out = []
    for st in split:
        mine = [valued[i] for i in st["replicas"]]
        # a state's CI: the hull of its replicas' own CIs (two replicas'
        # t interval, t(1) = 12.7, would call no state anything)
        lows = [a.get("ci_low") for a in mine]
        highs = [a.get("ci_high") for a in mine]
        lo = None if any(x is None for x in lows) else min(lows)
        hi = None if any(x is None for x in highs) else max(highs)
        if band is not None:
            verdict = band_verdict(band, lo, hi)
        else:
            votes = [a.get("verdict") for a in mine]
            verdict = max(set(votes), key=votes.count)
        out.append({"value": st["value"], "share": round(st["share"], 4),
                     "replicas": [valued[i].get("replica", i) for i in st["replicas"]],
                     "ci_low": lo, "ci_high": hi, "verdict": verdict})
    return out


def states_text(states: Sequence[Mapping[str, Any]], replicas: int, unit: str) -> str:
    """'1.31x in 1 of 3 replicas (not detected), 2.53x in 2 (detected)'."""
    parts = []
    for i, st in enumerate(states):
        n = len(st["replicas"])
        count = f"{n} of {replicas} replicas" if i == 0 else f"{n}"
        parts.append(f"{format_value(st['value'], unit)} in {count} "
                     f"({str(st['verdict']).replace('_', ' ')})")
    return ", ".join(parts)


# --------------------------------------------------------------------------
# the seed stories: what a person reading memfx's answers came to ask

# Each seed story (shared/seeds) as (short title, the question it asks); the
# terminal and the report group the headline answers under these.
SEEDS = {
    "000": ("hardware store elimination", "are zeros stored faster than other values?"),
    "001": ("strong prefetch", "does prefetching NULL or a bad address cost, or trap?"),
    "002": ("rep movs/stos", "when does rep movsb win, and what does 4K aliasing cost?"),
    "003": ("a tale of two copies", "why is a 28-byte entry slower than a 32-byte one?"),
    "004": ("Drepper's memory paper", "what do this machine's caches, TLBs and RAM cost?"),
}

# Words that show a sentence already says why an answer is inconclusive.
_REASONED = ("inconclusive", "not conclusive", "disagree", "within the noise", "across",
             "too few", "no ci", "noisy", "straddl", "cannot tell")


def explain_inconclusive(answer: Dict[str, Any]) -> Dict[str, Any]:
    """``answer`` (a dict) with the reason appended to ``because`` when it is
    inconclusive and its sentence does not yet say why: the CI reaching
    across the no-effect band, or no CI at all."""
    if answer.get("verdict") != INCONCLUSIVE:
        return answer
    because = str(answer.get("because") or "").rstrip(" .")
    if any(w in because.lower() for w in _REASONED):
        return answer
    lo, hi = answer.get("ci_low"), answer.get("ci_high")
    band = answer.get("band")
    if not band:
        e = threshold("effect_min")
        band = (1 - e, 1 + e)
    if lo is None or hi is None:
        why = ("inconclusive: there is no CI to decide it (too few samples, or a value "
               "from one replica)")
    elif lo > band[1] or hi < band[0] or (lo >= band[0] and hi <= band[1]):
        where = "inside" if lo >= band[0] and hi <= band[1] else "beyond"
        why = (f"inconclusive although its CI {format_ci(lo, hi)} lies {where} the no-effect "
               f"band {format_ci(*band)}: too few samples on a side, or the "
               f"rule ({answer.get('decides') or 'its declared comparison'}) did not hold")
    else:
        why = (f"inconclusive: its CI {format_ci(lo, hi)} reaches across the edge of the "
               f"no-effect band {format_ci(*band)}")
    return dict(answer, because=(because + "; " + why) if because else why[0].upper() + why[1:])
