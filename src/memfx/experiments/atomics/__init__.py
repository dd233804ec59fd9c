"""Atomic read-modify-writes: what each costs alone and when threads fight
over one variable.

Seed 004 (Drepper, "Atomicity Optimizations", "Atomic Increment in a
Loop"): four threads incrementing one variable 1e6 times each took 0.23 s
with exchange-add, 0.21 s with add-fetch and 0.73 s with a compare-and-swap
loop -- CAS about 3x the others, because a failed CAS is a round trip of
the line for nothing.  The same operations, timed on the CPU at hand.

Protocol (one cell per thread count; the operations are interleaved in it)
  threads   1 (uncontended) and 2..N (N = the CPUs this process may use),
            each thread pinned to its own CPU, all starting on one barrier
  arms      fetch_add  lock xadd, the old value used
            add_fetch  lock xadd + add, the new value used
            cas        Drepper's loop: load, add, lock cmpxchg, retry on failure
            xchg       xchg of a tagged value (implicitly locked)
            plain      addq to memory, not locked: updates get lost
            remote     thread 0 lock adds a line the other threads keep
                       storing to (a line owned by another core each time);
                       with one thread, a lock add of a line it owns
  metric    ns per operation per thread (every thread does `count` at once)

Every operation is checked after every call: the locked increments end at
exactly threads x count, xchg at some thread's last value; the plain
increment's lost updates are counted, not an error.  Whether the threads
really ran side by side is checked per sample (sharing.py: TSC overlap and
context switches); a contended figure from threads that did not overlap is
reported as inconclusive.
"""
from __future__ import annotations

from ...model.answers import LOWER, Question
from ...model.errors import MemfxError
from ...model.plotspec import PlotSpec
from .._kit import (
    MAX_THREADS,
    KernelReport,
    calibrated_count,
    check_call,
    cpu_text,
    parse_cpu_text,
    read_area,
    resolve_cpus,
    shared_area,
)
from ..base import Experiment, Param, Point, Trial, register
from .analysis import (  # noqa: F401
    CAS_FAR_DEARER,
    DREPPER_CAS_RATIO,
    DREPPER_SECONDS,
    KERNELS,
    OPS,
    AtomicsAnswers,
    _point_answer,
)


