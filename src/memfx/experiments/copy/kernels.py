"""Copy's kernels (the kit; shared with aliasing, which times copy's rows):
the ops and strategies (one kernel row `<op>_<arm>` each, kernels/copy.c),
the timing modes as the kernels' aux bits, the memcpy no-overlap guard and
the non-zero source pattern.  The protocol (__init__.py) re-exports every
name."""
from __future__ import annotations

import numpy as np

from ...model.errors import ParamError

OPS = ("copy", "set")
STRATEGIES = {
    "copy": ("rep_movsb", "rep_movsq", "gpr_unrolled", "sse", "avx2", "avx512", "libc", "nt"),
    "set": ("rep_stosb", "rep_stosq", "gpr_unrolled", "sse", "avx2", "avx512", "libc", "nt"),
}
# kernel aux bits (copy.c: MFX_COPY_SERIALISE, MFX_COPY_CHAIN)
MODES = {"throughput": 0, "latency": 1, "chained": 2}


def kernel_name(op, arm):
    return f"{op}_{arm}"


def check_no_overlap(src_address, dst_address, size):
    """memcpy semantics: [src, src+size) and [dst, dst+size) must be disjoint."""
    if size > 0 and src_address < dst_address + size and dst_address < src_address + size:
        raise ParamError(f"source and destination overlap ({size} bytes at "
                         f"{src_address:#x} and {dst_address:#x}); copies here have memcpy "
                         f"semantics and never overlap")


_PATTERN: list[np.ndarray] = []      # the 1 MiB block of fill_pattern, built once per process


def fill_pattern(buffer, offset, n):
    """Non-zero bytes (1..251, period 251) into buffer[offset:offset+n]: a
    copy of zeros onto zeros could be shortened by the hardware (seed 000),
    and a period that is no power of two shows a misplaced block in tests."""
    if not _PATTERN:
        # building it took ~5 ms: a quarter of the aliasing sweep when it
        # was rebuilt for each of its 243 placements of a few KiB
        _PATTERN.append((np.arange(251 << 12, dtype=np.uint32) % 251 + 1).astype(np.uint8))
    block = _PATTERN[0]
    view = np.frombuffer(buffer, dtype=np.uint8, count=n, offset=offset)
    for start in range(0, n, block.size):
        view[start:start + block.size] = block[:n - start]
    del view
