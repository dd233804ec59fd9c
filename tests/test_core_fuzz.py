"""Fuzzing the binding (issue 14, item 8): every kernel row, called through
_core.run with random sizes, offsets, aux, values and counts, on buffers
that sit right against PROT_NONE guard pages or between canary bytes.

Run in a child process so that a segfault fails the test instead of
killing pytest.  What must hold for every call:
  * no crash (an access past a guard page is SIGSEGV in the child);
  * nothing changes outside the extents the row's footprint declares
    (canaries, the rest of the view, the source);
  * a request whose footprint does not fit its buffers, a missing buffer,
    a bad offset or a chase that does not start on a linked chain raises
    ValueError, and every request that fits runs.
MEMFX_FUZZ_EXAMPLES sets the examples per row (default 30)."""
import json
import os
import subprocess
import sys

import pytest

# every test here starts a worker or a process, or times kernels
pytestmark = pytest.mark.measuring

EXAMPLES_PER_ROW = int(os.environ.get("MEMFX_FUZZ_EXAMPLES", "30"))
MAX_AREA = 6000            # the largest guarded area a call is given, bytes


def test_binding_fuzz_every_row_in_a_child():
    pytest.importorskip("hypothesis")
    env = dict(os.environ)
    env["MEMFX_FUZZ_EXAMPLES"] = str(EXAMPLES_PER_ROW)
    proc = subprocess.run([sys.executable, __file__], capture_output=True, text=True,
                          timeout=600, env=env)
    tail = (proc.stderr or "")[-4000:]
    assert proc.returncode == 0, f"fuzz child exited with {proc.returncode}:\n{tail}"
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["rows"] >= 50, summary
    # every row ran both ways: calls that fit, and requests refused with ValueError
    assert not summary["never_ran"], summary["never_ran"]
    assert len(summary["only_refused"]) <= 12, summary["only_refused"]   # the threaded rows
    assert not summary["never_refused"], summary["never_refused"]
    # link / write / relink / shrink / walk sequences ran, and some walks were refused
    seq = summary["sequences"]
    assert seq["walks"] > 40 and 0 < seq["refused_walks"] < seq["walks"], seq


# ---------------------------------------------------------------------------
# the child


