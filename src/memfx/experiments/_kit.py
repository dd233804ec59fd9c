"""What the experiments share (the kit): the threads of a team kernel.

The sharing kernels (kernels/sharing.c, used by sharing and atomics) start
their threads themselves, pin them, and report per thread in a shared area
laid out below; the CPUs a run may use, the check of what a call reported,
and when a sample's threads really ran side by side live here, so that no
experiment imports another."""
from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from ..lab.core import core_layout
from ..lab.machine import parse_cpu_list
from ..model.errors import MemfxError, ParamError
from ..model.protocol import Trial

# ---- the shared area of kernels/sharing.c (byte offsets), as the core was
# built with it (lab/_core/layout_shared.h): read, never copied ----
_LAYOUT = core_layout()
HEADER, BARRIER, STOP, CPUS, SLOTS, SLOT_BYTES, COUNTERS = (
    _LAYOUT[f"SH_{name}"] for name in ("HEADER", "BARRIER", "STOP", "CPUS", "SLOTS",
                                       "SLOT_BYTES", "COUNTERS"))
MAX_THREADS = _LAYOUT["SH_MAX_THREADS"]
MAX_DISTANCE = _LAYOUT["SH_MAX_DISTANCE"]
HEADER_FIELDS = ("status", "final", "expected", "tsc_entry", "tsc_exit", "threads")
SLOT_FIELDS = ("cpu_asked", "cpu_start", "cpu_end", "tsc_start", "tsc_end", "switches",
               "address", "final", "ops", "checksum", "retries", "done", "ran")
STATUS = {1: "thread count outside 1..64", 2: "CPU number too large or given twice", 3: "pthread_create failed",
          4: "ping-pong needs exactly two threads", 5: "distance not a multiple of 8 in 8..65536"}
XCHG_TAG_SHIFT = _LAYOUT["XCHG_TAG_SHIFT"]
# A sample is concurrent when the shorter-running thread overlapped the
# other for at least this share of its run, with no context switch.
OVERLAP_MIN = 0.9
# A point needs at least this share of concurrent samples to be used.
CONCURRENT_SHARE_MIN = 0.5


# ---- CPUs ---------------------------------------------------------------

def _cpuset_cpus():
    """The CPUs this process's cgroup may use (cpuset), or the online CPUs."""
    try:
        with open("/proc/self/cpuset") as f:
            path = f.read().strip()
    except OSError:
        path = "/"
    for name in (f"/sys/fs/cgroup{path}/cpuset.cpus.effective",
                 f"/sys/fs/cgroup/cpuset{path}/cpuset.effective_cpus",
                 "/sys/devices/system/cpu/online"):
        try:
            with open(name) as f:
                cpus = parse_cpu_list(f.read())
        except OSError:
            continue
        if cpus:
            return cpus
    return []


def allowed_cpus(caller=None):
    """CPUs this process may run threads on: its affinity mask.  In the
    measuring worker the lab has pinned the process to its CPU (`caller`),
    so the mask no longer says where the other threads may go; there the
    cgroup's CPU set does (plan already checked the list against the mask
    of the unpinned CLI)."""
    mask = sorted(os.sched_getaffinity(0))
    if caller is not None and caller >= 0 and mask == [caller]:
        return sorted(set(_cpuset_cpus()) | set(mask))
    return mask


def resolve_cpus(params):
    """(caller CPU, CPUs to use), the caller (the lab's CPU, thread 0) first.
    `cpus` auto = the affinity mask.  Writes the resolution back into params
    (cpus, cpu), so the run records it and the worker plans the same points.
    ParamError names a CPU the process may not use."""
    want = params.get("cpus", "auto")
    caller = params.get("cpu", -1)
    caller = -1 if caller is None else caller
    if not want:
        raise ParamError("cpus: give at least one CPU")
    if want in ("auto", None):
        allowed = allowed_cpus()
        cpus = list(allowed)
    else:
        allowed = allowed_cpus(caller)
        cpus = list(dict.fromkeys(want))
    for c in cpus:
        if c not in allowed:
            raise ParamError(f"cpus: CPU {c} is not available to this process "
                             f"(allowed: {','.join(map(str, allowed))})")
    if caller < 0:      # the lab's default CPU, when the list uses it
        caller = allowed[-1] if allowed[-1] in cpus else cpus[0]
    if caller not in allowed:
        raise ParamError(f"cpu: CPU {caller} is not available to this process "
                         f"(allowed: {','.join(map(str, allowed))})")
    if caller in cpus:
        cpus.remove(caller)
        cpus.insert(0, caller)
    params["cpus"], params["cpu"] = list(cpus), caller
    return caller, cpus


