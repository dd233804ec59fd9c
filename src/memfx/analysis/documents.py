"""Documents from the store: a run's result document, a survey's document,
what `memfx compare` compares (a run, a survey, or a machine's latest
survey), the fleet views (every machine of a shared store, or its CPU
models) and a `memfx tune` record's answers.  The one place that turns
stored runs into documents; presentation reads these documents, never the
store's rows."""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Set,
    Tuple,
)

from ..model.errors import MemfxError, StoreError
from ..model.forking import fork_map
from ..model.units import signed_percent

if TYPE_CHECKING:
    from ..experiments.base import Experiment

Doc = Dict[str, Any]    # a JSON document (a run's, a survey's, a comparison's) or a stored row
# (answers, {curve key: median}) of one survey of a machine's history
SurveyHistory = Tuple[List[Doc], Dict[str, float]]


class RunStore(Protocol):
    """What the analysis reads from the store it is handed (memfx.store's
    SQLite or PostgreSQL store: the analysis imports neither)."""

    @property
    def path(self) -> object: ...

    def run(self, run_id_or_prefix: str, /) -> Doc: ...

    def runs(self, *, survey_id: Optional[str] = None) -> List[Doc]: ...

    def survey(self, survey_id_or_prefix: str, /) -> Doc: ...

    def surveys(self) -> List[Doc]: ...

    def samples(self, run_id: str, /) -> List[Doc]: ...

    def artifacts(self, run_id: str, /) -> Doc: ...

    def machines(self) -> List[Doc]: ...


# The analysis (results, and numpy with it) is imported when a run is
# analysed, not to read stored documents: `memfx show S --json` needs none
# of it.
def document(run: Doc, samples: Sequence[Doc], experiment: Optional[Experiment] = None,
             include_values: bool = False) -> Doc:
    """results.document() (which tests replace here)."""
    from .results import document as analyse
    return analyse(run, samples, experiment, include_values=include_values)


TUNE_ARTIFACT = "tune"      # the artifact that holds a `memfx tune` record's document
FLEET_SCHEMA_VERSION = 1
GROUPS = ("machine", "cpu-model")


# ---- a run's document: analysed once, then read from the store ----------------
# A run's result document (with every point's values) is analysed when the
# run has ended and stored with the version of the analysis that made it
# (answer_cache.analysis_key: memfx's sources and numpy's version).  Every
# reader takes the stored one, and analyses again only when none is stored,
# the run is still running (its samples are still coming), the run changed
# since (its status, end or labels differ from the document's), the version
# differs, or the process was asked to (--reanalyse) -- then stores the new
# one where the store can be written (a read-only store just computes).

_REANALYSE: Dict[str, Any] = {"on": False, "done": set()}   # this process's --reanalyse, and what it redid


def reanalyse(on: bool = True) -> None:
    """Make this process analyse every run it reads again (once each: a run
    read twice, as both sides of a compare, is analysed once) and store the
    new documents: the command line's --reanalyse."""
    _REANALYSE["on"] = bool(on)
    _REANALYSE["done"].clear()


def _current(run: Mapping[str, Any], doc: Any) -> bool:
    """Whether a stored document still describes ``run`` as it is now."""
    return (isinstance(doc, dict) and doc.get("run_id") == run["id"]
            and all(doc.get(k) == run.get(k) for k in ("status", "finished"))
            and (doc.get("labels") or {}) == (run.get("labels") or {}))


def stored_document(store: RunStore, run: Mapping[str, Any]) -> Optional[Doc]:
    """The stored document (with values) of ``run`` (a store.run() dict)
    when it is current (see above), else None."""
    from ..model.status import RUNNING
    from .answer_cache import analysis_key
    if run.get("status") == RUNNING:
        return None               # still measuring: never served stale
    if _REANALYSE["on"] and (str(store.path), run["id"]) not in _REANALYSE["done"]:
        return None
    keeps = getattr(store, "analysis", None)
    doc = keeps(run["id"], analysis_key()) if keeps else None
    return doc if _current(run, doc) else None


def keep_document(store: RunStore, run: Mapping[str, Any], doc: Doc) -> None:
    """Store ``doc`` (with values) as ``run``'s document by this analysis;
    a running run's is not kept (more samples come), nor is anything on a
    store that cannot be written."""
    from ..model.status import RUNNING
    from .answer_cache import analysis_key
    _REANALYSE["done"].add((str(store.path), run["id"]))
    if run.get("status") == RUNNING or not hasattr(store, "save_analysis"):
        return
    store.save_analysis(run["id"], analysis_key(), doc)


def run_values_document(store: RunStore, run: Dict[str, Any],
                        samples: Optional[List[Any]] = None) -> Doc:
    """The document with values of ``run``: the stored one, else analysed
    from its samples (``samples``, or read here) and stored.  Raises what
    the analysis raises."""
    doc = stored_document(store, run)
    if doc is None:
        doc = document(run, store.samples(run["id"]) if samples is None else samples,
                       include_values=True)
        keep_document(store, run, doc)
    return doc


