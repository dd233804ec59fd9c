"""Copy's analysis: pure functions on curves ({size: (median,
ci_low, ci_high)}) -- clear wins, crossovers, the best strategy per size
range, the small-size step -- and from a run's point dicts to curves, ranges
and crossovers.  The copy answers and `memfx advise` (through the documents)
rest on these, so there is one analysis (the answers themselves, built on
them, are in the protocol, __init__.py, next to the questions they answer).
The protocol re-exports every name."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...model import stats
from ...model.details import detail
from ...model.findings import DETECTED, NOT_DETECTED
from ...model.units import format_size
from .kernels import STRATEGIES

# Tie-break among strategies that are equally fast: the least code at the
# call site and the fewest requirements first (a string instruction, a
# library call, a string instruction plus tail, then loops of growing width;
# non-temporal stores last, since they also evict the destination from the
# caches).
SIMPLICITY = {
    "copy": ("rep_movsb", "libc", "rep_movsq", "gpr_unrolled", "sse", "avx2", "avx512", "nt"),
    "set": ("rep_stosb", "libc", "rep_stosq", "gpr_unrolled", "sse", "avx2", "avx512", "nt"),
}
# Crossovers among these (one loop design at three widths) are not reported:
# they answer no question of the seed, and the best_* ranges show them.
VECTOR_LOOPS = ("sse", "avx2", "avx512")
# A run of fewer significant points than this on one side is noise, not a crossover.
MIN_RUN = 2
# One strategy clearly beats another at a size when their CIs are disjoint and
# their medians differ by more than this; otherwise they tie.  Wider than the
# generic effect_min threshold: strategies that run the very same instructions
# (the vector loops below 16 bytes) differ by several % from run to run on a
# shared or virtualised machine, and a few % of a few ns is not worth a
# different code path anyway.
CLEAR_WIN = 0.10
# The small-size step: a jump of at least this relative size between two
# consecutive measured sizes (the same default as stats.find_levels).
STEP_MIN_JUMP = 0.25
STEP_WINDOW = 3


# ---------------------------------------------------------------------------
# pure analysis on curves: {size: (median, ci_low, ci_high)}


@dataclass
class Crossover:
    size: int                 # interpolated crossing (bytes)
    low: int                  # last measured size where faster_below wins
    high: int                 # first measured size where faster_above wins
    faster_below: str
    faster_above: str
    ratio_low: float          # slower / faster median at `low`
    ratio_high: float         # slower / faster median at `high`


def _sign(pa, pb, effect_min):
    """+1 when a is clearly faster than b at one size, -1 when b is, 0 for a tie:
    CIs disjoint and medians apart by more than effect_min."""
    ma, la, ha = pa
    mb, lb, hb = pb
    if ma is None or mb is None or ma <= 0 or mb <= 0:
        return 0
    if ha < lb and mb > ma * (1 + effect_min):
        return 1
    if hb < la and ma > mb * (1 + effect_min):
        return -1
    return 0


def _runs(signs):
    """[(sign, first index, last index)] of consecutive equal non-zero signs;
    zeros (ties) are skipped and do not break a run."""
    runs = []
    for i, s in enumerate(signs):
        if s == 0:
            continue
        if runs and runs[-1][0] == s:
            runs[-1][2] = i
            runs[-1][3] += 1
        else:
            runs.append([s, i, i, 1])
    return runs


def _clear_runs(curve_a, curve_b, effect_min=None, min_run=MIN_RUN):
    """(sizes measured for both, runs [sign, first index, last index, count])
    of clear wins (+1: a faster), runs shorter than min_run dropped as noise."""
    e = CLEAR_WIN if effect_min is None else effect_min
    sizes = sorted(set(curve_a) & set(curve_b))
    signs = [_sign(curve_a[s], curve_b[s], e) for s in sizes]
    runs = _runs(signs)
    while True:
        short = [r for r in runs if r[3] < min_run]
        if not short:
            break
        weakest = min(short, key=lambda r: r[3])
        for i in range(weakest[1], weakest[2] + 1):
            signs[i] = 0
        runs = _runs(signs)
    return sizes, runs


def clear_winner(pa, pb, effect_min=None):
    """"a", "b" or None (a tie) at one size: the rule of find_crossovers."""
    sign = _sign(pa, pb, CLEAR_WIN if effect_min is None else effect_min)
    return "a" if sign > 0 else ("b" if sign < 0 else None)


def clear_wins(curve_a, curve_b, effect_min=None, min_run=MIN_RUN):
    """The size runs where one curve clearly beats the other (the rule of
    find_crossovers): [{"faster": "a" or "b", "min_size", "max_size", "sizes"}]."""
    sizes, runs = _clear_runs(curve_a, curve_b, effect_min, min_run)
    return [{"faster": "a" if r[0] > 0 else "b", "min_size": sizes[r[1]],
             "max_size": sizes[r[2]], "sizes": r[3]} for r in runs]


def find_crossovers(curve_a, curve_b, a, b, effect_min=None, min_run=MIN_RUN):
    """Sizes where strategy a and b swap places.

    Only sizes measured for both count.  At each size the faster one must be
    clearly faster (disjoint CIs and more than effect_min (default
    CLEAR_WIN) apart), otherwise
    the size is a tie.  Runs of fewer than `min_run` clear wins are noise and
    dropped; each change of the winner between the remaining runs is a
    crossover, bracketed by the last clear win before it and the first after
    it; the crossing itself is interpolated where log(median_b/median_a)
    changes sign, in log2(size)."""
    sizes, runs = _clear_runs(curve_a, curve_b, effect_min, min_run)
    if len(sizes) < 2:
        return []
    out = []
    for prev, nxt in zip(runs[:-1], runs[1:]):
        lo_i, hi_i = prev[2], nxt[1]
        lr = [math.log(curve_b[s][0] / curve_a[s][0]) for s in sizes[lo_i:hi_i + 1]]
        xs = [math.log2(s) for s in sizes[lo_i:hi_i + 1]]
        cross = xs[-1]
        for j in range(len(lr) - 1):
            if (lr[j] > 0) != (lr[j + 1] > 0) or lr[j + 1] == 0:
                t = lr[j] / (lr[j] - lr[j + 1]) if lr[j] != lr[j + 1] else 0.5
                cross = xs[j] + min(1.0, max(0.0, t)) * (xs[j + 1] - xs[j])
                break
        below, above = (a, b) if prev[0] > 0 else (b, a)
        lo_s, hi_s = sizes[lo_i], sizes[hi_i]

        def ratio(s):
            ma, mb = curve_a[s][0], curve_b[s][0]
            return max(ma, mb) / min(ma, mb)
        out.append(Crossover(size=int(round(2 ** cross)), low=lo_s, high=hi_s,
                             faster_below=below, faster_above=above,
                             ratio_low=ratio(lo_s), ratio_high=ratio(hi_s)))
    return out


def comparable_sizes(curves):
    """Sizes measured for every strategy whose measured range covers them: a
    strategy planned only above some size (nt) does not veto the smaller
    sizes, a size refined for two strategies only is left out, and so is a
    size only one strategy reached (it compares nothing)."""
    spans = {k: (min(c), max(c)) for k, c in curves.items() if c}
    out = []
    for s in sorted(set().union(*(set(c) for c in curves.values()))):
        covering = [k for k, (lo, hi) in spans.items() if lo <= s <= hi]
        if covering and (len(covering) > 1 or len(spans) == 1) \
                and all(s in curves[k] for k in covering):
            out.append(s)
    return out


def acceptable(curves, size, effect_min):
    """Strategies tied with the fastest one at `size`: CI overlapping the
    fastest one's CI, or median within effect_min of it."""
    here = {k: c[size] for k, c in curves.items() if size in c and c[size][0]}
    if not here:
        return set()
    best = min(here, key=lambda k: here[k][0])
    mb, lb, hb = here[best]
    return {k for k, (m, lo, hi) in here.items() if lo <= hb or m <= mb * (1 + effect_min)}


