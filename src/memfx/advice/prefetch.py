"""Prefetch advice (issue 10, seed 001): what a prefetch run's answers
advise, each claim re-measured before it is given (advise.py re-exports
every name)."""
from __future__ import annotations

import json
import subprocess

from ..model import findings as fnd
from ..model import stats
from ..model.errors import MemfxError
from ..model.units import format_ratio, format_size
from .common import _print, newest_complete

# ---- prefetch advice (issue 10, seed 001) -----------------------------------------------
#
# Two pieces of advice, each derived from the newest complete prefetch run's
# answers (never recomputed here) and then checked by a fresh, separate
# measurement: another measuring worker, another seed (other arm orders,
# another list), the chosen arm against its alternative, nothing stored as a
# run.  The advice says whether that check confirmed it, with the check's
# ratio and CI.
#   guard     from prefetch.seed_loop: is `if (p) prefetch(p)` worth a branch
#             when p may be NULL?  checked: unguarded vs guarded list walk on
#             the answer's list.
#   distance  from prefetch.stream_gain / stream_distance: prefetch d elements
#             ahead at the stride found, or leave it to the hardware
#             prefetchers.  checked: none vs prefetch at that d and stride.
# A check is confirmed when its verdict (effect_verdict's named thresholds)
# says what the advice claims; contradicted when it says the opposite
# beyond the thresholds; inconclusive when its CI reaches across them.

# Samples per arm of a check: min_samples (5) plus room for samples a busy
# machine rejects; 0.25 ms each, as the quick run.
PREFETCH_CHECK_SAMPLES = 15
PREFETCH_CHECK_SAMPLE_MS = 0.25
# The check's seed is the run's plus this: other arm orders and another list.
PREFETCH_CHECK_SEED_OFFSET = 1000
CONFIRMED, CONTRADICTED, CHECK_INCONCLUSIVE, UNCHECKED = (
    "confirmed", "contradicted", "inconclusive", "unchecked")


def _answer(doc, qid):
    return next((a for a in doc.get("answers") or [] if a.get("question") == qid), None)


def prefetch_proposals(prefetch_doc):
    """The unchecked prefetch advice from a prefetch result document: a list
    of items {id, topic, claim, advice, rests_on, check_params}.  Pure.

    claim is what the check must find to confirm it, on the ratio arms[0] /
    arms[1] (unguarded / guarded, none / prefetch): "faster" (the guard or
    the prefetch pays: the ratio is a detected effect above 1) or "no_gain"
    (it does not: no detected effect above 1)."""
    items = []
    run_id = prefetch_doc.get("run_id")
    params = prefetch_doc.get("params") or {}

    def rests_on(a):
        return {"run_id": run_id, "answer": a.get("question"), "verdict": a.get("verdict"),
                "value": a.get("value"), "ci_low": a.get("ci_low"), "ci_high": a.get("ci_high"),
                "because": a.get("because")}

    # guard
    a = _answer(prefetch_doc, "prefetch.seed_loop")
    item = {"id": "prefetch.guard_null", "topic": "prefetch of a pointer that may be NULL"}
    if not a or a.get("verdict") == "not_measured" or not a.get("details"):
        item.update(claim=None, advice=None, reason="the prefetch run did not measure the "
                    "seed's loop (list part)", rests_on=rests_on(a) if a else None)
    else:
        level = a["details"][0]
        guard = a["verdict"] == fnd.DETECTED and (a.get("value") or 0) > 1
        item.update(
            claim="faster" if guard else "no_gain",
            advice=("guard it: `if (p) prefetch(p)`; a NULL prefetch costs more than the branch"
                    if guard else "no need to guard it: prefetching NULL costs no more than a "
                    "branch (keep the code branch-free)"),
            rests_on=dict(rests_on(a), level=level.get("level"), nodes=level.get("nodes")),
            arms=("unguarded", "guarded"),
            check_params={"parts": ["list"], "levels": [level.get("level")],
                          "arms": ["unguarded", "guarded"]})
    items.append(item)
    # distance
    g, d = _answer(prefetch_doc, "prefetch.stream_gain"), _answer(prefetch_doc,
                                                                   "prefetch.stream_distance")
    item = {"id": "prefetch.stream_distance", "topic": "software prefetch distance, streaming loop"}
    strides = [x.get("stride_bytes") for x in (g or {}).get("details") or []
               if isinstance(x.get("stride_bytes"), int)]
    if not g or not d or g.get("verdict") == "not_measured" or d.get("value") is None \
            or not strides:
        item.update(claim=None, advice=None, reason="the prefetch run did not measure the "
                    "streaming loop (stream part)", rests_on=rests_on(g) if g else None)
    else:
        stride, dist = min(strides), int(d["value"])
        gain = g["verdict"] == fnd.DETECTED and (g.get("value") or 0) > 1
        item.update(
            claim="faster" if gain else "no_gain",
            advice=(f"prefetch {dist} elements ({format_size(dist * stride)}) ahead at a {stride} B stride"
                    if gain else f"no software prefetch at a {stride} B stride: the hardware "
                    f"prefetchers do as well (best distance tried: {dist})"),
            rests_on=dict(rests_on(g), stride_bytes=stride, distance=dist),
            arms=("none", "prefetch"),
            check_params={"parts": ["stream"], "strides": [stride], "stream_distances": [dist],
                          "arms": ["none", "prefetch"],
                          **({"region": params["region"]} if params.get("region") else {})})
    items.append(item)
    return items


