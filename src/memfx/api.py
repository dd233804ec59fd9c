"""The Python API behind `import memfx` (re-exported there)."""
from __future__ import annotations


def _store(db=None):
    from . import __version__
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


def load(run_id="latest", db=None):
    """The result document of a stored run, re-analysed from its samples."""
    from .results import document
    store = _store(db)
    r = store.run(run_id)
    return document(r, store.samples(r["id"]))


def runs(db=None, experiment=None):
    return _store(db).runs(experiment=experiment)


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