def run_document(store: RunStore, run_id: str, include_values: bool = False) -> Doc:
    """A run's result document (stored, else analysed and stored); a `memfx
    tune` record also carries its tune document (``tune``) and one answer
    per checked candidate."""
    run = store.run(run_id)
    return _finished(store, run, _without_values(run_values_document(store, run),
                                                 include_values))


def _finished(store: RunStore, run: Doc, doc: Doc) -> Doc:
    doc.setdefault("survey_id", run.get("survey_id"))
    if run["experiment"] == "tune":
        tuned = store.artifacts(run["id"]).get(TUNE_ARTIFACT)
        if isinstance(tuned, dict):
            doc.update(tune=tuned, answers=tune_answers(tuned))
    return doc


def _analysed(task: Tuple[Doc, List[Doc]]) -> Optional[Doc]:
    """The document (with values) of one (run, samples), or None when its
    analysis fails (the report analyses it again and shows the error)."""
    run, samples = task
    try:
        return document(run, samples, include_values=True)
    except Exception:
        return None


def _survey_states(store: RunStore, survey_id: str) -> Doc:
    """store.survey(), its runs as the state their stored documents are
    judged by where the store can read just that (survey_run_states)."""
    states = getattr(store, "survey_run_states", None)
    return states(survey_id) if states is not None else store.survey(survey_id)


# Whether this process may hand out the survey it read last again
# (share_reads), and that survey's documents.
_SHARED: Dict[str, Any] = {"on": False, "key": None, "docs": {}}


def share_reads(on: bool = True) -> None:
    """Let this process hand out the same stored documents when it reads one
    survey twice (`memfx compare S S`: decoding a survey's documents is most
    of a side's time).  For a command line that reads, prints and ends; a
    library caller gets documents of its own on every read."""
    _SHARED.update(on=bool(on), key=None, docs={})


def _stored_documents(store: RunStore, runs: List[Doc]) -> Dict[str, Optional[Doc]]:
    """{run id: stored_document()} of ``runs``, their documents read in
    one query where the store can (stored_documents)."""
    from ..model.status import RUNNING
    from .answer_cache import analysis_key
    batch = getattr(store, "stored_documents", None)
    if batch is None:
        return {run["id"]: stored_document(store, run) for run in runs}
    wanted = [run for run in runs if run.get("status") != RUNNING and not (
        _REANALYSE["on"] and (str(store.path), run["id"]) not in _REANALYSE["done"])]
    key = analysis_key()
    share = (str(store.path), key)
    shared = _SHARED["docs"] if _SHARED["on"] and _SHARED["key"] == share else {}
    found = {r["id"]: shared[r["id"]] for r in wanted if r["id"] in shared}
    missing = [r["id"] for r in wanted if r["id"] not in shared]
    if missing:
        found.update(batch(missing, key))
    if _SHARED["on"]:
        _SHARED.update(key=share, docs=found)
    return {run["id"]: doc if _current(run, doc := found.get(run["id"])) else None
            for run in runs}


def survey_run_documents(store: RunStore, survey_id: str,
                         jobs: Optional[int] = None, survey: Optional[Doc] = None
                         ) -> Dict[str, Doc]:
    """{run id: document with values} of a survey's runs, for both the
    report and the survey document: each the stored one, else analysed (in
    forked processes, one per CPU: every measurement is done by then) and
    stored.  A run whose analysis fails is left out: the report analyses it
    again and shows the error.  ``survey``: the survey as _survey_states
    read it."""
    listed = (survey or _survey_states(store, survey_id))["runs"]
    kept = _stored_documents(store, listed)
    # a run analysed again is read whole (its parameters and machine)
    runs = [r if kept[r["id"]] is not None else store.run(r["id"]) for r in listed]
    tasks = [(run, store.samples(run["id"])) for run in runs if kept[run["id"]] is None]
    docs = fork_map(_analysed, tasks, jobs, cost=lambda task: len(task[1]))
    for (run, _), doc in zip(tasks, docs):
        if doc is not None:
            keep_document(store, run, doc)
            kept[run["id"]] = doc
    return {run["id"]: _finished(store, run, doc)
            for run in runs if (doc := kept[run["id"]]) is not None}


def _without_values(doc: Doc, include_values: bool) -> Doc:
    if include_values:
        return doc
    return dict(doc, points=[_point_without_values(p) for p in doc.get("points", [])])


def _point_without_values(p: Doc) -> Doc:
    # a copy less one key, in the order it had (dict() copies in C)
    if "values" not in p:
        return dict(p)
    q = dict(p)
    del q["values"]
    return q


def latest_per_experiment(runs: Iterable[Doc]) -> List[Doc]:
    """The newest complete run of each experiment (else the newest of any status)."""
    chosen: Dict[str, Doc] = {}
    for r in runs:                       # newest first
        cur = chosen.get(r["experiment"])
        if cur is None or (cur["status"] != "complete" and r["status"] == "complete"):
            chosen[r["experiment"]] = r
    return list(chosen.values())


