"""`memfx compare A B`: two runs, surveys or machines, question by question.

For every question answered on both sides: A's and B's value, the ratio B/A
with a confidence interval, and a verdict:

- ``regressed`` / ``improved``: the ratio moved beyond the band in the
  direction the question calls worse / better (``Question.better``) and its
  CI lies wholly beyond the band;
- ``changed``: the same for a question whose direction is neither (an
  effect's size), or a count (ranges, knees, ways) or set that differs --
  counts and sets are equal or different, never ratios; ranges of the
  fastest strategy that carry their ties differ only where they reverse (at
  some size each side's pick is clearly slower than the other's on the
  other side), not where a tie fell the other way;
- ``changed-answer``: the verdict itself changed (detected <-> not detected;
  inconclusive on one side is not a changed answer);
- ``noisy``: it would have regressed, but a side's own cautions say its run
  was noisy and the ratio does not clear the band by the noisy margin;
- ``inconclusive``: the ratio lies beyond the band but its CI reaches back
  into it -- the runs cannot tell (more replicas can);
- ``unchanged``: the ratio lies within the band; ``not judged`` when a side has no CI (a value from one
  process or one replica says nothing about the noise); ``not comparable``
  when either side has no value.

The band is the threshold (``--threshold``), widened per question by the
machine's own history where the store holds at least
``history_min_surveys`` earlier surveys of it: ``history_sigmas`` x
sqrt(2) x the standard deviation of that question's log value over them
(the ratio of two new surveys) -- in a VM guest never narrower, for an
absolute figure (ns, GB/s), than the band of ``guest_clock_cv``.  With
no such history, a question whose value rests on what a VM's host shares
(``Question.host_shared``: its LLC, its memory) gets the band of a history
whose spread is ``guest_drift_cv`` when either side ran in a guest: such
values drift between sessions far more than their replicas spread within
one.  Each row says which band it
used.

The ratio's CI is the pooled two-sample Student-t interval over both
sides' replica values on the log scale (stats.replica_log_ratio_half);
where a side keeps no replica values (older documents) it combines the two
answers' CIs (each read as a normal interval of the log value:
se = ln(hi/lo) / (2 z)).

An answer can average a change away (a geometric mean over 84 sizes):
compare_curves compares every point of both sides with the same ratio CI
and band (band_of), names the ranges of neighbouring points that moved,
and compares the answers' detail lists by content (compare_all: the whole
document of `memfx compare`).  The text helpers here (summary, markdown,
curve_changes) show them after the answers.
Pure functions of result documents: nothing is measured or stored here.
"""
from __future__ import annotations

import math
from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    Iterable,
    List,
    Literal,
    Mapping,
    Optional,
    Set,
    Tuple,
    Union,
)

import numpy as np

from ..model import stats
from ..model.answers import CLOCK_UNITS, DISCRETE_UNITS, guest_drift_cv
from ..model.findings import DETECTED, NOT_DETECTED, threshold
from ..model.units import MISSING, format_ratio, format_value

if TYPE_CHECKING:
    from typing import TypeGuard

REGRESSED, IMPROVED, CHANGED = "regressed", "improved", "changed"
CHANGED_ANSWER, UNCHANGED, NOT_COMPARABLE = "changed-answer", "unchanged", "not comparable"
NOT_JUDGED, NOISY, INCONCLUSIVE = "not judged", "noisy", "inconclusive"
# a move between two states the host is known to take (issue 40): each is
# real, neither is a regression
HOST_STATE = "host state changed"
# 2: bands and replica CIs per row.  3: the curves (every point of both
# sides; ``curve_points``, ``curves``: ranges of neighbouring points that
# moved, ``regressed_curves``, ``noisy_curves``, ``curve_rule``) and the
# answers' details compared by content (``detail_changes``, and
# ``details_changed`` on a row).  Readers take 2 as 3 without curves.
COMPARE_SCHEMA_VERSION = 3


# z of a two-sided normal interval at the ci_level threshold (0.95 -> 1.96).
_Z = {0.90: 1.645, 0.95: 1.960, 0.99: 2.576}


def _z() -> float:
    return _Z.get(round(threshold("ci_level"), 2), 1.960)


