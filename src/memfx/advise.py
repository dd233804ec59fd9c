"""`memfx advise`: GCC string-op strategies and glibc tunables from stored
copy results, each checked by measuring it (shared/DESIGN.md, seed 002).

The seed's kernel thread chose the size below which plain stores beat
`rep movsq/stosq` "semi-arbitrarily ... Someone should revisit this from time
to time".  This module revisits it for the machine at hand:

1. From the newest complete `copy` run it reads the copy analysis's answers:
   the best strategy per size range (copy.best_strategy and
   copy.best_set_strategy, computed once, in experiments/copy.py, from the
   points; never a second way here).
2. GCC: it maps the ranges over the strategies GCC can emit to GCC's
   string-op algorithms, merges them to at most four only when there are
   more, and writes `-mmemcpy-strategy=` /
   `-mmemset-strategy=` strings.  Where gcc is installed it compiles a small
   test twice (with and without the strings), runs both in child processes,
   interleaved, and measures the gain per size.
3. glibc: it proposes `GLIBC_TUNABLES` thresholds inside the brackets of
   copy's crossovers (copy.find_crossovers) of the two paths, checks the value glibc really uses (`ld.so
   --list-diagnostics`, which shows clamping) and measures libc
   memcpy/memset in child processes with the current and the proposed
   tunables (tunables are read at process start).
4. Nothing that measured slower (or not measurably faster) is advised: the
   advice is then "keep the default", with the measurement that says so.

The pure parts (strategy strings, ranges, thresholds, the keep-or-advise
decision) are functions of their arguments and are tested on synthetic
curves; the measuring parts run only in child processes.
"""
from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from . import findings as fnd
from . import stats
from .errors import MemfxError
from .units import signed_percent as _pct
from .experiments import copy as copy_analysis

SCHEMA_VERSION = 1
ADVICE_KIND = "memfx-advice"

# ---- GCC -m{memcpy,memset}-strategy= --------------------------------------
#
# Syntax and rules, from GCC's i386 options documentation ("-mmemcpy-strategy=
# strategy ... a comma-separated list of alg:max_size:dest_align triplets")
# and its parser (gcc/config/i386/i386-options.cc,
# ix86_parse_stringop_strategy_string): each range is alg:max_size:dest_align;
# alg is one of the names below (gcc/config/i386/stringop.def); max_size is a C
# int read with %d and is inclusive (a copy of n bytes uses the first range
# whose max_size >= n; -1 means no limit); sizes must increase; the last
# max_size must be -1; at most MAX_STRINGOP_ALGS = 4 ranges (i386.h);
# dest_align is "align" (align the destination first) or "noalign".
GCC_ALGORITHMS = ("libcall", "rep_byte", "rep_4byte", "rep_8byte", "byte_loop", "loop",
                  "unrolled_loop", "vector_loop")
MAX_RANGES = 4
GCC_INT_MAX = 2**31 - 1
# No alignment prologue: memfx's strategies are measured without one, and
# the prologue is part of what the seed's thread objected to in GCC's "REP
# MOVSQ with manual alignment".
DEST_ALIGN = "noalign"

# memfx copy strategy -> the GCC algorithm that emits the same kind of code.
# nt maps to libcall: glibc itself switches to non-temporal stores above its
# threshold, so a size range where NT wins is one to hand to the library.
STRATEGY_ALG = {
    "rep_movsb": "rep_byte", "rep_stosb": "rep_byte",
    "rep_movsq": "rep_8byte", "rep_stosq": "rep_8byte",
    "gpr_unrolled": "unrolled_loop",
    "sse": "vector_loop", "avx2": "vector_loop", "avx512": "vector_loop",
    "libc": "libcall", "nt": "libcall",
}
# The vector loop GCC emits when compiling for baseline x86-64 (no -march)
# uses SSE2 registers only, so AVX2/AVX-512 curves must not argue for it.
BASELINE_VECTOR = ("sse",)

OPS = {"copy": "memcpy", "set": "memset"}
MODE_PREFERENCE = ("throughput", "chained", "latency")
METRIC = "ns_per_call"

# A strategy missing at a size costs this factor when a merge would need it.
_MISSING_PENALTY = math.log(1e3)


class StrategyError(ValueError):
    """A -mmemcpy-strategy= / -mmemset-strategy= string GCC would reject."""


class NoCopyResults(MemfxError):
    """advise needs a complete copy run."""


def validate_strategy(s):
    """Parse a GCC strategy string; raise StrategyError if GCC would reject it
    (or if it has unreachable ranges).  Returns [(alg, max_size, dest_align)]."""
    if not isinstance(s, str) or not s:
        raise StrategyError("empty strategy string")
    if s != s.strip() or any(c.isspace() for c in s):
        raise StrategyError(f"whitespace in strategy string {s!r}")
    parts = s.split(",")
    if len(parts) > MAX_RANGES:
        raise StrategyError(f"{len(parts)} ranges in {s!r}; GCC accepts at most {MAX_RANGES}")
    out = []
    for part in parts:
        fields = part.split(":")
        if len(fields) != 3:
            raise StrategyError(f"range {part!r} is not alg:max_size:dest_align")
        alg, max_text, align = fields
        if alg not in GCC_ALGORITHMS:
            raise StrategyError(f"unknown algorithm {alg!r}; known: {', '.join(GCC_ALGORITHMS)}")
        if not re.fullmatch(r"-1|[1-9][0-9]*", max_text):
            raise StrategyError(f"max_size {max_text!r} in {part!r} is not -1 or a positive integer")
        max_size = int(max_text)
        if max_size > GCC_INT_MAX:
            raise StrategyError(f"max_size {max_size} does not fit GCC's int")
        if align not in ("align", "noalign"):
            raise StrategyError(f"dest_align {align!r} in {part!r} is not align or noalign")
        if out:
            prev = out[-1][1]
            if prev == -1:
                raise StrategyError(f"range {part!r} follows a -1 range and is unreachable")
            if max_size != -1 and max_size <= prev:
                raise StrategyError(f"max_size {max_size} does not increase (previous {prev})")
        out.append((alg, max_size, align))
    if out[-1][1] != -1:
        raise StrategyError(f"the last max_size must be -1 in {s!r}")
    return out


def strategy_string(ranges):
    """GCC strategy string from ranges [(alg_or_strategy, max_size[, dest_align])]
    or dicts with alg/strategy, max_size, dest_align.  The last range's
    max_size is written as -1 whatever it was.  Validated before it is returned."""
    if not ranges:
        raise StrategyError("no ranges")
    items = []
    for i, r in enumerate(ranges):
        if isinstance(r, dict):
            alg = r.get("alg") or r.get("strategy")
            max_size, align = r.get("max_size"), r.get("dest_align", DEST_ALIGN)
        else:
            alg, max_size = r[0], r[1]
            align = r[2] if len(r) > 2 else DEST_ALIGN
        alg = STRATEGY_ALG.get(alg, alg)
        if i == len(ranges) - 1:
            max_size = -1
        items.append(f"{alg}:{int(max_size)}:{align}")
    s = ",".join(items)
    validate_strategy(s)
    return s


# ---- curves from a copy result document ------------------------------------

def modes_of(points, op):
    """Timing modes of `op` in the copy points, the preferred one first."""
    return copy_analysis.modes_of([p for p in points if p.get("metric") == METRIC], op)


def point_curves(points, op, mode):
    """{strategy: {size: (median, ci_low, ci_high)}}: the copy analysis's curves."""
    return copy_analysis.point_curves(points, op, mode)


def _fastest(candidates):
    """Name of the smallest median in {name: (median, lo, hi, ...)}."""
    return min(candidates, key=lambda k: candidates[k][0])


def complete_sizes(table):
    """Sizes of {size: {name: ...}} measured for every regular competitor.
    A sweep may refine around a crossover with only the two strategies
    concerned; at such a size the others are missing, not slower, so it
    cannot say which one is fastest.  Regular = present at half the sizes or more."""
    count = {}
    for row in table.values():
        for name in row:
            count[name] = count.get(name, 0) + 1
    regular = {n for n, c in count.items() if c * 2 >= len(table)}
    return [s for s in sorted(table) if regular <= set(table[s])]


def shown_ranges(ranges, curves):
    """Copy's best-strategy ranges (computed by the copy analysis, never
    here) with what the advice shows beside them: the range's median ns at
    its first and last size, and the strategies tied with it at every
    compared size of the range (copy's tie rule)."""
    out = []
    sizes = copy_analysis.comparable_sizes(curves) if curves else []
    for r in ranges:
        k = r["strategy"]
        inside = [z for z in sizes if r["min_size"] <= z <= r["max_size"]]
        tied = None
        for z in inside:
            acc = copy_analysis.acceptable(curves, z, copy_analysis.CLEAR_WIN) - {k}
            tied = acc if tied is None else tied & acc
        c = curves.get(k) or {}
        out.append(dict(r, median_ns_first=(c.get(r["min_size"]) or (None,))[0],
                        median_ns_last=(c.get(r["max_size"]) or (None,))[0],
                        tied=sorted(tied or ())))
    return out


# ---- GCC ranges --------------------------------------------------------------

def alg_table(curves, vector_strategies=BASELINE_VECTOR):
    """{size: {alg: (median, lo, hi, strategy)}}: for each GCC algorithm the
    fastest memfx strategy that GCC's code for it resembles."""
    table = {}
    for strategy, curve in curves.items():
        alg = STRATEGY_ALG.get(strategy)
        if alg is None or (alg == "vector_loop" and strategy not in vector_strategies):
            continue
        for size, st in curve.items():
            if size > GCC_INT_MAX:
                continue          # max_size is a C int; the last range (-1) covers these
            cur = table.setdefault(size, {}).get(alg)
            if cur is None or st[0] < cur[0]:
                table[size][alg] = (*st, strategy)
    return {s: t for s, t in sorted(table.items()) if t}


def _cost(table, size, alg):
    st = table[size].get(alg)
    return None if st is None else st[0]