def survey_document(store: RunStore, survey_id: str, include_values: bool = False,
                    documents: Optional[Dict[str, Doc]] = None,
                    survey: Optional[Doc] = None) -> Doc:
    """One document for a survey: its runs' documents and, first, all their
    answers (each tagged with the run it comes from).  ``documents``: run
    documents with values already made, by run id (analysed once, not again);
    ``survey``: the survey as _survey_states read it."""
    survey = survey or store.survey(survey_id)
    runs = sorted(latest_per_experiment(survey["runs"]), key=lambda r: (r["started"], r["id"]))
    given = documents or {}
    docs = [_without_values(given[r["id"]], include_values) if r["id"] in given
            else run_document(store, r["id"], include_values) for r in runs]
    answers = [dict(a, run_id=d["run_id"], experiment=d["experiment"])
               for d in docs for a in d.get("answers", [])]
    machine_ids = sorted({d["machine_id"] for d in docs if d.get("machine_id")})
    return {
        "schema_version": _schema_version(docs),
        "kind": "survey",
        "survey_id": survey["id"],
        "status": survey["status"],
        "preset": survey.get("preset"),
        "started": survey.get("started"),
        "finished": survey.get("finished"),
        "labels": survey.get("labels") or {},
        "machine_id": machine_ids[0] if len(machine_ids) == 1 else None,
        "machine_ids": machine_ids,
        "machine": docs[0]["machine"] if docs else {},
        "runs": [{"run_id": d["run_id"], "experiment": d["experiment"], "status": d["status"]}
                 for d in docs],
        "answers": answers,
        "documents": docs,
    }


def _schema_version(docs: Sequence[Doc]) -> Any:
    """results.RESULT_SCHEMA_VERSION: read off the run documents (results
    writes it into each, and every document served is this analysis's)
    rather than importing the analysis to read a stored survey."""
    for d in docs:
        if "schema_version" in d:
            return d["schema_version"]
    from .results import RESULT_SCHEMA_VERSION
    return RESULT_SCHEMA_VERSION


def _machine_surveys(store: RunStore, mid: str) -> List[Doc]:
    """Surveys (newest first) whose runs were measured on machine ``mid``."""
    from ..lab.machine import machine_id
    indexed = getattr(store, "machine_surveys", None)     # the store's one query (fleet stores)
    if indexed is not None:
        return list(indexed(mid))
    out = []
    for s in store.surveys():
        runs = store.runs(survey_id=s["id"])
        if runs and any(machine_id(store.run(r["id"]).get("machine") or {}) == mid
                        for r in runs[:1]):
            out.append(s)
    return out


def noisy_runs(docs: Iterable[Doc]) -> Set[Optional[str]]:
    """Run ids whose own samples say the run was noisy: more than the
    threshold noisy_run of its samples rejected (preempted or migrated)."""
    from ..model.findings import threshold
    out: Set[Optional[str]] = set()
    for d in docs:
        pts = d.get("points") or []
        taken = sum((p.get("n") or 0) + (p.get("rejected") or 0) for p in pts)
        rejected = sum(p.get("rejected") or 0 for p in pts)
        if taken and rejected / taken > threshold("noisy_run"):
            out.add(d.get("run_id"))
    return out


def busy_runs(docs: Iterable[Doc]) -> Set[Optional[str]]:
    """Run ids that measured on a busy machine (results.busy_summary)."""
    return {d.get("run_id") for d in docs
            if isinstance(d.get("busy"), dict) and d["busy"].get("busy")}


def _tag_noisy(answers: Iterable[Doc], docs: Sequence[Doc]) -> List[Doc]:
    """The answers, those of noisy runs tagged noisy=True, those of runs
    measured on a busy machine busy=True (compare marks their side), and
    each with its run's core speed (core_gbps, where the run timed it:
    compare reads an absolute figure's move against it)."""
    from .compare import core_speeds
    noisy, busy, speed = noisy_runs(docs), busy_runs(docs), core_speeds(docs)
    out = []
    for a in answers:
        tags: Dict[str, Any] = {}
        if a.get("run_id") in noisy:
            tags["noisy"] = True
        if a.get("run_id") in busy:
            tags["busy"] = True
        if a.get("run_id") in speed:
            tags["core_gbps"] = speed[a.get("run_id")]
        out.append(dict(a, **tags) if tags else a)
    return out


# (database, survey id) -> (answers, point medians) of a complete survey
_SURVEY_ANSWERS: Dict[Tuple[str, str], SurveyHistory] = {}


