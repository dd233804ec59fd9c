"""Latency's analysis: levels and knees of the chase curve, each cache's
latency and capacity, memory latency, the TLB step, the huge-page and the
prefetch answers, as methods of LatencyAnswers, which Latency inherits (a
mixin: `self` is the registered experiment), and the pure helpers they rest
on (usable points, plateaus, the cache a knee belongs to, details).  The
protocol (__init__.py) re-exports every name."""
from __future__ import annotations

import math

import numpy as np

from ...model import stats
from ...model.answers import (
    NOT_MEASURED,
    Answer,
    effect,
    evidence_keys,
    measured,
    not_measured,
    point_key,
    pooled_values,
)
from ...model.details import detail
from ...model.errors import ParamError
from ...model.findings import DETECTED, INCONCLUSIVE, MEASURED, NOT_DETECTED
from ...model.machine_view import Fingerprint
from ...model.units import format_size

# Working sets of 1.5x to 2x the largest reported cache are taken to be served
# from memory; a fixed window, so that every run that reaches it answers the
# same question.  It was 1.5-3x: the sizes past 2x took a third of a full
# replica on a large-LLC machine for the same memory latency as the sizes
# below them (docs/machine-notes.md, "Latency's sizes").
MEMORY_FROM, MEMORY_TO = 1.5, 2.0

# A knee is a cache's capacity only within +-25 % of the size the OS reports
# (issue 9: a factor of 2 let a 539K TLB knee "match" a 1M L2).
CACHE_MATCH_TOLERANCE = 0.25


# A cache level's latency rests on the planned working sets (the grid, not a
# run's fine steps at its knees) of LEVEL_WINDOW x the reported cache below
# -- past it, short of this level's end and of 4 KiB pages' first TLB step
# (an L1 DTLB of 64-72 entries reaches 256-288 KiB) -- or the L1d's 1/8-1/2
# of itself, at most half of the level: the same points every run (issue
# 22).  Where they are not all on the level's first flat plateau (a guest's
# L3 holding far less than reported), the answer takes that plateau.
LEVEL_WINDOW = (2, 4)


L1_WINDOW = (1 / 8, 1 / 2)


# Nothing is concluded from a point with fewer samples.
MIN_POINT_SAMPLES = 3


# A huge-page point is evidence about huge pages only when the kernel backed
# at least this share of its buffer with huge pages.
MIN_HUGE_PAGE_SHARE = 0.5


# The huge-page curve "lacks" a knee when its step across the same two sizes
# is less than this share of the 4 KiB step (in log terms).
TLB_STEP_SHARE = 0.5


ESTIMATOR = ("median of per-sample ns per load (longest run length) pooled over the points; "
             "points with >= 3 samples only")


KNEE_ESTIMATOR = ("knee: where ln(latency) crosses the midpoint between two plateaus "
                  "(stats.find_levels); CI = last size on the plateau .. first size on the next")


# question name, and the cache in words, of each cache level the OS may report
CACHE_LEVELS = (("l1d", "L1 data cache"), ("l2", "L2 cache"), ("l3", "L3 cache"))


def size_of(point):
    return point["params"]["size_bytes"]


def usable(point):
    """A point to conclude from: at least MIN_POINT_SAMPLES samples, in one
    group.  A bimodal point (results.build_points: a shared cache that a
    neighbour took for part of the run) has a median that is one state of
    the machine or between two, not a level (issue 16); it is plotted and
    listed in the run's bimodal_points caution, not read as a plateau."""
    values = point.get("values") or []
    return ((point.get("n") or 0) >= MIN_POINT_SAMPLES and len(values) >= MIN_POINT_SAMPLES
            and not bimodal(point))


def bimodal(point):
    return "bimodal" in (point.get("flags") or ())


def point_ns(point):
    """The one per-point estimate every latency answer uses (ESTIMATOR)."""
    return float(np.median(np.asarray(point["values"], float)))


def chase_curve(data, pages, arm="random"):
    """Usable points of one arm and page size, by size."""
    return sorted((p for p in data.select(arm, pages=pages) if usable(p)), key=size_of)


def bimodal_sizes(data, pages, arm="random"):
    """Sizes of the points left out of chase_curve for being bimodal."""
    return sorted(size_of(p) for p in data.select(arm, pages=pages) if bimodal(p))


