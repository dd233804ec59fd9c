"""False sharing and core-to-core transfer: what it costs when threads on
different CPUs write the same cache line.

Seed 004 (Drepper, "Concurrent Cache Line Access Overhead"; his advice
"Move read-write variables which are often written to by different threads
onto their own cache line"): threads that each increment their *own*
counter slow each other down when the counters share a line, because the
line travels between the cores on every write (MESI: a remote write
invalidates the local copy).  How much, from which distance on it stops,
and what one transfer of a line between two CPUs costs, on the CPU at hand.

Protocol (each a set of cells; arms are interleaved inside a cell)
  false_sharing  `threads` threads, each pinned to its own CPU, each adding
                 1 to its own 8-byte counter `count` times; the counters d
                 bytes apart (d = 8 ... 4096); arms: plain (addq, not
                 locked) and atomic (lock addq).  ns per increment per
                 thread, and the ratio to counters far apart (d >= 128)
  solo           the same loops on one thread: the cost without any sharing
                 (far-apart counters should match it when the threads
                 really run in parallel)
  core_to_core   two threads pinned to a pair of CPUs bounce one flag
                 (each waits for the other's value and writes the next):
                 ns per one-way transfer, every pair of the allowed CPUs

The kernels (kernels/sharing.c) start the threads themselves, pin them,
start them on a barrier and report per thread: the CPU at the start and end
of its work, TSC stamps right after the barrier and after its last
increment, and its context switches.  Those come back with every sample
(Trial.extra is a live view of the kernel's results area, read right after
each call).  A sample counts as concurrent when the shorter-running thread
ran entirely while the other was running (overlap >= 90 %) and no thread
was switched out; a point where fewer than half the samples are concurrent
is reported as "threads did not overlap: inconclusive", never as a ratio.
Every counter must end at exactly `count` (each thread owns its counter),
the ping-pong flag at 2 x round trips; anything else stops the run.
"""
from __future__ import annotations

from ...model.answers import LOWER, Question
from ...model.errors import MemfxError, ParamError
from ...model.plotspec import PlotSpec
from .._kit import (  # noqa: F401 (re-exported: bandwidth and the tests import them from here)
    BARRIER,
    CONCURRENT_SHARE_MIN,
    COUNTERS,
    CPUS,
    HEADER,
    HEADER_FIELDS,
    MAX_DISTANCE,
    MAX_THREADS,
    OVERLAP_MIN,
    SLOT_BYTES,
    SLOT_FIELDS,
    SLOTS,
    STATUS,
    STOP,
    XCHG_TAG_SHIFT,
    KernelReport,
    _cpuset_cpus,
    allowed_cpus,
    calibrated_count,
    check_call,
    concurrent_share,
    concurrent_values,
    cpu_text,
    is_concurrent,
    overlap_of_shorter,
    parse_cpu_text,
    read_area,
    resolve_cpus,
    samples_of,
    shared_area,
)
from ..base import Experiment, Param, Point, Trial, register
from .analysis import (  # noqa: F401
    ARM_WORDS,
    ARMS,
    FAR_MIN,
    HEADLINE_ARM,
    PARALLEL_SLOWDOWN_MAX,
    PENALTY_MIN,
    SharingAnswers,
    _line_bytes,
    _one_line,
    _one_sided,
)

DISTANCES = (8, 16, 32, 56, 64, 128, 256, 4096)
PARTS = ("false_sharing", "core_to_core")
# Length of one ping-pong sample (see prepare), ms.
PINGPONG_SAMPLE_MS = 0.1


def check_distances(distances):
    for d in distances:
        if d % 8:
            raise ParamError(f"distances: {d} is not a multiple of 8 (counters are 8-byte words)")
        if not 8 <= d <= MAX_DISTANCE:
            raise ParamError(f"distances: {d} is outside 8..{MAX_DISTANCE}")