def ties_by_size(curves, effect_min=None):
    """[[size, [the strategies tied with the fastest there]], ...] over the
    sizes best_ranges reads: a range names one strategy, and two runs whose
    ranges differ may only have picked different members of a tie (compare
    tells that from a reversal with these)."""
    e = CLEAR_WIN if effect_min is None else effect_min
    return [[s, sorted(acceptable(curves, s, e))] for s in comparable_sizes(curves)]


def best_ranges(curves, simplicity, effect_min=None):
    """The best strategy per size range: [{strategy, min_size, max_size}].

    `curves`: {strategy: {size: (median, ci_low, ci_high)}}; only sizes
    measured for every strategy whose curve spans them count (see
    comparable_sizes); effect_min defaults to CLEAR_WIN.  A range continues
    while some strategy is acceptable (tied with the fastest) at every size in it, so
    the answer uses as few ranges as the measurements allow (one isolated
    size where the range's strategy is within twice the tolerance does not
    break it); within a range the simplest acceptable strategy (first in
    `simplicity`) is chosen."""
    e = CLEAR_WIN if effect_min is None else effect_min
    if not curves:
        return []
    common = comparable_sizes(curves)
    rank = {s: i for i, s in enumerate(simplicity)}

    def simplest(cands):
        return min(cands, key=lambda k: (rank.get(k, len(rank)), k))
    ranges = []
    current, first, last = None, None, None
    accs = [acceptable(curves, s, e) for s in common]
    for i, (size, acc) in enumerate(zip(common, accs)):
        if not acc:
            continue
        if current is not None and current & acc:
            current &= acc
            last = size
            continue
        # One isolated size does not end a range: when the range's strategies
        # are acceptable again at the next size and within twice the tie
        # tolerance here, this size is an outlier (one noisy point).
        nxt = accs[i + 1] if i + 1 < len(accs) else set()
        if current is not None and current & nxt:
            lenient = acceptable(curves, size, 2 * e)
            if current & lenient:
                current &= lenient
                last = size
                continue
        if current is not None:
            ranges.append({"strategy": simplest(current), "min_size": first, "max_size": last})
        current, first, last = set(acc), size, size
    if current is not None:
        ranges.append({"strategy": simplest(current), "min_size": first, "max_size": last})
    # neighbours that ended up with the same strategy merge
    merged = []
    for r in ranges:
        if merged and merged[-1]["strategy"] == r["strategy"]:
            merged[-1]["max_size"] = r["max_size"]
        else:
            merged.append(dict(r))
    return merged