def huge_backed(point):
    """A huge-page point is huge-page evidence only when the kernel backed
    most of its buffer with huge pages (buffers under 2 MiB often are not)."""
    share = (point.get("counters") or {}).get("huge_page_share")
    return share is None or share >= MIN_HUGE_PAGE_SHARE


def curve_levels(pts):
    return stats.find_levels([size_of(p) for p in pts], [point_ns(p) for p in pts])


def reported_caches(machine):
    """[(level name, bytes)] of the data and unified caches the OS reports, L1 first."""
    return [(c.name, c.size_bytes) for c in Fingerprint.of(machine).caches]


def matching_cache(caches, size):
    """The reported cache whose size is within CACHE_MATCH_TOLERANCE of ``size``."""
    for label, cap in caches:
        if (1 - CACHE_MATCH_TOLERANCE) * cap <= size <= (1 + CACHE_MATCH_TOLERANCE) * cap:
            return label
    return None


def owning_cache(level, caches):
    """The cache a flat plateau belongs to: the smallest reported cache whose
    size, to CACHE_MATCH_TOLERANCE, its last point lies within (None for a
    ramp, a mixture, or a plateau beyond every cache).  To the tolerance: a
    short stretch just past a cache's size, on the way to the next level,
    is that cache's (docs/machine-notes.md, "Latency's sizes")."""
    if not level.flat:
        return None
    return next((label for label, cap in caches
                 if level.last_size <= cap * (1 + CACHE_MATCH_TOLERANCE)), None)


def level_window(cap, below):
    """(low, high) bytes of a cache level's declared working sets
    (LEVEL_WINDOW, L1_WINDOW)."""
    if not below:
        return cap * L1_WINDOW[0], cap * L1_WINDOW[1]
    return LEVEL_WINDOW[0] * below, min(LEVEL_WINDOW[1] * below, cap / 2)


def level_points(pts, level):
    return [p for p in pts if level.first_size <= size_of(p) <= level.last_size]


def median_cycles(points):
    cyc = [p["cycles_est"] for p in points if p.get("cycles_est")]
    return float(np.median(cyc)) if cyc else None


def plateau_ns(points, level):
    """Median latency of a curve's points within a plateau's size range
    (None when the curve has no point there)."""
    on = [point_ns(p) for p in points if level.first_size <= size_of(p) <= level.last_size]
    return float(np.median(on)) if on else None


def ns_at(points, size):
    """Latency of a curve at ``size``: the point there, or log-log
    interpolation between the neighbours on both sides when they are at
    most an octave apart; None otherwise."""
    lower = [p for p in points if size_of(p) <= size]
    upper = [p for p in points if size_of(p) >= size]
    if not lower or not upper:
        return None
    a, b = lower[-1], upper[0]
    if size_of(a) == size_of(b):
        return point_ns(a)
    if size_of(b) > 2 * size_of(a):
        return None
    t = math.log(size / size_of(a)) / math.log(size_of(b) / size_of(a))
    return math.exp((1 - t) * math.log(point_ns(a)) + t * math.log(point_ns(b)))


