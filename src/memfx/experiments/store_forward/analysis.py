"""Store forwarding's analysis: analyze and the answers it gathers (the
28- vs 32-byte entry, the failing sizes, the fix in registers, the matrix,
the split penalty, blocked loads per entry), as methods of
StoreForwardAnswers, which StoreForward inherits (a mixin: `self` is the
registered experiment); the pure helpers they rest on (size ranges, cycles
per ns, a bootstrapped difference of medians); and the classification of
sizes and cells by code path (entry_paths, matrix_classes) that the answers
judge against.  The protocol (__init__.py) re-exports every name."""
from __future__ import annotations

import numpy as np

from ...model import stats
from ...model.answers import (
    Answer,
    effect,
    evidence_keys,
    measured,
    not_measured,
    pooled_values,
)
from ...model.details import detail
from ...model.findings import DETECTED, INCONCLUSIVE, NOT_DETECTED, effect_verdict, threshold
from ...model.units import format_estimate, format_value
from .kernels import (
    cell_kind,
    copy_shape,
    shape_overlaps,
)

SEED_ENTRY, SEED_REFERENCE = 28, 32

# A round trip that takes at least this many times the forwarding level is a
# forwarding failure.  Failures cost about 2-4x a forwarded round trip on
# recent Intel and AMD cores (Agner Fog, microarchitecture guide, "store
# forwarding stalls"); a 50 % rise is far above noise and above the 1-2 cycles
# that register-class moves or vector widths add.
FAIL_RATIO = 1.5


# ---- analysis helpers (pure) ---------------------------------------------

def as_ranges(sizes):
    """[3, 5, 6, 7, 9] -> '3, 5-7, 9'."""
    out, run = [], []
    for s in sorted(sizes):
        if run and s == run[-1] + 1:
            run.append(s)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [s]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ", ".join(out)


def cycles_per_ns(point):
    """The point's est. cycles per ns (its calibration), or None."""
    if point.get("cycles_est") and point.get("median"):
        return point["cycles_est"] / point["median"]
    return None


def median_difference(a, b, n_boot=2000, seed=0):
    """median(a) - median(b) with a percentile bootstrap CI (both resampled;
    stats.median_difference at the named ci_level)."""
    return stats.median_difference(a, b, threshold("ci_level"), n_boot, seed)


# ---- classification by path (pure) ----------------------------------------
#
# A size or cell is judged against the cells that take the same code path:
# an entry copied with 16-byte moves against the other sizes copied with
# 16-byte moves, never against 4- or 8-byte general-register copies, which
# recent AMD cores may not route through the store buffer at all (memory
# renaming: a same-address, same-size store/load pair completes in about
# one cycle; AMD Software Optimization Guide for family 19h, "Memory
# Renaming"/"Store-to-Load Forwarding").  Mixing the paths compared a
# 9-cycle vector forward with a 1-cycle renamed GPR pair and called the
# vector sizes failures.

def move_width(size, widest=16):
    """Width of the moves copy_shape uses for `size` bytes (its code path)."""
    shape = copy_shape(size, widest)
    return shape[0][1] if shape else 0


def _ns_to_cycles(points):
    """Median est. cycles per ns over the points that carry a calibration, or None."""
    cpn = [c for c in (cycles_per_ns(p) for p in points) if c]
    return float(np.median(cpn)) if cpn else None


