"""The measuring side (runs in the worker process): buffers, pinning, perf
counters, cycle calibration and the sampling loop.  Every number memfx
reports is timed here, by one code path, from the kernel table's traffic.
The perf counter groups are in perf.py (re-exported here)."""
from __future__ import annotations

import ctypes
import mmap
import os
import random
import resource
import time
import weakref
from dataclasses import dataclass

from ..model.errors import MemfxError, ParamError
from ..model.protocol import Region, Trial
from ..model.units import format_size
from . import _core
from .busy import Plausibility
from .harness import calibrated_count
from .perf import (  # noqa: F401
    HARDWARE_EVENTS,
    PERF_TYPE_HARDWARE,
    PERF_TYPE_RAW,
    PERF_TYPE_SOFTWARE,
    SOFTWARE_EVENTS,
    PerfCounters,
)

PAGE = mmap.PAGESIZE
HUGE_PAGE = 2 << 20
# mmap(2): MAP_HUGETLB, and log2(page size) in the flags from bit MAP_HUGE_SHIFT
# (include/uapi/asm-generic/hugetlb_encode.h).
MAP_HUGETLB = getattr(mmap, "MAP_HUGETLB", 0x40000)
MAP_HUGE_SHIFT = 26

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


@dataclass
class KernelRow:
    index: int
    name: str
    group: str
    isa: str
    read_per_byte: float
    write_per_byte: float
    read_fixed: float
    write_fixed: float
    ops_per_iter: float
    op: str
    doc: str
    supported: bool

    def traffic(self, size, count):
        """Bytes read and written by `count` iterations over `size` bytes."""
        rd = (self.read_per_byte * size + self.read_fixed) * count
        wr = (self.write_per_byte * size + self.write_fixed) * count
        return rd, wr


def kernel_table():
    return {row["name"]: KernelRow(**row) for row in _core.kernels()}


# A kernel_ticks row returns UINT64_MAX (or - 1) when it could not run its part.
KERNEL_TICKS_FAILED = (1 << 64) - 2