@register
class Sharing(SharingAnswers, Experiment):
    name = "sharing"
    order = 70
    title = "False sharing and core-to-core transfer"
    question = ("What does it cost when threads on different CPUs write the same cache line, "
                "from which distance on are their counters independent, and how long does a "
                "line take to travel between two CPUs?")
    seeds = ("004",)
    arms = ARMS + ("pingpong",)
    params = [
        Param("parts", "list:str", list(PARTS), "which parts to measure: false_sharing, "
              "core_to_core", "false_sharing", choices=PARTS),
        Param("distances", "list:int", list(DISTANCES), "bytes between consecutive threads' "
              "counters (multiples of 8; >= 128 is the far-apart baseline)", "8,64,128",
              minimum=8, maximum=MAX_DISTANCE),
        Param("threads", "int", 2, "false_sharing: threads, each on its own CPU (at most the "
              "allowed CPUs)", "4", minimum=2, maximum=MAX_THREADS),
        Param("cpus", "list:int", "auto", "CPUs to use (auto = every CPU this process may run "
              "on); the measuring CPU (cpu) runs thread 0", "0,1", minimum=0),
    ]
    presets = {
        "quick": {"samples": 7, "min_sample_ms": 0.3},
        "full": {"samples": 9, "min_sample_ms": 2},
    }
    questions = (
        Question("sharing.false_sharing", "How much slower are increments of per-thread "
                 "counters that share a cache line than of counters far apart?", "ratio", "004",
                 f"ratio of medians (samples whose threads ran side by side), {HEADLINE_ARM} "
                 f"({ARM_WORDS[HEADLINE_ARM]}) increments at every distance inside one line, "
                 f"pooled, vs counters >= {FAR_MIN} B apart, pooled; detected when its CI is "
                 f"above {1 + PENALTY_MIN:.1f}x, not detected when below; plain increments in "
                 f"the sentence, every distance in details; inconclusive when the threads did "
                 f"not run at the same time",
                 headline=True, band=(0.0, 1 + PENALTY_MIN),
                 # host-shared: the shared line moves between the vCPUs, and the
                 # trip depends on which physical cores the host runs them on
                 # (sharing.core_to_core)
                 host_shared=True),
        Question("sharing.line_size", "From which distance on do per-thread counters stop "
                 "slowing each other down (the line size false sharing implies)?", "bytes",
                 "004", f"the first distance after the last one whose ratio to far-apart "
                 f"counters is surely above {1 + PENALTY_MIN:.2f}x (CI low end), plain or atomic, "
                 f"at which both arms are surely below it (CI high end); against sysfs' "
                 f"coherency_line_size"),
        Question("sharing.padding", "To how many bytes should per-thread counters be padded?",
                 "bytes", "004", "the measured line size rounded up to a power of two, checked "
                 "by the ratio measured at that distance"),
        Question("sharing.core_to_core", "How long does a cache line take to travel from one "
                 "CPU to another (one way)?", "ns", "004",
                 "median ns per one-way transfer of a flag bounced between two pinned threads; "
                 "the median over CPU pairs, every pair in details", better=LOWER,
                 # host-shared: the trip depends on which physical cores the host runs
                 # the two vCPUs on (SMT siblings, one die or two): docs/machine-notes.md
                 host_shared=True),
    )
    plots = (
        PlotSpec("penalty", "ns per increment vs bytes between the threads' counters",
                 kind="curve", x="distance_bytes", series=("arm",),
                 select={"part": "false_sharing"}, log_x=True, log_y=True,
                 xlabel="distance between counters (bytes)", ylabel="ns per increment"),
        PlotSpec("core_to_core", "one-way cache line transfer between two CPUs",
                 kind="heatmap", x="cpu_a", y_param="cpu_b", select={"part": "core_to_core"},
                 symmetric=True, xlabel="CPU", y_axis_label="CPU", ylabel="ns per transfer"),
    )

    # -- plan --
    def plan(self, params, machine):
        check_distances(params["distances"])
        caller, cpus = resolve_cpus(params)
        pts = []
        solo = {"part": "solo", "threads": 1, "cpus": cpu_text(cpus[:1])}
        if "false_sharing" in params["parts"]:
            pts += [Point(arm, dict(solo)) for arm in ARMS]
            if len(cpus) >= 2:
                use = cpus[:min(params["threads"], len(cpus))]
                for d in sorted(set(params["distances"])):
                    pts += [Point(arm, {"part": "false_sharing", "distance_bytes": d,
                                        "threads": len(use), "cpus": cpu_text(use)})
                            for arm in ARMS]
        if "core_to_core" in params["parts"] and len(cpus) >= 2:
            for i, a in enumerate(sorted(cpus)):
                for b in sorted(cpus)[i + 1:]:
                    pair = [a, b] if a == caller or b != caller else [b, a]
                    pts.append(Point("pingpong", {"part": "core_to_core", "cpu_a": a,
                                                  "cpu_b": b, "cpus": cpu_text(pair)}))
        if not pts:
            pts = [Point(arm, dict(solo)) for arm in ARMS]
        return pts

    def estimate_seconds(self, params, machine):
        pts = self.plan(params, machine)
        return 2 + len(pts) * params["samples"] * 2 * 3 * max(params["min_sample_ms"], 1) / 1000

    # -- one trial --
    def prepare(self, point, params, lab):
        p = point.params
        cpus = parse_cpu_text(p["cpus"])
        if cpus[0] != lab.cpu and lab.cpu in cpus:
            raise MemfxError(f"thread 0 must run on the measuring CPU {lab.cpu}, not {cpus[0]}")
        n = len(cpus)
        sample_ms = None
        if p["part"] == "core_to_core":
            kernel, aux = "pingpong", 0
            region = shared_area(lab, cpus)
            # A ping-pong stalls, both threads spinning, as soon as either is
            # switched out, so on a busy machine few long samples survive;
            # its samples are kept short (the N/2N difference removes the
            # few microseconds of start-up).
            sample_ms = min(lab.min_sample_ms, PINGPONG_SAMPLE_MS)
        else:
            kernel = "fs_plain" if point.arm == "plain" else "fs_atomic"
            aux = p.get("distance_bytes", 8)
            region = shared_area(lab, cpus, span=(n - 1) * aux)
        count = calibrated_count(lab, kernel, region, n, aux, sample_ms=sample_ms,
                                 floor=64 if kernel == "pingpong" else 4096)
        return Trial(kernel, dst=region, size=n, aux=aux, count=count, warmup=0,
                     extra=KernelReport(kernel, region, n))

    def verify(self, lab, params):
        """Before timing: each thread lands on its CPU, the counters sit
        exactly d bytes apart, and every counter ends at the count."""
        _, cpus = resolve_cpus(params)
        use = cpus[:2]
        for kernel in ("fs_plain", "fs_atomic"):
            for d in (8, 56, 64, 4096):
                region = shared_area(lab, use, span=(len(use) - 1) * d)
                lab.call(Trial(kernel, dst=region, size=len(use), aux=d), 1000)
                header, slots = read_area(region, len(use))
                check_call(kernel, header, slots)
                for i, s in enumerate(slots):
                    if s["address"] != region.address + COUNTERS + i * d:
                        raise MemfxError(f"{kernel}: thread {i}'s counter is at "
                                         f"{s['address'] - region.address - COUNTERS} in the "
                                         f"counters, not {i * d}")
        lab.release()