def _history_surveys(store: RunStore, machine: str, exclude: Iterable[Optional[str]] = (),
                     before: Optional[str] = None, most: int = 5) -> List[SurveyHistory]:
    """The newest ``most`` complete surveys of machine id ``machine`` other
    than ``exclude`` and started before ``before``, each as (answers, point
    medians) (history_survey, memoised for this process)."""
    surveys = [s for s in _machine_surveys(store, machine)
               if s["status"] == "complete" and s["id"] not in exclude
               and (before is None or (s.get("started") or "") < before)][:most]
    out = []
    for s in surveys:
        key = (str(store.path), s["id"])
        if key not in _SURVEY_ANSWERS:
            # the bands need each answer's question and value and each
            # point's median: the stored parts serve (history_survey)
            _SURVEY_ANSWERS[key] = history_survey(store, s["id"], parts=True)
        out.append(_SURVEY_ANSWERS[key])
    return out


def machine_history(store: RunStore, machine: str, exclude: Iterable[Optional[str]] = (),
                    before: Optional[str] = None, most: int = 5
                    ) -> Tuple[Optional[Dict[str, List[Any]]], int]:
    """({question: [value of each survey]}, n) over the newest ``most``
    complete surveys of machine id ``machine`` other than ``exclude`` and
    started before ``before``; (None, n) with fewer than the threshold
    history_min_surveys of them."""
    from ..model.findings import threshold
    surveys = _history_surveys(store, machine, exclude, before, most)
    if len(surveys) < threshold("history_min_surveys"):
        return None, len(surveys)
    values: Dict[str, List[Any]] = {}
    for answers, _ in surveys:
        for a in answers:
            values.setdefault(a["question"], []).append(a.get("value"))
    return values, len(surveys)


def machine_point_history(store: RunStore, machine: str, exclude: Iterable[Optional[str]] = (),
                          before: Optional[str] = None, most: int = 5
                          ) -> Tuple[Optional[Dict[str, List[Any]]], int]:
    """({curve key: [median of each survey]}, n): machine_history() for the
    points `compare` compares (compare_curves.curve_key)."""
    from ..model.findings import threshold
    surveys = _history_surveys(store, machine, exclude, before, most)
    if len(surveys) < threshold("history_min_surveys"):
        return None, len(surveys)
    values: Dict[str, List[Any]] = {}
    for _, medians in surveys:
        for k, v in medians.items():
            values.setdefault(k, []).append(v)
    return values, len(surveys)


def analysed_survey(store: RunStore, survey_id: str) -> Doc:
    """survey_document() with its runs analysed in forked processes (one per
    CPU), as a survey does: `compare` analyses two surveys and up to five of
    history, each a few seconds of work for one CPU."""
    survey = _survey_states(store, survey_id)
    return survey_document(store, survey["id"], survey=survey,
                           documents=survey_run_documents(store, survey["id"], survey=survey))


def history_survey(store: RunStore, survey_id: str, parts: bool = False) -> SurveyHistory:
    """(answers, point medians) of one complete survey of a machine's
    history: from the answer cache (answer_cache) when its runs and memfx's
    analysis are unchanged, else (``parts``: findings without details will
    do) from the runs' stored answers and points parts, else analysed from
    the samples (its runs in forked processes, as a survey does) and kept
    there.  The point medians
    ({curve key: median}) band `compare`'s curves as the answers band its
    rows."""
    from . import answer_cache
    from .compare_curves import point_medians
    runs = _survey_states(store, survey_id)["runs"]
    # --reanalyse: the documents are made again, and so what comes of them
    kept = None if _REANALYSE["on"] else answer_cache.load_survey(store.path, survey_id, runs)
    if kept is None and parts and not _REANALYSE["on"]:
        # the answers parts hold each answer's finding (question, value,
        # verdict, CI), not its details: enough for a history's bands
        kept = _history_from_parts(store, runs)
    if kept is None:
        doc = analysed_survey(store, survey_id)
        kept = {"answers": doc["answers"], "points": point_medians(doc["documents"])}
        answer_cache.save(store.path, survey_id, runs, kept["answers"], kept["points"])
    return kept["answers"], kept["points"]


def _history_from_parts(store: RunStore, runs: List[Doc]) -> Optional[Doc]:
    """{"answers", "points"} of a survey's runs (the newest of each
    experiment) from the store's answers and points parts of their stored
    analyses (schema 8) -- what a history needs, without reading or
    decompressing whole documents with every sample value; None unless
    every run has both parts, current, by this analysis."""
    from .answer_cache import analysis_key
    from .compare_curves import curve_key
    answers_of = getattr(store, "stored_answers", None)
    points_of = getattr(store, "stored_points", None)
    if answers_of is None or points_of is None:
        return None
    chosen = latest_per_experiment(runs)
    ids = [r["id"] for r in chosen]
    key = analysis_key()
    try:
        answer_parts, point_parts = answers_of(ids, key), points_of(ids, key)
    except StoreError:
        return None
    answers: List[Doc] = []
    medians: Dict[str, float] = {}
    for r in sorted(chosen, key=lambda r: (r.get("started") or "", r["id"])):
        a_part, p_part = answer_parts.get(r["id"]), point_parts.get(r["id"])
        if not (_current(r, a_part) and _current(r, p_part)):
            return None
        answers += [dict(a, run_id=r["id"], experiment=r["experiment"])
                    for a in a_part.get("answers") or []]
        for p in p_part.get("points") or []:
            m = p.get("median")
            if isinstance(m, (int, float)) and not isinstance(m, bool) and m > 0:
                medians[curve_key(str(r["experiment"]), p)] = float(m)
    return {"answers": answers, "points": medians}