@register
class Atomics(AtomicsAnswers, Experiment):
    name = "atomics"
    order = 71
    title = "Atomic operations, alone and contended"
    question = ("What does an atomic increment cost on this CPU, alone and with several threads "
                "on one variable, and is a compare-and-swap loop still about 3x the others?")
    seeds = ("004",)
    arms = OPS
    params = [
        Param("ops", "list:str", list(OPS), "operations: fetch_add, add_fetch, cas, xchg, plain, "
              "remote", "fetch_add,cas", choices=OPS),
        Param("max_threads", "int", 0, "most threads on one variable (0 = every allowed CPU)",
              "4", minimum=0, maximum=MAX_THREADS),
        Param("cpus", "list:int", "auto", "CPUs to use (auto = every CPU this process may run "
              "on); the measuring CPU (cpu) runs thread 0", "0,1", minimum=0),
    ]
    presets = {
        # 7 replicas, not 3: a replica costs ~0.2 s, and the headline
        # cas_ratio (2.3-3.0x here against its 2x bar) read detected in 2 of 5
        # A/A surveys with 3 (t(2) = 4.3) and inconclusive in the others; with
        # 5, one replica in ~40 read 1.8x (2.4, 2.8, 1.8, 2.7, 2.9: CI [1.96,
        # 3.15], inconclusive), in one A/A survey of five
        # 9 samples, of the same 0.3 ms: with 5, a stretch in which the host
        # ran the other vCPU elsewhere could set a replica's median (replicas of 1.35-3.21 within one
        # survey; inconclusive in 3 of 5 A/A surveys); longer samples see
        # more of such stretches (full's 2 ms samples read 1.9x there)
        "quick": {"samples": 9, "min_sample_ms": 0.3, "replicas": 7},
        # 7 replicas in full too: with 3 it read inconclusive in 3 of 5 full
        # surveys (each replica detected, the t interval over three wide);
        # a replica is ~1 s (docs/machine-notes.md, "Atomics")
        "full": {"samples": 9, "min_sample_ms": 2, "replicas": 7},
    }
    questions = (
        Question("atomics.single_thread", "What does one uncontended atomic increment (lock "
                 "xadd) cost?", "ns", "004", "median ns per fetch_add with one thread; every "
                 "operation in details", better=LOWER),
        Question("atomics.contended", "What does an atomic increment cost when every allowed "
                 "CPU increments the same variable?", "ns", "004",
                 "median ns per fetch_add per thread at the most threads measured; every "
                 "operation and thread count in details", better=LOWER,
                 # host-shared: every thread's lock xadd moves the line between the
                 # vCPUs, and the trip depends on which physical cores the host runs
                 # them on (sharing.core_to_core)
                 host_shared=True),
        Question("atomics.cas_ratio", "Is a compare-and-swap loop still about 3x the other "
                 "atomic increments under contention (Drepper: 0.73 s vs 0.23 s)?", "ratio",
                 "004", f"ratio of medians cas / fetch_add at the most threads measured; "
                 f"detected when its CI lies above {CAS_FAR_DEARER:.0f}x, not detected when "
                 f"below; the ranking of all operations in details", headline=True, band=(0.0, CAS_FAR_DEARER),
                 # host-shared: contended, so the line moves between the vCPUs on
                 # every operation, cas's retries with it; it moved between host
                 # states minutes apart beyond its replicas' spread in the A/As
                 # (docs/stability.md)
                 host_shared=True),
        Question("atomics.remote_line", "What does a lock add cost on a line another core keeps "
                 "writing?", "ns", "004", "median ns per lock add while other threads store to "
                 "the same line; its ratio to a lock add of a line the thread owns",
                 better=LOWER,
                 # host-shared: the line moves between the vCPUs on every lock add, and
                 # the trip depends on which physical cores the host runs them on
                 host_shared=True),
        Question("atomics.lost_updates", "Does a plain (not locked) increment lose updates when "
                 "threads share a variable?", "ratio", "004",
                 "share of the increments lost (1 - final / made), median over samples, at the "
                 "most threads measured; detected when above 0", scale="linear",
                 # host-shared: how the threads' plain increments interleave depends
                 # on which physical cores the host runs the vCPUs on
                 # (docs/machine-notes.md, "Atomics")
                 host_shared=True),
    )
    plots = (
        PlotSpec("ops", "ns per operation per thread, by thread count", kind="bars", x="arm",
                 series=("threads",), log_y=True, xlabel="operation (bars: threads)"),
    )

    # -- plan --
    def thread_counts(self, params, cpus):
        most = len(cpus) if not params["max_threads"] else min(params["max_threads"], len(cpus))
        return [1] + list(range(2, most + 1))

    def plan(self, params, machine):
        _, cpus = resolve_cpus(params)
        pts = []
        for t in self.thread_counts(params, cpus):
            pts += [Point(op, {"threads": t, "cpus": cpu_text(cpus[:t])}) for op in params["ops"]]
        return pts

    def estimate_seconds(self, params, machine):
        pts = self.plan(params, machine)
        return 2 + len(pts) * params["samples"] * 2 * 3 * max(params["min_sample_ms"], 1) / 1000

    # -- one trial --
    def prepare(self, point, params, lab):
        cpus = parse_cpu_text(point.params["cpus"])
        if cpus[0] != lab.cpu and lab.cpu in cpus:
            raise MemfxError(f"thread 0 must run on the measuring CPU {lab.cpu}, not {cpus[0]}")
        kernel = KERNELS[point.arm]
        region = shared_area(lab, cpus)
        count = calibrated_count(lab, kernel, region, len(cpus), 0)
        return Trial(kernel, dst=region, size=len(cpus), count=count, warmup=0,
                     extra=KernelReport(kernel, region, len(cpus)))

    def verify(self, lab, params):
        """Before timing: each kernel runs its threads on their CPUs and
        ends at the exact total (check_call raises otherwise); one thread
        alone loses no plain increment."""
        _, cpus = resolve_cpus(params)
        for op in params["ops"]:
            for use in ([cpus[0]], cpus[:2]) if len(cpus) > 1 else ([cpus[0]],):
                region = shared_area(lab, use)
                lab.call(Trial(KERNELS[op], dst=region, size=len(use)), 5000)
                header, slots = read_area(region, len(use))
                report = check_call(KERNELS[op], header, slots)
                if len(use) == 1 and report.get("lost_updates"):
                    raise MemfxError(f"{KERNELS[op]}: one thread lost {report['lost_updates']} "
                                     f"increments")
        lab.release()


__all__ = ["Atomics", "KERNELS", "OPS"]
