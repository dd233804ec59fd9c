"""What an experiment is: a question, its seeds, its parameters with units
and presets, its arms, how to set up one trial, and how to analyse the
samples.  Experiments never time anything, open the store or draw."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..errors import ParamError
from ..units import format_size, parse_size

REGISTRY: dict[str, "Experiment"] = {}


def register(cls):
    """Class decorator: experiments register themselves (the survey finds them here)."""
    inst = cls()
    REGISTRY[inst.name] = inst
    return cls


# ---- parameters ----------------------------------------------------------

def _parse_bool(text, name):
    if isinstance(text, bool):
        return text
    t = str(text).strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise ParamError(f"{name}: expected true or false, got {text!r}")


def _parse_int(text, name):
    if isinstance(text, bool):
        raise ParamError(f"{name}: expected an integer, got {text!r}")
    try:
        return int(text)
    except (TypeError, ValueError):
        raise ParamError(f"{name}: expected an integer, got {text!r}") from None


def _parse_float(text, name):
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise ParamError(f"{name}: expected a number, got {text!r}") from None
    if math.isnan(v):
        raise ParamError(f"{name}: expected a number, got {text!r}")
    return v


PARSERS: dict[str, Callable[[Any, str], Any]] = {
    "int": _parse_int,
    "float": _parse_float,
    "size": parse_size,
    "bool": _parse_bool,
    "str": lambda t, n: str(t),
}


@dataclass
class Param:
    """One tunable: one name, one default, one line of meaning with its unit."""
    name: str
    kind: str                 # int | float | size | bool | str, or list:<kind>
    default: Any
    help: str                 # one line: meaning and unit
    example: str = ""         # shown in --help as --set name=example
    choices: tuple = ()
    minimum: Optional[float] = None
    maximum: Optional[float] = None

    def parse(self, value):
        if self.kind.startswith("list:"):
            inner = self.kind[5:]
            items = value if isinstance(value, (list, tuple)) else [
                s for s in str(value).split(",") if s.strip()]
            if not items:
                raise ParamError(f"{self.name}: expected a comma-separated list, got {value!r}")
            return [self._check(PARSERS[inner](v, self.name)) for v in items]
        if isinstance(value, str) and self.kind != "str" and value.strip().lower() == "auto" \
                and self.default == "auto":
            return "auto"
        return self._check(PARSERS[self.kind](value, self.name))

    def _check(self, v):
        if self.choices and v not in self.choices:
            raise ParamError(f"{self.name}: must be one of {', '.join(map(str, self.choices))}; got {v!r}")
        if self.minimum is not None and v < self.minimum:
            raise ParamError(f"{self.name}: must be >= {self.minimum}, got {v}")
        if self.maximum is not None and v > self.maximum:
            raise ParamError(f"{self.name}: must be <= {self.maximum}, got {v}")
        return v

    def describe(self):
        d = self.default
        if self.kind == "size" and isinstance(d, int):
            d = format_size(d)
        ex = f"  (e.g. --set {self.name}={self.example})" if self.example else ""
        return f"{self.name} [{self.kind}, default {d}]: {self.help}{ex}"


# Parameters every experiment has: how each data point is sampled.
COMMON_PARAMS = [
    Param("samples", "int", 11, "timed samples per point and run length (more = tighter CIs)",
          "21", minimum=3, maximum=10000),
    Param("min_sample_ms", "float", 1.0, "minimum duration of one timed sample, in ms", "2",
          minimum=0.05, maximum=1000),
    Param("cpu", "int", -1, "CPU to pin the measuring thread to; -1 = the last allowed CPU", "0",
          minimum=-1),
    Param("seed", "int", 1, "seed of the random orders (chains, arm shuffles)", "7", minimum=0),
    Param("arms", "list:str", ["all"], "arms (variants) to measure, comma-separated; all = every "
          "arm of the experiment (see its description)", "random"),
]


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


@dataclass
class Point:
    """One measured configuration: an arm plus the values of swept parameters."""
    arm: str
    params: dict


@dataclass
class Region:
    """A place in a buffer: the buffer object (mmap) and a byte offset."""
    buffer: Any
    offset: int = 0
    size: int = 0
    address: int = 0


@dataclass
class Trial:
    """What to time for one point: a kernel row and its arguments.

    metric "time" reports ns per kernel operation (the row's `op`), from two
    run lengths N and 2N when difference=True; metric "bandwidth" reports GB/s
    of declared read+write traffic."""
    kernel: str
    size: int = 0
    dst: Optional[Region] = None
    src: Optional[Region] = None
    value: int = 0
    aux: int = 0
    metric: str = "time"
    difference: bool = True
    count: Optional[int] = None          # fixed iterations; None = calibrate to min_sample_ms
    reject_page_faults: bool = True
    warmup: int = 0                      # iterations run once, untimed, before sampling
    resume: bool = False                 # chase: the next call starts where the last one ended
    cpu_times: bool = False              # record user/system CPU time (getrusage) per sample
    extra: dict = field(default_factory=dict)   # recorded with each sample's counters


class Experiment:
    """Subclass, fill in the class attributes, implement plan/prepare/analyze."""
    name = ""
    title = ""
    question = ""
    seeds: tuple = ()
    params: list = []
    presets: dict = {"quick": {}, "full": {}}
    arms: tuple = ()
    # The questions this experiment answers on every run (answers.Question),
    # declared once; analyze() returns answers.Answer objects for them.
    questions: tuple = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in ("plan", "refine"):
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "arms_filtered", False):
                setattr(cls, name, _only_selected_arms(method))

    # -- parameters --
    def all_params(self):
        return list(self.params) + COMMON_PARAMS

    def resolve(self, preset="quick", overrides=None):
        """Defaults, then the preset, then --set overrides; every value parsed."""
        table = {p.name: p for p in self.all_params()}
        if preset not in self.presets:
            raise ParamError(f"unknown preset {preset!r} for {self.name}: "
                             f"choose {', '.join(self.presets)}")
        values = {p.name: p.default for p in table.values()}
        for source in (self.presets[preset], overrides or {}):
            for name, raw in source.items():
                if name not in table:
                    raise ParamError(f"unknown parameter {name!r} for experiment {self.name}; "
                                     f"known: {', '.join(sorted(table))}")
                values[name] = table[name].parse(raw)
        values["arms"] = self._check_arms(values["arms"])
        return values

    def _check_arms(self, arms):
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

    def analyze(self, data) -> list:
        """Answers (answers.Answer, one per declared question at most) from a
        RunData (points with statistics, accepted samples).  Questions left
        unanswered become not_measured; an answer to an undeclared question
        is an error."""
        return []

    def declared(self, name):
        """The declared question ``<experiment>.<name>`` (or the full id)."""
        qid = name if "." in name else f"{self.name}.{name}"
        for q in self.questions:
            if q.id == qid:
                return q
        raise KeyError(f"{self.name} declares no question {qid!r}")

    def estimate_seconds(self, params: dict, machine: dict) -> float:
        """Rough run time, for progress displays."""
        pts = self.plan(params, machine)
        return len(pts) * params["samples"] * 2 * params["min_sample_ms"] / 1000 * 3 + 1