def history_answers(store: RunStore, survey_id: str) -> List[Doc]:
    """The answers of one complete survey of a machine's history
    (history_survey)."""
    return history_survey(store, survey_id)[0]


def side(store: RunStore, key: object) -> Tuple[str, List[Doc], Doc]:
    """(label, answers, document) for a compare side: a run id or prefix,
    ``latest`` / ``latest:EXP``, a survey id or prefix, or a machine id
    ``m-...`` (its latest complete survey, else its latest survey)."""
    label, doc, survey = _named(store, key)
    if survey:
        return label, _tag_noisy(doc["answers"], doc["documents"]), doc
    answers = [dict(a, run_id=doc["run_id"]) for a in doc["answers"]]
    return label, _tag_noisy(answers, [doc]), doc


def _named(store: RunStore, key: object) -> Tuple[str, Doc, bool]:
    """(label, document, whether a survey's) of side()'s ``key``."""
    key = str(key)
    if key.startswith("m-"):
        surveys = _machine_surveys(store, key)
        if not surveys:
            raise MemfxError(f"no survey of machine {key} in {store.path}")
        done = [s for s in surveys if s["status"] == "complete"] or surveys
        doc = analysed_survey(store, done[0]["id"])
        return f"{key} (survey {doc['survey_id']})", doc, True
    if key.startswith("s-"):
        doc = analysed_survey(store, key)
        return f"survey {doc['survey_id']}", doc, True
    try:
        doc = run_document(store, key)
    except StoreError as run_error:
        try:
            doc = analysed_survey(store, key)
        except StoreError:
            raise run_error from None
        return f"survey {doc['survey_id']}", doc, True
    return f"run {doc['run_id']}", doc, False


def document_of(store: RunStore, key: object) -> Doc:
    """The document ``key`` names: a survey's (``s-...``, ``latest-survey``,
    or a survey prefix that is no run's) or a run's (id, prefix, ``latest``,
    ``latest:EXP``)."""
    return _named(store, key)[1]


# ---- what presentation reads of a document besides its answers ------------
# Documents of version 4 carry it; for older ones (and a run whose analysis
# failed, which has none) it is looked up here, never by presentation.

def plots_of(doc: Doc) -> List[Doc]:
    """The document's plot declarations as plain data (plotspec.PlotSpec.to_dict)."""
    from .results import plot_dicts
    if "plots" in doc:
        return doc.get("plots") or []
    return plot_dicts(_registered(doc.get("experiment")))


@dataclass(frozen=True)
class DeclaredParam:
    """A parameter as experiment_info describes it."""
    name: str
    kind: str = ""
    help: str = ""


class ExperimentAbout:
    """The experiment of a document as its experiment_info describes it,
    read as a registered Experiment is (title, question, seeds,
    all_params(), resolve("full"))."""

    def __init__(self, info: Doc) -> None:
        self.title = str(info.get("title") or "")
        self.question = str(info.get("question") or "")
        self.seeds = tuple(info.get("seeds") or ())
        self._params = [DeclaredParam(str(p.get("name") or ""), p.get("kind") or "",
                                      p.get("help") or "")
                        for p in info.get("params") or [] if isinstance(p, dict)]
        self._full = info.get("full_preset")

    def all_params(self) -> List[DeclaredParam]:
        return list(self._params)

    def resolve(self, preset: str) -> Doc:
        if preset != "full" or not isinstance(self._full, dict):
            raise MemfxError(f"no {preset} preset in this document")
        return dict(self._full)


def experiment_about(doc: Optional[Doc], name: Optional[str]) -> Optional[ExperimentAbout]:
    """The ExperimentAbout of a run's document (``doc`` None: its analysis
    failed), or None for an experiment this memfx does not know."""
    from .results import experiment_info
    if doc is not None and "experiment_info" in doc:
        info = doc.get("experiment_info")
    else:
        info = experiment_info(_registered(name))
    return ExperimentAbout(info) if isinstance(info, dict) else None


def machine_facts(fingerprint: Doc, docs: Iterable[Optional[Doc]] = ()
                  ) -> Tuple[Doc, List[Doc]]:
    """(capabilities, noise cautions) of a machine: from its runs' documents
    (version 4), else from the fingerprint; raises on a fingerprint of an
    unexpected shape."""
    from .results import machine_capabilities, machine_warnings
    for doc in docs:
        if doc and doc.get("capabilities") is not None:
            return doc["capabilities"], [w for w in doc.get("warnings") or []
                                         if w.get("source") == "machine"]
    return machine_capabilities(fingerprint), machine_warnings(fingerprint)


def _registered(name: Optional[str]) -> Optional[Experiment]:
    from ..experiments import get_experiment
    return get_experiment(name, missing_ok=True) if name else None