def _positive(x: object) -> TypeGuard[float]:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def _log_se(a: Mapping[str, Any]) -> Optional[float]:
    lo, hi = a.get("ci_low"), a.get("ci_high")
    if not (_positive(lo) and _positive(hi)):
        return None
    return math.log(hi / lo) / (2 * _z())


Column = List[Optional[float]]


def _replica_columns(a: Mapping[str, Any]) -> Tuple[Column, Column, Column]:
    reps = [x for x in a.get("replicas") or [] if isinstance(x, dict)]
    return ([x.get("value") for x in reps], [x.get("ci_low") for x in reps],
            [x.get("ci_high") for x in reps])


def ratio_ci(a: Mapping[str, Any], b: Mapping[str, Any], confidence: Optional[float] = None
             ) -> Tuple[Optional[float], Optional[float], Optional[float]]:
    """(ratio B/A, ci_low, ci_high); the CI is None where a side has none.

    Where both sides carry two or more replica values, the CI is the pooled
    two-sample t interval over them (stats.replica_log_ratio_half); else the
    two answers' CIs combined on the log scale.  ``confidence``: the CI's
    level (default: the ci_level threshold; the sides' own CIs are read at
    ci_level whatever it is)."""
    va, vb = a.get("value"), b.get("value")
    if not (_positive(va) and _positive(vb)):
        return None, None, None
    r = vb / va
    sa, sb = _log_se(a), _log_se(b)
    if sa is None or sb is None:
        return r, None, None
    level = threshold("ci_level") if confidence is None else confidence
    a_values, a_lows, a_highs = _replica_columns(a)
    b_values, b_lows, b_highs = _replica_columns(b)
    half = stats.replica_log_ratio_half(a_values, a_lows, a_highs, b_values, b_lows, b_highs,
                                        confidence=level)
    if half is None:
        z = _z() if confidence is None else stats.z_of(level)
        half = z * math.hypot(sa, sb)
    return r, r * math.exp(-half), r * math.exp(half)


def history_spread(values: Iterable[object]) -> Optional[float]:
    """Run-to-run spread of one question's value over earlier surveys: the
    standard deviation (n - 1) of the log values of the positive ones; None
    for fewer than history_min_surveys of them.  (A MAD of three or four
    values is zero whenever two of them agree: it made a band narrower than
    the next survey's drift.)"""
    v = np.asarray([x for x in values if _positive(x)], float)
    if v.size < threshold("history_min_surveys"):
        return None
    return float(np.std(np.log(v), ddof=1))


def history_band(spread: float) -> float:
    """The half-width (as a ratio - 1) of the band that the ratio of two new
    surveys keeps to, from the log-scale spread of earlier ones:
    exp(history_sigmas x sqrt(2) x spread) - 1."""
    return math.exp(threshold("history_sigmas") * math.sqrt(2) * spread) - 1


def band_of(limit: float, unit: str, host_shared: bool, spread: Optional[float] = None,
            n_history: int = 0, guest: bool = False) -> Tuple[float, str]:
    """(band, where it comes from) of one compared value: the threshold
    ``limit``, widened by the value's run-to-run ``spread`` (log SD) over
    ``n_history`` earlier surveys, or -- with no history, in a VM guest --
    by the drift a value of this ``unit`` (``host_shared``: resting on the
    host's cache, memory or cores) is assumed to have between sessions.
    Answers and curve points (compare_curves) are banded by this one rule."""
    band, source = limit, "threshold"
    drift = guest_drift_cv(unit, host_shared)
    if spread is not None:
        widened = history_band(spread)
        if widened > band:
            band, source = widened, f"history ({n_history} earlier surveys)"
        # In a guest a history never narrows an absolute figure's band below
        # the guest clock's drift: a few surveys minutes apart can all fall in
        # one stretch of the host's clock (docs/machine-notes.md, "Drift in a
        # guest").
        clock = guest_drift_cv(unit, False) if guest else 0.0
        if clock and history_band(clock) > band:
            band = history_band(clock)
            source = (f"guest clock (CV {clock:.0%}: an absolute figure moves with "
                      f"the host's clock; wider than the history of {n_history} "
                      f"earlier surveys)")
    elif guest and drift and history_band(drift) > band:
        band = history_band(drift)
        source = (f"guest drift (CV {drift:.0%}: "
                  + ("the value rests on what the host shares or decides: "
                     "its cache, memory, cores"
                     if drift >= threshold("guest_drift_cv") else
                     "an absolute figure moves with the host's clock")
                  + "; no history of this machine)")
    return band, source


