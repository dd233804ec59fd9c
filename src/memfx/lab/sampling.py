"""The Lab's sampling: a trial's kernel call, its calibration, one sample
(its time, counters, plausibility and how much of it the machine took
away), and team calls on several pinned threads."""
from __future__ import annotations

import mmap
import resource
import time
from typing import Dict

from ..model.errors import MemfxError
from ..model.protocol import Trial
from . import _core
from .busy import Plausibility
from .core import KERNEL_TICKS_FAILED, KernelRow
from .harness import calibrated_count
from .perf import PerfCounters

# The core's speed (Sampling.core_speed): a loads-only read of this many
# bytes, which L1d holds on every x86 core, with the widest row this CPU
# runs, the best of this many calls of about this many ms each (~1 ms in
# all, once per cell).
CORE_REFERENCE_BYTES = 16 << 10
CORE_REFERENCE_KERNELS = ("bw_read_avx512", "bw_read_avx2", "bw_read_sse2", "bw_read_scalar")
CORE_REFERENCE_REPEATS = 5
CORE_REFERENCE_CALL_MS = 0.2
# Plausibility limit: no x86 core moves more than this many bytes per core
# cycle through L1 (two 64-byte loads + one 64-byte store per cycle on
# Golden Cove / Zen 4, per their optimisation manuals), so more means the
# work was optimised away.
MAX_BYTES_PER_CYCLE = 256.0
# and no dependent load completes in under 2 core cycles.
MIN_CYCLES_PER_DEPENDENT_LOAD = 2.0

# A sample that saw a context switch is rejected, unless it is long and the
# time it spent waiting for the CPU was negligible: a one-call fill of 1 GiB
# lasts ~30 ms, and on a shared machine almost every sample that long is
# preempted once for some microseconds.  The wait comes from the thread's
# run-queue wait time (/proc/thread-self/schedstat, field 2, ns; present with
# CONFIG_SCHED_INFO); without it every context switch still rejects.  Below
# PREEMPT_MIN_SAMPLE_NS a preemption also costs the refill of the private
# caches that the other task evicted (~1 MiB of L2: tens of us), which is no
# longer negligible, so short samples are always rejected.
PREEMPT_MIN_SAMPLE_NS = 10e6
PREEMPT_MAX_SHARE = 0.005
# A working set beyond the last-level cache streams from DRAM whether or not
# another task ran in between: a preempted sample of it is corrected (its
# run-queue wait taken out) instead of retaken, when it ran for at least
# PREEMPT_CORRECT_MIN_RUN_NS and waited at most PREEMPT_CORRECT_MAX_SHARE of
# its window.  With two CPU-bound neighbours on two vCPUs each long DRAM
# sample waits ~45 % of its window, so retaking them all made fill 4x slower
# (issue 40); a switch costs microseconds against milliseconds of run.
PREEMPT_CORRECT_MIN_RUN_NS = 2e6
PREEMPT_CORRECT_MAX_SHARE = 0.8

# A team sample counts only when its threads really ran side by side: in
# "together" mode the shortest member's run overlaps every other member's
# for at least this share of it; in "background" mode every loader runs
# during at least this share of the timed member's window.  Below it the
# sample is rejected ("not_concurrent"): a late or stalled thread would
# otherwise pass its start-up skew off as bandwidth or as an idle latency.
TEAM_OVERLAP_MIN = 0.9

# calibrate() trusts the warm-up's timing when each warm-up call lasted at
# least this many samples' worth (min_sample_ms): one call is then a sample.
WARM_CALL_SAMPLES = 2.0


# Each sample carries the windows of this many members at most (a sample of
# a 64-thread team would otherwise carry 128 numbers).
TEAM_WINDOWS_RECORDED = 8
# What _core.team_run reports per member, in order.
TEAM_FIELDS = ("tsc_start", "tsc_end", "cpu_start", "cpu_end", "switches", "wait_ns", "calls",
               "result")


