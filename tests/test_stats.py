import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memfx.model import stats
from memfx.model.stats import (
    Level,
    Summary,
    bootstrap_ci,
    cv_of,
    find_levels,
    mad_of,
    per_op_difference,
    ratio_of_medians,
    reject_outliers_mad,
    summarize,
)

KIB, MIB = 1024, 1024 * 1024


# ---------------------------------------------------------------- summarize

def test_summarize_by_hand():
    s = summarize([4, 1, 100, 3, 2])
    assert isinstance(s, Summary)
    assert (s.n, s.min, s.median, s.max, s.mean) == (5, 1, 3, 100, 22)
    assert s.mad == 1          # |x - 3| = 1 2 97 0 1 -> median 1
    assert s.iqr == 2          # q25 = 2, q75 = 4
    assert s.cv == pytest.approx(math.sqrt(7610 / 4) / 22)   # sample std (ddof=1)
    assert s.ci_low <= s.median <= s.ci_high


def test_summarize_as_dict_keys():
    d = summarize([1.0, 2.0, 3.0]).as_dict()
    assert list(d) == ["n", "min", "median", "max", "mean", "mad", "iqr", "cv",
                       "ci_low", "ci_high"]


def test_summarize_drops_nan():
    s = summarize([1.0, float("nan"), 3.0])
    assert s.n == 2 and s.median == 2.0


def test_summarize_single_and_empty():
    s = summarize([7.5])
    assert (s.n, s.ci_low, s.ci_high, s.cv, s.mad) == (1, 7.5, 7.5, 0.0, 0.0)
    with pytest.raises(ValueError):
        summarize([])
    with pytest.raises(ValueError):
        summarize([float("nan")])


def test_cv_and_mad_helpers():
    assert cv_of([2.0, 4.0]) == pytest.approx(math.sqrt(2.0) / 3.0)
    assert cv_of([5.0]) == 0.0
    assert mad_of([1, 2, 3, 4, 100]) == 1.0


# ---------------------------------------------------------------- bootstrap

def test_bootstrap_contains_true_median_and_is_deterministic():
    rng = np.random.default_rng(42)
    x = rng.normal(10.0, 1.0, 2000)
    low, high = bootstrap_ci(x)
    assert low < 10.0 < high
    assert high - low < 0.2
    assert bootstrap_ci(x) == (low, high)
    assert bootstrap_ci(x, seed=1) != (low, high)


def test_bootstrap_other_statistic_and_chunking():
    rng = np.random.default_rng(1)
    x = rng.normal(5.0, 1.0, 5000)   # 2000 x 5000 draws: processed in chunks
    low, high = bootstrap_ci(x, statistic=np.mean, confidence=0.99, n_boot=2000)
    assert low < 5.0 < high


def test_bootstrap_rejects_bad_arguments():
    with pytest.raises(ValueError):
        bootstrap_ci([1, 2, 3], confidence=1.0)
    with pytest.raises(ValueError):
        bootstrap_ci([1, 2, 3], n_boot=0)


# ---------------------------------------------------------------- per-op difference

@pytest.mark.parametrize("n_ops", [100, 7])
def test_per_op_difference_exact(n_ops):
    # 5 ns fixed overhead per run, 100 ns of work per N operations
    r = per_op_difference([100 + 5] * 10, [200 + 5] * 12, n_ops, 2 * n_ops)
    assert r["value"] == 100 / n_ops
    assert r["ci_low"] == r["ci_high"] == 100 / n_ops
    assert (r["n_short"], r["n_long"]) == (10, 12)


def test_per_op_difference_noisy_overhead_cancels():
    rng = np.random.default_rng(3)
    n, per_op, overhead = 1000, 2.5, 400.0
    short = overhead + n * per_op + rng.normal(0, 20, 30)
    long = overhead + 2 * n * per_op + rng.normal(0, 20, 30)
    r = per_op_difference(short, long, n, 2 * n)
    assert r["ci_low"] < per_op < r["ci_high"]
    assert r["value"] == pytest.approx(per_op, rel=0.02)