def _signature(a: Mapping[str, Any]) -> Tuple[Any, Tuple[str, ...]]:
    """What a count or set answer says, for equal / different: its value and
    the labels of its details (the ranges, knees or ways themselves)."""
    labels = tuple(str(d.get("label")) for d in a.get("details") or [] if isinstance(d, dict))
    return a.get("value"), labels


def _ranges_details(a: Mapping[str, Any]) -> Dict[Tuple[Any, Any], Dict[str, Any]]:
    """{(op, mode): detail} of an answer's ranges that carry their ties."""
    return {(d.get("op"), d.get("mode")): d for d in a.get("details") or []
            if isinstance(d, dict) and d.get("kind") == "ranges" and d.get("ties")
            and d.get("ranges")}


def _pick_at(ranges: Iterable[Mapping[str, Any]], size: float) -> Optional[str]:
    return next((r.get("strategy") for r in ranges
                 if r.get("min_size", 0) <= size <= r.get("max_size", -1)), None)


def ranges_reversal(a: Mapping[str, Any], b: Mapping[str, Any]
                    ) -> Union[Literal[False], None, Tuple[Any, Any, float, str, str]]:
    """Where two answers' ranges of the fastest strategy reverse: the first
    (op, mode, size, A's pick, B's pick) at which A's pick is not tied with
    the fastest on B's side and B's pick not on A's; None when they agree up
    to their ties; False when either side keeps no ties (older documents:
    compare their signatures)."""
    da, db = _ranges_details(a), _ranges_details(b)
    common = sorted(set(da) & set(db), key=str)
    if not common:
        return False
    for key in common:
        ta = {s: set(t) for s, t in da[key]["ties"]}
        tb = {s: set(t) for s, t in db[key]["ties"]}
        for size in sorted(set(ta) & set(tb)):
            pa, pb = _pick_at(da[key]["ranges"], size), _pick_at(db[key]["ranges"], size)
            if pa and pb and pa != pb and pa not in tb[size] and pb not in ta[size]:
                return (*key, size, pa, pb)
    return None


def choice_ties(a: Mapping[str, Any]) -> Optional[Set[float]]:
    """The choices a discrete answer's details mark as tied with the best
    (rows with "choice" and "tied"), or None when it keeps no ties."""
    rows = [d for d in a.get("details") or [] if isinstance(d, dict)
            and "choice" in d and "tied" in d]
    return {float(d["choice"]) for d in rows if d["tied"]} if rows else None


def replica_range(side: Mapping[str, Any]) -> Optional[Tuple[float, float]]:
    """(lowest, highest) of a side's replica values, where it has two or
    more."""
    vals = [v for v in _replica_columns(side)[0] if _positive(v)]
    return (min(vals), max(vals)) if len(vals) >= 2 else None