# The columns of `memfx export SURVEY --format csv` and memfx.answers(), in order.
ANSWER_COLUMNS = ("question", "verdict", "value", "unit", "ci_low", "ci_high", "run_id",
                  "survey_id", "machine_id", "because", "experiment", "seed", "headline",
                  "asks")


def answer_records(doc: Doc) -> List[Doc]:
    """One flat record per answer of a run's or a survey's document (the
    ANSWER_COLUMNS), each naming its run, survey and machine (``m-...``)."""
    if doc.get("kind") == "survey":
        runs = {d["run_id"]: d for d in doc.get("documents") or []}
        survey_id = doc.get("survey_id")
    else:
        runs = {doc.get("run_id"): doc}
        survey_id = doc.get("survey_id")
    out = []
    for a in doc.get("answers") or []:
        run_id = a.get("run_id") or doc.get("run_id")
        run = runs.get(run_id) or {}
        rec = {k: a.get(k) for k in ANSWER_COLUMNS}
        rec.update(run_id=run_id, survey_id=survey_id or run.get("survey_id"),
                   machine_id=run.get("machine_id") or doc.get("machine_id"),
                   experiment=a.get("experiment") or str(a.get("question", "")).split(".")[0],
                   headline=bool(a.get("headline")))
        out.append(rec)
    return out


def survey_advice(store: RunStore, doc: Doc) -> Optional[Doc]:
    """The advice stored with a survey's runs (`memfx advise` in the
    survey), or None."""
    for d in doc.get("documents") or []:
        try:
            advice = store.artifacts(d["run_id"]).get("advice")
        except StoreError:
            continue
        if isinstance(advice, dict):
            return advice
    return None


def compare_history(store: RunStore, a_doc: Doc, b_doc: Doc, points: bool = False
                    ) -> Tuple[Optional[Dict[str, List[Any]]], int]:
    """The machine's history for `compare`: complete surveys of the one
    machine both sides were measured on (None when they differ) started
    before the EARLIER side: the surveys between the two may already be
    after the change `compare` is asked about (an upgrade, a glibc setting),
    and a history that holds both states widened the band until a real
    change read as noise.  ``points``: the history of the points
    (machine_point_history) rather than of the answers."""
    mids = {a_doc.get("machine_id"), b_doc.get("machine_id")}
    if len(mids) != 1 or None in mids:
        return None, 0
    exclude = {d.get("survey_id") for d in (a_doc, b_doc)}
    before = min(str(d.get("started") or "") for d in (a_doc, b_doc)) or None
    history: Callable[..., Tuple[Optional[Dict[str, List[Any]]], int]] = \
        machine_point_history if points else machine_history
    return history(store, mids.pop(), exclude=exclude, before=before)


def run_documents(doc: Doc) -> List[Doc]:
    """The run documents of a compare side: a survey's, or the run's own."""
    return list(doc.get("documents") or []) if doc.get("kind") == "survey" else [doc]


def ran_in_guest(doc: Doc) -> bool:
    """Whether a run's or a survey's document was measured in a VM guest
    (its fingerprint's hypervisor, else the CPUID hypervisor flag)."""
    from .results import ran_in_guest as machine_in_guest
    docs = [doc] + list(doc.get("documents") or [])
    return any(machine_in_guest(d.get("machine")) for d in docs)


# ---- fleet views: every machine of a shared store ----------------------------

def cpu_model(fingerprint: Optional[Doc]) -> str:
    cpu = (fingerprint or {}).get("cpu") or {}
    return str(cpu.get("model_name") or cpu.get("vendor") or "unknown CPU").strip()


def machines_document(store: RunStore) -> Doc:
    """Every machine in the store with its latest survey."""
    from ..lab.machine import label
    # the list names a machine by its CPU only: a store that can send just
    # that member of each fingerprint (a fleet's) is asked for no more
    listing = getattr(store, "machine_summaries", None) or store.machines
    out = []
    for m in listing():
        survey = m["last_survey"]
        out.append({"machine_id": m["machine_id"], "row_ids": m["row_ids"],
                    "label": label(m["fingerprint"]),
                    "cpu_model": cpu_model(m["fingerprint"]), "hosts": m["hosts"],
                    "n_runs": m["n_runs"], "last_run": m["last_run"],
                    "last_survey": None if survey is None else {
                        k: survey.get(k) for k in ("id", "started", "status", "preset", "labels")}})
    return {"fleet_schema_version": FLEET_SCHEMA_VERSION, "kind": "machines",
            "store": str(store.path), "machines": out}


