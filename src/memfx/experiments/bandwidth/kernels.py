"""Bandwidth's kernel rows and their checks (the kit): the table kind ->
width -> kernel row, the kinds and levels, and the checks every planned row
and team call passes before anything is timed (fill rows with fill's
checker, copy rows with the lab's, bandwidth's own rows against numpy).
The protocol (__init__.py) re-exports every name."""
from __future__ import annotations

import numpy as np

from ...model.errors import MemfxError
from ...model.protocol import Region, Team, TeamMember
from ..base import Trial

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
KIND_WORDS = {"read": "sequential read (loads)", "write": "sequential write (fill)",
              "copy": "copy", "rmw": "read-modify-write (increment in place)",
              "nt_write": "non-temporal write"}



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
    from ...lab.core import call_kernel
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


def check_load_kernel(index, max_size=4096, per_size=2, count=2, size_skew=0):
    """A loads-only read row (bw_read_*) walks exactly `size` bytes per pass,
    for every size 0..max_size at rotating misalignments: it returns the
    bytes its pointer advanced plus the tail's, summed over its passes.
    Its summing twin (bw_sum_*, the same loop text with adds) carries the
    checksum.  None, or the first mismatch as a message."""
    from ...lab.core import call_kernel
    buf = bytearray(max_size + 64 + 64)
    for n in range(max_size + 1):
        for off in _rotating_offsets(n, per_size):
            got = call_kernel(index, None, 0, buf, off, max(0, n + size_skew), 0, count, 0)
            if got != n * count:
                return f"walked {got} bytes, not {n * count} (size {n}, misalignment {off})"
    return None


def read_twin(name):
    """The summing row whose loop a loads-only read row shares (bandwidth.c)."""
    return "bw_sum_" + name[len("bw_read_"):]


def check_random_kernel(index, max_lines=64, count=2, seed=1):
    """A random-order row sums each line once per pass for a permutation
    order (any start misalignment), and stays on line 0 for indices out of
    range.  None, or the first mismatch as a message."""
    from ...lab.core import call_kernel
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
    from ...lab.core import call_kernel
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
    from ...lab.core import kernel_table, verify_copy
    from ..fill.kernels import check_kernel as check_fill_kernel
    name = row.name
    if row.group == "fill":
        bad = check_fill_kernel(row.index, FILL_BYTE, 0, 0, 1, 4096)
        return None if bad is None else (f"size {bad[0]}, dst offset {bad[1]}, byte {bad[2]}: "
                                         f"expected {bad[3]:#04x}, got {bad[4]:#04x}")
    if row.group == "copy":
        return verify_copy(row.index, 4096, 64, False, 0, 1)
    if name.startswith("bw_read_"):
        # the timed row only loads: its twin's checksum proves the loop
        # reads each byte once, its own count that it walks the region
        twin = kernel_table()[read_twin(name)]
        bad = check_read_kernel(twin.index)
        if bad:
            return f"{twin.name}: {bad}"
        return check_load_kernel(row.index)
    if name.startswith("bw_sum_"):
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
                # a loads-only row returns the bytes it walked, a summing
                # row the checksum
                members.append(TeamMember(cpu, src=Region(buf, off, size), size=size))
                sums = not kernel.startswith("bw_read_")
                expect.append((buf, pattern, off, None,
                               _reference_sums(pattern, off, size) if sums else size))
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
