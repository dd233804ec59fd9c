"""Copy and set strategies vs size: where does `rep movsb`/`rep stosb` win
on this CPU, and where do plain loops, vector loops, libc or non-temporal
stores win?

Seed 002: the kernel thread that inlines memcpy/memset up to 256 bytes as a
4 x 8-byte store loop because "the upper limit was chosen semi-arbitrarily
-- uarchs wildly differ between a threshold past which a rep-prefixed op
becomes faster ... Someone(tm) should revisit this from time to time"; and
David Laight's measurement on Zen 5 that short `rep movsb` copies jump from
~5 to ~38 clocks above 128 bytes.

Arms (one kernel row each in _core/kernels/copy.c, `<op>_<arm>`; only the
ones this CPU supports are planned):
  copy: rep_movsb rep_movsq gpr_unrolled sse avx2 avx512 libc nt
  set:  rep_stosb rep_stosq gpr_unrolled sse avx2 avx512 libc nt
One iteration = one call on `size_bytes` bytes; the metric is ns_per_call
(N/2N differenced).  memcpy semantics: source and destination never
overlap (they are separate mappings; `check_no_overlap` guards it).

Buffers: source and destination are separate mappings starting src_offset
and dst_offset bytes past a page boundary (default 0 and 0, so dst - src is
0 modulo 4096: outside the 4K-aliasing band that the `aliasing` experiment
sweeps); the arms of one cell share them.

Timing modes (point param "mode"; the kernel's aux bits, see copy.c):
  throughput  back-to-back calls on the same buffers
  latency     lfence after every call: each call runs alone
  chained     no fence; the next call's addresses depend on the last byte
              the previous call wrote (a latency chain through the store)

Questions (answers.Question, one answer each per run; `memfx advise` reads
the ranges and crossovers computed here, never its own):
  copy.rep_movsb_step / copy.rep_stosb_step  the small-size step of rep
      movsb/stosb (value = first size on the higher level, CI = the bracket
      of measured sizes); details: the step in every timing mode measured
  copy.best_strategy / copy.best_set_strategy  the fastest strategy per size
      range (value = number of ranges in throughput mode); details: the
      ranges per timing mode (all strategies, and the baseline x86-64 ones a
      compiler without -march can emit), plus the pairwise crossovers that
      belong to no other question
  copy.rep_movsb_crossover / copy.rep_stosb_crossover  the size from which
      rep movsb/stosb beats the best loop (the lower envelope of the loops);
      details: every crossing with the envelope and every pairwise crossover
      of rep movsb/stosb (a pair that crosses back and forth is one detail
      with all its crossings)
  copy.nt_crossover / copy.nt_set_crossover  the size from which
      non-temporal stores beat the best of rep movsb/stosb and libc
  copy.peak_copy_bandwidth / copy.peak_set_bandwidth  GB/s of the fastest
      (strategy, size) in throughput mode; the traffic of a call is the
      kernel row's read and write declaration (a set only writes)
  copy.libc_vs_best / copy.libc_set_vs_best  libc's time over the best
      strategy's, geometric mean over the sizes measured (1.0 = libc is the
      best everywhere); details: the ranges where libc is clearly slower
Tie rule everywhere: one strategy beats another at a size when their CIs are
disjoint and the medians are more than CLEAR_WIN apart; ties go to the
simplest strategy (SIMPLICITY); a run of fewer than MIN_RUN clear wins is
noise.  The CPUID flags that change these answers (ERMS, FSRM, FZRM, FSRS,
FSRC) are named in the step and crossover answers.

The kernel rows, modes and buffer helpers are in kernels.py (shared with
aliasing), the pure analysis of curves and points in analysis.py; both are
re-exported here.
"""
from __future__ import annotations

import functools
import math
from dataclasses import replace

import numpy as np

from ...model import answers as ans
from ...model.answers import Question
from ...model.details import detail
from ...model.errors import MemfxError, ParamError
from ...model.findings import DETECTED, INCONCLUSIVE, MEASURED, NOT_DETECTED, threshold
from ...model.machine_view import Fingerprint
from ...model.plotspec import Mark, PlotSpec
from ...model.units import format_size
from .._sweep import SPARSE_FROM, SPARSE_FROM_HELP
from ..base import Experiment, Param, Point, Trial, register
from .analysis import (  # noqa: F401
    BASELINE,
    CLEAR_WIN,
    LOOPS,
    METRIC,
    MIN_RUN,
    MODE_ORDER,
    SIMPLICITY,
    STEP_MIN_JUMP,
    STEP_WINDOW,
    VECTOR_LOOPS,
    Crossover,
    Step,
    _clear_runs,
    _ns_points,
    _pair_detail,
    _pair_owner,
    _ranges_text,
    _runs,
    _sign,
    _stat,
    acceptable,
    best_ranges,
    clear_winner,
    clear_wins,
    comparable_sizes,
    crossing_dict,
    envelope,
    find_crossovers,
    find_step,
    modes_of,
    pair_crossovers,
    point_curves,
    point_index,
    point_values,
    strategy_ranges,
    ties_by_size,
)
from .kernels import MODES, OPS, STRATEGIES, check_no_overlap, fill_pattern, kernel_name

