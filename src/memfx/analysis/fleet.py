"""Fleet results: pushing local runs into a shared store (`memfx push`), and
the documents of the fleet views that read the whole fleet (`memfx report
--fleet`, `memfx compare --group-by cpu-model`); the machine list
(`memfx machines`) is built in documents.py and re-exported here.

A fleet is read as thousands of machines, not as thousands of documents:
each machine's newest run of each experiment is chosen by the store
(newest_runs_per_machine), and only those runs' answers are read
(stored_answers: the answers kept apart from each run's points), in
batches, folded into per-question summaries as they come; a run whose
stored answers are missing or stale is analysed as any reader would
(run_document).  A store without those reads (another implementation of
the protocol) is read run by run."""
from __future__ import annotations

import json
import statistics
import time
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Optional,
    Protocol,
    Sequence,
    Set,
    Tuple,
)

from ..model.errors import MemfxError, StoreError, StoreUnavailable
from ..model.status import RUNNING
from .documents import (  # noqa: F401 (re-exported)
    FLEET_SCHEMA_VERSION,
    GROUPS,
    Doc,
    RunStore,
    cpu_model,
    group_answers,
    latest_per_experiment,
    machines_document,
    run_document,
)

# ---- push ------------------------------------------------------------------

class FleetStore(RunStore, Protocol):
    """A store runs are pushed from or to (memfx.store's: the analysis imports none)."""

    def export_run(self, run_id_or_prefix: str, /) -> Doc: ...

    def push_run(self, doc: Doc, /) -> str: ...

    def settle_survey(self, survey: Doc, /) -> None: ...


def push_selection(source: RunStore, keys: Sequence[str], everything: bool = False) -> List[str]:
    """Run ids to push from `source`, oldest first: every run (everything or
    no keys), or the runs named (run id / prefix / latest) and those of the
    surveys named (survey id / prefix)."""
    if everything or not keys:
        return [r["id"] for r in reversed(source.runs())]
    ids: List[str] = []
    for key in keys:
        try:
            ids.append(source.run(key)["id"])
        except StoreError as run_error:
            try:
                survey = source.survey(key)
            except StoreError:
                raise run_error from None
            ids += [r["id"] for r in reversed(survey["runs"])]
    return list(dict.fromkeys(ids))


def push(source: FleetStore, target: FleetStore, run_ids: Sequence[str],
         on_run: Optional[Callable[[str, Doc, str, Optional[str]], object]] = None
         ) -> Dict[str, Any]:
    """Copy runs (with their survey, machine, samples, artifacts and labels)
    from `source` to `target` under their own ids.  A run already complete
    in the target is not sent again; a partial copy there (still marked
    running, or fewer samples) is replaced.  Returns a summary dict."""
    t0 = time.monotonic()
    # only the runs being pushed are looked up in the target: a fleet store
    # holds every host's runs
    states = getattr(target, "run_states", None)
    there = states(list(run_ids)) if states else {r["id"]: r for r in target.runs()}
    here = {r["id"]: r for r in source.runs()}
    counts = {"added": 0, "replaced": 0, "unchanged": 0, "refused": 0}
    refused: Dict[str, str] = {}
    surveys: Set[str] = set()
    n_samples = 0
    for run_id in run_ids:
        mine, theirs = here[run_id], there.get(run_id)
        if theirs is not None and theirs["n_samples"] >= mine["n_samples"] and not (
                theirs["status"] == RUNNING and mine["status"] != RUNNING):
            outcome = "unchanged"
            doc = None
        else:
            try:
                doc = source.export_run(run_id)
                outcome = target.push_run(doc)
            except StoreUnavailable:
                raise
            except StoreError as e:      # this run is refused whole; the others still go
                outcome, refused[run_id] = "refused", str(e)
        if outcome in ("added", "replaced") and doc is not None:
            n_samples += len(doc["samples"])
        counts[outcome] += 1
        if mine.get("survey_id"):
            surveys.add(mine["survey_id"])
        if on_run:
            on_run(run_id, mine, outcome, refused.get(run_id))
    for survey_id in sorted(surveys):     # a survey pushed while running takes its final state
        target.settle_survey(source.survey(survey_id))
    return {"runs": len(run_ids), "surveys": len(surveys), "samples": n_samples,
            "counts": counts, "refused": refused, "seconds": time.monotonic() - t0}


