"""Curves in `memfx compare`: every measured point of A and B, not only the
answers, and the answers' detail lists compared by content.

An answer can average a change away: ``copy.libc_vs_best`` is a geometric
mean over 84 sizes, and a glibc setting that made libc memcpy 1.6-1.8x
faster at 4-24 KiB left it "unchanged".  So:

- Every point measured on both sides (matched by experiment, metric, arm and
  all its parameters) gets the ratio B/A of its medians with the CI answers
  get (compare.ratio_ci: the pooled two-sample t interval on the log scale
  over the replicas' values, stats.replica_log_ratio_half) and the band
  answers get (compare.band_of: the threshold, widened by the point's spread
  over the machine's history, else in a VM guest by the drift of its kind:
  ns and GB/s move with the host's clock, and a point resting on the host's
  shared cache or memory -- its working set beyond the private caches, or
  the evidence of a host-shared answer -- with the host's neighbours).  A
  point's better direction is the one its document declares: the best
  sustained figure of a time is its p10 (lower is better), of a bandwidth
  its p90 (higher is better).
- The points of one curve -- one experiment, metric and arm, every
  parameter fixed but the swept one (size_bytes where there is one, else the
  numeric parameter with the most values) -- are walked in the swept
  parameter's order, and neighbours whose ratios lie beyond the band the
  same way form a range.  A range is a change (regressed / improved, or
  changed for a point with no better direction) when at least
  ``curve_min_points`` of its points in a row have CIs wholly beyond the
  band, or one of them clears ``curve_far_band`` times the band with a CI at the level
  1 - (1 - ci_level) / n for the n points compared (Bonferroni).  Why: at a
  95 % CI one point in 40 clears the band by chance in an A/A whatever the
  band, so a survey's thousands of points would always show "changes"; three
  neighbours beyond it together, or one so far beyond it that the family of
  all points cannot explain it, do not happen by chance.  Any other range
  reads ``inconclusive`` (listed with --all).  A change in a noisy run reads
  ``noisy`` unless its CI clears the noisy margin, as answers do.
- A range's ratio is the geometric mean of its points' ratios; its CI
  exp(mean log ratio +- z x sqrt(sum se_i^2) / m) over the m points with a
  CI, each point's se read from its CI's half-width as z of them (t(df) of
  them in fact: conservative).  The rule above decides, not this CI; but
  a range judged against the other arms regresses (or improves) only when
  this CI of its own ratio is beyond the band the same way as well: arms do
  not always move alike with the host (half a core slows vector loops and
  rep movs differently), and an arm that kept its speed while the others
  moved has not regressed (it reads "changed").

Detail lists (answers' ``details``) are compared by content where the
content is discrete: the sizes a "range" detail covers (libc slower at
224 B-2 KiB -> 2 KiB-24 KiB), the fastest strategy by size ("ranges",
which differ only where they reverse, up to their ties, as the answer
does), where two strategies cross ("crossover", "envelope": brackets that
no longer overlap, a crossing found on one side only, another winner), and
a detail's detected / not detected.  Details that are estimates with a CI
are left to the points they rest on.

Pure functions of result documents: nothing is measured or stored here.
"""
from __future__ import annotations

import math
import re
from typing import Any, Collection, Dict, List, Mapping, Optional, Sequence, Tuple

from ..model.answers import HIGHER, LOWER, NEITHER, point_key
from ..model.findings import DETECTED, NOT_DETECTED, threshold
from ..model.machine_view import Fingerprint
from ..model.stats import z_of
from ..model.units import format_size, param_value_text
from .compare import (
    CHANGED,
    IMPROVED,
    INCONCLUSIVE,
    NOISY,
    REGRESSED,
    band_of,
    compare,
    core_speed_move,
    core_speeds,
    history_spread,
    known_states,
    ranges_reversal,
    ratio_ci,
)