def check_decision(claim, verdict, ratio):
    """(decision, reason) of a check: ratio = unguarded / guarded or none /
    prefetch (above 1: the guard or the prefetch pays), verdict from
    effect_verdict; claim "faster" (the guard or the prefetch pays) or
    "no_gain" (it does not)."""
    if ratio is None or verdict is None:
        return CHECK_INCONCLUSIVE, "the check measured too little to compare"
    faster = verdict == fnd.DETECTED and ratio > 1
    if claim == "faster":
        if faster:
            return CONFIRMED, "the check measured the advised code faster"
        if verdict == fnd.INCONCLUSIVE:
            return CHECK_INCONCLUSIVE, "the check's CI reaches across the effect threshold"
        return CONTRADICTED, "the check measured no gain from it"
    if faster:
        return CONTRADICTED, "the check measured a gain the advice says is not there"
    if verdict == fnd.INCONCLUSIVE:
        return CHECK_INCONCLUSIVE, "the check's CI reaches across the effect threshold"
    return CONFIRMED, ("the check measured no gain" if verdict == fnd.NOT_DETECTED
                       else "the check measured the alternative slower")


def measure_unstored(name, params, machine, timeout=120):
    """Samples of one experiment measured by a fresh worker process, returned
    and not stored: the advice checks' separate measurement."""
    from ..running.runner import worker_command
    proc = subprocess.run(worker_command(), input=json.dumps(
        {"experiment": name, "params": params, "machine": machine}), capture_output=True,
        text=True, timeout=timeout)
    samples, error = [], None
    for line in proc.stdout.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("type") == "samples":
            samples.extend(msg["samples"])
        elif msg.get("type") == "error":
            error = msg.get("message")
    if error or proc.returncode != 0:
        raise MemfxError(f"the {name} check failed: "
                         f"{error or f'worker exited with status {proc.returncode}'}")
    return samples


