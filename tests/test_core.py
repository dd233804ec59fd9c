"""The C core through its binding: kernel table, chase kernel, timing
helpers, and the perf_event plumbing (software events work in a VM)."""
import mmap
import os

import numpy as np
import pytest

from memfx.experiments.base import Region, Trial
from memfx.experiments.latency import chain_links
from memfx.lab import _core
from memfx.lab.core import kernel_table
from memfx.lab.lab import Lab
from memfx.lab.memory import HUGE_PAGE
from memfx.lab.perf import SOFTWARE_EVENTS, PerfCounters


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


@pytest.mark.measuring
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


@pytest.mark.measuring
def test_chase_inc_writes_second_word():
    n, elem = 16, 64
    chain, base, nxt = _chain(n, elem)
    k = kernel_table()["chase_ptr_inc"]
    _core.run(k.index, None, 0, chain, 0, 0, 0, 2 * n, 0)
    words = np.frombuffer(chain.buffer, dtype=np.uint64)
    assert all(words[i * 8 + 1] == 2 for i in range(n))


@pytest.mark.measuring
def test_run_checks_regions():
    k = kernel_table()["chase_ptr"]
    with pytest.raises(ValueError):
        _core.run(k.index, None, 0, bytearray(8), 16, 0, 0, 1, 0)
    with pytest.raises(IndexError):
        _core.run(10 ** 6, None, 0, None, 0, 0, 0, 1, 0)


@pytest.mark.measuring
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


@pytest.mark.measuring
def test_page_faults_counted_exactly():
    """Touching N fresh pages costs exactly N page faults (software event)."""
    if _core.perf_probe(1, SOFTWARE_EVENTS["page_faults"]) != 0:
        pytest.skip("software perf events unavailable")
    if os.environ.get("MEMFX_SANITIZED"):
        pytest.skip("under AddressSanitizer every checked access also faults in shadow pages")
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


@pytest.mark.measuring
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