# Parameters that are a working set's size: a point whose working set is
# larger than the machine's private caches rests on what a VM's host shares.
SIZE_PARAMS = ("size_bytes", "region_bytes")
# Swept first when a curve has it.
PREFERRED_SWEEP = "size_bytes"
# What a move is called, by the point's better direction and the ratio's side of 1.
_MOVES = {(LOWER, 1): "slower", (LOWER, -1): "faster", (HIGHER, 1): "faster",
          (HIGHER, -1): "slower", (NEITHER, 1): "higher", (NEITHER, -1): "lower"}


def curve_key(experiment: str, point: Mapping[str, Any], key: Optional[str] = None) -> str:
    """A point's key across documents: experiment, metric, then
    answers.point_key (arm and parameters sorted by name; ``key`` when the
    caller has it already)."""
    return f"{experiment}|{point.get('metric')}|{point_key(point) if key is None else key}"


def better_of(point: Mapping[str, Any]) -> str:
    """The point's better direction as its document declares it: the best
    sustained figure (``best_quantile``) of a time is p10 (lower is better),
    of a bandwidth p90; else from its unit / metric; else neither."""
    q = point.get("best_quantile")
    if q in ("p10", "p90"):
        return LOWER if q == "p10" else HIGHER
    unit, metric = str(point.get("unit") or ""), str(point.get("metric") or "")
    if unit == "ns" or metric.startswith("ns_per_"):
        return LOWER
    if unit == "GB/s" or metric.startswith("gb_per_s"):
        return HIGHER
    return NEITHER


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def private_cache_bytes(machine: Optional[Mapping[str, Any]]) -> Optional[int]:
    """The largest data cache level one CPU has to itself (its sysfs
    shared_cpu_list names one CPU), else the level below the last; None
    when the fingerprint reports no caches."""
    caches = Fingerprint.of(machine).caches
    if not caches:
        return None
    own = [c for c in caches if c.shared_cpu_list is not None
           and re.fullmatch(r"[0-9]+", c.shared_cpu_list.strip())]
    if own:
        return max(c.size_bytes for c in own)
    return caches[-2].size_bytes if len(caches) >= 2 else None


def side_points(docs: Sequence[Mapping[str, Any]], noisy: Collection[Optional[str]] = ()
                ) -> Dict[str, Dict[str, Any]]:
    """{curve_key: point} of a side's run documents (a run's, or a survey's
    ``documents``), each point with a positive median, tagged with its
    experiment, its run, whether that run is among the ``noisy`` ones
    (documents.noisy_runs) and whether it rests on what a VM's host shares
    (``host_shared``: evidence of a host-shared answer, or a working set
    beyond the private caches)."""
    out: Dict[str, Dict[str, Any]] = {}
    for d in docs:
        exp = str(d.get("experiment") or "")
        shared = {k for a in d.get("answers") or [] if a.get("host_shared")
                  for k in a.get("evidence") or []}
        private = private_cache_bytes(d.get("machine"))
        run_id = d.get("run_id")
        in_noisy = run_id is not None and run_id in noisy
        speed = core_speeds([d]).get(run_id)
        for p in d.get("points") or []:
            if not _number(p.get("median")) or p["median"] <= 0:
                continue
            params = p.get("params") or {}
            big = private is not None and any(
                _number(params.get(k)) and params[k] > private for k in SIZE_PARAMS)
            key = point_key(p)          # once: curve_key() is made of it
            out[curve_key(exp, p, key)] = dict(
                p, experiment=exp, run_id=run_id, host_shared=big or key in shared,
                noisy=in_noisy, core_gbps=speed)
    return out


def point_medians(docs: Sequence[Mapping[str, Any]]) -> Dict[str, float]:
    """{curve_key: median} of a survey's run documents: what the machine's
    history keeps of its points (answer_cache)."""
    return {k: float(p["median"]) for k, p in side_points(docs).items()}


