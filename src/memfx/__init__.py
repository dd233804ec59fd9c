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
from .model.version import __version__

from .api import fingerprint, list_experiments, load, points, run, runs, samples  # noqa: E402
from .model.errors import MemfxError, ParamError, StoreError  # noqa: E402


def _declared_params(experiment):
    from .experiments import declared_params
    return declared_params(experiment)


# The store checks stored parameters against the experiments' declarations
# without importing an experiment: the package hands it the lookup.
from .store import schema as _schema  # noqa: E402

_schema.declare_params(_declared_params)


def _make_callable(module, function):
    """``memfx.answers`` and ``memfx.compare`` name both a module of the
    package (``from memfx import answers as ans`` keeps working) and an API
    function: the module object is made callable, calling the function."""
    import types

    class _CallableModule(types.ModuleType):
        __call__ = staticmethod(function)

    module.__class__ = _CallableModule


def _api_modules():
    from .model import answers as answers_module
    from . import api
    from .analysis import compare as compare_module
    _make_callable(answers_module, api.answers)
    _make_callable(compare_module, api.compare)
    return answers_module, compare_module


answers, compare = _api_modules()

__all__ = ["run", "load", "runs", "points", "samples", "answers", "compare", "fingerprint",
           "list_experiments",
           "MemfxError", "ParamError", "StoreError", "__version__"]