@dataclass
class Step:
    low: int            # last size on the lower level
    high: int           # first size on the higher level
    before_ns: float    # median of every sample up to `low`
    after_ns: float     # median of every sample from `high` on
    ratio: float        # after / before (medians)
    ci_low: float       # bootstrap CI of the ratio
    ci_high: float
    local_ratio: float  # the same ratio over `window` sizes on each side


def find_step(values, max_size, min_jump=STEP_MIN_JUMP, window=STEP_WINDOW, seed=0):
    """A step up in a small-size curve (rep movsb's jump), or None.

    `values`: {size: per-sample ns}; only sizes <= max_size count.  The
    candidate split between consecutive measured sizes lo < hi is the best
    single change point of log(median ns) over size (least squares: the
    split that minimises the squared error of a two-level fit).  It is a
    step when
      - the level changes: median of all samples above / median of all
        samples up to it >= 1 + min_jump, and
      - it is local: the same ratio over the `window` sizes on each side is
        >= 1 + min_jump (a steady ramp is not a step).
    The ratio's CI is a bootstrap of the two pooled sample sets.  Pooling
    several sizes on each side makes the test robust to one noisy point."""
    sizes = sorted(s for s in values if s <= max_size and len(values[s]))
    if len(sizes) < 2:
        return None
    y = np.log([max(float(np.median(values[s])), 1e-12) for s in sizes])

    def pooled(ss):
        return np.concatenate([np.asarray(values[s], float) for s in ss])

    def sse(a):
        return float(((a - a.mean()) ** 2).sum()) if a.size else 0.0
    # only upward splits are steps
    splits = [i for i in range(len(sizes) - 1) if y[i + 1:].mean() > y[:i + 1].mean()]
    if not splits:
        return None
    i = min(splits, key=lambda k: sse(y[:k + 1]) + sse(y[k + 1:]))
    local = float(np.median(pooled(sizes[i + 1:i + 1 + window])) /
                  np.median(pooled(sizes[max(0, i - window + 1):i + 1])))
    before, after = pooled(sizes[:i + 1]), pooled(sizes[i + 1:])
    level = float(np.median(after) / np.median(before))
    if local < 1 + min_jump or level < 1 + min_jump:
        return None
    r = stats.ratio_of_medians(after, before, seed=seed)
    return Step(low=sizes[i], high=sizes[i + 1], before_ns=float(np.median(before)),
                after_ns=float(np.median(after)), ratio=r["ratio"], ci_low=r["ci_low"],
                ci_high=r["ci_high"], local_ratio=local)


