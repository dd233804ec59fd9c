"""No Python input crashes the binding (issue 26 item 2): chains Python can
still write, perf pages, and the checkers that call kernels on their own
buffers.  Each case runs in a child process, so that a crash fails the test
instead of killing pytest."""
import subprocess
import sys
import textwrap

import pytest

# every test here starts a worker or a process, or times kernels
pytestmark = pytest.mark.measuring

PRELUDE = """
import mmap
import numpy as np
from memfx.lab import _core
from memfx.lab.core import kernel_table
K = {name: row.index for name, row in kernel_table().items()}

def refused(fn, *args, exc=ValueError, match=""):
    try:
        fn(*args)
    except exc as e:
        assert match in str(e), e
        return str(e)
    raise AssertionError(f"{fn.__name__}{args} was not refused")

def chase(chain, steps=1000, kernel="chase_ptr", offset=None):
    off = chain.offset if offset is None else offset
    return _core.run(K[kernel], None, 0, chain, off, 0, 0, steps, 0)
"""


def in_child(body):
    code = PRELUDE + textwrap.dedent(body) + "\nprint('ok')\n"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), \
        f"child exited with {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}"


def test_overwriting_a_linked_chain_is_refused_not_a_crash():
    in_child("""
    for kernel, element in (("chase_ptr", 64), ("chase_ptr_inc", 64)):
        buf = bytearray(64 * element)
        chain = _core.link_chain(buf, 0, element, 64, np.random.default_rng(1).permutation(64))
        chase(chain, kernel=kernel)                         # whole: it walks
        for word in (0x10, 0xFFFF_FFFF_FFFF_0000, _core.address(buf) + len(buf) + 4096):
            for at in (0, 8 * element):                     # the head's word, another one
                saved = bytes(buf[at:at + 8])
                buf[at:at + 8] = word.to_bytes(8, "little")
                refused(chase, chain, 64 * 64, kernel, match="chain")
                buf[at:at + 8] = saved
        chase(chain, kernel=kernel)                         # put back: it walks again
    """)


def test_a_failed_relink_leaves_the_chain_whole():
    in_child("""
    buf = bytearray(32 * 64)
    chain = _core.link_chain(buf, 0, 64, 32, np.arange(32)[::-1].copy())
    before = bytes(buf)
    bad = np.arange(32)
    bad[31] = 5                                            # repeats an element
    refused(_core.link_chain, buf, 0, 64, 32, bad, match="repeats")
    bad[31] = 99                                           # out of range
    refused(_core.link_chain, buf, 0, 64, 32, bad, match="below")
    assert bytes(buf) == before
    chase(chain, 10_000)
    chase(chain, 10_000, "chase_ptr_inc")
    """)


def test_a_neighbouring_chain_pushed_off_by_chase_ptr_inc():
    in_child("""
    buf = bytearray(64 * 16 + 8)
    a = _core.link_chain(buf, 0, 16, 64, np.random.default_rng(2).permutation(64))
    b = _core.link_chain(buf, 8, 16, 64, np.random.default_rng(3).permutation(64))
    chase(a, 64 * 50, "chase_ptr_inc")    # bumps a's second words: b's next-pointers
    refused(chase, b, 64 * 50, "chase_ptr_inc", match="chain")
    try:
        chase(b, 64 * 50)                 # reads only: a fault is a ValueError, not a crash
    except ValueError as e:
        assert "chain" in str(e)
    """)


def test_a_linked_bytearray_cannot_be_shrunk_and_regrown():
    in_child("""
    buf = bytearray(16 * 64)
    chain = _core.link_chain(buf, 0, 64, 16)
    refused(buf.__delitem__, slice(64, None), exc=BufferError)
    refused(buf.extend, b"x" * 4096, exc=BufferError)
    m = mmap.mmap(-1, 16 * 64)
    chain_m = _core.link_chain(m, 0, 64, 16)
    refused(m.close, exc=BufferError)
    chase(chain)
    chase(chain_m)
    del chain, chain_m
    del buf[64:]                          # the chain is gone: the buffer is the caller's again
    m.close()
    """)


def test_the_checkers_refuse_calls_that_do_not_fit_their_buffers():
    in_child("""
    refused(_core.verify_copy, K['mis_store_8'], 16, 1, False, 2**40, 1, 'copy', match="past")
    refused(_core.verify_copy, K['copy_gpr_unrolled'], 64, 8, False, 0, 2**62, match="count")
    refused(_core.verify_copy, K['copy_gpr_unrolled'], 2**20, 64, True, match="too long")
    refused(_core.fill_check, K['fill_scalar8'], 0, 0, 2**62, 0, 0, 64, 4, match="count")
    refused(_core.fill_check, K['mis_store_8'], 0, 2**40, 1, 0, 0, 64, 4, match="past")
    for name in ('chase_ptr', 'pf_list_none'):
        if name in K:
            refused(_core.fill_check, K[name], 0, 0, 1, 0, 0, 8, 1, match="past")
    assert _core.verify_copy(K['copy_gpr_unrolled'], 300, 64, False, 0, 3) is None
    """)