class Lab:
    """Per-worker measuring context."""

    def __init__(self, cpu=-1, seed=1, min_sample_ms=1.0, hardware_counters=True):
        self.cpu = self._pin(cpu)
        self.rng = random.Random(seed)
        self.seed = seed
        self._warmed = None       # (trial, ticks per call) of the last warm()
        self.min_sample_ms = min_sample_ms
        self.kernels = kernel_table()
        self.tsc_hz = _core.tsc_hz(50.0)
        self.perf = PerfCounters(hardware=hardware_counters)
        self.buffers = []
        self._holes = []          # (address, length) mapped by invalid_addresses()
        self.calibrations = []
        self.plausibility = Plausibility(MAX_BYTES_PER_CYCLE, MIN_CYCLES_PER_DEPENDENT_LOAD,
                                         lambda: self.cycles_per_tick()[0])
        self._schedstat = _open_schedstat()
        # A lab dropped without close() (a test, an exception) still closes
        # its file: left to the garbage collector, the file's ResourceWarning
        # lands in whatever stderr is current then -- another command's.
        if self._schedstat is not None:
            weakref.finalize(self, self._schedstat.close)
        weakref.finalize(self, self.perf.close)       # its perf_event fds, likewise
        # Per-run scratch of the experiments (buffers shared by the arms of a
        # cell, events attached once): kept on the lab, never on the
        # registered experiment objects; emptied by close() at the end of the run.
        self.cache = {}
        # what the arms of one cell share (e.g. one pointer chain linked once
        # for the idle and the loaded chase); release() empties it
        self.cell_cache = {}
        self.last_team = None     # what each member of the last team call did
        # the last-level cache the OS reports, bytes (the worker sets it from
        # the machine; None = unknown): what a cell may assume no cache holds
        self.llc_bytes = None
        self.run_buffers = []     # mappings that live until close(), not release()

    @staticmethod
    def _pin(cpu):
        allowed = sorted(os.sched_getaffinity(0))
        if cpu < 0:
            cpu = allowed[-1]
        if cpu not in allowed:
            raise ParamError(f"cpu: CPU {cpu} is not available to this process (allowed: {allowed})")
        os.sched_setaffinity(0, {cpu})
        return cpu

    # -- buffers --
    def buffer(self, size, align=PAGE, offset=0, hugepages=False, prefault=True):
        """An anonymous mapping of at least `size` bytes whose Region starts
        `offset` bytes past an `align`-aligned address, pre-faulted."""
        if size < 0:
            raise ParamError(f"negative buffer size {size}")
        check_fits(size)
        align = max(align, HUGE_PAGE if hugepages else PAGE)
        # A huge page needs its whole aligned 2 MiB span inside the mapping:
        # a THP buffer is mapped in whole huge pages past the aligned start, or
        # one smaller than 2 MiB is huge-backed only when the mapping happens
        # to land well (seen: a 512 KiB THP arm huge on one run, not the next).
        granule = HUGE_PAGE if hugepages else PAGE
        length = align + (size + offset + granule - 1) // granule * granule
        try:
            m = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except OSError as e:
            raise MemfxError(f"cannot map {format_size(length)}: {e.strerror}") from None
        _advise_pages(m, hugepages)
        base = _core.address(m)
        start = (-base) % align + offset
        if prefault:
            _core.touch(m, 0, length, PAGE)
        self.buffers.append(m)
        return Region(m, start, size, base + start)

    def hugetlb_buffer(self, size, page_bytes):
        """An anonymous mapping of `size` bytes (rounded up to whole pages) on
        hugetlb pages of page_bytes (MAP_HUGETLB with the page size in the
        flags' MAP_HUGE_SHIFT bits, mmap(2)); the pages must be reserved
        (/sys/kernel/mm/hugepages/): MemfxError otherwise.  Pre-faulted;
        unmapped by release()."""
        shift = page_bytes.bit_length() - 1
        if page_bytes <= 0 or 1 << shift != page_bytes:
            raise ParamError(f"hugetlb page size {page_bytes} is not a power of two")
        length = max(1, -(-size // page_bytes)) * page_bytes
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_HUGETLB | (shift << MAP_HUGE_SHIFT)
        try:
            m = mmap.mmap(-1, length, flags=flags)
        except OSError as e:
            raise MemfxError(f"cannot map {format_size(length)} on {format_size(page_bytes)} "
                             f"hugetlb pages: {e.strerror}") from None
        _core.touch(m, 0, length, PAGE)
        self.buffers.append(m)
        return Region(m, 0, size, _core.address(m))

    def release(self):
        """End of a cell: its buffers are unmapped and what its trials shared
        (cell_cache) is dropped."""
        self.cell_cache = {}
        _unmap_all(self.buffers)
        self.buffers = []
        for addr, length in getattr(self, "_holes", ()):
            _libc().munmap(ctypes.c_void_p(addr), ctypes.c_size_t(length))
        self._holes = []

    def link_chain(self, region, element, n, order=None):
        """Link a cyclic pointer chain of n `element`-byte elements in the
        region (order = visiting order of element indices, None = address
        order); the core writes the pointers.  Returns the Region to pass as
        a chase kernel's src."""
        chain = _core.link_chain(region.buffer, region.offset, element, n, order)
        return Region(chain, region.offset, region.size, region.address)

    def invalid_addresses(self):
        """Addresses a prefetch may be aimed at that no load could use, by
        name: NULL; a page unmapped inside a mapped range (mmap three pages,
        munmap the middle one); a PROT_NONE page; a kernel-half address; a
        non-canonical address.  The holes live until release().  Only ever
        handed to prefetch kernels, which never dereference them."""
        page = PAGE
        libc = _libc()
        # One reservation of five pages: RW, hole, RW, PROT_NONE, RW.  The
        # PROT_NONE page is made inside it (mprotect), not by a later mmap:
        # a one-page mmap right after the munmap can land in the one-page
        # hole the kernel has just freed, and "unmapped" would then be a
        # PROT_NONE page (docs/machine-notes.md, "The unmapped hole").
        base = libc.mmap(None, ctypes.c_size_t(5 * page), 3, 0x22, -1, 0)  # RW, PRIVATE|ANON
        if base in (None, ctypes.c_void_p(-1).value):
            raise MemfxError("cannot map the pages for an unmapped hole")
        self._holes.append((base, 5 * page))
        if (libc.munmap(ctypes.c_void_p(base + page), ctypes.c_size_t(page)) != 0
                or libc.mprotect(ctypes.c_void_p(base + 3 * page), ctypes.c_size_t(page), 0) != 0):
            raise MemfxError("cannot punch the unmapped and PROT_NONE pages of the hole")
        return {
            "null": 0,
            "unmapped": base + page + 64,
            "prot_none": base + 3 * page + 64,
            # The upper half is the kernel's on x86-64 Linux (Documentation/
            # arch/x86/x86_64/mm.rst); this is the start of its text mapping.
            "kernel": 0xFFFFFFFF81000000,
            # Bits 63..47 (63..56 with 5-level paging) must be equal to be
            # canonical (SDM Vol. 1, 3.3.7.1); bit 62 alone breaks both.
            "noncanonical": 0x4000000000000000,
        }

    @staticmethod
    def huge_page_share(region):
        """Share of the region backed by transparent huge pages (from smaps), or None."""
        lo, hi = region.address, region.address + region.size
        try:
            with open("/proc/self/smaps") as f:
                total = huge = 0
                inside = False
                for line in f:
                    head = line.split()[0]
                    if "-" in head and not head.endswith(":"):
                        a, b = (int(x, 16) for x in head.split("-"))
                        inside = a < hi and b > lo
                        span = min(b, hi) - max(a, lo) if inside else 0
                        total += span
                    elif inside and head == "AnonHugePages:":
                        huge += int(line.split()[1]) * 1024
                return min(1.0, huge / total) if total else None
        except OSError:
            return None

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

    # -- the core, for the experiments (they never import _core) --
    def verify_copy(self, kernel, max_size, max_misalign=64, all_pairs=False, aux=0, count=1):
        """Byte-exact check of a copy-like kernel row (by name) against the
        core's reference; None, or the first mismatch as a message."""
        return verify_copy(self.kernels[kernel].index, max_size, max_misalign, all_pairs,
                           aux, count)

    @staticmethod
    def isa_supported(isa):
        return isa_supported(isa)

    @staticmethod
    def address(region_or_buffer):
        """The address of a Region's first byte, or of a buffer's."""
        if isinstance(region_or_buffer, Region):
            return region_or_buffer.address
        return address_of(region_or_buffer)

    def run_buffer(self, size, **kwargs):
        """lab.buffer() whose mapping lives until the end of the run (close()),
        not only until the end of the cell (release())."""
        region = self.buffer(size, **kwargs)
        self.run_buffers.append(self.buffers.pop())
        return region

    def close(self):
        """End of the run: drop the experiments' cache, unmap every buffer,
        close the counters."""
        _unmap_all(m for _, m, _ in self.cache.get("_kept_mappings", {}).values())
        _unmap_all(m for _, m, _ in self.cache.get("_pooled", {}).values())
        self.cache.clear()
        self.release()
        _unmap_all(self.run_buffers)
        self.run_buffers = []
        self.perf.close()
        if self._schedstat is not None:
            self._schedstat.close()
            self._schedstat = None

    # -- core queries for the fill experiment --
    @staticmethod
    def cpuid(leaf, subleaf=0):
        """(eax, ebx, ecx, edx) of CPUID leaf/subleaf on this CPU."""
        return _core.cpuid(leaf, subleaf)

    def fill_check(self, kernel, value, aux, count, src_word, expect, max_size, max_offset):
        """Byte-exact check of a fill kernel row in C (_core.fill_check):
        None, or (size, dst offset, byte, expected, got) of the first wrong byte."""
        return fill_check(self.kernels[kernel].index, value, aux, count, src_word, expect,
                          max_size, max_offset)

    def pooled_buffer(self, key, size, capacity=0, hugepages=False):
        """A Region of `size` bytes at the start of a mapping kept for the
        whole run under (`key`, hugepages): mapped and pre-faulted once, at
        least `capacity` bytes, and re-mapped only when a request outgrows it.
        For sweeps whose cells need only a working set of some size, not fresh
        pages: mapping and faulting a new buffer per cell was a quarter of a
        bandwidth sweep's time (docs/machine-notes.md, "Pooled buffers").
        Its contents are whatever the previous cell left (each replica is its
        own process, so replicas still get fresh pages)."""
        pool = self.cache.setdefault("_pooled", {})
        got = pool.get((key, hugepages))
        if got is None or got[0] < size:
            if got is not None:
                pool.pop((key, hugepages))
                _unmap_all([got[1]])
            region = self.buffer(max(size, capacity), hugepages=hugepages)
            got = (region.size, self.buffers.pop(), region)
            pool[(key, hugepages)] = got
        _, m, region = got
        return Region(m, region.offset, size, region.address)

    def drop_pooled(self, key, hugepages):
        """Unmap the pooled mapping under (`key`, hugepages), if there is one
        (a sweep that moves on to the other page size frees the first's)."""
        got = self.cache.get("_pooled", {}).pop((key, hugepages), None)
        if got is not None:
            _unmap_all([got[1]])

    def kept_mapping(self, key, size, room=0, prefault=True):
        """A page-aligned anonymous mapping of `size` + `room` bytes kept in
        self.cache (per run, survives release()) under `key` until a request
        for another size: mappings of
        other sizes are unmapped first, so one size's buffers live at a time
        (cells sharing a size reuse them and keep their contents).  Returns
        the Region of its first `size` bytes."""
        kept = self.cache.setdefault("_kept_mappings", {})
        got = kept.get(key)
        if got and got[0] == size:
            return got[2]
        for k in [k for k, v in kept.items() if v[0] != size]:
            try:
                kept.pop(k)[1].close()
            except BufferError:
                pass
        check_fits(size + room)
        length = (size + room + PAGE - 1) // PAGE * PAGE
        try:
            m = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except OSError as e:
            raise MemfxError(f"cannot map {format_size(length)}: {e.strerror}") from None
        _advise_pages(m, False)
        if prefault:
            _core.touch(m, 0, length, PAGE)
        region = Region(m, 0, size, _core.address(m))
        kept[key] = (size, m, region)
        return region


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


def _advise_pages(mapping, hugepages):
    """Say which page size a buffer is measured on, before its first touch.
    THP asks for huge pages (MADV_HUGEPAGE).  Anything else is held to 4 KiB
    pages (MADV_NOHUGEPAGE): with THP "enabled=always" the kernel would
    otherwise back an aligned 2 MiB range with a huge page whenever one
    happens to be free, and a "4k" arm would measure a mix that depends on how
    fragmented memory is (seen here: 0 % of one 64 MiB buffer, and arms
    labelled 4 KiB that were partly huge on other runs)."""
    advice = getattr(mmap, "MADV_HUGEPAGE" if hugepages else "MADV_NOHUGEPAGE", None)
    if advice is None:
        return
    try:
        mapping.madvise(advice)
    except OSError:
        pass        # a kernel without THP: 4 KiB pages, and the share check says so


def _unmap_all(mappings):
    for m in mappings:
        try:
            m.close()
        except BufferError:
            pass  # a numpy view still exists; the GC will unmap it


def _libc():
    """libc's mmap/munmap/mprotect, for the holes of invalid_addresses() (Python's mmap
    cannot unmap part of a mapping)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return libc


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


def check_fits(nbytes, headroom=0.8):
    """Refuse buffers that would not fit in available memory."""
    avail = available_memory()
    if avail is not None and nbytes > avail * headroom:
        raise ParamError(f"a {format_size(nbytes)} buffer does not fit: only "
                         f"{format_size(avail)} of memory is available")


def available_memory():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def now():
    return time.monotonic()


# ---- the core for the experiments' planning and verification ----------------
# (module level: plan() runs in the parent, where there is no Lab; verifiers
# and tests work on plain buffers)

def core_file():
    """The core's shared object, for a child that loads it by path with the
    standard library only (advice's: `python -I -S`, no numpy)."""
    return _core.__file__


def core_layout():
    """The layouts the kernels share with the Python side (byte offsets and
    limits of kernels/sharing.c's shared area and kernels/storefwd.c's
    shape table), as the core was built with them (layout_shared.h)."""
    return dict(_core.layout)


def harness_file():
    """The lab's sampling harness (harness.py), for the same child."""
    from . import harness
    return harness.__file__


def isa_supported(isa):
    """True when this CPU (and the OS) runs instructions of `isa` (e.g. "avx2")."""
    return bool(_core.isa_supported(isa))


def call_kernel(index, dst, dst_offset, src, src_offset, size, value=0, count=1, aux=0):
    """One untimed call of kernel row `index` on plain buffers; its result word."""
    return _core.run(index, dst, dst_offset, src, src_offset, size,
                     value & 0xFFFFFFFFFFFFFFFF, count, aux)[3]


def verify_copy(index, max_size, max_misalign=64, all_pairs=False, aux=0, count=1):
    """The core's byte-exact check of a copy-like row; None or a message."""
    return _core.verify_copy(index, max_size, max_misalign, all_pairs, aux, count)


def fill_check(index, value, aux, count, src_word, expect, max_size, max_offset):
    """The core's byte-exact check of a fill row; None or the first wrong byte."""
    return _core.fill_check(index, value, aux, count, src_word, expect, max_size, max_offset)


def link_chain_at(buffer, offset, element, n, order=None):
    """Link a cyclic pointer chain in a plain buffer (see Lab.link_chain)."""
    return _core.link_chain(buffer, offset, element, n, order)


def shuffle_in_place(array, seed):
    """Shuffle a C-contiguous int32/int64 numpy array in place, uniformly,
    from `seed` (an int or a list of non-negative ints): the core's
    Fisher-Yates, its generator seeded through numpy's SeedSequence."""
    import numpy as np
    words = np.random.SeedSequence(seed).generate_state(4, np.uint64)
    _core.shuffle(array, *(int(w) for w in words))
    return array


def address_of(buffer):
    return _core.address(buffer)


def cpuid(leaf, subleaf=0):
    """(eax, ebx, ecx, edx) of CPUID leaf/subleaf."""
    return _core.cpuid(leaf, subleaf)
