"""Where a working set lives: the cache levels a machine reports, the
windows of sizes well inside each, and one declared size per level.

Shared by the experiments that measure per level (bandwidth, fill), so that
"the L2 figure" is read at the same working set, by the same rule, in every
run and every experiment (issue 22: the same evidence every run).
"""
from __future__ import annotations

import math

from ..model.machine_view import Fingerprint

# A level's points lie well inside it: above 1.5x the cache below, at most
# 0.75x its own capacity (sets are not filled evenly and the code, the page
# tables and the other arrays share the cache); DRAM from 2x the LLC.
INSIDE_BELOW, INSIDE_ABOVE, DRAM_FROM = 1.5, 0.75, 2.0


def data_caches(machine):
    """[(level id, size_bytes)] of the fingerprint's cache levels, L1 first:
    the pairs the windows below work on, ids as bandwidth's questions and
    points name them (CacheLevel.key: l1d, l2, l3, ...)."""
    return [(c.key, c.size_bytes) for c in Fingerprint.of(machine).caches]


def level_windows(caches):
    """{level id: (lo, hi)}: sizes well inside each level (lo exclusive)."""
    out, prev = {}, 0
    for lid, cap in caches:
        out[lid] = (prev * INSIDE_BELOW, cap * INSIDE_ABOVE)
        prev = cap
    if caches:
        out["dram"] = (caches[-1][1] * DRAM_FROM - 1, math.inf)
    return out


def declared_sizes(caches, lo, hi, team=1, shared=()):
    """[(level id, working set per thread)]: one size well inside each level
    for a team of `team` threads, each on its own buffer (a level in
    `shared` holds all of them), within [lo, hi]: the geometric middle of
    the upper half of the level's window in octaves (at most 2 octaves
    below its top), a 4 KiB multiple; DRAM at DRAM_FROM x the LLC."""
    out = []
    for lid, (a, b) in level_windows(caches).items():
        if lid == "dram":
            size = int(caches[-1][1] * DRAM_FROM)
        else:
            top = b / team if lid in shared else b
            bottom = max(a, top / 4)
            if bottom >= top:
                continue
            size = int(math.sqrt(bottom * top))
        size = max(4096, size // 4096 * 4096)
        if lo <= size <= hi:
            out.append((lid, size))
    return out