def known_states(a: Mapping[str, Any], b: Mapping[str, Any],
                 history: Optional[List[float]] = None, band: float = 0.05) -> Optional[str]:
    """Why a move from A's value to B's is one between host states already
    seen, or None.  A state is seen in a side's own replicas (its answer's
    ``states``, or the other side's value within the range of its replica
    values: replica_range) or in the machine's history: the history's values with A's
    and B's split into two states (stats.replica_states) that put A and B
    in different ones, each holding an earlier survey."""
    va, vb = a.get("value"), b.get("value")
    if not (_positive(va) and _positive(vb)):
        return None

    def within(v: float, st: Mapping[str, Any]) -> bool:
        lo = st.get("ci_low") if st.get("ci_low") is not None else st.get("value")
        hi = st.get("ci_high") if st.get("ci_high") is not None else st.get("value")
        return _positive(lo) and _positive(hi) and lo / (1 + band) <= v <= hi * (1 + band)

    for side, other, name in ((a, vb, "A"), (b, va, "B")):
        states = side.get("states") or []
        if len(states) >= 2 and any(within(other, st) for st in states):
            vals = ", ".join(format_value(st["value"], side.get("unit") or "") for st in states)
            return (f"{name}'s replicas saw two host states ({vals}); the other side's value "
                    f"lies in one of them")
    # A level one of a side's own replicas had is a state that side saw,
    # however its replicas split: where each side's replicas fall in two
    # levels, their medians move with the count in each, nothing changed
    # (docs/stability.md: a point at a private cache's edge, 1.7x).
    for side, other, name in ((a, vb, "A"), (b, va, "B")):
        levels = replica_range(side)
        if levels and levels[0] <= other <= levels[1]:
            unit = side.get("unit") or ""
            return (f"{name}'s replicas ranged {format_value(levels[0], unit)}-"
                    f"{format_value(levels[1], unit)} and the other side's value lies within "
                    f"them: a level {name} saw")
    past = [v for v in (history or []) if isinstance(v, (int, float)) and v > 0]
    if len(past) >= 2:
        split = stats.replica_states(
            past + [va, vb], min_separation=threshold("state_separation"),
            gap_spreads=threshold("state_gap_spreads"), gap_sigmas=0.0)
        if split:
            n = len(past)
            where = [next(i for i, st in enumerate(split) if k in st["replicas"])
                     for k in (n, n + 1)]
            seen = [any(k < n for k in st["replicas"]) for st in split]
            if where[0] != where[1] and all(seen):
                vals = " and ".join(format_value(st["value"], a.get("unit") or "")
                                    for st in split)
                return (f"the machine's history has two host states ({vals}); A is in one, "
                        f"B in the other")
    return None


def core_speeds(docs: Iterable[Mapping[str, Any]]) -> Dict[Optional[str], float]:
    """{run id: the core's speed while it ran, GB/s} (results.busy_summary's
    core_read_gbps) of the run documents that timed it."""
    out: Dict[Optional[str], float] = {}
    for d in docs:
        busy = d.get("busy")
        v = busy.get("core_read_gbps") if isinstance(busy, Mapping) else None
        if _positive(v):
            out[d.get("run_id")] = float(v)
    return out


def core_speed_move(a: Mapping[str, Any], b: Mapping[str, Any], ratio: Optional[float],
                    band: float, unit: str) -> Optional[str]:
    """Why a move of an absolute figure (ns, GB/s, cycles) from A to B is the
    host's, from the core speed each side's run timed (``core_gbps``: an
    L1d read after every cell, Sampling.core_speed), or None.  Where the
    core itself read more than ``core_speed_moved`` apart, a value that
    moved the same way and no further than the core did (within ``band``)
    moved with it: a host that lends the vCPU half a core, or slows its
    clock, slows page faults and loops as much as it slows the L1 read.
    A value that moved further, or the other way, is not explained."""
    sa, sb = a.get("core_gbps"), b.get("core_gbps")
    if unit not in CLOCK_UNITS or ratio is None or not (_positive(sa) and _positive(sb)):
        return None
    speed = sb / sa
    moved = threshold("core_speed_moved")
    if 1 / (1 + moved) <= speed <= 1 + moved:
        return None
    expected = speed if unit == "GB/s" else 1 / speed
    if not min(1.0, expected) / (1 + band) <= ratio <= max(1.0, expected) * (1 + band):
        return None
    return (f"the core read L1d at {speed:.2f}x A's speed in B ({sa:.0f} -> {sb:.0f} GB/s, "
            f"timed after every cell) and this value moved no further than that "
            f"({ratio:.2f}x): the host lent the vCPU a different share of its core or clock")


def _median_speed(answers: Iterable[Mapping[str, Any]]) -> Optional[float]:
    """The median core speed of the runs behind these answers, or None."""
    runs = {x.get("run_id"): x.get("core_gbps") for x in answers if _positive(x.get("core_gbps"))}
    return float(np.median(list(runs.values()))) if runs else None