# ---- the fleet's answers, read as a stream ------------------------------------

# Answers read per batch of machines: bounds the memory a fleet needs.
MACHINES_PER_BATCH = 200
# Hosts whose points summaries are read in one query when curves are
# pooled: each host's are a few hundred points, so fewer than the answers.
POINTS_MACHINES_PER_BATCH = 50
# A host is an outlier of its CPU model when its value lies beyond Tukey's
# far-out fences (3 interquartile ranges outside the quartiles) of the
# model's hosts; with fewer hosts no spread is known well enough to judge.
OUTLIER_IQR = 3.0
OUTLIER_MIN_HOSTS = 4
OUTLIERS_NAMED = 5          # per model and question, the most extreme first
_QUESTION_KEYS = ("question", "asks", "unit", "better", "seed")
_ANSWER_KEYS = ("verdict", "value", "ci_low", "ci_high", "because")


def _chosen_runs(store: RunStore, machines: Optional[Set[str]] = None) -> List[Doc]:
    """Each machine's newest complete run of each experiment (else its
    newest run of it), by machine then start; only those of ``machines``
    (machine ids) when given, which a fleet store reads by its index
    rather than choosing every machine's runs and dropping most."""
    if machines is not None:
        of = getattr(store, "newest_runs_of", None)
        if of is not None:
            return list(of(sorted(machines)))
        return [r for r in _chosen_runs(store) if r["machine_id"] in machines]
    newest = getattr(store, "newest_runs_per_machine", None)
    if newest is not None:
        return list(newest())
    by_machine: Dict[str, List[Doc]] = {}
    for r in store.runs():                          # newest first
        if r.get("machine_id"):
            by_machine.setdefault(r["machine_id"], []).append(r)
    out: List[Doc] = []
    for runs in by_machine.values():
        out += sorted(latest_per_experiment(runs), key=lambda r: (r["started"], r["id"]))
    return out


def _current_part(run: Doc, part: Any) -> bool:
    """Whether stored answers still describe ``run`` (documents._current's rule)."""
    return (isinstance(part, dict) and part.get("run_id") == run["id"]
            and all(part.get(k) == run.get(k) for k in ("status", "finished"))
            and (part.get("labels") or {}) == (run.get("labels") or {}))


def _answers_of_runs(store: RunStore, runs: List[Doc]) -> Dict[str, List[Doc]]:
    """{run id: its answers}: the stored ones where current, else from the
    run's document (stored, else analysed and stored)."""
    from .answer_cache import analysis_key
    from .documents import _REANALYSE
    reads = getattr(store, "stored_answers", None)
    stored: Dict[str, Doc] = {}
    if reads is not None and not _REANALYSE["on"]:
        stored = reads([r["id"] for r in runs if r.get("status") != RUNNING
                        and r["experiment"] != "tune"], analysis_key())
    out: Dict[str, List[Doc]] = {}
    for r in runs:
        part = stored.get(r["id"])
        if part is not None and _current_part(r, part):
            out[r["id"]] = list(part["answers"])
        else:       # missing, stale, running, a tune record: as every reader does
            out[r["id"]] = list(run_document(store, r["id"])["answers"])
    return out