def _loss(table, sizes, alg):
    """Sum over sizes of log(cost of alg / cost of the best alg): 0 when alg is
    best everywhere; a missing alg costs _MISSING_PENALTY."""
    total = 0.0
    for s in sizes:
        best = min(v[0] for v in table[s].values())
        c = _cost(table, s, alg)
        total += _MISSING_PENALTY if c is None else math.log(c / best)
    return total


def _collapse(ranges):
    out = []
    for r in ranges:
        if out and out[-1]["alg"] == r["alg"]:
            out[-1]["sizes"] = out[-1]["sizes"] + r["sizes"]
        else:
            out.append({"alg": r["alg"], "sizes": list(r["sizes"])})
    return out


def merge_ranges(ranges, table, max_ranges=MAX_RANGES):
    """Merge [{alg, sizes}] down to max_ranges: repeatedly hand the range whose
    loss of gain is smallest (sum of log cost ratios over its sizes) to the
    neighbour's algorithm."""
    ranges = _collapse(ranges)
    original = {tuple(r["sizes"]) for r in ranges}
    while len(ranges) > max_ranges:
        best = None
        for i, r in enumerate(ranges):
            for j in (i - 1, i + 1):
                if 0 <= j < len(ranges):
                    delta = _loss(table, r["sizes"], ranges[j]["alg"]) - _loss(table, r["sizes"], r["alg"])
                    if best is None or delta < best[0]:
                        best = (delta, i, j)
        _, i, j = best
        ranges[i] = {"alg": ranges[j]["alg"], "sizes": ranges[i]["sizes"]}
        ranges = _collapse(ranges)
    # Merging is local: a range grown from alternating neighbours may end up
    # with the algorithm that is not the best over all of it.  Refit each
    # merged range; a range left as it came keeps its algorithm (chosen by
    # the copy analysis, ties to the simplest).
    algs = sorted({a for row in table.values() for a in row})
    for r in ranges:
        if tuple(r["sizes"]) not in original:
            r["alg"] = min(algs, key=lambda a: (_loss(table, r["sizes"], a), a != r["alg"]))
    return _collapse(ranges)


def _geo_ratio(table, sizes, alg_a, alg_b):
    """Geometric mean over sizes of cost(alg_b) / cost(alg_a) where both exist."""
    logs = [math.log(_cost(table, s, alg_b) / _cost(table, s, alg_a)) for s in sizes
            if _cost(table, s, alg_a) and _cost(table, s, alg_b)]
    return math.exp(sum(logs) / len(logs)) if logs else None


def gcc_usable(curves, vector_strategies=BASELINE_VECTOR):
    """The curves of the strategies GCC's algorithms stand for (no AVX loops
    unless allowed: baseline GCC code has SSE2 registers only)."""
    return {k: c for k, c in curves.items() if k in STRATEGY_ALG
            and (STRATEGY_ALG[k] != "vector_loop" or k in vector_strategies)}


def _op_of(curves):
    return "set" if any(k in copy_analysis.STRATEGIES["set"][:2] for k in curves) else "copy"


