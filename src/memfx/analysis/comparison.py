"""`memfx compare A B`: the comparison document of two runs, surveys or
machines (documents.side), or of two CPU models of a fleet
(fleet.model_sides), with the machine's history as the bands' evidence."""
from __future__ import annotations

import fnmatch
from typing import Any, Dict, List, Optional

from ..model.errors import MemfxError
from .compare_curves import compare_all
from .documents import (
    Doc,
    RunStore,
    compare_history,
    noisy_runs,
    ran_in_guest,
    run_documents,
    side,
)
from .fleet import model_sides


def comparison(store: RunStore, a: str, b: str, limit: float = 0.05, pattern: Optional[str] = None,
               group_by: Optional[str] = None) -> Doc:
    """The comparison document of `memfx compare A B [QUESTIONS]` (and
    memfx.compare): sides resolved as side() does (or as CPU models of the
    fleet with ``group_by="cpu-model"``), only the questions matching the
    glob ``pattern``; a pattern that matches nothing is a MemfxError."""
    history: Optional[Dict[str, List[Any]]] = None
    point_history: Optional[Dict[str, List[Any]]] = None
    n_history, guest = 0, False
    if group_by == "cpu-model":     # the two models' machines only, as a stream
        (a_label, a_answers, a_runs), (b_label, b_answers, b_runs) = model_sides(store, a, b)
    else:
        a_label, a_answers, a_doc = side(store, a)
        b_label, b_answers, b_doc = side(store, b)
        a_runs, b_runs = run_documents(a_doc), run_documents(b_doc)
        history, n_history = compare_history(store, a_doc, b_doc)
        if history:        # the same surveys: memoised, or in the answer cache
            point_history, _ = compare_history(store, a_doc, b_doc, points=True)
        guest = ran_in_guest(a_doc) or ran_in_guest(b_doc)
    if pattern:
        def keep(answers: List[Doc]) -> List[Doc]:
            return [x for x in answers if fnmatch.fnmatchcase(str(x.get("question")), pattern)]

        def keep_runs(docs: List[Doc]) -> List[Doc]:
            # the curves of the experiments whose questions match
            return [d for d in docs if any(fnmatch.fnmatchcase(str(x.get("question")), pattern)
                                           for x in d.get("answers") or [])]
        a_answers, b_answers = keep(a_answers), keep(b_answers)
        a_runs, b_runs = keep_runs(a_runs), keep_runs(b_runs)
        if not a_answers and not b_answers:
            raise MemfxError(f"no question matches {pattern!r} (question ids look like "
                             f"latency.l1d)")
    return compare_all(a_answers, b_answers, limit, a_label, b_label, history=history,
                       n_history=n_history, guest=guest, a_runs=a_runs, b_runs=b_runs,
                       point_history=point_history, noisy=noisy_runs(a_runs + b_runs))