def machine_answers(store: RunStore, machines: Optional[Set[str]] = None,
                    chosen: Optional[List[Doc]] = None
                    ) -> Iterator[Tuple[str, List[str], Dict[str, Doc]]]:
    """(machine id, sources, {question: answer}) of every machine (or of
    those in ``machines``), read a batch of machines at a time: the answers
    of its newest complete run of each experiment, so a later survey of a
    few experiments (--only) hides none of the others; ``sources`` are the
    surveys (or, outside surveys, the runs) they come from.  ``chosen``:
    those runs, when the caller has them already (_chosen_runs)."""
    runs = [r for r in (_chosen_runs(store) if chosen is None else chosen)
            if machines is None or r["machine_id"] in machines]
    order: List[str] = list(dict.fromkeys(r["machine_id"] for r in runs))
    by_machine: Dict[str, List[Doc]] = {}
    for r in runs:
        by_machine.setdefault(r["machine_id"], []).append(r)
    for first in range(0, len(order), MACHINES_PER_BATCH):
        batch = order[first:first + MACHINES_PER_BATCH]
        answers = _answers_of_runs(store, [r for mid in batch for r in by_machine[mid]])
        for mid in batch:
            mine = by_machine[mid]
            by_question: Dict[str, Doc] = {}
            for r in mine:
                for a in answers[r["id"]]:
                    if isinstance(a, dict) and a.get("question"):
                        by_question[str(a["question"])] = dict(a, run_id=r["id"],
                                                               experiment=r["experiment"])
            sources = list(dict.fromkeys(r.get("survey_id") or r["id"] for r in mine))
            yield mid, sources, by_question


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _quartiles(values: List[float]) -> Tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def summary_cell(found: List[Tuple[Doc, str, str]]) -> Doc:
    """The cell of one CPU model for one question, from its hosts'
    (answer, machine id, host): the median of their values, the spread
    min..max and the quartiles across them, the verdicts counted, and the
    outlier hosts named (OUTLIER_IQR)."""
    if not found:
        return {"verdict": "not_measured", "value": None, "ci_low": None, "ci_high": None,
                "n_hosts": 0}
    valued = [(a["value"], mid, host) for a, mid, host in found if _number(a.get("value"))]
    values = sorted(v for v, _, _ in valued)
    verdicts: Dict[Optional[str], int] = {}
    for a, _, _ in found:
        verdicts[a.get("verdict")] = verdicts.get(a.get("verdict"), 0) + 1
    cell: Doc = {"value": statistics.median(values) if values else None,
                 "spread_low": values[0] if values else None,
                 "spread_high": values[-1] if values else None,
                 "verdict": next(iter(verdicts)) if len(verdicts) == 1 else "mixed",
                 "verdicts": verdicts, "n_hosts": len(found)}
    if values:
        q1, q3 = _quartiles(values)
        cell.update(q1=q1, q3=q3)
        if len(values) >= OUTLIER_MIN_HOSTS:
            lo, hi = q1 - OUTLIER_IQR * (q3 - q1), q3 + OUTLIER_IQR * (q3 - q1)
            far = [(v, mid, host) for v, mid, host in valued if v < lo or v > hi]
            median = cell["value"]
            far.sort(key=lambda t: -abs(t[0] - median))
            cell["n_outliers"] = len(far)
            cell["outliers"] = [{"machine_id": mid, "host": host, "value": v}
                                for v, mid, host in far[:OUTLIERS_NAMED]]
    return cell


def _machine_cell(a: Optional[Doc]) -> Doc:
    if a is None:
        return {"verdict": "not_measured", "value": None, "ci_low": None, "ci_high": None,
                "n_hosts": 0}
    return {k: a.get(k) for k in _ANSWER_KEYS} | {"n_hosts": 1}


