"""The experiments.  Each module registers itself; adding one = adding a
module here and its name to MODULES."""
import importlib

from ..errors import MemfxError
from .base import REGISTRY, Experiment, Param, Point, Region, Trial, register

MODULES = ["latency", "fill", "copy", "store_forward", "aliasing"]

for _m in MODULES:
    importlib.import_module(f"{__name__}.{_m}")


def get_experiment(name, missing_ok=False):
    exp = REGISTRY.get(name)
    if exp is None and not missing_ok:
        raise MemfxError(f"unknown experiment {name!r}; known: {', '.join(sorted(REGISTRY))}")
    return exp


def all_experiments():
    return [REGISTRY[n] for n in REGISTRY]


__all__ = ["Experiment", "Param", "Point", "Region", "Trial", "register", "get_experiment",
           "all_experiments", "REGISTRY"]