def _machine_answers(store: RunStore, machine: Doc, runs: List[Doc],
                     docs: Optional[List[Doc]] = None) -> Tuple[List[str], List[Doc]]:
    """(sources, answers) of `machine`: the answers of its newest complete
    run of each experiment (else its newest run of it), so a later survey
    of a few experiments (--only) hides none of the others; `sources` are
    the surveys (or, outside surveys, the runs) they come from.  ``docs``:
    a list the runs' documents are appended to."""
    mine = [r for r in runs if r.get("machine_id") == machine["machine_id"]]   # newest first
    chosen = sorted(latest_per_experiment(mine), key=lambda r: (r["started"], r["id"]))
    answers = []
    for r in chosen:
        doc = run_document(store, r["id"])
        if docs is not None:
            docs.append(doc)
        answers += [dict(a, run_id=r["id"], experiment=r["experiment"]) for a in doc["answers"]]
    sources = list(dict.fromkeys(r.get("survey_id") or r["id"] for r in chosen))
    return sources, answers


def fleet_document(store: RunStore, group_by: str = "machine") -> Doc:
    """One row per question, one column per machine (group_by "machine": its
    newest complete run of each experiment) or
    per CPU model ("cpu-model": the median of its hosts' values, with the
    spread min..max across hosts and the verdicts counted)."""
    return _fleet(store, group_by)[0]


def _fleet(store: RunStore, group_by: str, docs: Optional[Dict[str, List[Doc]]] = None
           ) -> Tuple[Doc, List[Doc]]:
    """(fleet_document, machines); ``docs``: a dict that gets each machine's
    run documents by machine id."""
    if group_by not in GROUPS:
        raise MemfxError(f"--group-by: expected one of {', '.join(GROUPS)}, got {group_by!r}")
    machines = machines_document(store)["machines"]
    if not machines:
        raise StoreError(f"no machines in {store.path} (run `memfx survey` or `memfx push` first)")
    per_machine: Dict[str, Dict[str, Doc]] = {}
    sources: Dict[str, List[str]] = {}
    runs = store.runs()
    for m in machines:
        mine = None if docs is None else docs.setdefault(m["machine_id"], [])
        sources[m["machine_id"]], answers = _machine_answers(store, m, runs, mine)
        per_machine[m["machine_id"]] = {a["question"]: a for a in answers}
    if group_by == "machine":
        columns = [{"key": m["machine_id"], "label": m["label"], "hosts": m["hosts"],
                    "machines": [m["machine_id"]], "sources": sources[m["machine_id"]]}
                   for m in machines]
    else:
        models: Dict[str, List[Doc]] = {}
        for m in machines:
            models.setdefault(m["cpu_model"], []).append(m)
        columns = [{"key": model, "label": model, "machines": [m["machine_id"] for m in ms],
                    "hosts": sorted({h for m in ms for h in m["hosts"]}),
                    "sources": list(dict.fromkeys(x for m in ms for x in sources[m["machine_id"]]))}
                   for model, ms in sorted(models.items())]
    questions: Dict[str, Doc] = {}
    for by_question in per_machine.values():
        for qid, a in by_question.items():
            questions.setdefault(qid, {k: a.get(k) for k in ("question", "asks", "unit", "better",
                                                            "seed")})
    rows = []
    for qid in sorted(questions):
        cells = {}
        for col in columns:
            found = [per_machine[mid][qid] for mid in col["machines"] if qid in per_machine[mid]]
            cells[col["key"]] = _cell(found, group_by)
        rows.append(dict(questions[qid], cells=cells))
    doc = {"fleet_schema_version": FLEET_SCHEMA_VERSION, "kind": "fleet", "group_by": group_by,
           "store": str(store.path), "columns": columns, "questions": rows}
    return doc, machines


def _cell(answers: List[Doc], group_by: str) -> Doc:
    if not answers:
        return {"verdict": "not_measured", "value": None, "ci_low": None, "ci_high": None,
                "n_hosts": 0}
    if group_by == "machine":
        a = answers[0]
        return {k: a.get(k) for k in ("verdict", "value", "ci_low", "ci_high", "because")} | {
            "n_hosts": 1}
    values = [a["value"] for a in answers if isinstance(a.get("value"), (int, float))]
    verdicts: Dict[Optional[str], int] = {}
    for a in answers:
        verdicts[a.get("verdict")] = verdicts.get(a.get("verdict"), 0) + 1
    return {"value": statistics.median(values) if values else None,
            "spread_low": min(values) if values else None,
            "spread_high": max(values) if values else None,
            "verdict": next(iter(verdicts)) if len(verdicts) == 1 else "mixed",
            "verdicts": verdicts, "n_hosts": len(answers)}


def group_answers(store: RunStore, model_key: str) -> Tuple[str, List[Doc]]:
    """(label, answers) of the machines whose CPU model contains `model_key`
    (case-insensitive; one model must match): per question the median of
    the hosts' values, and as its interval the spread min..max across hosts
    (memfx compare reads it as the CI: a conservative stand-in)."""
    label, answers, _ = group_side(store, model_key)
    return label, answers


