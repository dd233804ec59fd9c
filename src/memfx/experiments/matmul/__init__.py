"""Drepper's matrix multiplication table, on the machine at hand.

Seed 004 (Drepper, "What every programmer should know about memory", 6.2.1,
table 6.2 "Matrix Multiplication Timing", N = 1000 doubles on a Core 2):

    naive                    100 %
    mul2 transposed first    23.4 %
    blocked, SM = line / 8   17.3 %
    blocked + SSE2           9.47 %

The same four forms (kernels mm_* in layout.c), timed a tile of the product
per iteration -- 64 results, n multiply-adds each, in the form's own order,
from a cursor, so that a run of iterations makes a whole product's accesses
cut into pieces and a sample stays short on a busy machine at any N --,
arms interleaved, every result checked equal to numpy's product of the
same integer-valued matrices (exact in doubles, whatever the order).
N: 1024 in the quick preset; "auto" (the largest multiple of 8 whose one
matrix fits the L2 that sysfs reports, so the three spill it), 1000
(Drepper's) and 1024 in the full one; the answers are at the largest.

And Drepper's matrix-initialisation table (6.1, "Bypassing the Cache", table
6.1, on a Core 2 -- the seed does not give the matrix size):

                  row order   column order
    normal          0.048 s      0.127 s
    non-temporal    0.048 s      0.160 s

as the arms init_* (kernels init_* in layout.c): an init_n x init_n matrix of
32-bit integers, row or column order, mov or movnti, timed one band of 16
rows (row order) or 16 columns (column order: one line wide) per iteration
from a cursor, so a sample stays short (a sample of a whole column-order
pass lasts tens of ms here and is preempted on a busy machine) while the
matrix stays large; time per matrix = per band x bands.  Every kernel is
checked byte-exact (each element its own value; nothing outside the matrix
and its cursor written) before it is timed; the answers are times relative
to the normal row-order init, beside Drepper's.
"""
from __future__ import annotations

import math

import numpy as np

from ...model import answers as ans
from ...model.answers import Question
from ...model.errors import ParamError
from ...model.machine_view import Fingerprint
from ...model.plotspec import PlotSpec
from ..base import Experiment, Param, Point, Region, Trial, register
from .analysis import (  # noqa: F401
    DREPPER,
    DREPPER_INIT_S,
    FORMS,
    INIT_ARMS,
    INIT_BAND,
    SM,
    TILE,
    MatmulAnswers,
    init_bands,
    product_ms,
    tiles,
)


def warm_tiles(n):
    return n // SM


INIT_ELEMENT = 4                 # bytes: Drepper's matrix is of int (_mm_stream_si32)
CURSOR = 8                       # bytes past the matrix: the band to write next
INIT_ALIGN = 64                  # init_n is a multiple of a line of elements / 4
INIT_MAX_N = 16384               # 1 GiB of int32
INIT_VALUE = 0x9E3779B9          # the first element's value; element k gets value + k
# The byte-exact check before timing: every n x n matrix up to n = 40 (all
# square sizes to 4096 bytes and beyond, partial last bands included), at
# these byte offsets from a line (a store may split a line).
CHECK_MAX_N = 40
CHECK_OFFSETS = (0, 1, 4, 61)