# The flags that decide how fast string instructions are (Intel SDM Vol. 1
# 7.3.9.3 and Vol. 2A CPUID leaf 7): enhanced REP MOVSB/STOSB, fast short
# REP MOV, fast zero-length MOVSB, fast short STOSB, fast short CMPSB/SCASB.
STRING_FLAGS = {
    "erms": "Enhanced REP MOVSB/STOSB",
    "fsrm": "Fast Short REP MOV",
    "fzrm": "Fast Zero-length REP MOVSB",
    "fsrs": "Fast Short REP STOSB",
    "fsrc": "Fast Short REP CMPSB/SCASB",
}
# Every size up to this is measured in the fine part of the sweep at any step.
ALWAYS_FINE = 16


def small_sizes(small_max, small_step):
    """Every size 1..ALWAYS_FINE, then every multiple of small_step up to small_max."""
    return [s for s in range(1, small_max + 1) if s <= ALWAYS_FINE or s % small_step == 0]


def geometric_sizes(lo, hi, per_octave):
    """Sizes above lo up to hi, per_octave per doubling, hi included."""
    if hi <= lo:
        return []
    n = int(math.ceil(math.log2(hi / lo) * per_octave - 1e-9))
    out = {int(round(lo * 2 ** (i / per_octave))) for i in range(1, n)}
    out.add(int(hi))
    return sorted(s for s in out if lo < s <= hi)


def fill_sizes(lo, hi, steps):
    """Up to `steps` sizes strictly between lo and hi (all of them when few)."""
    if hi - lo <= 1:
        return []
    if hi - lo - 1 <= steps:
        return list(range(lo + 1, hi))
    if hi / lo > 2:
        pts = [lo * (hi / lo) ** (i / (steps + 1)) for i in range(1, steps + 1)]
    else:
        pts = [lo + (hi - lo) * i / (steps + 1) for i in range(1, steps + 1)]
    return sorted({int(round(p)) for p in pts} - {lo, hi})


# ---------------------------------------------------------------------------
# the questions

_OP_NAMES = {"copy": "memcpy", "set": "memset"}
# From this size one untimed call warms a trial, not two.  Trial.warmup is
# also what a visit's re-warm counts as one pass (worker.settle), and at these
# sizes one call already streams both buffers through memory: with two, a
# 512 MiB copy ran 2 warm-up calls, a calibration call and 3 calls of re-warm
# at every visit for ~3 timed calls.
ONE_WARM_CALL_FROM = 64 << 20
# Bytes of memory one byte of size touches: a copy's source and destination
# (max_size auto gives both ops the same footprint, 2x the LLC: a copy of
# 2x the LLC was a seventh of a full replica; docs/machine-notes.md).
FOOTPRINT_PER_BYTE = {"copy": 2, "set": 1}


def _questions():
    out = []
    for op, rep, step, best, repx, ntx, peak, libc in (
            ("copy", "rep movsb", "rep_movsb_step", "best_strategy", "rep_movsb_crossover",
             "nt_crossover", "peak_copy_bandwidth", "libc_vs_best"),
            ("set", "rep stosb", "rep_stosb_step", "best_set_strategy", "rep_stosb_crossover",
             "nt_set_crossover", "peak_set_bandwidth", "libc_set_vs_best")):
        fn = _OP_NAMES[op]
        out += [
            Question(f"copy.{step}", f"Does {rep}'s time per call step up at a small size "
                     f"(e.g. 128 -> 129 B)?", "bytes", "002",
                     f"the best two-level split of the {rep} curve up to small_max, a step when "
                     f"the level and the local ratio both rise by >= {STEP_MIN_JUMP:.0%}; "
                     f"detected when the ratio's CI clears effect_min"),
            Question(f"copy.{best}", f"Which {fn} strategy is fastest in each size range?",
                     "ranges", "002",
                     f"per size, the strategies tied with the fastest (CI overlap or within "
                     f"{CLEAR_WIN:.0%}); ranges as few as the ties allow, the simplest wins"),
            Question(f"copy.{repx}", f"From what size does {rep} beat the best loop "
                     f"({fn})?", "bytes", "002",
                     f"crossing of {rep} with the lower envelope of the loops "
                     f"(gpr, sse, avx2, avx512): disjoint CIs and more than {CLEAR_WIN:.0%} apart "
                     f"on at least {MIN_RUN} sizes each side"),
            Question(f"copy.{ntx}", f"From what size do non-temporal stores beat {rep} and "
                     f"libc ({fn})?", "bytes", "002",
                     f"crossing of nt with the lower envelope of {rep} and libc (the same rule)"),
            Question(f"copy.{peak}", f"What is the peak {fn} bandwidth?", "GB/s", "002",
                     "bytes the kernel row declares (read + written) per call / the fastest "
                     "point's time per call, throughput mode", better=ans.HIGHER,
                     host_shared=True),      # a core's throughput: see bandwidth.LEVEL_SHARED
            Question(f"copy.{libc}", f"How much slower than the best strategy is libc {fn}?",
                     "ratio", "002",
                     "geometric mean over the sizes measured of libc / the fastest strategy "
                     "(1.0 = libc is the best everywhere)", better=ans.LOWER),
        ]
    return tuple(out)


QUESTIONS = _questions()

