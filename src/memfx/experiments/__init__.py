"""The experiments: one package per effect, <name>/, that reads as a lab
protocol.  Its __init__.py is the protocol -- the Experiment subclass with
its question, seeds, parameters, presets, arms, questions, plots, plan and
prepare -- registered with @register; analysis.py holds what analyze does
(the answers, as a mixin the protocol inherits, and their pure helpers),
and kernels.py, where there is one, the kernel map and checks.  Adding an
effect = adding a package here (no list to keep): the loader below imports
every package and module whose name has no leading underscore.

The kit (base.py, levels.py and the _-prefixed modules: the protocol and
registry, shared helpers; and an effect's analysis and kernels, split off
its protocol by concern) sits below the effects.  May import the model, the
lab (the C core only through memfx.lab.lab) and the store; an effect imports
the kit, never another effect."""
from __future__ import annotations

import importlib
import pkgutil
from typing import Literal, overload

from ..model.errors import MemfxError
from .base import REGISTRY, Experiment, Param, Point, Region, Trial, register

# Support modules that define no experiment (each effect is a package; the
# loader finds packages and modules alike).
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