def gcc_ranges(curves, ranges=None, vector_strategies=BASELINE_VECTOR, max_ranges=MAX_RANGES,
               op=None):
    """The GCC strategy for one op from its curves: {"string", "ranges": [...]}
    or None when there is nothing to compare.

    The ranges are the copy analysis's best-strategy ranges over the
    strategies GCC can emit (`ranges`, e.g. the copy answer's
    baseline_ranges; computed by copy's best_ranges when not given), mapped
    to GCC algorithms; only when there are more than GCC's four does the
    range whose loss is smallest go to its neighbour (merge_ranges).  Each
    range says which sizes it covers, which measured strategy stands for its
    algorithm, and how much faster that is than the runner-up algorithm
    (geometric mean ratio)."""
    table = alg_table(curves, vector_strategies)
    if len(table) < 1 or all(len(t) < 2 for t in table.values()):
        return None
    table = {size: table[size] for size in complete_sizes(table)}
    if ranges is None:
        op = op or _op_of(curves)
        ranges = copy_analysis.best_ranges(gcc_usable(curves, vector_strategies),
                                           copy_analysis.SIMPLICITY[op])
    ranges = [r for r in ranges if r["strategy"] in STRATEGY_ALG]
    if not ranges:
        return None
    # every compared size belongs to the copy range that covers it, or to
    # the one before it (a size between two ranges, or one copy did not compare)
    items = [{"alg": STRATEGY_ALG[r["strategy"]], "sizes": []} for r in ranges]
    for size in table:
        i = max([j for j, r in enumerate(ranges) if r["min_size"] <= size] or [0])
        items[i]["sizes"].append(size)
    ranges = merge_ranges([it for it in items if it["sizes"]], table, max_ranges)
    out = []
    for i, r in enumerate(ranges):
        sizes = r["sizes"]
        others = {a for s in sizes for a in table[s]} - {r["alg"]}
        runner_up, ratio = None, None
        for a in sorted(others):
            g = _geo_ratio(table, sizes, r["alg"], a)
            if g is not None and (ratio is None or g < ratio):
                runner_up, ratio = a, g
        rep = sizes[len(sizes) // 2]
        st = table[rep].get(r["alg"])
        out.append({
            "alg": r["alg"], "min_size": sizes[0],
            "max_size": -1 if i == len(ranges) - 1 else sizes[-1],
            "last_measured_size": sizes[-1], "n_sizes": len(sizes),
            "strategies": sorted({table[s][r["alg"]][3] for s in sizes if r["alg"] in table[s]}),
            "runner_up": runner_up,
            "speedup_vs_runner_up": ratio,
            "example": {"size": rep, "ns": st[0] if st else None,
                        "runner_up_ns": _cost(table, rep, runner_up) if runner_up else None},
            "dest_align": DEST_ALIGN,
        })
    return {"string": strategy_string([(r["alg"], r["max_size"], DEST_ALIGN) for r in out]),
            "ranges": out}


# ---- glibc tunables ------------------------------------------------------------
#
# Bounds, from glibc's sysdeps/x86/dl-cacheinfo.h (dl_init_cacheinfo):
# - x86_rep_movsb_threshold: "The REP MOVSB threshold must be greater than
#   VEC_SIZE * 8": a value <= VEC_SIZE * 8 (128 SSE2, 256 AVX, 512 AVX-512) is
#   ignored and the default kept.  rep movsb is used for sizes > threshold.
# - x86_rep_stosb_threshold: bounds 1 .. SIZE_MAX; rep stosb for sizes > it.
# - x86_non_temporal_threshold: 2.36 upstream took 0 .. SIZE_MAX; later
#   releases (and distribution 2.36 builds that carry the backport, e.g.
#   Debian's 2.36-9+deb12u*) bound it to (0x4040, SIZE_MAX >> 4] and derive
#   rep_movsb_stop_threshold from it.
# Versions differ, so every proposal is also run through `ld.so
# --list-diagnostics` with the proposed GLIBC_TUNABLES, and the value glibc
# really uses is what counts.
TUNABLES = {
    "rep_movsb_threshold": "glibc.cpu.x86_rep_movsb_threshold",
    "rep_stosb_threshold": "glibc.cpu.x86_rep_stosb_threshold",
    "non_temporal_threshold": "glibc.cpu.x86_non_temporal_threshold",
}
NT_MINIMUM = 0x4040


def glibc_vector(flags, preferred):
    """The vector strategy glibc's memcpy/memset use below the rep threshold:
    AVX-512 when usable and not Prefer_No_AVX512, else AVX2 when
    AVX_Fast_Unaligned_Load, else SSE2 (sysdeps/x86_64/multiarch/ifunc-memmove.h)."""
    flags, preferred = flags or {}, preferred or {}
    if flags.get("avx512f") and flags.get("avx512vl") is not False \
            and not preferred.get("Prefer_No_AVX512"):
        return "avx512", 64
    if preferred.get("AVX_Fast_Unaligned_Load") or flags.get("avx2"):
        return "avx2", 32
    return "sse", 16


def _as_stat(v):
    """(median, lo, hi) from a stat tuple or a bare number (no uncertainty)."""
    if isinstance(v, (tuple, list)):
        return float(v[0]), float(v[1]), float(v[2])
    return float(v), float(v), float(v)


def _clear_log_ratio(b, a):
    """log(median b / median a) where the copy analysis calls one of them
    clearly faster (disjoint CIs, more than CLEAR_WIN apart), else 0: the
    same tie rule as copy's ranges and crossovers."""
    b, a = _as_stat(b), _as_stat(a)
    return math.log(b[0] / a[0]) if copy_analysis.clear_winner(b, a) else 0.0


def best_threshold(sizes, below, above, prefer=None, candidates=None):
    """The threshold T (sizes <= T take `below`, sizes > T take `above`) that
    minimises the summed log cost ratio to the faster path over the sizes
    where copy's tie rule calls one clearly faster (ties cost nothing).  Among equally
    good T the one nearest `prefer` (the current value) wins, so noise never
    moves a threshold.  below/above: {size: (median, lo, hi) or ns}.
    `candidates` limits T to those sizes (plus both ends and `prefer`).
    Returns (T, loss); T = sizes[0] - 1 means "above everywhere"."""
    sizes = [s for s in sorted(sizes) if s in below and s in above]
    if not sizes:
        return None, None
    d = {s: _clear_log_ratio(below[s], above[s]) for s in sizes}
    cands = {sizes[0] - 1, sizes[-1]} | (set(sizes) if candidates is None else
                                         {c for c in candidates if sizes[0] <= c <= sizes[-1]})
    if prefer is not None and sizes[0] - 1 <= prefer <= sizes[-1]:
        cands.add(prefer)

    def loss(t):
        return sum(max(0.0, d[s]) if s <= t else max(0.0, -d[s]) for s in sizes)

    def distance(t):
        return 0.0 if prefer is None else abs(math.log(max(t, 1)) - math.log(max(prefer, 1)))
    scored = sorted((round(loss(t), 9), distance(t), t) for t in cands)
    return scored[0][2], scored[0][0]


def path_gain(sizes, below, above, current, proposed):
    """Geometric-mean speedup (median cost under current / under proposed)
    over the measured sizes whose path changes, and those sizes."""
    if current is None or proposed is None:
        return None, []
    lo, hi = min(current, proposed), max(current, proposed)
    changed = [s for s in sorted(sizes) if lo < s <= hi and s in below and s in above]
    if not changed:
        return 1.0, []

    def cost(s, t):
        return _as_stat(below[s] if s <= t else above[s])[0]
    logs = [math.log(cost(s, current) / cost(s, proposed)) for s in changed]
    return math.exp(sum(logs) / len(logs)), changed


def propose_tunable(name, sizes, below, above, current, minimum=None, maximum=None,
                    min_gain=None, below_name="", above_name=""):
    """Proposal for one threshold tunable from two curves.  Returns a dict:
    name, tunable, current, proposed (None = keep), expected_gain (from the
    curves), changed_sizes, reason."""
    min_gain = fnd.threshold("effect_min") if min_gain is None else min_gain
    out = {"name": name, "tunable": TUNABLES[name], "current": current, "proposed": None,
           "optimum": None, "expected_speedup": None, "changed_sizes": [],
           "below": below_name, "above": above_name, "reason": ""}
    window = [s for s in sorted(sizes) if s in below and s in above
              and (minimum is None or s > minimum) and (maximum is None or s <= maximum)]
    if len(window) < 2:
        out["reason"] = "too few measured sizes in the range this tunable governs"
        return out
    # The threshold sits where the copy analysis's rule (copy.clear_wins,
    # copy.find_crossovers: disjoint CIs, more than CLEAR_WIN apart, runs of
    # MIN_RUN sizes) says the faster path changes, over every size both were
    # measured at: between the end of a run where `below` clearly wins and
    # the start of the next run where `above` does (or the end of the
    # window), or before the first `above` run; within such a bracket, where
    # the summed cost is least.
    both = [s for s in sorted(sizes) if s in below and s in above]
    cb = {s: _as_stat(below[s]) for s in both}
    ca = {s: _as_stat(above[s]) for s in both}
    crossings = [c for c in copy_analysis.find_crossovers(cb, ca, below_name or "below",
                                                          above_name or "above")
                 if c.high >= window[0] and c.low <= window[-1]]
    runs = copy_analysis.clear_wins(cb, ca)
    clear = {s for s in window if copy_analysis.clear_winner(cb[s], ca[s]) == "a"}
    cands = set()
    for i, r in enumerate(runs):
        nxt = runs[i + 1]["min_size"] if i + 1 < len(runs) else window[-1]
        if r["faster"] == "a":
            # from the last size of the run where `below` clearly wins (ties
            # inside a run do not end it) to where `above` starts to win
            wins = [s for s in clear if r["min_size"] <= s <= r["max_size"]]
            start = max(wins) if wins else min(r["max_size"], window[0] - 1)
            cands |= {s for s in window if start <= s <= nxt}
            if start < window[0]:
                cands.add(window[0] - 1)
        elif i == 0:
            cands |= {s for s in window if s <= r["min_size"]} | {window[0] - 1}
    t, _ = best_threshold(window, below, above, prefer=current, candidates=cands)
    out["optimum"] = t
    if minimum is not None and (t <= minimum or t < window[0]):
        # "above everywhere measured": the lowest value glibc accepts
        t = minimum + 1            # glibc ignores values at or below its minimum
    if maximum is not None and t > maximum:
        t = maximum
    out["crossovers"] = [copy_analysis.crossing_dict(c) for c in crossings]
    out["evidence"] = _threshold_evidence(window, below, above, current, t)
    if current is None:
        out.update(proposed=t, reason="current value unknown; proposing the measured optimum")
        return out
    speedup, changed = path_gain(window, below, above, current, t)
    out.update(expected_speedup=speedup, changed_sizes=changed)
    if t == current or speedup is None or speedup < 1.0 + min_gain:
        out["reason"] = (f"the measured curves gain less than {min_gain:.0%} from moving it "
                         f"(optimum {t})" if t != current else "already at the measured optimum")
        return out
    out["proposed"] = t
    out["reason"] = (f"{below_name} is faster up to {t} B, {above_name} above"
                     if below_name else "measured optimum")
    return out


def _threshold_evidence(sizes, below, above, current, proposed, limit=8):
    """The measured points a proposal rests on: the sizes whose path it
    changes plus the neighbours of the new threshold (median and CI of both)."""
    lo = min(x for x in (current, proposed) if x is not None)
    hi = max(x for x in (current, proposed) if x is not None)
    near = [s for s in sizes if lo < s <= hi]
    if len(near) > limit:
        near = [near[int(round(i * (len(near) - 1) / (limit - 1)))] for i in range(limit)]
    around = [s for s in sizes if s <= proposed][-1:] + [s for s in sizes if s > proposed][:1]
    out = []
    for s in sorted(set(near) | set(around)):
        b, a = _as_stat(below[s]), _as_stat(above[s])
        out.append({"size": s, "below_ns": b[0], "below_ci": [b[1], b[2]],
                    "above_ns": a[0], "above_ci": [a[1], a[2]]})
    return out


def tunable_proposals(curves_copy, curves_set, thresholds, flags, preferred):
    """Proposals for the three x86 tunables.  thresholds: current values from
    ld.so --list-diagnostics ({} if unknown)."""
    vec, vec_bytes = glibc_vector(flags, preferred)
    props = []
    movsb_min = 8 * vec_bytes
    c_vec = dict(curves_copy.get(vec, {}))
    c_rep = dict(curves_copy.get("rep_movsb", {}))
    stop = thresholds.get("rep_movsb_stop_threshold")
    p = propose_tunable("rep_movsb_threshold", sorted(set(c_vec) & set(c_rep)), c_vec, c_rep,
                        thresholds.get("rep_movsb_threshold"), minimum=movsb_min, maximum=stop,
                        below_name=f"copy_{vec}", above_name="copy_rep_movsb")
    p["vector"] = vec
    props.append(p)
    s_vec = dict(curves_set.get(vec, {}))
    s_rep = dict(curves_set.get("rep_stosb", {}))
    # memset only considers rep stosb above 2 * VEC_SIZE (memset-vec-unaligned-erms.S).
    p = propose_tunable("rep_stosb_threshold", sorted(set(s_vec) & set(s_rep)), s_vec, s_rep,
                        thresholds.get("rep_stosb_threshold"), minimum=2 * vec_bytes,
                        below_name=f"set_{vec}", above_name="set_rep_stosb")
    p["vector"] = vec
    props.append(p)
    # Large copies: below the NT threshold glibc copies with rep movsb where
    # the CPU has ERMS (up to rep_movsb_stop_threshold), else its vector loop.
    temporal = c_rep if (flags or {}).get("erms", True) and c_rep else c_vec
    c_nt = dict(curves_copy.get("nt", {}))
    p = propose_tunable("non_temporal_threshold", sorted(set(temporal) & set(c_nt)), temporal, c_nt,
                        thresholds.get("non_temporal_threshold"), minimum=NT_MINIMUM,
                        below_name="copy_rep_movsb" if temporal is c_rep else f"copy_{vec}",
                        above_name="copy_nt")
    props.append(p)
    return props


# ---- statistics of a check -------------------------------------------------------

def _boot_median_logs(values, n_boot, rng):
    a = np.asarray(values, float)
    idx = rng.integers(0, a.size, size=(n_boot, a.size))
    return np.log(np.median(a[idx], axis=1))


def _boot_mean_log_ratio(advised, current, n_boot, rng):
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
        return np.mean(np.log(ma / mc), axis=1)
    logs = np.zeros(n_boot)
    for x, y in zip(advised, current):
        logs += _boot_median_logs(x, n_boot, rng) - _boot_median_logs(y, n_boot, rng)
    return logs / len(advised)


def compare_variants(current, advised, affected=None, n_boot=2000, seed=0):
    """Per size: ratio advised/current of medians with a bootstrap CI (the
    samples are per-process medians); overall: geometric mean of the ratios
    over the affected sizes with a joint bootstrap CI and the effect verdict.
    current/advised: {size: [ns, ...]}."""
    sizes = sorted(set(current) & set(advised))
    affected = sizes if affected is None else [s for s in sizes if s in set(affected)]
    conf = fnd.threshold("ci_level")
    per_size = []
    for s in sizes:
        r = stats.ratio_of_medians(advised[s], current[s], confidence=conf, n_boot=n_boot, seed=seed)
        per_size.append({"size": s, "current_ns": float(np.median(current[s])),
                         "advised_ns": float(np.median(advised[s])),
                         "ratio": r["ratio"], "ci_low": r["ci_low"], "ci_high": r["ci_high"],
                         "gain": 1.0 - r["ratio"], "affected": s in affected,
                         "n_current": r["n_b"], "n_advised": r["n_a"]})
    overall = {"sizes": affected, "ratio": None, "ci_low": None, "ci_high": None,
               "gain": None, "verdict": fnd.INCONCLUSIVE}
    if affected:
        k = len(affected)
        point = sum(math.log(np.median(advised[s]) / np.median(current[s])) for s in affected)
        logs = _boot_mean_log_ratio([advised[s] for s in affected], [current[s] for s in affected],
                                    n_boot, np.random.default_rng(seed))
        tail = (1.0 - conf) / 2.0
        lo, hi = np.quantile(logs, [tail, 1.0 - tail])
        ratio = math.exp(point / k)
        n_a = min(len(advised[s]) for s in affected)
        n_b = min(len(current[s]) for s in affected)
        overall.update(ratio=ratio, ci_low=math.exp(lo), ci_high=math.exp(hi), gain=1.0 - ratio,
                       n_current=n_b, n_advised=n_a,
                       verdict=fnd.effect_verdict(ratio, math.exp(lo), math.exp(hi), n_a, n_b))
    return {"per_size": per_size, "overall": overall}


def decide(overall):
    """("advise" | "keep", reason) from a check's overall comparison: only a
    detected speedup is advised; slower, no difference, or too uncertain
    keeps the default."""
    ratio, verdict = overall.get("ratio"), overall.get("verdict")
    if ratio is None:
        return "keep", "nothing was measured where the advice changes anything"
    ci = f"{_pct(1 - ratio)} [{_pct(1 - overall['ci_high'])}, {_pct(1 - overall['ci_low'])}]"
    if verdict == fnd.DETECTED and ratio < 1.0:
        return "advise", f"measured faster: gain {ci}"
    if verdict == fnd.DETECTED:
        return "keep", f"measured slower: gain {ci}"
    if verdict == fnd.NOT_DETECTED:
        return "keep", f"no measurable difference: gain {ci}"
    return "keep", f"inconclusive (CI too wide to call): gain {ci}"


def slower_sizes(per_size):
    """Affected sizes where the advice measured slower beyond its CI."""
    return [{"size": r["size"], "gain": r["gain"]} for r in per_size
            if r.get("affected", True) and r["ci_low"] is not None and r["ci_low"] > 1.0]


def _with_losses(reason, per_size):
    worse = slower_sizes(per_size)
    if not worse:
        return reason
    return reason + "; slower at " + ", ".join(f"{w['size']} B ({_pct(w['gain'])})" for w in worse)


def _interleave(variants, rounds, seed, run_one, on_round=None):
    """Run each variant once per round, in a shuffled order per round, so that
    drift hits all alike.  run_one(variant) -> {size: [ns]}; each process
    contributes the median of its samples.  Returns {variant: {size: [medians]}}."""
    rng = random.Random(seed)
    out = {v: {} for v in variants}
    for r in range(rounds):
        order = list(variants)
        rng.shuffle(order)
        for v in order:
            for size, vals in run_one(v).items():
                if vals:
                    out[v].setdefault(int(size), []).append(float(np.median(vals)))
        if on_round:
            on_round(r + 1, rounds)
    return out


def _child_cpu():
    allowed = sorted(os.sched_getaffinity(0))
    return allowed[-1]


def _pinned(cpu):
    def pin():
        os.sched_setaffinity(0, {cpu})
    return pin


# ---- the GCC check -----------------------------------------------------------------

CHECK_SIZES = (16, 32, 64, 128, 168, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536)
CHECK_MAX_SIZE = 4 << 20

# The functions under test: one per size and op.  Each starts on its own
# page, so a function whose code is identical in both builds sits at the same
# page offset in both (with PIE, ASLR moves whole pages), and a longer body
# elsewhere cannot shift it: without this, layout alone moved identical code
# by +-20% here.
_C_FUNCS = r"""/* memfx advise: fixed-size copies and sets, expanded by GCC according to
   -mmemcpy-strategy= / -mmemset-strategy= (compiled with and without them). */
#include <stddef.h>

#define SIZES %(sizes)s

/* noipa: GCC must expand each body on its own and keep every call. */
#define X(n) \
  __attribute__((noipa, aligned(4096))) void mfx_copy_##n(char *d, const char *s) \
  { __builtin_memcpy(d, s, n); } \
  __attribute__((noipa, aligned(4096))) void mfx_set_##n(char *d, int c) \
  { __builtin_memset(d, c, n); }
SIZES
#undef X

struct mfx_entry { size_t size; void (*copy)(char *, const char *); void (*set)(char *, int); };
const struct mfx_entry mfx_table[] = {
#define X(n) {n, mfx_copy_##n, mfx_set_##n},
SIZES
#undef X
};
const size_t mfx_table_len = sizeof mfx_table / sizeof mfx_table[0];
"""

# The timing harness: compiled once, without the strategy flags, and linked
# first, so the timed loop is the same code at the same address in both builds.
_C_HARNESS = r"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct mfx_entry { size_t size; void (*copy)(char *, const char *); void (*set)(char *, int); };
extern const struct mfx_entry mfx_table[];
extern const size_t mfx_table_len;
volatile int fill_value = 0x5a;

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

__attribute__((noinline, aligned(64)))
static double run(const struct mfx_entry *e, int copy, char *d, const char *s, long iters)
{
    int c = fill_value;
    double t0 = now_ns();
    if (copy)
        for (long i = 0; i < iters; i++) e->copy(d, s);
    else
        for (long i = 0; i < iters; i++) e->set(d, c);
    return now_ns() - t0;
}

int main(int argc, char **argv)
{
    if (argc != 4) { fprintf(stderr, "usage: %s copy|set SAMPLES MIN_NS\n", argv[0]); return 2; }
    int copy = strcmp(argv[1], "copy") == 0;
    int samples = atoi(argv[2]);
    double min_ns = atof(argv[3]);
    size_t max = 0;
    for (size_t i = 0; i < mfx_table_len; i++) if (mfx_table[i].size > max) max = mfx_table[i].size;
    char *src, *dst;
    /* Page-aligned and (dst - src) % 4096 == 0: no 4K aliasing between the
       loads and the stores still in flight. */
    if (posix_memalign((void **)&src, 4096, max + 4096) || posix_memalign((void **)&dst, 4096, max + 4096))
        return 3;
    memset(src, 1, max + 4096);
    memset(dst, 2, max + 4096);
    for (size_t i = 0; i < mfx_table_len; i++) {
        const struct mfx_entry *e = &mfx_table[i];
        long iters = 1;
        while (run(e, copy, dst, src, iters) < min_ns && iters < (1L << 40)) iters *= 2;
        for (int k = 0; k < samples; k++)
            printf("%zu %.6f\n", e->size, run(e, copy, dst, src, iters) / iters);
    }
    return 0;
}
"""


def gcc_test_source(sizes):
    """The C file of the functions under test (the harness is _C_HARNESS)."""
    sizes = sorted({int(s) for s in sizes})
    return _C_FUNCS % {"sizes": " ".join(f"X({s})" for s in sizes)}


def gcc_flags(strings):
    """strings: {"memcpy": s or None, "memset": s or None} -> flag list."""
    flags = []
    for fn in ("memcpy", "memset"):
        s = strings.get(fn)
        if s:
            validate_strategy(s)
            flags.append(f"-m{fn}-strategy={s}")
    return flags


def _classify(body):
    """What GCC emitted for one function body (assembly text)."""
    text = body.lower()
    m = re.search(r"\brep[a-z]*\s+(movs|stos)([bwlq])", text)
    if m:
        return f"rep {m.group(1)}{m.group(2)}"
    if re.search(r"\b(call|jmp)\s+(memcpy|memset)\b", text):
        return "call " + re.search(r"\b(?:call|jmp)\s+(memcpy|memset)", text).group(1)
    loop = bool(re.search(r"\n\s*j(?!mp)[a-z]+\s+\.l\w+", text)) and bool(re.search(r"\n\.l\w+:", text))
    vec = "%xmm" in text or "%ymm" in text or "%zmm" in text
    if loop:
        return "vector loop" if vec else "gpr loop"
    return "straight-line moves" + (" (xmm)" if vec else "")


def parse_codegen(asm):
    """{function name: (kind, normalised body)} from `gcc -S` output."""
    out = {}
    current, lines = None, []

    def close():
        if current:
            raw = "\n".join(lines)
            # Label numbers differ between two compilations of the same code.
            out[current] = (_classify("\n" + raw), re.sub(r"\.L\d+", ".L", raw))
    for line in asm.splitlines():
        m = re.match(r"^(mfx_(?:copy|set)_\d+):", line)
        if m:
            close()
            current, lines = m.group(1), []
            continue
        if current is None:
            continue
        s = line.strip()
        if s.startswith(".cfi") or s.startswith(".size") or s.startswith(".p2align") \
                or s.startswith(".globl") or s.startswith(".type") or s.startswith(".section") \
                or s.startswith(".text"):
            continue
        if s.startswith(".LFE") or s.startswith(".LFB"):
            continue
        lines.append(s)
    close()
    return out


class GccCheck:
    """Builds and runs the fixed-size test, default vs advised strings."""

    def __init__(self, gcc=None, workdir=None):
        self.gcc = gcc or shutil.which("gcc")
        if not self.gcc:
            raise MemfxError("gcc not found")
        self._tmp = None
        self.workdir = workdir
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="memfx-advise-")
            self.workdir = self._tmp.name

    def close(self):
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _gcc(self, args):
        proc = subprocess.run([self.gcc, *args], capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise MemfxError(f"gcc failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        return proc

    def build(self, sizes, strings):
        """Compile the test for `sizes` twice; returns {variant: {"binary", "flags",
        "codegen": {fn: kind}, "bodies"}}."""
        funcs = os.path.join(self.workdir, "strategy_funcs.c")
        harness = os.path.join(self.workdir, "strategy_harness.c")
        with open(funcs, "w") as f:
            f.write(gcc_test_source(sizes))
        with open(harness, "w") as f:
            f.write(_C_HARNESS)
        # Baseline x86-64 on purpose (no native-CPU tuning flags): the strings are advice
        # for code built the portable way, and this is how memfx is built.
        harness_obj = os.path.join(self.workdir, "harness.o")
        self._gcc(["-O2", "-std=gnu11", "-c", "-o", harness_obj, harness])
        out = {}
        for variant, flags in (("default", []), ("advised", gcc_flags(strings))):
            common = ["-O2", "-std=gnu11", *flags]
            obj = os.path.join(self.workdir, f"funcs_{variant}.o")
            binary = os.path.join(self.workdir, f"check_{variant}")
            self._gcc([*common, "-c", "-o", obj, funcs])
            self._gcc(["-o", binary, harness_obj, obj])
            code = parse_codegen(self._gcc([*common, "-S", "-o", "-", funcs]).stdout)
            out[variant] = {"binary": binary, "flags": flags,
                            "codegen": {k: v[0] for k, v in code.items()},
                            "bodies": {k: v[1] for k, v in code.items()}}
        return out

    @staticmethod
    def run_binary(binary, op, samples, min_ns, cpu, timeout=120):
        proc = subprocess.run([binary, op, str(samples), str(min_ns)], capture_output=True,
                              text=True, timeout=timeout, preexec_fn=_pinned(cpu))
        if proc.returncode != 0:
            raise MemfxError(f"strategy check binary failed with status {proc.returncode}")
        vals = {}
        for line in proc.stdout.splitlines():
            size, ns = line.split()
            vals.setdefault(int(size), []).append(float(ns))
        return vals


def check_sizes(ranges, base=CHECK_SIZES, limit=CHECK_MAX_SIZE):
    """The ladder plus each range boundary and the size just above it."""
    sizes = set(base)
    for r in ranges or []:
        b = r.get("last_measured_size") if r.get("max_size") == -1 else r.get("max_size")
        if b and b > 0:
            sizes.update((b, b + 1))
    return sorted(s for s in sizes if 0 < s <= limit)


def gcc_check(strings, sizes, rounds=9, samples=5, min_ms=0.5, seed=0, gcc=None, on_round=None):
    """Measure the advised strings against GCC's default.  strings: {"memcpy":
    s or None, "memset": ...}; sizes: {"memcpy": [...], "memset": [...]}.
    Returns {fn: {"per_size", "overall", "decision", "reason", "codegen"}}."""
    all_sizes = sorted({s for v in sizes.values() for s in v})
    cpu = _child_cpu()
    with GccCheck(gcc) as chk:
        built = chk.build(all_sizes, strings)
        results = {}
        for fn, op in (("memcpy", "copy"), ("memset", "set")):
            if not strings.get(fn):
                continue
            want = set(sizes.get(fn) or [])
            prefix = f"mfx_{op}_"
            codegen = []
            affected = []
            for s in sorted(want):
                name = f"{prefix}{s}"
                d = built["default"]["bodies"].get(name)
                a = built["advised"]["bodies"].get(name)
                differs = d is not None and a is not None and d != a
                codegen.append({"size": s, "default": built["default"]["codegen"].get(name),
                                "advised": built["advised"]["codegen"].get(name), "differs": differs})
                if differs:
                    affected.append(s)

            def run_one(variant, op=op):
                vals = GccCheck.run_binary(built[variant]["binary"], op, samples, min_ms * 1e6, cpu)
                return {s: v for s, v in vals.items() if s in want}
            data = _interleave(("default", "advised"), rounds, seed, run_one, on_round)
            cmp = compare_variants(data["default"], data["advised"], affected, seed=seed)
            decision, reason = decide(cmp["overall"])
            reason = _with_losses(reason, cmp["per_size"])
            if not affected:
                reason = "the strings do not change GCC's code at any checked size"
            for row in cmp["per_size"]:
                row.update(next(c for c in codegen if c["size"] == row["size"]))
            results[fn] = {**cmp, "decision": decision, "reason": reason,
                           "flags": f"-m{fn}-strategy={strings[fn]}", "rounds": rounds,
                           "samples_per_process": samples, "compiler": _gcc_version(chk.gcc),
                           "cflags": "-O2 (baseline x86-64)", "cpu": cpu}
    return results


def _gcc_version(gcc):
    try:
        return subprocess.run([gcc, "--version"], capture_output=True, text=True,
                              timeout=10).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return None


# ---- the glibc check ------------------------------------------------------------------

# Runs in a fresh interpreter (so glibc reads GLIBC_TUNABLES at its start) and
# loads only the C core, straight from its file, so start-up stays ~20 ms.
_CHILD = r"""
import json, mmap, sys, importlib.machinery, importlib.util
path, kernel, sizes = sys.argv[1], sys.argv[2], sys.argv[3]
samples, min_ms = int(sys.argv[4]), float(sys.argv[5])
loader = importlib.machinery.ExtensionFileLoader("memfx._core", path)
spec = importlib.util.spec_from_loader("memfx._core", loader)
core = importlib.util.module_from_spec(spec)
loader.exec_module(core)
rows = {k["name"]: k for k in core.kernels()}
if kernel not in rows or not rows[kernel]["supported"]:
    print(json.dumps({"error": "kernel %s not available" % kernel})); sys.exit(0)