def test_per_op_difference_needs_different_lengths():
    with pytest.raises(ValueError):
        per_op_difference([1.0], [2.0], 10, 10)


# ---------------------------------------------------------------- ratio of medians

def test_ratio_of_medians_brackets_true_ratio():
    rng = np.random.default_rng(5)
    a = 11.7 * (1 + 0.03 * rng.standard_normal(40))
    b = 10.0 * (1 + 0.03 * rng.standard_normal(40))
    r = ratio_of_medians(a, b)
    assert r["ci_low"] < 1.17 < r["ci_high"]
    assert r["ratio"] == pytest.approx(np.median(a) / np.median(b))
    assert (r["n_a"], r["n_b"]) == (40, 40)
    assert ratio_of_medians(a, b) == r


def test_ratio_of_medians_exact_and_zero():
    r = ratio_of_medians([2.0] * 5, [1.0] * 5)
    assert (r["ratio"], r["ci_low"], r["ci_high"]) == (2.0, 2.0, 2.0)
    with pytest.raises(ValueError):
        ratio_of_medians([1.0], [0.0, 0.0])


# ---------------------------------------------------------------- outliers

def test_reject_outliers_mad_removes_planted_outlier():
    rng = np.random.default_rng(7)
    x = rng.normal(100.0, 1.0, 30)
    x[11] = 1000.0
    keep = reject_outliers_mad(x)
    assert keep.dtype == bool and keep.shape == x.shape
    assert not keep[11]
    assert keep.sum() == 29


def test_reject_outliers_mad_zero_mad_and_nan():
    assert reject_outliers_mad([3.0, 3.0, 3.0, 50.0]).all()   # MAD 0 -> keep all
    keep = reject_outliers_mad([1.0, float("nan"), 1.1, 0.9])
    assert keep.tolist() == [True, False, True, True]


# ---------------------------------------------------------------- find_levels

SIZES = np.round(KIB * np.sqrt(2.0) ** np.arange(41))      # 1 KiB .. 1 GiB, sqrt(2) steps
TRUE_LAT = [1.5, 5.0, 20.0, 90.0]
TRUE_CAP = [48 * KIB, 2 * MIB, 32 * MIB]


def three_steps(sizes):
    s = np.asarray(sizes, dtype=float)
    return np.select([s <= TRUE_CAP[0], s <= TRUE_CAP[1], s <= TRUE_CAP[2]],
                     TRUE_LAT[:3], TRUE_LAT[3])


def check_four_levels(levels):
    assert len(levels) == 4
    for level, lat in zip(levels, TRUE_LAT):
        assert level.latency_ns == pytest.approx(lat, rel=0.10)
    for level, cap in zip(levels, TRUE_CAP):
        assert cap / 1.5 < level.knee_size < cap * 1.5
        assert level.knee_low <= level.knee_size <= level.knee_high
    assert levels[-1].knee_size is None and levels[-1].knee_low is None


def test_find_levels_clean_steps():
    levels = find_levels(SIZES, three_steps(SIZES))
    check_four_levels(levels)
    l1 = levels[0]
    assert (l1.first_size, l1.last_size, l1.n_points) == (1024, 46341, 12)
    assert (l1.knee_low, l1.knee_high) == (46341, 65536)
    assert isinstance(l1, Level)


def test_find_levels_noisy_steps():
    rng = np.random.default_rng(2024)
    lat = three_steps(SIZES) * (1 + 0.05 * rng.standard_normal(SIZES.size))
    check_four_levels(find_levels(SIZES, lat))


def test_find_levels_noisy_steps_many_seeds():
    for seed in range(20):
        rng = np.random.default_rng(seed)
        lat = three_steps(SIZES) * (1 + 0.05 * rng.standard_normal(SIZES.size))
        check_four_levels(find_levels(SIZES, lat))


def test_find_levels_flat():
    assert len(find_levels(SIZES, np.full(SIZES.size, 3.0))) == 1
    rng = np.random.default_rng(9)
    levels = find_levels(SIZES, 3.0 * (1 + 0.05 * rng.standard_normal(SIZES.size)))
    assert len(levels) == 1
    assert levels[0].n_points == SIZES.size and levels[0].knee_size is None


