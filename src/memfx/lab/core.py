"""The C core as the rest of memfx sees it: the kernel table and the calls
that need no Lab (planning, verification, advice's child).  The only module
besides the Lab's that imports the core."""
from __future__ import annotations

from dataclasses import dataclass

from . import _core


@dataclass
class KernelRow:
    index: int
    name: str
    group: str
    isa: str
    read_per_byte: float
    write_per_byte: float
    read_fixed: float
    write_fixed: float
    ops_per_iter: float
    op: str
    doc: str
    supported: bool

    def traffic(self, size, count):
        """Bytes read and written by `count` iterations over `size` bytes."""
        rd = (self.read_per_byte * size + self.read_fixed) * count
        wr = (self.write_per_byte * size + self.write_fixed) * count
        return rd, wr


def kernel_table():
    return {row["name"]: KernelRow(**row) for row in _core.kernels()}


# A kernel_ticks row returns UINT64_MAX (or - 1) when it could not run its part.
KERNEL_TICKS_FAILED = (1 << 64) - 2


# ---- the core for the experiments' planning and verification ----------------
# (module level: plan() runs in the parent, where there is no Lab; verifiers
# and tests work on plain buffers)

def core_file():
    """The core's shared object, for a child that loads it by path with the
    standard library only (advice's: `python -I -S`, no numpy)."""
    return _core.__file__


def core_layout():
    """The layouts the kernels share with the Python side (byte offsets and
    limits of kernels/sharing.c's shared area and kernels/storefwd.c's
    shape table), as the core was built with them (layout_shared.h)."""
    return dict(_core.layout)


def harness_file():
    """The lab's sampling harness (harness.py), for the same child."""
    from . import harness
    return harness.__file__


def isa_supported(isa):
    """True when this CPU (and the OS) runs instructions of `isa` (e.g. "avx2")."""
    return bool(_core.isa_supported(isa))


def call_kernel(index, dst, dst_offset, src, src_offset, size, value=0, count=1, aux=0):
    """One untimed call of kernel row `index` on plain buffers; its result word."""
    return _core.run(index, dst, dst_offset, src, src_offset, size,
                     value & 0xFFFFFFFFFFFFFFFF, count, aux)[3]


def verify_copy(index, max_size, max_misalign=64, all_pairs=False, aux=0, count=1):
    """The core's byte-exact check of a copy-like row; None or a message."""
    return _core.verify_copy(index, max_size, max_misalign, all_pairs, aux, count)


def fill_check(index, value, aux, count, src_word, expect, max_size, max_offset):
    """The core's byte-exact check of a fill row; None or the first wrong byte."""
    return _core.fill_check(index, value, aux, count, src_word, expect, max_size, max_offset)


def link_chain_at(buffer, offset, element, n, order=None):
    """Link a cyclic pointer chain in a plain buffer (see Lab.link_chain)."""
    return _core.link_chain(buffer, offset, element, n, order)


def shuffle_in_place(array, seed):
    """Shuffle a C-contiguous int32/int64 numpy array in place, uniformly,
    from `seed` (an int or a list of non-negative ints): the core's
    Fisher-Yates, its generator seeded through numpy's SeedSequence."""
    import numpy as np
    words = np.random.SeedSequence(seed).generate_state(4, np.uint64)
    _core.shuffle(array, *(int(w) for w in words))
    return array


def address_of(buffer):
    return _core.address(buffer)


def cpuid(leaf, subleaf=0):
    """(eax, ebx, ecx, edx) of CPUID leaf/subleaf."""
    return _core.cpuid(leaf, subleaf)