def compare_answers(a: Mapping[str, Any], b: Mapping[str, Any], limit: float,
                    spread: Optional[float] = None, n_history: int = 0,
                    guest: bool = False, history: Optional[List[float]] = None
                    ) -> Dict[str, Any]:
    """One row of the comparison for two answers to the same question;
    ``spread``: the question's run-to-run spread (log SD) over the
    ``n_history`` surveys of the machine's history; ``guest``: a side ran in
    a VM guest (the host-shared questions' drift, guest_drift_cv, applies
    where there is no history)."""
    row = {"question": a.get("question") or b.get("question"),
           "asks": b.get("asks") or a.get("asks"), "unit": b.get("unit") or a.get("unit"),
           "better": b.get("better", a.get("better", "")),
           "a_verdict": a.get("verdict"), "b_verdict": b.get("verdict"),
           "a": a.get("value"), "a_ci": [a.get("ci_low"), a.get("ci_high")],
           "b": b.get("value"), "b_ci": [b.get("ci_low"), b.get("ci_high")]}
    band, row["band_source"] = band_of(
        limit, str(b.get("unit") or a.get("unit") or ""),
        bool(a.get("host_shared") or b.get("host_shared")), spread, n_history, guest)
    row["band"] = band
    r, lo, hi = ratio_ci(a, b)
    row.update(ratio=r, ratio_ci_low=lo, ratio_ci_high=hi)
    verdicts = {a.get("verdict"), b.get("verdict")}
    noisy = bool(a.get("noisy") or b.get("noisy"))
    if noisy:
        row["noisy"] = True
    busy = [name for name, side in (("A", a), ("B", b)) if side.get("busy")]
    if busy:
        row["busy"] = " and ".join(busy)
    if verdicts == {DETECTED, NOT_DETECTED}:
        row["verdict"] = CHANGED_ANSWER
        return row
    if verdicts == {NOT_DETECTED}:
        row["verdict"] = UNCHANGED          # no effect on either side: its size is noise
        row["reason"] = "not detected on both sides"
        return row
    if row["unit"] in DISCRETE_UNITS and a.get("value") is not None and b.get("value") is not None:
        row["ratio_ci_low"] = row["ratio_ci_high"] = None
        rev = ranges_reversal(a, b)
        ta, tb = choice_ties(a), choice_ties(b)
        va, vb = float(a["value"]), float(b["value"])
        if rev is False and ta is not None and tb is not None and va != vb:
            # two choices that differ only where a tie fell the other way
            # (prefetch.stream_distance: 8 or 32 elements, within 10 % of
            # each other in one survey and not in the next)
            if va in tb or vb in ta:
                row["verdict"] = UNCHANGED
                row["reason"] = ("a tie fell the other way: each side's choice is tied with "
                                 "the best on the other side, or one of them is")
            else:
                row["verdict"] = CHANGED
                row["reason"] = (f"{format_value(va, row['unit'])} is not tied with the best in "
                                 f"B, nor {format_value(vb, row['unit'])} in A")
        elif rev is False:
            row["verdict"] = UNCHANGED if _signature(a) == _signature(b) else CHANGED
        elif rev is None:
            row["verdict"] = UNCHANGED
            if _signature(a) != _signature(b):
                row["reason"] = ("the same fastest strategy at every size both measured, up to "
                                 "ties (a tie fell the other way)")
        else:
            op, mode, size, pa, pb = rev
            row["verdict"] = CHANGED
            row["reason"] = (f"{op} ({mode}) at {format_value(size, 'bytes')}: {pa} is the "
                             f"fastest in A and clearly slower than {pb} in B, {pb} clearly "
                             f"slower than {pa} in A")
        return row
    if r is None:
        row["verdict"] = NOT_COMPARABLE
        return row
    if lo is None or hi is None:
        row["verdict"] = NOT_JUDGED
        row["reason"] = "a side has no CI (a value from one process or one replica)"
        return row
    up = lo > 1 + band
    down = hi < 1 / (1 + band)
    better = row["better"]
    if not (up or down):
        if 1 / (1 + band) <= r <= 1 + band:
            row["verdict"] = UNCHANGED
        else:
            row["verdict"] = INCONCLUSIVE
            row["reason"] = (f"moved {r - 1:+.0%}, beyond the band, but the CI "
                             f"[{lo:.3f}, {hi:.3f}] reaches back into it")
    elif not better:
        row["verdict"] = CHANGED
    elif (up and better == "lower") or (down and better == "higher"):
        margin = 1 + band * threshold("noisy_margin")
        if noisy and not (lo > margin or hi < 1 / margin):
            row["verdict"] = NOISY
        else:
            row["verdict"] = REGRESSED
    else:
        row["verdict"] = IMPROVED
    moved = row["verdict"] in (REGRESSED, IMPROVED, CHANGED, NOISY, INCONCLUSIVE, CHANGED_ANSWER)
    # a history in two states widens the band until it holds both: the move
    # is still said, as a change of state, where it passed the threshold
    moved = moved or (row["verdict"] == UNCHANGED and not 1 / (1 + limit) <= r <= 1 + limit)
    if moved:
        why = known_states(a, b, history, band)
        if not why and row["verdict"] != UNCHANGED:
            why = core_speed_move(a, b, r, band, str(row["unit"] or ""))
        if why:
            row["verdict"], row["reason"] = HOST_STATE, why
    return row


