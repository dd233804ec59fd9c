"""Memory bandwidth per cache level and DRAM: read, write, copy, increment,
non-temporal stores, random line order.

Seed 004 (Drepper, "What every programmer should know about memory", 3.5.1:
"Sequential Read and Write", "Sequential Increment", "Random Addnextlast";
6.1 non-temporal stores): the bytes per cycle a single thread moves, as a
function of the working set, step down at each cache boundary; writes and
read-modify-writes pay for write-allocation and write-back; random order
defeats the prefetchers; non-temporal stores skip the caches, which pays only
when the data would not have stayed in them anyway.

Protocol (one cell per point, so no other kernel's data sits between two
samples of a point -- issue 16)
  1. map the working set (4 KiB pages or transparent huge pages, a
     parameter), fault it in, fill copy sources with a non-zero byte;
  2. verify every planned kernel before anything is timed: kernels that
     write are checked byte-exact against a reference for every size 0..4096
     at rotating misalignments with guard bytes (fill rows with fill's
     checker, copy rows with copy's, this experiment's own rows here);
     reading kernels return a checksum compared with numpy's; the scaling
     kinds also run once as a team, each member on its own guarded buffers
     with its own fill byte or source, which must come back byte-exact
     (check_team);
  3. one untimed warm-up pass; then samples of whole passes, one kernel call
     per pass over the whole working set (as a program sweeps its data),
     each sample at least min_sample_ms and never less than one pass, so
     the start-up of a sample (the first lines' misses, one TLB refill) is
     well under 1 % of it;
  4. GB/s = the kernel row's declared traffic / time (write-allocate reads
     are not counted, as in STREAM and likwid-bench); bytes per estimated
     core cycle from the dependent-add calibration run beside every cell.

Kinds (the arms)
  read               sum of every 64-bit word (bw_read_*)
  write              fill with a non-zero byte (fill.c's fill_* rows; rep stosb as width "rep")
  copy               src -> dst, each half the working set (copy.c's copy_* rows; rep movsb)
  rmw                add 1 to every 64-bit word in place (bw_rmw_*)
  nt_write           movntdq stores (fill_nt_sse)
  nt_copy            movntdq copy (copy_nt)
  random             the working set's 64-byte lines summed in a shuffled order (bw_random_*)
  write_readback     a normal fill, then a read pass over the same bytes
  nt_write_readback  a non-temporal fill, then a read pass

The working set is what a pass touches: a copy of working set W moves W/2
bytes from one W/2 buffer to another (as likwid-bench's -w counts all
streams).

Thread scaling (issue 11, question 2; Drepper 3.5.1 "Speed-Up Through
Parallelism", "Bandwidth with two Processes")
  scaling            read, write, copy and nt_write at 1..N threads (N = the
                     CPUs this process may use, `threads` caps it), one thread
                     pinned per CPU by the lab's team runner, all started at
                     one barrier and timed from its release to the last
                     finisher; aggregate GB/s = every thread's declared
                     traffic / that window.  Each thread works on its own
                     buffer: the threads share nothing but the caches and
                     memory they cannot help sharing, which is Drepper's
                     "two processes" case (separate processes would add only
                     separate page tables).  One working set per level, per
                     thread (a level the team shares, e.g. the L3, holds all
                     N of them).  A sample whose threads did not run side by
                     side (the shortest run overlapped by the others for less
                     than 90 %) or were switched out is rejected by the lab.

Loaded latency (issue 11, question 4; as Intel MLC --loaded_latency does)
  idle_latency       a random pointer chase (64-byte elements, one per line)
                     on the measuring CPU, alone;
  loaded_latency     the same chase while every other CPU streams reads of its
                     own buffer (2x the LLC) at full speed.  The team runner
                     starts the chase only after every loader has finished one
                     pass and stops the loaders after it, and the lab rejects
                     a sample in which a loader's run did not cover the chase.
"""
from __future__ import annotations

import math

import numpy as np

from .. import answers as ans
from .. import stats
from ..answers import HIGHER, Question
from ..errors import MemfxError, ParamError
from ..plotspec import PlotSpec
from ..protocol import Region, Team, TeamMember
from ..units import format_size
from .levels import (DRAM_FROM, INSIDE_ABOVE, INSIDE_BELOW, data_caches,  # noqa: F401
                     declared_sizes, level_windows)
from .base import Experiment, Param, Point, Trial, register
from .latency import shuffled_order, size_grid
from .sharing import cpu_text, parse_cpu_text, resolve_cpus

LINE = 64
# The byte the write kinds store: not zero (seed 000: zeros may be
# eliminated), not a pattern a fill of 0xff could share.
FILL_BYTE = 0x5A
RMW_INCREMENT = 1
WIDTHS = ("scalar", "sse2", "avx2", "avx512", "rep")
VECTOR_WIDTHS = ("scalar", "sse2", "avx2", "avx512")
# The ISA each width needs (the fingerprint's flag names).
WIDTH_ISA = {"scalar": "", "sse2": "sse2", "avx2": "avx2", "avx512": "avx512f", "rep": ""}

# kind -> width -> kernel row.  Writes and copies are the fill and copy
# tables' own rows (one implementation per strategy in the core).
KERNELS = {
    "read": {w: f"bw_read_{w}" for w in VECTOR_WIDTHS},
    "write": {"scalar": "fill_scalar8", "sse2": "fill_sse", "avx2": "fill_avx2",
              "avx512": "fill_avx512", "rep": "fill_rep_stosb"},
    "copy": {"scalar": "copy_gpr_unrolled", "sse2": "copy_sse", "avx2": "copy_avx2",
             "avx512": "copy_avx512", "rep": "copy_rep_movsb"},
    "rmw": {w: f"bw_rmw_{w}" for w in VECTOR_WIDTHS},
    "nt_write": {"sse2": "fill_nt_sse"},
    "nt_copy": {"sse2": "copy_nt"},
    "random": {w: f"bw_random_{w}" for w in VECTOR_WIDTHS},
    "write_readback": {w: f"bw_write_read_{w}" for w in ("sse2", "avx2", "avx512")},
    "nt_write_readback": {w: f"bw_ntwrite_read_{w}" for w in ("sse2", "avx2", "avx512")},
}
KINDS = tuple(KERNELS)
# The kinds whose plateau per level is a declared question.
LEVEL_KINDS = ("read", "write", "copy", "rmw", "nt_write")
LEVELS = ("l1d", "l2", "l3", "dram")
LEVEL_LABEL = {"l1d": "L1d", "l2": "L2", "l3": "L3", "dram": "DRAM"}
KIND_WORDS = {"read": "sequential read (sum)", "write": "sequential write (fill)",
              "copy": "copy", "rmw": "read-modify-write (increment in place)",
              "nt_write": "non-temporal write"}

# A knee within this factor of a reported cache size is that cache's.
KNEE_MATCH_FACTOR = 2.0
# The pooled samples of a plateau spread more than this (CV): a contended
# (shared) cache or a noisy host, flagged in the details.
CONTENDED_CV = 0.10
# The best sustained figure: this quantile of the samples (high: GB/s).
BEST_QUANTILE = 0.9
# The thread-scaling kinds and their arms (one per kind; threads in params).
SCALING_KINDS = ("read", "write", "copy", "nt_write")
SCALING_ARMS = tuple(f"threads_{k}" for k in SCALING_KINDS)
LATENCY_ARMS = ("idle_latency", "loaded_latency")
# The chase of the loaded-latency part: one element per 64-byte line (as the
# latency experiment's random chase with npad 7).
CHASE_ELEMENT = 64
# The loaders' kind: sequential reads, the widest vector width.
LOADER_KIND = "read"
# A loader reads its buffer in calls of this many bytes, chunk after chunk
# (the team runner's chunks): it has started streaming within tens of
# microseconds and stops as soon after the chase (a whole 64 MiB pass
# would hold each sample up by milliseconds).
LOADER_CHUNK = 1 << 20
# A working set of at least CHUNKED_FROM bytes is walked in CHUNK_BYTES
# chunks, one iteration per chunk, consecutive calls on consecutive chunks
# (Trial.chunks): the stream the hardware sees is the same as one pass's, but
# a sample lasts a few chunks instead of a whole pass.  A 960 MiB DRAM cell
# (2x a 480 MiB LLC) took ~1.1 s a kind in whole passes (calibration, a
# re-warm of up to 3 passes, 5 samples of one pass each); chunked, its
# warm-up and re-warm are still one pass each.  Not for the readback kinds,
# whose read-back of a chunk right after writing it would hit the cache.
CHUNK_BYTES = 8 << 20
CHUNKED_FROM = 8 * CHUNK_BYTES
READBACK_KINDS = ("write_readback", "nt_write_readback")
CHUNKED_KINDS = ("read", "write", "copy", "rmw", "nt_write", "nt_copy", "random")


