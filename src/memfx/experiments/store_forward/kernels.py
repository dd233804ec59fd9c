"""Store forwarding's kernels (the kit): the copy shapes compilers emit, the
forwarding matrix's cells with their byte-exact simulation, and the checks
that run the kernels directly (verification and tests).  Moved out of
the protocol (__init__.py), which re-exports every name."""
from __future__ import annotations

import mmap
import struct

import numpy as np

from ...lab.core import core_layout
from ...model.errors import ParamError

MATRIX_SIZES = (1, 2, 4, 8, 16, 32, 64)
WINDOW_BYTES = 64            # the store's cache line: the matrix window
# an entry's largest size and moves per copy, as the kernels were built
# (lab/_core/layout_shared.h)
ENTRY_MAX_BYTES = core_layout()["SF_SLOT_BYTES"]
MAX_MOVES = core_layout()["SF_MAX_MOVES"]
SLOT_DISTANCE = 128          # bytes between the entry slots A, B and C
ENTRY_KERNEL_PREFIX = {"copy": "sf_entry_copy", "append": "sf_entry_append",
                       "registers": "sf_entry_regs"}
MOVE_ISA = {1: "", 2: "", 4: "", 8: "", 16: "sse2", 32: "avx", 64: "avx512f"}


# ---- copy shapes ----------------------------------------------------------

def copy_shape(size, widest=16):
    """The moves a compiler uses to copy `size` bytes: [(offset, width), ...].

    width = the largest power of two <= min(size, widest); full moves at
    0, width, 2*width, ...; when size is not a multiple of width, one more
    move ending exactly at `size` (overlapping the previous one), e.g.
    copy_shape(28) == [(0, 16), (12, 16)].  This is the overlapping-tail
    strategy GCC and Clang use for small fixed-size memcpy and the Go compiler
    used in the seed."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ParamError(f"entry size must be a non-negative integer, got {size!r}")
    if widest not in (1, 2, 4, 8, 16, 32, 64):
        raise ParamError(f"widest move must be a power of two from 1 to 64 bytes, got {widest!r}")
    if size == 0:
        return []
    width = 1
    while width * 2 <= min(size, widest):
        width *= 2
    moves = [(k * width, width) for k in range(size // width)]
    if size % width:
        moves.append((size - width, width))
    if len(moves) > MAX_MOVES:
        raise ParamError(f"copying {size} bytes with {widest}-byte moves takes {len(moves)} moves; "
                         f"the kernels take at most {MAX_MOVES}: use a wider move")
    return moves


def shape_overlaps(shape):
    """True when two moves of the shape write a common byte."""
    spans = sorted(shape)
    return any(a_off + a_w > b_off for (a_off, a_w), (b_off, _) in zip(spans, spans[1:]))


def shape_table(shape):
    """The shape as the C kernels read it (struct sf_shape in storefwd.c):
    uint32 n, then n (uint32 offset, uint32 width) pairs, zero padded."""
    out = struct.pack("<I", len(shape))
    for off, width in shape:
        out += struct.pack("<II", off, width)
    return out + bytes(8 * (MAX_MOVES - len(shape)))


def entry_kernel(arm, shape):
    """Kernel row name for an entry arm and a copy shape (by its move width)."""
    width = shape[0][1] if shape else 1
    return f"{ENTRY_KERNEL_PREFIX[arm]}_w{width}"


def entry_pattern(size):
    """The entry's bytes: distinct, non-zero, so a misplaced move shows."""
    return bytes((37 * i + 11) & 0xFF or 1 for i in range(size))


# ---- the forwarding matrix -----------------------------------------------

def valid_offsets(store, load, window=WINDOW_BYTES):
    """Offsets o of an l-byte load that reads at least one byte of an s-byte
    store at offset 0 and stays inside the window [0, window)."""
    return list(range(0, min(store - 1, window - load) + 1))


