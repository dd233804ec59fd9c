"""Documents from the store: a run's result document, a survey's document,
and what `memfx compare` compares (a run, a survey, or a machine's latest
survey).  The one place that turns stored runs into documents; presentation
reads these documents, never the store's rows."""
from __future__ import annotations

from .errors import MemfxError, StoreError
from .results import RESULT_SCHEMA_VERSION, document


def run_document(store, run_id, include_values=False):
    """A run's result document; a `memfx tune` record also carries its tune
    document (``tune``) and one answer per checked candidate."""
    run = store.run(run_id)
    doc = document(run, store.samples(run["id"]), include_values=include_values)
    doc.setdefault("survey_id", run.get("survey_id"))
    if run["experiment"] == "tune":
        from .tune import ARTIFACT, answers
        tuned = store.artifacts(run["id"]).get(ARTIFACT)
        if isinstance(tuned, dict):
            doc.update(tune=tuned, answers=answers(tuned))
    return doc


def survey_run_documents(store, survey_id):
    """{run id: document with values} of a survey's runs, each analysed once
    for both the report and the survey document.  A run whose analysis
    fails is left out: the report analyses it again and shows the error."""
    out = {}
    for r in store.survey(survey_id)["runs"]:
        try:
            out[r["id"]] = run_document(store, r["id"], include_values=True)
        except Exception:   # noqa: BLE001 -- the report says what went wrong
            continue
    return out


def _without_values(doc, include_values):
    if include_values:
        return doc
    return dict(doc, points=[{k: v for k, v in p.items() if k != "values"}
                             for p in doc.get("points", [])])


def latest_per_experiment(runs):
    """The newest complete run of each experiment (else the newest of any status)."""
    chosen = {}
    for r in runs:                       # newest first
        cur = chosen.get(r["experiment"])
        if cur is None or (cur["status"] != "complete" and r["status"] == "complete"):
            chosen[r["experiment"]] = r
    return list(chosen.values())