def entry_paths(by_size, widest, fail_ratio=FAIL_RATIO):
    """Which entry sizes fail to forward, judged per move width.

    `by_size`: {entry size: point (dict with "values", "median")} of the
    dependent copy arm for one `widest`.  Within one move width the sizes
    whose moves tile the entry (no two moves overlap: 16, 32, 48, 64 with
    16-byte moves) are the reference: every load of their copy reads
    exactly one earlier store of its own size and address, which x86 cores
    forward.  Tiling sizes more than `fail_ratio` slower than the fastest
    of them are left out of the reference and judged like the others.  Each
    other size is compared with the pooled reference samples (ratio of medians, CI):
    it fails when the ratio is >= `fail_ratio` with its CI above
    1 + effect_min, forwards when the whole CI is below `fail_ratio`, else
    it is uncertain.

    Returns one dict per move width measured, narrowest first:
    {move_bytes, widest, sizes, forwarding, failing, uncertain, by_size:
    {size: {ratio, ci_low, ci_high, status, extra_cycles}}, ratio, ci_low,
    ci_high (failing pooled vs reference), reference_cycles,
    failing_cycles, penalty_cycles, compared (bool)}."""
    e = threshold("effect_min")
    groups = {}
    for s, p in by_size.items():
        if p.get("values"):
            groups.setdefault(move_width(s, widest), []).append(s)
    out = []
    for m in sorted(groups):
        sizes = sorted(groups[m])
        pts = [by_size[s] for s in sizes]
        cpn = _ns_to_cycles(pts)
        tiling = [s for s in sizes if not shape_overlaps(copy_shape(s, widest))]
        g = {"points": evidence_keys(pts), "move_bytes": m, "widest": widest, "sizes": sizes, "forwarding": [],
             "failing": [], "uncertain": [], "by_size": {}, "ratio": None, "ci_low": None,
             "ci_high": None, "reference_cycles": None, "failing_cycles": None,
             "penalty_cycles": None, "compared": False}
        if tiling:
            fastest = min(by_size[s]["median"] for s in tiling)
            ref = [s for s in tiling if by_size[s]["median"] < fail_ratio * fastest]
            g["forwarding"] = list(ref)
            ref_vals = pooled_values([by_size[s] for s in ref])
            ref_med = float(np.median(ref_vals))
            for s in sizes:
                if s in ref:
                    g["by_size"][s] = {"status": "forwards", "reference": True}
                    continue
                r = stats.ratio_of_medians(by_size[s]["values"], ref_vals)
                if r["ratio"] >= fail_ratio and r["ci_low"] > 1 + e:
                    status = "fails"
                elif r["ci_high"] < fail_ratio:
                    status = "forwards"
                else:
                    status = "uncertain"
                {"fails": g["failing"], "forwards": g["forwarding"],
                 "uncertain": g["uncertain"]}[status].append(s)
                g["compared"] = True
                g["by_size"][s] = {
                    "status": status, "ratio": r["ratio"], "ci_low": r["ci_low"],
                    "ci_high": r["ci_high"],
                    "extra_cycles": ((by_size[s]["median"] - ref_med) * cpn) if cpn else None}
            g["forwarding"].sort()
            g["uncertain"].sort()
            if cpn:
                g["reference_cycles"] = ref_med * cpn
            if g["failing"]:
                fail_vals = pooled_values([by_size[s] for s in g["failing"]])
                r = stats.ratio_of_medians(fail_vals, ref_vals)
                g["ratio"] = r["ratio"]
                if min(r["n_a"], r["n_b"]) >= threshold("min_ci_samples"):
                    g.update(ci_low=r["ci_low"], ci_high=r["ci_high"])
                if cpn:
                    g["failing_cycles"] = float(np.median(fail_vals)) * cpn
                    g["penalty_cycles"] = g["failing_cycles"] - g["reference_cycles"]
        else:
            g["uncertain"] = [s for s in sizes if shape_overlaps(copy_shape(s, widest))]
            for s in g["uncertain"]:
                g["by_size"][s] = {"status": "not compared: no size copied with the same "
                                             "moves that tile the entry was measured"}
            # single moves (1 byte; or only tiling sizes measured) have nothing to fail
            g["forwarding"] = []
        out.append(g)
    return out


def contained_rule(store, load, offset):
    """For a smaller load inside its store, the rule that decides forwarding on
    common cores (Agner Fog, microarchitecture guide, "store forwarding"): a
    small load inside one aligned 8 bytes or crossing an 8-byte boundary, a
    vector load at a multiple of 16 or elsewhere, a load from the upper half
    of a 64-byte store.  None for other cells."""
    if cell_kind(store, load, offset) != "contained" or load >= store:
        return None
    if store == 64 and offset >= 32:
        return "load from the upper half of a 64-byte store"
    if load <= 8:
        return ("small load crossing an 8-byte boundary"
                if offset // 8 != (offset + load - 1) // 8
                else "small load inside one aligned 8 bytes")
    return "vector load at a multiple of 16" if offset % 16 == 0 else \
        "vector load at another offset"