# The seed's own questions: the report opens with a card for each.
QUESTIONS = tuple(replace(q, headline=True) if q.id in ("copy.rep_movsb_step", "copy.best_strategy")
                  else q for q in QUESTIONS)
# question name per op and role
_QNAME = {
    "copy": {"step": "rep_movsb_step", "best": "best_strategy", "rep": "rep_movsb_crossover",
             "nt": "nt_crossover", "peak": "peak_copy_bandwidth", "libc": "libc_vs_best"},
    "set": {"step": "rep_stosb_step", "best": "best_set_strategy", "rep": "rep_stosb_crossover",
            "nt": "nt_set_crossover", "peak": "peak_set_bandwidth", "libc": "libc_set_vs_best"},
}


# the plots: ops and modes in this order; a red line at each detected rep
# movsb/stosb step (one detail per mode), labelled with its sizes
_PLOT_ORDER = (("op", ("copy", "set")), ("mode", ("throughput", "latency", "chained")))
_STEP_MARKS = tuple(
    Mark(f"copy.{_QNAME[op]['step']}", details=True, where={"verdict": DETECTED},
         facet=("mode",), only={"op": op}, label="{label_first} step {fast_up_to}→{slow_from} B")
    for op in ("copy", "set"))


def _q(op, role):
    qid = f"copy.{_QNAME[op][role]}"
    return next(q for q in QUESTIONS if q.id == qid)


@functools.lru_cache(maxsize=1)
def _kernel_rows():
    """The core's kernel table, read once: the analysis asks for a row's
    traffic at every point (a thousand calls of a quick run)."""
    from ...lab.core import kernel_table
    return kernel_table()


def row_traffic(op, arm):
    """Bytes per call of `size` bytes as the kernel row declares them: a
    function size -> (read, written), or None without the row."""
    row = _kernel_rows().get(kernel_name(op, arm))
    if row is None:
        return None
    return lambda size: row.traffic(size, 1)


def _keys(index, pairs):
    return [ans.point_key(index[k]) for k in pairs if k in index]


def answer_step(op, points, small_max, flags, seed=0):
    q, arm = _q(op, "step"), STRATEGIES[op][0]
    details, main = [], None
    for mode in modes_of(points, op):
        values = point_values(points, op, mode, arm)
        small = [s for s in values if s <= small_max]
        if len(small) < 2:
            continue
        st = find_step(values, small_max, seed=seed)
        if st is None:
            d = detail(f"{arm} ({mode})", mode=mode, value=None, unit="bytes",
                       ci=None, verdict=NOT_DETECTED,
                       sizes=len(small))
        else:
            sure = st.ci_low > 1 + threshold("effect_min")
            d = detail(f"{arm} ({mode})", mode=mode, value=float(st.high),
                       unit="bytes", ci_low=float(st.low + 1), ci_high=float(st.high),
                       verdict=DETECTED if sure else INCONCLUSIVE, fast_up_to=st.low,
                       slow_from=st.high, before_ns=st.before_ns, after_ns=st.after_ns,
                       ratio=st.ratio, ratio_ci=[st.ci_low, st.ci_high],
                       local_ratio=st.local_ratio)
        details.append(d)
        if main is None:
            main = (mode, st, d)
    if main is None:
        return ans.not_measured(q, f"{arm} was not measured at two or more sizes up to "
                                   f"{format_size(small_max)}")
    mode, st, d = main
    index = point_index(points, op, mode)
    if st is None:
        return ans.Answer(q.id, NOT_DETECTED, (
            f"No step in {arm} time per call up to {format_size(small_max)} ({mode}: no jump "
            f">= {STEP_MIN_JUMP:.0%} between two sizes); flags: {_flag_text(flags)}"),
            details=details, estimator="two-level split of log median ns")
    return ans.Answer(
        q.id, d["verdict"],
        (f"{arm} ({mode}) steps from {st.before_ns:.1f} to {st.after_ns:.1f} ns per call "
         f"between {st.low} and {st.high} B (x{st.ratio:.2f}, CI {st.ci_low:.2f}-"
         f"{st.ci_high:.2f}); flags: {_flag_text(flags)}"),
        value=float(st.high), ci_low=float(st.low + 1), ci_high=float(st.high),
        evidence=_keys(index, [(arm, st.low), (arm, st.high)]), details=details,
        estimator="first size on the higher level; CI = the bracket of measured sizes")


def answer_best(op, points, pair_details):
    q = _q(op, "best")
    details, main = [], None
    for mode in modes_of(points, op):
        curves = point_curves(points, op, mode)
        ranges = best_ranges(curves, SIMPLICITY[op])
        if not ranges:
            continue
        base = best_ranges({k: c for k, c in curves.items() if k in BASELINE}, SIMPLICITY[op])
        details.append(detail(f"{op} ranges ({mode})", kind="ranges", op=op,
                              mode=mode, value=float(len(ranges)), unit="ranges",
                              ci=None, ranges=ranges,
                              baseline_ranges=base, text=_ranges_text(ranges),
                              strategies=sorted(curves), ties=ties_by_size(curves)))
        if main is None:
            main = (mode, ranges)
    if main is None:
        return ans.not_measured(q, f"no {op} strategy was measured")
    details += pair_details
    mode, ranges = main
    return ans.Answer(q.id, MEASURED, f"The fastest {op} strategy by size ({mode}): "
                      f"{_ranges_text(ranges)}",
                      value=float(len(ranges)), details=details,
                      estimator=f"tie rule: CI overlap or within {CLEAR_WIN:.0%}; simplest wins")