def fleet_document(store: RunStore, group_by: str = "machine") -> Doc:
    """One row per question; a column per machine (group_by "machine": its
    newest complete run of each experiment) or per CPU model ("cpu-model":
    the median of its hosts' values, the spread min..max and the quartiles
    across hosts, the verdicts counted, the outlier hosts named).  With
    group_by "machine", ``models`` holds the same per-model summary, which
    the report shows when the machines are more than a screen's worth."""
    if group_by not in GROUPS:
        raise MemfxError(f"--group-by: expected one of {', '.join(GROUPS)}, got {group_by!r}")
    machines = machines_document(store)["machines"]
    if not machines:
        raise StoreError(f"no machines in {store.path} (run `memfx survey` or `memfx push` first)")
    info = {m["machine_id"]: m for m in machines}
    questions: Dict[str, Doc] = {}
    sources: Dict[str, List[str]] = {}
    per_machine: Dict[str, Dict[str, Doc]] = {}        # group_by machine: the cells
    per_model: Dict[str, Dict[str, List[Tuple[Doc, str, str]]]] = {}
    for mid, srcs, by_question in machine_answers(store):
        if mid not in info:
            continue
        sources[mid] = srcs
        model = info[mid]["cpu_model"]
        host = ", ".join(info[mid]["hosts"]) or mid
        for qid, a in by_question.items():
            if qid not in questions:
                questions[qid] = {k: a.get(k) for k in _QUESTION_KEYS}
            # only what the model's summary reads is kept of each host's
            # answer: a fleet holds hosts x questions of them
            slim = {"value": a.get("value"), "verdict": a.get("verdict")}
            per_model.setdefault(model, {}).setdefault(qid, []).append((slim, mid, host))
        if group_by == "machine":
            per_machine[mid] = {qid: _machine_cell(a) for qid, a in by_question.items()}
    models: Dict[str, List[Doc]] = {}
    for m in machines:
        models.setdefault(m["cpu_model"], []).append(m)
    model_columns: List[Doc] = [{"key": model, "label": model, "machines": [m["machine_id"] for m in ms],
                      "hosts": sorted({h for m in ms for h in m["hosts"]}),
                      "sources": list(dict.fromkeys(x for m in ms for x in sources.get(m["machine_id"], [])))}
                     for model, ms in sorted(models.items())]
    rows = []
    for qid in sorted(questions):
        summary = {str(c["key"]): summary_cell(per_model.get(str(c["key"]), {}).get(qid, []))
                   for c in model_columns}
        if group_by == "machine":
            empty = _machine_cell(None)
            cells = {m["machine_id"]: per_machine.get(m["machine_id"], {}).get(qid, empty)
                     for m in machines}
            rows.append(dict(questions[qid], cells=cells, models=summary))
        else:
            rows.append(dict(questions[qid], cells=summary))
    if group_by == "machine":
        columns = [{"key": m["machine_id"], "label": m["label"], "hosts": m["hosts"],
                    "cpu_model": m["cpu_model"], "machines": [m["machine_id"]],
                    "sources": sources.get(m["machine_id"], [])} for m in machines]
    else:
        columns = model_columns
    doc = {"fleet_schema_version": FLEET_SCHEMA_VERSION, "kind": "fleet", "group_by": group_by,
           "store": str(store.path), "columns": columns, "questions": rows}
    if group_by == "machine":
        doc["models"] = model_columns
    return doc


# ---- compare --group-by cpu-model: two models, read as a stream -------------------

def match_model(models: Iterable[str], model_key: str, where: object) -> str:
    """The one CPU model ``model_key`` names: equal to it, else containing
    it (case-insensitive); none or several is a MemfxError."""
    if not model_key.strip():
        raise MemfxError("--group-by cpu-model: an empty CPU model names no machines")
    known = sorted(set(models))
    exact = [m for m in known if m.lower() == model_key.lower()]
    matching = exact or [m for m in known if model_key.lower() in m.lower()]
    if not matching:
        raise MemfxError(f"no CPU model matching {model_key!r} in {where}; "
                         f"known: {'; '.join(known) or 'none'}")
    if len(matching) > 1:
        raise MemfxError(f"CPU model {model_key!r} is ambiguous: {'; '.join(matching)}")
    return matching[0]


def _typed(x: Any) -> Tuple[type, Any]:
    return type(x), repr(x) if isinstance(x, float) else x