def compare(a_answers: Iterable[Mapping[str, Any]], b_answers: Iterable[Mapping[str, Any]],
            limit: float = 0.05, a_label: str = "A", b_label: str = "B",
            history: Optional[Mapping[str, List[float]]] = None,
            n_history: int = 0, guest: bool = False) -> Dict[str, Any]:
    """The comparison document of two answer lists (question ids matched).
    ``history``: {question: [value of each earlier survey of the machine]};
    ``guest``: either side ran in a VM guest.  The curves and the answers'
    details are compared by compare_curves.compare_all, which adds them to
    this document (here ``curve_points`` is None: not compared)."""
    a_by = {x["question"]: x for x in a_answers}
    b_by = {x["question"]: x for x in b_answers}
    rows: List[Dict[str, Any]] = []
    for qid in list(a_by) + [q for q in b_by if q not in a_by]:
        if qid in a_by and qid in b_by:
            spread = history_spread((history or {}).get(qid, [])) if history else None
            rows.append(compare_answers(a_by[qid], b_by[qid], limit, spread, n_history, guest,
                                        history=(history or {}).get(qid)))
        else:
            side = a_by[qid] if qid in a_by else b_by[qid]
            rows.append({"question": qid, "asks": side.get("asks"), "unit": side.get("unit"),
                         "better": side.get("better", ""), "verdict": NOT_COMPARABLE,
                         "a": (a_by.get(qid) or {}).get("value"),
                         "b": (b_by.get(qid) or {}).get("value"), "ratio": None,
                         "reason": f"answered only in {a_label if qid in a_by else b_label}"})
    counts: Dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    return {"compare_schema_version": COMPARE_SCHEMA_VERSION, "a": a_label, "b": b_label,
            "threshold": limit, "history_surveys": n_history if history else 0,
            "band": (f"widened by the machine's history ({n_history} earlier surveys)"
                     + (f", never below {history_band(threshold('guest_clock_cv')):.0%} for "
                        f"absolute figures (ns, GB/s) in a VM guest" if guest else "")
                     if history else "the threshold (fewer than "
                     f"{threshold('history_min_surveys')} earlier surveys of this machine)"
                     + (f"; in a VM guest {history_band(threshold('guest_drift_cv')):.0%} for "
                        f"the questions resting on the host's shared cache or memory and "
                        f"{history_band(threshold('guest_clock_cv')):.0%} for other absolute "
                        f"figures (ns, GB/s)" if guest and not history else "")),
            "guest": guest,
            "rows": rows, "counts": counts,
            "busy_sides": [name for name, side in ((a_label, a_by), (b_label, b_by))
                           if any(x.get("busy") for x in side.values())],
            # each side's core speed (GB/s of an L1d read, the median over its
            # runs: core_speed_move), where its runs timed it
            "core_speed": {k: _median_speed(side.values())
                           for k, side in (("a", a_by), ("b", b_by))},
            "regressed": [r["question"] for r in rows if r["verdict"] == REGRESSED],
            "noisy": [r["question"] for r in rows if r["verdict"] == NOISY],
            "curve_points": None, "curves": [], "curve_rule": None, "regressed_curves": [],
            "noisy_curves": [], "detail_changes": []}