def group_side(store: RunStore, model_key: str,
               fleet: Optional[Tuple[Doc, Dict[str, List[Doc]]]] = None
               ) -> Tuple[str, List[Doc], List[Doc]]:
    """group_answers() and, for `compare`'s curves, one document per
    experiment whose points are the hosts' (group_points).  ``fleet``: the
    (fleet document, {machine id: run documents}) of fleet_with_runs(), made
    once for both sides of a compare."""
    if not model_key.strip():
        raise MemfxError("--group-by cpu-model: an empty CPU model names no machines")
    machines = machines_document(store)["machines"]
    models = sorted({m["cpu_model"] for m in machines})
    matching = [m for m in models if model_key.lower() in m.lower()]
    exact = [m for m in models if m.lower() == model_key.lower()]
    if exact:
        matching = exact
    if not matching:
        raise MemfxError(f"no CPU model matching {model_key!r} in {store.path}; "
                         f"known: {'; '.join(models) or 'none'}")
    if len(matching) > 1:
        raise MemfxError(f"CPU model {model_key!r} is ambiguous: {'; '.join(matching)}")
    model = matching[0]
    doc, per_machine = fleet or fleet_with_runs(store)
    answers = []
    for row in doc["questions"]:
        cell = row["cells"].get(model) or {}
        if not cell.get("n_hosts"):
            continue
        answers.append({k: row.get(k) for k in ("question", "asks", "unit", "better", "seed")} | {
            "verdict": cell["verdict"], "value": cell["value"],
            "ci_low": cell.get("spread_low"), "ci_high": cell.get("spread_high")})
    column = next(c for c in doc["columns"] if c["key"] == model)
    n = len(column["machines"])
    return (f"{model} ({n} machine{'s' if n != 1 else ''})", answers,
            group_points([per_machine.get(mid) or [] for mid in column["machines"]]))


def fleet_with_runs(store: RunStore) -> Tuple[Doc, Dict[str, List[Doc]]]:
    """(the cpu-model fleet document, {machine id: its run documents})."""
    per_machine: Dict[str, List[Doc]] = {}
    doc, _ = _fleet(store, "cpu-model", per_machine)
    return doc, per_machine


def group_points(machine_docs: Iterable[List[Doc]]) -> List[Doc]:
    """One document per experiment for the hosts of one CPU model
    (``machine_docs``: each host's run documents): per point the median of
    the hosts' medians, with each host's median as a replica (the host-to-
    host spread is what `compare` pools) and min..max of their CIs as its
    CI; one host's point as it is."""
    by_exp: Dict[Any, Doc] = {}
    for docs in machine_docs:
        for d in docs:
            e = by_exp.setdefault(d.get("experiment"), {"points": {}, "doc": d})
            for p in d.get("points") or []:
                key = (p.get("metric"), json.dumps([p.get("arm"), p.get("params")],
                                                   sort_keys=True, default=str))
                e["points"].setdefault(key, []).append(p)
    out: List[Doc] = []
    for exp, e in by_exp.items():
        points: List[Doc] = []
        for hosts in e["points"].values():
            valued = [p for p in hosts if isinstance(p.get("median"), (int, float))]
            if len(valued) < 2:
                points.append(hosts[0])
                continue
            lows = [p.get("ci_low") for p in valued]
            highs = [p.get("ci_high") for p in valued]
            points.append(dict(valued[0], median=statistics.median(p["median"] for p in valued),
                               replicas=[p["median"] for p in valued],
                               ci_low=None if None in lows else min(lows),
                               ci_high=None if None in highs else max(highs),
                               n=sum(p.get("n") or 0 for p in valued),
                               rejected=sum(p.get("rejected") or 0 for p in valued)))
        first = e["doc"]
        out.append({"experiment": exp, "run_id": None, "machine": first.get("machine"),
                    "answers": first.get("answers") or [], "points": points})
    return out


# ---- a `memfx tune` record -------------------------------------------------------

def tune_answers(doc: Doc) -> List[Doc]:
    """One answer per checked candidate (question tune.<tunable>), so that
    `memfx compare` sets two tune records side by side."""
    from ..model import findings as fnd
    out: List[Doc] = []
    for c in doc.get("candidates") or []:
        r = c.get("result") or {}
        verdict = {"faster": fnd.DETECTED, "slower": fnd.DETECTED,
                   "no_difference": fnd.NOT_DETECTED}.get(str(r.get("verdict")), fnd.INCONCLUSIVE)
        out.append({"question": f"tune.{c['tunable']}",
                    "asks": f"How much faster does the program run with {c['tunable']} changed?",
                    "seed": "002", "unit": "x", "better": "higher", "verdict": verdict,
                    "value": r.get("speedup"), "ci_low": r.get("ci_low"),
                    "ci_high": r.get("ci_high"),
                    "because": f"{c['id']}: {tune_result_text(r)}; {c['reason']}",
                    "estimator": "median of paired speedups (baseline / candidate per round)",
                    "evidence": [], "details": []})
    return out


def tune_result_text(r: Optional[Doc]) -> str:
    if not r or r.get("speedup") is None:
        return "not measured"
    gain, lo, hi = (signed_percent(r[k] - 1) for k in ("speedup", "ci_low", "ci_high"))
    return f"{r['verdict'].replace('_', ' ')}, gain {gain} [{lo}, {hi}] over {r['n']} rounds"
