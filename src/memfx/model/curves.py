"""Levels of a latency-vs-working-set curve: the plateaus (one per cache
level and memory) and the knees between them (`find_levels`, re-exported by
stats).  Pure functions of their inputs, numpy and the standard library
only, like stats.py."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["Level", "find_levels", "MAD_TO_SIGMA"]

#: Factor turning a MAD into a standard-deviation estimate for normal data.
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class Level:
    """One plateau of a latency curve.

    ``latency_ns``: median latency of the plateau points (ns).
    ``first_size``/``last_size``: smallest/largest working set (bytes) on the
    plateau; ``n_points``: points on it.
    For every level but the last, the boundary to the next level:
    ``knee_size`` (bytes) is the estimated capacity, where log(latency)
    crosses the midpoint between the two plateau levels (interpolated in
    log2(size)); ``knee_low`` is the last size clearly on this plateau and
    ``knee_high`` the first size clearly on the next one. ``ramp_sizes`` are
    the sizes between the two plateaus, assigned to neither.
    ``spread``: robust scatter of the plateau's points around its trend
    (ln units, ~ relative); ``flat``: the level passed the plateau test (at
    least ``min_points`` sizes, low slope, low spread) -- only the last
    level of a curve can be kept without passing it, as the level the
    previous knee leads to.
    """

    latency_ns: float
    first_size: float            # bytes: an int unless the sweep's sizes are not
    last_size: float
    n_points: int
    knee_size: Optional[int] = None
    knee_low: Optional[float] = None
    knee_high: Optional[float] = None
    ramp_sizes: Tuple[float, ...] = ()
    spread: float = 0.0
    flat: bool = True

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ramp_sizes"] = list(self.ramp_sizes)
        return d


def _as_size(v: float) -> float:
    """An int when the size is whole (as it is measured), else the float."""
    return int(v) if float(v).is_integer() else float(v)


def _curve(sizes_bytes: Sequence[float], latencies_ns: Sequence[float]
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sorted unique sizes with their median latency, dropping points whose
    latency is NaN, infinite or <= 0. Returns (sizes, log2 sizes, ln lat, lat)."""
    s = np.asarray(sizes_bytes, dtype=float).ravel()
    lat = np.asarray(latencies_ns, dtype=float).ravel()
    if s.shape != lat.shape:
        raise ValueError("sizes_bytes and latencies_ns differ in length")
    if np.any(~np.isfinite(s)) or np.any(s <= 0):
        raise ValueError("sizes_bytes must be positive and finite")
    ok = np.isfinite(lat) & (lat > 0)
    s, lat = s[ok], lat[ok]
    sizes = np.unique(s)
    med = np.array([np.median(lat[s == v]) for v in sizes])
    return sizes, np.log2(sizes), np.log(med), med


def _noise_sigma(y: np.ndarray) -> float:
    """Robust estimate of the point-to-point noise of ln(latency)."""
    if y.size < 3:
        return 0.0
    return float(MAD_TO_SIGMA * np.median(np.abs(np.diff(y))) / math.sqrt(2.0))


def _default_penalty(y: np.ndarray) -> float:
    """Per-segment penalty: deliberately heavy (20 sigma^2 ln n, sigma
    floored at 1 %) so noise and the slow tails of a transition do not split
    into stairs; real steps between plateaus gain far more than this."""
    sigma = max(_noise_sigma(y), 0.01)
    return 20.0 * sigma * sigma * math.log(max(y.size, 2))