def _envelope_answer(q, op, points, challenger, others, other_name, pair_details, flags):
    """The size from which `challenger` beats the lower envelope of `others`."""
    details, main = [], None
    for mode in modes_of(points, op):
        curves = point_curves(points, op, mode)
        if challenger not in curves:
            continue
        env, who = envelope(curves, others)
        if len(set(env) & set(curves[challenger])) < 2:
            continue
        found = find_crossovers(curves[challenger], env, challenger, other_name)
        into = [c for c in found if c.faster_above == challenger]
        common = sorted(set(env) & set(curves[challenger]))
        signs = [_sign(curves[challenger][s], env[s], CLEAR_WIN) for s in common]
        d = detail(f"{challenger} vs {other_name} ({op}, {mode})", kind="envelope",
                   op=op, mode=mode, unit="bytes",
                   value=float(into[-1].size) if into else None,
                   ci_low=float(into[-1].low) if into else None,
                   ci_high=float(into[-1].high) if into else None,
                   verdict=DETECTED if into else NOT_DETECTED,
                   crossings=[dict(crossing_dict(c), envelope_below=who.get(c.low),
                                   envelope_above=who.get(c.high)) for c in found],
                   challenger_wins_at=sum(s > 0 for s in signs),
                   challenger_wins_sizes=[x for x, g in zip(common, signs) if g > 0],
                   envelope_wins_at=sum(s < 0 for s in signs), sizes=len(common),
                   largest_size=common[-1])
        details.append(d)
        if main is None:
            main = (mode, curves, env, who, found, into, d)
    if main is None:
        return ans.not_measured(q, f"{challenger} and {other_name} were not both measured at "
                                   f"two or more sizes")
    details += pair_details
    mode, curves, env, who, found, into, d = main
    index = point_index(points, op, mode)
    flag_note = f"; flags: {_flag_text(flags)}" if flags else ""
    if not into:
        if d["challenger_wins_at"] and not d["envelope_wins_at"]:
            why = (f"{challenger} is faster than or tied with {other_name} at every size "
                   f"measured ({mode})")
        elif found:
            why = (f"{challenger} never starts to beat {other_name}: it is faster below "
                   f"~{format_size(found[0].size)} and slower above ({mode})")
        elif d["challenger_wins_at"]:
            at = ", ".join(f"{format_size(x)}" for x in d["challenger_wins_sizes"][:4])
            why = (f"{challenger} beats {other_name} clearly at only {d['challenger_wins_at']} "
                   f"of the {d['sizes']} sizes measured ({at}), never at {MIN_RUN} sizes in a "
                   f"row, so there is no size from which it wins ({mode}); a size where it "
                   f"alone is fastest still shows as a range of its own in the best strategy")
        else:
            why = (f"{challenger} never beats {other_name} clearly up to "
                   f"{format_size(d['largest_size'])} ({mode})")
        return ans.Answer(q.id, NOT_DETECTED, why + flag_note, details=details,
                          estimator="crossing of the medians (log size)")
    c = into[-1]
    tail = ""
    if found and found[-1] is not c:
        tail = f", until ~{format_size(found[-1].size)} where {found[-1].faster_above} wins again"
    because = (f"{challenger} beats {other_name} from ~{format_size(c.size)} ({mode}; "
               f"{who.get(c.low)} wins at {format_size(c.low)} by x{c.ratio_low:.2f}, "
               f"{challenger} at {format_size(c.high)} by x{c.ratio_high:.2f}){tail}{flag_note}")
    ev = _keys(index, [(challenger, c.low), (who.get(c.low), c.low), (challenger, c.high),
                       (who.get(c.high), c.high)])
    return ans.Answer(q.id, DETECTED, because, value=float(c.size), ci_low=float(c.low),
                      ci_high=float(c.high), evidence=list(dict.fromkeys(ev)), details=details,
                      estimator="crossing of the medians (log size); CI = the bracket of "
                                "measured sizes")


