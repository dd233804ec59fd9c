"""Assoc's analysis: the ways and sets read off the stride curves (where a
stride's time jumps past its lines' capacity) and the matrix answer, as
methods of AssocAnswers, which Assoc inherits (a mixin: `self` is the
registered experiment), and the pure helpers capacity and ways_and_sets.
The protocol (__init__.py) re-exports every name."""
from __future__ import annotations

import math

import numpy as np

from ...model import answers as ans
from ...model.details import detail
from ...model.machine_view import Fingerprint, level_name
from ...model.units import format_size

LINE = 64


def capacity(lines, ns, threshold):
    """The largest line count served below `threshold` ns: the point before
    the first of two consecutive points above it (one stray sample does not
    end a plateau); the largest count measured when none is.  Returns
    (capacity, saturated): saturated = False when no point crossed."""
    order = np.argsort(lines)
    m = np.asarray(lines)[order]
    y = np.asarray(ns, float)[order]
    for i in range(len(m)):
        if y[i] > threshold and (i + 1 == len(m) or y[i + 1] > threshold):
            return (int(m[i - 1]) if i else 0), True
    return int(m[-1]), False


def ways_and_sets(curves, threshold, line=LINE):
    """From {stride: (lines, ns)}: (ways, way size in bytes, sets, per-stride
    capacities).  The capacity halves with each doubling of the stride until
    the stride reaches the way size, and stays there: ways = the capacity at
    the first stride that crossed whose next larger stride keeps it (the
    way size); the smallest capacity over the strides where none does.  A
    fall past that plateau is not this cache's ways: lines a larger way size
    apart (the L2's, which huge pages line up) share a set of the next level
    too (docs/machine-notes.md, "L1d ways at the L2's way size").  None
    where the curves do not say."""
    caps = {s: capacity(x, y, threshold) for s, (x, y) in sorted(curves.items()) if len(x) >= 2}
    crossed = {s: c for s, (c, sat) in caps.items() if sat and c > 0}
    if not crossed:
        return None, None, None, caps
    strides = sorted(crossed)
    plateau = [s for s, t in zip(strides, strides[1:]) if crossed[s] == crossed[t]]
    if plateau:
        way_size = plateau[0]
        ways = crossed[way_size]
    else:
        ways = min(crossed.values())
        way_size = min(s for s, c in crossed.items() if c == ways)
    # the way size is only pinned when a stride below it shows a larger capacity
    smaller = [s for s in caps if s < way_size]
    sets = way_size // line if smaller else None
    return ways, way_size, sets, caps