index = rows[kernel]["index"]
sizes = [int(s) for s in sizes.split(",")]
hz = core.tsc_hz(10.0)
page = mmap.PAGESIZE
top = max(sizes) + page
src = mmap.mmap(-1, top)
dst = mmap.mmap(-1, top)
core.touch(src, 0, top, page)
core.touch(dst, 0, top, page)
out = {}
for size in sizes:
    count = 1
    while True:
        ticks = core.run(index, dst, 0, src, 0, size, 0x5a, count, 0)[0]
        if ticks * 1e3 / hz >= min_ms or count >= 1 << 40:
            break
        count *= 2
    out[size] = [core.run(index, dst, 0, src, 0, size, 0x5a, count, 0)[0] * 1e9 / hz / count
                 for _ in range(samples)]
print(json.dumps(out))
"""


def _core_path():
    """The core's file, for the child to load (found, not imported: only the
    lab imports the core)."""
    import importlib.util
    return importlib.util.find_spec("memfx._core").origin


def run_libc_child(kernel, sizes, tunables_value, samples=3, min_ms=1.0, cpu=None, timeout=300):
    """{size: [ns per call]} of `kernel` (copy_libc / set_libc) in a child
    process started with GLIBC_TUNABLES=tunables_env (None = unset)."""
    env = dict(os.environ)
    env.pop("GLIBC_TUNABLES", None)
    if tunables_value:
        env["GLIBC_TUNABLES"] = tunables_value
    cpu = _child_cpu() if cpu is None else cpu
    # -I: the current directory is not on the child's sys.path, so a json.py
    # there cannot run inside it (the child needs the standard library only).
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", _CHILD, _core_path(), kernel,
                           ",".join(str(int(s)) for s in sizes), str(samples), str(min_ms)],
                          capture_output=True, text=True, env=env, timeout=timeout,
                          preexec_fn=_pinned(cpu))
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise MemfxError(f"libc check child failed: {tail}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    if "error" in data:
        raise MemfxError(data["error"])
    return {int(k): v for k, v in data.items()}


def tunables_env(base, name, value):
    """GLIBC_TUNABLES text: `base` (may be None) with `name` set to `value`."""
    items = [i for i in (base or "").split(":") if i and not i.startswith(name + "=")]
    if value is not None:
        items.append(f"{name}={int(value)}")
    return ":".join(items) or None


def effective_thresholds(env_value, ld_so=None):
    """Thresholds glibc uses with GLIBC_TUNABLES=env_value, from `ld.so
    --list-diagnostics` parsed by memfx.machine; None if unavailable."""
    from .machine import find_ld_so, parse_ld_diagnostics
    path = ld_so or find_ld_so()
    if not path:
        return None
    env = {"GLIBC_TUNABLES": env_value} if env_value else {}
    try:
        proc = subprocess.run([path, "--list-diagnostics"], capture_output=True, timeout=10,
                              env=env, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    parsed = parse_ld_diagnostics(proc.stdout.decode("utf-8", "replace"))
    return parsed["thresholds"] if parsed["version"] else None


def libc_check_sizes(prop, measured_sizes, limit=6, control_max=None):
    """Sizes whose path the proposal changes (up to `limit`, spread out) plus
    one control size on each side (none above `control_max` bytes, when
    given: above a 240 MiB non-temporal threshold the upper control is
    360 MiB, and faulting in two such buffers made each check process take
    ~4 s instead of 0.6 s on a loaded 2-vCPU guest)."""
    cur, new = prop.get("current"), prop.get("proposed")
    if cur is None:                 # current value unknown: look around the proposal
        cur = new * 2
    lo, hi = min(cur, new), max(cur, new)
    inside = [s for s in sorted(measured_sizes) if lo < s <= hi]
    if not inside:
        inside = sorted({int(round(lo + (hi - lo) * f)) for f in (0.25, 0.5, 1.0)} - {lo})
    if len(inside) > limit:
        step = (len(inside) - 1) / (limit - 1)
        inside = sorted({inside[int(round(i * step))] for i in range(limit)})
    controls = [max(1, int(lo * 0.75)), int(hi * 1.5)]
    if control_max is not None:
        controls = [c for c in controls if c <= control_max]
    return sorted(set(inside)), controls


def glibc_check(prop, measured_sizes, rounds=7, samples=3, min_ms=1.0, seed=0, on_round=None,
                control_max=None):
    """Measure libc with the current vs the proposed value of one tunable."""
    kernel = "set_libc" if prop["name"] == "rep_stosb_threshold" else "copy_libc"
    base = os.environ.get("GLIBC_TUNABLES")
    advised_env = tunables_env(base, prop["tunable"], prop["proposed"])
    inside, controls = libc_check_sizes(prop, measured_sizes, control_max=control_max)
    sizes = sorted(set(inside) | set(controls))
    cpu = _child_cpu()
    envs = {"current": base, "advised": advised_env}
    data = _interleave(("current", "advised"), rounds, seed,
                       lambda v: run_libc_child(kernel, sizes, envs[v], samples, min_ms, cpu), on_round)
    cmp = compare_variants(data["current"], data["advised"], inside, seed=seed)
    decision, reason = decide(cmp["overall"])
    reason = _with_losses(reason, cmp["per_size"])
    return {**cmp, "decision": decision, "reason": reason, "kernel": kernel,
            "env": {"current": base, "advised": advised_env}, "rounds": rounds,
            "samples_per_process": samples, "cpu": cpu}


# ---- gathering the inputs --------------------------------------------------------------

def newest_complete(store, experiment):
    for r in store.runs(experiment=experiment):
        if r["status"] == "complete":
            return r
    return None


def copy_sources(store, run_missing=False, runner=None, related=("aliasing", "fill")):
    """{"copy": run, "aliasing": run|None, "fill": run|None}.  Without a
    complete copy run: run it (quick preset) if run_missing, else NoCopyResults."""
    from .experiments import get_experiment
    out = {}
    for name in ("copy",) + tuple(related):
        run = newest_complete(store, name)
        if run is None and run_missing and runner is not None \
                and get_experiment(name, missing_ok=True) is not None:
            run = store.run(runner(name))
        out[name] = run
    if out["copy"] is None:
        raise NoCopyResults("no copy results in DB; run `memfx run copy` or pass --run-missing")
    return out


def _machine_flags(machine):
    flags = (machine or {}).get("flags") or {}
    return {k: flags.get(k) for k in ("erms", "fsrm", "fzrm", "fsrs", "fsrc", "avx2", "avx512f",
                                       "avx512vl") if k in flags}


def _related_notes(store, runs, documents=None):
    """What the newest aliasing and fill runs found, shown beside the advice
    (their documents from ``documents`` when the caller made them already)."""
    from .results import document
    notes = []
    for name in ("aliasing", "fill"):
        run = runs.get(name)
        if run is None:
            notes.append({"experiment": name, "run_id": None,
                          "message": f"no complete {name} run in the DB (advice uses copy results only)"})
            continue
        try:
            doc = (documents or {}).get(run["id"]) or document(store.run(run["id"]),
                                                               store.samples(run["id"]))
        except Exception as e:  # another engineer's analysis must not break advice
            notes.append({"experiment": name, "run_id": run["id"], "message": f"could not analyse: {e}"})
            continue
        shown = [f for f in doc.get("findings", []) if f.get("verdict") in (fnd.DETECTED, fnd.MEASURED)]
        if not shown:
            verdicts = sorted({f.get("verdict") for f in doc.get("findings", [])})
            notes.append({"experiment": name, "run_id": run["id"], "message": (
                f"run {run['id']}: nothing detected ({len(doc.get('findings', []))} findings: "
                f"{', '.join(map(str, verdicts)) or 'none'}); advice uses copy results only")})
        for f in shown:
            notes.append({"experiment": name, "run_id": run["id"], "finding": f.get("id"),
                          "message": f.get("claim"), "verdict": f.get("verdict"),
                          "value": f.get("value"), "unit": f.get("unit"),
                          "ci_low": f.get("ci_low"), "ci_high": f.get("ci_high")})
    return notes


def build_advice(copy_doc, glibc, machine=None):
    """The unchecked advice from a copy result document and the glibc
    diagnostics (memfx.machine.glibc_tunables()).  Pure."""
    points = copy_doc.get("points") or []
    flags = _machine_flags(copy_doc.get("machine") or machine)
    out = {"best": {}, "gcc": {}, "glibc": {}, "warnings": []}
    curves = {}
    for op, fn in OPS.items():
        modes = modes_of(points, op)
        # the ranges are the copy analysis's (its answer in the document),
        # never computed a second way here
        out["best"][op] = {m: shown_ranges(copy_analysis.ranges_from_document(copy_doc, op, m),
                                           point_curves(points, op, m)) for m in modes}
        mode = modes[0] if modes else None
        curves[op] = point_curves(points, op, mode) if mode else {}
        g = gcc_ranges(curves[op], copy_analysis.ranges_from_document(copy_doc, op, mode, True),
                       op=op) if curves[op] else None
        if g is None:
            out["gcc"][fn] = {"string": None, "mode": mode,
                              "reason": f"no {op} points to compare in run {copy_doc.get('run_id')}"}
        else:
            # What the other timing modes would say, as evidence (the seed's
            # thread disputes whether back-to-back or serialised timing is right).
            other = {}
            for m in modes[1:]:
                alt = gcc_ranges(point_curves(points, op, m),
                                 copy_analysis.ranges_from_document(copy_doc, op, m, True), op=op)
                if alt:
                    other[m] = alt["string"]
            out["gcc"][fn] = {**g, "mode": mode, "op": op, "other_modes": other}
    thresholds = (glibc or {}).get("thresholds") or {}
    props = tunable_proposals(curves["copy"], curves["set"], thresholds, flags,
                              (glibc or {}).get("preferred") or {})
    out["glibc"] = {"available": bool((glibc or {}).get("available")),
                    "version": (glibc or {}).get("version"),
                    "reason": (glibc or {}).get("reason"),
                    "current": thresholds,
                    "mode": modes_of(points, "copy")[0] if modes_of(points, "copy") else None,
                    "tunables": props}
    out["flags"] = flags
    return out


def advise(store, machine=None, check=True, run_missing=False, runner=None, glibc=None,
           rounds_gcc=9, rounds_glibc=7, progress=None, documents=None, control_max=None):
    """Full advice: gather the newest complete runs (running what is missing
    when allowed), derive the advice, check it (unless check=False), store it
    as the copy run's "advice" artifact, and return the document.
    ``documents``: result documents already made, by run id (the survey
    analyses each run once); ``control_max``: no glibc control size above
    this many bytes (libc_check_sizes)."""
    from .machine import glibc_tunables
    from .results import document
    runs = copy_sources(store, run_missing, runner)
    copy_run = store.run(runs["copy"]["id"])
    copy_doc = (documents or {}).get(copy_run["id"]) or document(copy_run,
                                                                 store.samples(copy_run["id"]))
    glibc = glibc_tunables() if glibc is None else glibc
    adv = build_advice(copy_doc, glibc, machine)
    for item in [*adv["gcc"].values(), *adv["glibc"]["tunables"]]:
        item["run_id"] = copy_run["id"]          # the measurement each one rests on
    say = progress or (lambda msg: None)
    here = ((machine or {}).get("cpu") or {}).get("model_name")
    there = ((copy_doc.get("machine") or {}).get("cpu") or {}).get("model_name")
    if here and there and here != there:
        adv["warnings"].append({"id": "other_machine", "message": (
            "the copy run was measured on another CPU "
            f"({(copy_doc['machine'].get('cpu') or {}).get('model_name')}); checks run on this one")})
    # GCC
    strings = {fn: g.get("string") for fn, g in adv["gcc"].items()}
    if check and any(strings.values()):
        if not shutil.which("gcc"):
            for g in adv["gcc"].values():
                g.update(checked=False, decision="unchecked", check_reason="gcc not installed")
        else:
            say("checking the GCC strategy strings (compile twice, run interleaved)")
            sizes = {fn: check_sizes(g.get("ranges")) for fn, g in adv["gcc"].items()}
            res = gcc_check(strings, sizes, rounds=rounds_gcc)
            for fn, g in adv["gcc"].items():
                if fn in res:
                    g.update(checked=True, check=res[fn], decision=res[fn]["decision"],
                             check_reason=res[fn]["reason"])
    else:
        for g in adv["gcc"].values():
            g.update(checked=False, decision="unchecked" if g.get("string") else "keep",
                     check_reason="--no-check" if g.get("string") else g.get("reason"))
    # glibc
    for prop in adv["glibc"]["tunables"]:
        if prop["proposed"] is None:
            prop.update(decision="keep", checked=False)
            continue
        env = tunables_env(os.environ.get("GLIBC_TUNABLES"), prop["tunable"], prop["proposed"])
        eff = effective_thresholds(env) if adv["glibc"]["available"] else None
        if eff is not None:
            prop["effective"] = eff.get(prop["name"])
            prop["effective_all"] = eff
            if prop["effective"] != prop["proposed"]:
                prop.update(decision="keep", checked=False, reason=(
                    f"glibc does not accept {prop['proposed']} for {prop['tunable']} "
                    f"(it would use {prop['effective']})"))
                continue
        if not check:
            prop.update(decision="unchecked", checked=False)
            continue
        say(f"checking {prop['tunable']}={prop['proposed']} (libc in child processes, interleaved)")
        measured = sorted(point_sizes(copy_doc.get("points") or []))
        try:
            res = glibc_check(prop, measured, rounds=rounds_glibc, control_max=control_max)
        except MemfxError as e:
            prop.update(decision="unchecked", checked=False, reason=f"check failed: {e}")
            continue
        prop.update(checked=True, check=res, decision=res["decision"], check_reason=res["reason"])
    accepted = [f"{p['tunable']}={p['proposed']}" for p in adv["glibc"]["tunables"]
                if p.get("decision") == "advise"]
    adv["glibc"]["advised_env"] = ":".join(accepted) or None
    doc = {
        "schema_version": SCHEMA_VERSION,
        "kind": ADVICE_KIND,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "checked": bool(check),
        "sources": {name: ({"run_id": r["id"], "started": r.get("started"), "preset": r.get("preset")}
                           if r else None) for name, r in runs.items()},
        "flags": adv["flags"],
        "best": adv["best"],
        "gcc": adv["gcc"],
        "glibc": adv["glibc"],
        "notes": _related_notes(store, runs, documents) + [{
            "experiment": "advise", "run_id": None,
            "message": "the checks place dst - src = 0 (mod 4096), outside the 4K-aliasing "
                       "band (1..63) that the aliasing experiment measures"}],
        "warnings": adv["warnings"],
        "prefetch": prefetch_advice(store, machine, check=check, progress=say),
    }
    doc = fnd.jsonable(doc)
    store.set_artifact(copy_run["id"], "advice", doc)
    return doc


def point_sizes(points):
    return {(p.get("params") or {}).get("size_bytes") for p in points
            if isinstance((p.get("params") or {}).get("size_bytes"), int)}


# ---- presentation ------------------------------------------------------------------------

def _size(n):
    """Sizes that are whole KiB/MiB in short form, any other exactly (4097
    must not read as "4.0K")."""
    from .units import format_size
    if n in (-1, None):
        return "∞"
    n = int(n)
    return format_size(n) if n >= 1024 and n % 1024 == 0 else str(n)


def _ns(x):
    return "-" if x is None else (f"{x:.1f}" if x < 1000 else f"{x:,.0f}")


def _print(console, *objects, **kw):
    # emoji=False: rich would turn the ":-1:" of a strategy string into an emoji.
    console.print(*objects, emoji=False, **kw)


def render(doc, console):
    """Human-readable advice (rich)."""
    from rich.markup import escape
    from rich.table import Table
    src = doc["sources"]["copy"]
    flags = ", ".join(f"{k.upper()}={'yes' if v else 'no'}" for k, v in (doc.get("flags") or {}).items())
    _print(console, f"[bold]memfx advise[/bold] from copy run {src['run_id']} "
                  f"({src.get('preset') or '?'} preset, {src.get('started')})")
    if flags:
        _print(console, f"[dim]CPU flags that change the answer: {flags}[/dim]")
    for w in doc.get("warnings", []):
        _print(console, f"[yellow]warning:[/yellow] {escape(w['message'])}")

    for op, modes in doc["best"].items():
        if not modes:
            continue
        mode = next(iter(modes))
        t = Table(title=f"Best {op} strategy per size ({mode} mode)", title_justify="left")
        for c in ("sizes", "best", "ns/call at range start", "at range end", "tied throughout"):
            t.add_column(c)
        for r in modes[mode]:
            t.add_row(f"{_size(r['min_size'])} – {_size(r['max_size'])}", r["strategy"],
                      _ns(r["median_ns_first"]), _ns(r["median_ns_last"]),
                      ", ".join(r.get("tied") or []), style="" if not r.get("tied") else "dim")
        _print(console, t)

    for fn, g in doc["gcc"].items():
        if not g.get("string"):
            _print(console, f"GCC -m{fn}-strategy: {escape(g.get('reason') or 'no advice')}")
            continue
        t = Table(title=f"GCC -m{fn}-strategy= (proposed from {g.get('mode')} mode)", title_justify="left")
        for c in ("alg", "sizes", "stands for", "example size", "ns", "runner-up", "runner-up ns", "speedup"):
            t.add_column(c)
        for r in g["ranges"]:
            ex = r["example"]
            t.add_row(r["alg"], f"{_size(r['min_size'])} – {_size(r['max_size'])}",
                      ", ".join(r["strategies"]), _size(ex["size"]), _ns(ex["ns"]),
                      r["runner_up"] or "-", _ns(ex["runner_up_ns"]),
                      "-" if r["speedup_vs_runner_up"] is None else f"{r['speedup_vs_runner_up']:.2f}×")
        _print(console, t)
        chk = g.get("check")
        if chk:
            t = Table(title=f"check: gcc -O2 with vs without the string ({chk['rounds']} interleaved "
                      f"runs each)", title_justify="left")
            for c in ("size", "default code", "advised code", "default ns", "advised ns", "gain [95% CI]"):
                t.add_column(c)
            for r in chk["per_size"]:
                gain = f"{_pct(r['gain'])} [{_pct(1 - r['ci_high'])}, {_pct(1 - r['ci_low'])}]"
                style = "" if r.get("differs") else "dim"
                t.add_row(_size(r["size"]), r.get("default") or "?", r.get("advised") or "?",
                          _ns(r["current_ns"]), _ns(r["advised_ns"]), escape(gain), style=style)
            _print(console, t)
        for m, alt in (g.get("other_modes") or {}).items():
            _print(console, f"[dim]{m}-mode curves would give: {escape(alt)}[/dim]")
        _verdict_line(console, g.get("decision"), f"-m{fn}-strategy={g['string']}",
                      g.get("check_reason"), "keep GCC's default")

    gl = doc["glibc"]
    _print(console)
    if not gl.get("available"):
        _print(console, f"[dim]glibc diagnostics unavailable: {escape(str(gl.get('reason')))}[/dim]")
    t = Table(title=f"glibc {gl.get('version') or '?'} tunables (from {gl.get('mode')} mode)",
              title_justify="left")
    # a tunable's name is what the user copies: never cut (issue 23)
    t.add_column("tunable", no_wrap=True, min_width=len("x86_non_temporal_threshold"))
    for c in ("current", "proposed", "rests on", "checked gain [95% CI]", "decision"):
        t.add_column(c)
    for p in gl["tunables"]:
        chk = p.get("check")
        if chk:
            o = chk["overall"]
            gain = (f"{_pct(o['gain'])} [{_pct(1 - o['ci_high'])}, {_pct(1 - o['ci_low'])}]"
                    if o.get("ratio") is not None else "-")
        else:
            gain = "-"
        rests = p.get("reason") or ""
        ev = p.get("evidence") or []
        if ev:
            b = (p.get("below") or "below").split("_", 1)[-1]
            a = (p.get("above") or "above").split("_", 1)[-1]
            pick = ev if len(ev) <= 3 else [ev[0], ev[len(ev) // 2], ev[-1]]
            rests += "; " + ", ".join(f"{_size(e['size'])} B: {b} {_ns(e['below_ns'])} vs {a} "
                                      f"{_ns(e['above_ns'])} ns" for e in pick)
        t.add_row(p["tunable"].split(".")[-1], _bytes(p["current"]), _bytes(p["proposed"]),
                  escape(rests), escape(gain), escape(_decision_text(p)))
    _print(console, t)
    for p in gl["tunables"]:
        chk = p.get("check")
        if not chk:
            continue
        t = Table(title=f"check: libc via {chk['kernel']}, {p['tunable'].split('.')[-1]} "
                  f"{p['current']} → {p['proposed']}", title_justify="left")
        for c in ("size", "path changes", "current ns", "advised ns", "gain [95% CI]"):
            t.add_column(c)
        for r in chk["per_size"]:
            t.add_row(_size(r["size"]), "yes" if r["affected"] else "no (control)",
                      _ns(r["current_ns"]), _ns(r["advised_ns"]),
                      escape(f"{_pct(r['gain'])} [{_pct(1 - r['ci_high'])}, {_pct(1 - r['ci_low'])}]"),
                      style="" if r["affected"] else "dim")
        _print(console, t)
    if gl.get("advised_env"):
        _print(console, f"[bold green]advise:[/bold green] GLIBC_TUNABLES={gl['advised_env']}",
               soft_wrap=True)
    elif any(p.get("decision") == "unchecked" for p in gl["tunables"]):
        env = ":".join(f"{p['tunable']}={p['proposed']}" for p in gl["tunables"]
                       if p.get("decision") == "unchecked")
        _print(console, f"[yellow]unchecked proposal:[/yellow] GLIBC_TUNABLES={env}",
               soft_wrap=True)
    else:
        _print(console, "[bold]keep glibc's defaults[/bold] (no tunable measured faster)")
    for n in doc.get("notes", []):
        value = n.get("value")
        value = f" = {value:.3g} {n.get('unit') or ''}" if isinstance(value, (int, float)) else ""
        who = "note" if n.get("experiment") == "advise" else n.get("experiment")
        _print(console, f"[dim]{who}: {escape(str(n.get('message')))}{value}[/dim]")
    render_prefetch(doc, console)


def _decision_text(item):
    d = item.get("decision") or "keep"
    why = item.get("check_reason") if item.get("checked") else None
    if d == "keep" and why:
        return f"keep ({why.split(':')[0].split(' (')[0]})"
    return d


def _bytes(n):
    return "-" if n is None else f"{n} ({_size(n)})"


def _verdict_line(console, decision, what, reason, keep_text):
    from rich.markup import escape
    if decision == "advise":
        _print(console, f"[bold green]advise:[/bold green] {escape(what)}  ({escape(reason or '')})",
               soft_wrap=True)
    elif decision == "unchecked":
        _print(console, f"[yellow]unchecked proposal:[/yellow] {escape(what)}  ({escape(reason or '')})",
               soft_wrap=True)
    else:
        _print(console, f"[bold]{keep_text}[/bold]: {escape(reason or '')}  (proposal was {escape(what)})",
               soft_wrap=True)


# ---- prefetch advice (issue 10, seed 001) -----------------------------------------------
#
# Two pieces of advice, each derived from the newest complete prefetch run's
# answers (never recomputed here) and then checked by a fresh, separate
# measurement: another measuring worker, another seed (other arm orders,
# another list), the chosen arm against its alternative, nothing stored as a
# run.  The advice says whether that check confirmed it, with the check's
# ratio and CI.
#   guard     from prefetch.seed_loop: is `if (p) prefetch(p)` worth a branch
#             when p may be NULL?  checked: unguarded vs guarded list walk on
#             the answer's list.
#   distance  from prefetch.stream_gain / stream_distance: prefetch d elements
#             ahead at the stride found, or leave it to the hardware
#             prefetchers.  checked: none vs prefetch at that d and stride.
# A check is confirmed when its verdict (effect_verdict's named thresholds)
# says what the advice claims; contradicted when it says the opposite
# beyond the thresholds; inconclusive when its CI reaches across them.

# Samples per arm of a check: min_samples (5) plus room for samples a busy
# machine rejects; 0.25 ms each, as the quick run.
PREFETCH_CHECK_SAMPLES = 15
PREFETCH_CHECK_SAMPLE_MS = 0.25
# The check's seed is the run's plus this: other arm orders and another list.
PREFETCH_CHECK_SEED_OFFSET = 1000
CONFIRMED, CONTRADICTED, CHECK_INCONCLUSIVE, UNCHECKED = (
    "confirmed", "contradicted", "inconclusive", "unchecked")


def _answer(doc, qid):
    return next((a for a in doc.get("answers") or [] if a.get("question") == qid), None)


def prefetch_proposals(prefetch_doc):
    """The unchecked prefetch advice from a prefetch result document: a list
    of items {id, topic, claim, advice, rests_on, check_params}.  Pure.

    claim is what the check must find to confirm it, on the ratio arms[0] /
    arms[1] (unguarded / guarded, none / prefetch): "faster" (the guard or
    the prefetch pays: the ratio is a detected effect above 1) or "no_gain"
    (it does not: no detected effect above 1)."""
    items = []
    run_id = prefetch_doc.get("run_id")
    params = prefetch_doc.get("params") or {}

    def rests_on(a):
        return {"run_id": run_id, "answer": a.get("question"), "verdict": a.get("verdict"),
                "value": a.get("value"), "ci_low": a.get("ci_low"), "ci_high": a.get("ci_high"),
                "because": a.get("because")}

    # guard
    a = _answer(prefetch_doc, "prefetch.seed_loop")
    item = {"id": "prefetch.guard_null", "topic": "prefetch of a pointer that may be NULL"}
    if not a or a.get("verdict") == "not_measured" or not a.get("details"):
        item.update(claim=None, advice=None, reason="the prefetch run did not measure the "
                    "seed's loop (list part)", rests_on=rests_on(a) if a else None)
    else:
        level = a["details"][0]
        guard = a["verdict"] == fnd.DETECTED and (a.get("value") or 0) > 1
        item.update(
            claim="faster" if guard else "no_gain",
            advice=("guard it: `if (p) prefetch(p)`; a NULL prefetch costs more than the branch"
                    if guard else "no need to guard it: prefetching NULL costs no more than a "
                    "branch (keep the code branch-free)"),
            rests_on=dict(rests_on(a), level=level.get("level"), nodes=level.get("nodes")),
            arms=("unguarded", "guarded"),
            check_params={"parts": ["list"], "levels": [level.get("level")],
                          "arms": ["unguarded", "guarded"]})
    items.append(item)
    # distance
    g, d = _answer(prefetch_doc, "prefetch.stream_gain"), _answer(prefetch_doc,
                                                                   "prefetch.stream_distance")
    item = {"id": "prefetch.stream_distance", "topic": "software prefetch distance, streaming loop"}
    strides = [x.get("stride_bytes") for x in (g or {}).get("details") or []
               if isinstance(x.get("stride_bytes"), int)]
    if not g or not d or g.get("verdict") == "not_measured" or d.get("value") is None \
            or not strides:
        item.update(claim=None, advice=None, reason="the prefetch run did not measure the "
                    "streaming loop (stream part)", rests_on=rests_on(g) if g else None)
    else:
        stride, dist = min(strides), int(d["value"])
        gain = g["verdict"] == fnd.DETECTED and (g.get("value") or 0) > 1
        item.update(
            claim="faster" if gain else "no_gain",
            advice=(f"prefetch {dist} elements ({dist * stride} B) ahead at a {stride} B stride"
                    if gain else f"no software prefetch at a {stride} B stride: the hardware "
                    f"prefetchers do as well (best distance tried: {dist})"),
            rests_on=dict(rests_on(g), stride_bytes=stride, distance=dist),
            arms=("none", "prefetch"),
            check_params={"parts": ["stream"], "strides": [stride], "stream_distances": [dist],
                          "arms": ["none", "prefetch"],
                          **({"region": params["region"]} if params.get("region") else {})})
    items.append(item)
    return items


def check_decision(claim, verdict, ratio):
    """(decision, reason) of a check: ratio = unguarded / guarded or none /
    prefetch (above 1: the guard or the prefetch pays), verdict from
    effect_verdict; claim "faster" (the guard or the prefetch pays) or
    "no_gain" (it does not)."""
    if ratio is None or verdict is None:
        return CHECK_INCONCLUSIVE, "the check measured too little to compare"
    faster = verdict == fnd.DETECTED and ratio > 1
    if claim == "faster":
        if faster:
            return CONFIRMED, "the check measured the advised code faster"
        if verdict == fnd.INCONCLUSIVE:
            return CHECK_INCONCLUSIVE, "the check's CI reaches across the effect threshold"
        return CONTRADICTED, "the check measured no gain from it"
    if faster:
        return CONTRADICTED, "the check measured a gain the advice says is not there"
    if verdict == fnd.INCONCLUSIVE:
        return CHECK_INCONCLUSIVE, "the check's CI reaches across the effect threshold"
    return CONFIRMED, ("the check measured no gain" if verdict == fnd.NOT_DETECTED
                       else "the check measured the alternative slower")


def measure_unstored(name, params, machine, timeout=120):
    """Samples of one experiment measured by a fresh worker process, returned
    and not stored: the advice checks' separate measurement."""
    from .runner import worker_command
    proc = subprocess.run(worker_command(), input=json.dumps(
        {"experiment": name, "params": params, "machine": machine}), capture_output=True,
        text=True, timeout=timeout)
    samples, error = [], None
    for line in proc.stdout.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("type") == "samples":
            samples.extend(msg["samples"])
        elif msg.get("type") == "error":
            error = msg.get("message")
    if error or proc.returncode != 0:
        raise MemfxError(f"the {name} check failed: "
                         f"{error or f'worker exited with status {proc.returncode}'}")
    return samples