def describe_knee(level, nxt, pts, huge, caches, pages):
    """What the step from ``level`` to ``nxt`` is: 'tlb' when the huge-page
    curve lacks it (it rises by less than TLB_STEP_SHARE of the 4 KiB step
    between the two plateaus and stays below the 4 KiB curve after it), the
    cache label when within +-25 % of a reported size, 'cache (no reported
    size)' when huge pages show it too (or had stepped up already), else
    'unknown' (not measured with huge pages).

    Both curves are compared plateau to plateau: the 4 KiB plateaus'
    latencies against the median of the huge-page points on the same two
    size ranges.  Compared at the two sizes that bracket the knee alone, one
    noisy point decided it: on a guest whose effective L3 ends an octave
    past the STLB's reach, the L3's end read as a TLB knee in one replica of
    three (docs/machine-notes.md, "Latency's sizes")."""
    low, high = level.knee_low, level.knee_high
    before, after = level.latency_ns, nxt.latency_ns
    huge_step = huge_verdict = None
    if huge and before and after and after > before:
        h_before = plateau_ns(huge, level) or ns_at(huge, low)
        h_after = plateau_ns(huge, nxt) or ns_at(huge, high)
        if h_before and h_after:
            huge_step = h_after / h_before
            step = math.log(after / before)
            if math.log(huge_step) >= TLB_STEP_SHARE * step:
                huge_verdict = "shows"
            elif math.log(after / h_after) >= TLB_STEP_SHARE * step:
                # huge pages stay low where 4 KiB pages step up: page walks
                huge_verdict = "lacks"
            else:
                # huge pages were already up here: their curve stepped at a
                # smaller size, so this step is no page-size effect either
                huge_verdict = "earlier"
    cache = matching_cache(caches, level.knee_size)
    if huge_verdict == "lacks":
        kind = "tlb"
    elif cache:
        kind = cache
    elif huge_verdict in ("shows", "earlier"):
        kind = "cache (no reported size)"
    else:
        kind = "unknown"
    evidence = evidence_keys([p for p in pts if low <= size_of(p) <= high])
    det = detail(f"knee at {format_size(level.knee_size)}", value=level.knee_size,
                 unit="bytes", ci_low=low, ci_high=high, verdict=kind,
                 before_ns=level.latency_ns, after_ns=nxt.latency_ns,
                 step_4k=(after / before) if before and after else None,
                 step_huge_pages=huge_step, matches_cache=cache, points=evidence)
    return {"size": level.knee_size, "low": low, "high": high, "kind": kind, "cache": cache,
            "huge": huge_verdict, "huge_step": huge_step, "before_ns": level.latency_ns,
            "after_ns": nxt.latency_ns, "pages": pages, "evidence": evidence, "detail": det}


def plateau_detail(level, points):
    pooled = pooled_values(points)
    lo = hi = None
    if pooled.size >= MIN_POINT_SAMPLES:
        lo, hi = stats.bootstrap_ci(pooled)
    return detail(f"plateau {format_size(level.first_size)}-{format_size(level.last_size)}",
                  value=float(np.median(pooled)), unit="ns", ci_low=lo, ci_high=hi,
                  first_size=level.first_size, last_size=level.last_size,
                  sizes=len(points), spread=level.spread, cycles_est=median_cycles(points),
                  points=evidence_keys(points))


def point_detail(point, label):
    vals = np.asarray(point["values"], float)
    lo, hi = stats.bootstrap_ci(vals) if vals.size >= MIN_POINT_SAMPLES else (None, None)
    return detail(label, value=point_ns(point), unit="ns", ci_low=lo, ci_high=hi,
                  n=int(vals.size), cycles_est=point.get("cycles_est"),
                  points=[point_key(point)])


