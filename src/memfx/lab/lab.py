"""The measuring side (runs in the worker process): buffers, pinning, perf
counters, cycle calibration and the sampling loop.  Every number memfx
reports is timed here, by one code path, from the kernel table's traffic.
The perf counter groups are in perf.py (re-exported here)."""
from __future__ import annotations

import os
import random
import weakref

from ..model.errors import ParamError
from ..model.protocol import Region
from . import _core
from .busy import Plausibility
from .core import address_of, fill_check, isa_supported, kernel_table, verify_copy
from .memory import Memory, _unmap_all
from .perf import PerfCounters
from .sampling import (
    MAX_BYTES_PER_CYCLE,
    MIN_CYCLES_PER_DEPENDENT_LOAD,
    Sampling,
    _open_schedstat,
)


class Lab(Memory, Sampling):
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

    def close(self):
        """End of the run: drop the experiments' cache, unmap every buffer,
        close the counters."""
        _unmap_all(m for _, m, _ in self.cache.get("_kept_mappings", {}).values())
        _unmap_all(m for _, m, _ in self.cache.get("_pooled", {}).values())
        self.cache.clear()
        self.release()
        _unmap_all(self.run_buffers)
        self.run_buffers = []
        self._core_reference = None       # Sampling.core_speed's buffer
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
