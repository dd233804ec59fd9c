"""Fill's kernel checks (the kit; shared with bandwidth, which checks its
write kernels by row index): the value semantic of the fill kernels' aux
bits, the rotating-mode check through the lab, and the byte-exact check in
C.  The protocol (__init__.py) re-exports every name."""
from __future__ import annotations

from ..base import Region, Trial

# aux bits understood by the fill kernels (kernels/fill.c)
FILL_VALUE_FROM_SRC = 1
FILL_ALTERNATE = 2
FILL_ROTATE = 4          # aux >> 16 = region bytes; size = bytes per call (a chunk)
SLOT_BYTES = 128         # cursor slot past a rotating region (64-byte aligned)


def final_byte(value, aux, src_word, count):
    """The byte every position holds after `count` >= 1 passes (the value semantic)."""
    if aux & FILL_ALTERNATE and count % 2 == 0:
        return (aux >> 8) & 0xFF
    if aux & FILL_VALUE_FROM_SRC:
        return src_word & 0xFF
    return value & 0xFF


def check_rotating(lab, kernel, value, aux, src_word, region, chunk, calls):
    """Rotating mode through the lab: `calls` chunks of `chunk` bytes over a
    `region`-byte area (at offset 5 in a guarded buffer) with kernel row
    `kernel`.  Returns None when the bytes are what the value semantic says,
    else a message."""
    off, guard = 5, 0xA5
    buf = bytearray(64 + max(region, chunk) + SLOT_BYTES + 64)
    buf[:] = bytes([guard]) * len(buf)
    base = lab.address(buf)
    slot = ((base + off + region + 63) & ~63) - base
    buf[slot:slot + 16] = bytes(16)
    rot = aux | FILL_ROTATE | (region << 16)
    src = None
    if aux & FILL_VALUE_FROM_SRC:
        src = bytearray(max(8, chunk))
        src[:8] = int(src_word).to_bytes(8, "little")
    trial = Trial(kernel, size=chunk, dst=Region(buf, off), src=Region(src, 0) if src else None,
                  value=value, aux=rot)
    for _ in range(calls):
        lab.call(trial, 1)
    done = calls * chunk
    sweeps, cur = divmod(done, region)
    # bytes [0, cur) were last written in sweep `sweeps`, [cur, region) in sweep - 1
    want_new = final_byte(value, aux, src_word, sweeps + 1)
    want_old = final_byte(value, aux, src_word, sweeps) if sweeps else guard
    got = memoryview(buf)
    for lo, hi, want in ((0, off, guard), (off, off + cur, want_new), (off + cur, off + region, want_old),
                         (off + region, slot, guard), (slot + 16, len(buf), guard)):
        if bytes(got[lo:hi]) != bytes([want]) * (hi - lo):
            bad = next(i for i in range(lo, hi) if buf[i] != want)
            return f"byte {bad - off} (region {region}, chunk {chunk}, {calls} calls): " \
                   f"expected {want:#04x}, got {buf[bad]:#04x}"
    return None


def check_kernel(row_index, value, aux, src_word, count=1, max_size=4096, max_offset=64):
    """Byte-exact check in C (see lab.fill_check); None or a failure tuple.
    Kept for bandwidth.verify_kernel, which checks by row index; the fill
    experiment checks through Lab.fill_check."""
    from ...lab.core import fill_check
    return fill_check(row_index, value, aux, count, src_word,
                      final_byte(value, aux, src_word, count), max_size, max_offset)