def prefetch_check(items, run_params, machine, samples=PREFETCH_CHECK_SAMPLES, measure=None):
    """Re-measure every item's arms in one fresh worker (a different seed),
    and set each item's check and decision.  `measure(name, params, machine)`
    -> samples (measure_unstored unless given, for tests)."""
    from .experiments import get_experiment
    from .results import build_points
    todo = [i for i in items if i.get("check_params")]
    if not todo:
        return items
    exp = get_experiment("prefetch")
    over = {"samples": samples, "min_sample_ms": PREFETCH_CHECK_SAMPLE_MS,
            "seed": int(run_params.get("seed") or 1) + PREFETCH_CHECK_SEED_OFFSET,
            "parts": [], "arms": []}
    for i in todo:
        for k, v in i["check_params"].items():
            if isinstance(v, list) and k in over and isinstance(over[k], list):
                over[k] = list(dict.fromkeys(over[k] + v))
            else:
                over[k] = v
    params = exp.resolve("quick", over)
    points = build_points((measure or measure_unstored)("prefetch", params, machine))
    for i in todo:
        cp = i["check_params"]
        part = cp["parts"][0]

        def find(arm, part=part, cp=cp):
            for p in points:
                pp = p["params"]
                if p["arm"] != arm or pp.get("part") != part:
                    continue
                if part == "list" and pp.get("level") not in cp["levels"]:
                    continue
                if part == "stream" and (pp.get("stride_bytes") not in cp["strides"]
                                         or pp.get("distance") not in cp["stream_distances"]):
                    continue
                return p
            return None
        # the ratio is always arms[0] / arms[1] (unguarded / guarded, none /
        # prefetch): above 1 means the guard or the prefetch pays
        a, b = (find(arm) for arm in i["arms"])
        if not a or not b or not a.get("values") or not b.get("values"):
            i.update(checked=False, decision=UNCHECKED,
                     check_reason="the check measured no samples of one arm")
            continue
        r = stats.ratio_of_medians(a["values"], b["values"],
                                   confidence=fnd.threshold("ci_level"))
        verdict = fnd.effect_verdict(r["ratio"], r["ci_low"], r["ci_high"], r["n_a"], r["n_b"])
        decision, reason = check_decision(i["claim"], verdict, r["ratio"])
        i.update(checked=True, decision=decision, check_reason=reason, check={
            "ratio": r["ratio"], "ci_low": r["ci_low"], "ci_high": r["ci_high"],
            "verdict": verdict, "n": [r["n_a"], r["n_b"]],
            "median_ns": {a["arm"]: a["median"], b["arm"]: b["median"]},
            "seed": params["seed"], "samples_per_arm": samples,
            "ratio_is": f"{i['arms'][0]} / {i['arms'][1]}"})
    return items


