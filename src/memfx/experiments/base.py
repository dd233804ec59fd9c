"""What an experiment is: a question, its seeds, its parameters with units
and presets, its arms, how to set up one trial, and how to analyse the
samples.  Experiments never time anything, open the store or draw."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

# The protocol types live in memfx.model.protocol (the lab imports them without
# importing any experiment); re-exported here for the experiments.
from ..model.errors import ParamError
from ..model.protocol import COMMON_PARAMS, COMMON_PRESETS, PARSERS, Param, Point, Region, Trial  # noqa: F401

if TYPE_CHECKING:
    from ..model.answers import Answer, Question

REGISTRY: dict[str, Experiment] = {}


def register(cls):
    """Class decorator: experiments register themselves (the survey finds them here)."""
    inst = cls()
    REGISTRY[inst.name] = inst
    return cls


def _only_selected_arms(method):
    """Wrap an experiment's plan/refine so that it yields only the arms in
    params["arms"]: the one place where the `arms` parameter is honoured."""
    import functools

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        points = method(self, *args, **kwargs)
        where = 0 if method.__name__ == "plan" else 1      # plan(params, ...), refine(data, params, ...)
        params = kwargs["params"] if "params" in kwargs else args[where] if len(args) > where else None
        chosen = params.get("arms") if isinstance(params, dict) else None
        if not chosen or chosen == ["all"] or not self.arms or set(chosen) >= set(self.arms):
            return points
        keep = set(chosen)

        def declared(arm):
            # an arm the experiment derives from a declared one (aliasing's
            # "avx2:control") goes with the longest declared arm it starts with
            if arm in self.arms:
                return arm
            return max((a for a in self.arms if arm.startswith(a)), key=len, default=None)
        return [p for p in points if declared(p.arm) in keep]
    wrapper.arms_filtered = True
    return wrapper


class Experiment:
    """Subclass, fill in the class attributes, implement plan/prepare/analyze."""
    name = ""
    title = ""
    question = ""
    seeds: tuple[str, ...] = ()
    params: list[Param] = []
    presets: dict[str, dict[str, Any]] = {"quick": {}, "full": {}}
    arms: tuple[str, ...] = ()
    # The questions this experiment answers on every run (answers.Question),
    # declared once; analyze() returns answers.Answer objects for them.
    questions: tuple[Question, ...] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in ("plan", "refine"):
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "arms_filtered", False):
                setattr(cls, name, _only_selected_arms(method))

    # -- parameters --
    def all_params(self) -> list[Param]:
        return list(self.params) + COMMON_PARAMS

    def resolve(self, preset: str = "quick", overrides: dict[str, Any] | None = None
                ) -> dict[str, Any]:
        """Defaults, then the preset, then --set overrides; every value parsed."""
        table = {p.name: p for p in self.all_params()}
        if preset not in self.presets:
            raise ParamError(f"unknown preset {preset!r} for {self.name}: "
                             f"choose {', '.join(self.presets)}")
        values = {p.name: p.default for p in table.values()}
        for source in (COMMON_PRESETS.get(preset, {}), self.presets[preset], overrides or {}):
            for name, raw in source.items():
                if name not in table:
                    raise ParamError(f"unknown parameter {name!r} for experiment {self.name}; "
                                     f"known: {', '.join(sorted(table))}")
                values[name] = table[name].parse(raw)
        values["arms"] = self._check_arms(values["arms"])
        return values

    def _check_arms(self, arms: Iterable[str]) -> list[str]:
        """The `arms` parameter: ["all"] -> every arm; names checked against self.arms."""
        if list(arms) == ["all"]:
            return list(self.arms)
        bad = [a for a in arms if a not in self.arms]
        if bad:
            known = ", ".join(self.arms) if self.arms else "none (this experiment has no arms)"
            raise ParamError(f"arms: unknown arm {', '.join(map(repr, bad))} for {self.name}; "
                             f"known: {known}")
        return list(dict.fromkeys(arms))

    # -- the protocol --
    def plan(self, params: dict, machine: dict) -> list:
        """All points to measure, as Point(arm, swept values)."""
        raise NotImplementedError

    def prepare(self, point: Point, params: dict, lab) -> Trial:
        """In the worker: allocate and initialise buffers; return the Trial."""
        raise NotImplementedError

    def verify(self, lab, params: dict) -> None:
        """In the worker, before any timing: check the kernels compute the right thing."""

    def analyze(self, data: Any) -> list[Answer]:
        """Answers (answers.Answer, one per declared question at most) from a
        RunData (points with statistics, accepted samples).  Questions left
        unanswered become not_measured; an answer to an undeclared question
        is an error."""
        return []

    def declared(self, name: str) -> Question:
        """The declared question ``<experiment>.<name>`` (or the full id)."""
        # ids use the experiment's name with '_' for '-' (store_forward.entry_28_vs_32)
        qid = name if "." in name else f"{self.name.replace('-', '_')}.{name}"
        for q in self.questions:
            if q.id == qid:
                return q
        raise KeyError(f"{self.name} declares no question {qid!r}")

    def estimate_seconds(self, params: dict, machine: dict) -> float:
        """Rough run time, for progress displays."""
        pts = self.plan(params, machine)
        return len(pts) * params["samples"] * 2 * params["min_sample_ms"] / 1000 * 3 + 1
