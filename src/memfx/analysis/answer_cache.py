"""The answers of a machine's earlier surveys, kept between memfx processes.

`memfx compare` bands each question by the machine's history: up to five
earlier complete surveys, each analysed again from its samples.  A quick
survey's analysis is a few seconds, so every `compare` with a history spent
20-40 s re-deriving answers that cannot have changed: a finished run's
samples are never rewritten, and its answers change only with memfx's own
analysis code.  This cache keeps them outside the store (the store holds
what was measured, never what was derived), with the median of each of
the survey's points (compare's curves are banded by the same history:
{compare_curves.curve_key: median}), keyed by

- the store and the survey, and the id, status and end of each of its runs
  (a run removed, added or finished since reads as a miss), and
- the analysis: a hash of memfx's Python sources and numpy's version, so
  that an upgrade, or an edit to a working copy, never reads answers an
  older analysis made.

Where: ``$MEMFX_CACHE_DIR``, else ``$XDG_CACHE_HOME/memfx`` (``~/.cache/memfx``);
``MEMFX_CACHE_DIR=off`` turns it off.  Any file that cannot be read, parsed
or written is a miss: the answers are derived again, as without a cache."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

CACHE_FORMAT = 2            # the layout of one cache file (2: with the point medians)
_ANALYSIS_KEY = None        # memoised analysis_key()


def cache_dir() -> Optional[Path]:
    """Where the answer files live; None when the cache is turned off."""
    given = os.environ.get("MEMFX_CACHE_DIR")
    if given is not None:
        return None if given.strip().lower() in ("", "off", "0", "none") else Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memfx"


def analysis_key() -> str:
    """A hash of every Python source of this memfx and numpy's version."""
    global _ANALYSIS_KEY
    if _ANALYSIS_KEY is None:
        h = hashlib.sha256(f"{CACHE_FORMAT} numpy {_numpy_version()}".encode())
        root = Path(__file__).resolve().parent.parent      # the memfx package
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
        _ANALYSIS_KEY = h.hexdigest()[:20]
    return _ANALYSIS_KEY


def _numpy_version() -> str:
    """numpy.__version__, read from numpy/version.py (which sets it) when
    that file says it plainly, else from numpy imported: importing numpy
    was most of reading a stored survey (`memfx show S --json` needs no
    numpy)."""
    import importlib.util
    import re
    spec = importlib.util.find_spec("numpy")
    if spec is not None and spec.origin:
        try:
            text = (Path(spec.origin).parent / "version.py").read_text()
        except (OSError, UnicodeError):
            text = ""
        found = re.search(r'^version(?:\s*:\s*str)?\s*=\s*["\']([^"\']+)["\']\s*$', text, re.M)
        if found and re.search(r"^__version__\s*=\s*version\s*$", text, re.M):
            return found.group(1)
    import numpy
    return str(numpy.__version__)


def runs_signature(runs: Iterable[Dict[str, Any]]) -> List[List[str]]:
    """What must be unchanged for cached answers to hold: each run's id,
    status and end, in id order."""
    return sorted([str(r.get("id")), str(r.get("status")), str(r.get("finished"))] for r in runs)


def _path(store_path: object, survey_id: str) -> Optional[Path]:
    where = cache_dir()
    if where is None:
        return None
    where_from = str(store_path)
    if "://" not in where_from:          # a file: the same one from any directory
        where_from = os.path.abspath(where_from)
    name = hashlib.sha256(f"{where_from}\0{survey_id}".encode()).hexdigest()[:24]
    return where / "answers" / f"{name}-{analysis_key()}.json"


def load(store_path: object, survey_id: str, runs: Iterable[Dict[str, Any]]
         ) -> Optional[List[Dict[str, Any]]]:
    """The cached answers of survey ``survey_id`` of the store at
    ``store_path`` whose runs are ``runs``, or None."""
    kept = load_survey(store_path, survey_id, runs)
    return None if kept is None else kept["answers"]


def load_survey(store_path: object, survey_id: str, runs: Iterable[Dict[str, Any]]
                ) -> Optional[Dict[str, Any]]:
    """{"answers": [...], "points": {curve key: median}} of survey
    ``survey_id`` (as load()), or None -- also for a file written without
    the point medians."""
    path = _path(store_path, survey_id)
    if path is None:
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if (not isinstance(doc, dict) or doc.get("survey_id") != survey_id
            or doc.get("runs") != runs_signature(runs) or not isinstance(doc.get("answers"), list)
            or not isinstance(doc.get("points"), dict)):
        return None
    return {"answers": doc["answers"], "points": doc["points"]}


def save(store_path: object, survey_id: str, runs: Iterable[Dict[str, Any]],
         answers: List[Dict[str, Any]], points: Optional[Dict[str, float]] = None) -> None:
    """Keep ``answers`` (and the survey's ``points``: {curve key: median})
    for load(); a cache that cannot be written is skipped."""
    path = _path(store_path, survey_id)
    if path is None:
        return
    doc = {"format": CACHE_FORMAT, "survey_id": survey_id, "runs": runs_signature(runs),
           "answers": answers, "points": dict(points or {})}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".answers-")
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, default=str)
        os.replace(tmp, path)        # a reader sees the old file or the whole new one
        for old in path.parent.glob(path.name.rsplit("-", 1)[0] + "-*.json"):
            if old != path:          # the same survey's answers by an older analysis
                old.unlink(missing_ok=True)
    except (OSError, TypeError, ValueError):
        try:
            os.unlink(tmp)
        except (OSError, NameError):
            pass