def answer_peak(op, points, traffic, seed=0):
    """Peak GB/s from the kernel rows' declared traffic; `traffic(op, arm)` gives
    a function size -> (read, written) bytes per call, or None."""
    q = _q(op, "peak")
    per, best = {}, None
    missing = set()
    for p in _ns_points(points, op, "throughput"):
        arm, s = p["arm"], p["params"]["size_bytes"]
        tr = traffic(op, arm)
        if tr is None:
            missing.add(arm)
            continue
        rd, wr = tr(s)
        gbps = (rd + wr) / float(p["median"])
        # a row accumulated per arm, made a detail once every size is in
        e = per.setdefault(arm, {"value": 0.0, "unit": "GB/s",
                                 "ci_low": None, "ci_high": None, "at_size": None,
                                 "read_bytes_per_byte": rd / s, "write_bytes_per_byte": wr / s,
                                 "largest_size": 0, "largest_size_gbps": None,
                                 "gbps_by_size": {}})
        if s >= 256:          # GB/s per size where bandwidth means something
            e["gbps_by_size"][str(s)] = round(gbps, 3)
        if gbps > e["value"]:
            e.update(value=gbps, at_size=s)
            if best is None or gbps > best[0]:
                best = (gbps, p, rd, wr)
        if s > e["largest_size"]:
            e.update(largest_size=s, largest_size_gbps=gbps)
    if best is None:
        why = (f"no kernel row declares the traffic of {', '.join(sorted(missing))}" if missing
               else f"no {op} point in throughput mode")
        return ans.not_measured(q, why)
    gbps, p, rd, wr = best
    s = p["params"]["size_bytes"]
    samples = [(rd + wr) / v for v in (p.get("values") or []) if v and v > 0]
    shown = float(np.median(samples)) if samples else gbps
    what = " + ".join(x for x in (f"{rd / s:g} read" if rd else "",
                                  f"{wr / s:g} written" if wr else "") if x)
    because = (f"{shown:.1f} GB/s: {p['arm']} at {format_size(s)}, throughput mode "
               f"({what} byte(s) per byte {'copied' if op == 'copy' else 'set'}, as its kernel "
               f"row declares)")
    details = [detail(f"{arm} ({op})", **e)
               for arm, e in sorted(per.items(), key=lambda kv: -kv[1]["value"])]
    return ans.measured(q, samples, because, value=gbps if not samples else None,
                        evidence=[ans.point_key(p)], details=details, seed=seed,
                        estimator="median GB/s of the fastest point's samples")


def answer_libc(op, points, pair_details):
    q = _q(op, "libc")
    for mode in modes_of(points, op):
        curves = point_curves(points, op, mode)
        if "libc" not in curves or len(curves) < 2:
            continue
        sizes = [s for s in comparable_sizes(curves) if s in curves["libc"]]
        if not sizes:
            continue
        logs, slow = [], []
        for s in sizes:
            here = {k: c[s] for k, c in curves.items() if s in c}
            b = min(here, key=lambda k: here[k][0])
            logs.append(math.log(curves["libc"][s][0] / here[b][0]))
            if "libc" not in acceptable(curves, s, CLEAR_WIN):
                slow.append((s, b, curves["libc"][s][0] / here[b][0]))
        runs = []          # consecutive measured sizes where libc is clearly slower
        pos = {s: i for i, s in enumerate(sizes)}
        for s, b, r in slow:
            if runs and pos[s] == pos[runs[-1]["max_size"]] + 1:
                runs[-1]["max_size"] = s
                runs[-1]["worst"] = max(runs[-1]["worst"], r)
                runs[-1]["best"].add(b)
            else:
                runs.append({"min_size": s, "max_size": s, "worst": r, "best": {b}})
        details = [detail(f"libc slower {format_size(r['min_size'])}–"
                          f"{format_size(r['max_size'])} ({mode})", kind="range",
                          mode=mode, value=r["worst"], unit="ratio", ci=None,
                          min_size=r["min_size"], max_size=r["max_size"],
                          faster=sorted(r["best"])) for r in runs]
        g = math.exp(sum(logs) / len(logs))
        if runs:
            where = "; ".join(f"{format_size(r['min_size'])}–{format_size(r['max_size'])} "
                              f"(up to x{r['worst']:.2f}, {'/'.join(sorted(r['best']))} faster)"
                              for r in runs[:4]) + (f"; {len(runs) - 4} more" if len(runs) > 4 else "")
            because = (f"libc {_OP_NAMES[op]} takes x{g:.2f} the time of the fastest strategy "
                       f"(geometric mean over {len(sizes)} sizes, {mode}); clearly slower at "
                       f"{where}")
        else:
            because = (f"libc {_OP_NAMES[op]} is the fastest or tied with it at every one of "
                       f"{len(sizes)} sizes ({mode}; x{g:.2f} the fastest's time on geometric "
                       f"mean)")
        return ans.Answer(q.id, MEASURED, because, value=g, details=details + pair_details,
                          estimator="geometric mean of median ratios over the sizes measured")
    return ans.not_measured(q, f"libc and another {op} strategy were not both measured")


def analyze_points(points, machine, params, traffic=row_traffic, seed=0):
    """The answers of one copy run, from its point dicts (pure but for the
    kernel rows' traffic, looked up through `traffic`)."""
    flags = string_flags(machine)
    small_max = (params or {}).get("small_max", 256)
    out = []
    for op in OPS:
        if not any((p.get("params") or {}).get("op") == op for p in points):
            continue
        owned = {"best": [], "rep": [], "nt": [], "libc": []}
        for mode in modes_of(points, op):
            for pair in pair_crossovers(point_curves(points, op, mode), op):
                owned[_pair_owner(op, pair["a"], pair["b"])].append(
                    _pair_detail(op, mode, pair).updated(flags=flags))
        rep = STRATEGIES[op][0]
        out.append(answer_step(op, points, small_max, flags, seed=seed))
        out.append(answer_best(op, points, owned["best"]))
        out.append(_envelope_answer(_q(op, "rep"), op, points, rep, LOOPS, "the best loop",
                                    owned["rep"], flags))
        out.append(_envelope_answer(_q(op, "nt"), op, points, "nt", (rep, "libc"),
                                    f"{rep} and libc", owned["nt"], {}))
        out.append(answer_peak(op, points, traffic, seed=seed))
        out.append(answer_libc(op, points, owned["libc"]))
    return out