# ---------------------------------------------------------------------------
# from points to curves, ranges and crossovers: pure functions of the point
# dicts of a run (RunData.points or a result document's points); the copy
# answers and `memfx advise` both read these, so there is one analysis.

METRIC = "ns_per_call"
# The loops whose lower envelope rep movsb/stosb is compared with.
LOOPS = ("gpr_unrolled", "sse", "avx2", "avx512")
# What code compiled for baseline x86-64 (no -march) can use: string
# instructions, GPR and SSE2 loops, a library call, and SSE2 non-temporal
# stores; the AVX loops need a target the caller may not have.
BASELINE = ("rep_movsb", "rep_stosb", "rep_movsq", "rep_stosq", "gpr_unrolled", "sse", "libc",
            "nt")
# The first timing mode measured answers a question; the others are details.
MODE_ORDER = ("throughput", "chained", "latency")


def _stat(p):
    """(median, ci_low, ci_high) of a point; a missing CI bound is the median
    (no interval from fewer than min_ci_samples), and the CI always holds it."""
    med = float(p["median"])
    lo, hi = p.get("ci_low"), p.get("ci_high")
    lo = med if lo is None or not math.isfinite(lo) else float(lo)
    hi = med if hi is None or not math.isfinite(hi) else float(hi)
    return (med, min(lo, med), max(hi, med))


def _ns_points(points, op, mode):
    for p in points:
        prm = p.get("params") or {}
        if prm.get("op") != op or prm.get("mode") != mode:
            continue
        if p.get("metric", METRIC) != METRIC:
            continue
        size, med = prm.get("size_bytes"), p.get("median")
        # a non-positive time is not a measurement (a difference swamped by noise)
        if med is None or not isinstance(size, int) or size <= 0 \
                or not math.isfinite(float(med)) or float(med) <= 0:
            continue
        if p.get("ci_low") is None:      # fewer than min_ci_samples: no CI to compare
            continue
        yield p


def point_curves(points, op, mode):
    """{strategy: {size: (median, ci_low, ci_high)}} of one op and timing mode.
    Should a (strategy, size) appear twice (extra swept parameters), the
    fastest median stands for it."""
    out = {}
    for p in _ns_points(points, op, mode):
        st, size = _stat(p), p["params"]["size_bytes"]
        cur = out.setdefault(p["arm"], {}).get(size)
        if cur is None or st[0] < cur[0]:
            out[p["arm"]][size] = st
    return out


def point_index(points, op, mode):
    """{(strategy, size): point} of one op and timing mode."""
    return {(p["arm"], p["params"]["size_bytes"]): p for p in _ns_points(points, op, mode)}


def point_values(points, op, mode, arm):
    """{size: per-sample values} of one strategy (points that kept them)."""
    return {p["params"]["size_bytes"]: p["values"] for p in _ns_points(points, op, mode)
            if p["arm"] == arm and p.get("values")}