def edge_offsets(store, load, window=WINDOW_BYTES):
    """A subset of valid_offsets where forwarding rules change: aligned start,
    misaligned start, the middle, the load ending at the store's end, one
    byte past it, and one byte of overlap."""
    valid = set(valid_offsets(store, load, window))
    wanted = {0, 1, store // 2, store - load, store - load + 1, store - 1,
              load, store // 2 - load // 2}
    return sorted(valid & wanted)


def matrix_cells(store_sizes=MATRIX_SIZES, load_sizes=MATRIX_SIZES, offsets="all",
                 window=WINDOW_BYTES):
    """Every (store, load, offset) cell, each once, in a stable order."""
    pick = valid_offsets if offsets == "all" else edge_offsets
    return [(s, ld, o) for s in sorted(set(store_sizes)) for ld in sorted(set(load_sizes))
            for o in pick(s, ld, window)]


def cell_kind(store, load, offset):
    """'contained' when the load reads only stored bytes, else 'partial'."""
    return "contained" if offset + load <= store else "partial"


def forward_kernel(store, load):
    return f"sf_fwd_s{store}_l{load}"


def forward_isa(store, load):
    return MOVE_ISA[max(store, load)]


def simulate_forward(memory, store, load, offset, value, count):
    """Reference model of sf_fwd_s<store>_l<load>: the register starts as the
    8 bytes of `value` (zero-extended), each iteration stores its low `store`
    bytes at 0 and loads `load` bytes at `offset` (zero-extended).  Returns
    the low 8 bytes of the final register; `memory` is updated in place."""
    reg = value.to_bytes(8, "little") + bytes(56)
    for _ in range(count):
        memory[0:store] = reg[:store]
        reg = bytes(memory[offset:offset + load]) + bytes(64 - load)
    return int.from_bytes(reg[:8], "little")


def simulate_two_stores(memory, second, offset, value, count):
    """Reference model of sf_two_stores_16 (16-byte stores at 0 and `second`,
    16-byte load at `offset`)."""
    reg = value.to_bytes(8, "little") + bytes(8)
    for _ in range(count):
        memory[0:16] = reg
        memory[second:second + 16] = reg
        reg = bytes(memory[offset:offset + 16])
    return int.from_bytes(reg[:8], "little")


# ---- running kernels directly (verification and tests) -------------------

def run_kernel(kernels, name, buf, dst_off, src, size, value, count, aux):
    """One call of a kernel row (kernels = memfx.lab.core.kernel_table())."""
    from ...lab.core import call_kernel
    return call_kernel(kernels[name].index, buf, dst_off, src, 0, size, value, count, aux)


def check_entry(kernels, arm, size, widest, align, count, buf=None):
    """Run one entry kernel on fresh slots and check it copied exactly the
    entry's `size` bytes: the destination slot holds them, nothing around any
    slot changed, the source slot is intact.  Raises AssertionError."""
    shape = copy_shape(size, widest)
    name = entry_kernel(arm, shape)
    buf = buf if buf is not None else mmap.mmap(-1, 4096)
    garbage = bytes([0xEE]) * 1024
    buf[0:1024] = garbage
    entry = entry_pattern(size)
    a = 64 + align
    buf[a:a + size] = entry
    table = bytearray(4096)
    table[:4 + 8 * MAX_MOVES] = shape_table(shape)
    result = run_kernel(kernels, name, buf, a, table, size, 0, count, SLOT_DISTANCE)
    # copy fills B (ping-pong A<->B), append fills B (the temporary) and C,
    # registers fills C only
    written = {"copy": (1,), "append": (1, 2), "registers": (2,)}[arm]
    expect = bytearray(garbage)
    expect[a:a + size] = entry
    for k in written if count else ():
        expect[a + k * SLOT_DISTANCE:a + k * SLOT_DISTANCE + size] = entry
    got = bytes(buf[0:1024])
    if got != bytes(expect):
        bad = [i for i in range(1024) if got[i] != expect[i]]
        raise AssertionError(f"{name} ({arm}, {size} bytes, shape {shape}, align {align}, "
                             f"count {count}) wrote the wrong bytes at offsets {bad[:8]}")
    want = int.from_bytes(entry[:8], "little") if count else 0
    if result != want:
        raise AssertionError(f"{name} returned {result:#x}, expected {want:#x}")


def check_forward(kernels, store, load, offset, value, count, buf=None, rng=None):
    """Run one matrix kernel and compare memory and result to simulate_forward."""
    rng = rng or np.random.default_rng(0)
    buf = buf if buf is not None else mmap.mmap(-1, 4096)
    init = bytes(rng.integers(0, 256, 128, dtype=np.uint8))
    buf[0:128] = init
    model = bytearray(init)
    want = simulate_forward(model, store, load, offset, value, count)
    got = run_kernel(kernels, forward_kernel(store, load), buf, 0, None, 0, value, count, offset)
    if bytes(buf[0:128]) != bytes(model) or got != want:
        raise AssertionError(f"{forward_kernel(store, load)} at offset {offset}: memory or result "
                             f"differs from the model (got {got:#x}, expected {want:#x})")


def check_two_stores(kernels, second, offset, value, count, buf=None, rng=None):
    rng = rng or np.random.default_rng(0)
    buf = buf if buf is not None else mmap.mmap(-1, 4096)
    init = bytes(rng.integers(0, 256, 128, dtype=np.uint8))
    buf[0:128] = init
    model = bytearray(init)
    want = simulate_two_stores(model, second, offset, value, count)
    got = run_kernel(kernels, "sf_two_stores_16", buf, 0, None, 0, value, count,
                     second | (offset << 8))
    if bytes(buf[0:128]) != bytes(model) or got != want:
        raise AssertionError(f"sf_two_stores_16 (second store at {second}, load at {offset}) "
                             f"differs from the model")


def _isa_ok(isa, machine):
    if not isa:
        return True
    flags = (machine or {}).get("flags") or {}
    if isa in flags:
        return bool(flags[isa])
    from ...lab.core import isa_supported
    return isa_supported(isa)