def prefetch_advice(store, machine=None, check=True, progress=None, measure=None):
    """The prefetch part of the advice document: items derived from the
    newest complete prefetch run's answers, each checked by a fresh
    measurement unless check=False.  Never raises MemfxError: a failed check
    leaves its items unchecked, with the reason."""
    from .results import document
    run = newest_complete(store, "prefetch")
    if run is None:
        return {"run_id": None, "items": [], "reason": "no complete prefetch run in the DB "
                "(run `memfx run prefetch --quick`)"}
    doc = document(store.run(run["id"]), store.samples(run["id"]))
    items = prefetch_proposals(doc)
    for i in items:
        if not i.get("check_params"):
            i.update(checked=False, decision=UNCHECKED, check_reason=i.get("reason"))
    if check:
        if progress:
            progress("checking the prefetch advice (a fresh measurement of the advised arms)")
        try:
            prefetch_check(items, run.get("params") or {}, doc.get("machine") or machine or {},
                           measure=measure)
        except (MemfxError, subprocess.SubprocessError, OSError) as e:
            for i in items:
                if i.get("check_params") and not i.get("checked"):
                    i.update(checked=False, decision=UNCHECKED, check_reason=f"check failed: {e}")
    else:
        for i in items:
            if i.get("check_params"):
                i.update(checked=False, decision=UNCHECKED, check_reason="--no-check")
    for i in items:
        i.pop("check_params", None)
    return {"run_id": run["id"], "started": run.get("started"), "preset": run.get("preset"),
            "items": items}