def ranges_from_document(doc, op, mode, baseline=False):
    """The best-strategy ranges of one op and mode as the copy analysis gave
    them in a result document (its answer's details), computed by the same
    function from the points when the document has no answers (schema 1)."""
    qid = f"copy.{_QNAME[op]['best']}"
    for a in doc.get("answers") or []:
        if a.get("question") != qid:
            continue
        for d in a.get("details") or []:
            if d.get("kind") == "ranges" and d.get("mode") == mode:
                return [dict(r) for r in d["baseline_ranges" if baseline else "ranges"]]
        return []
    return strategy_ranges(doc.get("points") or [], op, mode,
                           BASELINE if baseline else None)


def string_flags(machine):
    flags = (machine or {}).get("flags") or {}
    return {k: flags.get(k) for k in STRING_FLAGS}


def _flag_text(flags):
    return ", ".join(f"{k.upper()} {'yes' if v else ('no' if v is not None else '?')}"
                     for k, v in flags.items())


@register
class Copy(Experiment):
    name = "copy"
    order = 30
    title = "Copy and set strategies vs size"
    question = ("Where does rep movsb/stosb beat store loops, vector loops, libc and "
                "non-temporal stores on this CPU, in throughput and in latency?")
    seeds = ("002",)
    questions = QUESTIONS
    arms = tuple(dict.fromkeys(STRATEGIES["copy"] + STRATEGIES["set"]))
    params = [
        Param("ops", "list:str", ["copy", "set"], "operations to measure: copy (memcpy) and/or set "
              "(memset)", "copy", choices=OPS),
        Param("modes", "list:str", ["throughput", "latency", "chained"],
              "timing modes: throughput (back to back), latency (lfence after each call), chained "
              "(next call's addresses depend on the last byte written)", "throughput,chained",
              choices=tuple(MODES)),
        Param("strategies", "str", "all",
              "strategies to compare (names without the op prefix, comma-separated) or all "
              "(every one this CPU supports)", "rep_movsb,rep_stosb,gpr_unrolled,libc"),
        Param("small_max", "size", 256, "every size up to this is in the fine part of the sweep, "
              "bytes", "512", minimum=16, maximum=65536),
        Param("small_step", "int", 1, f"step of the fine part in bytes (sizes 1..{ALWAYS_FINE} are "
              "always measured)", "8", minimum=1, maximum=4096),
        Param("per_octave", "int", 4, "sizes per doubling above small_max (geometric)", "2",
              minimum=1, maximum=32),
        Param("sparse_from", "size", SPARSE_FROM, SPARSE_FROM_HELP, "0", minimum=0),
        Param("max_size", "size", "auto", "largest size, bytes; auto = a footprint of 2x the "
              "last-level cache: 2x it for set, 1x for copy (source and destination; bounded by "
              "free memory)", "64M"),
        Param("nt_min_size", "size", 4096, "smallest size timed for the non-temporal strategy "
              "(below a few lines NT stores only add an sfence wait), bytes", "1K", minimum=1),
        Param("latency_max_size", "size", 65536, "largest size timed in the latency and chained "
              "modes (above it a fence or a dependency costs nothing measurable), bytes", "16K",
              minimum=1),
        Param("value", "int", 0x5A, "byte written by set (non-zero: zero stores can be "
              "eliminated by the hardware, seed 000)", "0", minimum=0, maximum=255),
        Param("src_offset", "int", 0, "source start past a page boundary, bytes", "3",
              minimum=0, maximum=4095),
        Param("dst_offset", "int", 0, "destination start past a page boundary, bytes", "1",
              minimum=0, maximum=4095),
        Param("refine", "bool", True, "add fine sizes inside each crossover, range boundary and "
              "step found", "false"),
        Param("refine_steps", "int", 6, "sizes added inside each bracket by refine", "3",
              minimum=1, maximum=64),
        Param("verify_max_size", "size", 4096, "kernels are checked byte-exact for every size "
              "up to this and 64 misalignments before timing, bytes", "1K", minimum=0,
              maximum=1 << 20),
    ]
    plots = (
        # GB/s (size / time per call) over size, linear: the strategy on top
        # is the fastest, and a crossover is where two curves cross
        PlotSpec("calls", "GB/s vs size", series=("arm",), facets=("op", "mode"),
                 facet_order=_PLOT_ORDER, facet_title="{op}, {mode}: GB/s vs size", size_x=True,
                 rate_of="size_bytes", xlabel="{op} size (bytes)",
                 ylabel="GB/s (size / time per call)",
                 marks=_STEP_MARKS + tuple(
                     Mark(f"copy.{_QNAME[op][role]}", details=True,
                          where={"kind": "envelope", "verdict": DETECTED, "op": op},
                          facet=("mode",), only={"op": op}, label="{label_head}: {x}",
                          colour="purple", style="--", label_y=0.5)
                     for op in ("copy", "set") for role in ("rep", "nt"))),
        PlotSpec("zoom", "GB/s, small sizes (linear)", series=("arm",),
                 facets=("op", "mode"), facet_order=_PLOT_ORDER,
                 facet_title="{op}, {mode}: GB/s up to 512 B", x_max=512, xlim=(0, 520),
                 rate_of="size_bytes", xlabel="{op} size (bytes), linear, up to 512 B",
                 ylabel="GB/s (size / time per call)", marks=_STEP_MARKS),
    )

    presets = {
        # quick stops at 32 MiB: larger copies take tens of ms per call, so most
        # samples on a shared machine see a context switch and are retaken
        # four sizes per doubling up to 64 KiB (one above): glibc switches
        # memcpy/memset between its vector loops and rep movsb/stosb at a
        # few KiB (x86_rep_movsb_threshold/x86_rep_stosb_threshold; with FSRM
        # 2112 B, as `ld.so --list-diagnostics` shows), and its tunables move
        # that switch within 2-64 KiB; with one size per doubling a path
        # change over 2.1-4 KiB fell between two points.  These sizes are
        # cheap (tens of ns a call).
        "quick": {"modes": "throughput", "small_step": 8, "per_octave": 4, "sparse_from": "64K",
                  "samples": 5, "min_sample_ms": 0.2, "refine_steps": 3, "max_size": "32M"},
        # the fine part every 4 B (1-16 B every size): at every size it was
        # 256 sizes x 3 modes x 2 ops of ~8 strategies, about half of a full
        # copy replica; refine still adds every
        # size inside the rep step and three inside each range boundary
        # arm_seconds 0.3: from 64 MiB a call lasts 10-150 ms, so an arm
        # takes 3-4 samples a cell there (the replicas give the CI)
        # 7 samples: with 5 the nt crossover's bracket (the sizes each side
        # where the CIs are disjoint) widened to 0.8-64 MiB in two replicas
        # of three, against 1.0-1.75 MiB with 7 (docs/machine-notes.md)
        "full": {"samples": 7, "min_sample_ms": 0.2, "per_octave": 2, "refine_steps": 3,
                 "small_step": 4, "arm_seconds": 0.3},
    }

    # -- plan --
    def strategies(self, params, machine, op):
        """The arms of `op` selected by params and supported by this CPU."""
        from ...lab.core import kernel_table
        rows = kernel_table()
        want = params["strategies"]
        names = [s.strip() for s in str(want).split(",") if s.strip()]
        known = set(STRATEGIES["copy"]) | set(STRATEGIES["set"])
        if not names:
            raise ParamError("strategies: give names or 'all'")
        if names != ["all"]:
            bad = [n for n in names if n not in known]
            if bad:
                raise ParamError(f"strategies: unknown {', '.join(bad)}; known: "
                                 f"{', '.join(sorted(known))} or all")
        chosen = list(STRATEGIES[op]) if names == ["all"] else \
            [n for n in STRATEGIES[op] if n in names]
        out = []
        for arm in chosen:
            row = rows.get(kernel_name(op, arm))
            if row is None:
                raise MemfxError(f"the C core lacks kernel {kernel_name(op, arm)}")
            if not row.supported:
                if names != ["all"]:
                    raise ParamError(f"strategies: {arm} needs {row.isa}, which this CPU lacks")
                continue
            out.append(arm)
        return out

    def max_bytes(self, params, machine, op="set"):
        """The largest size of `op`: max_size, or auto = a footprint of 2x the
        LLC -- a copy touches its source and its destination, so half that."""
        avail = (machine.get("memory") or {}).get("available_bytes") or (4 << 30)
        if params["max_size"] != "auto":
            hi = params["max_size"]
            # source + destination, plus the previous cell's pair not yet unmapped
            if 4 * hi > avail * 0.8:
                raise ParamError(f"max_size {format_size(hi)} does not fit: a copy needs 2x and "
                                 f"{format_size(avail)} is available")
            return hi
        footprint = 2 * Fingerprint.of(machine).llc_bytes
        return int(min(footprint // FOOTPRINT_PER_BYTE[op], avail * 0.8 / 4))

    def sizes(self, params, machine, op="set"):
        small = small_sizes(params["small_max"], params["small_step"])
        hi = self.max_bytes(params, machine, op)
        if hi < 1:
            raise ParamError("max_size must be at least 1 byte")
        small = [s for s in small if s <= hi]
        lo, sparse = params["small_max"], params.get("sparse_from") or 0   # runs stored before it
        if not sparse or sparse >= hi:
            return small + geometric_sizes(lo, hi, params["per_octave"])
        if sparse <= lo:
            return small + geometric_sizes(lo, hi, 1)
        return small + geometric_sizes(lo, sparse, params["per_octave"]) + \
            geometric_sizes(sparse, hi, 1)

    def plan(self, params, machine):
        points = []
        for op in params["ops"]:
            arms = self.strategies(params, machine, op)
            if not arms:
                continue
            sizes = self.sizes(params, machine, op)
            for mode in params["modes"]:
                for s in sizes:
                    if mode != "throughput" and s > params["latency_max_size"]:
                        continue
                    points += [Point(arm, {"op": op, "size_bytes": s, "mode": mode}) for arm in arms
                               if arm != "nt" or s >= params["nt_min_size"]]
        if not points:
            raise ParamError("the parameters select no strategy this CPU supports")
        return points

    def estimate_seconds(self, params, machine):
        pts = self.plan(params, machine)
        per_sample = params["min_sample_ms"] / 1000
        total = 0.0
        for p in pts:
            traffic = p.params["size_bytes"] * (2 if p.params["op"] == "copy" else 1)
            call = traffic / 10e9      # ~10 GB/s once out of cache
            total += params["samples"] * max(per_sample, call) + 4 * call + 0.002
        return total * 1.2 + 3

    # -- one trial --
    def _buffers(self, lab, size, params):
        """Source and destination of `size` bytes, shared by the arms of a cell
        (the same pages for every strategy), src filled with non-zero bytes."""
        key = (size, params["src_offset"], params["dst_offset"])
        cached = lab.cache.get("copy")
        if cached and cached[0] == key and not cached[1].buffer.closed \
                and not cached[2].buffer.closed:
            return cached[1], cached[2]
        n = max(size, 1)
        src = lab.buffer(n, align=4096, offset=params["src_offset"])
        dst = lab.buffer(n, align=4096, offset=params["dst_offset"])
        check_no_overlap(src.address, dst.address, size)
        fill_pattern(src.buffer, src.offset, n)
        lab.cache["copy"] = (key, src, dst)
        return src, dst

    def prepare(self, point, params, lab):
        op, size, mode = point.params["op"], point.params["size_bytes"], point.params["mode"]
        if mode not in MODES:
            raise ParamError(f"mode: unknown {mode!r}")
        src, dst = self._buffers(lab, size, params)
        # Two untimed calls bring the buffers into the caches and TLBs (one
        # from ONE_WARM_CALL_FROM, see there); the
        # calibration that follows runs the kernel for >= min_sample_ms more,
        # which also settles the wide-vector power licence before sampling.
        # difference=False: each sample is calibrated to >= min_sample_ms, i.e.
        # thousands of calls for small sizes, so the fixed cost of one timed
        # run (~50 ns of fences and rdtsc) is below 0.1 % of a sample; the
        # N/2N difference would only add the noise of a subtraction here.
        return Trial(kernel_name(op, point.arm), size=size, dst=dst,
                     src=src if op == "copy" else None, value=params["value"],
                     aux=MODES[mode], metric="time", difference=False,
                     warmup=1 if size >= ONE_WARM_CALL_FROM else 2)

    def verify(self, lab, params):
        """Every planned kernel, byte-exact against a reference, before timing:
        all sizes 0..verify_max_size with 64 src x rotating dst misalignments
        (all 64 x 64 pairs are met across sizes), in each planned timing mode."""
        for op in params["ops"]:
            for arm in self.strategies(params, {}, op):
                kernel = kernel_name(op, arm)
                err = lab.verify_copy(kernel, params["verify_max_size"], 64, False, 0, 1)
                for mode in params["modes"]:
                    if err is None and MODES[mode]:
                        err = lab.verify_copy(kernel, min(params["verify_max_size"], 300),
                                              64, False, MODES[mode], 3)
                if err is not None:
                    raise MemfxError(f"kernel verification failed: {err}")

    # -- refinement --
    def refine(self, data, params, machine):
        if not params["refine"]:
            return []
        have = {(p["arm"], json_key(p["params"])) for p in data.points}
        wanted = {}      # (op, mode, size) -> set of arms
        sparse = params.get("sparse_from") or 0

        def add(op, mode, lo, hi, arms):
            for s in fill_sizes(lo, hi, params["refine_steps"]):
                wanted.setdefault((op, mode, s), set()).update(arms)
        for op in params["ops"]:
            for mode in params["modes"]:
                curves = point_curves(data.points, op, mode)
                if not curves:
                    continue
                step_arm = STRATEGIES[op][0]
                if step_arm in curves:
                    st = find_step(point_values(data.points, op, mode, step_arm),
                                   params["small_max"])
                    if st:   # one arm only: every size of the bracket is cheap
                        for s in fill_sizes(st.low, st.high, 32):
                            wanted.setdefault((op, mode, s), set()).add(step_arm)
                ranges = best_ranges(curves, SIMPLICITY[op])
                for r0, r1 in zip(ranges[:-1], ranges[1:]):
                    lo, hi = r0["max_size"], r1["min_size"]
                    if sparse and lo >= sparse:
                        # past sparse_from every arm streams from memory: a
                        # range boundary there moved from run to run, and
                        # refining it timed every arm at three of the dearest
                        # sizes (9 s of a full replica); the crossings of the
                        # key arms below (nt, libc, rep) are still refined
                        continue
                    add(op, mode, lo, hi, [k for k, c in curves.items()
                                           if min(c) <= lo and max(c) >= hi])
                key_arms = {STRATEGIES[op][0], STRATEGIES[op][1], "libc", "nt"}
                order = [a for a in STRATEGIES[op] if a in curves]
                for i, a in enumerate(order):
                    for b in order[i + 1:]:
                        if a not in key_arms and b not in key_arms:
                            continue
                        for c in find_crossovers(curves[a], curves[b], a, b):
                            add(op, mode, c.low, c.high, [a, b])
        out = []
        for (op, mode, s), arms in sorted(wanted.items()):
            for arm in sorted(arms, key=STRATEGIES[op].index):
                prm = {"op": op, "size_bytes": s, "mode": mode}
                if (arm, json_key(prm)) not in have:
                    out.append(Point(arm, prm))
        return out

    # -- analysis --
    def analyze(self, data):
        return analyze_points(data.points, data.machine, data.params)


def json_key(params):
    import json
    return json.dumps(params, sort_keys=True)