def _child():  # one self-contained driver
    import ctypes
    import mmap

    import numpy as np
    from hypothesis import HealthCheck, example, given, seed, settings
    from hypothesis import strategies as st

    from memfx.experiments import store_forward as sf
    from memfx.lab import _core
    from memfx.lab.core import kernel_table

    page = mmap.PAGESIZE
    PATTERN = bytes((i * 37 + 11) & 0xFF for i in range(8 * page + 8192))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

    class Guarded:
        """`length` bytes placed against the head guard page, against the
        tail guard page, or between canaries; every other byte of the data
        pages is a known pattern."""

        def __init__(self, length, placement, slack):
            pages = (length + 256 + page - 1) // page
            self.map = mmap.mmap(-1, (pages + 2) * page)
            base = _core.address(self.map)
            for guard in (0, (pages + 1) * page):
                if libc.mprotect(base + guard, page, 0) != 0:   # PROT_NONE
                    raise OSError(ctypes.get_errno(), "mprotect")
            self.lo, self.hi = page, (pages + 1) * page
            self.map[self.lo:self.hi] = PATTERN[:self.hi - self.lo]
            if placement == "head":
                self.start = self.lo
            elif placement == "tail":
                self.start = self.hi - length
            else:
                self.start = self.lo + 64 + slack
            self.length = length
            self.whole = memoryview(self.map)
            self.view = self.whole[self.start:self.start + length]
            self.address = base + self.start

        def snapshot(self):
            return bytes(self.map[self.lo:self.hi])

        def changed_outside(self, before, lo, hi):
            """Offsets (relative to the view) changed outside [lo, hi)."""
            now = self.snapshot()
            if now == before:
                return []
            a, b = self.start - self.lo + lo, self.start - self.lo + hi
            bad = [i for i in range(len(now)) if now[i] != before[i] and not a <= i < b]
            return [i - (self.start - self.lo) for i in bad[:8]]

        def close(self):
            self.view.release()
            self.whole.release()
            self.map.close()

    rows = [r for r in kernel_table().values() if r.supported]
    stats = {r.name: {"ran": 0, "refused": 0} for r in rows}

    placements = st.sampled_from(["head", "tail", "middle"])
    u64 = st.integers(0, 2 ** 64 - 1)

    @st.composite
    def aux_values(draw):
        kind = draw(st.sampled_from(["small", "slots", "fill", "any"]))
        if kind == "small":
            return draw(st.integers(0, 300))
        if kind == "slots":
            return draw(st.sampled_from([64, 96, 128, 200, 1000, 5000]))
        if kind == "fill":   # fill bits | alternate byte << 8 | rotating region << 16
            region = draw(st.one_of(st.integers(0, 5000), st.integers(0, 2 ** 48 - 1)))
            return draw(st.integers(0, 7)) | draw(st.integers(0, 255)) << 8 | region << 16
        return draw(u64)

    @st.composite
    def buffers(draw, role):
        """(None or a Guarded area, offset)."""
        if draw(st.integers(0, 9)) == 0:
            return None, draw(st.sampled_from([0, 0, 8]))
        length = draw(st.integers(0, MAX_AREA))
        g = (length, draw(placements), draw(st.integers(0, 63)))
        off = draw(st.one_of(st.integers(0, length), st.integers(-16, length + 64)))
        return g, off

    def entry_table(name, size):
        """A valid shape table for an entry row of move width W, when one exists."""
        width = int(name.rsplit("_w", 1)[1])
        try:
            shape = sf.copy_shape(size, width)
        except Exception:
            return None
        if not shape or shape[0][1] != width:
            return None
        return sf.shape_table(shape)

    def refused(fn):
        try:
            return fn(), None
        except ValueError as e:
            assert str(e) and "\n" not in str(e), repr(e)
            return None, e

    def fuzz_row(row):
        # a row that walks a pointer chain declares it in its footprint
        chase = _core.footprint(row.index, 0, 0, 0)[2] > 0

        @seed(row.index)          # reproducible, and distinct per row
        @settings(max_examples=EXAMPLES_PER_ROW, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(size=st.one_of(st.integers(0, 64), st.integers(0, 4096)),
               count=st.integers(0, 100 if chase else 3), aux=aux_values(), value=u64,
               dst=buffers("dst"), src=buffers("src"), valid_shape=st.booleans(),
               chain=st.tuples(st.sampled_from([8, 16, 24, 64]), st.integers(1, 40),
                               st.integers(0, 2 ** 32), st.integers(0, 9)),
               chain_start=st.one_of(st.integers(0, 39), st.integers(-64, 4000)))
        # one call that fits every row and one that no row may run (an offset
        # without a buffer), so each row is seen both ways whatever is drawn
        @example(size=16, count=1, aux=128, value=0x0123456789ABCDEF, dst=((2000, "middle", 5), 0),
                 src=((2000, "middle", 3), 0), valid_shape=True, chain=(16, 8, 1, 1), chain_start=3)
        @example(size=16, count=1, aux=128, value=1, dst=(None, 8), src=(None, 0),
                 valid_shape=False, chain=(16, 8, 1, 1), chain_start=3)
        def one_call(size, count, aux, value, dst, src, valid_shape, chain, chain_start):
            areas = []
            chain_obj = None
            try:
                dst_area, dst_off = dst
                if dst_area is not None:
                    dst_area = Guarded(*dst_area)
                    areas.append(dst_area)
                src_area, src_off = src
                src_obj = None
                chain_obj = None
                if chase:
                    # the chain lives in a guarded area; the start is an element or not
                    elem, n, seed, plain = chain
                    src_area = Guarded(elem * n + 16, "tail", 0)
                    areas.append(src_area)
                    order = np.random.default_rng(seed).permutation(n).astype(np.int32)
                    chain_obj = _core.link_chain(src_area.view, 16, elem, n, order)
                    # now and then the chain's buffer itself, which a chase must refuse
                    src_obj = src_area.view if plain == 0 else chain_obj
                    src_off = 16 + chain_start * elem if 0 <= chain_start < n else chain_start
                elif src_area is not None:
                    src_area = Guarded(*src_area)
                    areas.append(src_area)
                    src_obj = src_area.view
                    if row.name.startswith("sf_entry") and valid_shape:
                        table = entry_table(row.name, size)
                        if table and 0 <= src_off and src_area.length - src_off >= len(table):
                            src_area.map[src_area.start + src_off:
                                         src_area.start + src_off + len(table)] = table
                dst_obj = dst_area.view if dst_area is not None else None

                # what the binding must decide, from the row's declared footprint
                dst_ok = (dst_area is None and dst_off == 0) or \
                    (dst_area is not None and 0 <= dst_off <= dst_area.length)
                dst_address = dst_area.address + dst_off if dst_area is not None and dst_ok else 0
                fp_dst, fp_src, chain_min = _core.footprint(row.index, size, count, aux, dst_address)
                src_len = src_area.length if src_area is not None else 0
                src_ok = (src_obj is None and src_off == 0) or \
                    (src_obj is not None and 0 <= src_off <= src_len)
                fits = dst_ok and src_ok \
                    and (fp_dst == 0 or (dst_area is not None and fp_dst <= dst_area.length - dst_off)) \
                    and (fp_src == 0 or (src_obj is not None and fp_src <= src_len - src_off))
                if chain_min:
                    # the start is an element when its offset is one (an out-of-range
                    # chain_start used as a raw offset may still land on one)
                    rel = src_off - 16
                    fits = fits and src_obj is chain_obj and chain[0] >= chain_min \
                        and rel >= 0 and rel % chain[0] == 0 and rel // chain[0] < chain[1]

                before = [(a, a.snapshot()) for a in areas]
                out, err = refused(lambda: _core.run(row.index, dst_obj, dst_off, src_obj, src_off,
                                                     size, value, count, aux))
                if fits:
                    assert err is None, f"{row.name}: refused a request that fits: {err}"
                    stats[row.name]["ran"] += 1
                else:
                    assert err is not None, (f"{row.name}: ran a request outside its buffers "
                                             f"(size {size}, aux {aux:#x}, dst_off {dst_off}, "
                                             f"src_off {src_off}, footprint {fp_dst}/{fp_src}, "
                                             f"chain {chain} start {chain_start} dst_ok {dst_ok} "
                                             f"src_ok {src_ok} dst {dst})")
                    stats[row.name]["refused"] += 1
                for area, snap in before:
                    if area is dst_area and out is not None:
                        lo, hi = dst_off, dst_off + fp_dst
                    elif area is src_area and chase and row.write_fixed and out is not None:
                        lo, hi = 16, src_area.length        # chase_ptr_inc bumps each element
                    else:
                        lo = hi = 0                          # nothing may change
                    bad = area.changed_outside(snap, lo, hi)
                    assert not bad, (f"{row.name} wrote outside its footprint at view offsets {bad} "
                                     f"(size {size}, count {count}, aux {aux:#x}, dst_off {dst_off}, "
                                     f"declared [{lo}, {hi}))")
            finally:
                chain_obj = src_obj = None       # a chain holds an export of its area's view
                for a in areas:
                    a.close()

        one_call()

    for row in rows:
        fuzz_row(row)
    sequences = chain_sequences(rows, refused)
    # Rows whose smallest call needs more room than the largest area drawn
    # here (the threaded rows' control area and counters: 12 KiB and more)
    # can only be refused; their valid calls are tested where the lab builds
    # their thread plan (tests/test_sharing.py, tests/test_atomics.py).
    too_big = {row.name for row in rows
               if max(_core.footprint(row.index, 1, 1, 8)[:2]) > MAX_AREA}
    never_ran = sorted(n for n, s in stats.items() if not s["ran"] and n not in too_big)
    never_refused = sorted(n for n, s in stats.items() if not s["refused"])
    print(json.dumps({"rows": len(rows), "never_ran": never_ran, "never_refused": never_refused,
                      "only_refused": sorted(too_big), "sequences": sequences,
                      "calls": sum(s["ran"] + s["refused"] for s in stats.values())}))


def chain_sequences(rows, refused):
    """Issue 26 item 2: sequences of link, write, relink, shrink and walk on
    one bytearray that Python keeps writing.  No sequence may crash; a walk
    of a chain whose next-pointers are all intact must run; a refused link
    changes no byte; a linked buffer cannot be resized."""
    import numpy as np
    from hypothesis import HealthCheck, given, seed, settings
    from hypothesis import strategies as st

    from memfx.lab import _core

    walkers = [r for r in rows if _core.footprint(r.index, 64, 1, 0)[2] > 0]
    dst = bytearray(4096)                       # pf_lat_*: targets and their cursor
    counts = {"walks": 0, "refused_walks": 0, "examples": 0}

    def intact(buf, chain):
        base = _core.address(buf) + chain.offset
        span = chain.elements * chain.element_bytes
        for e in range(chain.elements):
            at = chain.offset + e * chain.element_bytes
            p = int.from_bytes(buf[at:at + 8], "little") - base
            if not (0 <= p < span and p % chain.element_bytes == 0):
                return False
        return True

    words = st.one_of(st.sampled_from([0, 8, 0x10, 2 ** 63, 2 ** 64 - 8, 0xFFFF_8000_0000_0000]),
                      st.integers(0, 2 ** 64 - 1), st.integers(-64, 4096).map(lambda d: ("in", d)))
    links = st.tuples(st.just("link"), st.sampled_from([8, 16, 24, 64]), st.integers(1, 48),
                      st.integers(0, 512), st.integers(0, 2 ** 32),
                      st.sampled_from(["ok", "ok", "repeat", "range"]))
    walks = st.tuples(st.just("walk"), st.integers(0, 7), st.integers(0, len(walkers) - 1),
                      st.integers(0, 300), st.integers(0, 60))
    ops = st.one_of(
        links, walks, walks,
        st.tuples(st.just("write"), st.integers(0, 4088), words),
        # a write over a next-pointer of a linked chain (element e of chain c)
        st.tuples(st.just("write"), st.tuples(st.integers(0, 7), st.integers(0, 47)), words),
        st.tuples(st.just("shrink"), st.integers(0, 4095)),
        st.tuples(st.just("drop"), st.integers(0, 7)))

    @seed(26)
    @settings(max_examples=max(60, 4 * EXAMPLES_PER_ROW), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.tuples(links).map(list), st.lists(ops, min_size=1, max_size=25))
    def sequence(first, rest):
        steps = first + rest
        counts["examples"] += 1
        buf = bytearray(4096)
        chains = []
        for step in steps:
            kind = step[0]
            if kind == "link":
                _, elem, n, offset, order_seed, how = step
                order = np.random.default_rng(order_seed).permutation(n)
                if how == "repeat" and n > 1:
                    order[-1] = order[0]
                elif how == "range":
                    order[-1] = n + 3
                before = bytes(buf)
                linked, err = refused(lambda: _core.link_chain(buf, offset, elem, n, order))
                if linked is not None:
                    chains.append(linked)
                else:
                    assert bytes(buf) == before, "a refused link wrote the buffer"
                linked = None          # only `chains` holds chains (and so the buffer)
            elif kind == "write":
                _, at, word = step
                if isinstance(word, tuple):     # an address near or inside the buffer
                    word = (_core.address(buf) + word[1]) % 2 ** 64
                if isinstance(at, tuple):
                    if not chains:
                        continue
                    target = chains[at[0] % len(chains)]
                    at = target.offset + (at[1] % target.elements) * target.element_bytes
                    target = None
                if at + 8 <= len(buf):
                    buf[at:at + 8] = word.to_bytes(8, "little")
            elif kind == "shrink":
                try:
                    del buf[step[1]:]
                    buf.extend(bytes(4096 - len(buf)))      # regrown (maybe at the same address)
                    assert not chains, "a linked buffer was resized"
                except BufferError:
                    assert chains, "an unlinked buffer could not be resized"
            elif kind == "walk" and chains:
                _, which, w, count, start = step
                walk(buf, chains, which, w, count, start)
            elif kind == "drop" and chains:
                del chains[step[1] % len(chains)]
        for which in range(len(chains)):       # at the end, a chase of every chain left
            walk(buf, chains, which, plain, 100, 0)
        chains.clear()
        del buf[:]                           # no chain left: the buffer is the caller's again

    plain = next(i for i, r in enumerate(walkers) if r.name == "chase_ptr")

    def walk(buf, chains, which, w, count, start):
        """Walk chain `which` with walker row w: it runs, or it is refused
        (never when the chain is intact and its elements are large enough)."""
        chain, row = chains[which % len(chains)], walkers[w]
        off = chain.offset + (start % chain.elements) * chain.element_bytes
        whole = intact(buf, chain)
        fits = chain.element_bytes >= _core.footprint(row.index, 64, count, 0)[2]
        _, err = refused(lambda: _core.run(row.index, dst, 0, chain, off, 64, 0, count, 0))
        # the error's traceback holds the call's frames, and so the chain
        message, err, chain = (str(err) if err is not None else None), None, None
        counts["walks"] += 1
        if message is not None:
            counts["refused_walks"] += 1
            assert not (whole and fits), f"{row.name}: refused a walk of an intact chain: {message}"

    sequence()
    return counts


if __name__ == "__main__":
    _child()