def modes_of(points, op):
    """Timing modes measured for `op`, the one that answers first."""
    found = {(p.get("params") or {}).get("mode") for p in points
             if (p.get("params") or {}).get("op") == op}
    found.discard(None)
    return [m for m in MODE_ORDER if m in found] + sorted(found - set(MODE_ORDER))


def strategy_ranges(points, op, mode, strategies=None):
    """The fastest strategy per size range of one op and mode (best_ranges on
    the points' curves); `strategies` restricts the candidates (e.g. BASELINE)."""
    curves = point_curves(points, op, mode)
    if strategies is not None:
        curves = {k: c for k, c in curves.items() if k in strategies}
    return best_ranges(curves, SIMPLICITY[op])


def envelope(curves, arms):
    """The lower envelope of `arms`: ({size: (median, lo, hi)}, {size: arm}),
    at the sizes every arm whose span covers them was measured."""
    sub = {k: c for k, c in curves.items() if k in arms and c}
    env, who = {}, {}
    if not sub:
        return env, who
    for s in comparable_sizes(sub):
        here = {k: c[s] for k, c in sub.items() if s in c}
        k = min(here, key=lambda a: here[a][0])
        env[s], who[s] = here[k], k
    return env, who


def crossing_dict(c):
    return {"size": c.size, "low": c.low, "high": c.high, "faster_below": c.faster_below,
            "faster_above": c.faster_above, "ratio_low": c.ratio_low,
            "ratio_high": c.ratio_high}


def pair_crossovers(curves, op):
    """Every pair of strategies (not two vector loops) that changes places:
    [{a, b, crossings: [...]}], one entry per pair however often it crosses;
    for rep movsb/stosb vs the GPR loop (the seed's question) also when it
    does not cross, with the winner."""
    out = []
    order = [a for a in STRATEGIES[op] if a in curves]
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            if a in VECTOR_LOOPS and b in VECTOR_LOOPS:
                continue
            found = find_crossovers(curves[a], curves[b], a, b)
            entry = {"a": a, "b": b, "crossings": [crossing_dict(c) for c in found]}
            if found:
                out.append(entry)
            elif b == "gpr_unrolled" and a == STRATEGIES[op][0]:
                common = sorted(set(curves[a]) & set(curves[b]))
                wins = sum(curves[a][s][0] < curves[b][s][0] for s in common)
                entry["winner"] = a if wins * 2 > len(common) else b
                entry["sizes"] = len(common)
                out.append(entry)
    return out


def _pair_owner(op, a, b):
    """Which question a pairwise crossover belongs to."""
    if "nt" in (a, b):
        return "nt"
    if "libc" in (a, b):
        return "libc"
    if STRATEGIES[op][0] in (a, b):
        return "rep"
    return "best"


def _pair_detail(op, mode, pair):
    cs = pair["crossings"]
    first = cs[0] if cs else None
    if cs:
        text = "; ".join(f"{c['faster_below']} faster below ~{format_size(c['size'])}, "
                         f"{c['faster_above']} above ({format_size(c['low'])}–"
                         f"{format_size(c['high'])})" for c in cs)
    else:
        text = f"no crossover: {pair['winner']} faster or tied at every size measured"
    return detail(f"{pair['a']} vs {pair['b']} ({op}, {mode})", kind="crossover",
                  op=op, mode=mode, a=pair["a"], b=pair["b"],
                  value=float(first["size"]) if first else None, unit="bytes",
                  ci_low=float(first["low"]) if first else None,
                  ci_high=float(first["high"]) if first else None,
                  verdict=DETECTED if cs else NOT_DETECTED, text=text,
                  crossings=cs, **({"winner": pair["winner"]} if "winner" in pair else {}))


def _ranges_text(ranges):
    """'avx2 16B–30B; rep_movsb at 32MB only' (a range of one size says so)."""
    return "; ".join(f"{r['strategy']} at {format_size(r['min_size'])} only"
                     if r["min_size"] == r["max_size"] else
                     f"{r['strategy']} {format_size(r['min_size'])}–{format_size(r['max_size'])}"
                     for r in ranges)