def cpu_text(cpus):
    """A point's CPU list, in order, measuring CPU first: [1, 0] -> "1,0"."""
    return ",".join(str(c) for c in cpus)


def parse_cpu_text(text):
    """cpu_text's inverse (machine.parse_cpu_list, keeping the order)."""
    return parse_cpu_list(text, ordered=True)


# ---- the shared area and its report ----------------------------------------

def shared_area(lab, cpus, span=64):
    """A page-aligned area for one sharing kernel: header, the CPUs (thread
    i on cpus[i]), the results slots, then `span` bytes of counters."""
    if not 1 <= len(cpus) <= MAX_THREADS:
        raise ParamError(f"threads: 1..{MAX_THREADS}, got {len(cpus)}")
    region = lab.buffer(COUNTERS + span + 64)
    words = np.frombuffer(region.buffer, dtype=np.uint64, count=MAX_THREADS,
                          offset=region.offset + CPUS)
    words[:len(cpus)] = cpus
    del words
    return region


def read_area(region, threads):
    """(header dict, list of slot dicts) of the kernel's last call."""
    words = np.frombuffer(region.buffer, dtype=np.uint64,
                          count=(SLOTS + threads * SLOT_BYTES) // 8, offset=region.offset)
    header = {k: int(words[i]) for i, k in enumerate(HEADER_FIELDS)}
    slots = []
    for t in range(threads):
        base = (SLOTS + t * SLOT_BYTES) // 8
        slots.append({k: int(words[base + i]) for i, k in enumerate(SLOT_FIELDS)})
    del words
    return header, slots


def overlap_of_shorter(slots):
    """Share of the shorter thread's run during which every other thread ran
    too (1.0 for one thread): the lab's one overlap rule for a team that runs
    together (lab.team_overlap)."""
    from ..lab.sampling import team_overlap
    return team_overlap("together", slots)


def check_call(kernel, header, slots, count=None):
    """What one call reported, as numbers for the sample; raises MemfxError
    when the kernel failed, a thread ran off its CPU, or an operation that
    must be exact lost or invented an update.  Plain increments of one
    shared variable may lose updates: counted, not an error."""
    status = header["status"]
    if status:
        code, err = status & 0xFF, (status >> 8) & 0xFFFF
        extra = f": {os.strerror(err)}" if code == 3 and err else ""
        raise MemfxError(f"{kernel}: {STATUS.get(code, f'status {status}')}{extra}")
    for i, s in enumerate(slots):
        if not s["ran"]:
            raise MemfxError(f"{kernel}: thread {i} did not run")
        if s["cpu_start"] != s["cpu_asked"] or s["cpu_end"] != s["cpu_asked"]:
            raise MemfxError(f"{kernel}: thread {i} ran on CPU {s['cpu_start']}..{s['cpu_end']}, "
                             f"not on CPU {s['cpu_asked']} it was pinned to")
    n = len(slots)
    final, expected = header["final"], header["expected"]
    out = {"threads": n, "overlap": round(overlap_of_shorter(slots), 4),
           "thread_switches": sum(s["switches"] for s in slots),
           "window_ticks": max(s["tsc_end"] for s in slots) - min(s["tsc_start"] for s in slots),
           "setup_ticks": min(s["tsc_start"] for s in slots) - header["tsc_entry"]}
    if kernel in ("fs_plain", "fs_atomic"):
        per = [s["final"] for s in slots]
        if any(v != per[0] for v in per) or final != expected or final != n * slots[0]["ops"]:
            raise MemfxError(f"{kernel}: counters ended at {per}, expected {expected // n} each")
    elif kernel == "at_plain":
        if final > expected:
            raise MemfxError(f"{kernel}: {final} increments counted, only {expected} made")
        out["lost_updates"] = expected - final
        out["lost_share"] = (expected - final) / expected if expected else 0.0
    elif kernel == "at_xchg":
        tag, seq = final >> XCHG_TAG_SHIFT, final & ((1 << XCHG_TAG_SHIFT) - 1)
        if not 1 <= tag <= n or seq != expected:
            raise MemfxError(f"{kernel}: the variable ends at thread {tag - 1}'s value {seq}, "
                             f"not a thread's last value {expected}")
    elif final != expected:
        raise MemfxError(f"{kernel}: the variable ends at {final}, expected {expected} "
                         f"(an atomic operation lost an update)")
    if kernel == "at_cas":
        ops = sum(s["ops"] for s in slots)
        out["cas_retries_per_op"] = sum(s["retries"] for s in slots) / ops if ops else 0.0
    if kernel == "at_remote" and n > 1:
        out["writer_stores"] = sum(s["ops"] for s in slots[1:])
    return out


class KernelReport(Mapping):
    """Trial.extra for a sharing kernel: a live view of the results area.
    The lab records extra with every sample right after the call
    (counters.update(trial.extra)), so each sample carries its own overlap,
    context switches and checks; a failed check stops the run there."""

    def __init__(self, kernel, region, threads):
        self.kernel, self.region, self.threads = kernel, region, threads
        self._snapshot = {}

    def _read(self):
        header, slots = read_area(self.region, self.threads)
        self._snapshot = check_call(self.kernel, header, slots)
        return self._snapshot

    def keys(self):
        return self._read().keys()

    def __iter__(self):
        return iter(self._read())

    def __getitem__(self, key):
        return self._snapshot[key]

    def __len__(self):
        return len(self._snapshot)


# calibrated_count's time budget: on a machine whose CPUs are all busy no try
# is concurrent, and doubling the count until one is ran a quick survey's
# atomics for minutes (2^34 iterations).  Past this many seconds the count
# comes from the shortest window seen, clean or not (a preempted window is
# only longer, so the count errs short, and the samples' own concurrency
# check rejects what ran apart).
CALIBRATE_MAX_SECONDS = 1.0


def calibrated_count(lab, kernel, region, threads, aux, floor=4096, tries=6, sample_ms=None,
                     max_seconds=CALIBRATE_MAX_SECONDS, clock=None):
    """Iterations so that the threads' own window (barrier to last finisher)
    lasts min_sample_ms: thread start-up is not part of what is calibrated.
    Only a concurrent try counts (no thread switched out, the threads'
    runs overlapping); a vCPU the host stalls inflates a window without
    any switch the guest sees, so the shortest of a few clean windows is
    used, and the floor keeps each thread's run far longer than the skew of
    their starts.  A count with no clean try grows only as far as the
    shortest window it had says (never accepted on it, never doubled: a
    longer run is only more likely to be switched out) until max_seconds
    have passed; then the shortest window of any try decides."""
    import time
    clock = clock or time.monotonic
    started = clock()
    target = (sample_ms or lab.min_sample_ms) * 1e-3 * lab.tsc_hz
    count = floor
    for _ in range(40):
        clean, dirty = [], []
        for _ in range(tries):
            lab.call(Trial(kernel, dst=region, size=threads, aux=aux), count)
            header, slots = read_area(region, threads)
            report = check_call(kernel, header, slots)
            concurrent = not report["thread_switches"] and report["overlap"] >= OVERLAP_MIN
            (clean if concurrent else dirty).append(report["window_ticks"])
            if len(clean) >= 3 or clock() - started > max_seconds:
                break
        if count >= 1 << 34:
            return count
        out_of_time = clock() - started > max_seconds
        window = min(clean) if clean else min(dirty)
        if clean and window >= target:
            return count
        grown = max(count * 2, int(count * min(target / max(window, 1) * 1.2, 64)))
        if not clean:
            # a dirty window is the work plus the time switched out: its
            # count is an upper bound on what fits, so aim there (not twice
            # it) and let a later clean try confirm it
            grown = max(count, int(count * min(target / max(window, 1), 64)))
        if out_of_time:
            return max(count if window >= target else grown, floor)
        count = grown
    return count


def concurrent_share(samples):
    """Share of samples in which the threads ran at the same time."""
    if not samples:
        return 0.0
    return sum(1 for s in samples if is_concurrent(s)) / len(samples)


def samples_of(data, point):
    return [s for s in data.samples if s["arm"] == point["arm"] and s["point"] == point["params"]]


def is_concurrent(sample):
    c = sample.get("counters") or {}
    return (c.get("overlap") or 0) >= OVERLAP_MIN and not c.get("thread_switches")


def concurrent_values(data, point):
    """Per-sample values of the point's longest run length from the samples
    whose threads all ran side by side (the ratios use these); the point's
    values when no sample qualifies."""
    ss = samples_of(data, point)
    longest = max((s.get("length", 0) for s in ss), default=0)
    vals = [s["value"] for s in ss if s.get("length", 0) == longest and is_concurrent(s)]
    return vals if vals else list(point["values"])
