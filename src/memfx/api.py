"""The Python API behind `import memfx` (re-exported there)."""
from __future__ import annotations


def _store(db=None):
    from .version import __version__
    from .store import open_store
    return open_store(db, memfx_version=__version__)


def fingerprint():
    """The fingerprint of this machine (as `memfx machine --json`)."""
    from .machine import fingerprint
    return fingerprint()


def list_experiments():
    """Names of the registered experiments."""
    from .experiments import REGISTRY
    return sorted(REGISTRY)


def run(experiment, preset="quick", db=None, **params):
    """Run an experiment, store it, and return its result document."""
    from .results import document
    from .runner import run_experiment
    store = _store(db)
    run_id = run_experiment(experiment, store, fingerprint(), preset, params)
    return document(store.run(run_id), store.samples(run_id))


def load(id="latest", db=None):
    """The document of a stored run, re-analysed from its samples (a run id,
    unique prefix, ``latest`` or ``latest:EXP``), or of a survey (``s-...``,
    ``latest-survey``: ``kind`` is ``"survey"``, with every run's answers)."""
    from .documents import document_of
    return document_of(_store(db), id)


def runs(db=None, experiment=None):
    """Stored runs, newest first; ``machine_id`` is the ``m-...`` id."""
    return _store(db).runs(experiment=experiment)


def _pandas():
    try:
        import pandas
    except ImportError:
        from .errors import MemfxError
        raise MemfxError("memfx.answers() returns a pandas DataFrame and pandas is not "
                         "installed: pip install 'memfx[pandas]'") from None
    return pandas


def answers(id="latest", db=None):
    """The answers of a run or a survey (an id as load() takes, or a document)
    as a pandas DataFrame, one row per answer: question, verdict, value,
    unit, ci_low, ci_high, run_id, survey_id, machine_id, because,
    experiment, seed, headline, asks.  Needs ``pip install 'memfx[pandas]'``."""
    from .documents import ANSWER_COLUMNS, answer_records
    pandas = _pandas()
    doc = id if isinstance(id, dict) else load(id, db=db)
    return pandas.DataFrame(answer_records(doc), columns=list(ANSWER_COLUMNS))


def compare(a, b, threshold="5%", questions=None, db=None):
    """The comparison document of `memfx compare A B` (runs, surveys or
    machines ``m-...``): one row per question with A, B, the ratio B/A, its
    CI and a verdict; ``questions`` a glob on question ids (``"copy.*"``);
    ``threshold`` as ``--threshold`` ("5%" or 0.05)."""
    from .compare import parse_threshold
    from .documents import comparison
    from .errors import MemfxError
    try:
        limit = parse_threshold(threshold)
    except ValueError as e:
        raise MemfxError(str(e)) from None
    return comparison(_store(db), a, b, limit, pattern=questions)


def samples(run_id="latest", db=None):
    """Every stored sample of a run, one flat record each (DataFrame-ready)."""
    store = _store(db)
    r = store.run(run_id)
    out = []
    for s in store.samples(r["id"]):
        rec = {"run_id": r["id"], **{k: v for k, v in s.items() if k not in ("point", "counters")}}
        rec.update(s.get("point") or {})
        rec.update({f"counter_{k}": v for k, v in (s.get("counters") or {}).items()})
        out.append(rec)
    return out


def points(doc):
    """A result document's points as flat records (DataFrame-ready)."""
    out = []
    for p in doc["points"]:
        rec = {k: v for k, v in p.items()
               if k not in ("params", "counters", "flags", "modes", "replicas")}
        rec["flags"] = ",".join(p.get("flags") or [])
        rec.update({f"replica_{i}": v for i, v in enumerate(p.get("replicas") or [])})
        rec.update({f"mode_{k}": v for k, v in (p.get("modes") or {}).items()})
        rec.update(p["params"])
        rec.update({f"counter_{k}": v for k, v in (p.get("counters") or {}).items()})
        rec["run_id"] = doc["run_id"]
        out.append(rec)
    return out