def store_class(store):
    """'gpr' for general-register stores (<= 8 bytes), 'vector' above."""
    return "gpr" if store <= 8 else "vector"


def matrix_classes(cells, fail_ratio=FAIL_RATIO):
    """Which matrix cells fail to forward, judged per path.

    `cells`: {(store, load, offset): point}.  A load that reads bytes its
    store did not write (cell_kind 'partial') cannot be forwarded by any x86
    core (the load must lie inside the store: Intel Optimization Reference
    Manual, "Store Forwarding"; AMD Software Optimization Guide for family
    19h, "Store-to-Load Forwarding Restrictions"), so the partial cells of a
    path give its failure level: loads of the same width from stores of the
    same class (general register or vector), falling back to the same load
    width, then to all partial cells.  A cell forwards when even the top of
    its CI is `fail_ratio` times faster than that level, fails when even the
    bottom of its CI is within `fail_ratio` of it, and is uncertain between.
    A level from the path's own cells, not a split of all cells into two
    levels: a renamed 4-byte pair at 1 cycle, a vector forward at 9 and a
    failure at 20 are three levels, and the two-level split put the 9-cycle
    forwards with the failures.

    Returns ({cell: status}, {cell: failure level ns or None})."""
    partial = {c: p for c, p in cells.items() if cell_kind(*c) == "partial" and p.get("median")}

    def level(pred):
        v = [p["median"] for c, p in partial.items() if pred(c)]
        return float(np.median(v)) if v else None

    status, levels = {}, {}
    for c, p in cells.items():
        s, ld, _ = c
        f = (level(lambda x: x[1] == ld and store_class(x[0]) == store_class(s))
             or level(lambda x: x[1] == ld) or level(lambda x: True))
        levels[c] = f
        med = p.get("median")
        if f is None or not med:
            status[c] = "uncertain"
            continue
        hi = p.get("ci_high") or med
        lo = p.get("ci_low") or med
        if f / hi >= fail_ratio:
            status[c] = "forwards"
        elif f / max(lo, 1e-12) < fail_ratio:
            status[c] = "fails"
        else:
            status[c] = "uncertain"
    return status, levels

