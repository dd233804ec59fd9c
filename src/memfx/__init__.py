"""memfx: a laboratory for memory-system effects.

The public API, for scripts and notebooks::

    import memfx
    doc = memfx.run("latency", preset="quick", max_size="16M")
    memfx.fingerprint()                              # this machine
    df = pandas.DataFrame(memfx.points(doc))        # one record per point
    memfx.load(doc["run_id"])                        # the same, from the store
"""
from importlib.metadata import PackageNotFoundError as _PNF
from importlib.metadata import version as _version

try:
    __version__ = _version("memfx")
except _PNF:  # running from a source tree
    __version__ = "0.1.0+src"

from .api import fingerprint, list_experiments, load, points, run, runs, samples  # noqa: E402
from .errors import MemfxError, ParamError, StoreError  # noqa: E402

__all__ = ["run", "load", "runs", "points", "samples", "fingerprint", "list_experiments",
           "MemfxError", "ParamError", "StoreError", "__version__"]