def _as_value(p: Mapping[str, Any]) -> Dict[str, Any]:
    """A point read as compare.ratio_ci reads an answer: its median, CI and
    each replica's median."""
    return {"value": p.get("median"), "ci_low": p.get("ci_low"), "ci_high": p.get("ci_high"),
            "replicas": [{"value": v} for v in p.get("replicas") or []]}


def compare_points(a_pts: Mapping[str, Mapping[str, Any]], b_pts: Mapping[str, Mapping[str, Any]],
                   limit: float, history: Optional[Mapping[str, List[float]]] = None,
                   n_history: int = 0, guest: bool = False) -> List[Dict[str, Any]]:
    """One row per point measured on both sides: ratio B/A with its CI, the
    band, and how it moved (``move``: +1 beyond the band upwards, -1
    downwards, 0 within it; ``clear``: its CI wholly beyond the band that
    way; ``far``: its Bonferroni CI beyond curve_far_band x the band)."""
    keys = [k for k in a_pts if k in b_pts]
    rows = []
    for k in keys:
        a, b = a_pts[k], b_pts[k]
        spread = history_spread((history or {}).get(k, [])) if history else None
        # in a guest every point of a curve is banded as host-shared: whole
        # stretches of a curve move with the host between surveys minutes
        # apart, some arms more than others, where the answers' summaries
        # hold (docs/stability.md has the figures)
        band, source = band_of(limit, str(b.get("unit") or a.get("unit") or ""),
                               bool(a.get("host_shared") or b.get("host_shared") or guest),
                               spread, n_history, guest)
        r, lo, hi = ratio_ci(_as_value(a), _as_value(b))
        move = 0 if r is None else (1 if r > 1 + band else -1 if r < 1 / (1 + band) else 0)
        clear = lo is not None and hi is not None and ((move > 0 and lo > 1 + band)
                                    or (move < 0 and hi < 1 / (1 + band)))
        rows.append({"key": k, "experiment": a["experiment"], "metric": a.get("metric"),
                     "arm": a.get("arm"), "params": a.get("params") or {},
                     "unit": b.get("unit") or a.get("unit") or "", "better": better_of(b),
                     "a": a["median"], "b": b["median"], "ratio": r, "ratio_ci_low": lo,
                     "ratio_ci_high": hi, "band": band, "band_source": source, "move": move,
                     "clear": bool(clear), "far": False,
                     "noisy": bool(a.get("noisy") or b.get("noisy"))})
    _against_other_arms(rows)
    # Never clear of the band: a point a side measured in one replica (its
    # CI comes from one process's samples, which share that process's host
    # state), and a point whose other side's median is a level one of its
    # replicas had (compare.known_states: a move between host states both
    # saw).
    for row in rows:
        if row["move"]:
            a, b = _as_value(a_pts[row["key"]]), _as_value(b_pts[row["key"]])
            why = ("measured in one replica on a side: its CI is one process's"
                   if min(len(a["replicas"]), len(b["replicas"])) < 2 else known_states(a, b)
                   or core_speed_move(a_pts[row["key"]], b_pts[row["key"]], row["ratio"],
                                      row["band"], row["unit"]))
            if why:
                row["clear"], row["seen"] = False, why
    # one point far beyond the band: at the Bonferroni level over every
    # point compared, so that the family of them all cannot explain it
    family = sum(1 for r in rows if r["ratio_ci_low"] is not None)
    level = 1 - (1 - threshold("ci_level")) / max(family, 1)
    for row in rows:
        if not row["clear"]:
            continue
        margin = 1 + row["band"] * threshold("curve_far_band")
        _, lo, hi = ratio_ci(_as_value(a_pts[row["key"]]), _as_value(b_pts[row["key"]]), level)
        if "rel_se" in row and lo is not None and hi is not None:
            # against the other arms: the point's own (t) interval at this
            # level, widened by the reference's error
            rel = row["ratio"] / row["common"]
            half = math.hypot(math.log(hi / lo) / 2, z_of(level) * row["ref_se"])
            lo, hi = rel * math.exp(-half), rel * math.exp(half)
        row["far"] = bool(lo is not None and (lo > margin if row["move"] > 0 else hi < 1 / margin))
    return rows