class StoreForwardAnswers:
    """The answers of the StoreForward experiment (a mixin: `self` is the
    registered experiment, whose declared questions they answer)."""

    # -- analysis --
    def analyze(self, data):
        copy_paths = self._copy_paths(data)
        out = [self._entry_28_vs_32(data, copy_paths), self._failing_sizes(data, copy_paths),
               self._fix_in_registers(data), self._matrix(data), self._split_penalty(data),
               self._blocked_per_entry(data)]
        return [a for a in out if a is not None]

    def _entry_point(self, data, arm, widest, size):
        pts = [p for p in data.select(arm, part="entry", widest=widest, entry_bytes=size)
               if p.get("values")]
        return pts[0] if pts else None

    def _widths(self, data):
        return sorted({p["params"]["widest"] for p in data.select(None, part="entry")})

    def _copy_paths(self, data):
        """{widest: entry_paths(...)} of the dependent copy arm."""
        out = {}
        for w in self._widths(data):
            by_size = {p["params"]["entry_bytes"]: p
                       for p in data.select("copy", part="entry", widest=w) if p.get("values")}
            if by_size:
                out[w] = entry_paths(by_size, w)
        return out

    @staticmethod
    def _status(paths, widest, size):
        for g in paths.get(widest, ()):
            if size in g["by_size"]:
                return g["by_size"][size]["status"]
        return None

    def _seed_width(self, widths):
        return SEED_WIDEST if SEED_WIDEST in widths else (min(widths) if widths else None)

    def _entry_28_vs_32(self, data, paths):
        q = self.declared("store_forward.entry_28_vs_32")
        widths = self._widths(data)
        details, chosen = [], None
        for w in widths:
            for arm in ENTRY_ARMS:
                a = self._entry_point(data, arm, w, SEED_ENTRY)
                b = self._entry_point(data, arm, w, SEED_REFERENCE)
                if not (a and b):
                    continue
                r = stats.ratio_of_medians(a["values"], b["values"])
                enough = min(r["n_a"], r["n_b"]) >= threshold("min_ci_samples")
                details.append(detail(
                    f"{arm}, moves of up to {w} B: {SEED_ENTRY} B "
                    f"({_moves(SEED_ENTRY, w)}) vs {SEED_REFERENCE} B "
                    f"({_moves(SEED_REFERENCE, w)})",
                    value=r["ratio"], unit="x",
                    ci_low=r["ci_low"] if enough else None,
                    ci_high=r["ci_high"] if enough else None,
                    verdict=effect_verdict(r["ratio"], r["ci_low"], r["ci_high"], r["n_a"],
                                           r["n_b"], band=q.no_effect_band()),
                    arm=arm, widest=w, cycles_28=a.get("cycles_est"),
                    cycles_32=b.get("cycles_est"),
                    points=evidence_keys([a, b])))
                if w == self._seed_width(widths) and arm != "registers" and (
                        chosen is None or arm == "append"):
                    chosen = (arm, w, a, b)
        if chosen is None:
            return not_measured(q, f"the sweep did not measure both {SEED_ENTRY}- and "
                                   f"{SEED_REFERENCE}-byte entries in the copy or append arm")
        arm, w, a, b = chosen
        where = {"append": "in the seed's append loop", "copy": "in dependent round trips",
                 "registers": "stored from registers"}[arm]
        ans = effect(q, a["values"], b["values"], "", evidence=evidence_keys([a, b]),
                     details=details, estimator=f"ratio of medians, {arm} arm, moves of up to "
                                                f"{w} B")
        # What this run measured about the two sizes' forwarding, in round trips.
        s28, s32 = self._status(paths, w, SEED_ENTRY), self._status(paths, w, SEED_REFERENCE)
        if s28 and s32:
            fwd = (f"; in this run's round trips {SEED_ENTRY} B {_status_words(s28)} and "
                   f"{SEED_REFERENCE} B {_status_words(s32)}")
        else:
            fwd = "; the dependent copy arm was not measured at both sizes (no forwarding verdict)"
        # no leading yes/no: the verdict is shown beside the sentence
        ans.because = (f"A {SEED_ENTRY}-byte entry ({_moves(SEED_ENTRY, w)}) costs "
                       f"{_x(ans)} a {SEED_REFERENCE}-byte one ({_moves(SEED_REFERENCE, w)}) "
                       f"{where}{fwd}")
        return ans

    def _failing_sizes(self, data, paths):
        q = self.declared("store_forward.failing_entry_sizes")
        if not paths:
            return not_measured(q, "the entry part (dependent copy arm) was not measured")
        details, texts = [], {}
        for w, groups in sorted(paths.items()):
            for g in groups:
                m = g["move_bytes"]
                if not g["compared"]:
                    continue
                fail, fwd, unc = g["failing"], g["forwarding"], g["uncertain"]
                if fail and g["penalty_cycles"] is not None:
                    text = (f"{m}-byte moves: {as_ranges(fail)} ({g['failing_cycles']:.0f} vs "
                            f"{g['reference_cycles']:.0f} cycles for {as_ranges(fwd)})")
                elif fail:
                    text = (f"{m}-byte moves: {as_ranges(fail)} ({format_value(g['ratio'], 'x')} "
                            f"{as_ranges(fwd)})")
                else:
                    text = f"{m}-byte moves: none (vs {as_ranges(fwd)})"
                if unc:
                    text += f"; uncertain {as_ranges(unc)}"
                details.append(detail(
                    f"moves of {m} B (widest {w} B): " + (
                        f"{as_ranges(fail)} fail to forward" if fail else "none fails"),
                    value=g["ratio"], unit="x",
                    ci_low=g["ci_low"], ci_high=g["ci_high"],
                    verdict=DETECTED if fail else (INCONCLUSIVE if unc else NOT_DETECTED),
                    widest=w, move_bytes=m, sizes_measured=as_ranges(g["sizes"]),
                    failing_sizes=fail, forwarding_sizes=fwd, uncertain_sizes=unc,
                    reference_cycles=g["reference_cycles"],
                    failing_cycles=g["failing_cycles"],
                    penalty_cycles=g["penalty_cycles"],
                    fails_exactly_where_moves_overlap=sorted(fail) == sorted(
                        s for s in g["sizes"] if shape_overlaps(copy_shape(s, w))),
                    by_size={str(s): v for s, v in sorted(g["by_size"].items())},
                    points=g["points"]))
                texts.setdefault(w, []).append(text)
        if not details:
            return not_measured(q, "no move width had both a size whose moves overlap and a "
                                   "size whose moves tile the entry (the reference) measured")
        w0 = self._seed_width(list(paths))
        if w0 not in texts:         # the seed's widest compared nothing: the others
            w0 = min(texts)
        # the headline: the seed's path (16-byte moves) when it fails, else the
        # widest moves that do
        candidates = [g for g in paths[w0] if g["compared"] and g["failing"]]
        headline = next((g for g in candidates if g["move_bytes"] == SEED_WIDEST),
                        candidates[-1] if candidates else None)
        verdicts = [d["verdict"] for d in details if d["widest"] == w0]
        verdict = (DETECTED if DETECTED in verdicts else
                   INCONCLUSIVE if INCONCLUSIVE in verdicts else NOT_DETECTED)
        lead = {DETECTED: "Sizes that fail to forward",
                NOT_DETECTED: "No size fails to forward",
                INCONCLUSIVE: "No size clearly fails to forward, some are uncertain"}[verdict]
        # widest moves (the seed's path) first
        because = (f"{lead}, by move width, vs the sizes whose moves tile the entry (moves "
                   f"of up to {w0} B): " + "; ".join(reversed(texts[w0])))
        return Answer(question=q.id, verdict=verdict, because=because,
                      value=headline["ratio"] if headline else None,
                      ci_low=headline["ci_low"] if headline else None,
                      ci_high=headline["ci_high"] if headline else None,
                      evidence=[k for d in details for k in d["points"]], details=details,
                      estimator=("ratio of medians of the pooled failing sizes vs the pooled "
                                 "forwarding sizes of the same move width"
                                 + (f" ({headline['move_bytes']}-byte moves)" if headline
                                    else "")))

    def _fix_in_registers(self, data):
        q = self.declared("store_forward.fix_in_registers")
        widths = self._widths(data)
        w = self._seed_width(widths)
        a = self._entry_point(data, "registers", w, SEED_ENTRY) if w else None
        b = self._entry_point(data, "registers", w, SEED_REFERENCE) if w else None
        if not (a and b):
            return not_measured(q, f"the registers arm was not measured at both {SEED_ENTRY} "
                                   f"and {SEED_REFERENCE} bytes")
        details = []
        for arm in ("registers", "append", "copy"):
            x = self._entry_point(data, arm, w, SEED_ENTRY)
            y = self._entry_point(data, arm, w, SEED_REFERENCE)
            if x and y:
                details.append(detail(f"{arm}: {SEED_ENTRY} B vs {SEED_REFERENCE} B",
                                      value=float(np.median(x["values"]) / np.median(y["values"])),
                                      unit="x", ci=None, arm=arm,
                                      ns_28=x["median"], ns_32=y["median"],
                                      cycles_28=x.get("cycles_est"), cycles_32=y.get("cycles_est"),
                                      points=evidence_keys([x, y])))
        ans = effect(q, a["values"], b["values"], "", evidence=evidence_keys([a, b]),
                     details=details, estimator=f"ratio of medians, registers arm, moves of up "
                                                f"to {w} B")
        through = next((d for d in details if d["arm"] in ("append", "copy")), None)
        ref = (f" (through memory, {through['arm']} arm: {through['value']:.2f}x)"
               if through else "")
        ans.because = ({NOT_DETECTED: "The fix removes the penalty",
                        DETECTED: ("The penalty remains" if ans.value > 1 else
                                   "With the fix the 28-byte entry is faster"),
                        INCONCLUSIVE: "Not clear whether the fix removes the penalty"}.get(
                           ans.verdict, "")
                       + f"; from registers a {SEED_ENTRY}-byte entry costs {_x(ans)} a "
                         f"{SEED_REFERENCE}-byte one{ref}")
        return ans

    def _matrix(self, data):
        q = self.declared("store_forward.matrix")
        pts = [p for p in data.select("matrix", part="matrix") if p.get("median")]
        if not pts:
            return not_measured(q, "the matrix part was not measured")
        cell = lambda p: (p["params"]["store_bytes"], p["params"]["load_bytes"],  # noqa: E731
                          p["params"]["load_offset"])
        cells = {cell(p): p for p in pts}
        status, levels = matrix_classes(cells)
        if all(v is None for v in levels.values()):
            return not_measured(q, f"none of the {len(pts)} cells measured has a load reading "
                                   f"past its store: no failure level to compare with")
        cpn = _ns_to_cycles(pts)
        scale, unit = (cpn, "cycles") if cpn else (1.0, "ns")
        fwd = {c for c, s in status.items() if s == "forwards"}
        fail = {c for c, s in status.items() if s == "fails"}
        unc = {c for c, s in status.items() if s == "uncertain"}

        def reference(s, ld):
            for pick in (lambda c: c[:2] == (s, ld),
                         lambda c: c[1] == ld and store_class(c[0]) == store_class(s),
                         lambda c: c[1] == ld, lambda c: True):
                same = [cells[c]["median"] for c in fwd if pick(c)]
                if same:
                    return float(np.median(same))
            return None

        penalties = {}
        for c in fail:
            ref = reference(c[0], c[1])
            if ref is not None:
                penalties[c] = (cells[c]["median"] - ref) * scale
        details = []
        kinds = {}
        for c in cells:
            d = kinds.setdefault(cell_kind(*c), {"cells": 0, "forwards": 0, "fails": 0,
                                                 "uncertain": 0})
            d["cells"] += 1
            d[status[c]] += 1
        for k, d in sorted(kinds.items()):
            details.append(detail(f"{k} loads: {d['fails']} of {d['cells']} measured fail",
                                  value=d["fails"] / d["cells"], unit="share", ci=None,
                                  verdict=DETECTED if d["fails"] else (
                                      INCONCLUSIVE if d["uncertain"] else NOT_DETECTED),
                                  kind=k, **d))
        # loads inside a bigger store, by the rule that decides them on common cores
        rules = {}
        for c in cells:
            rule = contained_rule(*c)
            if rule:
                d = rules.setdefault(rule, {"cells": 0, "forwards": 0, "fails": 0,
                                            "uncertain": 0})
                d["cells"] += 1
                d[status[c]] += 1
        for rule, d in sorted(rules.items()):
            details.append(detail(f"{rule}: {d['fails']} of {d['cells']} measured fail",
                                  value=d["fails"] / d["cells"], unit="share", ci=None,
                                  verdict=DETECTED if d["fails"] else (
                                      INCONCLUSIVE if d["uncertain"] else NOT_DETECTED),
                                  rule=rule, **d))
        for s, ld in sorted({c[:2] for c in cells}):
            mine = sorted(c for c in cells if c[:2] == (s, ld))
            f_off = [c[2] for c in mine if c in fail]
            pen = [penalties[c] for c in mine if c in penalties]
            details.append(detail(
                f"store {s} B / load {ld} B: "
                + (f"fails at offsets {as_ranges(f_off)}" if f_off else
                   "forwards at every offset measured"
                   if all(c in fwd for c in mine) else "no failure measured"),
                value=float(np.median(pen)) if pen else None, unit=unit, ci=None,
                verdict=(DETECTED if f_off else INCONCLUSIVE
                         if any(c in unc for c in mine) else NOT_DETECTED),
                store_bytes=s, load_bytes=ld,
                offsets_measured=as_ranges([c[2] for c in mine]),
                failing_offsets=as_ranges(f_off),
                forwarding_offsets=as_ranges([c[2] for c in mine if c in fwd]),
                uncertain_offsets=as_ranges([c[2] for c in mine if c in unc]),
                **{"cycles" if cpn else "ns": {str(c[2]): cells[c]["median"] * scale
                                               for c in mine}},
                points=evidence_keys([cells[c] for c in mine])))
        n = len(cells)
        evidence = evidence_keys(pts)
        if penalties:
            ans = measured(q, list(penalties.values()), "", evidence=evidence, details=details,
                           estimator=f"median over failing cells of (cell - the forwarding cells "
                                     f"of the same store/load sizes), {unit}")
            ans.verdict = DETECTED
            part = kinds.get("partial", {})
            cont = kinds.get("contained", {})
            ans.because = (f"{len(fail)} of the {n} cells measured fail to forward "
                           f"({part.get('fails', 0)} of {part.get('cells', 0)} loads reading past "
                           f"their store, {cont.get('fails', 0)} of {cont.get('cells', 0)} loads "
                           f"inside it), costing +{ans.value:.1f} {unit} over the cells that "
                           f"forward" + (f"; {len(unc)} uncertain" if unc else ""))
            return ans
        verdict = INCONCLUSIVE if unc else NOT_DETECTED
        return Answer(question=q.id, verdict=verdict,
                      because=(f"None of the {n} cells measured fails to forward"
                               + (f" ({len(unc)} uncertain)" if unc else "")),
                      evidence=evidence, details=details, estimator="")

    def _split_penalty(self, data):
        q = self.declared("store_forward.split_penalty")
        rows = {}
        for d in TWO_STORE_OFFSETS:
            a = data.select("load_spans_both", part="two_stores", second_store_offset=d)
            b = data.select("load_in_younger", part="two_stores", second_store_offset=d)
            if a and b and a[0]["values"] and b[0]["values"]:
                rows[d] = (a[0], b[0])
        d = SEED_SECOND_STORE if SEED_SECOND_STORE in rows else min(
            (x for x in rows if x < 16), default=None, key=lambda x: abs(x - SEED_SECOND_STORE))
        if d is None:
            return not_measured(q, "the two_stores part was not measured at an overlapping "
                                   "second store (d < 16)")
        span, young = rows[d]
        cpn = cycles_per_ns(span) or cycles_per_ns(young)
        scale, unit = (cpn, "cycles") if cpn else (1.0, "ns")
        a = np.asarray(span["values"], float) * scale
        b = np.asarray(young["values"], float) * scale
        diff, lo, hi = median_difference(a, b)
        r = stats.ratio_of_medians(a, b)
        verdict = effect_verdict(r["ratio"], r["ci_low"], r["ci_high"], r["n_a"], r["n_b"])
        details = []
        for x, (p, y) in sorted(rows.items()):
            c = cycles_per_ns(p) or cpn or 1.0
            details.append(detail(f"second store at {x}" + (" (no overlap: control)"
                                                               if x >= 16 else ""),
                                  value=(p["median"] - y["median"]) * c, unit=unit,
                                  ci=None, second_store_offset=x,
                                  spanning=p["median"] * c, in_younger=y["median"] * c,
                                  ratio=p["median"] / y["median"],
                                  points=evidence_keys([p, y])))
        if min(a.size, b.size) < threshold("min_ci_samples"):
            lo = hi = None
        shape = f"16-byte stores at 0 and {d}, 16-byte load at 0"
        if verdict == DETECTED and diff > 0:
            because = (f"A load spanning both stores costs +{diff:.1f} {unit} over a load "
                       f"inside the younger one ({shape}; {r['ratio']:.2f}x)")
        elif verdict == NOT_DETECTED:
            because = f"A load spanning both stores forwards ({shape}: {diff:+.1f} {unit})"
        elif verdict == DETECTED:
            because = (f"A load spanning both stores is faster ({shape}: {diff:+.1f} "
                       f"{unit})")
        else:
            because = (f"A load spanning both stores: {diff:+.1f} {unit} vs a load inside the younger store "
                       f"({shape})")
        return Answer(question=q.id, verdict=verdict, because=because, value=diff, ci_low=lo,
                      ci_high=hi, evidence=evidence_keys([span, young]), details=details,
                      estimator=f"difference of medians (load spanning both - load inside the "
                                f"younger store), {unit}, bootstrap CI")

    def _blocked_per_entry(self, data):
        q = self.declared("store_forward.blocked_per_entry")
        cpu = (data.machine or {}).get("cpu") or {}
        event = store_forward_event(cpu.get("vendor"), cpu.get("family"), cpu.get("model"))
        per_size = {}
        for s in data.samples:
            if s.get("arm") != "copy" or (s.get("point") or {}).get("part") != "entry":
                continue
            n = (s.get("counters") or {}).get(COUNTER_NAME)
            if n is None or not s.get("length"):
                continue
            per_size.setdefault(s["point"]["entry_bytes"], []).append(n / s["length"])
        if not per_size:
            pmu = (data.machine or {}).get("pmu") or {}
            why = ("no encoding of the event is known for this CPU model" if event is None
                   else pmu.get("reason") or "no hardware PMU")
            return not_measured(q, f"blocked store forwards not counted: {why}")
        medians = {k: float(np.median(v)) for k, v in sorted(per_size.items())}
        size = SEED_ENTRY if SEED_ENTRY in per_size else next(iter(medians))
        details = [detail(f"{k} B entry", value=v, unit="per entry", ci=None, entry_bytes=k)
                   for k, v in medians.items()]
        ans = measured(q, per_size[size], "", details=details,
                       estimator=f"median of {event['name']} (raw "
                                 f"0x{event['config']:04x}) / entries, per sample")
        ans.because = (f"{ans.value:.2f} blocked forwards per {size}-byte entry copy "
                       f"({event['name']}, raw 0x{event['config']:04x}; "
                       f"encoding from {event['source']})")
        return ans