def _segment(y: np.ndarray, penalty: float) -> List[np.ndarray]:
    """Optimal piecewise-constant segmentation of ``y`` (dynamic
    programming; cost = within-segment sum of squares + ``penalty`` per
    segment). Returns index arrays of consecutive points."""
    n = y.size
    s1 = np.concatenate([[0.0], np.cumsum(y)])
    s2 = np.concatenate([[0.0], np.cumsum(y * y)])
    best = np.zeros(n + 1)
    prev = np.zeros(n + 1, dtype=int)
    for j in range(1, n + 1):
        i = np.arange(j)
        sse = s2[j] - s2[i] - (s1[j] - s1[i]) ** 2 / (j - i)
        total = best[:j] + sse + penalty
        k = int(np.argmin(total))
        best[j], prev[j] = total[k], k
    bounds = [n]
    while bounds[-1] > 0:
        bounds.append(prev[bounds[-1]])
    bounds.reverse()
    return [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def _step_between(x: np.ndarray, y: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """Step from group ``a`` to group ``b`` once their common trend is taken
    out: the difference of their intercepts in a fit of lines with one
    shared slope (ln units). Two pieces of one sloped plateau give ~0; two
    flat plateaus give the difference of their means. A slope smaller than
    twice its standard error counts as 0 (noise, not a trend)."""
    xa, ya, xb, yb = x[a], y[a], x[b], y[b]
    dxa, dxb = xa - xa.mean(), xb - xb.mean()
    sxx = dxa @ dxa + dxb @ dxb
    slope = 0.0
    if sxx > 0:
        slope = (dxa @ ya + dxb @ yb) / sxx
        dof = a.size + b.size - 3
        if dof > 0:
            res = np.concatenate([ya - ya.mean() - slope * dxa, yb - yb.mean() - slope * dxb])
            se = math.sqrt(float(res @ res) / dof / sxx)
            if abs(slope) < 2.0 * se:
                slope = 0.0
    return float(yb.mean() - ya.mean() - slope * (xb.mean() - xa.mean()))


def _merge_close(x: np.ndarray, y: np.ndarray, groups: List[np.ndarray],
                 jump: float, contiguous: bool = True) -> List[np.ndarray]:
    """Merge neighbouring groups that are not separated by a step of at
    least ``jump`` (ln units), closest pair first. Groups are separated when
    their medians differ by ``jump`` or more and, for ``contiguous`` groups
    (neighbours on the curve), the step left after removing their common
    trend is also that large; the trend test keeps a slowly rising plateau
    from being cut into stairs."""
    groups = list(groups)
    while len(groups) > 1:
        gaps = []
        for a, b in zip(groups[:-1], groups[1:]):
            gap = abs(float(np.median(y[b]) - np.median(y[a])))
            if contiguous:
                gap = min(gap, abs(_step_between(x, y, a, b)))
            gaps.append(gap)
        i = int(np.argmin(gaps))
        if gaps[i] >= jump:
            break
        groups[i:i + 2] = [np.concatenate(groups[i:i + 2])]
    return groups


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of y on x (0 for fewer than two points)."""
    if x.size < 2:
        return 0.0
    dx = x - x.mean()
    return float(dx @ (y - y.mean()) / (dx @ dx))


def _spread(x: np.ndarray, y: np.ndarray, g: np.ndarray) -> float:
    """Robust scatter (MAD as sigma, ln units) of the points ``g`` around
    their least-squares line: small on a plateau (flat or slowly rising),
    large on a mixture whose points jump between two levels."""
    if g.size < 3:
        return 0.0
    xs, ys = x[g], y[g]
    res = ys - ys.mean() - _slope(xs, ys) * (xs - xs.mean())
    # about zero, not about the residuals' median: with three points the
    # median-centred MAD of a zig-zag is (nearly) zero
    return float(MAD_TO_SIGMA * np.median(np.abs(res)))


def _is_plateau(x: np.ndarray, y: np.ndarray, g: np.ndarray, min_points: int, max_rise: float,
                max_spread: float) -> bool:
    return (g.size >= min_points and abs(_slope(x[g], y[g])) <= max_rise
            and _spread(x, y, g) <= max_spread)


def _is_flat_run(x: np.ndarray, y: np.ndarray, g: np.ndarray, min_points: int, width: float,
                 max_rise: float) -> bool:
    """At least ``min_points`` consecutive points within ``width`` (ln units)
    of each other whose fitted slope is at most ``max_rise`` per doubling."""
    return (g.size >= min_points and float(np.ptp(y[g])) <= width
            and abs(_slope(x[g], y[g])) <= max_rise)


def _flat_runs(x: np.ndarray, y: np.ndarray, g: np.ndarray, min_points: int, width: float,
               max_rise: float) -> List[np.ndarray]:
    """Flat runs (see _is_flat_run) of consecutive points of ``g``: plateaus
    inside a stretch the segmentation took for a ramp (a short cache level
    between two transitions). Longest run first, then recursively on both
    sides."""
    if g.size < min_points:
        return []
    best = (0, 0)
    for i in range(g.size - min_points + 1):
        j = i + min_points
        if not _is_flat_run(x, y, g[i:j], min_points, width, max_rise):
            continue
        while j < g.size and _is_flat_run(x, y, g[i:j + 1], min_points, width, max_rise):
            j += 1
        if j - i > best[1] - best[0]:
            best = (i, j)
    i, j = best
    if j - i < min_points:
        return []
    return (_flat_runs(x, y, g[:i], min_points, width, max_rise) + [g[i:j]]
            + _flat_runs(x, y, g[j:], min_points, width, max_rise))


def _lean(x: np.ndarray, y: np.ndarray, rest: np.ndarray, k: int) -> float:
    """How far point ``k`` lies off the least-squares line through the
    points ``rest`` (ln units, signed)."""
    xs, ys = x[rest], y[rest]
    return float(y[k] - ys.mean() - _slope(xs, ys) * (x[k] - xs.mean()))


def _trim_edges(x: np.ndarray, y: np.ndarray, plateaus: List[np.ndarray],
                band: float) -> List[np.ndarray]:
    """Move edge points that lean more than ``band`` (ln units) off the trend
    of the rest of their plateau, towards the neighbouring level, out of the
    plateau: they are the start of a ramp. Plateaus keep >= 4 points."""
    meds = [float(np.median(y[g])) for g in plateaus]
    out = []
    for i, g in enumerate(plateaus):
        if i + 1 < len(plateaus):
            up = math.copysign(1.0, meds[i + 1] - meds[i])
            while g.size > 4 and up * _lean(x, y, g[:-1], g[-1]) > band:
                g = g[:-1]
        if i > 0:
            down = math.copysign(1.0, meds[i - 1] - meds[i])
            while g.size > 4 and down * _lean(x, y, g[1:], g[0]) > band:
                g = g[1:]
        out.append(g)
    return out


def _knee_x(x: np.ndarray, y: np.ndarray, lo: int, hi: int, y_lo: float, y_hi: float) -> float:
    """log2 size where y crosses the midpoint of y_lo and y_hi between
    indices lo and hi (first crossing, linear interpolation, clamped)."""
    mid = 0.5 * (y_lo + y_hi)
    up = 1.0 if y_hi >= y_lo else -1.0
    k = next((k for k in range(lo + 1, hi + 1) if up * (y[k] - mid) >= 0), hi)
    j = k - 1
    dy = y[k] - y[j]
    t = 0.5 if dy == 0 else min(1.0, max(0.0, (mid - y[j]) / dy))
    return float(x[j] + t * (x[k] - x[j]))


def find_levels(sizes_bytes: Sequence[float], latencies_ns: Sequence[float],
                min_jump: float = 0.25, min_points: int = 3,
                max_slope: float = 0.35, max_spread: Optional[float] = None,
                penalty: Optional[float] = None) -> List[Level]:
    """Plateaus (cache levels) of a latency-vs-working-set curve.

    ``sizes_bytes``: working-set sizes (bytes, ideally geometric, e.g.
    sqrt(2) steps); ``latencies_ns``: latency per access at each size (ns).
    Repeated sizes are combined by their median; points whose latency is
    NaN, infinite or <= 0 are dropped. Returns the levels in order of size
    (see :class:`Level`); empty when no point is usable.

    Method, on ln(latency) over log2(size):

    1. optimal piecewise-constant segmentation by dynamic programming
       (within-segment sum of squares + ``penalty`` per segment; the default
       penalty scales with the curve's robust point-to-point noise);
    2. neighbouring segments not separated by a relative step of at least
       ``min_jump`` are merged (the step is judged both from their medians
       and after removing a shared trend, so a plateau that rises slowly is
       not cut into stairs);
    3. a segment is a plateau when it has at least ``min_points`` points, its
       fitted slope is at most ``max_slope`` (relative latency rise per
       doubling of size) and the robust scatter of its points around that
       slope is at most ``max_spread`` (default: half of ``min_jump`` or
       three times the noise, whichever is larger) -- a mixture whose points
       jump between two levels is not a level; the last segment is always a
       level (``flat`` says whether it passed). Inside the other segments
       (ramps), runs of at least ``min_points`` consecutive sizes within
       ``min_jump`` of each other are plateaus too (a short level between
       two transitions); the remaining points belong to no level and are
       listed in the earlier level's ``ramp_sizes``;
    4. plateaus closer than ``min_jump`` once ramps are dropped are merged;
       edge points that lean off their plateau's trend towards the
       neighbouring level (by more than half of ``min_jump`` or three times
       the noise) move to the ramp;
    5. knees: see :class:`Level`.
    """
    if min_jump <= 0 or max_slope < 0 or min_points < 1:
        raise ValueError("need min_jump > 0, max_slope >= 0 and min_points >= 1")
    sizes, x, y, lat = _curve(sizes_bytes, latencies_ns)
    if sizes.size == 0:
        return []
    jump = math.log1p(min_jump)
    pen = _default_penalty(y) if penalty is None else float(penalty)
    segs = _merge_close(x, y, _segment(y, pen), jump)
    max_rise = math.log1p(max_slope)
    band = max(jump / 2.0, 3.0 * _noise_sigma(y))
    spread_limit = band if max_spread is None else float(max_spread)
    plateaus = []
    for i, g in enumerate(segs):
        if _is_plateau(x, y, g, min_points, max_rise, spread_limit):
            plateaus.append(g)
        elif i == len(segs) - 1:
            # the last segment: its flat runs are levels; when it has none it
            # stays the (unflat) level that the previous knee leads to
            runs = _flat_runs(x, y, g, min_points, jump, max_rise)
            plateaus.extend(runs if runs and runs[-1][-1] == g[-1] else runs + [g])
        else:
            plateaus.extend(_flat_runs(x, y, g, min_points, jump, max_rise))
    plateaus = _merge_close(x, y, plateaus, jump, contiguous=False)
    flat = [_is_plateau(x, y, g, min_points, max_rise, spread_limit)
            or _is_flat_run(x, y, g, min_points, jump, max_rise) for g in plateaus]
    return _build_levels(sizes, x, y, lat, _trim_edges(x, y, plateaus, band), flat)


def _build_levels(sizes: np.ndarray, x: np.ndarray, y: np.ndarray, lat: np.ndarray,
                  plateaus: List[np.ndarray], flat: List[bool]) -> List[Level]:
    meds = [float(np.median(lat[g])) for g in plateaus]
    levels = []
    for i, g in enumerate(plateaus):
        first, last = int(g.min()), int(g.max())
        knee = low = high = None
        ramp: Tuple[float, ...] = ()
        if i + 1 < len(plateaus):
            nxt = int(plateaus[i + 1].min())
            kx = _knee_x(x, y, last, nxt, math.log(meds[i]), math.log(meds[i + 1]))
            knee = int(round(2.0 ** kx))
            low, high = _as_size(sizes[last]), _as_size(sizes[nxt])
            ramp = tuple(_as_size(v) for v in sizes[last + 1:nxt])
        levels.append(Level(latency_ns=meds[i], first_size=_as_size(sizes[first]),
                            last_size=_as_size(sizes[last]), n_points=int(g.size),
                            knee_size=knee, knee_low=low, knee_high=high,
                            ramp_sizes=ramp, spread=_spread(x, y, g), flat=bool(flat[i])))
    return levels