class AssocAnswers:
    """The answers of the Assoc experiment (a mixin: `self` is the
    registered experiment, whose declared questions they answer)."""

    # -- analysis --
    def analyze(self, data):
        out = self._stride_answers(data)
        out.append(self._matrix_answer(data))
        return out

    def _stride_answers(self, data):
        qs = [self.declared(n) for n in ("l1_ways", "l1_sets", "l2_ways", "l2_sets")]
        pts = [p for p in data.points if p["params"].get("part") == "stride" and p["n"]
               and p["median"]]
        refs = {p["params"]["level"]: p for p in data.points
                if p["params"].get("part") == "ref" and p["n"] and p["median"]}
        one = [p["median"] for p in pts if p["params"]["lines"] == 1]
        if not pts or not one:
            return [ans.not_measured(q, "the stride part was not measured (or not at 1 line)")
                    for q in qs]
        lat = {"l1": float(np.median(one))}
        lat.update({k: v["median"] for k, v in refs.items()})
        curves = {}
        for p in pts:
            c = curves.setdefault(p["params"]["stride_bytes"], ([], []))
            c[0].append(p["params"]["lines"])
            c[1].append(p["median"])
        line = data.machine.get("line_bytes") or LINE
        shares = [p["counters"].get("huge_page_share") for p in pts
                  if (p.get("counters") or {}).get("huge_page_share") is not None]
        out = []
        for level, (qw, qs_), lo, hi in ((1, qs[:2], "l1", "l2"), (2, qs[2:], "l2", "beyond_l2")):
            if lo not in lat or hi not in lat:
                reason = f"needs the {hi} reference chase"
                out += [ans.not_measured(qw, reason), ans.not_measured(qs_, reason)]
                continue
            threshold = math.sqrt(lat[lo] * lat[hi])
            ways, way_size, sets, caps = ways_and_sets(curves, threshold, line)
            sysfs = Fingerprint.of(data.machine).cache(level)
            details = [detail(f"stride {format_size(s)}", stride_bytes=s,
                              value=c, unit="lines", ci=None,
                              crossed=sat) for s, (c, sat) in caps.items()]
            details.append(detail("threshold", value=threshold, unit="ns",
                                  ci=None, **{f"{lo}_ns": lat[lo]},
                                  **{f"{hi}_ns": lat[hi]}))
            name = level_name(level)
            if ways is None:
                reason = (f"no stride's chase of up to {max(max(c[0]) for c in curves.values())} "
                          f"lines left the {name} (threshold {threshold:.2f} ns)")
                if level == 2:
                    reason += ("; lines a way-size apart still spread over many L2 sets, so the "
                               "physical index bits above the page offset do not follow the "
                               "virtual ones (no huge pages, or a VM host that maps guest huge "
                               "pages with 4 KiB pages)")
                    if shares:
                        reason += f"; huge-page share {min(shares):.0%}..{max(shares):.0%}"
                out += [ans.not_measured(qw, reason), ans.not_measured(qs_, reason)]
                continue
            hp = (f"; huge-page share {min(shares):.0%}..{max(shares):.0%}"
                  if level == 2 and shares else "")
            fewer = [(st, c) for st, (c, sat) in caps.items()
                     if st > way_size and sat and 0 < c < ways]
            if fewer:
                st, c = min(fewer, key=lambda x: x[1])
                hp += (f"; at a stride of {format_size(st)} only {c} stay: lines that far "
                       f"apart share a set of the next level too, not counted as ways")
            rep_w = sysfs.ways if sysfs else None
            # the next count measured past the ways at the way size: what
            # did not stay (the grid may skip counts)
            beyond = min((m for m in curves[way_size][0] if m > ways), default=ways + 1)
            # the strides that kept the ways: all from the way size on, or up
            # to a fall that is another structure's (said below)
            first_fall = min((st for st, _ in fewer), default=None)
            kept = [st for st, (c, sat) in caps.items() if st >= way_size and c == ways
                    and (first_fall is None or st < first_fall)] or [way_size]
            span = (f"at strides of {format_size(way_size)} and more" if not fewer else
                    f"at strides of {format_size(way_size)}" if max(kept) == way_size else
                    f"at strides of {format_size(way_size)} to {format_size(max(kept))}")
            out.append(ans.Answer(
                qw.id, ans.MEASURED,
                f"{span}, {ways} lines stay in the "
                f"{name} and {beyond} do not (time per load crosses {threshold:.2f} ns, between "
                f"the {name}'s {lat[lo]:.2f} ns and the next level's {lat[hi]:.2f} ns); sysfs "
                f"says {rep_w if rep_w else 'nothing'}" + hp,
                value=float(ways), evidence=ans.evidence_keys(
                    [p for p in pts if p["params"]["stride_bytes"] == way_size]),
                details=details + [detail("sysfs ways_of_associativity", value=rep_w,
                                          unit="ways", ci=None)],
                estimator="capacity at the way-size stride: the line count before two "
                          "consecutive points above the latency midpoint"))
            rep_s = sysfs.sets if sysfs else None
            if sets is None:
                out.append(ans.not_measured(qs_, f"the smallest stride measured "
                                                  f"({format_size(min(curves))}) already holds "
                                                  f"only {ways} lines: the way size is at most "
                                                  f"that; measure smaller strides"))
                continue
            out.append(ans.Answer(
                qs_.id, ans.MEASURED,
                f"the {name} capacity falls to {ways} lines from a stride of "
                f"{format_size(way_size)} on, so a way spans {format_size(way_size)}: "
                f"{sets} sets of {line} B lines; sysfs says {rep_s if rep_s else 'nothing'}" + hp,
                value=float(sets), evidence=ans.evidence_keys(
                    [p for p in pts if p["params"]["stride_bytes"] in (way_size, way_size // 2)]),
                details=details + [detail("sysfs number_of_sets", value=rep_s,
                                          unit="sets", ci=None)],
                estimator="way size (smallest stride whose capacity equals the ways) / line"))
        return out

    def _matrix_answer(self, data):
        q = self.declared("leading_dimension")
        by = {p["arm"]: p for p in data.points if p["params"].get("part") == "matrix"
              and p["n"] and p["median"]}
        if "ld_pow2" not in by or "ld_padded" not in by:
            return ans.not_measured(q, "needs both leading dimensions of the matrix part")
        a, b = by["ld_pow2"], by["ld_padded"]
        n = a["params"]["n"]
        e = ans.effect(q, a["values"], b["values"], "",
                       evidence=[ans.point_key(a), ans.point_key(b)])

        def per(p):
            return p["median"] / n
        e.details = [detail(f"ld = {p['params']['ld']}", ld=p["params"]["ld"],
                            value=per(p), unit="ns per element", ci_low=p["ci_low"] / n,
                            ci_high=p["ci_high"] / n) for p in (a, b)]
        verdict = ("a power-of-two leading dimension is slower: pad the rows"
                   if e.verdict == "detected" and e.value > 1 else
                   "no slowdown to speak of here" if e.verdict != "detected" else
                   "the padded matrix is the slower one here")
        e.because = (f"summing columns of a {n}x{n} double matrix takes {per(a):.2f} ns per "
                     f"element with ld = {a['params']['ld']} and {per(b):.2f} ns with ld = "
                     f"{b['params']['ld']} ({e.value:.2f}x); {verdict}")
        return e