TWO_STORE_OFFSETS = tuple(range(1, 17))   # second store's offset d; 16 = no overlap


SEED_WIDEST = 16             # the seed's compiler copied with 16-byte (SSE) moves


SEED_SECOND_STORE = 12       # the seed's 28-byte copy: moves at 0 and 12


ENTRY_ARMS = ("copy", "append", "registers")


COUNTER_NAME = "ld_blocks_store_forward"


# Raw perf encodings of "load blocked because store forwarding failed".
# Intel LD_BLOCKS.STORE_FORWARD is event 0x03: umask 0x02 from Sandy Bridge to
# Ice Lake / Tiger Lake / Rocket Lake (intel/perfmon RKL/events/rocketlake_core.json,
# Linux tools/perf/pmu-events/arch/x86/{jaketown,rocketlake}/pipeline.json),
# umask 0x82 on Golden Cove cores (intel/perfmon SPR/events/sapphirerapids_core.json,
# ADL/events/alderlake_goldencove_core.json).  Family-6 model numbers per
# intel/perfmon mapfile.csv.  AMD family 19h (Zen 3/4): ls_bad_status2.stli_other,
# event 0x24 umask 0x02 (Linux tools/perf/pmu-events/arch/x86/amdzen3/memory.json).
_INTEL_UMASK_02 = {0x2A, 0x2D, 0x3A, 0x3E, 0x3C, 0x45, 0x46, 0x3F, 0x3D, 0x47, 0x4F, 0x56,
                   0x4E, 0x5E, 0x8E, 0x9E, 0xA5, 0xA6, 0x55, 0x7D, 0x7E, 0x6A, 0x6C, 0x8C,
                   0x8D, 0xA7}