def parse_threshold(text: str) -> float:
    """'5%' or '0.05' -> 0.05; ValueError on anything else or outside (0, 10)."""
    from ..model.errors import ParamError
    from ..model.units import parse_number  # ASCII digits only, finite
    t = str(text).strip()
    try:
        v = parse_number(t[:-1]) / 100 if t.endswith("%") else parse_number(t)
    except ParamError:
        raise ValueError(f"--threshold: expected a percentage like 5% or a ratio like 0.05, "
                         f"got {text!r}") from None
    if not (0 < v < 10) or v != v:
        raise ValueError(f"--threshold must be above 0 and below 1000%, got {text!r}")
    return v


# A pull-request comment: at most this many lines of Markdown.
MARKDOWN_LINES = 40
# Rows hidden by default (terminal and Markdown): nothing changed, or
# nothing to judge.  Any other verdict is listed, most urgent first.
QUIET = (UNCHANGED, NOT_JUDGED, NOT_COMPARABLE)
_URGENCY = (REGRESSED, NOISY, CHANGED_ANSWER, CHANGED, IMPROVED, HOST_STATE, INCONCLUSIVE)


def summary(doc: Mapping[str, Any]) -> str:
    """One line: how many rows got each verdict, regressions first, the
    threshold, and how many curve ranges changed (when any did)."""
    c = dict(doc.get("counts") or {})
    order = [v for v in _URGENCY if v in c] + sorted(v for v in c if v not in _URGENCY)
    counts = ", ".join(f"{c[v]} {v}" for v in order) or "no question on either side"
    ranges = curve_changes(doc)
    moved = ""
    if ranges:
        by: Dict[str, int] = {}
        for r in ranges:
            by[r["verdict"]] = by.get(r["verdict"], 0) + 1
        moved = "; curves: " + ", ".join(f"{n} {v}" for v, n in by.items()) + (
            " range" if len(ranges) == 1 else " ranges")
    busy = doc.get("busy_sides") or []
    ran_busy = f"; {' and '.join(busy)} ran on a busy machine" if busy else ""
    core = doc.get("core_speed") or {}
    speed = ""
    if _positive(core.get("a")) and _positive(core.get("b")):
        s = core["b"] / core["a"]
        if not 1 / (1 + threshold("core_speed_moved")) <= s <= 1 + threshold("core_speed_moved"):
            speed = (f"; the core read L1d at {s:.2f}x A's speed in B "
                     f"({core['a']:.0f} -> {core['b']:.0f} GB/s)")
    return f"{counts} (B/A, threshold {doc['threshold']:.0%}){moved}{ran_busy}{speed}"


def curve_changes(doc: Mapping[str, Any], show_all: bool = False) -> List[Mapping[str, Any]]:
    """The curve ranges a reader is shown: those that changed (every range
    with ``show_all``), most urgent first; none in a document older than
    version 3 or compared without its points."""
    ranges = list(doc.get("curves") or [])
    return ranges if show_all else [r for r in ranges if r.get("verdict") not in QUIET + (
        INCONCLUSIVE,)]


def curve_heading(doc: Mapping[str, Any]) -> Optional[str]:
    """The line over the curve ranges: how many points were compared and by
    which rule; None when the curves were not compared."""
    n = doc.get("curve_points")
    if n is None:
        return None
    ranges = list(doc.get("curves") or [])
    shown = curve_changes(doc)
    rest = len(ranges) - len(shown)
    tail = f"; {rest} inconclusive (--all lists them)" if rest else ""
    if not shown:
        return f"curves: no range changed over {n} points{tail}"
    return f"curves ({n} points; {doc.get('curve_rule') or 'ranges that moved'}){tail}:"


def detail_text(c: Mapping[str, Any]) -> str:
    """A changed detail: "libc slower (throughput): 224 B–2 KiB -> 2 KiB–24 KiB"."""
    return f"{c.get('detail')}: {c.get('a')} -> {c.get('b')}"


