"""Fill's cache levels and its level ratio (the kit; shared by fill and
fill_alloc): the level a region lives in ("L1d", "L2", ... "DRAM", by the
Fingerprint), and the ratio of two arms over several sizes
with its two-stage bootstrap CI and verdict.  Moved out of fill.py, which
re-exports every name."""
from __future__ import annotations

import numpy as np

from ...model import stats
from ...model.findings import INCONCLUSIVE, effect_verdict, threshold

# ---- cache levels ------------------------------------------------------------------

# Fill's one level when the fingerprint reports no cache: all sizes together.
ALL_SIZES = "all"


def fill_levels(fp):
    """The levels fill reports on, smallest first: the Fingerprint's level
    names (DRAM last), or ALL_SIZES alone when it reports no cache."""
    return fp.level_names if fp.caches else [ALL_SIZES]


def fill_level(fp, size):
    """The level a region of `size` bytes lives in (Fingerprint.level_of),
    ALL_SIZES when the fingerprint reports no cache."""
    return fp.level_of(size) if fp.caches else ALL_SIZES


# ---- statistics -----------------------------------------------------------------------

def level_ratio(pairs, confidence=None, n_boot=2000, seed=0, min_samples=None):
    """Ratio of two arms over several sizes: the median over sizes of the
    per-size ratios of medians, median(a_s)/median(b_s), with a two-stage
    percentile bootstrap CI (stats.median_ratio_over_groups): sizes are
    resampled with replacement, and each arm's samples within each size.  The first stage carries the size-to-size
    scatter of the ratio: each size has its own buffers, and in a VM a
    buffer can be slowed for seconds by the host whatever value it holds
    (seen here: one 4 MiB buffer at a quarter of its neighbours' speed), so
    placement effects differ between sizes but not between the samples of
    one size.  The median keeps one disturbed size from moving the estimate;
    working on per-size ratios keeps the spread of bandwidth across sizes out.

    pairs: [(a_values, b_values)] per size.  With min_samples, sizes where an
    arm has fewer samples are left out as long as another size has enough
    (they are counted in "dropped"); otherwise all sizes are used and the
    small n makes the verdict inconclusive.  Returns None when no size has
    samples in both arms, else {ratio, ci_low, ci_high, sizes, dropped, n_a,
    n_b} with n_a / n_b the smallest per-size sample counts (what the
    min_samples threshold of the verdict applies to)."""
    conf = threshold("ci_level") if confidence is None else confidence
    clean = []
    for a, b in pairs:
        a = np.asarray(a, float)
        b = np.asarray(b, float)
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        if a.size and b.size and np.median(a) > 0 and np.median(b) > 0:
            clean.append((a, b))
    if not clean:
        return None
    chosen = clean
    if min_samples:
        chosen = [(a, b) for a, b in clean if min(a.size, b.size) >= min_samples] or clean
    ratio, lo, hi = stats.median_ratio_over_groups(chosen, conf, n_boot, seed)
    k = len(chosen)
    return {"ratio": ratio, "ci_low": lo, "ci_high": hi,
            "sizes": k, "dropped": len(clean) - k,
            "n_a": min(a.size for a, _ in chosen), "n_b": min(b.size for _, b in chosen)}


def ratio_verdict(r):
    """detected / not_detected / inconclusive for a level_ratio result, by the
    named thresholds effect_min and min_samples (findings.effect_verdict)."""
    if r is None:
        return INCONCLUSIVE
    return effect_verdict(r["ratio"], r["ci_low"], r["ci_high"], r["n_a"], r["n_b"])