_INTEL_UMASK_82 = {0x8F, 0xCF, 0x97, 0x9A, 0xB7, 0xBA, 0xBF}


def store_forward_event(vendor, family, model):
    """{'name', 'config', 'source'} of the blocked-forwarding event for this
    CPU, or None when no encoding is known for it."""
    if vendor == "GenuineIntel" and family == 6:
        if model in _INTEL_UMASK_02:
            return {"name": "LD_BLOCKS.STORE_FORWARD", "config": 0x0203,
                    "source": "intel/perfmon (event 0x03 umask 0x02)"}
        if model in _INTEL_UMASK_82:
            hybrid = model in {0x97, 0x9A, 0xB7, 0xBA, 0xBF}
            note = " (P-cores; E-cores use umask 0x02)" if hybrid else ""
            return {"name": "LD_BLOCKS.STORE_FORWARD", "config": 0x8203,
                    "source": "intel/perfmon (event 0x03 umask 0x82)" + note}
    if vendor == "AuthenticAMD" and family == 0x19:
        return {"name": "ls_bad_status2.stli_other", "config": 0x0224,
                "source": "Linux perf amdzen3 memory.json (event 0x24 umask 0x02)"}
    return None


def _moves(size, widest):
    return " + ".join(f"{w}@{o}" for o, w in copy_shape(size, widest))


def _x(ans):
    return format_estimate(ans.value, ans.ci_low, ans.ci_high, "x") or "?"


def _status_words(status):
    return {"fails": "fails to forward", "forwards": "forwards"}.get(status, "is uncertain")
