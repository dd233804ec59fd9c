"""The Lab's memory: buffers mapped, faulted and kept for a run (4 KiB,
transparent and hugetlb pages), pointer chains, holes for invalid targets,
and the checks that a working set fits."""
from __future__ import annotations

import ctypes
import mmap

from ..model.errors import MemfxError, ParamError
from ..model.protocol import Region
from ..model.units import format_size
from . import _core

PAGE = mmap.PAGESIZE
HUGE_PAGE = 2 << 20
# mmap(2): MAP_HUGETLB, and log2(page size) in the flags from bit MAP_HUGE_SHIFT
# (include/uapi/asm-generic/hugetlb_encode.h).
MAP_HUGETLB = getattr(mmap, "MAP_HUGETLB", 0x40000)
MAP_HUGE_SHIFT = 26


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


class Memory:
    """The buffers a Lab maps and keeps (mixed into Lab, which owns the
    state: ``cache``, ``_mappings``)."""

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

    def run_buffer(self, size, **kwargs):
        """lab.buffer() whose mapping lives until the end of the run (close()),
        not only until the end of the cell (release())."""
        region = self.buffer(size, **kwargs)
        self.run_buffers.append(self.buffers.pop())
        return region

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