def prefetch_check(items, run_params, machine, samples=PREFETCH_CHECK_SAMPLES, measure=None):
    """Re-measure every item's arms in one fresh worker (a different seed),
    and set each item's check and decision.  `measure(name, params, machine)`
    -> samples (measure_unstored unless given, for tests)."""
    from ..analysis.results import build_points
    from ..experiments import get_experiment
    todo = [i for i in items if i.get("check_params")]
    if not todo:
        return items
    exp = get_experiment("prefetch")
    over = {"samples": samples, "min_sample_ms": PREFETCH_CHECK_SAMPLE_MS,
            "seed": int(run_params.get("seed") or 1) + PREFETCH_CHECK_SEED_OFFSET,
            "parts": [], "arms": []}
    for i in todo:
        for k, v in i["check_params"].items():
            if isinstance(v, list) and k in over and isinstance(over[k], list):
                over[k] = list(dict.fromkeys(over[k] + v))
            else:
                over[k] = v
    params = exp.resolve("quick", over)
    points = build_points((measure or measure_unstored)("prefetch", params, machine))
    for i in todo:
        cp = i["check_params"]
        part = cp["parts"][0]

        def find(arm, part=part, cp=cp):
            for p in points:
                pp = p["params"]
                if p["arm"] != arm or pp.get("part") != part:
                    continue
                if part == "list" and pp.get("level") not in cp["levels"]:
                    continue
                if part == "stream" and (pp.get("stride_bytes") not in cp["strides"]
                                         or pp.get("distance") not in cp["stream_distances"]):
                    continue
                return p
            return None
        # the ratio is always arms[0] / arms[1] (unguarded / guarded, none /
        # prefetch): above 1 means the guard or the prefetch pays
        a, b = (find(arm) for arm in i["arms"])
        if not a or not b or not a.get("values") or not b.get("values"):
            i.update(checked=False, decision=UNCHECKED,
                     check_reason="the check measured no samples of one arm")
            continue
        r = stats.ratio_of_medians(a["values"], b["values"],
                                   confidence=fnd.threshold("ci_level"))
        verdict = fnd.effect_verdict(r["ratio"], r["ci_low"], r["ci_high"], r["n_a"], r["n_b"])
        decision, reason = check_decision(i["claim"], verdict, r["ratio"])
        i.update(checked=True, decision=decision, check_reason=reason, check={
            "ratio": r["ratio"], "ci_low": r["ci_low"], "ci_high": r["ci_high"],
            "verdict": verdict, "n": [r["n_a"], r["n_b"]],
            "median_ns": {a["arm"]: a["median"], b["arm"]: b["median"]},
            "seed": params["seed"], "samples_per_arm": samples,
            "ratio_is": f"{i['arms'][0]} / {i['arms'][1]}"})
    return items


def prefetch_advice(store, machine=None, check=True, progress=None, measure=None):
    """The prefetch part of the advice document: items derived from the
    newest complete prefetch run's answers, each checked by a fresh
    measurement unless check=False.  Never raises MemfxError: a failed check
    leaves its items unchecked, with the reason."""
    from ..analysis.results import document
    run = newest_complete(store, "prefetch")
    if run is None:
        return {"run_id": None, "items": [], "reason": "no complete prefetch run in the DB "
                "(run `memfx run prefetch --quick`)"}
    doc = document(store.run(run["id"]), store.samples(run["id"]))
    items = prefetch_proposals(doc)
    for i in items:
        if not i.get("check_params"):
            i.update(checked=False, decision=UNCHECKED, check_reason=i.get("reason"))
    if check:
        if progress:
            progress("checking the prefetch advice (a fresh measurement of the advised arms)")
        try:
            prefetch_check(items, run.get("params") or {}, doc.get("machine") or machine or {},
                           measure=measure)
        except (MemfxError, subprocess.SubprocessError, OSError) as e:
            for i in items:
                if i.get("check_params") and not i.get("checked"):
                    i.update(checked=False, decision=UNCHECKED, check_reason=f"check failed: {e}")
    else:
        for i in items:
            if i.get("check_params"):
                i.update(checked=False, decision=UNCHECKED, check_reason="--no-check")
    for i in items:
        i.pop("check_params", None)
    return {"run_id": run["id"], "started": run.get("started"), "preset": run.get("preset"),
            "items": items}


def render_prefetch(doc, console):
    """The prefetch advice (rich), after the copy advice."""
    from rich.markup import escape
    from rich.table import Table
    part = doc.get("prefetch")
    if not part:
        return
    _print(console)
    if not part.get("items"):
        _print(console, f"[dim]prefetch advice: {escape(part.get('reason') or 'none')}[/dim]")
        return
    t = Table(title=f"Prefetch advice (from prefetch run {part.get('run_id')}, checked by a "
              f"fresh measurement)", title_justify="left")
    for c in ("for", "advice", "rests on", "check (ratio [95% CI])", "decision"):
        t.add_column(c)
    for i in part["items"]:
        r = i.get("rests_on") or {}
        rests = (f"{r.get('answer')}: {_ratio_text(r)} {r.get('verdict')}" if r.get("answer")
                 else "-")
        chk = i.get("check") or {}
        t.add_row(i["topic"], escape(i.get("advice") or i.get("reason") or "-"), escape(rests),
                  escape(f"{chk.get('ratio_is', '')} {_ratio_text(chk)}".strip() or "-"),
                  escape(f"{i.get('decision')}: {i.get('check_reason') or ''}"))
    _print(console, t)


def _ratio_text(d):
    return format_ratio(d.get("value", d.get("ratio")), d.get("ci_low"), d.get("ci_high"))