def test_find_levels_gradual_rise_over_three_points():
    lat = np.full(31, 10.0)
    sizes = SIZES[:31]
    lat[14:17] = [10 * 4 ** 0.25, 20.0, 10 * 4 ** 0.75]   # 10 -> 40 ns in 4 sqrt(2) steps
    lat[17:] = 40.0
    levels = find_levels(sizes, lat)
    assert [round(v.latency_ns) for v in levels] == [10, 40]
    assert levels[0].knee_size == pytest.approx(sizes[15], rel=0.01)   # middle of the rise
    assert levels[0].ramp_sizes == tuple(int(s) for s in sizes[14:17])
    assert levels[1].n_points == 31 - 17


def test_find_levels_rise_over_octaves_with_noise():
    # L3 -> DRAM in a VM: 20 ns -> 90 ns over 2.5 octaves, 5 % noise
    x = np.log2(SIZES)
    start = np.log2(8 * MIB)
    t = np.clip((x - start) / 2.5, 0.0, 1.0)
    clean = 20.0 * (90.0 / 20.0) ** t
    middle = 2 ** (start + 1.25)
    for seed in range(10):
        rng = np.random.default_rng(seed)
        levels = find_levels(SIZES, clean * (1 + 0.05 * rng.standard_normal(SIZES.size)))
        assert len(levels) == 2
        assert levels[0].latency_ns == pytest.approx(20.0, rel=0.1)
        assert levels[1].latency_ns == pytest.approx(90.0, rel=0.1)
        assert middle / 1.5 < levels[0].knee_size < middle * 1.5


def test_find_levels_slowly_rising_plateau_is_one_level():
    # an L3 whose latency creeps up (TLB misses) is one level, not stairs
    x = np.log2(SIZES)
    lat = np.where(SIZES <= 32 * KIB, 4.0,
                   np.where(SIZES <= 32 * MIB, 12.0 * 2 ** ((x - 15) * 0.1), 90.0))
    assert len(find_levels(SIZES, lat)) == 3


def test_find_levels_knee_between_48k_and_64k():
    sizes = sorted([2 ** k for k in range(10, 26)] + [3 * 2 ** k for k in range(9, 25)])
    lat = [1.5 if s <= 48 * KIB else 5.0 if s <= 1280 * KIB else 40.0 for s in sizes]
    levels = find_levels(sizes, lat)
    assert len(levels) == 3
    assert 48 * KIB < levels[0].knee_size < 64 * KIB
    assert (levels[0].knee_low, levels[0].knee_high) == (48 * KIB, 64 * KIB)


def test_find_levels_mixture_curve():
    # hit-rate mixture: latency rises smoothly after each capacity
    f = [np.minimum(1.0, c / SIZES) for c in TRUE_CAP]
    lat = (1.5 * f[0] + 5.0 * (f[1] - f[0]) + 20.0 * (f[2] - f[1]) + 90.0 * (1 - f[2]))
    rng = np.random.default_rng(11)
    levels = find_levels(SIZES, lat * (1 + 0.03 * rng.standard_normal(SIZES.size)))
    assert len(levels) == 4
    for level, cap in zip(levels, TRUE_CAP):
        assert cap < level.knee_size < 2 * cap


def test_find_levels_inputs():
    assert find_levels([], []) == []
    assert len(find_levels([1024], [3.0])) == 1
    with pytest.raises(ValueError):
        find_levels([1, 2], [1.0])
    with pytest.raises(ValueError):
        find_levels([0, 2], [1.0, 1.0])
    # repeated sizes are combined, NaN latencies dropped
    levels = find_levels([1024, 1024, 2048, 4096], [2.0, 4.0, float("nan"), 3.0])
    assert len(levels) == 1 and levels[0].n_points == 2


def test_level_as_dict():
    d = find_levels(SIZES, three_steps(SIZES))[0].as_dict()
    assert set(d) == {"latency_ns", "first_size", "last_size", "n_points", "knee_size",
                      "knee_low", "knee_high", "ramp_sizes", "spread", "flat"}
    assert isinstance(d["ramp_sizes"], list)