def _against_other_arms(rows: List[Dict[str, Any]]) -> None:
    """Judge each point against the other arms measured at the same
    parameters (curve_reference_arms of them at least): a host that slows
    the vCPU, or lends it half a core, moves every strategy at a size alike
    (1.6x at 1-16 KiB for every copy strategy between two quick surveys
    minutes apart: docs/stability.md), while a changed libc or kernel moves its
    own arm.  The point's move and clearance are then those of its ratio
    over the median ratio of the others (``common``); a point with too few
    others keeps ``reference`` False, and its ranges are reported as moved,
    never as regressed (nothing tells the host's drift from a change)."""
    need = threshold("curve_reference_arms")
    z = z_of(threshold("ci_level"))

    def se(r: Mapping[str, Any]) -> Optional[float]:
        lo, hi = r["ratio_ci_low"], r["ratio_ci_high"]
        return math.log(hi / lo) / (2 * z) if lo is not None and hi and lo > 0 else None

    at: Dict[Tuple[Any, ...], List[Dict[str, Any]]] = {}
    for r in rows:
        if r["ratio"] is not None and r["ratio"] > 0:
            where = (r["experiment"], r["metric"],
                     tuple(sorted((k, str(v)) for k, v in r["params"].items())))
            at.setdefault(where, []).append(r)
    for group in at.values():
        # each row's log ratio and se once, not once per other row (neither
        # changes below)
        logs = [math.log(o["ratio"]) for o in group]
        ses = [se(o) for o in group]
        for i, r in enumerate(group):
            others = sorted(logs[:i] + logs[i + 1:])
            r["reference"] = len(others) >= need
            if not r["reference"]:
                continue
            mid = len(others) // 2
            common = math.exp(others[mid] if len(others) % 2 else
                              (others[mid - 1] + others[mid]) / 2)
            r["common"] = common
            rel = r["ratio"] / common
            # the reference is a median of noisy ratios too: its standard
            # error (~1.25 x theirs / sqrt(n), a median's) joins the point's
            own = ses[i]
            theirs = [x for x in ses[:i] + ses[i + 1:] if x is not None]
            if own is not None and theirs:
                ref = 1.25 * (sum(theirs) / len(theirs)) / math.sqrt(len(theirs))
                r["rel_se"], r["ref_se"] = math.hypot(own, ref), ref
            band = r["band"]
            r["move"] = 1 if rel > 1 + band else -1 if rel < 1 / (1 + band) else 0
            half = z * r["rel_se"] if "rel_se" in r else None
            r["clear"] = bool(half is not None and (
                (r["move"] > 0 and rel * math.exp(-half) > 1 + band)
                or (r["move"] < 0 and rel * math.exp(half) < 1 / (1 + band))))


def swept_parameter(points: Sequence[Mapping[str, Any]]) -> Optional[str]:
    """The parameter a curve is swept over: size_bytes where every point has
    a number there, else the numeric parameter with the most distinct values
    (ties by name); None when no parameter is numeric throughout."""
    names = set.intersection(*[set(p["params"]) for p in points]) if points else set()
    numeric = sorted(n for n in names if all(_number(p["params"][n]) for p in points))
    if PREFERRED_SWEEP in numeric:
        return PREFERRED_SWEEP
    # sorted() is stable: of equally many values, the first name
    return next(iter(sorted(numeric, key=lambda n: -len({p["params"][n] for p in points}))), None)


def _param_text(name: str, v: Any) -> str:
    """'offset=52', 'size_bytes=4 KiB'; a word alone ('copy', 'throughput')."""
    return str(v) if isinstance(v, str) else f"{name}={param_value_text(name, v)}"


