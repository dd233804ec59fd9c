"""The C core through its binding: kernel table, chase kernel, timing
helpers, and the perf_event plumbing (software events work in a VM)."""
import mmap
import os

import numpy as np
import pytest

from memfx import _core
from memfx._lab import HUGE_PAGE, SOFTWARE_EVENTS, Lab, PerfCounters, kernel_table
from memfx.experiments.base import Region, Trial
from memfx.experiments.latency import chain_links


def test_kernel_table_rows_are_complete():
    rows = kernel_table()
    assert "chase_ptr" in rows
    for name, r in rows.items():
        assert r.name == name and r.op and r.doc
        assert min(r.read_per_byte, r.write_per_byte, r.read_fixed, r.write_fixed) >= 0
        assert r.ops_per_iter > 0
        assert isinstance(r.supported, bool)
    assert len({r.index for r in rows.values()}) == len(rows)


def _chain(n, elem=64, seed=0):
    buf = bytearray(n * elem)
    order = np.random.default_rng(seed).permutation(n)
    chain = _core.link_chain(buf, 0, elem, n, order)
    return chain, _core.address(buf), chain_links(order)


def test_chase_kernel_follows_the_chain():
    n, elem = 1000, 64
    chain, base, nxt = _chain(n, elem)
    k = kernel_table()["chase_ptr"]
    for steps in (0, 1, 7, 8, 9, 123, n, 3 * n + 5):
        expect = 0
        for _ in range(steps):
            expect = int(nxt[expect])
        _, _, _, result, _ = _core.run(k.index, None, 0, chain, 0, 0, 0, steps, 0)
        assert result == base + expect * elem, steps


def test_chase_inc_writes_second_word():
    n, elem = 16, 64
    chain, base, nxt = _chain(n, elem)
    k = kernel_table()["chase_ptr_inc"]
    _core.run(k.index, None, 0, chain, 0, 0, 0, 2 * n, 0)
    words = np.frombuffer(chain.buffer, dtype=np.uint64)
    assert all(words[i * 8 + 1] == 2 for i in range(n))


def test_run_checks_regions():
    k = kernel_table()["chase_ptr"]
    with pytest.raises(ValueError):
        _core.run(k.index, None, 0, bytearray(8), 16, 0, 0, 1, 0)
    with pytest.raises(IndexError):
        _core.run(10 ** 6, None, 0, None, 0, 0, 0, 1, 0)


def test_timing_helpers_are_sane():
    hz = _core.tsc_hz(20.0)
    assert 3e8 < hz < 2e10
    ticks = _core.add_chain(100_000)
    assert ticks > 0
    assert _core.cpu_id() in os.sched_getaffinity(0)
    assert len(_core.cpuid(0, 0)) == 4
    assert _core.isa_supported("sse2") is True       # baseline x86-64
    assert _core.isa_supported("no-such-isa") is False
    assert "-march" not in _core.build_info["cflags"]     # baseline ISA, dispatch at run time