def test_module_imports_only_numpy_and_stdlib():
    # stats.py and curves.py (its level detection), which it alone may import
    import ast
    for name in ("stats", "curves"):
        tree = ast.parse((Path(stats.__file__).parent / f"{name}.py").read_text())
        roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                 for a in n.names}
        roots |= {n.module.split(".")[0] for n in ast.walk(tree)
                  if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module}
        assert roots <= {"__future__", "math", "dataclasses", "typing", "numpy"}
        relative = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level}
        assert relative <= ({"curves"} if name == "stats" else set())


# Issue 9 (a Zen 4 KVM guest: L1d 32K, L2 1M, L3 32M shared): levels are flat
# plateaus of >= 3 consecutive sizes; a mixture or a ramp is not a level.
QUARTER = np.round(KIB * 2.0 ** (np.arange(73) / 4))       # 1 KiB .. 256 MiB, 4 per octave


def test_find_levels_mixture_is_not_a_level():
    """'level 4: 74 ns' was a region whose points jump between L3 and DRAM."""
    lat = np.select([QUARTER <= 32 * KIB, QUARTER <= 1 * MIB, QUARTER <= 3 * MIB],
                    [1.4, 5.0, 14.0], 120.0)
    mixture = (QUARTER > 3 * MIB) & (QUARTER < 6 * MIB)
    lat[mixture] = [42.0, 64.0, 44.0, 48.0]     # as measured on the guest (3.5 .. 5.9 MiB)
    levels = find_levels(QUARTER, lat)
    assert [round(lv.latency_ns) for lv in levels] == [1, 5, 14, 120]
    assert all(lv.flat for lv in levels)
    mixed = QUARTER[mixture].astype(int).tolist()
    assert set(mixed) <= set(levels[2].ramp_sizes)


def test_find_levels_two_points_are_not_a_level():
    """'level 3: 5.15 ns' was two points at the edge of the L2 plateau."""
    lat = np.full(20, 5.0)
    lat[8:10] = 9.0
    lat[10:] = 20.0
    levels = find_levels(QUARTER[:20], lat)
    assert [round(lv.latency_ns) for lv in levels] == [5, 20]
    assert levels[0].ramp_sizes == tuple(int(s) for s in QUARTER[8:10])


def test_find_levels_short_plateau_between_two_ramps():
    """A shared L3: flat ~14 ns from 1.25 to 2.5 MiB between the L2 ramp and
    the DRAM ramp; it is a level (the round-1 analysis found none)."""
    x = np.log2(QUARTER)
    lat = np.interp(x, np.log2([32 * KIB, 33 * KIB, 400 * KIB, 1.25 * MIB, 2.5 * MIB, 8 * MIB]),
                    [1.4, 5.0, 5.0, 14.0, 14.0, 120.0])
    rng = np.random.default_rng(5)
    levels = find_levels(QUARTER, lat * (1 + 0.02 * rng.standard_normal(QUARTER.size)))
    l3 = [lv for lv in levels if 10 < lv.latency_ns < 20]
    assert len(l3) == 1 and l3[0].flat and l3[0].n_points >= 3
    assert 1 * MIB <= l3[0].first_size and l3[0].last_size <= 2.6 * MIB
    assert 2.5 * MIB < l3[0].knee_size < 8 * MIB


def test_find_levels_spread_and_flat_flag():
    lat = np.where(QUARTER <= 32 * KIB, 1.4, 5.0)
    levels = find_levels(QUARTER[:30], lat[:30])
    assert all(lv.flat and lv.spread < 0.01 for lv in levels)
    # a curve that only ever ramps: its one level is kept, but not flat
    ramp = find_levels(QUARTER[:12], 2.0 ** np.arange(12))
    assert len(ramp) == 1 and not ramp[0].flat