def team_overlap(mode, threads):
    """Share of the concurrency a team call needed that it got.
    together: the share of the shortest member's run during which every
    other member ran too (max(0, earliest end - latest start) / shortest);
    background: the smallest share of member 0's window covered by a
    loader's run.  1.0 for a team of one."""
    runs = [(th["tsc_start"], th["tsc_end"]) for th in threads]
    if len(runs) < 2:
        return 1.0
    if mode == "together":
        shortest = min(e - s for s, e in runs)
        common = min(e for _, e in runs) - max(s for s, _ in runs)
        if shortest <= 0:
            return 1.0 if common >= 0 else 0.0
        return max(0.0, min(1.0, common / shortest))
    s0, e0 = runs[0]
    if e0 <= s0:
        return 1.0 if all(s <= s0 and e >= e0 for s, e in runs[1:]) else 0.0
    return min(max(0.0, min(e, e0) - max(s, s0)) / (e0 - s0) for s, e in runs[1:])


def team_report(mode, release, threads, tsc_hz):
    """The counters a team sample carries (team_*): threads, overlap (see
    team_overlap), start skew (latest start after the release, ns),
    context switches and the longest run-queue wait of any member, the
    windows of the first TEAM_WINDOWS_RECORDED members relative to the
    release (ns), and for background teams
    the loaders' calls and their aggregate GB/s over their own runs."""
    to_ns = 1e9 / tsc_hz
    out = {"team_threads": len(threads), "team_mode_background": int(mode == "background"),
           "team_overlap": round(team_overlap(mode, threads), 4),
           "team_start_skew_ns": (max(th["tsc_start"] for th in threads) - release) * to_ns,
           "team_switches": sum(th["switches"] for th in threads)}
    waits = [th["wait_ns"] for th in threads if th["wait_ns"] is not None]
    if waits:
        out["team_wait_ns"] = max(waits)
    for i, th in enumerate(threads[:TEAM_WINDOWS_RECORDED]):
        out[f"team_start_ns_{i}"] = (th["tsc_start"] - release) * to_ns
        out[f"team_end_ns_{i}"] = (th["tsc_end"] - release) * to_ns
    if mode == "background" and len(threads) > 1:
        loaders = threads[1:]
        out["team_loader_calls"] = sum(th["calls"] for th in loaders)
        gbs = 0.0
        for th in loaders:
            rd, wr = th["row"].traffic(th["size"], th["count"])
            span = (th["tsc_end"] - th["tsc_start"]) * to_ns
            gbs += (rd + wr) * th["calls"] / span if span > 0 else 0.0
        out["team_loader_gb_per_s"] = gbs
    return out


def _cpu_times_ns():
    """(user, system) CPU time of this thread, ns (getrusage RUSAGE_THREAD)."""
    r = resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF))
    return r.ru_utime * 1e9, r.ru_stime * 1e9


def _open_schedstat():
    """This thread's /proc/thread-self/schedstat (bound to the thread that
    opens it: the worker's sampling thread), or None."""
    try:
        return open("/proc/thread-self/schedstat", "rb", buffering=0)
    except OSError:
        return None


def _streams_from_dram(row, trial, llc_bytes):
    """True when the trial's working set (every region it reads or writes)
    is larger than the last-level cache, so no cache holds it."""
    regions = (row.read_per_byte > 0) + (row.write_per_byte > 0)
    return bool(llc_bytes) and trial.size * max(trial.chunks, 1) * regions > llc_bytes


def _preemption_negligible(sample_ns, waited_ns):
    """True when a context switch in a sample of sample_ns cost at most
    PREEMPT_MAX_SHARE of it (waited_ns of run-queue wait) and the sample is
    long enough for the cache refill after it not to matter."""
    return (waited_ns is not None and sample_ns >= PREEMPT_MIN_SAMPLE_NS
            and waited_ns <= PREEMPT_MAX_SHARE * sample_ns)


def now():
    return time.monotonic()