class LatencyAnswers:
    """The answers of the Latency experiment (a mixin: `self` is the
    registered experiment, whose declared questions they answer)."""

    def analyze(self, data):
        caches = reported_caches(data.machine)
        main_pg = "4k" if chase_curve(data, "4k") else "thp"
        pts = chase_curve(data, main_pg)
        if not pts:
            reason = (f"no random-chase point has >= {MIN_POINT_SAMPLES} samples: "
                      f"nothing to conclude from")
            return [not_measured(q, reason) for q in self.questions]
        huge = [p for p in chase_curve(data, "thp") if huge_backed(p)] if main_pg == "4k" else []
        levels = curve_levels(pts)
        knees = [describe_knee(levels[i], levels[i + 1], pts, huge, caches, main_pg)
                 for i in range(len(levels) - 1)]
        owner = [owning_cache(lv, caches) for lv in levels]
        split = bimodal_sizes(data, main_pg)
        grid = self.planned_sizes(data)
        out = []
        for name, _ in CACHE_LEVELS:
            label = "L1d" if name == "l1d" else name.upper()      # as the Fingerprint names it
            out.extend(self._cache_answers(label, caches, pts, levels, knees, owner, main_pg,
                                           split, grid))
        out.append(self._memory_answer(caches, pts, huge, main_pg))
        out.append(self._tlb_answer(knees, main_pg, bool(chase_curve(data, "thp"))))
        out.append(self._huge_page_answer(data, caches, pts, huge, main_pg))
        out.append(self._prefetch_answer(data, caches, pts, main_pg))
        return out

    def planned_sizes(self, data):
        """The working sets the run planned (its grid), without the fine
        steps refine() added; empty when the stored parameters no longer
        make a plan."""
        try:
            return {p.params["size_bytes"] for p in self.plan(data.params, data.machine)}
        except (KeyError, TypeError, ValueError, ParamError):
            return set()

    def _cache_answers(self, label, caches, pts, levels, knees, owner, pg, split=(), grid=()):
        """latency.<cache> and latency.<cache>_capacity for one reported cache
        (`split`: sizes whose points were bimodal, measured but not used;
        `grid`: the planned sizes, for the level's window)."""
        q_lat = self.declared(label.lower())
        q_cap = self.declared(label.lower() + "_capacity")
        sizes = dict(caches)
        if label not in sizes:
            why = f"the OS reports no {label} cache"
            return [not_measured(q_lat, why), not_measured(q_cap, why)]
        cap = sizes[label]
        below = max([s for name, s in caches if s < cap], default=0)
        band = [p for p in pts if below < size_of(p) <= cap]
        split_here = [s for s in split if below < s <= cap]
        if not band and split_here:
            why = (f"the {len(split_here)} working set(s) measured between {format_size(below)} "
                   f"and {label} = {format_size(cap)} had their samples in two groups (bimodal: "
                   f"a shared cache that a neighbour took for part of the run), so no level is "
                   f"read from them; rerun on a quieter machine")
            return [Answer(q_lat.id, INCONCLUSIVE, why), Answer(q_cap.id, INCONCLUSIVE, why)]
        if not band:
            why = (f"no working set between {format_size(below)} and {label} = {format_size(cap)} "
                   f"was measured (the sweep covered {format_size(size_of(pts[0]))}"
                   f"-{format_size(size_of(pts[-1]))})")
            return [not_measured(q_lat, why), not_measured(q_cap, why)]
        mine = [i for i, o in enumerate(owner) if o == label]
        if not mine:
            why = (f"no flat plateau (>= 3 consecutive sizes of low spread) between "
                   f"{format_size(below)} and {label} = {format_size(cap)}: there the latency goes "
                   f"from {point_ns(band[0]):.3g} to {point_ns(band[-1]):.3g} ns"
                   + (f" ({len(split_here)} bimodal working set(s) there left out)"
                      if split_here else ""))
            return [Answer(q_lat.id, INCONCLUSIVE, why), Answer(q_cap.id, INCONCLUSIVE, why)]
        # the level's latency: its first plateau (later ones under the same
        # reported size are steps of another cause: TLB reach, replacement)
        first = levels[mine[0]]
        on_level = level_points(pts, first)
        lo, hi = level_window(cap, below)
        window = [p for p in pts if lo <= size_of(p) <= hi and size_of(p) in grid]
        in_window = (len(window) >= 2 and all(first.first_size <= size_of(p) <= first.last_size
                                              for p in window))
        used = window if in_window else on_level
        pooled = pooled_values(used)
        value = float(np.median(pooled))
        cycles = median_cycles(used)
        plateau = f"{format_size(first.first_size)} to {format_size(first.last_size)}"
        where = (f"reads it at {format_size(size_of(window[0]))}-"
                 f"{format_size(size_of(window[-1]))} ({len(window)} sizes, {pg} pages), on "
                 f"its plateau from {plateau}" if in_window else
                 f"stays flat at that from {plateau} ({len(on_level)} sizes, {pg} pages)")
        because = (f"A load from the {label} takes {value:.3g} ns"
                   + (f" (~{cycles:.0f} cycles, est.)" if cycles else "")
                   + f": the random chase {where}")
        if len(mine) > 1:
            later = levels[mine[1]]
            because += (f"; a further step to {later.latency_ns:.3g} ns from "
                        f"{format_size(later.first_size)}, below the {format_size(cap)} sysfs reports")
        details = [plateau_detail(levels[i], level_points(pts, levels[i])) for i in mine]
        if cycles:
            details.append(detail("est. core cycles", value=cycles, unit="cycles",
                                  ci=None))
        answer_lat = measured(q_lat, pooled, because, evidence=evidence_keys(used),
                              details=details, estimator=ESTIMATOR)
        return [answer_lat, self._capacity_answer(q_cap, label, cap, pts, levels, knees, owner,
                                                  mine[0])]

    def _capacity_answer(self, q, label, cap, pts, levels, knees, owner, start):
        later = [i for i in range(start + 1, len(levels)) if owner[i] not in (None, label)]
        stop = later[0] if later else len(levels) - 1
        candidates = [knees[i] for i in range(start, stop)]
        if not candidates:
            return not_measured(q, f"the sweep ended at {format_size(size_of(pts[-1]))}, still on "
                                   f"the {label} plateau: its end was not measured")
        details = [k["detail"] for k in candidates]
        details.append(detail("size the OS reports (sysfs)", value=cap, unit="bytes",
                              ci=None))
        not_tlb = [k for k in candidates if k["kind"] != "tlb"]
        if not not_tlb:
            return Answer(q.id, INCONCLUSIVE,
                          f"every step after the {label} plateau is one that huge pages lack "
                          f"(TLB reach): with no step left for a cache, this curve cannot tell "
                          f"the {label}'s capacity", details=details)
        matching = [k for k in not_tlb if k["cache"] == label]
        # a knee that huge pages show too before one not measured with them
        confirmed = [k for k in not_tlb if k["huge"] is not None]
        k = (matching or confirmed or not_tlb)[0]
        where = (f"latency rises from {k['before_ns']:.3g} to {k['after_ns']:.3g} ns between "
                 f"{format_size(k['low'])} and {format_size(k['high'])}")
        verdict = MEASURED
        if matching:
            because = (f"The {label} holds about {format_size(k['size'])} in effect (effective "
                       f"capacity), as the {format_size(cap)} sysfs reports: {where}")
        else:
            because = (f"The {label} holds about {format_size(k['size'])} in effect (effective "
                       f"capacity), although sysfs says {format_size(cap)}: {where}")
            if k["huge"] == "shows":
                because += ", with huge pages too"
            elif k["huge"] == "earlier":
                because += "; huge pages are up there already (no TLB effect)"
            elif k["huge"] is None and k["pages"] == "4k":
                verdict = INCONCLUSIVE
                others = [format_size(x["size"]) for x in not_tlb if x is not k]
                because += ("; cache or TLB" + (f" (another step at {', '.join(others)})"
                                                if others else "")
                            + ": run with --set pages=4k,thp")
        return Answer(q.id, verdict, because, value=k["size"], ci_low=k["low"], ci_high=k["high"],
                      evidence=k["evidence"], details=details, estimator=KNEE_ESTIMATOR)

    def _memory_answer(self, caches, pts, huge, pg):
        q = self.declared("memory")
        if not caches:
            return not_measured(q, "the OS reports no cache sizes: which working sets lie beyond "
                                   "every cache is unknown")
        llc_label, llc = caches[-1]
        lo, hi = MEMORY_FROM * llc, MEMORY_TO * llc
        window = [p for p in pts if lo <= size_of(p) <= hi]
        if not window:
            return not_measured(q, f"no working set from {format_size(lo)} to {format_size(hi)} "
                                   f"({MEMORY_FROM:g}-{MEMORY_TO:g}x the {llc_label} = "
                                   f"{format_size(llc)} the OS reports) was measured (the sweep "
                                   f"ended at {format_size(size_of(pts[-1]))})")
        pooled = pooled_values(window)
        value = float(np.median(pooled))
        cycles = median_cycles(window)
        because = (f"{value:.3g} ns" + (f" (~{cycles:.0f} est. cycles)" if cycles else "")
                   + f" from {format_size(size_of(window[0]))} to {format_size(size_of(window[-1]))}"
                   f" ({len(window)} sizes, {pg} pages"
                   + (", page walks included)" if pg == "4k" else ")"))
        details = [point_detail(p, f"{pg} {format_size(size_of(p))}")
                   for p in pts if size_of(p) >= lo]
        details += [point_detail(p, f"thp {format_size(size_of(p))}")
                    for p in huge if size_of(p) >= lo]
        return measured(q, pooled, because, evidence=evidence_keys(window), details=details,
                        estimator=ESTIMATOR)

    def _tlb_answer(self, knees, pg, huge_measured):
        q = self.declared("tlb_reach")
        if pg != "4k":
            return not_measured(q, "no 4 KiB-page curve was measured to compare with huge pages")
        if not knees:
            return not_measured(q, "the 4 KiB curve shows no step between plateaus to attribute")
        details = [k["detail"] for k in knees]
        tlb = [k for k in knees if k["kind"] == "tlb"]
        unknown = [k for k in knees if k["kind"] == "unknown"]
        listed = ", ".join(format_size(k["size"]) for k in unknown)
        if tlb:
            k = tlb[0]
            because = (f"a knee at {format_size(k['size'])} with 4 KiB pages ({k['before_ns']:.3g} -> "
                       f"{k['after_ns']:.3g} ns) that huge pages lack (x{k['huge_step']:.2f} across "
                       f"the same sizes)")
            if len(tlb) > 1:
                because += "; also at " + ", ".join(format_size(x["size"]) for x in tlb[1:])
            return Answer(q.id, DETECTED, because, value=k["size"], ci_low=k["low"],
                          ci_high=k["high"], evidence=k["evidence"], details=details,
                          estimator=KNEE_ESTIMATOR)
        if unknown:
            because = (f"cache or TLB: the step(s) at {listed} match no reported cache size and "
                       + ("were not measured with huge pages" if not huge_measured else
                          "huge pages did not cover both sides (not measured there, or the "
                          "kernel did not back those buffers with huge pages)")
                       + ": run with --set pages=4k,thp")
            if not huge_measured:
                return Answer(q.id, NOT_MEASURED, because, details=details)
            return Answer(q.id, INCONCLUSIVE, because, details=details)
        return Answer(q.id, NOT_DETECTED,
                      "no knee that huge pages lack: " + "; ".join(
                          f"{format_size(k['size'])} is {k['kind']}" for k in knees),
                      details=details)

    def _huge_page_answer(self, data, caches, pts, huge, pg):
        q = self.declared("huge_page_benefit")
        if pg != "4k" or not chase_curve(data, "thp"):
            return not_measured(q, "huge pages were not measured: run with --set pages=4k,thp")
        if not caches:
            return not_measured(q, "the OS reports no cache sizes: which working sets lie beyond "
                                   "every cache is unknown")
        if not huge:
            return not_measured(q, f"the kernel backed less than {MIN_HUGE_PAGE_SHARE:.0%} of "
                                   f"every huge-page buffer with huge pages (THP setting?)")
        llc_label, llc = caches[-1]
        both = sorted({size_of(p) for p in pts} & {size_of(p) for p in huge})
        both = [s for s in both if s >= MEMORY_FROM * llc]
        if not both:
            return not_measured(q, f"no working set of {format_size(MEMORY_FROM * llc)} or more "
                                   f"({MEMORY_FROM:g}x the {llc_label}) was measured with both "
                                   f"page sizes: run with --set pages=4k,thp")
        s = both[-1]
        a = next(p for p in pts if size_of(p) == s)
        b = next(p for p in huge if size_of(p) == s)
        ratio = point_ns(a) / point_ns(b)
        because = (f"{ratio:.2f}x slower with 4 KiB pages at {format_size(s)}: "
                   f"{point_ns(a):.3g} vs {point_ns(b):.3g} ns")
        return effect(q, a["values"], b["values"], because, evidence=evidence_keys([a, b]),
                      details=[point_detail(a, f"4k {format_size(s)}"),
                               point_detail(b, f"thp {format_size(s)}")],
                      estimator="ratio of medians of per-sample ns per load (4k / thp)")

    def _prefetch_answer(self, data, caches, pts, pg):
        q = self.declared("prefetch_benefit")
        if not caches:
            return not_measured(q, "the OS reports no cache sizes: which working sets lie beyond "
                                   "every cache is unknown")
        llc_label, llc = caches[-1]
        seq = {size_of(p): p for p in chase_curve(data, pg, arm="sequential")}
        both = [p for p in pts if size_of(p) in seq and size_of(p) >= MEMORY_FROM * llc]
        if not both:
            return not_measured(q, f"no working set of {format_size(MEMORY_FROM * llc)} or more "
                                   f"({MEMORY_FROM:g}x the {llc_label}) was measured in both orders")
        a = both[-1]
        b = seq[size_of(a)]
        ratio = point_ns(a) / point_ns(b)
        because = (f"a sequential chase is {ratio:.3g}x faster than a random one at "
                   f"{format_size(size_of(a))}: {point_ns(b):.3g} vs {point_ns(a):.3g} ns ({pg} pages)")
        return effect(q, a["values"], b["values"], because, evidence=evidence_keys([a, b]),
                      details=[point_detail(a, f"random {format_size(size_of(a))}"),
                               point_detail(b, f"sequential {format_size(size_of(b))}")],
                      estimator="ratio of medians of per-sample ns per load (random / sequential)")