def _span(name: Optional[str], lo: Any, hi: Any) -> str:
    if name is None:
        return ""
    fmt = format_size if name.endswith("_bytes") else (lambda v: f"{v:g}" if _number(v) else str(v))
    text = fmt(lo) if lo == hi else f"{fmt(lo)}–{fmt(hi)}"
    return text if name.endswith("_bytes") else f"{name} {text}"


def curves_of(rows: Sequence[Mapping[str, Any]]
              ) -> List[Tuple[Optional[str], List[Mapping[str, Any]]]]:
    """[(swept parameter, [rows in its order])] per curve: one experiment,
    metric and arm, every parameter but the swept one fixed."""
    by_arm: Dict[Tuple[Any, ...], List[Mapping[str, Any]]] = {}
    for r in rows:
        by_arm.setdefault((r["experiment"], r["metric"], r["arm"]), []).append(r)
    out = []
    for group in by_arm.values():
        sweep = swept_parameter(group)
        series: Dict[Tuple[Any, ...], List[Mapping[str, Any]]] = {}
        for r in group:
            fixed = tuple(sorted((k, str(v)) for k, v in r["params"].items() if k != sweep))
            series.setdefault(fixed, []).append(r)
        for members in series.values():
            if sweep is not None:
                members.sort(key=lambda r: r["params"][sweep])
            out.append((sweep, members))
    return out