# A random chase measured on the project's Zen 4 guest (quick preset, 4 KiB
# pages; per-point medians of points with >= 3 samples). The round-1 analysis
# found "level 3: 48 ns" on the 3.5-5.4 MiB mixture and no L3 level at all.
GUEST_SIZES = [1024, 1218, 1448, 1722, 2048, 2435, 2896, 3444, 4096, 4871, 5793, 6889, 9742, 13777,
    23170, 24576, 27554, 30048, 32767, 32768, 35733, 38967, 38968, 46341, 49152, 55109, 65536,
    77936, 92682, 110218, 131072, 155872, 185364, 220436, 262144, 311744, 370728, 440872, 480774,
    524288, 571740, 623487, 679918, 741455, 786432, 881744, 1048576, 1246974, 1482910, 1572864,
    1763488, 2097152, 2493948, 3526975, 4194304, 5439339, 5931642, 7053950, 8388608, 9975792,
    11863283, 14107901, 16777216, 19951585, 23726566, 25165824, 28215802, 33554432, 39903169,
    47453133, 50331648, 56431603]
GUEST_NS = [1.4, 1.4, 1.39, 1.4, 1.39, 1.4, 1.4, 1.39, 1.39, 1.4, 1.4, 1.4, 1.41, 1.4, 1.42, 1.41,
    1.43, 1.41, 1.48, 1.63, 4.16, 4.93, 4.96, 4.91, 4.98, 4.97, 4.93, 4.92, 4.97, 4.97, 5.0, 5.02,
    4.97, 5.02, 4.99, 5.2, 5.59, 5.99, 6.98, 6.38, 6.99, 7.24, 6.61, 8.74, 8.93, 9.97, 12.23,
    14.69, 15.46, 16.5, 16.99, 20.52, 18.46, 42.11, 63.73, 48.26, 116.64, 129.79, 129.35, 134.46,
    134.27, 139.82, 147.01, 140.27, 148.24, 167.56, 160.57, 166.41, 155.29, 172.66, 172.4, 178.59]


def test_find_levels_on_a_measured_shared_cache_curve():
    levels = find_levels(GUEST_SIZES, GUEST_NS)
    lats = [lv.latency_ns for lv in levels]
    assert not any(30 < v < 100 for v in lats)            # the mixture is no level
    assert any(13 < v < 20 for v in lats)                 # the (shared) L3 is one
    assert lats[0] == pytest.approx(1.4, rel=0.02) and lats[1] == pytest.approx(5.0, rel=0.02)
    assert all(lv.n_points >= 3 and lv.flat for lv in levels)
    l3 = next(lv for lv in levels if 13 < lv.latency_ns < 20)
    assert 2.4 * MIB < l3.knee_size < 6 * MIB


def test_the_rank_ci_of_a_median_uses_the_binomial_order_statistics():
    from memfx.model.stats import median_ci_ranks
    assert median_ci_ranks(list(range(1, 6))) == (1.0, 5.0)          # n=5: its range
    assert median_ci_ranks(list(range(1, 11))) == (2.0, 9.0)         # n=10: 2nd and 9th
    assert median_ci_ranks([3.0]) == (3.0, 3.0)
    # coverage of the true median over many normal samples of 9: >= 95 %
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(2000):
        lo, hi = median_ci_ranks(np.sort(rng.normal(size=9)))
        hits += lo <= 0.0 <= hi
    assert hits / 2000 >= 0.95


def test_summarize_gives_the_same_figures_by_every_ci_method():
    from memfx.model.stats import summarize
    v = [5.0, 1.0, 4.0, 2.0, 3.0, 9.0]
    a, b, c = (summarize(v, ci=m) for m in ("bootstrap", "ranks", None))
    for s in (a, b, c):
        assert (s.median, s.min, s.max, s.mad) == (3.5, 1.0, 9.0, 1.5)
    assert (b.ci_low, b.ci_high) == (1.0, 9.0) and math.isnan(c.ci_low)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(min_value=-1e9, max_value=1e9, allow_nan=False), min_size=1,
                max_size=40),
       st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0]))
def test_the_sorted_quantile_is_numpys_linear_quantile_exactly(values, q):
    s = np.sort(np.asarray(values, float))
    assert stats._sorted_quantile(s, q) == float(np.quantile(s, q))
