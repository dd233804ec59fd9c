"""Robust statistics for memfx samples.

Every function here is a pure function of its inputs: no I/O, no global
state, and the bootstrap draws from a ``numpy.random.Generator`` seeded by
the ``seed`` argument (default 0), so the same samples always give the same
confidence interval.

Units: sample values are whatever the caller measured (usually ns); the
functions keep that unit unless their docstring says otherwise. Sizes in
:func:`find_levels` (curves.py) are bytes. NaN samples are dropped everywhere.

Imports only numpy and the standard library, so it loads without the C core.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from numpy.typing import ArrayLike

# Level and knee detection lives in curves.py; its names are re-exported here,
# with the MAD-to-sigma factor both use.
from .curves import MAD_TO_SIGMA, Level, find_levels

__all__ = [
    "Summary",
    "Level",
    "summarize",
    "bootstrap_ci",
    "hierarchical_ci",
    "combine_replicas",
    "per_op_difference",
    "ratio_of_medians",
    "reject_outliers_mad",
    "bimodal_split",
    "replica_states",
    "cv_of",
    "mad_of",
    "find_levels",
    "MAD_TO_SIGMA",
]

# Largest index matrix (rows x samples) drawn at once by the bootstrap.
_BOOT_CHUNK_ELEMENTS = 4_000_000


# --------------------------------------------------------------------------
# helpers


def _clean(values: ArrayLike) -> np.ndarray:
    """Values as a flat float array with NaN dropped."""
    a = np.asarray(values, dtype=float).ravel()
    return np.asarray(a[~np.isnan(a)])


def _nonempty(values: ArrayLike, what: str = "values") -> np.ndarray:
    a = _clean(values)
    if a.size == 0:
        raise ValueError(f"{what}: no samples (after dropping NaN)")
    return a


def _check_boot_args(confidence: float, n_boot: int) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if int(n_boot) < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot!r}")


def _boot_stats(a: np.ndarray, statistic: Callable[..., Any], n_boot: int,
                rng: np.random.Generator) -> np.ndarray:
    """``statistic`` of ``n_boot`` resamples (with replacement) of ``a``.

    Vectorised: draws a matrix of indices and applies ``statistic`` with
    ``axis=1``; large inputs are processed in chunks of rows.
    """
    n = a.size
    n_boot = int(n_boot)
    out = np.empty(n_boot)
    rows = max(1, _BOOT_CHUNK_ELEMENTS // n)
    # np.median along rows partitions each row and checks for NaN; sorting
    # the rows and taking the middle gives the same values 2-5x faster, and
    # the bootstrap of the median is most of the time an analysis takes
    if statistic is np.median:
        statistic = _row_medians
    for start in range(0, n_boot, rows):
        k = min(rows, n_boot - start)
        idx = rng.integers(0, n, size=(k, n))
        out[start:start + k] = statistic(a[idx], axis=1)
    return out


def _row_medians(m: np.ndarray, axis: int = 1) -> np.ndarray:
    """np.median(m, axis=1) of a NaN-free matrix (the same values)."""
    s = np.sort(m, axis=axis)
    k = s.shape[1]
    return s[:, k // 2] if k % 2 else (s[:, k // 2 - 1] + s[:, k // 2]) / 2


def _sorted_median(s: np.ndarray) -> float:
    """np.median of an already sorted, non-empty, NaN-free array (the same value)."""
    k = s.size
    return float(s[k // 2] if k % 2 else (s[k // 2 - 1] + s[k // 2]) / 2)


def _sorted_quantile(s: np.ndarray, q: float) -> float:
    """np.quantile(s, q) (method "linear", the same value and rounding) of an
    already sorted, non-empty, NaN-free array, without its per-call cost
    (a third of a survey's analysis calls it, twice per point)."""
    h = (s.size - 1) * q
    lo = int(math.floor(h))
    hi = min(lo + 1, s.size - 1)
    t = h - lo
    a, b = float(s[lo]), float(s[hi])
    d = b - a
    # numpy's _lerp: from the nearer end, so t = 1 gives b exactly
    return b - d * (1 - t) if t >= 0.5 else a + d * t


def percentile_interval(boot: np.ndarray, confidence: float) -> Tuple[float, float]:
    """Percentile-method interval of a bootstrap distribution."""
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(boot, [tail, 1.0 - tail])
    return float(low), float(high)


def mad_of(values: ArrayLike) -> float:
    """Median absolute deviation from the median, unscaled (same unit as values)."""
    a = _nonempty(values)
    return float(np.median(np.abs(a - np.median(a))))


def cv_of(values: ArrayLike) -> float:
    """Coefficient of variation: *sample* standard deviation (ddof=1) / mean.

    Dimensionless. 0.0 for a single sample; NaN when the mean is 0.
    Raises ValueError when there are no samples.
    """
    a = _nonempty(values)
    if a.size < 2:
        return 0.0
    mean = float(np.mean(a))
    if mean == 0.0:
        return float("nan")
    return float(np.std(a, ddof=1) / abs(mean))


# --------------------------------------------------------------------------
# summaries and intervals


@dataclass(frozen=True)
class Summary:
    """Robust summary of one data point's samples (all in the samples' unit,
    except ``n`` (count) and ``cv`` (dimensionless, sample std / mean))."""

    n: int
    min: float
    median: float
    max: float
    mean: float
    mad: float       # median absolute deviation, unscaled
    iqr: float       # 75th - 25th percentile (linear interpolation)
    cv: float        # sample standard deviation (ddof=1) / mean
    ci_low: float    # bootstrap CI of the median, percentile method
    ci_high: float

    def as_dict(self) -> Dict[str, float]:
        return asdict(self)


def summarize(values: ArrayLike, confidence: float = 0.95, n_boot: int = 2000,
              seed: int = 0, ci: Union[str, bool, None] = "bootstrap") -> Summary:
    """Summarise samples: n, min, median, max, mean, MAD, IQR, CV and the
    confidence interval of the median.

    NaN samples are dropped. No samples -> ValueError. One sample -> the CI
    is (v, v) and cv is 0.0. ``cv`` uses the sample standard deviation
    (ddof=1).  ``ci``: "bootstrap" (percentile bootstrap, ``n_boot``
    draws), "ranks" (median_ci_ranks: exact, no resampling) or None / False
    (the CI fields are NaN, for a caller that takes its CI from elsewhere,
    e.g. the replicas).
    """
    a = _nonempty(values)
    s = np.sort(a)
    if ci is True or ci == "bootstrap":
        low, high = bootstrap_ci(a, np.median, confidence, n_boot, seed)
    elif ci == "ranks":
        low, high = median_ci_ranks(s, confidence)
    elif ci is None or ci is False:
        low = high = float("nan")
    else:
        raise ValueError(f"ci: 'bootstrap', 'ranks' or None, not {ci!r}")
    q25, q75 = _sorted_quantile(s, 0.25), _sorted_quantile(s, 0.75)
    median = _sorted_median(s)
    return Summary(
        n=int(a.size),
        min=float(s[0]),
        median=median,
        max=float(s[-1]),
        mean=float(np.mean(a)),
        mad=_sorted_median(np.sort(np.abs(a - median))),
        iqr=float(q75 - q25),
        cv=cv_of(a),
        ci_low=low,
        ci_high=high,
    )


def median_ci_ranks(sorted_values: ArrayLike, confidence: float = 0.95) -> Tuple[float, float]:
    """Distribution-free CI of the median from order statistics: the
    k-th smallest and k-th largest of n sorted values, k the largest rank
    with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2 (at least 1, so
    that few samples give their range: n = 5 covers 93.75 %).  No
    resampling: a replica analysed alone only floors the replica-level CI,
    and its bootstrap was a quarter of a survey's analysis."""
    s = np.asarray(sorted_values, float)
    n = s.size
    tail = (1.0 - confidence) / 2.0
    k, cum = 0, 0.0
    for j in range(n):                        # P(X <= j) for X ~ Binomial(n, 1/2)
        cum += math.comb(n, j) / 2.0 ** n
        if cum > tail:
            break
        k = j + 1
    k = max(1, min(k, (n + 1) // 2))
    return float(s[k - 1]), float(s[n - k])


def bootstrap_ci(values: ArrayLike, statistic: Callable[..., Any] = np.median,
                 confidence: float = 0.95,
                 n_boot: int = 2000, seed: int = 0) -> Tuple[float, float]:
    """Percentile bootstrap confidence interval ``(low, high)`` of
    ``statistic`` (a function taking an ``axis`` keyword, e.g. ``np.median``)
    over ``values`` (NaN dropped). Same unit as the statistic.

    Deterministic for a given ``seed``. One sample -> ``(v, v)``.
    """
    _check_boot_args(confidence, n_boot)
    a = _nonempty(values)
    if a.size == 1:
        v = float(statistic(a[np.newaxis, :], axis=1)[0])
        return v, v
    rng = np.random.default_rng(seed)
    return percentile_interval(_boot_stats(a, statistic, n_boot, rng), confidence)


def hierarchical_ci(groups: Sequence[ArrayLike], confidence: float = 0.95, n_boot: int = 1000,
                    seed: int = 0) -> Tuple[float, float]:
    """Two-level bootstrap CI of the median of samples nested in replicas:
    each resample draws the replicas with replacement, then the samples
    within each drawn replica with replacement, and takes the median of all
    drawn samples.  ``groups``: one sequence of values per replica.

    A CI from one process covers only the spread inside it (one set of
    physical pages, one chain permutation, one stretch of host time); the
    replicas bring the spread between them in.  One non-empty group -> the
    ordinary bootstrap of that group."""
    _check_boot_args(confidence, n_boot)
    parts = [_clean(g) for g in groups]
    parts = [g for g in parts if g.size]
    if not parts:
        raise ValueError("no values to summarise")
    if len(parts) == 1:
        return bootstrap_ci(parts[0], np.median, confidence, n_boot, seed)
    rng = np.random.default_rng(seed)
    r = len(parts)
    width = max(g.size for g in parts)
    table = np.full((r, width), np.nan)
    for i, g in enumerate(parts):
        table[i, :g.size] = g
    sizes = np.array([g.size for g in parts])
    n_boot = int(n_boot)
    chosen = rng.integers(0, r, size=(n_boot, r))                  # replicas drawn
    # samples within each drawn replica: uniform indices below its own size
    within = (rng.random((n_boot, r, width)) * sizes[chosen][:, :, None]).astype(int)
    drawn = table[chosen[:, :, None], within]
    # a shorter replica fills its row past its size with its own draws
    # (indices < size) -- equal weight per sample would over-weight long
    # replicas, which are no more independent than short ones
    drawn = drawn.reshape(n_boot, r * width)
    boot = _row_medians(drawn) if np.isfinite(drawn).all() else np.nanmedian(drawn, axis=1)
    return percentile_interval(boot, confidence)


def combine_replicas(values: Sequence[Optional[float]],
                     ci_lows: Optional[Sequence[Optional[float]]] = None,
                     ci_highs: Optional[Sequence[Optional[float]]] = None, confidence: float = 0.95,
                     n_boot: int = 2000, seed: int = 0,
                     log: Optional[bool] = None) -> Dict[str, Optional[float]]:
    """A replica-level estimate and CI from each replica's own estimate and
    CI (a derived figure -- a ratio, a knee, a plateau's median -- that
    cannot be recomputed from pooled samples).

    The estimate is the mean of the replica values (on the log scale, i.e.
    the geometric mean, when every value is positive: ratios, times,
    bandwidths); the CI is the Student-t interval over the replicas,
    mean +- t(R - 1) * s / sqrt(R), with s^2 the replicas' sample variance --
    which holds each replica's own sampling noise as well as the spread
    between processes --, and never narrower than z * the replicas' own
    standard error / sqrt(R) (two replicas that agree by chance are still
    each as uncertain as its CI says).  Why not a bootstrap over the replicas: with R = 2 or 3 its
    percentile interval covers the true value in 69 % / 82 % of simulated
    runs, and the next run's value in 56 % / 69 %; the t interval covers
    them in 95 % and 93 % / 91 % (normal replicas; see tests/test_replicas.py).

    ``log``: None = the log scale when every value is positive; False for a
    share that may be zero in one replica and not in another (its log spread
    would be unbounded).

    Returns ``{"value", "ci_low", "ci_high", "n"}``; fewer than two usable
    replicas -> ci_low/ci_high None."""
    _check_boot_args(confidence, n_boot)
    v = np.asarray([np.nan if x is None else x for x in values], float)
    lo = np.asarray([np.nan if x is None else x for x in (ci_lows or [None] * v.size)], float)
    hi = np.asarray([np.nan if x is None else x for x in (ci_highs or [None] * v.size)], float)
    keep = np.isfinite(v)
    v, lo, hi = v[keep], lo[keep], hi[keep]
    if v.size == 0:
        return {"value": None, "ci_low": None, "ci_high": None, "n": 0}
    positive = bool((v > 0).all() and (np.isnan(lo) | (lo > 0)).all())
    log = positive if log is None else (log and positive)
    z = _z_of(confidence)
    if log:
        centre_v = np.log(v)
        with np.errstate(divide="ignore", invalid="ignore"):
            se_own = (np.log(hi) - np.log(lo)) / (2 * z)
    else:
        centre_v = v
        se_own = (hi - lo) / (2 * z)
    se_own = np.where(np.isfinite(se_own) & (se_own > 0), se_own, 0.0)
    estimate = float(np.mean(centre_v))
    back: Callable[[float], float] = math.exp if log else float
    r = v.size
    if r < 2:
        return {"value": back(estimate), "ci_low": None, "ci_high": None, "n": int(r)}
    # the spread between the replicas, with R - 1 degrees of freedom; the
    # replicas' own CIs rest on many samples each, so their floor takes z
    half = max(_t_of(confidence, r - 1) * math.sqrt(float(np.var(centre_v, ddof=1)) / r),
               z * math.sqrt(float(np.mean(se_own ** 2)) / r))
    low = estimate - half
    if not log and (v >= 0).all() and not (lo < 0).any():
        low = max(low, 0.0)       # a share or a count of events is never negative
    return {"value": back(estimate), "ci_low": back(low),
            "ci_high": back(estimate + half), "n": int(r)}


def replica_log_ratio_half(a_values: Sequence[Optional[float]], a_lows: Sequence[Optional[float]],
                           a_highs: Sequence[Optional[float]], b_values: Sequence[Optional[float]],
                           b_lows: Sequence[Optional[float]], b_highs: Sequence[Optional[float]],
                           confidence: float = 0.95) -> Optional[float]:
    """Half-width, on the log scale, of the CI of the ratio B/A of two runs
    measured in replicas: the pooled two-sample Student-t interval over the
    replicas' log values, t(Ra + Rb - 2) * s_p * sqrt(1/Ra + 1/Rb), never
    narrower than the replicas' own CIs imply (z * their standard errors).

    Why not the two answers' CIs combined: each rests on R - 1 degrees of
    freedom (t = 12.7 for two replicas) while the spread between replicas is
    one property of the machine, seen Ra + Rb - 2 times: pooling it gives
    t(2) = 4.3 for two replicas a side, and the same 95 % coverage for normal
    replicas.  None when a side has fewer than two positive values."""
    # plain floats, not numpy: a few replicas a side, and `compare` asks
    # once per point of two surveys (thousands), where numpy's per-call
    # overhead was most of the command's time
    z = _z_of(confidence)
    sides = []
    for vals, lows, highs in ((a_values, a_lows, a_highs), (b_values, b_lows, b_highs)):
        logs, own = [], []
        for v, lo, hi in zip(vals, lows, highs):
            if v is None or not _positive_finite(v):
                continue
            logs.append(math.log(v))
            half = ((math.log(hi) - math.log(lo)) / (2 * z)
                    if lo is not None and hi is not None and _positive_finite(lo)
                    and _positive_finite(hi) else 0.0)
            own.append(half if math.isfinite(half) and half > 0 else 0.0)
        if len(logs) < 2:
            return None
        sides.append((logs, own))
    (la, oa), (lb, ob) = sides
    df = len(la) + len(lb) - 2
    ma, mb = sum(la) / len(la), sum(lb) / len(lb)
    pooled = (sum((x - ma) ** 2 for x in la) + sum((x - mb) ** 2 for x in lb)) / df
    spread = _t_of(confidence, df) * math.sqrt(pooled * (1 / len(la) + 1 / len(lb)))
    own_half = z * math.sqrt(sum(x * x for x in oa) / len(oa) / len(la)
                             + sum(x * x for x in ob) / len(ob) / len(lb))
    return max(spread, own_half)


def _positive_finite(x: Any) -> bool:
    return bool(isinstance(x, (int, float, np.floating, np.integer)) and not isinstance(x, bool)
                and math.isfinite(x) and x > 0)


# (confidence, df) -> t: compare_curves asks for the same few once per
# point of two surveys (a few thousand), and each bisection costs ~1 ms
_T_OF: Dict[Tuple[float, int], float] = {}


def _t_of(confidence: float, df: int) -> float:
    """Two-sided Student-t quantile at ``confidence`` with ``df`` degrees of
    freedom (df 1 at 0.95 -> 12.71), by bisection on the t CDF (the
    regularized incomplete beta function, by its continued fraction);
    memoised."""
    key = (confidence, df)
    if key not in _T_OF:
        _T_OF[key] = _t_bisect(confidence, df)
    return _T_OF[key]


def _t_bisect(confidence: float, df: int) -> float:
    target = 0.5 + confidence / 2
    lo, hi = 0.0, 1e3
    for _ in range(100):
        mid = (lo + hi) / 2
        if _t_cdf(mid, df) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _t_cdf(t: float, df: int) -> float:
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2, 0.5, x)
    return 1 - tail if t >= 0 else tail


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) (Numerical Recipes' continued
    fraction, Lentz's method)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _betainc(b, a, 1 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log(1 - x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-12:
            break
    return front * f


_Z_OF: Dict[float, float] = {}


def _z_of(confidence: float) -> float:
    """z of a two-sided normal interval at ``confidence`` (0.95 -> 1.96):
    erf(z / sqrt 2) = confidence, by bisection; memoised."""
    if confidence not in _Z_OF:
        _Z_OF[confidence] = _z_bisect(confidence)
    return _Z_OF[confidence]


def _z_bisect(confidence: float) -> float:
    lo, hi = 0.0, 10.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if math.erf(mid / math.sqrt(2)) < confidence:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


z_of = _z_of       # the same, for other modules


def median_ratio_over_groups(pairs: Sequence[Tuple[np.ndarray, np.ndarray]],
                             confidence: float = 0.95, n_boot: int = 2000,
                             seed: int = 0) -> Tuple[float, float, float]:
    """(ratio, ci_low, ci_high) of two arms measured in several groups (e.g.
    sizes, each with its own buffers): the median over groups of the
    per-group ratios of medians, median(a_g) / median(b_g), with a two-stage
    percentile bootstrap CI -- groups resampled with replacement, then each
    arm's samples within each group -- so that the group-to-group scatter
    of the ratio is in it.  pairs: [(a_values, b_values)], finite, positive
    medians (the caller cleans them)."""
    _check_boot_args(confidence, n_boot)
    rng = np.random.default_rng(seed)
    nb = int(n_boot)
    logs: List[float] = []
    rows: List[np.ndarray] = []
    for a, b in pairs:
        logs.append(math.log(float(np.median(a)) / float(np.median(b))))
        ba = np.median(a[rng.integers(0, a.size, (nb, a.size))], axis=1)
        bb = np.median(b[rng.integers(0, b.size, (nb, b.size))], axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            rows.append(np.log(ba / bb))
    k = len(logs)
    within = np.array(rows)                         # (groups, n_boot)
    pick = rng.integers(0, k, (nb, k))              # stage 1: groups with replacement
    boot = np.exp(np.median(within[pick, np.arange(nb)[:, None]], axis=1))
    boot = boot[np.isfinite(boot)]
    lo, hi = percentile_interval(boot, confidence) if boot.size else (math.nan,) * 2
    return math.exp(float(np.median(logs))), float(lo), float(hi)


def _boot_median_logs(values: ArrayLike, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    a = np.asarray(values, float)
    idx = rng.integers(0, a.size, size=(n_boot, a.size))
    return np.asarray(np.log(np.median(a[idx], axis=1)))


def boot_mean_log_ratio(advised: Sequence[Sequence[float]], current: Sequence[Sequence[float]],
                        n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap distribution of mean over sizes of log(median advised /
    median current).  One process measured every size, so when each variant
    has one value per process at every size, whole processes are resampled
    (keeping their correlation across sizes); otherwise sizes independently."""
    a_len = {len(v) for v in advised}
    c_len = {len(v) for v in current}
    if len(a_len) == 1 and len(c_len) == 1:
        a = np.asarray(advised, float).T          # processes x sizes
        c = np.asarray(current, float).T
        ia = rng.integers(0, a.shape[0], size=(n_boot, a.shape[0]))
        ic = rng.integers(0, c.shape[0], size=(n_boot, c.shape[0]))
        ma = np.median(a[ia], axis=1)             # n_boot x sizes
        mc = np.median(c[ic], axis=1)
        return np.asarray(np.mean(np.log(ma / mc), axis=1))
    logs = np.zeros(n_boot)
    for x, y in zip(advised, current):
        logs += _boot_median_logs(x, n_boot, rng) - _boot_median_logs(y, n_boot, rng)
    return logs / len(advised)


def median_difference(a: ArrayLike, b: ArrayLike, confidence: float = 0.95, n_boot: int = 2000,
                      seed: int = 0) -> Tuple[float, float, float]:
    """(median(a) - median(b), ci_low, ci_high): a percentile bootstrap CI
    with both groups resampled, a first."""
    _check_boot_args(confidence, n_boot)
    x, y = _nonempty(a, "a"), _nonempty(b, "b")
    rng = np.random.default_rng(seed)
    bx = _boot_stats(x, np.median, n_boot, rng)
    by = _boot_stats(y, np.median, n_boot, rng)
    low, high = percentile_interval(bx - by, confidence)
    return float(np.median(x)) - float(np.median(y)), low, high


def per_op_difference(short_ns: ArrayLike, long_ns: ArrayLike, short_len: float, long_len: float,
                      confidence: float = 0.95, n_boot: int = 2000,
                      seed: int = 0) -> Dict[str, float]:
    """Per-operation cost from runs of two lengths (e.g. N and 2N operations).

    ``short_ns``/``long_ns`` are whole-run times (ns) of the short and long
    run lengths ``short_len``/``long_len`` (operations). Each length is
    aggregated first (median), then the medians are subtracted — never per
    sample — so fixed per-run overhead cancels:

        value = (median(long) - median(short)) / (long_len - short_len)   [ns/op]

    The CI bootstraps both groups independently. Returns
    ``{"value", "ci_low", "ci_high", "n_short", "n_long"}``.
    """
    _check_boot_args(confidence, n_boot)
    s = _nonempty(short_ns, "short_ns")
    g = _nonempty(long_ns, "long_ns")
    span = float(long_len) - float(short_len)
    if span == 0.0:
        raise ValueError("long_len must differ from short_len")
    value = (float(np.median(g)) - float(np.median(s))) / span
    rng = np.random.default_rng(seed)
    boot_long = _boot_stats(g, np.median, n_boot, rng)
    boot_short = _boot_stats(s, np.median, n_boot, rng)
    low, high = percentile_interval((boot_long - boot_short) / span, confidence)
    return {"value": value, "ci_low": low, "ci_high": high,
            "n_short": int(s.size), "n_long": int(g.size)}


def ratio_of_medians(a: ArrayLike, b: ArrayLike, confidence: float = 0.95, n_boot: int = 2000,
                     seed: int = 0) -> Dict[str, float]:
    """``median(a) / median(b)`` with a bootstrap CI (both groups resampled
    independently). Dimensionless; 1.0 means no difference.

    Returns ``{"ratio", "ci_low", "ci_high", "n_a", "n_b"}``. Raises
    ValueError when a group is empty or ``median(b)`` is 0.
    """
    _check_boot_args(confidence, n_boot)
    x = _nonempty(a, "a")
    y = _nonempty(b, "b")
    med_b = float(np.median(y))
    if med_b == 0.0:
        raise ValueError("median(b) is 0: ratio undefined")
    ratio = float(np.median(x)) / med_b
    rng = np.random.default_rng(seed)
    boot_a = _boot_stats(x, np.median, n_boot, rng)
    boot_b = _boot_stats(y, np.median, n_boot, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        boot = boot_a / boot_b
    low, high = percentile_interval(boot, confidence)
    return {"ratio": ratio, "ci_low": low, "ci_high": high,
            "n_a": int(x.size), "n_b": int(y.size)}


def reject_outliers_mad(values: ArrayLike, k: float = 5.0) -> np.ndarray:
    """Keep-mask (bool array, same length as ``values``): False for samples
    farther than ``k * MAD * 1.4826`` from the median, and for NaN.

    When the MAD is 0 every non-NaN sample is kept.
    """
    a = np.asarray(values, dtype=float).ravel()
    keep = np.asarray(~np.isnan(a))
    if not keep.any():
        return keep
    med = np.median(a[keep])
    mad = np.median(np.abs(a[keep] - med))
    if mad == 0.0:
        return keep
    return np.asarray(keep & (np.abs(a - med) <= k * MAD_TO_SIGMA * mad))


def bimodal_split(values: ArrayLike, min_separation: float = 0.10, gap_sigmas: float = 4.0,
                  min_share: float = 0.2) -> Optional[Dict[str, float]]:
    """Two clusters in one point's samples, or None.

    On a shared last-level cache (or a host that sometimes lends the guest
    more cache) a point's samples can fall into two groups: the set resident
    vs evicted by a neighbour.  Their median is then a figure that no sample
    had, so such a point is flagged rather than summarised by it.

    The sorted samples are split at every gap leaving at least ``min_share``
    of them (and at least 2) on each side; a split is bimodal when the
    medians of the two sides differ by at least ``min_separation`` (relative
    to the lower median) and the gap is at least ``gap_sigmas`` times the
    larger within-group robust sigma (MAD * 1.4826, floored at 0.5 % of the
    lower median so that identical samples do not make every gap infinite).
    The widest such gap (in sigmas) wins.

    Returns ``{"low", "high", "low_share", "gap_sigmas"}`` (group medians in
    the unit of the values, share of samples in the low group) or None.
    """
    a = np.sort(_clean(values))
    n = a.size
    k_min = max(2, int(math.ceil(min_share * n)))
    if n < 2 * k_min:
        return None
    best = None
    for k in range(k_min, n - k_min + 1):
        lo, hi = a[:k], a[k:]
        m_lo, m_hi = _sorted_median(lo), _sorted_median(hi)
        if m_lo <= 0 or (m_hi - m_lo) / m_lo < min_separation:
            continue
        # the MADs of the sorted sides, without np.median's per-call cost
        # (this loop was a fifth of a survey's analysis)
        sigma = max(_sorted_median(np.sort(np.abs(lo - m_lo))),
                    _sorted_median(np.sort(np.abs(hi - m_hi)))) * MAD_TO_SIGMA
        sigma = max(sigma, 0.005 * m_lo)
        gap = float(hi[0] - lo[-1]) / sigma
        if gap >= gap_sigmas and (best is None or gap > best["gap_sigmas"]):
            best = {"low": m_lo, "high": m_hi, "low_share": k / n, "gap_sigmas": gap}
    return best


def replica_states(values: Sequence[float], ci_lows: Optional[Sequence[Optional[float]]] = None,
                   ci_highs: Optional[Sequence[Optional[float]]] = None,
                   min_separation: float = 0.25,
                   gap_spreads: float = 2.0, gap_sigmas: float = 3.0,
                   confidence: float = 0.95) -> Optional[List[Dict[str, Any]]]:
    """Two host states among a run's replicas, or None.

    A host that moves a guest's vCPUs between cores (or lets a neighbour
    take the shared cache) puts whole replicas in one state or another:
    their values then fall into two groups, and a mean or a t interval over
    them is a figure no replica had.  On the log scale when every value is
    positive, the sorted replica values are split at their widest gap; the
    split is two states when the gap is at least ``min_separation`` of the
    lower group's top (relative), at least ``gap_spreads`` times the wider
    group's own range, and at least ``gap_sigmas`` standard errors of the
    replicas next to it (from their own CIs), so replicas that merely
    scatter are not states.  A group may hold one replica.

    Returns the states lowest first, each ``{"value" (geometric mean of its
    replicas), "share" (of the replicas), "replicas" (their indices),
    "low", "high" (its replicas' range)}``, or None."""
    v = np.asarray([np.nan if x is None else x for x in values], float)
    n = v.size
    lo = np.asarray([np.nan if x is None else x
                     for x in ([None] * n if ci_lows is None else ci_lows)], float)
    hi = np.asarray([np.nan if x is None else x
                     for x in ([None] * n if ci_highs is None else ci_highs)], float)
    idx = np.flatnonzero(np.isfinite(v))
    if idx.size < 2:
        return None
    positive = bool((v[idx] > 0).all())
    if not positive:
        return None                   # a state split is a relative one
    logv = np.log(v[idx])
    z = _z_of(confidence)
    with np.errstate(divide="ignore", invalid="ignore"):
        se = (np.log(hi[idx]) - np.log(lo[idx])) / (2 * z)
    se = np.where(np.isfinite(se) & (se > 0), se, 0.0)
    order = np.argsort(logv)
    sv, sse, sidx = logv[order], se[order], idx[order]
    gaps = np.diff(sv)
    k = int(np.argmax(gaps)) + 1     # the split: sv[:k] | sv[k:]
    gap = float(gaps[k - 1])
    spread = max(float(sv[k - 1] - sv[0]), float(sv[-1] - sv[k]))
    if gap < math.log1p(min_separation) or gap < gap_spreads * spread:
        return None
    if gap < gap_sigmas * math.hypot(float(sse[k - 1]), float(sse[k])):
        return None
    out = []
    for part, ids in ((sv[:k], sidx[:k]), (sv[k:], sidx[k:])):
        out.append({"value": float(np.exp(np.mean(part))), "share": len(part) / idx.size,
                    "replicas": [int(i) for i in sorted(ids)],
                    "low": float(np.exp(part[0])), "high": float(np.exp(part[-1]))})
    return out
