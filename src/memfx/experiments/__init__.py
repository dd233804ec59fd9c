"""The experiments.  Every module in this package registers itself with
@register; adding an effect = adding a module here (no list to keep).

The kit (base.py, levels.py and the _-prefixed modules: the protocol and
registry, shared helpers, an effect's helpers split off by concern) sits
below the effects.  May import the model, the lab (the C core only through
memfx.lab.lab) and the store; an effect imports the kit, never another
effect."""
from __future__ import annotations

import importlib
import pkgutil
from typing import Literal, overload

from ..model.errors import MemfxError
from .base import REGISTRY, Experiment, Param, Point, Region, Trial, register

# Support modules that define no experiment.
_NOT_EXPERIMENTS = {"base"}

for _m in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _m not in _NOT_EXPERIMENTS and not _m.startswith("_"):
        importlib.import_module(f"{__name__}.{_m}")


@overload
def get_experiment(name: str, missing_ok: Literal[False] = ...) -> Experiment: ...


@overload
def get_experiment(name: str, missing_ok: bool) -> Experiment | None: ...


def get_experiment(name: str, missing_ok: bool = False) -> Experiment | None:
    exp = REGISTRY.get(name)
    if exp is None and not missing_ok:
        raise MemfxError(f"unknown experiment {name!r}; known: {', '.join(sorted(REGISTRY))}")
    return exp


def declared_params(name: str) -> dict[str, Param]:
    """{parameter name: Param} the experiment ``name`` declares; {} for an
    experiment this version does not know."""
    exp = REGISTRY.get(name)
    return {p.name: p for p in exp.all_params()} if exp is not None else {}


def all_experiments() -> list[Experiment]:
    """Registered experiments in survey order (each declares ``order``)."""
    return sorted(REGISTRY.values(), key=lambda e: (getattr(e, "order", 100), e.name))


__all__ = ["Experiment", "Param", "Point", "Region", "Trial", "register", "get_experiment",
           "declared_params", "all_experiments", "REGISTRY"]
