"""memfx: a laboratory for memory-system effects.

The public API, for scripts and notebooks::

    import memfx
    doc = memfx.run("latency", preset="quick", max_size="16M")
    memfx.fingerprint()                              # this machine
    df = pandas.DataFrame(memfx.points(doc))        # one record per point
    memfx.load(doc["run_id"])                        # the same, from the store
    memfx.load("latest-survey")                      # a survey's document
    memfx.answers("latest-survey")                   # its answers: a DataFrame (memfx[pandas])
    memfx.compare("s-...", "latest-survey")          # the comparison document
"""
from .api import answers, compare, fingerprint, list_experiments, load, points, run, runs, samples
from .model.errors import MemfxError, ParamError, StoreError
from .model.version import __version__
from .store import schema as _schema


def _declared_params(experiment):
    from .experiments import declared_params
    return declared_params(experiment)


# The store checks stored parameters against the experiments' declarations
# without importing an experiment (the store sits below them): the package
# hands it the lookup.
_schema.declare_params(_declared_params)

__all__ = ["run", "load", "runs", "points", "samples", "answers", "compare", "fingerprint",
           "list_experiments",
           "MemfxError", "ParamError", "StoreError", "__version__"]
