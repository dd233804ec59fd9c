"""What passes between an experiment, the worker and the lab: parameters
(Param, their parsers, the parameters every experiment has), the points
measured, the regions of buffers and the trials timed.  Both sides import
this module; the lab imports no experiment (data flow one way: experiment
spec -> running/runner, running/worker -> lab/lab, lab/_core)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from .errors import ParamError
from .units import format_size, parse_int, parse_number, parse_size

# ---- parameters ----------------------------------------------------------

def _parse_bool(text: Any, name: str) -> bool:
    if isinstance(text, bool):
        return text
    t = str(text).strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise ParamError(f"{name}: expected true or false, got {text!r}")


PARSERS: dict[str, Callable[[Any, str], Any]] = {
    "int": parse_int,              # ASCII digits only (units.py)
    "float": parse_number,
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
    choices: tuple[Any, ...] = ()
    minimum: Optional[float] = None
    maximum: Optional[float] = None

    def parse(self, value: Any) -> Any:
        if self.kind.startswith("list:"):
            inner = self.kind[5:]
            items = value if isinstance(value, (list, tuple)) else [
                s for s in str(value).split(",") if s.strip()]
            if not items:
                raise ParamError(f"{self.name}: expected a comma-separated list, got {value!r}")
            # a value given twice would measure every point twice: keep the first
            return list(dict.fromkeys(self._check(PARSERS[inner](v, self.name)) for v in items))
        if isinstance(value, str) and self.kind != "str" and value.strip().lower() == "auto" \
                and self.default == "auto":
            return "auto"
        return self._check(PARSERS[self.kind](value, self.name))

    def _check(self, v: Any) -> Any:
        if self.choices and v not in self.choices:
            raise ParamError(f"{self.name}: must be one of {', '.join(map(str, self.choices))}; got {v!r}")
        if self.minimum is not None and v < self.minimum:
            raise ParamError(f"{self.name}: must be >= {self.minimum}, got {v}")
        if self.maximum is not None and v > self.maximum:
            raise ParamError(f"{self.name}: must be <= {self.maximum}, got {v}")
        return v

    def describe(self) -> str:
        d = self.default
        if self.kind == "size" and isinstance(d, int):
            d = format_size(d)
        ex = f"  (e.g. --set {self.name}={self.example})" if self.example else ""
        return f"{self.name} [{self.kind}, default {d}]: {self.help}{ex}"


# Parameters every experiment has: how each data point is sampled.
# What every experiment's presets set for the common parameters (before its
# own preset): a quick run trades samples within a replica for replicas --
# a CI from one process is not a CI (issue 22).  Three, not two: the t
# interval over two replicas has one degree of freedom (t = 12.7), and in 5
# quick surveys with two, two headline verdicts flipped between detected
# and inconclusive only because their CIs were that wide.
COMMON_PRESETS = {"quick": {"replicas": 3}, "full": {"replicas": 3}}

COMMON_PARAMS = [
    Param("samples", "int", 11, "timed samples per point and run length (more = tighter CIs)",
          "21", minimum=3, maximum=10000),
    Param("min_sample_ms", "float", 1.0, "minimum duration of one timed sample, in ms", "2",
          minimum=0.05, maximum=1000),
    Param("cpu", "int", -1, "CPU to pin the measuring thread to; -1 = the last allowed CPU", "0",
          minimum=-1),
    Param("seed", "int", 1, "seed of the random orders (chains, arm shuffles); replica r uses "
          "seed + r", "7", minimum=0),
    Param("replicas", "int", 3, "independent worker processes per run, each with fresh buffers, "
          "chain permutations and offsets; every CI rests on the spread between them "
          "(quick: 3, with fewer samples each)", "5", minimum=1, maximum=50),
    Param("arms", "list:str", ["all"], "arms (variants) to measure, comma-separated; all = every "
          "arm of the experiment (see its description)", "random"),
    Param("arm_seconds", "float", 0.5, "timed seconds one arm may take per cell and replica: "
          "a point whose sample lasts longer than arm_seconds / samples takes fewer samples, "
          "never fewer than 3 (a 960 MiB copy's 150 ms calls: 3, not 7; the replicas carry "
          "the spread); 0 = always `samples`", "2", minimum=0.0, maximum=3600),
]


@dataclass
class Point:
    """One measured configuration: an arm plus the values of swept parameters."""
    arm: str
    params: dict[str, Any]


@dataclass
class Region:
    """A place in a buffer: the buffer object (mmap) and a byte offset."""
    buffer: Any
    offset: int = 0
    size: int = 0
    address: int = 0


@dataclass
class TeamMember:
    """One thread of a team: the CPU it is pinned to and its own buffers
    (members may share a Region); kernel, size, value, count and aux left
    None are the trial's (so are dst and src left None).  delay_ticks makes the member start that many TSC
    ticks after the barrier (tests: a late thread)."""
    cpu: int
    dst: Optional[Region] = None
    src: Optional[Region] = None
    kernel: Optional[str] = None
    size: Optional[int] = None
    value: Optional[int] = None
    count: Optional[int] = None
    aux: Optional[int] = None
    delay_ticks: int = 0
    chunks: int = 1          # background members: call k on chunk k mod chunks of size bytes


@dataclass
class Team:
    """Run a trial on several pinned threads started at one barrier (the lab's
    team runner, _core/team.c).  mode "together": every member makes the
    timed call, the sample is timed from the barrier's release to the last
    finisher and its traffic is every member's; mode "background": member 0
    makes the timed call while the others repeat theirs (at their own count
    per call) from before it starts until after it ends.  Member 0 runs on
    the lab's CPU."""
    members: list[TeamMember]
    mode: str = "together"


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
    extra: dict[str, Any] = field(default_factory=dict)   # recorded with each sample's counters
    # the kernel times its own part (fenced TSC reads) and returns those
    # ticks: the sample's time is them, not the whole call's (munmap alone)
    kernel_ticks: bool = False
    team: Optional[Team] = None          # run on several pinned threads (see Team)
    # A stream through a working set longer than a sample (a DRAM cell): one
    # iteration = one call on one chunk; call i works on chunk
    # (next_chunk + i) mod chunks, dst/src advanced by chunk * dst_step /
    # src_step bytes; the lab advances next_chunk after every call, so
    # consecutive samples walk the whole set (warmup = chunks: one pass)
    chunks: int = 1
    dst_step: int = 0
    src_step: int = 0
    next_chunk: int = 0
