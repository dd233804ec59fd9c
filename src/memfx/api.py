"""The Python API behind `import memfx` (re-exported there)."""
from __future__ import annotations


def _store(db=None, for_reading=True):
    """The store `db` names, through the command line's own checks
    (store.store_target: no SQLite -wal/-shm/-journal name, no URL
    look-alike); readers open a read-only file read-only."""
    from .model.version import __version__
    from .store.store import open_store
    return open_store(db, memfx_version=__version__, what="db", for_reading=for_reading)


def _text_arg(value, fn, name, optional=False):
    """An id, experiment or preset argument: a string (None when optional),
    else TypeError in one line (store.run(None) raised AttributeError)."""
    if isinstance(value, str) or (optional and value is None):
        return value
    raise TypeError(f"memfx.{fn}: {name} must be a string, not {type(value).__name__}")


def _document_arg(doc, fn, key):
    """A result or survey document handed in: a dict whose `key` is a list
    of objects; else TypeError (not a dict) or MemfxError (not a document),
    one line either way, not the KeyError or AttributeError of a reader."""
    from .model.errors import MemfxError
    if not isinstance(doc, dict):
        raise TypeError(f"memfx.{fn}: expected a document (a dict), not {type(doc).__name__}")
    items = doc.get(key)
    if items is None and key == "answers":
        items = []
    if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
        raise MemfxError(f"memfx.{fn}: not a memfx document: its {key!r} is not a list of "
                         f"objects")
    return items


def fingerprint():
    """The fingerprint of this machine (as `memfx machine --json`)."""
    from .lab.machine import fingerprint
    return fingerprint()


def list_experiments():
    """Names of the registered experiments."""
    from .experiments import REGISTRY
    return sorted(REGISTRY)


def run(experiment, preset="quick", db=None, **params):
    """Run an experiment, store it, and return its result document."""
    from .analysis.results import document
    from .running.runner import run_experiment
    _text_arg(experiment, "run", "experiment")
    _text_arg(preset, "run", "preset")
    store = _store(db, for_reading=False)
    run_id = run_experiment(experiment, store, fingerprint(), preset, params)
    return document(store.run(run_id), store.samples(run_id))


def load(id="latest", db=None):
    """The document of a stored run, as stored when it was analysed (again
    from its samples when memfx's analysis changed since) (a run id,
    unique prefix, ``latest`` or ``latest:EXP``), or of a survey (``s-...``,
    ``latest-survey``: ``kind`` is ``"survey"``, with every run's answers)."""
    from .analysis.documents import document_of
    _text_arg(id, "load", "id")
    return document_of(_store(db), id)


def runs(db=None, experiment=None):
    """Stored runs, newest first; ``machine_id`` is the ``m-...`` id."""
    _text_arg(experiment, "runs", "experiment", optional=True)
    return _store(db).runs(experiment=experiment)


def _pandas():
    try:
        import pandas
    except ImportError:
        from .model.errors import MemfxError
        raise MemfxError("memfx.answers() returns a pandas DataFrame and pandas is not "
                         "installed: pip install 'memfx[pandas]'") from None
    return pandas


def answers(id="latest", db=None):
    """The answers of a run or a survey (an id as load() takes, or a document)
    as a pandas DataFrame, one row per answer: question, verdict, value,
    unit, ci_low, ci_high, run_id, survey_id, machine_id, because,
    experiment, seed, headline, asks.  Needs ``pip install 'memfx[pandas]'``."""
    from .analysis.documents import ANSWER_COLUMNS, answer_records
    if isinstance(id, dict):
        _document_arg(id, "answers", "answers")
        if id.get("kind") == "survey":
            docs = _document_arg(id, "answers", "documents")
            if not all(isinstance(d.get("run_id"), str) for d in docs):
                from .model.errors import MemfxError
                raise MemfxError("memfx.answers: not a survey document: a run in its "
                                 "'documents' has no run_id")
    else:
        _text_arg(id, "answers", "id (or a document)")
    pandas = _pandas()
    doc = id if isinstance(id, dict) else load(id, db=db)
    return pandas.DataFrame(answer_records(doc), columns=list(ANSWER_COLUMNS))


def compare(a, b, threshold="5%", questions=None, db=None):
    """The comparison document of `memfx compare A B` (runs, surveys or
    machines ``m-...``): one row per question with A, B, the ratio B/A, its
    CI and a verdict; ``questions`` a glob on question ids (``"copy.*"``);
    ``threshold`` as ``--threshold`` ("5%" or 0.05)."""
    from .analysis.compare import parse_threshold
    from .analysis.comparison import comparison
    from .model.errors import MemfxError
    _text_arg(a, "compare", "a")
    _text_arg(b, "compare", "b")
    _text_arg(questions, "compare", "questions", optional=True)
    try:
        limit = parse_threshold(threshold)
    except ValueError as e:
        raise MemfxError(str(e)) from None
    return comparison(_store(db), a, b, limit, pattern=questions)


def samples(run_id="latest", db=None):
    """Every stored sample of a run, one flat record each (DataFrame-ready)."""
    _text_arg(run_id, "samples", "run_id")
    store = _store(db)
    r = store.run(run_id)
    out = []
    for s in store.samples(r["id"]):
        rec = {"run_id": r["id"], **{k: v for k, v in s.items() if k not in ("point", "counters")}}
        rec.update(s.get("point") or {})
        rec.update({f"counter_{k}": v for k, v in (s.get("counters") or {}).items()})
        out.append(rec)
    return out


def points(doc, db=None):
    """A result document's points as flat records (DataFrame-ready); a
    survey's document gives every run's points, and an id (as load() takes)
    is loaded first."""
    from .model.errors import MemfxError
    if isinstance(doc, str):
        doc = load(doc, db=db)
    if isinstance(doc, dict) and doc.get("kind") == "survey":
        return [rec for d in _document_arg(doc, "points", "documents") for rec in points(d)]
    for p in _document_arg(doc, "points", "points"):
        if not isinstance(p.get("params"), dict) or any(
                not isinstance(p.get(k) or kind(), kind)
                for k, kind in (("flags", list), ("replicas", list), ("modes", dict),
                                ("counters", dict))):
            raise MemfxError("memfx.points: not a result document: a point's params, flags, "
                             "replicas, modes or counters are of the wrong type")
    out = []
    for p in doc["points"]:
        rec = {k: v for k, v in p.items()
               if k not in ("params", "counters", "flags", "modes", "replicas")}
        rec["flags"] = ",".join(p.get("flags") or [])
        rec.update({f"replica_{i}": v for i, v in enumerate(p.get("replicas") or [])})
        rec.update({f"mode_{k}": v for k, v in (p.get("modes") or {}).items()})
        rec.update(p["params"])
        rec.update({f"counter_{k}": v for k, v in (p.get("counters") or {}).items()})
        rec["run_id"] = doc.get("run_id")
        out.append(rec)
    return out