def render_prefetch(doc, console):
    """The prefetch advice (rich), after the copy advice."""
    from rich.markup import escape
    from rich.table import Table
    part = doc.get("prefetch")
    if not part:
        return
    _print(console)
    if not part.get("items"):
        _print(console, f"[dim]prefetch advice: {escape(part.get('reason') or 'none')}[/dim]")
        return
    t = Table(title=f"Prefetch advice (from prefetch run {part.get('run_id')}, checked by a "
              f"fresh measurement)", title_justify="left")
    for c in ("for", "advice", "rests on", "check (ratio [95% CI])", "decision"):
        t.add_column(c)
    for i in part["items"]:
        r = i.get("rests_on") or {}
        rests = (f"{r.get('answer')}: {_ratio_text(r)} {r.get('verdict')}" if r.get("answer")
                 else "-")
        chk = i.get("check") or {}
        t.add_row(i["topic"], escape(i.get("advice") or i.get("reason") or "-"), escape(rests),
                  escape(f"{chk.get('ratio_is', '')} {_ratio_text(chk)}".strip() or "-"),
                  escape(f"{i.get('decision')}: {i.get('check_reason') or ''}"))
    _print(console, t)


def _ratio_text(d):
    v, lo, hi = d.get("value", d.get("ratio")), d.get("ci_low"), d.get("ci_high")
    if v is None:
        return "-"
    ci = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else ""
    return f"{v:.3f}{ci}"