def _range(sweep: Optional[str], members: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """One range of neighbouring points that moved the same way, with its
    ratio (geometric mean), CI and verdict (see the module's rule)."""
    first, move = members[0], members[0]["move"]
    better = first["better"]
    logs = [math.log(r["ratio"]) for r in members]
    mean = sum(logs) / len(logs)
    z = z_of(threshold("ci_level"))
    ses = [math.log(r["ratio_ci_high"] / r["ratio_ci_low"]) / (2 * z) for r in members
           if r["ratio_ci_low"] is not None]
    half = z * math.sqrt(sum(s * s for s in ses)) / len(ses) if ses else None
    ratio = math.exp(mean)
    lo, hi = (ratio * math.exp(-half), ratio * math.exp(half)) if half is not None else (None, None)
    fixed = {k: v for k, v in first["params"].items() if k != sweep}
    low = members[0]["params"].get(sweep) if sweep else None
    high = members[-1]["params"].get(sweep) if sweep else None
    where = ", ".join(_param_text(k, fixed[k]) for k in sorted(fixed))
    label = (f"{first['experiment']} {first['arm']}" + (f" ({where})" if where else "")
             + (f" {_span(sweep, low, high)}" if sweep else ""))
    band = max(r["band"] for r in members)
    n_clear = sum(1 for r in members if r["clear"])
    streak = longest = ref_streak = ref_longest = 0
    for r in members:       # neighbours clear of the band in a row
        streak = streak + 1 if r["clear"] else 0
        longest = max(longest, streak)
        # ... of those judged against the other arms (a refined size that
        # only some arms measured has no reference, and breaks no row of
        # those that have one)
        if r.get("reference"):
            ref_streak = ref_streak + 1 if r["clear"] else 0
            ref_longest = max(ref_longest, ref_streak)
    far = any(r["far"] for r in members)
    word = _MOVES[(better if better in (LOWER, HIGHER) else NEITHER, move)]
    rng = {"label": label, "experiment": first["experiment"], "metric": first["metric"],
           "arm": first["arm"], "unit": first["unit"], "better": better, "params": fixed,
           "param": sweep, "low": low, "high": high, "points": len(members), "clear": n_clear,
           "clear_in_a_row": longest, "far": far, "ratio": ratio, "ratio_ci_low": lo, "ratio_ci_high": hi, "move": word,
           "band": band, "band_source": next(r["band_source"] for r in members
                                             if r["band"] == band),
           "values": [[r["params"].get(sweep) if sweep else None, r["ratio"], r["ratio_ci_low"],
                       r["ratio_ci_high"]] for r in members]}
    # the range stands against the other arms where its points that have a
    # reference make it on their own
    referenced = ref_longest >= threshold("curve_min_points") or any(
        r["far"] and r.get("reference") for r in members)
    commons = [r["common"] for r in members if r.get("common")]
    if commons:
        rng["common"] = math.exp(sum(math.log(c) for c in commons) / len(commons))
    if (longest >= threshold("curve_min_points") or far) and not referenced:
        rng["verdict"] = CHANGED
        rng["reason"] = ("moved, with no other arm measured at these sizes to tell the "
                         "host's drift from a change (curve_reference_arms)")
    elif (longest >= threshold("curve_min_points") or far) and not (
            lo is not None and (lo > 1 + band if move > 0 else hi < 1 / (1 + band))):
        # beyond the band against the other arms, but not on its own: arms
        # do not always move alike (a host lending half a core slows
        # vector loops and rep movs differently), so an arm that merely
        # kept its speed while the others moved is not a regression
        rng["verdict"] = CHANGED
        rng["reason"] = ("moved against the other arms at these sizes, not beyond the band "
                         "on its own")
    elif longest >= threshold("curve_min_points") or far:
        if not better:
            rng["verdict"] = CHANGED
        elif (move > 0) == (better == LOWER):
            margin = 1 + band * threshold("noisy_margin")
            clears = lo is not None and (lo > margin if move > 0 else hi < 1 / margin)
            rng["verdict"] = NOISY if any(r["noisy"] for r in members) and not clears else REGRESSED
        else:
            rng["verdict"] = IMPROVED
    else:
        rng["verdict"] = INCONCLUSIVE
        rng["reason"] = (f"{n_clear} of {len(members)} point(s) with a CI beyond the band, at "
                         f"most {longest} in a row (curve_min_points: "
                         f"{threshold('curve_min_points'):g}), none beyond "
                         f"{threshold('curve_far_band'):g}x the band")
    ci = f" [{lo:.2f}, {hi:.2f}]" if lo is not None else ""
    rng["change"] = f"{ratio:.2f}x{ci} {word}" + (
        f" (the other arms there: {rng['common']:.2f}x)" if commons else "")
    rng["text"] = f"{label}: {rng['change']}"
    return rng


def merge_ranges(rows: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """Every range of neighbouring points of one curve that moved beyond the
    band the same way, each with its verdict."""
    out = []
    for sweep, members in curves_of(rows):
        run: List[Mapping[str, Any]] = []
        for r in members + [None]:
            if r is not None and r["move"] and (not run or r["move"] == run[-1]["move"]):
                run.append(r)
                continue
            if run:
                out.append(_range(sweep, run))
            run = [r] if r is not None and r["move"] else []
    return out


RULE = ("a range: {k:g} neighbours' CIs in a row beyond the band, or one beyond {f:g}x it "
        "at a Bonferroni level, each point judged against the median of the other arms at "
        "its parameters (a curve with fewer than {r:g} others there is reported as moved); "
        "regressed or improved only when its own CI is beyond the band the same way too")


def compare_curves(a_docs: Sequence[Mapping[str, Any]], b_docs: Sequence[Mapping[str, Any]],
                   limit: float, history: Optional[Mapping[str, List[float]]] = None,
                   n_history: int = 0, guest: bool = False,
                   noisy: Collection[Optional[str]] = ()) -> Dict[str, Any]:
    """What the comparison document says of the curves: ``curve_points``
    (points compared), ``curves`` (every range, changes first), the rule,
    and the labels of the ranges that regressed or read noisy.  ``noisy``:
    the run ids whose own samples say they were noisy."""
    rows = compare_points(side_points(a_docs, noisy), side_points(b_docs, noisy), limit, history,
                          n_history, guest)
    ranges = merge_ranges(rows)
    rank = {REGRESSED: 0, NOISY: 1, CHANGED: 2, IMPROVED: 3, INCONCLUSIVE: 4}
    ranges.sort(key=lambda r: rank.get(r["verdict"], 5))
    return {"curve_points": len(rows), "curves": ranges,
            "curve_rule": RULE.format(k=threshold("curve_min_points"),
                                      f=threshold("curve_far_band"),
                                      r=threshold("curve_reference_arms")),
            "regressed_curves": [r["label"] for r in ranges if r["verdict"] == REGRESSED],
            "noisy_curves": [r["label"] for r in ranges if r["verdict"] == NOISY]}


def compare_all(a_answers: Sequence[Mapping[str, Any]], b_answers: Sequence[Mapping[str, Any]],
                limit: float = 0.05, a_label: str = "A",
                b_label: str = "B", history: Optional[Mapping[str, List[float]]] = None,
                n_history: int = 0, guest: bool = False,
                a_runs: Optional[Sequence[Mapping[str, Any]]] = None,
                b_runs: Optional[Sequence[Mapping[str, Any]]] = None,
                point_history: Optional[Mapping[str, List[float]]] = None,
                noisy: Collection[Optional[str]] = ()) -> Dict[str, Any]:
    """The whole comparison document of `memfx compare`: compare.compare's
    rows, each answer's changed details (``details_changed`` on the row and
    ``detail_changes`` in the document), and with the sides' run documents
    (``a_runs``, ``b_runs``) their curves (compare_curves; ``point_history``:
    {curve key: [median of each earlier survey]})."""
    a_answers, b_answers = list(a_answers), list(b_answers)
    doc = compare(a_answers, b_answers, limit, a_label, b_label, history=history,
                  n_history=n_history, guest=guest)
    b_by = {x["question"]: x for x in b_answers}
    a_by = {x["question"]: x for x in a_answers}
    for row in doc["rows"]:
        qid = row["question"]
        if qid in a_by and qid in b_by:
            moved = detail_changes(a_by[qid], b_by[qid])
            if moved:
                row["details_changed"] = moved
                doc["detail_changes"] += [dict(c, question=qid) for c in moved]
    if a_runs is not None and b_runs is not None:
        doc.update(compare_curves(a_runs, b_runs, limit, point_history,
                                  n_history if point_history else 0, guest, noisy))
    return doc


# ---- detail lists ----------------------------------------------------------------

# "224 B–2 KiB" in a detail's label: its sizes, not its name
_SIZE_SPAN = re.compile(r"\s*\d[\d.,]*\s*(?:[KMGT]iB|B)\s*[–-]\s*\d[\d.,]*\s*(?:[KMGT]iB|B)")


def _sizes(lo: Any, hi: Any) -> str:
    return format_size(lo) if lo == hi else f"{format_size(lo)}–{format_size(hi)}"


def _families(answer: Mapping[str, Any]) -> Dict[Tuple[Any, ...], Dict[str, Any]]:
    """{family key: {"label", "kind", "items"}} of the discrete details of
    an answer (see the module's docstring); other details are left out."""
    out: Dict[Tuple[Any, ...], Dict[str, Any]] = {}
    for d in answer.get("details") or []:
        if not isinstance(d, dict):
            continue
        kind, label = d.get("kind"), str(d.get("label") or "")
        if kind == "range" and _number(d.get("min_size")) and _number(d.get("max_size")):
            name = label.replace(f"{format_size(d['min_size'])}–{format_size(d['max_size'])}", "")
            name = re.sub(r"\s+", " ", _SIZE_SPAN.sub("", name)).strip()
            fam = out.setdefault(("range", d.get("op"), d.get("mode"), name),
                                 {"label": name, "kind": "range", "items": []})
            fam["items"].append((d["min_size"], d["max_size"]))
        elif kind == "ranges" and d.get("ranges"):
            out[("ranges", label)] = {"label": label, "kind": "ranges", "items": [d]}
        elif kind in ("crossover", "envelope"):
            out[(kind, label)] = {"label": label, "kind": kind, "items": [d]}
        elif d.get("verdict") in (DETECTED, NOT_DETECTED) and label:
            out[("verdict", label)] = {"label": label, "kind": "verdict", "items": [d]}
    return out


def _crossings(d: Optional[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    return [c for c in (d or {}).get("crossings") or [] if isinstance(c, dict)
            and _number(c.get("low")) and _number(c.get("high"))]


def _crossings_text(d: Optional[Mapping[str, Any]]) -> str:
    cs = _crossings(d)
    if not cs:
        return "no crossing"
    return "; ".join(f"{c.get('faster_above')} from {_sizes(c['low'], c['high'])}" for c in cs)


def _ranges_text(d: Mapping[str, Any]) -> str:
    return "; ".join(f"{r.get('strategy')} {_sizes(r.get('min_size'), r.get('max_size'))}"
                     for r in d.get("ranges") or [] if isinstance(r, dict))


def _family_change(kind: str, fa: Optional[Mapping[str, Any]], fb: Optional[Mapping[str, Any]]
                   ) -> Optional[Tuple[str, ...]]:
    """(A's text, B's text) of one family of details that differ, else None."""
    ia, ib = (fa or {}).get("items") or [], (fb or {}).get("items") or []
    if kind == "range":       # the spans that differ: A's not in B -> B's not in A
        if sorted(ia) == sorted(ib):
            return None
        return tuple("; ".join(_sizes(lo, hi) for lo, hi in sorted(set(x) - set(y))) or "none"
                     for x, y in ((ia, ib), (ib, ia)))
    if kind == "ranges":
        if not ia or not ib:
            return (_ranges_text(ia[0]) if ia else "none", _ranges_text(ib[0]) if ib else "none")
        rev = ranges_reversal({"details": ia}, {"details": ib})
        if rev is None or (rev is False and _ranges_text(ia[0]) == _ranges_text(ib[0])):
            return None             # the same, up to ties (compare.ranges_reversal)
        ta, tb = (_ranges_text(ia[0]).split("; "), _ranges_text(ib[0]).split("; "))
        return ("; ".join(x for x in ta if x not in tb) or "none",
                "; ".join(x for x in tb if x not in ta) or "none")
    if kind in ("crossover", "envelope"):
        da, db = (ia or [None])[0], (ib or [None])[0]
        ca, cb = _crossings(da), _crossings(db)
        same = len(ca) == len(cb) and all(
            x.get("faster_above") == y.get("faster_above") and x["low"] <= y["high"]
            and y["low"] <= x["high"] for x, y in zip(ca, cb))
        return None if same else (_crossings_text(da), _crossings_text(db))
    va, vb = ((ia or [{}])[0].get("verdict"), (ib or [{}])[0].get("verdict"))
    if {va, vb} == {DETECTED, NOT_DETECTED}:
        return str(va).replace("_", " "), str(vb).replace("_", " ")
    return None


def detail_changes(a: Mapping[str, Any], b: Mapping[str, Any]) -> List[Dict[str, str]]:
    """The discrete details of two answers to one question that differ:
    [{"detail", "a", "b"}] ("libc slower (throughput)": "224 B–2 KiB" ->
    "2 KiB–24 KiB").  A detail present on one side only is compared with
    "none" (a range of sizes, a crossing); a verdict detail only where both
    sides have it.  Nothing for an answer a side did not measure."""
    if any(x.get("verdict") == "not_measured" or (x.get("value") is None and not x.get("details"))
           for x in (a, b)):
        return []
    fa, fb = _families(a), _families(b)
    out = []
    for key in list(fa) + [k for k in fb if k not in fa]:
        kind = key[0]
        if kind == "verdict" and not (key in fa and key in fb):
            continue
        change = _family_change(kind, fa.get(key), fb.get(key))
        if change:
            family = fa[key] if key in fa else fb[key]
            out.append({"detail": family["label"], "a": change[0],
                        "b": change[1]})
    return out