def sides(doc: Mapping[str, Any]) -> str:
    """One line: what A and B are."""
    return f"A = {doc['a']}, B = {doc['b']}"


def changed(rows: Iterable[Mapping[str, Any]]) -> List[Mapping[str, Any]]:
    """The rows with a verdict that is not QUIET, most urgent first."""
    rank = {v: i for i, v in enumerate(_URGENCY)}
    return sorted((r for r in rows if r.get("verdict") not in QUIET),
                  key=lambda r: rank.get(str(r.get("verdict")), len(rank)))


def ratio_text(r: Mapping[str, Any]) -> str:
    """A row's ratio B/A with its CI: "1.003 [0.998–1.010]"; a count or a
    choice (ranges, ways, ...) is equal or different, never a ratio: "–"."""
    if r.get("unit") in DISCRETE_UNITS:
        return MISSING
    return format_ratio(r.get("ratio"), r.get("ratio_ci_low"), r.get("ratio_ci_high"))


def _md_row(r: Mapping[str, Any]) -> str:
    unit = r.get("unit") or ""
    return (f"| `{r['question']}` | {format_value(r.get('a'), unit)} | {format_value(r.get('b'), unit)} "
            f"| {ratio_text(r)} | {r['verdict']}{' (' + r['busy'] + ' busy)' if r.get('busy') else ''} |")


# At most this many lines of Markdown for the curve ranges, and as many
# for the changed details (the rest: "... N more").
MARKDOWN_SECTION = 8


def _md_section(title: str, items: List[str]) -> List[str]:
    if not items:
        return []
    keep = items if len(items) <= MARKDOWN_SECTION - 3 else items[:MARKDOWN_SECTION - 4] + [
        f"- ... {len(items) - (MARKDOWN_SECTION - 4)} more (`--json` lists them)"]
    return ["", title, ""] + keep


def markdown(doc: Mapping[str, Any], max_lines: int = MARKDOWN_LINES) -> str:
    """The comparison for a pull request, in at most ``max_lines`` lines:
    the summary, a table of the changed rows (as many as fit), the curve
    ranges and the details that changed, and every other row folded into
    one <details> block, one line per verdict."""
    head = [f"**memfx compare: {summary(doc)}**", "",
            f"{sides(doc)}; band: {doc.get('band', 'the threshold')}.", ""]
    table = ["| question | A | B | B/A [95% CI] | verdict |", "|---|---|---|---|---|"]
    rows = list(doc["rows"])
    shown = changed(rows)
    ranges = curve_changes(doc)
    curves = _md_section(f"**Curves** ({doc.get('curve_points')} points; "
                         f"{doc.get('curve_rule')}):",
                         [f"- {r['verdict']}: `{r['label']}` {r.get('change', '')}"
                          for r in ranges])
    if doc.get("curve_points") is not None and not ranges:
        curves = ["", f"Curves: no range changed over {doc['curve_points']} points."]
    details = _md_section("**Details changed:**",
                          [f"- `{c['question']}` {detail_text(c)}"
                           for c in doc.get("detail_changes") or []])
    # lines left for the table: the fold takes a blank line, <details>, its
    # summary, a blank line, one line per verdict and </details>
    folded_verdicts = {r["verdict"] for r in rows}
    fold_lines = 4 + len(folded_verdicts) + 1
    room = max(0, max_lines - len(head) - len(table) - fold_lines - len(curves) - len(details))
    listed = shown[:room]
    rest = [r for r in rows if r not in listed]
    lines = head + ((table + [_md_row(r) for r in listed]) if listed
                    else ["No question changed beyond the threshold."])
    lines += curves + details
    if rest:
        lines += ["", f"<details><summary>{len(rest)} more rows (ratio B/A)</summary>", ""]
        for verdict in dict.fromkeys(r["verdict"] for r in rest):
            items = [r for r in rest if r["verdict"] == verdict]
            lines.append(f"{verdict} ({len(items)}): " + ", ".join(
                f"`{r['question']}` {ratio_text(r)}" for r in items) + "<br>")
        lines.append("</details>")
    return "\n".join(lines[:max_lines])