def _questions():
    qs = []
    for kind in LEVEL_KINDS:
        for level in LEVELS:
            qs.append(Question(
                f"bandwidth.{kind}_{level}",
                f"{KIND_WORDS[kind].capitalize()} bandwidth of one thread with the working set "
                f"in {LEVEL_LABEL[level]}?", "GB/s", "004",
                f"median GB/s of the samples on the plateau stats.find_levels finds inside "
                f"{LEVEL_LABEL[level]} (best kernel measured, named; bytes per estimated cycle and "
                f"the best sustained p{BEST_QUANTILE * 100:.0f} in details)", better=HIGHER,
                host_shared=level in ("l3", "dram")))
    qs += [
        Question("bandwidth.knees", "Where does the read bandwidth step down, against the cache "
                 "sizes the OS reports?", "levels", "004",
                 "knees of the read curve (stats.find_levels), each matched to a reported cache "
                 f"within {KNEE_MATCH_FACTOR:g}x; value = reported caches matched by a knee"),
        Question("bandwidth.random_vs_sequential", "How much faster is a sequential read than "
                 "reading the same lines in random order (what the prefetchers give)?", "ratio",
                 "004", "ratio of medians sequential / random GB/s, same width, pooled over each "
                 "level's points; value = DRAM (else the largest level measured)", headline=True, band=ans.EFFECT_BAND),
        Question("bandwidth.nt_write_crossover", "From which working set does a non-temporal "
                 "write beat a normal one?", "bytes", "004",
                 "smallest size from which nt_write's median GB/s exceeds the best normal write "
                 "(ratio CI above 1) at every larger size measured"),
        Question("bandwidth.nt_readback", "What does reading back data written with "
                 "non-temporal stores cost, against data written normally?", "ratio", "004",
                 "ratio of medians nt_write_readback / write_readback GB/s per level; value = "
                 "the last cache level measured (the data would still be cached); DRAM is a "
                 "detail of the octave sweep only (sweep=levels skips it)", band=ans.EFFECT_BAND),
        Question("bandwidth.thread_scaling", "How does the aggregate bandwidth scale from 1 to all "
                 "CPUs, per level?", "ratio", "004",
                 "speed-up = ratio of medians aggregate GB/s at N threads / 1 thread (each thread "
                 "its own buffer, started at one barrier, timed to the last finisher), per level "
                 "and kind in details; value = read in DRAM at the most threads planned "
                 "(not measured without it: the same cell every run)", better=HIGHER),
        Question("bandwidth.loaded_latency", "How much longer is a random load while the other "
                 "CPUs stream reads?", "ratio", "004",
                 "ratio of medians loaded / idle ns per load of a random 64-byte-line chase, the "
                 "loaders covering every accepted sample; per working set in details; value = "
                 "DRAM (else the largest size measured)", band=ans.EFFECT_BAND,
                 host_shared=True),
    ]
    return tuple(qs)


# ---- sizes and levels ----------------------------------------------------------

def llc_bytes(machine):
    caches = data_caches(machine)
    return caches[-1][1] if caches else 32 << 20


def level_at(size, caches):
    """The level a working set of `size` bytes lives in (smallest cache that holds it)."""
    for lid, cap in caches:
        if size <= cap:
            return lid
    return "dram"