def survey_document(store, survey_id, include_values=False, documents=None):
    """One document for a survey: its runs' documents and, first, all their
    answers (each tagged with the run it comes from).  ``documents``: run
    documents with values already made, by run id (analysed once, not again)."""
    survey = store.survey(survey_id)
    runs = sorted(latest_per_experiment(survey["runs"]), key=lambda r: (r["started"], r["id"]))
    docs = [_without_values(documents[r["id"]], include_values) if r["id"] in (documents or {})
            else run_document(store, r["id"], include_values) for r in runs]
    answers = [dict(a, run_id=d["run_id"], experiment=d["experiment"])
               for d in docs for a in d.get("answers", [])]
    machine_ids = sorted({d["machine_id"] for d in docs if d.get("machine_id")})
    return {
        "schema_version": RESULT_SCHEMA_VERSION,
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


def _machine_surveys(store, mid):
    """Surveys (newest first) whose runs were measured on machine ``mid``."""
    from .machine import machine_id
    out = []
    for s in store.surveys():
        runs = store.runs(survey_id=s["id"])
        if runs and any(machine_id(store.run(r["id"]).get("machine") or {}) == mid
                        for r in runs[:1]):
            out.append(s)
    return out


def noisy_runs(docs):
    """Run ids whose own samples say the run was noisy: more than the
    threshold noisy_run of its samples rejected (preempted or migrated)."""
    from .findings import threshold
    out = set()
    for d in docs:
        pts = d.get("points") or []
        taken = sum((p.get("n") or 0) + (p.get("rejected") or 0) for p in pts)
        rejected = sum(p.get("rejected") or 0 for p in pts)
        if taken and rejected / taken > threshold("noisy_run"):
            out.add(d.get("run_id"))
    return out


def _tag_noisy(answers, docs):
    noisy = noisy_runs(docs)
    return [dict(a, noisy=True) if a.get("run_id") in noisy else a for a in answers]


_SURVEY_ANSWERS = {}      # (database, survey id) -> answers of a complete survey


def machine_history(store, machine, exclude=(), before=None, most=5):
    """({question: [value of each survey]}, n) over the newest ``most``
    complete surveys of machine id ``machine`` other than ``exclude`` and
    started before ``before``; (None, n) with fewer than the threshold
    history_min_surveys of them."""
    from .findings import threshold
    surveys = [s for s in _machine_surveys(store, machine)
               if s["status"] == "complete" and s["id"] not in exclude
               and (before is None or (s.get("started") or "") < before)][:most]
    if len(surveys) < threshold("history_min_surveys"):
        return None, len(surveys)
    values = {}
    for s in surveys:
        key = (str(store.path), s["id"])
        if key not in _SURVEY_ANSWERS:
            _SURVEY_ANSWERS[key] = survey_document(store, s["id"])["answers"]
        for a in _SURVEY_ANSWERS[key]:
            values.setdefault(a["question"], []).append(a.get("value"))
    return values, len(surveys)


def side(store, key):
    """(label, answers, document) for a compare side: a run id or prefix,
    ``latest`` / ``latest:EXP``, a survey id or prefix, or a machine id
    ``m-...`` (its latest complete survey, else its latest survey)."""
    key = str(key)
    if key.startswith("m-"):
        surveys = _machine_surveys(store, key)
        if not surveys:
            raise MemfxError(f"no survey of machine {key} in {store.path}")
        done = [s for s in surveys if s["status"] == "complete"] or surveys
        doc = survey_document(store, done[0]["id"])
        return f"{key} (survey {doc['survey_id']})", _tag_noisy(doc["answers"], doc["documents"]), doc
    if key.startswith("s-"):
        doc = survey_document(store, key)
        return f"survey {doc['survey_id']}", _tag_noisy(doc["answers"], doc["documents"]), doc
    try:
        doc = run_document(store, key)
    except StoreError as run_error:
        try:
            doc = survey_document(store, key)
        except StoreError:
            raise run_error from None
        return f"survey {doc['survey_id']}", _tag_noisy(doc["answers"], doc["documents"]), doc
    answers = [dict(a, run_id=doc["run_id"]) for a in doc["answers"]]
    return f"run {doc['run_id']}", _tag_noisy(answers, [doc]), doc


def document_of(store, key):
    """The document ``key`` names: a survey's (``s-...``, ``latest-survey``,
    or a survey prefix that is no run's) or a run's (id, prefix, ``latest``,
    ``latest:EXP``)."""
    _, _, doc = side(store, key)
    return doc


# The columns of `memfx export SURVEY --format csv` and memfx.answers(), in order.
ANSWER_COLUMNS = ("question", "verdict", "value", "unit", "ci_low", "ci_high", "run_id",
                  "survey_id", "machine_id", "because", "experiment", "seed", "headline",
                  "asks")


def answer_records(doc):
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


def public_runs(store, runs):
    """Stored runs as the CLI and the API show them: ``machine_id`` is the
    stable ``m-...`` id and ``machine_row`` the machines-table row it was
    (local to one database)."""
    by_row = {}
    for m in store.machines():
        for row in m["row_ids"]:
            by_row[row] = m["machine_id"]
    out = []
    for r in runs:
        r = dict(r)
        row = r.pop("machine_id", None)
        r["machine_row"] = row
        r["machine_id"] = by_row.get(row)
        out.append(r)
    return out


def survey_advice(store, doc):
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


def compare_history(store, a_doc, b_doc):
    """The machine's history for `compare`: earlier complete surveys of the
    one machine both sides were measured on (None when they differ)."""
    mids = {a_doc.get("machine_id"), b_doc.get("machine_id")}
    if len(mids) != 1 or None in mids:
        return None, 0
    exclude = {d.get("survey_id") for d in (a_doc, b_doc)}
    before = max(str(d.get("started") or "") for d in (a_doc, b_doc)) or None
    return machine_history(store, mids.pop(), exclude=exclude, before=before)


def ran_in_guest(doc):
    """Whether a run's or a survey's document was measured in a VM guest
    (its fingerprint's hypervisor, else the CPUID hypervisor flag)."""
    docs = [doc] + list(doc.get("documents") or [])
    for d in docs:
        machine = d.get("machine") or {}
        hv = machine.get("hypervisor")
        if isinstance(hv, dict) and "present" in hv:
            return bool(hv["present"])
        flags = machine.get("flags")
        if isinstance(flags, dict) and flags:
            return bool(flags.get("hypervisor"))
    return False


def comparison(store, a, b, limit=0.05, pattern=None, group_by=None):
    """The comparison document of `memfx compare A B [QUESTIONS]` (and
    memfx.compare): sides resolved as side() does (or as CPU models of the
    fleet with ``group_by="cpu-model"``), only the questions matching the
    glob ``pattern``; a pattern that matches nothing is a MemfxError."""
    import fnmatch

    from .compare import compare
    history, n_history, guest = None, 0, False
    if group_by == "cpu-model":
        from .fleet import group_answers
        a_label, a_answers = group_answers(store, a)
        b_label, b_answers = group_answers(store, b)
    else:
        a_label, a_answers, a_doc = side(store, a)
        b_label, b_answers, b_doc = side(store, b)
        history, n_history = compare_history(store, a_doc, b_doc)
        guest = ran_in_guest(a_doc) or ran_in_guest(b_doc)
    if pattern:
        def keep(answers):
            return [x for x in answers if fnmatch.fnmatchcase(str(x.get("question")), pattern)]
        a_answers, b_answers = keep(a_answers), keep(b_answers)
        if not a_answers and not b_answers:
            raise MemfxError(f"no question matches {pattern!r} (question ids look like "
                             f"latency.l1d)")
    return compare(a_answers, b_answers, limit, a_label, b_label, history=history,
                   n_history=n_history, guest=guest)