class Sampling:
    """Timing trials (mixed into Lab, which owns the state: the pinned CPU,
    tsc_hz, perf counters)."""

    # the Lab's state this part reads (set by Lab.__init__)
    cpu: int
    kernels: Dict[str, KernelRow]
    tsc_hz: float
    min_sample_ms: float
    perf: PerfCounters
    plausibility: Plausibility

    def _run_queue_wait(self):
        """ns this thread has waited for a CPU since it started, or None."""
        f = self._schedstat
        if f is None:
            return None
        try:
            f.seek(0)
            return int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            return None

    # -- cycles --
    def cycles_per_tick(self, adds=200_000, repeats=5):
        """Core cycles per TSC tick from dependent-add chains: the best and the spread.

        A chain that is preempted or interrupted only takes longer, so the
        fastest of the repeats is the clean one; a median of chains on a busy
        CPU read low and made a cell's chase look implausibly fast in cycles."""
        ratios = [adds / _core.add_chain(adds) for _ in range(repeats)]
        best = max(ratios)
        spread = (best - min(ratios)) / best
        self.calibrations.append(best)
        return best, spread

    # -- the core's speed --
    def core_speed(self):
        """GB/s of a read of CORE_REFERENCE_BYTES that stays in L1d, the best
        of CORE_REFERENCE_REPEATS calls of about CORE_REFERENCE_CALL_MS each
        (0.0 where no read row runs here).  The load ports of a core are what
        a host shares with the other thread of that core, so this moves with
        the share of its core the host lends the vCPU and with its clock,
        which the dependent-add chains of cycles_per_tick do not see (a
        chain needs one adder; a sibling thread leaves it free).  A call that
        is preempted only reads slower, hence the best of them."""
        ref = getattr(self, "_core_reference", None)
        if ref is None:
            row = next((self.kernels[n] for n in CORE_REFERENCE_KERNELS
                        if n in self.kernels and self.kernels[n].supported), None)
            if row is None:
                self._core_reference = ref = (None, None, 0)
            else:
                buf = mmap.mmap(-1, CORE_REFERENCE_BYTES)     # page-aligned, in L1d after one pass
                # calls of a fixed length, calibrated once on a warm buffer
                per_pass = 0.0
                for passes in (64, 1024):
                    ticks = _core.run(row.index, None, 0, buf, 0, CORE_REFERENCE_BYTES, 0,
                                      passes, 0)[0]
                    per_pass = max(ticks, 1) / passes
                target = CORE_REFERENCE_CALL_MS * 1e-3 * self.tsc_hz
                self._core_reference = ref = (row, buf, max(1, int(target / per_pass)))
        row, buf, count = ref
        if row is None:
            return 0.0
        best = min(_core.run(row.index, None, 0, buf, 0, CORE_REFERENCE_BYTES, 0, count, 0)[0]
                   for _ in range(CORE_REFERENCE_REPEATS))
        return CORE_REFERENCE_BYTES * count / (best / self.tsc_hz) / 1e9

    # -- timing --
    def _row(self, trial: Trial):
        row = self.kernels.get(trial.kernel)
        if row is None:
            raise MemfxError(f"no kernel {trial.kernel!r} in the core")
        if not row.supported:
            raise MemfxError(f"kernel {trial.kernel} needs {row.isa}, which this CPU lacks")
        return row

    def _call(self, row, trial, count):
        if trial.team is not None:
            return self._team_call(row, trial, count)
        dst, src = trial.dst, trial.src
        out = _core.run(row.index,
                        dst.buffer if dst else None, dst.offset if dst else 0,
                        src.buffer if src else None, src.offset if src else 0,
                        trial.size, trial.value & 0xFFFFFFFFFFFFFFFF, count, trial.aux,
                        self.perf.leaders, self.perf.user_pages or None,
                        trial.chunks, trial.next_chunk, trial.dst_step, trial.src_step)
        if trial.chunks > 1:
            trial.next_chunk = (trial.next_chunk + count) % trial.chunks
        if trial.resume:
            # A chase continues from the element it stopped at, so runs of N
            # and 2N steps walk the same mix of lines (not the chain's head).
            src.offset = src.offset + out[3] - src.address
            src.address = out[3]
        return out

    def call(self, trial: Trial, count: int):
        """Run a kernel untimed and return what it returns (for verify())."""
        return self._call(self._row(trial), trial, count)[3]

    def warm(self, trial: Trial, count: int):
        """Run untimed (no sample is recorded), to bring the working set into
        the caches and TLBs.  Returns its ns per iteration."""
        ticks = self._call(self._row(trial), trial, count)[0]
        # calibrate() reads this: a warm-up whose calls each lasted two
        # samples needs no calibration call (a whole-pass fill of a 960 MiB
        # region is 0.13 s, three per DRAM cell of quick fill)
        self._warmed = (trial, ticks / max(count, 1))
        return ticks * 1e9 / self.tsc_hz / max(count, 1)

    def calibrate(self, trial: Trial):
        """Iterations so that one sample lasts at least min_sample_ms."""
        row = self._row(trial)
        if trial.count:
            return trial.count
        target = self.min_sample_ms * 1e-3 * self.tsc_hz
        warmed = self._warmed
        if warmed is not None and warmed[0] is trial and warmed[1] >= WARM_CALL_SAMPLES * target:
            return 1
        return calibrated_count(lambda count: self._call(row, trial, count)[0], target)

    def _correctable(self, row, trial, ns, waited):
        """A preempted sample whose wait can be taken out (PREEMPT_CORRECT_*)."""
        return (waited is not None and 0 < waited <= PREEMPT_CORRECT_MAX_SHARE * ns
                and ns - waited >= PREEMPT_CORRECT_MIN_RUN_NS
                and _streams_from_dram(row, trial, self.llc_bytes))

    def sample(self, trial: Trial, count: int, cycles_per_tick: float):
        """Time one sample; return the sample record (without arm/point)."""
        row = self._row(trial)
        if trial.cpu_times:
            user0, sys0 = _cpu_times_ns()
        wait0 = self._run_queue_wait()
        ticks, cpu0, cpu1, _result, deltas = self._call(row, trial, count)
        if trial.kernel_ticks:
            if _result >= KERNEL_TICKS_FAILED:
                raise MemfxError(f"{trial.kernel} could not time its part (mapping refused)")
            ticks = _result
        wait1 = self._run_queue_wait()
        if trial.cpu_times:
            user1, sys1 = _cpu_times_ns()
        ns = ticks * 1e9 / self.tsc_hz
        if trial.team is not None:
            return self._team_sample(row, trial, count, ticks, cycles_per_tick)
        counters = self.perf.decode(deltas)
        counters["cpu"] = cpu1
        if trial.cpu_times:
            counters.update(user_ns=user1 - user0, system_ns=sys1 - sys0)
        waited = wait1 - wait0 if wait0 is not None and wait1 is not None else None
        if waited is not None:
            counters["run_queue_wait_ns"] = waited
        if counters.get("context_switches") and self._correctable(row, trial, ns, waited):
            counters["wall_ns"] = ns      # the window; ns and ticks: the part that ran
            ticks *= (ns - waited) / ns
            ns -= waited
        counters.update(trial.extra)
        rd, wr = row.traffic(trial.size, count)
        cycles = counters.get("cycles") or ticks * cycles_per_tick
        if trial.metric == "bandwidth":
            metric, unit, value = "gb_per_s", "GB/s", (rd + wr) / ns if ns else 0.0
        else:
            ops = row.ops_per_iter * count
            metric, unit, value = f"ns_per_{row.op}", "ns", ns / ops
        reason = None
        if cpu0 != cpu1:
            reason = "migrated"
        elif counters.get("cpu_migrations"):
            reason = "migrated"
        elif counters.get("context_switches") and not (
                "wall_ns" in counters or _preemption_negligible(ns, waited)):
            reason = "context_switch"
        elif trial.reject_page_faults and counters.get("page_faults"):
            reason = "page_fault"
        measured_cycles = counters.get("cycles") is not None
        implausible = self.plausibility.check(row, trial.kernel, count, rd + wr, ticks, cycles, 1,
                                        clean=reason is None, fixed=measured_cycles)
        if implausible and reason is None:
            reason = "implausible"
            counters["implausible"] = implausible
        return {
            "metric": metric, "unit": unit, "value": value, "length": count, "ns": ns,
            "ticks": ticks, "cycles_est": cycles, "counters": counters,
            "rejected": reason is not None, "reason": reason,
        }

    # -- teams: one trial on several pinned threads (Trial.team) --
    def _team_members(self, row, trial, count):
        """The core's member tuples of a team trial, member 0 first."""
        team = trial.team
        if not team.members:
            raise MemfxError("a team needs at least one member")
        if team.mode not in ("together", "background"):
            raise MemfxError(f"team mode {team.mode!r}: together or background")
        out = []
        for i, m in enumerate(team.members):
            r = row if m.kernel is None else self._row(Trial(m.kernel))
            dst = m.dst if m.dst is not None else trial.dst
            src = m.src if m.src is not None else trial.src
            # together: every member does the timed work; background: the
            # loaders repeat calls of their own count (one pass by default)
            n = count if team.mode == "together" or i == 0 else (m.count or 1)
            out.append((r, m, (m.cpu, r.index,
                               dst.buffer if dst else None, dst.offset if dst else 0,
                               src.buffer if src else None, src.offset if src else 0,
                               trial.size if m.size is None else m.size,
                               (trial.value if m.value is None else m.value) & 0xFFFFFFFFFFFFFFFF,
                               n, trial.aux if m.aux is None else m.aux, m.delay_ticks,
                               m.chunks)))
        return out

    def _team_call(self, row, trial, count):
        """One team call; (ticks, cpu_start, cpu_end, result) of member 0 as
        _call returns them, ticks = the team's window (see Team).  What each
        member did is kept in self.last_team for _team_sample."""
        members = self._team_members(row, trial, count)
        release, rows = _core.team_run([t for _, _, t in members],
                                       trial.team.mode == "background")
        threads = [dict(zip(TEAM_FIELDS, r)) for r in rows]
        for (r, m, t), th in zip(members, threads):
            th.update(cpu_asked=m.cpu, row=r, size=t[6], count=t[8])
        if trial.team.mode == "together":
            ticks = max(th["tsc_end"] for th in threads) - release
        else:
            ticks = threads[0]["tsc_end"] - threads[0]["tsc_start"]
        self.last_team = {"release": release, "threads": threads, "mode": trial.team.mode,
                          "ticks": ticks}
        out0 = threads[0]
        if trial.resume:
            src = trial.src
            src.offset = src.offset + out0["result"] - src.address
            src.address = out0["result"]
        return ticks, out0["cpu_start"], out0["cpu_end"], out0["result"], None

    def _team_sample(self, row, trial, count, ticks, cycles_per_tick):
        """The sample record of a team call (see sample()): traffic of every
        member (together) or of member 0 (background); the team's timing
        and concurrency in the counters (team_*); rejected when a member
        left its CPU, the members did not run side by side, or a member was
        switched out for more than a negligible share of the window."""
        t = self.last_team
        threads = t["threads"]
        report = team_report(t["mode"], t["release"], threads, self.tsc_hz)
        ns = ticks * 1e9 / self.tsc_hz
        counters = dict(report)
        counters["cpu"] = threads[0]["cpu_end"]
        counters.update(trial.extra)
        timed = threads if t["mode"] == "together" else threads[:1]
        rd = wr = 0.0
        for th in timed:
            a, b = th["row"].traffic(th["size"], th["count"])
            rd, wr = rd + a, wr + b
        cycles = ticks * cycles_per_tick
        if trial.metric == "bandwidth":
            metric, unit, value = "gb_per_s", "GB/s", (rd + wr) / ns if ns else 0.0
        else:
            ops = row.ops_per_iter * count
            metric, unit, value = f"ns_per_{row.op}", "ns", ns / ops
        waits = [th["wait_ns"] for th in threads]
        waited = None if any(w is None for w in waits) else max(waits)
        reason = None
        if any(th["cpu_start"] != th["cpu_asked"] or th["cpu_end"] != th["cpu_asked"]
               for th in threads):
            reason = "migrated"
        elif report["team_overlap"] < TEAM_OVERLAP_MIN:
            reason = "not_concurrent"
        elif report["team_switches"] and not _preemption_negligible(ns, waited):
            reason = "context_switch"
        implausible = self.plausibility.check(row, trial.kernel, count, rd + wr, ticks, cycles, len(timed),
                                        clean=reason is None) if cycles else None
        if implausible and reason is None:
            reason = "implausible"
            counters["implausible"] = implausible
        return {
            "metric": metric, "unit": unit, "value": value, "length": count, "ns": ns,
            "ticks": ticks, "cycles_est": cycles, "counters": counters,
            "rejected": reason is not None, "reason": reason,
        }

    def team_call(self, trial: Trial, count: int):
        """Run a team trial untimed; the per-member record (tests, verify)."""
        self._call(self._row(trial), trial, count)
        return self.last_team
