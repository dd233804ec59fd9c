"""Fleet results: pushing local runs into a shared store (`memfx push`).  The
documents of the fleet views (`memfx machines`, `memfx compare --group-by
cpu-model`, `memfx report --fleet`) are built in documents.py, with every
other document, and re-exported here."""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Set

from ..model.errors import StoreError, StoreUnavailable
from ..model.status import RUNNING
from .documents import (  # noqa: F401 (re-exported)
    FLEET_SCHEMA_VERSION,
    GROUPS,
    Doc,
    RunStore,
    cpu_model,
    fleet_document,
    group_answers,
    machines_document,
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
    there = {r["id"]: r for r in target.runs()}
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
