"""The sweeps latency and bandwidth share (the kit): the geometric size grid
with points on both sides of each cache size, and the random arm's visiting
order in the narrowest index type.  Latency re-exports every
name."""
from __future__ import annotations

import math

import numpy as np

from ..lab.core import shuffle_in_place


def index_itemsize(n):
    """Bytes per index of a shuffled order of n elements: int32 below 2^31."""
    return 4 if n < 2 ** 31 else 8


def shuffled_order(n, seed):
    """The random arm's visiting order: a uniformly random permutation of
    0..n-1 in the narrowest index type, a function of `seed` (an int or a
    list of them), shuffled by the core (lab.shuffle_in_place: about 4x
    numpy's shuffle on a DRAM-sized set; docs/machine-notes.md)."""
    order = np.arange(n, dtype=np.int32 if index_itemsize(n) == 4 else np.int64)
    return shuffle_in_place(order, seed)


# Orders kept per run by kept_order: the two largest (small ones are cheap
# to draw again).  The loaded chase and the random read of a bandwidth run
# draw the same order at the DRAM size (a shuffle of tens of millions of
# lines takes most of a second).
KEPT_ORDERS = 2


def kept_order(cache, n, seed):
    """shuffled_order(n, seed), kept in `cache` (a Lab's per-run cache) for
    the next request of the same n and seed; read-only."""
    kept = cache.setdefault("_sweep.orders", {})
    key = (n, tuple(seed) if isinstance(seed, (list, tuple)) else seed)
    order = kept.get(key)
    if order is None:
        order = shuffled_order(n, seed)
        order.flags.writeable = False
        kept[key] = order
        while len(kept) > KEPT_ORDERS:
            kept.pop(min(kept, key=lambda k: k[0]))
    return order


# The sweeps' default sparse_from: past 64 MiB (latency, bandwidth and copy
# curves are flat there on most machines; refine and the anchors still put
# sizes at every knee and around every reported cache), one size per
# doubling: on a large-LLC machine the sizes past it were most of a full
# replica (docs/machine-notes.md, "Sparse sizes").
SPARSE_FROM = 64 << 20
SPARSE_FROM_HELP = ("above this size one size per doubling (refine still adds sizes at every "
                    "knee or crossing it finds, and both sides of each reported cache are "
                    "measured); 0 = per_octave up to max_size, bytes")


def size_grid(lo, hi, per_octave, anchors=(), sparse_from=0):
    """Geometric sizes from lo to hi (per_octave per doubling up to
    sparse_from, one per doubling above it; 0 = no sparse part) plus points
    on both sides of each anchor; never outside [lo, hi], so lo == hi
    measures exactly that one size."""
    if hi <= lo:
        return [int(lo)]
    dense_to = hi if not sparse_from else min(hi, max(lo, sparse_from))
    n = int(round(math.log2(dense_to / lo) * per_octave))
    sizes = {int(round(lo * 2 ** (i / per_octave))) for i in range(n + 1)}
    top = max(sizes)
    if dense_to < hi:
        sizes |= {top << i for i in range(1, int(math.log2(hi / top)) + 1)}
    sizes = {s for s in sizes if s <= hi}
    sizes.add(int(hi))
    for a in anchors:
        for f in (0.75, 1.5):
            s = int(a * f)
            if lo <= s <= hi:
                sizes.add(s)
    return sorted(sizes)