@pytest.mark.measuring
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
        trial = Trial("chase_ptr", src=Region(buf, 0, len(buf.buffer), base), metric="time",
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


@pytest.mark.measuring
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


def _vma_flags(address):
    """The VmFlags of the mapping holding `address` (from /proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0] if line.split() else ""
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return set(line.split()[1:])
    return None


@pytest.mark.measuring
@pytest.mark.skipif(not hasattr(mmap, "MADV_NOHUGEPAGE") or not os.path.exists("/proc/self/smaps"),
                    reason="needs Linux THP madvise and smaps")
def test_buffers_say_which_page_size_they_are_measured_on():
    """A 4 KiB arm must not be silently backed by huge pages (THP 'always'):
    its buffer carries MADV_NOHUGEPAGE ('nh'), a THP arm's MADV_HUGEPAGE
    ('hg'), and so do the fill experiment's kept mappings."""
    probe = mmap.mmap(-1, 4 << 20)
    try:
        probe.madvise(mmap.MADV_NOHUGEPAGE)
    except OSError:
        pytest.skip("this kernel has no THP madvise")
    if "nh" not in (_vma_flags(_core.address(probe)) or ()):
        pytest.skip("this kernel reports no THP advice in VmFlags")
    probe.close()
    lab = Lab(cpu=-1)
    try:
        small = _vma_flags(lab.buffer(4 << 20).address)
        huge = _vma_flags(lab.buffer(4 << 20, hugepages=True).address)
        kept = _vma_flags(lab.kept_mapping("test", 4 << 20).address)
        assert "nh" in small and "hg" not in small
        assert "hg" in huge and "nh" not in huge
        assert "nh" in kept
    finally:
        lab.close()


@pytest.mark.measuring
@pytest.mark.parametrize("size", [4096, 100_000, 512 << 10, (2 << 20) - 64, (2 << 20) + 64, 5 << 20])
@pytest.mark.parametrize("offset", [0, 64, 4096 + 8])
def test_a_thp_buffer_spans_whole_huge_pages(size, offset):
    """The kernel backs only an aligned 2 MiB span that lies wholly inside one
    mapping with a huge page; a THP buffer smaller than that (mid-L2 sizes)
    must still sit in such spans, every time, or its arm measures 4 KiB pages
    on some runs and huge pages on others.  (The buffer's own mmap is checked,
    not the kernel's VMA: a VMA may have merged with a neighbour by chance.)"""
    lab = Lab(cpu=-1)
    try:
        for _ in range(4):      # different placements of the mapping
            region = lab.buffer(size, offset=offset, hugepages=True, prefault=False)
            first = region.address // HUGE_PAGE * HUGE_PAGE
            last = (region.address + max(size, 1) - 1) // HUGE_PAGE * HUGE_PAGE + HUGE_PAGE
            lo = _core.address(region.buffer)
            hi = lo + len(region.buffer)
            assert (region.address - offset) % HUGE_PAGE == 0
            assert lo <= first and last <= hi, (hex(lo), hex(first), hex(last), hex(hi))
    finally:
        lab.close()


@pytest.mark.measuring
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
        # once untimed first: its pages (and, under ASan, their shadow) fault
        # in here, so the timed call's delta is a clean 0
        _core.run(k.index, None, 0, chain, 0, 0, 0, 100, 0, perf.leaders, perf.user_pages)
        out = _core.run(k.index, None, 0, chain, 0, 0, 0, 100, 0, perf.leaders, perf.user_pages)
        deltas = out[4]
        assert len(deltas) == len(perf.groups) + 1 and deltas[-1] is None
        decoded = perf.decode(deltas)
        assert "counter_source" not in decoded and decoded[names[0]] == 0
    finally:
        perf.close()


# ---- issue 14, item 8: the binding checks every byte a kernel may touch ----

def _guarded_page():
    """One writable page followed by a PROT_NONE page: a kernel that reaches
    past the page faults.  Returns (mapping, view of the writable page)."""
    import ctypes
    m = mmap.mmap(-1, 2 * mmap.PAGESIZE)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(_core.address(m) + mmap.PAGESIZE, mmap.PAGESIZE, 0) == 0   # PROT_NONE
    return m, memoryview(m)[:mmap.PAGESIZE]


@pytest.mark.measuring
def test_fixed_footprint_store_near_a_guard_page_is_refused():
    """sf_fwd_s<S>_l<L> stores S bytes with size=0: 8 bytes before a guard
    page that used to segfault for S > 8; now the binding refuses it."""
    rows = kernel_table()
    m, page = _guarded_page()
    try:
        wide = [r for r in rows.values() if r.name.startswith("sf_fwd_s") and r.supported
                and r.write_fixed > 8]
        assert wide
        for r in wide:
            with pytest.raises(ValueError, match=r.name):
                _core.run(r.index, page, mmap.PAGESIZE - 8, None, 0, 0, 1, 1, 0)
            # the load at offset aux counts too
            with pytest.raises(ValueError):
                _core.run(r.index, page, 0, None, 0, 0, 1, 1, mmap.PAGESIZE)
            s, ld = r.write_fixed, r.read_fixed
            # the last place where both fit runs
            at = mmap.PAGESIZE - int(max(s, ld))
            _core.run(r.index, page, at, None, 0, 0, 1, 1, 0)
    finally:
        page.release()
        m.close()


@pytest.mark.measuring
def test_two_stores_extent_comes_from_aux():
    k = kernel_table()["sf_two_stores_16"]
    if not k.supported:
        pytest.skip("needs sse2")
    with pytest.raises(ValueError, match="271 bytes"):
        _core.run(k.index, bytearray(256), 0, None, 0, 0, 1, 1, 0xFF)   # used to write at +255
    buf = bytearray(272)
    _core.run(k.index, buf, 0, None, 0, 0, 1, 1, 0xFF)
    assert _core.footprint(k.index, 0, 1, 0xFF | (0x10 << 8)) == (271, 0, 0)
    assert _core.footprint(k.index, 0, 1, 0x20 << 8) == (48, 0, 0)


@pytest.mark.measuring
def test_rotating_fill_slot_must_fit_the_view():
    """Fill's rotating mode keeps a cursor past its region: a 4 KiB region in
    a 4 KiB view used to write past the view (1913 bytes in the audit)."""
    rows = kernel_table()
    k = rows["fill_scalar8"]
    rotate_4k = 4 | (4096 << 16)
    with pytest.raises(ValueError, match="fill_scalar8"):
        _core.run(k.index, bytearray(4096), 0, None, 0, 1024, 0x11, 3, rotate_4k)
    # a view with room for the slot: exactly the region and the slot change
    m, page = _guarded_page()
    try:
        region = 4096 - 64 - 16 - 8
        need = _core.footprint(k.index, 512, 1, 4 | (region << 16), _core.address(page))[0]
        assert region + 16 <= need <= region + 63 + 16
        page[:] = b"\xee" * len(page)
        _core.run(k.index, page, 0, None, 0, 512, 0x11, 3, 4 | (region << 16))
        assert bytes(page[:3 * 512]) == b"\x11" * (3 * 512)
        assert bytes(page[3 * 512:region]) == b"\xee" * (region - 3 * 512)
        assert bytes(page[need:]) == b"\xee" * (len(page) - need)
    finally:
        page.release()
        m.close()


@pytest.mark.measuring
def test_missing_or_misplaced_buffers_raise_value_error():
    rows = kernel_table()
    fill, copy = rows["fill_scalar8"], rows["copy_gpr_unrolled"]
    for args in [(fill.index, None, 0, None, 0, 16, 0, 1, 0),            # no dst
                 (copy.index, bytearray(16), 0, None, 0, 16, 0, 1, 0),   # no src
                 (copy.index, bytearray(16), 1, bytearray(16), 0, 16, 0, 1, 0),
                 (copy.index, bytearray(16), 0, bytearray(16), -1, 1, 0, 1, 0),
                 (copy.index, None, 8, None, 0, 0, 0, 1, 0),             # offset without a buffer
                 (fill.index, bytearray(16), 0, None, 0, 8, 0, 1, 1)]:   # value word at src missing
        with pytest.raises(ValueError) as e:
            _core.run(*args)
        assert "\n" not in str(e.value)
    # a size 0 copy touches nothing, so it needs no buffers
    _core.run(copy.index, None, 0, None, 0, 0, 0, 1, 0)
    with pytest.raises(TypeError):
        _core.touch(None, 0, 100, 1)


@pytest.mark.measuring
def test_rdpmc_pages_are_only_pages_the_binding_mapped(tmp_path):
    # issue 26 item 2: a read-only mapping of anything else (a file with a
    # forged rdpmc index) is refused, and so is a perf_rdpmc of a non-perf fd
    k = kernel_table()["copy_gpr_unrolled"]
    forged = tmp_path / "page"
    forged.write_bytes(b"\xff" * mmap.PAGESIZE)
    with open(forged, "rb") as f:
        ro = mmap.mmap(f.fileno(), mmap.PAGESIZE, prot=mmap.PROT_READ)
        for pages in ([0x1000], [bytearray(4096)], [mmap.mmap(-1, 4096)], [ro]):
            with pytest.raises(TypeError, match="PerfPage"):
                _core.run(k.index, None, 0, None, 0, 0, 0, 1, 0, [], pages)
        with pytest.raises(ValueError, match="perf_event"):
            _core.perf_rdpmc(f.fileno())
        with pytest.raises(ValueError, match="perf_event"):
            _core.perf_map(f.fileno())
        ro.close()
    assert not hasattr(PerfCounters(hardware=False), "page_addresses")


@pytest.mark.measuring
def test_chase_walks_only_chains_linked_in_c():
    rows = kernel_table()
    chase, inc = rows["chase_ptr"], rows["chase_ptr_inc"]
    buf = bytearray(8 * 64)
    with pytest.raises(ValueError, match="link_chain"):
        _core.run(chase.index, None, 0, buf, 0, 0, 0, 1, 0)       # a plain buffer
    chain = _core.link_chain(buf, 64, 8, 32, np.arange(32)[::-1].copy())
    assert (chain.offset, chain.element_bytes, chain.elements) == (64, 8, 32)
    assert chain.address == _core.address(buf) + 64
    for off in (0, 60, 64 + 4, 64 + 32 * 8):                        # not an element
        with pytest.raises(ValueError, match="element"):
            _core.run(chase.index, None, 0, chain, off, 0, 0, 5, 0)
    with pytest.raises(ValueError, match="16 bytes"):
        _core.run(inc.index, None, 0, chain, 64, 0, 0, 5, 0)        # would bump the next pointers
    # reversed address order: element 5 links to element 4
    assert _core.run(chase.index, None, 0, chain, 64 + 5 * 8, 0, 0, 1, 0)[3] == chain.address + 4 * 8
    # sequential (order None): element e links to e + 1, the last to the first
    seq = _core.link_chain(bytearray(80), 0, 16, 5)
    assert _core.run(chase.index, None, 0, seq, 4 * 16, 0, 0, 1, 0)[3] == seq.address


@pytest.mark.parametrize("order, message", [
    ([0, 1, 1, 2], "repeats"), ([0, 1, 2, 0], "repeats"), ([3, 2, 1, 4], "below 4"),
    ([-1, 0, 1, 2], "-1"), ([0, 1, 2], "4 int32 or int64"),
])
def test_link_chain_validates_every_index(order, message):
    with pytest.raises(ValueError, match=message):
        _core.link_chain(bytearray(64), 0, 16, 4, np.array(order, dtype=np.int32))


def test_link_chain_refuses_what_does_not_fit():
    with pytest.raises(ValueError, match="does not fit"):
        _core.link_chain(bytearray(64), 8, 16, 4)
    for elem in (0, 4, 12):
        with pytest.raises(ValueError):
            _core.link_chain(bytearray(64), 0, elem, 4)
    with pytest.raises(ValueError):
        _core.link_chain(bytearray(64), 0, 16, 4, np.zeros(4, dtype=np.float64))
    with pytest.raises(BufferError):
        _core.link_chain(b"\0" * 64, 0, 16, 4)                         # read-only


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_shuffle_permutes_in_place_as_a_function_of_its_seed(dtype):
    from memfx.lab.core import shuffle_in_place
    for n in (0, 1, 2, 3, 1000, 100_003):
        a = shuffle_in_place(np.arange(n, dtype=dtype), [7, n])
        assert a.dtype == dtype and sorted(a.tolist()) == list(range(n))
        assert np.array_equal(a, shuffle_in_place(np.arange(n, dtype=dtype), [7, n]))
        if n >= 1000:
            other = shuffle_in_place(np.arange(n, dtype=dtype), [8, n])
            assert not np.array_equal(a, other)
            assert np.mean(a == np.arange(n)) < 0.01          # not near the identity


def test_shuffle_draws_every_permutation_alike():
    """All 24 orders of 4 items, 240 times each on average over 5760 seeds:
    a chi-square far past its 0.999 quantile (49.7 for 23 degrees of
    freedom) would be a biased draw -- e.g. a swap with j in [0, n), not
    [0, i], makes some orders up to twice as likely as others."""
    from itertools import permutations

    from memfx.lab.core import shuffle_in_place
    index = {p: i for i, p in enumerate(permutations(range(4)))}
    counts = np.zeros(24)
    for seed in range(5760):
        counts[index[tuple(shuffle_in_place(np.arange(4, dtype=np.int32), seed).tolist())]] += 1
    chi2 = float(((counts - 240) ** 2 / 240).sum())
    assert chi2 < 49.7, counts


def test_shuffle_refuses_what_is_not_a_writable_index_array():
    for bad in (np.zeros(4, dtype=np.float64), np.zeros(4, dtype=np.int16),
                np.arange(8, dtype=np.int32)[::2]):
        with pytest.raises((ValueError, BufferError)):
            _core.shuffle(bad, 1, 2, 3, 4)
    frozen = np.arange(4, dtype=np.int32)
    frozen.flags.writeable = False
    with pytest.raises((ValueError, BufferError)):
        _core.shuffle(frozen, 1, 2, 3, 4)
    zero_state = np.arange(50, dtype=np.int64)
    _core.shuffle(zero_state, 0, 0, 0, 0)            # xoshiro's one stuck state is avoided
    assert sorted(zero_state.tolist()) == list(range(50))
    assert not np.array_equal(zero_state, np.arange(50))


@pytest.mark.measuring
def test_a_chains_buffer_cannot_move_or_close_under_it():
    # the chain holds an export of its buffer (issue 26 item 2): a resize or
    # close that would leave its pointers stale is refused instead
    k = kernel_table()["chase_ptr"]
    buf = bytearray(64)
    chain = _core.link_chain(buf, 0, 8, 8)
    with pytest.raises(BufferError):
        buf.extend(bytes(1 << 20))
    m = mmap.mmap(-1, 4096)
    chain_m = _core.link_chain(m, 0, 8, 512)
    with pytest.raises(BufferError):
        m.close()
    _core.run(k.index, None, 0, chain, 0, 0, 0, 3, 0)
    _core.run(k.index, None, 0, chain_m, 0, 0, 0, 3, 0)
    del chain, chain_m
    m.close()


def test_every_row_declares_a_footprint_that_grows_with_size():
    """Rows whose traffic scales with size declare at least that many bytes."""
    for r in kernel_table().values():
        dst, src, chain = _core.footprint(r.index, 1000, 1, 0 if r.group != "storefwd" else 128)
        if r.group in ("copy", "set", "rmw", "fill"):
            assert dst >= 1000, r.name
        if r.group in ("copy", "rmw"):
            assert src >= 1000, r.name
        if r.group == "chase":
            assert chain >= 8 and src >= 8 and dst == 0, r.name
        if r.group == "fill_alloc":
            assert (dst, src) == (0, 0), r.name


@pytest.mark.measuring
def test_checkers_refuse_sizes_whose_buffers_would_overflow():
    rows = kernel_table()
    with pytest.raises(ValueError):
        _core.fill_check(rows["fill_scalar8"].index, 0, 0, 1, 0, 0, 2 ** 62, 2 ** 62)
    with pytest.raises(ValueError):
        _core.verify_copy(rows["copy_gpr_unrolled"].index, 2 ** 62, 8)


@pytest.mark.measuring
def test_cycle_calibration_ignores_a_preempted_chain(monkeypatch):
    # A chain that was preempted takes longer; it must not lower the
    # estimate (a low estimate made a cell's chase "implausibly" fast).
    from memfx.lab import lab as _lab
    ticks = iter([1000, 1000, 9000, 8000, 1000])
    monkeypatch.setattr(_lab._core, "add_chain", lambda adds: next(ticks))
    lab = Lab(cpu=-1)
    try:
        best, spread = lab.cycles_per_tick(adds=2000, repeats=5)
    finally:
        lab.release()
    assert best == pytest.approx(2.0)
    assert spread == pytest.approx(1 - (2000 / 9000) / 2.0)