def test_page_faults_counted_exactly():
    """Touching N fresh pages costs exactly N page faults (software event)."""
    if _core.perf_probe(1, SOFTWARE_EVENTS["page_faults"]) != 0:
        pytest.skip("software perf events unavailable")
    perf = PerfCounters(hardware=False)
    try:
        leader, names = perf.groups[0]
        i = names.index("page_faults")
        for n in (1, 17, 256):
            m = mmap.mmap(-1, n * mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            if hasattr(mmap, "MADV_NOHUGEPAGE"):
                m.madvise(mmap.MADV_NOHUGEPAGE)   # one fault per base page, THP or not
            before = _core.perf_read(leader)
            _core.touch(m, 0, n * mmap.PAGESIZE, mmap.PAGESIZE)
            after = _core.perf_read(leader)
            assert after[i] - before[i] == n
            # touching again: already mapped, no new faults
            before = _core.perf_read(leader)
            _core.touch(m, 0, n * mmap.PAGESIZE, mmap.PAGESIZE)
            after = _core.perf_read(leader)
            assert after[i] - before[i] == 0
            m.close()
    finally:
        perf.close()


def test_run_returns_counter_deltas_for_page_faults():
    if _core.perf_probe(1, SOFTWARE_EVENTS["page_faults"]) != 0:
        pytest.skip("software perf events unavailable")
    lab = Lab(cpu=-1, min_sample_ms=0.05)
    try:
        chain, base, _ = _chain(64)
        trial = Trial("chase_ptr", src=Region(chain, 0, len(chain.buffer), base), metric="time")
        rec = lab.sample(trial, 1000, 1.0)
        assert rec["metric"] == "ns_per_load" and rec["unit"] == "ns"
        assert rec["value"] > 0 and rec["length"] == 1000
        assert rec["counters"]["page_faults"] == 0
        # rejected exactly when there is a reason, and the reason follows the
        # software events read around the sample (rdtscp's CPU id can also
        # catch a migration the counter missed)
        c = rec["counters"]
        assert rec["rejected"] == (rec["reason"] is not None)
        if c.get("cpu_migrations"):
            assert rec["reason"] == "migrated"
        elif c.get("context_switches"):
            assert rec["reason"] in ("context_switch", "migrated")
        else:
            assert rec["reason"] in (None, "migrated")
    finally:
        lab.perf.close()


@pytest.mark.parametrize("events, reject_page_faults, reason", [
    ({}, True, None),
    ({"context_switches": 1}, True, "context_switch"),
    ({"cpu_migrations": 1}, True, "migrated"),
    ({"cpu_migrations": 2, "context_switches": 3}, True, "migrated"),
    ({"page_faults": 5}, True, "page_fault"),
    ({"page_faults": 5}, False, None),   # trials that fault by design (first touch) keep them
])
def test_samples_hit_by_software_events_are_rejected(events, reject_page_faults, reason,
                                                     monkeypatch):
    lab = Lab(cpu=-1, min_sample_ms=0.05)
    try:
        real_decode = lab.perf.decode
        monkeypatch.setattr(lab.perf, "decode", lambda deltas: {
            **real_decode(deltas), "context_switches": 0, "cpu_migrations": 0,
            "page_faults": 0, **events})
        buf, base, _ = _chain(64)
        trial = Trial("chase_ptr", src=Region(buf, 0, len(buf), base), metric="time",
                      reject_page_faults=reject_page_faults)
        rec = lab.sample(trial, 1000, 1.0)
        if rec["reason"] == "migrated" and reason is None:
            pytest.skip("the scheduler really migrated the pinned thread (rdtscp CPU id changed)")
        assert rec["reason"] == reason and rec["rejected"] == (reason is not None)
    finally:
        lab.perf.close()


def test_hardware_counters_fall_back_cleanly():
    perf = PerfCounters(hardware=True)
    try:
        if not perf.has_hardware:
            assert "hw" in perf.notes and "failed" in perf.notes["hw"]
        assert perf.groups, "the software group must open"
    finally:
        perf.close()


def _thp_size():
    """This kernel's transparent huge page size, or None where THP is off."""
    thp = "/sys/kernel/mm/transparent_hugepage/"
    try:
        with open(thp + "enabled") as f:
            if "[never]" in f.read():
                return None
        with open(thp + "hpage_pmd_size") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def test_lab_buffer_alignment_and_offset():
    lab = Lab(cpu=-1)
    try:
        r = lab.buffer(10000, align=4096, offset=13)
        assert r.address % 4096 == 13
        assert r.address == _core.address(r.buffer) + r.offset
        r2 = lab.buffer(4 << 20, hugepages=True)
        assert r2.address % HUGE_PAGE == 0
        thp = _thp_size()
        if thp is not None:
            # the alignment memfx uses must be the huge page size of this kernel
            assert HUGE_PAGE % thp == 0
        share = lab.huge_page_share(r2)
        if not os.access("/proc/self/smaps", os.R_OK):
            assert share is None
        else:
            assert isinstance(share, float) and 0.0 <= share <= 1.0
            if thp is None:
                assert share == 0.0          # THP off: nothing can be huge-page backed
    finally:
        lab.release()
        lab.perf.close()


def test_rdpmc_path_falls_back_for_events_without_user_access():
    """The bare-metal rdpmc path, exercised with a software event: its page
    maps, but the kernel gives no user-space index, so the core returns
    None and the group read() values stand."""
    if _core.perf_probe(1, SOFTWARE_EVENTS["page_faults"]) != 0:
        pytest.skip("software perf events unavailable")
    perf = PerfCounters(hardware=False)
    try:
        leader, names = perf.groups[0]
        perf._map_user_pages([leader], [names[0]])
        assert len(perf.user_pages) == 1
        assert _core.perf_rdpmc(leader) is None
        chain, base, _ = _chain(8)
        k = kernel_table()["chase_ptr"]
        out = _core.run(k.index, None, 0, chain, 0, 0, 0, 100, 0, perf.leaders, perf.user_pages)
        deltas = out[4]
        assert len(deltas) == len(perf.groups) + 1 and deltas[-1] is None
        decoded = perf.decode(deltas)
        assert "counter_source" not in decoded and decoded[names[0]] == 0
    finally:
        perf.close()