class _PooledCurves:
    """documents.group_points, folded one host at a time: per experiment and
    point, the hosts' medians and the min..max of their CIs, so a model of
    hundreds of hosts is never held as documents."""

    def __init__(self) -> None:
        self.by_exp: Dict[Any, Doc] = {}
        self._texts: Dict[Any, str] = {}

    def _key(self, p: Doc) -> Tuple[Any, str]:
        """group_points' key of a point: its metric and the JSON text of
        [arm, params].  The hosts of a model share their points' arms and
        parameters, so the text is made once per distinct pair, looked up
        by a token equal only where the text is (each scalar with its type,
        a float by its repr: 1, 1.0 and True, or 0.0 and -0.0, are equal
        in Python but not in JSON); parameters that are not flat scalars
        are written out every time."""
        arm, params = p.get("arm"), p.get("params")
        try:
            token: Any = (_typed(arm), tuple((k, _typed(v)) for k, v in sorted(params.items()))
                          if isinstance(params, dict) else _typed(params))
            text = self._texts.get(token)
        except TypeError:                       # a list (unhashable), keys of mixed types
            token, text = None, None
        if text is None:
            text = json.dumps([arm, params], sort_keys=True, default=str)
            if token is not None:
                self._texts[token] = text
        return p.get("metric"), text

    def add(self, docs: Iterable[Doc]) -> None:
        for d in docs:
            e = self.by_exp.setdefault(d.get("experiment"), {
                "points": {}, "machine": d.get("machine"), "answers": d.get("answers") or []})
            for p in d.get("points") or []:
                key = self._key(p)
                acc = e["points"].get(key)
                if acc is None:
                    acc = e["points"][key] = {"first": {k: v for k, v in p.items() if k != "values"},
                                              "medians": [], "lows": [], "highs": [], "n": 0,
                                              "rejected": 0, "valued": None}
                if _number(p.get("median")):
                    if acc["valued"] is None:
                        acc["valued"] = {k: v for k, v in p.items() if k != "values"}
                    acc["medians"].append(p["median"])
                    acc["lows"].append(p.get("ci_low"))
                    acc["highs"].append(p.get("ci_high"))
                    acc["n"] += p.get("n") or 0
                    acc["rejected"] += p.get("rejected") or 0

    def documents(self) -> List[Doc]:
        out: List[Doc] = []
        for exp, e in self.by_exp.items():
            points: List[Doc] = []
            for acc in e["points"].values():
                if len(acc["medians"]) < 2:
                    points.append(acc["first"])
                    continue
                lows, highs = acc["lows"], acc["highs"]
                points.append(dict(acc["valued"], median=statistics.median(acc["medians"]),
                                   replicas=list(acc["medians"]),
                                   ci_low=None if None in lows else min(lows),
                                   ci_high=None if None in highs else max(highs),
                                   n=acc["n"], rejected=acc["rejected"]))
            out.append({"experiment": exp, "run_id": None, "machine": e["machine"],
                        "answers": e["answers"], "points": points})
        return out


def _run_documents(store: RunStore, runs: List[Doc]) -> List[Doc]:
    """The documents of ``runs`` (rows of _chosen_runs): the stored ones
    where current, read in one query, else as run_document gives them."""
    from .answer_cache import analysis_key
    from .documents import _REANALYSE, _current
    reads = getattr(store, "stored_documents", None)
    stored: Dict[str, Doc] = {}
    if reads is not None and not _REANALYSE["on"]:
        stored = reads([r["id"] for r in runs if r.get("status") != RUNNING
                        and r["experiment"] != "tune"], analysis_key())
    out = []
    for r in runs:
        doc = stored.get(r["id"])
        if doc is not None and _current(r, doc):
            doc.setdefault("survey_id", r.get("survey_id"))     # as documents._finished
            out.append(doc)
        else:
            out.append(run_document(store, r["id"]))
    return out


def _run_points(store: RunStore, runs: List[Doc]) -> List[Doc]:
    """The points summaries (the store's points_part) of ``runs``, the
    stored ones where current, else from the run's document."""
    from .answer_cache import analysis_key
    from .documents import _REANALYSE
    reads = getattr(store, "stored_points", None)
    if reads is None or _REANALYSE["on"]:
        return _run_documents(store, runs)
    stored = reads([r["id"] for r in runs if r.get("status") != RUNNING
                    and r["experiment"] != "tune"], analysis_key())
    return [part if part is not None and _current_part(r, part) else run_document(store, r["id"])
            for r in runs for part in [stored.get(r["id"])]]