def init_auto_n(machine):
    """The smallest multiple of INIT_ALIGN whose int32 matrix is at least
    twice the last-level cache sysfs reports (8 MiB when it reports none):
    it comes from memory, as on Drepper's machine."""
    llc = Fingerprint.of(machine).llc
    big = llc.size_bytes if llc else 8 << 20
    n = math.isqrt(2 * big // INIT_ELEMENT)
    n = -(-n // INIT_ALIGN) * INIT_ALIGN
    while n * n * INIT_ELEMENT < 2 * big:
        n += INIT_ALIGN
    return min(n, INIT_MAX_N)


def init_reference(n, value=INIT_VALUE):
    """The bytes an init kernel leaves in an n x n matrix: element k = (value
    + k) mod 2^32, little-endian."""
    k = np.arange(n * n, dtype=np.uint64)
    return ((k + value) & 0xFFFFFFFF).astype("<u4").view(np.uint8)


# Warm-up and re-warm of an initialisation arm: bands of this many bytes at
# most.  A matrix up to that size is written whole (it may live in a cache);
# one larger than that -- init_n=auto is twice the LLC -- is in DRAM whatever
# was written last, and a whole pass of a DRAM-sized matrix in column order
# per visit of each arm was most of a full matmul run.
INIT_WARM_BYTES = 64 << 20


def init_warm_bands(n):
    return max(1, min(init_bands(n), INIT_WARM_BYTES // (INIT_BAND * INIT_ELEMENT * n)))


def check_init(lab, kernel, max_n=CHECK_MAX_N, offsets=CHECK_OFFSETS):
    """Byte-exact check of one init kernel: every n x n matrix for n = 0 ..
    max_n at each byte offset, one whole pass of bands and one more (the
    cursor wraps), from whatever cursor the guard bytes make; a size that is
    not 64 * n must leave the buffer alone.  None, or the first mismatch as
    a message."""
    guard, pad = 0xA5, 64
    region = lab.buffer(max_n * max_n * INIT_ELEMENT + CURSOR + max(offsets) + 2 * pad)
    view = np.frombuffer(region.buffer, dtype=np.uint8, count=region.size, offset=region.offset)
    try:
        for n in range(max_n + 1):
            want = init_reference(n)
            matrix = n * n * INIT_ELEMENT
            for off in offsets:
                start = pad + off
                dst = Region(region.buffer, region.offset + start, matrix + CURSOR,
                             region.address + start)
                for size, ok in ((64 * n, n > 0), (64 * n + 4, False)):
                    view[:] = guard
                    lab.call(Trial(kernel, dst=dst, size=size, aux=n, value=INIT_VALUE),
                             init_bands(n) + 1)
                    where = f"{kernel}: {n} x {n} at offset {off}, size {size}"
                    if not ok:
                        if (view != guard).any():
                            return f"{where}: wrote to a matrix of the wrong shape"
                        continue
                    got = view[start:start + matrix]
                    if not np.array_equal(got, want):
                        bad = int(np.flatnonzero(got != want)[0])
                        return f"{where}: byte {bad} is {got[bad]:#04x}, want {want[bad]:#04x}"
                    cursor = int.from_bytes(bytes(view[start + matrix:start + matrix + CURSOR]),
                                            "little")
                    if cursor >= init_bands(n):
                        return f"{where}: cursor {cursor} past the {init_bands(n)} bands"
                    outside = np.concatenate([view[:start], view[start + matrix + CURSOR:]])
                    if (outside != guard).any():
                        return f"{where}: wrote outside the matrix and its cursor"
    finally:
        del view
    return None


def auto_n(machine):
    l2_cache = Fingerprint.of(machine).cache(2)
    l2 = l2_cache.size_bytes if l2_cache else 1 << 20
    return max(SM, int(math.isqrt(l2 // 8)) // SM * SM)


def matrices(n, seed):
    """mul1 and mul2 as one (2, n, n) array of small integers in doubles."""
    rng = np.random.default_rng([seed, n])
    return rng.integers(-3, 4, size=(2, n, n)).astype(np.float64)


@register
class Matmul(MatmulAnswers, Experiment):
    name = "matmul"
    order = 76
    title = ("Matrix multiplication: naive, transposed, blocked, blocked + SIMD; matrix "
             "initialisation: row vs column, normal vs non-temporal stores")
    question = ("How much faster than the naive loop are a transposed, a cache-blocked and a "
                "blocked SIMD matrix multiplication here (Drepper's table 6.2)?")
    seeds = ("004",)
    arms = FORMS + INIT_ARMS
    params = [
        Param("n", "list:str", ["auto", "1000", "1024"], "matrix sizes (multiples of 8, or "
              "auto = one matrix the size of the L2); the answers are at the largest", "auto,512"),
        Param("init_n", "list:str", ["1024", "auto"], "initialisation: elements per row "
              "of the square int32 matrix (multiples of 64, or auto = twice the largest "
              "cache); none = no initialisation arms", "1024"),
    ]
    presets = {
        # N = 1024 in quick (issue 22): at the L2's size ("auto") all three
        # matrices fit in the L3 and transposed / naive reads near 1,
        # inconclusive; at 1024 it reads as Drepper's (0.234).  At a power
        # of two the naive loop's column (N x 8 B apart) falls into a few
        # cache sets; at Drepper's 1000 it can stay in the L2, which the
        # full preset shows beside it (docs/machine-notes.md, "Matmul").
        # A tile per iteration keeps the samples short: row bands of the
        # naive loop were so long that a survey's samples were all rejected
        # as preempted.
        "quick": {"samples": 5, "min_sample_ms": 0.5, "n": "1024", "init_n": "1024"},
        "full": {"samples": 5},
    }
    questions = (
        Question("matmul.transposed", "What share of the naive loop's time does the "
                 "transposed form take?", "share", "004",
                 "ratio of medians transposed / naive at the largest N measured (Drepper: "
                 "0.234)", headline=True, band=ans.EFFECT_BAND),
        Question("matmul.blocked", "What share does the blocked form (SM = line / 8) take?",
                 "share", "004", "ratio of medians blocked / naive (Drepper: 0.173)", band=ans.EFFECT_BAND),
        Question("matmul.blocked_simd", "What share does the blocked SSE2 form take?",
                 "share", "004", "ratio of medians blocked_simd / naive (Drepper: 0.0947)", band=ans.EFFECT_BAND),
        Question("matmul.init_column_vs_row", "How much longer does initialising a matrix "
                 "column by column take than row by row?", "ratio", "004",
                 "ratio of medians init_column / init_row (time per matrix) at the largest "
                 "init_n measured (Drepper: 0.127 / 0.048 s = 2.65); the whole 2 x 2 table "
                 "beside Drepper's in details", band=ans.EFFECT_BAND, host_shared=True),
        Question("matmul.init_nt_vs_normal", "Do non-temporal stores change the time of a "
                 "row-order matrix initialisation?", "ratio", "004",
                 "ratio of medians init_row_nt / init_row at the largest init_n measured "
                 "(Drepper: 0.048 / 0.048 s = 1.00)", band=ans.EFFECT_BAND),
        Question("matmul.init_nt_column", "What do non-temporal stores do to a column-order "
                 "initialisation?", "ratio", "004",
                 "ratio of medians init_column_nt / init_column at the largest init_n "
                 "measured (Drepper: 0.160 / 0.127 s = 1.26)", band=ans.EFFECT_BAND,
                 host_shared=True),
    )
    plots = (
        PlotSpec("times", "time per tile of the product (64 results), by form", kind="bars",
                 x="arm", series=("n",), arms=FORMS, log_y=True, xlabel="form",
                 ylabel="ns per tile"),
        PlotSpec("init", "matrix init: row / column order, normal / NT stores", kind="bars", x="arm",
                 series=("init_n",),
                 arms=INIT_ARMS, log_y=True, xlabel="order and store",
                 ylabel="ns per band (16 rows or 16 columns)"),
    )

    def sizes(self, params, machine):
        out = []
        for v in params["n"]:
            if str(v).strip().lower() == "auto":
                out.append(auto_n(machine))
                continue
            try:
                n = int(v)
            except ValueError:
                raise ParamError(f"n: expected auto or an integer, got {v!r}") from None
            if n < SM or n % SM or n > 4096:
                raise ParamError(f"n: {n} must be a multiple of {SM} from {SM} to 4096")
            out.append(n)
        return sorted(set(out))

    @staticmethod
    def init_sizes(params, machine):
        out = []
        for v in params.get("init_n") or []:
            if str(v).strip().lower() == "auto":
                out.append(init_auto_n(machine))
                continue
            if str(v).strip().lower() == "none":
                continue
            try:
                n = int(v)
            except ValueError:
                raise ParamError(f"init_n: expected auto, none or an integer, got {v!r}") \
                    from None
            if n < INIT_ALIGN or n % INIT_ALIGN or n > INIT_MAX_N:
                raise ParamError(f"init_n: {n} must be a multiple of {INIT_ALIGN} from "
                                 f"{INIT_ALIGN} to {INIT_MAX_N}")
            out.append(n)
        return sorted(set(out))

    def plan(self, params, machine):
        return [Point(form, {"n": n}) for n in self.sizes(params, machine) for form in FORMS] \
            + [Point(arm, {"init_n": n}) for n in self.init_sizes(params, machine)
               for arm in INIT_ARMS]

    def estimate_seconds(self, params, machine):
        # warm-up and settles: a few visits of warm_tiles per form, the
        # naive at ~3 ns per multiply-add at N = 1024
        warm = sum(warm_tiles(n) * TILE * n * 6 for n in self.sizes(params, machine)) \
            * 3e-9 * 2.5
        # init: a column-order pass at ~5 ns per element, samples of N and 2N passes
        # init: warm-up and settle, one column-order pass at ~15 ns per element
        init = sum(n * n * 15e-9 for n in self.init_sizes(params, machine)) * len(INIT_ARMS) * 2
        return 1 + warm + init + len(self.plan(params, machine)) * params["samples"] * 3 \
            * params["min_sample_ms"] / 1000

    def prepare(self, point, params, lab):
        if point.arm in INIT_ARMS:
            n = point.params["init_n"]
            # pre-faulted: no first touch timed; warm-up: the whole matrix, or
            # INIT_WARM_BYTES of it
            dst = lab.buffer(n * n * INIT_ELEMENT + CURSOR)
            return Trial(point.arm, dst=dst, size=INIT_BAND * INIT_ELEMENT * n, aux=n,
                         value=INIT_VALUE, warmup=init_warm_bands(n), extra={"init_n": n},
                         # a call's overhead is ~0.1 us of a >= 0.5 ms sample: one length,
                         # half the exposure to preemption of an N, 2N pair
                         difference=False)
        n = point.params["n"]
        src = lab.buffer(2 * n * n * 8)
        view = np.frombuffer(src.buffer, dtype=np.float64, count=2 * n * n, offset=src.offset)
        view[:] = matrices(n, params["seed"]).ravel()
        del view
        dst = lab.buffer(2 * n * n * 8 + 8)     # res, mul2 transposed, the tile cursor
        # one iteration = the next tile of the product, so a sample lasts
        # min_sample_ms at any n
        return Trial(f"mm_{point.arm}", src=src, dst=dst, size=n, warmup=warm_tiles(n),
                     extra={"n": n})

    def verify(self, lab, params):
        """Every form computes numpy's product exactly (integer-valued doubles),
        in one call of a whole product and in pieces that go on from the
        cursor and wrap past the end."""
        for n in (8, 16, 40):
            m = matrices(n, params["seed"])
            want = m[0] @ m[1]
            for form in FORMS:
                src = lab.buffer(2 * n * n * 8)
                np.frombuffer(src.buffer, dtype=np.float64, count=2 * n * n,
                              offset=src.offset)[:] = m.ravel()
                dst = lab.buffer(2 * n * n * 8 + 8)
                got = np.frombuffer(dst.buffer, dtype=np.float64, count=n * n,
                                    offset=dst.offset).reshape(n, n)
                whole = tiles(n)
                for counts in ((whole,), (min(3, whole), whole - min(3, whole)),
                               (whole + 1,)):
                    for c in counts:
                        lab.call(Trial(f"mm_{form}", src=src, dst=dst, size=n), c)
                    if not np.array_equal(got, want):
                        raise AssertionError(f"mm_{form} n={n}: the product in pieces of "
                                             f"{counts} tiles differs from numpy's")
                del got
        for kernel in INIT_ARMS:
            bad = check_init(lab, kernel)
            if bad:
                raise AssertionError(bad)
        lab.release()


