"""A busy machine and a moving host, as the lab sees them (issue 40).

- ``Plausibility``: a sample whose figures cannot be true in core cycles is
  rejected, not fatal; the run fails only when it persists.
- ``cpu_snapshot`` / ``busy_between``: how busy the machine was around a
  cell, from /proc/stat and the load average (results.busy_summary adds
  them up over a run).

Part of the lab layer: it reads the machine, never the store or analysis."""
from __future__ import annotations

import os
import time

from ..model.errors import MemfxError

# The core-cycle estimate (ticks x cycles per tick from dependent-add
# chains) is off when the host stalled the vCPU during the chains: on a
# shared machine one sample in many reads "too fast in cycles" with nothing
# optimised away.  Such a sample is rejected ("implausible"), as a context
# switch is; a run fails on it only when this many otherwise clean samples
# in a row of one kernel stay implausible under a fresh calibration.  The
# byte-exact checks before timing guard against optimised-away kernels.
IMPLAUSIBLE_PERSIST_SAMPLES = 8


class Plausibility:
    """Per-lab check of samples against what a core can do per cycle."""

    def __init__(self, max_bytes_per_cycle, min_cycles_per_dependent_load, calibrate):
        self.max_bytes_per_cycle = max_bytes_per_cycle
        self.min_cycles_per_dependent_load = min_cycles_per_dependent_load
        self.calibrate = calibrate          # () -> a fresh cycles per tick
        self.streak = {}                    # kernel -> clean samples in a row read implausible

    def why(self, row, count, nbytes, cycles, threads):
        """Why `cycles` for this work cannot be true, or None."""
        if nbytes / cycles > self.max_bytes_per_cycle * threads:
            return (f"{nbytes / cycles:.0f} bytes/cycle (limit {self.max_bytes_per_cycle:.0f}"
                    f"{' a thread' if threads > 1 else ''})")
        if row.op == "load" and row.group == "chase" and \
                cycles / (row.ops_per_iter * count) < self.min_cycles_per_dependent_load:
            return (f"{cycles / (row.ops_per_iter * count):.2f} cycles per dependent load "
                    f"(limit {self.min_cycles_per_dependent_load:.0f})")
        return None

    def check(self, row, kernel, count, nbytes, ticks, cycles, threads, clean, fixed=False):
        """Why this sample's figures cannot be true, or None.

        An implausible sample is rejected; IMPLAUSIBLE_PERSIST_SAMPLES
        otherwise clean ones in a row of one kernel get a fresh calibration
        of cycles per tick, and a sample still implausible under it fails
        the run (MemfxError saying what was checked).  clean: no other
        reason rejected the sample (a preempted one neither counts nor
        resets).  fixed: the cycles were counted by the PMU, not estimated:
        no calibration can help."""
        reason = self.why(row, count, nbytes, cycles, threads)
        if reason is None:
            if clean:
                self.streak[kernel] = 0
            return None
        if not clean:
            return reason
        streak = self.streak.get(kernel, 0) + 1
        self.streak[kernel] = streak
        if streak < IMPLAUSIBLE_PERSIST_SAMPLES:
            return reason
        still = reason if fixed else self.why(row, count, nbytes, ticks * self.calibrate(),
                                              threads)
        if still is None:
            self.streak[kernel] = 0
            return reason
        raise MemfxError(
            f"implausible result: {kernel} read {still} in {streak} clean samples in a "
            f"row{'' if fixed else ' and under a fresh cycle calibration'}; the work was "
            f"optimised away or the timer is wrong")


# The memfx processes above a worker (the runner that stores its samples, the
# forking host) are memfx's own work, not other work: up to this many
# ancestors whose command line names memfx.  The runner decodes and stores
# every sample the worker sends while it measures, enough beside short cells
# to mark a quiet run busy (docs/protocol.md, "How busy, measured").
MEMFX_ANCESTORS = 3
_ancestors: dict = {}  # this process's pid -> its memfx ancestors' pids


def _memfx_ancestors():
    """Pids of the memfx processes this one descends from (nearest first)."""
    me = os.getpid()
    if me not in _ancestors:
        pids, pid = [], os.getppid()
        for _ in range(MEMFX_ANCESTORS):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"memfx" not in f.read():
                        break
                with open(f"/proc/{pid}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                break
            pids.append(pid)
            pid = ppid
        _ancestors[me] = pids
    return _ancestors[me]


def _process_cpu_s(pid, hz):
    """User + system CPU seconds of process `pid` so far (proc(5) stat
    fields 14 and 15), 0.0 when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / hz
    except (OSError, ValueError, IndexError):
        return 0.0


def cpu_snapshot():
    """What the machine's CPUs did so far: (monotonic s, memfx's own CPU s
    (this process's and its memfx ancestors'), every CPU's non-idle s,
    steal s, all s, load average over 1 min), or None where /proc/stat
    cannot be read."""
    try:
        with open("/proc/stat", "rb") as f:
            head = f.readline().split()
    except OSError:
        return None
    # proc(5): cpu user nice system idle iowait irq softirq steal guest
    # guest_nice, in USER_HZ ticks; guest time is already counted in user
    ticks = [int(x) for x in head[1:9]] + [0] * max(0, 9 - len(head))
    hz = float(os.sysconf("SC_CLK_TCK"))
    total = sum(ticks[:8])
    idle = ticks[3] + ticks[4]
    t = os.times()
    own = t.user + t.system + sum(_process_cpu_s(p, hz) for p in _memfx_ancestors())
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return (time.monotonic(), own, (total - idle) / hz, ticks[7] / hz,
            total / hz, load)


def busy_between(before, after):
    """Sample counters (busy_*) saying how busy the machine was between two
    cpu_snapshot()s: wall seconds, CPU-seconds other processes used (every
    CPU's non-idle time less memfx's own), steal seconds (a guest's
    vCPUs waiting for the host), all CPU-seconds, and the load average.
    The others' seconds of one short cell can be negative: /proc/stat counts
    in clock ticks (10 ms), a process's own time more finely, and a cell of
    a few ms sees a tick or none.  They are summed over a run as they are
    (results.busy_summary clamps the sum): clamped cell by cell, a quiet
    run of short cells read busy (docs/protocol.md)."""
    if before is None or after is None:
        return {}
    wall = after[0] - before[0]
    others = (after[2] - before[2]) - (after[1] - before[1])
    out = {"busy_wall_s": round(wall, 6), "busy_others_s": round(others, 4),
           "busy_steal_s": round(max(0.0, after[3] - before[3]), 4),
           "busy_all_s": round(max(0.0, after[4] - before[4]), 4)}
    if after[5] is not None:
        out["busy_load_1m"] = after[5]
    return out