def model_sides(store: RunStore, *model_keys: str) -> List[Tuple[str, List[Doc], List[Doc]]]:
    """For `compare --group-by cpu-model A B`: per CPU model named, (label,
    answers, curves): per question the median of its hosts' values with the
    spread min..max across them as its interval (compare reads it as the
    CI: a conservative stand-in), and one document per experiment whose
    points are the hosts' pooled (documents.group_points' rule).  Only the
    named models' machines are read."""
    # a fleet store names every machine's CPU model, and lists the hosts of
    # the two models' machines only; others give the whole machine list
    models_of, hosts_of = getattr(store, "machine_models", None), getattr(store, "machine_hosts", None)
    if models_of is not None and hosts_of is not None:
        model_of = {mid: cpu_model(fp) for mid, fp in models_of()}
        host_lists: Dict[str, List[str]] = {}
    else:
        machines = machines_document(store)["machines"]
        model_of = {m["machine_id"]: m["cpu_model"] for m in machines}
        host_lists = {m["machine_id"]: m["hosts"] for m in machines}
    chosen = [match_model(model_of.values(), key, store.path) for key in model_keys]
    of_model = {mid: model for mid, model in model_of.items() if model in chosen}
    if models_of is not None and hosts_of is not None:
        host_lists = hosts_of(sorted(of_model))
    hosts = {mid: ", ".join(host_lists.get(mid) or []) or mid for mid in of_model}
    found: Dict[str, Dict[str, List[Tuple[Doc, str, str]]]] = {model: {} for model in chosen}
    asked: Dict[str, Doc] = {}
    curves = {model: _PooledCurves() for model in chosen}
    n_machines = {model: 0 for model in chosen}
    runs_of: Dict[str, List[Doc]] = {}
    chosen_runs = [r for r in _chosen_runs(store, set(of_model)) if r["machine_id"] in of_model]
    for r in chosen_runs:
        runs_of.setdefault(r["machine_id"], []).append(r)
    for mid, srcs, by_question in machine_answers(store, set(of_model), chosen_runs):
        model = of_model[mid]
        n_machines[model] += 1
        for qid, a in by_question.items():
            asked.setdefault(qid, {k: a.get(k) for k in _QUESTION_KEYS})
            found[model].setdefault(qid, []).append(({k: a.get(k) for k in _ANSWER_KEYS}, mid, hosts[mid]))
    # the hosts' curves, in the order of the answers: each model's first
    # host's whole documents (its points and answers head the pooled ones,
    # as group_points takes them), the others' points summaries only, read
    # a batch of hosts in one query (a query per host, each its own
    # transaction, doubled the reading) and let go after
    order = list(runs_of)
    firsts = {next(mid for mid in order if of_model[mid] == model)
              for model in chosen if any(of_model[mid] == model for mid in order)}
    for first in range(0, len(order), POINTS_MACHINES_PER_BATCH):
        batch = order[first:first + POINTS_MACHINES_PER_BATCH]
        rest = [r for mid in batch if mid not in firsts for r in runs_of[mid]]
        points = dict(zip((r["id"] for r in rest), _run_points(store, rest)))
        for mid in batch:
            mine = runs_of[mid]
            curves[of_model[mid]].add(_run_documents(store, mine) if mid in firsts
                                      else [points[r["id"]] for r in mine])
        del points
    out = []
    for model in chosen:
        answers = []
        for qid in sorted(found[model]):
            cell = summary_cell(found[model][qid])
            answers.append(dict(asked[qid], verdict=cell["verdict"], value=cell["value"],
                                ci_low=cell.get("spread_low"), ci_high=cell.get("spread_high")))
        n = n_machines[model]
        out.append((f"{model} ({n} machine{'s' if n != 1 else ''})", answers, curves[model].documents()))
    return out
