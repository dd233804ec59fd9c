"""Fleet results: pushing local runs into a shared store, and the documents
of the fleet views (`memfx machines`, `memfx compare --group-by cpu-model`,
`memfx report --fleet`).  Documents only: render.py and the report present
them; nothing here measures."""
from __future__ import annotations

import statistics
import time

from .documents import latest_per_experiment, run_document
from .errors import MemfxError, StoreError, StoreUnavailable
from .schema import RUNNING

FLEET_SCHEMA_VERSION = 1
GROUPS = ("machine", "cpu-model")


# ---- push ------------------------------------------------------------------

def push_selection(source, keys, everything=False):
    """Run ids to push from `source`, oldest first: every run (everything or
    no keys), or the runs named (run id / prefix / latest) and those of the
    surveys named (survey id / prefix)."""
    if everything or not keys:
        return [r["id"] for r in reversed(source.runs())]
    ids = []
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


def push(source, target, run_ids, on_run=None):
    """Copy runs (with their survey, machine, samples, artifacts and labels)
    from `source` to `target` under their own ids.  A run already complete
    in the target is not sent again; a partial copy there (still marked
    running, or fewer samples) is replaced.  Returns a summary dict."""
    t0 = time.monotonic()
    there = {r["id"]: r for r in target.runs()}
    here = {r["id"]: r for r in source.runs()}
    counts = {"added": 0, "replaced": 0, "unchanged": 0, "refused": 0}
    refused = {}
    surveys, n_samples = set(), 0
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
        if outcome in ("added", "replaced"):
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


# ---- fleet views ------------------------------------------------------------

def cpu_model(fingerprint) -> str:
    cpu = (fingerprint or {}).get("cpu") or {}
    return str(cpu.get("model_name") or cpu.get("vendor") or "unknown CPU").strip()


def machines_document(store):
    """Every machine in the store with its latest survey."""
    from .machine import label
    out = []
    for m in store.machines():
        survey = m["last_survey"]
        out.append({"machine_id": m["machine_id"], "row_ids": m["row_ids"],
                    "label": label(m["fingerprint"]),
                    "cpu_model": cpu_model(m["fingerprint"]), "hosts": m["hosts"],
                    "n_runs": m["n_runs"], "last_run": m["last_run"],
                    "last_survey": None if survey is None else {
                        k: survey.get(k) for k in ("id", "started", "status", "preset", "labels")}})
    return {"fleet_schema_version": FLEET_SCHEMA_VERSION, "kind": "machines",
            "store": str(store.path), "machines": out}


def _machine_answers(store, machine, runs):
    """(sources, answers) of `machine`: the answers of its newest complete
    run of each experiment (else its newest run of it), so a later survey
    of a few experiments (--only) hides none of the others; `sources` are
    the surveys (or, outside surveys, the runs) they come from."""
    rows = set(machine["row_ids"])
    mine = [r for r in runs if r.get("machine_id") in rows]            # newest first
    chosen = sorted(latest_per_experiment(mine), key=lambda r: (r["started"], r["id"]))
    answers = []
    for r in chosen:
        answers += [dict(a, run_id=r["id"], experiment=r["experiment"])
                    for a in run_document(store, r["id"])["answers"]]
    sources = list(dict.fromkeys(r.get("survey_id") or r["id"] for r in chosen))
    return sources, answers


def fleet_document(store, group_by="machine"):
    """One row per question, one column per machine (group_by "machine": its
    newest complete run of each experiment) or
    per CPU model ("cpu-model": the median of its hosts' values, with the
    spread min..max across hosts and the verdicts counted)."""
    if group_by not in GROUPS:
        raise MemfxError(f"--group-by: expected one of {', '.join(GROUPS)}, got {group_by!r}")
    machines = machines_document(store)["machines"]
    if not machines:
        raise StoreError(f"no machines in {store.path} (run `memfx survey` or `memfx push` first)")
    per_machine, sources = {}, {}
    runs = store.runs()
    for m in machines:
        sources[m["machine_id"]], answers = _machine_answers(store, m, runs)
        per_machine[m["machine_id"]] = {a["question"]: a for a in answers}
    if group_by == "machine":
        columns = [{"key": m["machine_id"], "label": m["label"], "hosts": m["hosts"],
                    "machines": [m["machine_id"]], "sources": sources[m["machine_id"]]}
                   for m in machines]
    else:
        models = {}
        for m in machines:
            models.setdefault(m["cpu_model"], []).append(m)
        columns = [{"key": model, "label": model, "machines": [m["machine_id"] for m in ms],
                    "hosts": sorted({h for m in ms for h in m["hosts"]}),
                    "sources": list(dict.fromkeys(x for m in ms for x in sources[m["machine_id"]]))}
                   for model, ms in sorted(models.items())]
    questions = {}
    for answers in per_machine.values():
        for qid, a in answers.items():
            questions.setdefault(qid, {k: a.get(k) for k in ("question", "asks", "unit", "better",
                                                            "seed")})
    rows = []
    for qid in sorted(questions):
        cells = {}
        for col in columns:
            found = [per_machine[mid][qid] for mid in col["machines"] if qid in per_machine[mid]]
            cells[col["key"]] = _cell(found, group_by)
        rows.append(dict(questions[qid], cells=cells))
    return {"fleet_schema_version": FLEET_SCHEMA_VERSION, "kind": "fleet", "group_by": group_by,
            "store": str(store.path), "columns": columns, "questions": rows}


def _cell(answers, group_by):
    if not answers:
        return {"verdict": "not_measured", "value": None, "ci_low": None, "ci_high": None,
                "n_hosts": 0}
    if group_by == "machine":
        a = answers[0]
        return {k: a.get(k) for k in ("verdict", "value", "ci_low", "ci_high", "because")} | {
            "n_hosts": 1}
    values = [a["value"] for a in answers if isinstance(a.get("value"), (int, float))]
    verdicts = {}
    for a in answers:
        verdicts[a.get("verdict")] = verdicts.get(a.get("verdict"), 0) + 1
    return {"value": statistics.median(values) if values else None,
            "spread_low": min(values) if values else None,
            "spread_high": max(values) if values else None,
            "verdict": max(verdicts, key=verdicts.get) if len(verdicts) == 1 else "mixed",
            "verdicts": verdicts, "n_hosts": len(answers)}


def group_answers(store, model_key):
    """(label, answers) of the machines whose CPU model contains `model_key`
    (case-insensitive; one model must match): per question the median of
    the hosts' values, and as its interval the spread min..max across hosts
    (memfx compare reads it as the CI: a conservative stand-in)."""
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
    doc = fleet_document(store, "cpu-model")
    answers = []
    for row in doc["questions"]:
        cell = row["cells"].get(model) or {}
        if not cell.get("n_hosts"):
            continue
        answers.append({k: row.get(k) for k in ("question", "asks", "unit", "better", "seed")} | {
            "verdict": cell["verdict"], "value": cell["value"],
            "ci_low": cell.get("spread_low"), "ci_high": cell.get("spread_high")})
    n = len([m for m in machines if m["cpu_model"] == model])
    return f"{model} ({n} machine{'s' if n != 1 else ''})", answers