def sizes_for(lo, hi, per_octave, caches):
    """The working sets: geometric, plus both sides of each cache size,
    rounded to whole 128-byte blocks (a copy's halves stay line multiples)."""
    grid = [s for s in size_grid(lo, hi, per_octave, [c for _, c in caches]) if lo <= s <= hi]
    return sorted({max(128, s // 128 * 128) for s in grid or [lo]})


def kernel_for(kind, width):
    """The row that measures `kind` at `width`, or None."""
    return KERNELS[kind].get(width)


def shared_levels(machine):
    """Level ids of the caches that more than one CPU shares (sysfs'
    shared_cpu_list); with no list, the last level (the usual L3)."""
    from ..machine import parse_cpu_list
    out, listed = set(), False
    for c in machine.get("caches", []) or []:
        if c.get("type") not in ("Data", "Unified") or not c.get("level"):
            continue
        lv = int(c["level"])
        lid = "l1d" if lv == 1 else f"l{lv}"
        text = c.get("shared_cpu_list")
        if text:
            listed = True
            if len(parse_cpu_list(str(text))) > 1:
                out.add(lid)
    caches = data_caches(machine)
    if not listed and caches:
        out.add(caches[-1][0])
    return out


def level_sizes(machine, team, lo, hi):
    """[(level id, working set per thread)]: one size well inside each level
    for a team of `team` threads, each on its own buffer (a shared level
    holds all of them), within [lo, hi]: the geometric middle of the level's
    window (its upper half at most, 4 KiB multiples); DRAM at 2x the LLC."""
    caches = data_caches(machine)
    if not caches:
        return []
    return declared_sizes(caches, lo, hi, team, shared_levels(machine))


def thread_counts(most):
    """1, 2, 4, ... up to `most`, and `most` itself (Drepper's 1, 2, 4 threads;
    every count would be hundreds of points on a large machine)."""
    out, n = [], 1
    while n < most:
        out.append(n)
        n *= 2
    return out + [most]


def widest_width(supported):
    """The widest vector width `supported(width)` accepts (sse2 at least)."""
    return next(w for w in ("avx512", "avx2", "sse2") if supported(w))


def scaling_kernel(kind, width):
    """The row a thread-scaling kind runs: the widest width, movntdq for nt."""
    return KERNELS[kind]["sse2" if kind == "nt_write" else width]


# ---- verification (before any timing) -------------------------------------------

def _reference_sums(data, offset, n):
    """The kernels' checksum of data[offset:offset + n] (see bandwidth.c)."""
    q = n // 8 * 8
    words = np.frombuffer(data, dtype="<u8", count=q // 8, offset=offset) if q else np.zeros(0, np.uint64)
    tail = np.frombuffer(data, dtype=np.uint8, count=n - q, offset=offset + q)
    return (int(words.sum(dtype=np.uint64)) + int(tail.sum(dtype=np.uint64))) % (1 << 64)


def _rotating_offsets(n, per_size, span=64):
    """Misalignments for size n: per_size of 0..span-1, rotating with n so
    that every misalignment is met across sizes."""
    return sorted({(n * 11 + j * (span // per_size) + j * 5) % span for j in range(per_size)})


def check_read_kernel(index, max_size=4096, per_size=2, count=2, size_skew=0, seed=1):
    """The read row's checksum over `count` passes, for every size 0..max_size
    at rotating misalignments, equals numpy's.  size_skew (tests only) tells
    the kernel a wrong size.  None, or the first mismatch as a message."""
    from .._lab import call_kernel
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, max_size + 64 + 64, dtype=np.uint8).tobytes()
    buf = bytearray(data)
    for n in range(max_size + 1):
        for off in _rotating_offsets(n, per_size):
            got = call_kernel(index, None, 0, buf, off, max(0, n + size_skew), 0, count, 0)
            want = _reference_sums(data, off, n) * count % (1 << 64)
            if got != want:
                return f"checksum {got:#x} != {want:#x} (size {n}, misalignment {off})"
    return None


def check_random_kernel(index, max_lines=64, count=2, seed=1):
    """A random-order row sums each line once per pass for a permutation
    order (any start misalignment), and stays on line 0 for indices out of
    range.  None, or the first mismatch as a message."""
    from .._lab import call_kernel
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, max_lines * LINE + 64 + 64, dtype=np.uint8).tobytes()
    buf = bytearray(data)
    for lines in range(max_lines + 1):
        for off in _rotating_offsets(lines, 2):
            order = rng.permutation(lines).astype(np.uint32)
            tail = int(rng.integers(0, LINE))     # bytes past the last line: not read
            got = call_kernel(index, order, 0, buf, off, lines * LINE + tail, 0, count, 0)
            want = _reference_sums(data, off, lines * LINE) * count % (1 << 64)
            if got != want:
                return f"checksum {got:#x} != {want:#x} ({lines} lines, misalignment {off})"
    order = np.full(8, 1 << 30, dtype=np.uint32)
    got = call_kernel(index, order, 0, buf, 0, 8 * LINE, 0, 1, 0)
    if got != _reference_sums(data, 0, LINE) * 8 % (1 << 64):
        return "an index past the last line was not replaced by line 0"
    # one chunk of a longer order (chunked): size / 64 indices reaching
    # every line of the set (aux); an index at or past the reach reads line 0
    order = rng.permutation(max_lines).astype(np.uint32)
    part = max_lines // 4
    order[part - 1] = max_lines
    got = call_kernel(index, order, 0, buf, 0, part * LINE, 0, 1, max_lines)
    want = sum(_reference_sums(data, int(i) * LINE, LINE) for i in order[:part - 1])
    want = (want + _reference_sums(data, 0, LINE)) % (1 << 64)
    if got != want:
        return f"checksum {got:#x} != {want:#x} (a chunk of {part} of {max_lines} lines' order)"
    return None


GUARD = 64


def _guarded_check(index, max_size, per_size, count, value, expect, size_skew, seed, what):
    """Run a writing row on [guard | region | guard] for every size and
    rotating misalignment; `expect(orig_region, n)` gives the region's bytes
    after `count` passes and the checksum the row returns (None = not
    checked).  The guards must be untouched."""
    from .._lab import call_kernel
    rng = np.random.default_rng(seed)
    span = GUARD + 64 + max_size + GUARD
    pattern = rng.integers(0, 256, span, dtype=np.uint8)
    buf = bytearray(span)
    for n in range(max_size + 1):
        for off in _rotating_offsets(n, per_size):
            buf[:] = pattern.tobytes()
            start = GUARD + off
            orig = bytes(buf[start:start + n])
            got = call_kernel(index, buf, start, None, 0, max(0, n + size_skew), value, count, 0)
            want_bytes, want_sum = expect(orig, n)
            if bytes(buf[start:start + n]) != want_bytes:
                region = np.frombuffer(bytes(buf[start:start + n]), np.uint8)
                at = int(np.argmax(region != np.frombuffer(want_bytes, np.uint8)))
                return f"{what}: wrong byte {at} (size {n}, misalignment {off})"
            if bytes(buf[:start]) != pattern[:start].tobytes() or \
                    bytes(buf[start + n:]) != pattern[start + n:].tobytes():
                return f"{what}: wrote outside the region (size {n}, misalignment {off})"
            if want_sum is not None and got != want_sum:
                return f"{what}: checksum {got:#x} != {want_sum:#x} (size {n}, misalignment {off})"
    return None


def rmw_reference(orig, n, value, count):
    """Bytes after `count` increments: every word += value, each trailing byte
    += value & 0xff (bandwidth.c's definition)."""
    q = n // 8 * 8
    words = np.frombuffer(orig[:q], dtype="<u8") + np.uint64(value * count % (1 << 64))
    tail = (np.frombuffer(orig[q:], np.uint8).astype(np.int64) + (value & 0xFF) * count) % 256
    return words.astype("<u8").tobytes() + tail.astype(np.uint8).tobytes()


def check_rmw_kernel(index, max_size=4096, per_size=2, count=2, value=0x0102030405060708,
                     size_skew=0, seed=1):
    """Byte-exact check of an increment row (see rmw_reference)."""
    return _guarded_check(index, max_size, per_size, count, value,
                          lambda orig, n: (rmw_reference(orig, n, value, count), None),
                          size_skew, seed, "increment")


def check_write_read_kernel(index, max_size=4096, per_size=2, count=2, byte=FILL_BYTE,
                            size_skew=0, seed=1):
    """Byte-exact check of a write-then-read row: the region holds the fill
    byte, nothing else changed, and the checksum is the read of it per pass."""
    def expect(orig, n):
        filled = bytes([byte]) * n
        return filled, _reference_sums(filled, 0, n) * count % (1 << 64)
    return _guarded_check(index, max_size, per_size, count, byte, expect, size_skew, seed,
                          "write then read")


def verify_kernel(row):
    """Check one kernel row as timed here; None or a message."""
    from .._lab import verify_copy
    from .fill import check_kernel as check_fill_kernel
    name = row.name
    if row.group == "fill":
        bad = check_fill_kernel(row.index, FILL_BYTE, 0, 0, 1, 4096)
        return None if bad is None else (f"size {bad[0]}, dst offset {bad[1]}, byte {bad[2]}: "
                                         f"expected {bad[3]:#04x}, got {bad[4]:#04x}")
    if row.group == "copy":
        return verify_copy(row.index, 4096, 64, False, 0, 1)
    if name.startswith("bw_read_"):
        return check_read_kernel(row.index)
    if name.startswith("bw_random_"):
        return check_random_kernel(row.index)
    if name.startswith("bw_rmw_"):
        return check_rmw_kernel(row.index)
    if name.startswith(("bw_write_read_", "bw_ntwrite_read_")):
        return check_write_read_kernel(row.index)
    raise MemfxError(f"no verifier for kernel {name}")


def check_team(lab, cpus, kind, kernel, sizes=(0, 1, 63, 4096 + 24), seed=1):
    """One team call per size: member i on cpus[i], on its own guarded
    buffers (its own fill byte for the writes, its own random source for a
    copy), runs `kernel`; every member must run on its CPU and write exactly
    its own region (byte-exact, guards intact), a read must return its own
    buffer's checksum.  None, or the first failure as a message."""
    rng = np.random.default_rng(seed)
    for size in sizes:
        members, expect = [], []
        for i, cpu in enumerate(cpus):
            off = GUARD + (7 * i + size) % 64
            pattern = rng.integers(0, 256, off + size + GUARD, dtype=np.uint8).tobytes()
            buf = bytearray(pattern)
            if kind == "read":
                members.append(TeamMember(cpu, src=Region(buf, off, size), size=size))
                expect.append((buf, pattern, off, None, _reference_sums(pattern, off, size)))
            elif kind == "copy":
                source = rng.integers(0, 256, size + 64, dtype=np.uint8).tobytes()
                members.append(TeamMember(cpu, dst=Region(buf, off, size),
                                          src=Region(bytearray(source), 0, size), size=size))
                expect.append((buf, pattern, off, source[:size], None))
            else:
                byte = (FILL_BYTE + 17 * i) & 0xFF or 1
                members.append(TeamMember(cpu, dst=Region(buf, off, size), size=size, value=byte))
                expect.append((buf, pattern, off, bytes([byte]) * size, None))
        trial = Trial(kernel, size=size, team=Team(members, "together"))
        report = lab.team_call(trial, 1)
        for i, (th, (buf, pattern, off, want, checksum)) in enumerate(zip(report["threads"],
                                                                          expect)):
            if th["cpu_start"] != cpus[i] or th["cpu_end"] != cpus[i]:
                return f"member {i} ran on CPU {th['cpu_start']}..{th['cpu_end']}, not {cpus[i]}"
            if checksum is not None and th["result"] != checksum:
                return f"member {i} read checksum {th['result']:#x} != {checksum:#x} (size {size})"
            if want is not None and bytes(buf[off:off + size]) != want:
                return f"member {i} wrote the wrong bytes (size {size})"
            if bytes(buf[:off]) != pattern[:off] or \
                    bytes(buf[off + size:]) != pattern[off + size:]:
                return f"member {i} wrote outside its region (size {size})"
    return None


# ---- working sets ------------------------------------------------------------------

def pooled_set(lab, key, size, thp):
    """A working set of `size` bytes from the run's mapping under `key`
    (lab.pooled_buffer: mapped and faulted once per replica).  Faulting a
    fresh mapping per cell was most of the sweep's time on a 480 MiB-LLC
    guest: 1 GiB working sets, and a guest's first touch of a page also
    faults on the host (1.0-1.3 s per fresh GiB there, 0.35 s re-used).
    The mapping has POOL_SLACK bytes to spare, so that a copy's skewed
    halves (copy_halves) of the same size fit in it."""
    return lab.pooled_buffer(key, size, capacity=size + POOL_SLACK, hugepages=thp)


POOL_SLACK = 64 << 10


# The destination starts this many bytes past a page boundary, the source on
# one: src[i] and dst[i] never share their low 12 address bits, so no load
# waits on an older store to the same 4 KiB offset (4K aliasing, seed 003).
# With both page-aligned a 64 MiB copy ran ~6 % slower here (21.2 vs 22.6
# GB/s, interleaved) and memfx read 0.87-0.98x likwid-bench's copy_avx512.
COPY_DST_SKEW = 2048 + 64


def copy_halves(lab, key, size, thp):
    """(src, dst, half) of a copy of `size` bytes of traffic: two halves of
    one pooled mapping, the source page-aligned and the destination
    COPY_DST_SKEW bytes past a page boundary, the source filled with the
    fill byte."""
    half = size // 2
    gap = -(-half // 4096) * 4096 + COPY_DST_SKEW
    whole = pooled_set(lab, key, gap + half, thp)
    src = Region(whole.buffer, whole.offset, half, whole.address)
    dst = Region(whole.buffer, whole.offset + gap, half, whole.address + gap)
    view = np.frombuffer(src.buffer, np.uint8, count=half, offset=src.offset)
    view[:] = FILL_BYTE
    del view
    return src, dst, half


def chunked(trial, kind, size):
    """Walk a working set of CHUNKED_FROM bytes or more in CHUNK_BYTES chunks
    (see CHUNK_BYTES); the trial's size becomes one chunk's and its warm-up
    one pass over every chunk.  Random: each chunk is a slice of the whole
    set's order, its indices reaching every line (aux)."""
    if trial.size < CHUNKED_FROM:
        return trial
    if kind == "random":
        lines = trial.size // LINE
        per = CHUNK_BYTES // LINE
        trial.chunks = lines // per
        trial.aux = lines
        trial.size = per * LINE
        trial.dst_step, trial.src_step = per * 4, 0     # uint32 indices
    else:
        trial.chunks = trial.size // CHUNK_BYTES
        trial.size = CHUNK_BYTES
        step = CHUNK_BYTES
        trial.dst_step = step if trial.dst is not None else 0
        trial.src_step = step if trial.src is not None else 0
    trial.warmup = trial.chunks
    trial.extra["chunk_bytes"] = CHUNK_BYTES
    return trial


# ---- the experiment ---------------------------------------------------------------

def where(level):
    """The working sets a level's figure comes from, e.g. "3 working sets 2MB..8MB"."""
    first, last = format_size(level["first_size"]), format_size(level["last_size"])
    if level["points"] == 1:
        return f"1 working set of {first}B"
    return f"{level['points']} working sets {first}B..{last}B"


@register
class Bandwidth(Experiment):
    name = "bandwidth"
    order = 15
    title = "Bandwidth per cache level: read, write, copy, increment, non-temporal, random"
    question = ("How many GB/s does one thread read, write, copy and update in each cache level "
                "and in DRAM, what do the prefetchers give, and when do non-temporal stores pay?")
    seeds = ("004",)
    arms = KINDS + SCALING_ARMS + LATENCY_ARMS
    params = [
        Param("kinds", "list:str", list(KINDS), "what to measure: " + ", ".join(KINDS),
              "read,write", choices=KINDS),
        Param("widths", "list:str", ["auto"], "kernel widths for read/write/copy/rmw/random: "
              "scalar, sse2, avx2, avx512, rep (rep stosb / rep movsb: write and copy), auto = "
              "the widest vector width this CPU has; the nt kinds use movntdq",
              "avx2,rep", choices=WIDTHS + ("auto",)),
        Param("pages", "list:str", ["4k"], "page sizes: 4k and/or thp (MADV_HUGEPAGE)",
              "4k,thp", choices=("4k", "thp")),
        Param("min_size", "size", 4096, "smallest working set, bytes", "16K", minimum=256),
        Param("max_size", "size", "auto", "largest working set, bytes; auto = 4x the last-level "
              "cache (at least 64 MiB, bounded by free memory)", "1G"),
        Param("per_octave", "int", 3, "working sets per doubling (geometric steps)", "4",
              minimum=1, maximum=16),
        Param("sweep", "str", "octaves", "working sets of the one-thread kinds: octaves = "
              "per_octave sizes from min_size to max_size (the curves, their knees); levels = "
              "one declared size per cache level and DRAM (level_sizes: the geometric middle "
              "of the level's window, DRAM at 2x the LLC -- the same cells every run)",
              "levels", choices=("octaves", "levels")),
        Param("dram_factor", "float", 4.0, "max_size auto = this many times the last-level "
              "cache (at least 64 MiB, bounded by free memory)", "2", minimum=2.0, maximum=64.0),
        Param("scaling", "list:str", list(SCALING_KINDS), "kinds measured at 1..N threads, one "
              "pinned thread per CPU, each on its own buffer (none = skip): " +
              ", ".join(SCALING_KINDS), "read,copy", choices=SCALING_KINDS + ("none",)),
        Param("latency_levels", "list:str", ["l2", "l3", "dram"], "working sets of the "
              "loaded-vs-idle latency chase, by level (none = skip): l1d, l2, l3, dram",
              "dram", choices=LEVELS + ("none",)),
        Param("threads", "int", 0, "most threads of the scaling and loaded-latency parts; 0 = "
              "every CPU this process may use", "2", minimum=0, maximum=64),
        Param("cpus", "list:int", "auto", "CPUs for the threaded parts (auto = every CPU this "
              "process may run on); the measuring CPU (cpu) runs thread 0", "0,1", minimum=0),
    ]
    presets = {
        # 5 samples (min_samples: fewer make every comparison inconclusive)
        # x 3 replicas (COMMON_PRESETS), at one declared working set per
        # level: the octave sweep's 28 sizes x 8 kinds were 85 s a replica on
        # a 480 MiB-LLC guest, most of it in the 256 MiB-1 GiB cells that
        # answer nothing but the knees
        "quick": {"samples": 5, "min_sample_ms": 0.5, "per_octave": 1, "dram_factor": 2,
                  "sweep": "levels",
                  "kinds": ",".join(k for k in KINDS if k != "nt_copy"),
                  # the threaded parts' quick share: no nt_write scaling, DRAM-only
                  # loaded latency (a team sample needs every CPU at once, which a
                  # busy machine rarely gives)
                  "scaling": "read", "latency_levels": "dram"},
        "full": {"samples": 11, "min_sample_ms": 2.0, "per_octave": 4,
                 "widths": "scalar,sse2,avx2,avx512,rep", "pages": "4k,thp"},
    }
    questions = _questions()

    plots = (
        # one panel per kind (a full run has ~30 kind x kernel x page-size
        # lines: on one panel the legend covered the curves)
        PlotSpec("kinds", "GB/s vs working set, one panel per kind", kind="curve",
                 x="size_bytes", series=("kernel", "pages"), size_x=True,
                 arms=("read", "write", "copy", "rmw", "nt_write", "nt_copy"),
                 facets=("arm",), facet_title="{arm}: GB/s vs working set",
                 facet_order=(("arm", ("read", "write", "copy", "rmw", "nt_write", "nt_copy")),),
                 ylabel="GB/s", xlabel="working set (bytes)"),
        PlotSpec("random", "sequential vs random line order (what the prefetchers give)",
                 kind="curve", x="size_bytes", series=("arm", "kernel", "pages"), size_x=True,
                 arms=("read", "random"), log_y=True, ylabel="GB/s (log)",
                 xlabel="working set (bytes)"),
        PlotSpec("nt", "non-temporal vs normal stores, and reading the data back", kind="curve",
                 x="size_bytes", series=("arm", "kernel", "pages"), size_x=True,
                 arms=("write", "nt_write", "write_readback", "nt_write_readback"),
                 ylabel="GB/s", xlabel="working set (bytes)"),
        PlotSpec("scaling", "aggregate GB/s vs threads (each its own buffer)",
                 kind="curve", x="threads", series=("level",), facets=("arm",),
                 facet_title="{arm}: aggregate GB/s vs threads", select={"part": "scaling"}, log_y=True,
                 ylabel="GB/s, all threads (log)", xlabel="threads"),
        PlotSpec("loaded", "random-chase latency, idle vs while the other CPUs stream reads",
                 kind="bars", x="size_bytes", series=("arm",), select={"part": "loaded"},
                 ylabel="ns per load", xlabel="working set of the chase (bytes)"),
    )

    # -- plan --
    def max_bytes(self, params, machine):
        if params["max_size"] != "auto":
            return params["max_size"]
        avail = (machine.get("memory") or {}).get("available_bytes") or (4 << 30)
        factor = params.get("dram_factor", 4.0)
        return int(min(max(factor * llc_bytes(machine), 64 << 20), avail / 4))

    @staticmethod
    def supported(width, machine):
        isa = WIDTH_ISA[width]
        if not isa:
            return True
        flags = machine.get("flags") or {}
        if flags:
            return bool(flags.get(isa))
        from .._lab import isa_supported
        return isa_supported(isa)

    def widths(self, params, machine):
        """The planned widths (auto = the widest vector width supported)."""
        out = []
        for w in params["widths"]:
            if w == "auto":
                w = next(x for x in reversed(VECTOR_WIDTHS) if self.supported(x, machine))
            if w not in out and self.supported(w, machine):
                out.append(w)
        return out

    def kernels(self, params, machine):
        """[(kind, kernel)] to measure."""
        widths = self.widths(params, machine)
        widest = next((w for w in reversed(VECTOR_WIDTHS) if w in widths and w != "scalar"),
                      None) or next(w for w in ("avx512", "avx2", "sse2")
                                    if self.supported(w, machine))
        out = []
        for kind in params["kinds"]:
            if kind in ("nt_write", "nt_copy"):
                out.append((kind, KERNELS[kind]["sse2"]))
            elif kind in ("write_readback", "nt_write_readback"):
                out.append((kind, KERNELS[kind][widest]))
            else:
                out += [(kind, KERNELS[kind][w]) for w in widths if w in KERNELS[kind]]
        return out

    def plan(self, params, machine):
        lo, hi = params["min_size"], self.max_bytes(params, machine)
        if hi < lo:
            raise ParamError(f"max_size ({format_size(hi)}) is below min_size ({format_size(lo)})")
        if not self.widths(params, machine):
            raise ParamError(f"widths: this CPU supports none of {', '.join(params['widths'])}")
        pairs = self.kernels(params, machine)
        if not pairs:
            raise ParamError("the kinds and widths given select no kernel (rep applies to write "
                             "and copy only)")
        avail = (machine.get("memory") or {}).get("available_bytes")
        peak = hi + hi // 16 + (2 << 20)      # working set + a random order + alignment
        if avail and peak > avail * 0.8:
            raise ParamError(f"max_size {format_size(hi)} does not fit: {format_size(avail)} "
                             f"of memory is available")
        skip = set()
        if params.get("sweep") == "levels":
            levels = level_sizes(machine, 1, lo, hi)
            sizes = [s for _, s in levels] or [lo, hi]
            # the readbacks answer in the largest cache level (nt_readback);
            # their DRAM cell, a detail, was a fifth of a quick replica's time
            skip = {(kind, s) for lid, s in levels if lid == "dram" for kind in READBACK_KINDS}
        else:
            sizes = sizes_for(lo, hi, params["per_octave"], data_caches(machine))
        # sizes outermost: the kinds of one size run back to back
        pts = [Point(kind, {"size_bytes": s, "pages": pg, "kernel": k})
               for pg in params["pages"] for s in sizes for kind, k in pairs
               if (kind, s) not in skip]
        return pts + self.team_points(params, machine, lo, hi)

    def team_cpus(self, params):
        """The CPUs of the threaded parts, the measuring CPU first (resolved
        once, in the parent, and written back into params)."""
        _, cpus = resolve_cpus(params)
        most = params.get("threads") or len(cpus)
        return cpus[:max(1, min(most, len(cpus)))]

    def team_points(self, params, machine, lo, hi):
        """The thread-scaling and loaded-latency points (none with one CPU)."""
        cpus = self.team_cpus(params)
        if len(cpus) < 2:
            return []
        width = widest_width(lambda w: self.supported(w, machine))
        pg = params["pages"][0]
        pts = []
        kinds = [k for k in params["scaling"] if k != "none"]
        for lid, size in level_sizes(machine, len(cpus), lo, hi):
            for kind in kinds:
                for n in thread_counts(len(cpus)):
                    pts.append(Point(f"threads_{kind}", {
                        "part": "scaling", "level": lid, "size_bytes": size, "threads": n,
                        "total_bytes": size * n, "cpus": cpu_text(cpus[:n]), "pages": pg,
                        "kernel": scaling_kernel(kind, width)}))
        levels = [lv for lv in params["latency_levels"] if lv != "none"]
        for lid, size in level_sizes(machine, 1, lo, hi):
            if lid not in levels:
                continue
            for arm in LATENCY_ARMS:
                pts.append(Point(arm, {
                    "part": "loaded", "level": lid, "size_bytes": size, "threads": len(cpus),
                    "cpus": cpu_text(cpus), "pages": pg, "kernel": "chase_ptr",
                    "loader": KERNELS[LOADER_KIND][width],
                    # each loader streams its own buffer from DRAM (as MLC's do)
                    "loader_bytes": int(max(llc_bytes(machine) * DRAM_FROM, 64 << 20))}))
        return pts

    def estimate_seconds(self, params, machine):
        pts = self.plan(params, machine)
        per_cell = params["samples"] * params["min_sample_ms"] / 1000 + 0.01
        big = sum(p.params["size_bytes"] for p in pts) / 5e9 * (params["samples"] + 3)
        return 2 + len(pts) * per_cell + big

    # -- one trial --
    def prepare(self, point, params, lab):
        if point.params.get("part") == "scaling":
            return self.prepare_scaling(point, params, lab)
        if point.params.get("part") == "loaded":
            return self.prepare_loaded(point, params, lab)
        kind, p = point.arm, point.params
        size, kernel, thp = p["size_bytes"], p["kernel"], p["pages"] == "thp"
        extra = {}
        common = dict(metric="bandwidth", difference=False, warmup=1, extra=extra)
        # working sets come from the run's pooled mapping (pooled_set)
        if kind in ("copy", "nt_copy"):
            src, dst, half = copy_halves(lab, "main", size, thp)
            region, trial = dst, Trial(kernel, size=half, src=src, dst=dst, **common)
        elif kind == "random":
            region = pooled_set(lab, "main", size, thp)
            lines = size // LINE
            order_region = lab.pooled_buffer("order", 4 * lines)
            view = np.frombuffer(order_region.buffer, np.uint32, count=lines,
                                 offset=order_region.offset)
            order = np.arange(lines, dtype=np.uint32)
            np.random.default_rng([params["seed"], size]).shuffle(order)
            view[:] = order
            del view, order
            trial = Trial(kernel, size=size, src=region, dst=order_region, **common)
        elif kind == "read":
            region = pooled_set(lab, "main", size, thp)
            trial = Trial(kernel, size=size, src=region, **common)
        elif kind == "rmw":
            region = pooled_set(lab, "main", size, thp)
            trial = Trial(kernel, size=size, dst=region, value=RMW_INCREMENT, **common)
        else:   # write, nt_write and the readbacks: the fill byte's value semantic
            region = pooled_set(lab, "main", size, thp)
            trial = Trial(kernel, size=size, dst=region, value=FILL_BYTE, **common)
        if thp:
            share = lab.huge_page_share(region)
            if share is not None:
                extra["huge_page_share"] = round(share, 3)
        if kind in CHUNKED_KINDS:
            chunked(trial, kind, size)
        return trial

    @staticmethod
    def member_buffers(kind, size, lab, thp, member=0):
        """(dst, src, size, value) of one team member's own buffers for `kind`
        (pooled per member; member 0's is the one-thread kinds' mapping)."""
        key = "main" if member == 0 else ("member", member)
        if kind == "copy":
            src, dst, half = copy_halves(lab, key, size, thp)
            return dst, src, half, 0
        region = pooled_set(lab, key, size, thp)
        if kind == "read":
            return None, region, size, 0
        return region, None, size, FILL_BYTE     # write, nt_write

    def prepare_scaling(self, point, params, lab):
        """A team of `threads` members, member 0 on the measuring CPU, each on
        its own buffers, all running the kind's kernel over the same size."""
        p = point.params
        kind = point.arm[len("threads_"):]
        cpus = parse_cpu_text(p["cpus"])
        if cpus[0] != lab.cpu:
            raise MemfxError(f"thread 0 must run on the measuring CPU {lab.cpu}, not {cpus[0]}")
        members, size = [], p["size_bytes"]
        for i, cpu in enumerate(cpus):
            dst, src, n, value = self.member_buffers(kind, size, lab, p["pages"] == "thp", i)
            members.append(TeamMember(cpu, dst=dst, src=src))
        return Trial(p["kernel"], size=n, value=value, dst=members[0].dst, src=members[0].src,
                     metric="bandwidth", difference=False, warmup=1,
                     team=Team(members, "together"))

    def prepare_loaded(self, point, params, lab):
        """The chase on the measuring CPU, alone (idle) or with every other CPU
        of the list streaming reads of its own buffer (loaded)."""
        p = point.params
        cpus = parse_cpu_text(p["cpus"])
        if cpus[0] != lab.cpu:
            raise MemfxError(f"thread 0 must run on the measuring CPU {lab.cpu}, not {cpus[0]}")
        size, thp = p["size_bytes"], p["pages"] == "thp"
        n = size // CHASE_ELEMENT
        region = pooled_set(lab, "main", n * CHASE_ELEMENT, thp)
        chain = lab.link_chain(region, CHASE_ELEMENT, n,
                               shuffled_order(n, [params["seed"], size]))
        members = [TeamMember(cpus[0])]
        if point.arm == "loaded_latency":
            chunks = max(1, p["loader_bytes"] // LOADER_CHUNK)
            for i, cpu in enumerate(cpus[1:], 1):
                src = pooled_set(lab, ("member", i), chunks * LOADER_CHUNK, thp)
                members.append(TeamMember(cpu, kernel=p["loader"], src=src, size=LOADER_CHUNK,
                                          count=1, value=0, aux=0, chunks=chunks))
        return Trial("chase_ptr", src=chain, size=0, metric="time", difference=True,
                     warmup=min(n, 1 << 20), resume=True, extra={"elements": n},
                     team=Team(members, "background"))

    def verify(self, lab, params):
        """Every planned kernel, before anything is timed (see the checkers above)."""
        machine = {"flags": {}}
        planned = [k for _, k in self.kernels(params, machine)]
        cpus = self.team_cpus(params)
        width = widest_width(lambda w: self.supported(w, machine))
        team_kinds = [k for k in params["scaling"] if k != "none"] if len(cpus) > 1 else []
        team_kernels = [scaling_kernel(k, width) for k in team_kinds]
        if len(cpus) > 1 and [lv for lv in params["latency_levels"] if lv != "none"]:
            team_kernels.append(KERNELS[LOADER_KIND][width])
        for kernel in dict.fromkeys(planned + team_kernels):
            row = lab.kernels.get(kernel)
            if row is None:
                raise MemfxError(f"no kernel {kernel!r} in the core")
            if not row.supported:
                continue
            bad = verify_kernel(row)
            if bad:
                raise MemfxError(f"kernel {kernel} failed verification: {bad}")
        for kind in team_kinds:
            bad = check_team(lab, cpus, kind, scaling_kernel(kind, width))
            if bad:
                raise MemfxError(f"team {kind} on CPUs {cpu_text(cpus)} failed verification: {bad}")

    # -- analysis --
    def analyze(self, data):
        caches = data_caches(data.machine)
        bpc = _bytes_per_cycle(data.samples)
        curves = _curves(data.points)
        out = []
        read_levels = None
        for kind in LEVEL_KINDS:
            found = {}
            for (k, kernel, pages), pts in curves.items():
                if k != kind:
                    continue
                levels, plateaus = plateaus_by_level(pts, caches)
                if kind == "read" and (read_levels is None or pages == "4k"):
                    read_levels = (pts, levels, kernel, pages)
                for lid, (ps, how) in plateaus.items():
                    found.setdefault(lid, []).append((kernel, pages, ps, how))
            for lid in LEVELS:
                out.append(self._level_answer(kind, lid, found.get(lid), caches, curves, bpc,
                                              data.points))
        if data.params.get("sweep") == "levels":
            out.append(ans.not_measured(self.declared("knees"), "one working set per level was "
                                        "measured (sweep=levels, the quick preset): knees need "
                                        "the octave sweep (--set sweep=octaves)"))
        else:
            out.append(self._knee_answer(read_levels, caches))
        out.append(self._random_answer(curves, caches))
        out.append(self._nt_crossover_answer(curves))
        out.append(self._readback_answer(curves, caches))
        out.append(self._scaling_answer(data))
        out.append(self._loaded_answer(data))
        return out

    @staticmethod
    def _one_cpu_reason(data):
        """Why the threaded parts could not run, or None."""
        cpus = data.params.get("cpus")
        if isinstance(cpus, (list, tuple)) and len(cpus) < 2:
            return (f"only one CPU ({cpu_text(cpus)}) is allowed to this process: no second "
                    f"thread to run beside the first")
        most = data.params.get("threads")
        if most == 1:
            return "threads=1: no second thread to run beside the first"
        return None

    def _scaling_answer(self, data):
        q = self.declared("thread_scaling")
        pts = [p for p in data.points if p["params"].get("part") == "scaling"]
        why = self._one_cpu_reason(data)
        if why:
            return ans.not_measured(q, why)
        if not pts:
            return ans.not_measured(q, "the scaling part was not measured (scaling=none, or no "
                                       "level's working set lies between min_size and max_size)")
        groups = {}
        for p in pts:
            pr = p["params"]
            groups.setdefault((pr["level"], p["arm"][len("threads_"):]), {})[pr["threads"]] = p
        details = []
        for (lid, kind), by_n in sorted(groups.items(), key=lambda kv: (
                LEVELS.index(kv[0][0]) if kv[0][0] in LEVELS else 9, kv[0][1])):
            one = by_n.get(1)
            for n in sorted(by_n):
                if n == 1:
                    continue
                p = by_n[n]
                # the columns a reader wants first come first (tables show the first few)
                d = {"label": f"{LEVEL_LABEL.get(lid, lid)} {kind} x{n}", "value": None,
                     "unit": "ratio", "ci_low": None, "ci_high": None,
                     "single_gb_per_s": one["median"] if one and one.get("n") else None,
                     "aggregate_gb_per_s": p["median"] if p.get("n") else None,
                     "level": lid, "kind": kind, "threads": n, "kernel": p["params"]["kernel"],
                     "size_bytes_per_thread": p["params"]["size_bytes"],
                     "rejected": p.get("rejected", 0) + (one.get("rejected", 0) if one else 0),
                     "evidence": ans.evidence_keys([x for x in (p, one) if x])}
                if not (one and one.get("n") and p.get("n")):
                    d.update(value=None, ci_low=None, ci_high=None, verdict=ans.NOT_MEASURED,
                             why="every sample of one side was rejected (threads not side by "
                                 "side, switched out or migrated: a busy machine)")
                else:
                    e = ans.effect(q, p["values"], one["values"], "")
                    d.update(value=e.value, ci_low=e.ci_low, ci_high=e.ci_high, verdict="measured",
                             per_thread_gb_per_s=p["median"] / n,
                             efficiency=e.value / n if e.value is not None else None)
                details.append(d)
        ok = [d for d in details if d["value"] is not None]
        if not ok:
            return ans.not_measured(q, "no level has both its 1-thread and its N-thread point: "
                                       "every sample of one side was rejected (threads not side "
                                       "by side, switched out or migrated: a busy machine)")
        # The same evidence every run (issue 22): the answer is the declared
        # cell -- read, DRAM, the most threads planned -- or not measured;
        # never whichever level happened to survive (DRAM in one run and L3
        # in the next made a 1.98 -> 1.30 "regression").
        most = max(d["threads"] for d in details)
        top = [d for d in ok if d["threads"] == most]
        head = next((d for d in top if d["kind"] == "read" and d["level"] == "dram"), None)
        if head is None:
            return ans.Answer(q.id, ans.NOT_MEASURED,
                              f"the declared cell (read in DRAM with {most} threads) has no "
                              f"value: not planned, or every sample of one side was rejected; "
                              f"the other levels are in details", details=details)
        reads = [d for d in top if d["kind"] == head["kind"]]
        because = (f"{most} threads, each on its own buffer (sharing nothing, as two processes), "
                   f"{head['kind']} {head['value']:.2f}x one thread's GB/s in "
                   f"{LEVEL_LABEL.get(head['level'], head['level'])} "
                   f"({head['single_gb_per_s']:.1f} -> {head['aggregate_gb_per_s']:.1f} GB/s); "
                   + ", ".join(f"{LEVEL_LABEL.get(d['level'], d['level'])} {d['value']:.2f}x"
                               for d in reads if d is not head))
        return ans.Answer(q.id, "measured", because.rstrip("; "), value=head["value"],
                          ci_low=head["ci_low"], ci_high=head["ci_high"],
                          evidence=head["evidence"], details=details, estimator=q.decides)

    def _loaded_answer(self, data):
        q = self.declared("loaded_latency")
        why = self._one_cpu_reason(data)
        if why:
            return ans.not_measured(q, why.replace("run beside the first",
                                                   "stream reads while the first chases"))
        pts = [p for p in data.points if p["params"].get("part") == "loaded"]
        if not pts:
            return ans.not_measured(q, "the loaded-latency part was not measured "
                                       "(latency_levels=none, or no level's working set lies "
                                       "between min_size and max_size)")
        by_size = {}
        for p in pts:
            by_size.setdefault(p["params"]["size_bytes"], {})[p["arm"]] = p
        loader = {}
        for smp in data.samples:
            pr = smp.get("point") or {}
            if pr.get("part") == "loaded" and smp["arm"] == "loaded_latency":
                c = smp.get("counters") or {}
                if c.get("team_loader_gb_per_s") is not None:
                    loader.setdefault(pr["size_bytes"], []).append(c["team_loader_gb_per_s"])
        details = []
        for size in sorted(by_size):
            idle, busy = by_size[size].get("idle_latency"), by_size[size].get("loaded_latency")
            lid = (idle or busy)["params"]["level"]
            d = {"label": f"{format_size(size)}B ({LEVEL_LABEL.get(lid, lid)})", "value": None,
                 "unit": "ratio", "ci_low": None, "ci_high": None,
                 "idle_ns": idle["median"] if idle and idle.get("n") else None,
                 "loaded_ns": busy["median"] if busy and busy.get("n") else None,
                 "level": lid, "size_bytes": size,
                 "loaders": (busy or idle)["params"]["threads"] - 1,
                 "loader_gb_per_s": float(np.median(loader[size])) if loader.get(size) else None,
                 "rejected": sum(x.get("rejected", 0) for x in (idle, busy) if x),
                 "evidence": ans.evidence_keys([x for x in (idle, busy) if x])}
            if d["idle_ns"] is None or d["loaded_ns"] is None:
                d.update(value=None, ci_low=None, ci_high=None, verdict=ans.NOT_MEASURED)
            else:
                e = ans.effect(q, busy["values"], idle["values"], "")
                d.update(value=e.value, ci_low=e.ci_low, ci_high=e.ci_high, verdict=e.verdict)
            details.append(d)
        ok = [d for d in details if d["value"] is not None]
        if not ok:
            return ans.not_measured(q, "every sample of the idle or the loaded chase was "
                                       "rejected (loaders not covering the chase, switched out "
                                       "or migrated: a busy machine)")
        head = next((d for d in ok if d["level"] == "dram"), ok[-1])
        bw = f", loaders {head['loader_gb_per_s']:.1f} GB/s" if head["loader_gb_per_s"] else ""
        because = (f"a random load takes {head['value']:.2f}x as long in {head['label']} while "
                   f"{head['loaders']} other CPU(s) stream reads ({head['idle_ns']:.0f} -> "
                   f"{head['loaded_ns']:.0f} ns{bw})"
                   + "".join(f"; {d['label']} {d['value']:.2f}x" for d in ok if d is not head))
        return ans.Answer(q.id, "measured", because, value=head["value"], ci_low=head["ci_low"],
                          ci_high=head["ci_high"], evidence=head["evidence"], details=details,
                          estimator=q.decides)

    def _level_answer(self, kind, lid, candidates, caches, curves, bpc, planned):
        q = self.declared(f"{kind}_{lid}")
        label = LEVEL_LABEL[lid]
        if not caches:
            return ans.not_measured(q, "the machine reports no cache sizes, so no level can be "
                                       "told apart")
        if lid != "dram" and lid not in dict(caches):
            return ans.not_measured(q, f"this machine reports no {label}")
        if not any(k == kind for k, _, _ in curves):
            return ans.not_measured(q, f"the {kind} kind was not measured")
        if not candidates:
            return ans.not_measured(q, _unreached(kind, lid, caches, curves, planned))
        details = []
        for kernel, pages, ps, how in candidates:
            values = ans.pooled_values(ps)
            cyc = [c for p in ps for c in bpc.get(ans.point_key(p), [])]
            lo_ci, hi_ci = stats.bootstrap_ci(values) if values.size >= 3 else (None, None)
            cv = stats.cv_of(values) if values.size else None
            details.append({
                "label": f"{kernel} ({pages})", "kernel": kernel, "pages": pages,
                "value": float(np.median(values)), "unit": "GB/s", "ci_low": lo_ci,
                "ci_high": hi_ci, "bytes_per_cycle": float(np.median(cyc)) if cyc else None,
                "best_sustained_gb_per_s": float(np.quantile(values, BEST_QUANTILE)),
                "first_size": ps[0]["params"]["size_bytes"], "last_size": ps[-1]["params"]["size_bytes"],
                "points": len(ps), "plateau": how, "cv": cv,
                "contended": bool(cv is not None and cv > CONTENDED_CV),
                "evidence": ans.evidence_keys(ps)})
        best = max(range(len(details)), key=lambda i: details[i]["value"])
        d = details[best]
        ps = candidates[best][2]
        a = ans.measured(q, ans.pooled_values(ps), "", evidence=ans.evidence_keys(ps),
                         details=details, estimator="median of the plateau's samples (pooled), "
                                                    "best kernel")
        per_cycle = f", {d['bytes_per_cycle']:.1f} B/cycle (est.)" if d["bytes_per_cycle"] else ""
        how = "" if d["plateau"] == "find_levels" else \
            " (no plateau found there: the points inside the level)"
        flag = "; the samples spread widely (contended or noisy), take it with care" \
            if d["contended"] else ""
        a.because = (f"{a.value:.1f} GB/s{per_cycle} with {d['kernel']} ({d['pages']} pages), "
                     f"{where(d)}{how}{flag}")
        return a

    def _knee_answer(self, read_levels, caches):
        q = self.declared("knees")
        if read_levels is None:
            return ans.not_measured(q, "the read kind was not measured")
        pts, levels, kernel, pages = read_levels
        if len(pts) < 4:
            return ans.not_measured(q, "fewer than 4 working sets: no curve to find knees on")
        details, matched = [], set()
        for lv in levels[:-1]:
            if not lv.knee_size:
                continue
            cache = _nearest_cache(caches, lv.knee_size)
            d = {"label": f"knee {format_size(lv.knee_size)}B", "value": float(lv.knee_size),
                 "unit": "bytes", "ci_low": lv.knee_low, "ci_high": lv.knee_high,
                 "gb_per_s_before": 1.0 / lv.latency_ns if lv.latency_ns else None}
            if cache:
                matched.add(cache[0])
                d.update(cache=LEVEL_LABEL.get(cache[0], cache[0]), reported_bytes=cache[1],
                         verdict="detected")
            else:
                d.update(cache=None, verdict="not_detected")
            details.append(d)
        reached = [lid for lid, cap in caches if cap * DRAM_FROM <= pts[-1]["params"]["size_bytes"]
                   and cap * INSIDE_ABOVE >= pts[0]["params"]["size_bytes"]]
        for lid in reached:
            if lid not in matched:
                cap = dict(caches)[lid]
                details.append({"label": f"{LEVEL_LABEL.get(lid, lid)} {format_size(cap)}B",
                                "value": None, "unit": "bytes", "cache": LEVEL_LABEL.get(lid, lid),
                                "reported_bytes": cap, "verdict": "not_detected"})
        if not reached:
            return ans.not_measured(q, "the sweep does not span any reported cache size "
                                       "(from inside it to twice it)")
        names = ", ".join(f"{d['cache']} at {format_size(d['value'])}B" for d in details
                          if d.get("verdict") == "detected")
        missing = [d["cache"] for d in details if d.get("value") is None]
        unmatched = [format_size(d["value"]) + "B" for d in details
                     if d.get("value") is not None and not d.get("cache")]
        because = (f"read curve ({kernel}, {pages}): knees {names or 'none matched'}"
                   + (f"; no step at {', '.join(missing)}" if missing else "")
                   + (f"; knees at no reported size: {', '.join(unmatched)}" if unmatched else ""))
        return ans.Answer(q.id, "measured", because, value=float(len(matched & set(reached))),
                          evidence=ans.evidence_keys(pts), details=details,
                          estimator=f"stats.find_levels on 1/GB/s; a knee within "
                                    f"{KNEE_MATCH_FACTOR:g}x of a reported size matches it")

    def _random_answer(self, curves, caches):
        q = self.declared("random_vs_sequential")
        pairs = []
        for (kind, kernel, pages), rnd in curves.items():
            if kind != "random":
                continue
            width = kernel[len("bw_random_"):]
            seq = curves.get(("read", KERNELS["read"][width], pages))
            if seq:
                pairs.append((width, pages, seq, rnd))
        if not pairs:
            return ans.not_measured(q, "needs the read and random kinds at one width")
        width, pages, seq, rnd = sorted(pairs, key=lambda x: (x[1] != "4k", x[0]))[0]
        details = []
        for lid, (lo, hi) in level_windows(caches).items():
            s = [p for p in seq if lo < p["params"]["size_bytes"] <= hi]
            r = [p for p in rnd if lo < p["params"]["size_bytes"] <= hi]
            common = {p["params"]["size_bytes"] for p in s} & {p["params"]["size_bytes"] for p in r}
            s = [p for p in s if p["params"]["size_bytes"] in common]
            r = [p for p in r if p["params"]["size_bytes"] in common]
            if not common:
                continue
            e = ans.effect(q, ans.pooled_values(s), ans.pooled_values(r), "")
            details.append({"label": LEVEL_LABEL.get(lid, lid), "level": lid, "value": e.value,
                            "unit": "ratio", "ci_low": e.ci_low, "ci_high": e.ci_high,
                            "verdict": e.verdict,
                            "sequential_gb_per_s": float(np.median(ans.pooled_values(s))),
                            "random_gb_per_s": float(np.median(ans.pooled_values(r))),
                            "evidence": ans.evidence_keys(s + r), "_e": e})
        if not details:
            return ans.not_measured(q, "no working set inside a cache level or DRAM has both "
                                       "the read and the random kind")
        head = next((d for d in details if d["level"] == "dram"), details[-1])
        a = head.pop("_e")
        for d in details:
            d.pop("_e", None)
        a.details, a.evidence = details, head["evidence"]
        a.because = (f"Reading lines in sequential order is {a.value:.2f}x as fast as in random "
                     f"order in {head['label']} "
                     f"({head['sequential_gb_per_s']:.1f} vs {head['random_gb_per_s']:.1f} GB/s, "
                     f"{width}, {pages} pages); "
                     + ", ".join(f"{d['label']} {d['value']:.2f}x" for d in details))
        return a

    def _nt_crossover_answer(self, curves):
        q = self.declared("nt_write_crossover")
        nt = next((ps for (k, _, _pg), ps in curves.items() if k == "nt_write" and _pg == "4k"),
                  None) or next((ps for (k, _, _), ps in curves.items() if k == "nt_write"), None)
        if not nt:
            return ans.not_measured(q, "the nt_write kind was not measured")
        pages = nt[0]["params"]["pages"]
        normal = {}
        for (k, kernel, pg), ps in curves.items():
            if k == "write" and pg == pages:
                for p in ps:
                    s = p["params"]["size_bytes"]
                    if s not in normal or p["median"] > normal[s]["median"]:
                        normal[s] = p
        rows = []
        for p in nt:
            s = p["params"]["size_bytes"]
            if s in normal:
                e = ans.effect(q, p["values"], normal[s]["values"], "")
                rows.append((s, e, p, normal[s]))
        if not rows:
            return ans.not_measured(q, "needs nt_write and a normal write at the same sizes")
        details = [{"label": f"{format_size(s)}B", "size_bytes": s, "value": e.value,
                    "unit": "ratio", "ci_low": e.ci_low, "ci_high": e.ci_high,
                    "verdict": e.verdict, "nt_gb_per_s": p["median"],
                    "normal_gb_per_s": w["median"], "normal_kernel": w["params"]["kernel"]}
                   for s, e, p, w in rows]
        wins = [e.verdict == "detected" and e.value > 1 for _, e, _, _ in rows]
        cross = None
        for i in range(len(rows)):
            if all(wins[i:]):
                cross = i
                break
        top = format_size(rows[-1][0])
        if cross is None:
            return ans.Answer(q.id, "not_detected",
                              f"a non-temporal write never beats a normal one from some size up "
                              f"to {top}B (largest measured: {rows[-1][1].value:.2f}x)",
                              details=details, evidence=ans.evidence_keys([rows[-1][2]]),
                              estimator=q.decides)
        s, e, p, w = rows[cross]
        below = f"; below it {rows[cross - 1][1].value:.2f}x at {format_size(rows[cross - 1][0])}B" \
            if cross > 0 else "; it wins at every size measured"
        return ans.Answer(q.id, "detected",
                          f"from {format_size(s)}B up to {top}B non-temporal stores win: "
                          f"{e.value:.2f}x at {format_size(s)}B ({p['median']:.1f} vs "
                          f"{w['median']:.1f} GB/s, {w['params']['kernel']}){below}",
                          value=float(s), ci_low=float(rows[cross - 1][0]) if cross > 0 else None,
                          ci_high=float(s), details=details,
                          evidence=ans.evidence_keys([p, w]),
                          estimator=q.decides + "; the interval is the bracket: the last size "
                                                "measured below the crossover .. the crossover")

    def _readback_answer(self, curves, caches):
        q = self.declared("nt_readback")
        nt = next((ps for (k, _, _), ps in curves.items() if k == "nt_write_readback"), None)
        normal = next((ps for (k, _, _), ps in curves.items() if k == "write_readback"), None)
        if not (nt and normal):
            return ans.not_measured(q, "needs both write_readback and nt_write_readback")
        details = []
        for lid, (lo, hi) in level_windows(caches).items():
            a_pts = [p for p in nt if lo < p["params"]["size_bytes"] <= hi]
            b_pts = [p for p in normal if lo < p["params"]["size_bytes"] <= hi]
            if not (a_pts and b_pts):
                continue
            e = ans.effect(q, ans.pooled_values(a_pts), ans.pooled_values(b_pts), "")
            details.append({"label": LEVEL_LABEL.get(lid, lid), "level": lid, "value": e.value,
                            "unit": "ratio", "ci_low": e.ci_low, "ci_high": e.ci_high,
                            "verdict": e.verdict,
                            "nt_gb_per_s": float(np.median(ans.pooled_values(a_pts))),
                            "normal_gb_per_s": float(np.median(ans.pooled_values(b_pts))),
                            "evidence": ans.evidence_keys(a_pts + b_pts), "_e": e})
        if not details:
            return ans.not_measured(q, "no working set inside a level has both readback kinds")
        cached = [d for d in details if d["level"] != "dram"]
        head = cached[-1] if cached else details[-1]
        a = head.pop("_e")
        for d in details:
            d.pop("_e", None)
        a.details, a.evidence = details, head["evidence"]
        a.because = (f"write + read back with non-temporal stores runs at {a.value:.2f}x the "
                     f"normal stores' GB/s in {head['label']} ({head['nt_gb_per_s']:.1f} vs "
                     f"{head['normal_gb_per_s']:.1f}): the data is read back from "
                     f"{'memory' if a.value < 1 else 'where it was written'}; "
                     + ", ".join(f"{d['label']} {d['value']:.2f}x" for d in details))
        return a


# ---- analysis helpers (pure) ----------------------------------------------------

def _curves(points):
    """{(kind, kernel, pages): points sorted by size} of the bandwidth points."""
    out = {}
    for p in points:
        if p.get("metric") != "gb_per_s" or not p.get("values") or not p.get("median"):
            continue
        pr = p["params"]
        out.setdefault((p["arm"], pr.get("kernel"), pr.get("pages", "4k")), []).append(p)
    for ps in out.values():
        ps.sort(key=lambda p: p["params"]["size_bytes"])
    return out


def _unreached(kind, lid, caches, curves, planned):
    """Why a level of a kind has no points: the sweep stopped short, or every
    sample there was rejected."""
    lo, hi = level_windows(caches)[lid]
    window = f"{format_size(lo)}B.." + ("" if math.isinf(hi) else f"{format_size(hi)}B")
    if lid == "dram":
        window = f"from {format_size(lo + 1)}B (2x the LLC)"
    empty = sorted({p["params"]["size_bytes"] for p in planned if p["arm"] == kind and not p.get("n")
                    and lo < p["params"]["size_bytes"] <= hi})
    if empty:
        return (f"every sample at {', '.join(format_size(s) + 'B' for s in empty)} was rejected "
                f"(context switches or migrations: a busy machine); nothing is concluded "
                f"about {LEVEL_LABEL[lid]}")
    sizes = sorted({p["params"]["size_bytes"] for (k, _, _), ps in curves.items()
                    if k == kind for p in ps})
    return (f"the sweep ({format_size(sizes[0])}B..{format_size(sizes[-1])}B) has no point inside "
            f"{LEVEL_LABEL[lid]} ({window}); raise max_size to reach it")


def _bytes_per_cycle(samples):
    """{point key: [bytes per estimated cycle per sample]}."""
    out = {}
    for s in samples:
        if s.get("metric") != "gb_per_s" or not s.get("cycles_est") or not s.get("ns"):
            continue
        key = ans.point_key({"arm": s["arm"], "params": s["point"]})
        out.setdefault(key, []).append(s["value"] * s["ns"] / s["cycles_est"])
    return out


def plateaus_by_level(pts, caches):
    """(levels, {level id: (plateau points, how)}) of one curve.

    stats.find_levels runs on the time per byte (1 / GB/s: a curve that
    rises at every boundary, like a latency).  A level's plateau is the one
    with the most points well inside the level (its window), restricted to
    those points; one plateau serves two levels when there is no step
    between them.  A level with points inside it on no plateau (all on
    ramps) gets those points ("window")."""
    sizes = [p["params"]["size_bytes"] for p in pts]
    levels = stats.find_levels(sizes, [1.0 / p["median"] for p in pts]) if len(pts) >= 3 else []
    out = {}
    for lid, (lo, hi) in level_windows(caches).items():
        inside = [p for p in pts if lo < p["params"]["size_bytes"] <= hi]
        if not inside:
            continue
        best = []
        for lv in levels:
            on = [p for p in inside if lv.first_size <= p["params"]["size_bytes"] <= lv.last_size]
            if len(on) > len(best):
                best = on
        out[lid] = (best, "find_levels") if best else (inside, "window")
    return levels, out


def _nearest_cache(caches, size):
    best = None
    for lid, cap in caches:
        r = abs(math.log2(size / cap))
        if r <= math.log2(KNEE_MATCH_FACTOR) and (best is None or r < best[0]):
            best = (r, (lid, cap))
    return best[1] if best else None
