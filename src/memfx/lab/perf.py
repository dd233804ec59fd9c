"""The lab's perf counters: one perf_event group of software events (page
faults, context switches, migrations), always tried, and one of hardware
events (cycles, instructions, and raw events an experiment adds) where a PMU
exists, read from user space with every sample.  Moved out of lab.py,
which re-exports every name."""
from __future__ import annotations

import os

from . import _core

# perf_event_open(2) constants (include/uapi/linux/perf_event.h).
PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE, PERF_TYPE_RAW = 0, 1, 4
SOFTWARE_EVENTS = {           # name -> PERF_COUNT_SW_*
    "page_faults": 2,
    "context_switches": 3,
    "cpu_migrations": 4,
}
HARDWARE_EVENTS = {           # name -> PERF_COUNT_HW_*
    "cycles": 0,
    "instructions": 1,
}


class PerfCounters:
    """One software group (always tried) and one hardware group (when a PMU exists)."""

    def __init__(self, hardware=True):
        self.groups = []      # (leader_fd, [names])
        self.fds = []
        self.notes = {}
        self.user_pages, self.page_names = [], []   # perf pages (mmap objects) read with rdpmc
        self._open_group("sw", PERF_TYPE_SOFTWARE, SOFTWARE_EVENTS)
        if hardware:
            self._open_group("hw", PERF_TYPE_HARDWARE, HARDWARE_EVENTS)

    def _open_group(self, label, ptype, events):
        leader, opened, names = -1, [], []
        for name, config in events.items():
            try:
                fd = _core.perf_open(ptype, config, leader)
            except OSError as e:
                # No PMU (a VM: ENOENT) is the normal case; keep the reason.
                self.notes[label] = f"perf_event_open({name}) failed: {os.strerror(e.errno)}"
                for f in opened:
                    os.close(f)
                return
            opened.append(fd)
            if leader < 0:
                leader = fd
            names.append(name)
        _core.perf_ioctl(leader, "enable")
        self.fds.extend(opened)
        self.groups.append((leader, names))
        if ptype != PERF_TYPE_SOFTWARE:
            self._map_user_pages(opened, names)

    def _map_user_pages(self, fds, names):
        """Map each hardware counter's perf_event page so the core can read it
        with rdpmc at the timing fences (perf_event_open(2), "rdpmc")."""
        pages = []
        try:
            for fd in fds:
                pages.append(_core.perf_map(fd))     # the binding maps it: only perf pages
        except OSError as e:
            self.notes["rdpmc"] = f"mmap of the perf page failed: {os.strerror(e.errno)}; using read()"
            for m in pages:
                m.close()
            return
        self.user_pages.extend(pages)
        self.page_names.extend(names)

    def add_raw_event(self, name, config, ptype=PERF_TYPE_RAW):
        """Add a named (raw) hardware event to the hardware group, so it is
        read with every sample.  Returns a one-line note: what was opened, or
        why not (no PMU is the normal case in a VM)."""
        group = next((g for g in self.groups if "cycles" in g[1]), None)
        if group is None:
            return f"not available: no hardware PMU ({self.notes.get('hw', 'hardware group not open')})"
        if name in group[1]:
            return f"{name} raw 0x{config:x}"
        try:
            fd = _core.perf_open(ptype, config, group[0])
        except OSError as e:
            return f"not available: perf_event_open({name}) failed: {os.strerror(e.errno)}"
        self.fds.append(fd)
        group[1].append(name)
        return f"{name} raw 0x{config:x}"

    @property
    def leaders(self):
        return [g[0] for g in self.groups]

    @property
    def has_hardware(self):
        return any("cycles" in names for _, names in self.groups)

    def decode(self, deltas):
        """Counter deltas from _core.run -> {name: value}, scaled for multiplexing.
        rdpmc readings (taken at the fences, without the read() syscalls inside
        the window) replace the group reads of the same counters when present."""
        out = {}
        for (leader, names), d in zip(self.groups, deltas):
            enabled, running = d[-2], d[-1]
            scale = enabled / running if running else 1.0
            for name, v in zip(names, d[:-2]):
                out[name] = v * scale if scale != 1.0 else v
        if self.user_pages and len(deltas) > len(self.groups):
            rdpmc = deltas[len(self.groups)]
            if rdpmc is not None:
                out.update(zip(self.page_names, rdpmc))
                out["counter_source"] = 1     # 1 = rdpmc, absent = read()
        return out

    def close(self):
        for m in self.user_pages:
            m.close()
        self.user_pages, self.page_names = [], []
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds, self.groups = [], []
