"""TLB's analysis: the knees of the 4 KiB curve that are no cache's step
(tlb_knees), the entries a knee counts, the walk cost, the huge-page and
1 GiB answers, as methods of TlbAnswers, which Tlb inherits (a mixin: `self`
is the registered experiment), and the pure helpers they rest on.  The
protocol (__init__.py) re-exports every name."""
from __future__ import annotations

import math

import numpy as np

from ...model import answers as ans
from ...model import stats
from ...model.details import detail
from ...model.machine_view import Fingerprint

PAGE = 4096          # x86-64 base page (Intel SDM Vol. 3A 4.5; AMD APM Vol. 2 5.3)


LINE = 64


ELEMENT = PAGE + LINE


# A knee of the 4 KiB curve within this factor of a knee of the huge-page
# curve is a cache step, not a TLB's.
CACHE_KNEE_FACTOR = 2.0


# ... and within this factor of a cache's capacity in lines.  Narrower: the
# chain puts its lines evenly on every set of a cache (element_offsets goes
# round all 64 lines of a page), so a cache's step lies at its capacity,
# while an L2 TLB's ramp can start within 2x of the L1d's capacity
# (docs/peers.md, "Probes": an independent probe of the same chain).
CACHE_LINE_FACTOR = 1.5


GIB_SYSFS = "/sys/kernel/mm/hugepages/hugepages-1048576kB"


# Why a run has no 1g arm, by the code recorded with its 4k samples
# (counter gib_pages_state; 0 = pages were free), so that the analysis reads
# the reason from the data, not from the machine it runs on.
GIB_WHY = {
    1: "the CPU reports no 1 GiB pages (no pdpe1gb flag)",
    2: f"the kernel offers no 1 GiB hugetlb pages ({GIB_SYSFS} is missing)",
    3: (f"no 1 GiB hugetlb pages are reserved ({GIB_SYSFS}/nr_hugepages = 0; reserving them "
        f"takes root, at boot or by writing that file)"),
    4: "every reserved 1 GiB hugetlb page is in use",
}


def resolution(params, count):
    """The declared half-width (entries) of a count's bracket at count."""
    return max(params.get("resolution_entries") or 2,
               count * (params.get("resolution_pct") or 0) / 100.0)


def count_at_step(level, sizes, res):
    """(count, ci_low, ci_high, first_slow) of the step after `level`.

    A count of entries is the last measured size that stays on the fast
    plateau (find_levels' knee_low): a TLB holds n entries when n pages stay
    fast and n + 1 do not, so the step lies between that size and the next
    one measured (`first_slow`), and a CI narrower than that bracket would
    claim sizes nobody measured.  The CI is the bracket widened to
    +- `res`, the declared resolution: the last fast size itself is judged
    against the plateau's noise, and a replacement policy that is not LRU
    makes the first sizes past the reach only a little slower."""
    low = level.knee_low
    after = [s for s in sizes if s > low]
    first_slow = min(after) if after else level.knee_high
    return (float(low), max(1.0, low - res), max(float(first_slow), low + res),
            first_slow)


def _cache_lines(machine):
    """Capacity in lines of each data/unified cache sysfs reports."""
    return [c.size_bytes // (c.line_bytes or LINE) for c in Fingerprint.of(machine).caches]


def _near(x, ys, factor=CACHE_KNEE_FACTOR):
    return any(y and abs(math.log2(x / y)) < math.log2(factor) for y in ys)


def _cache_step(level, cache_lines):
    """Whether a knee of the 4 KiB curve is a cache's step: a cache's
    capacity in lines lies within its bracket of measured sizes (the step
    happened somewhere there: a grid without CACHE_ANCHORS can merge a
    cache's step and a TLB's ramp beside it into one knee, and then the two
    cannot be told apart), or within CACHE_LINE_FACTOR of the knee."""
    return (any(c and level.knee_low < c <= level.knee_high for c in cache_lines)
            or _near(level.knee_size, cache_lines, CACHE_LINE_FACTOR))


def tlb_knees(curve4k, cache_lines=()):
    """The knees (page counts) of the 4 KiB curve that are TLB reach.

    curve4k: (page counts, ns per load).  Knees come from stats.find_levels;
    a knee at a cache's capacity in lines (one line per page: _cache_step)
    is a cache step and left out.  Returns (tlb, levels): tlb =
    [(index into levels, level)] whose knee is a TLB's, in order."""
    levels = stats.find_levels(*curve4k)
    tlb = []
    for i, lv in enumerate(levels[:-1]):
        if not lv.knee_size or _cache_step(lv, cache_lines):
            continue
        # A knee within CACHE_KNEE_FACTOR of the last TLB knee is the same
        # TLB's ramp (a replacement policy that is not LRU makes the first
        # pages past the reach a little slower, then more), not the next
        # level: no x86 core's L2 TLB holds fewer than 8x its L1 DTLB's
        # entries (64 -> 1536/2048 Intel, 72/96 -> 3072/4096 AMD), and a
        # quick run on a 96-entry DTLB read a second knee at 141 pages.
        if tlb and _near(lv.knee_size, [tlb[-1][1].knee_size]):
            continue
        tlb.append((i, lv))
    return tlb, levels


def shared_knee(knee, curve_huge):
    """Whether the huge-page curve steps within CACHE_KNEE_FACTOR of knee
    (in a VM whose host backs guest memory with 4 KiB pages, guest huge
    pages do not enlarge the TLB's reach: both curves step alike)."""
    if curve_huge is None or len(curve_huge[0]) < 3:
        return None
    huge = [lv.knee_size for lv in stats.find_levels(*curve_huge)[:-1] if lv.knee_size]
    return _near(knee, huge)


class TlbAnswers:
    """The answers of the Tlb experiment (a mixin: `self` is the
    registered experiment, whose declared questions they answer)."""

    # -- analysis --
    def analyze(self, data):
        q1, q2, qw = (self.declared(n) for n in ("l1_entries", "l2_entries", "walk_ns"))
        curves = {}
        for arm in self.arms:
            pts = sorted((p for p in data.points if p["arm"] == arm and p["n"] and p["median"]),
                         key=lambda p: p["params"]["page_count"])
            if len(pts) >= 3:
                curves[arm] = pts
        if "4k" not in curves:
            reason = "needs the 4k arm at three page counts or more"
            return [ans.not_measured(q, reason) for q in (q1, q2, qw)]
        pts4 = curves["4k"]
        huge = curves.get("thp")

        def xy(pts):
            return [p["params"]["page_count"] for p in pts], [p["median"] for p in pts]
        tlb, levels = tlb_knees(xy(pts4), _cache_lines(data.machine))
        from ...lab import machine as mach
        reported = {1: mach.tlb_entries(data.machine, 1), 2: mach.tlb_entries(data.machine, 2)}
        huge_by_n = {p["params"]["page_count"]: p for p in huge or []}
        # chains of two huge pages or more (a smaller mapping cannot get one)
        share = [p["counters"].get("huge_page_share") for p in huge or []
                 if p.get("counters", {}).get("huge_page_share") is not None
                 and p["params"]["page_count"] * ELEMENT >= 4 << 20]
        details = [detail(f"level {i + 1}", value=lv.latency_ns, unit="ns",
                          first_pages=lv.first_size, last_pages=lv.last_size,
                          knee_pages=lv.knee_size, tlb_knee=any(j == i for j, _ in tlb),
                          ci=None) for i, lv in enumerate(levels)]
        out = []
        for k, q in ((0, q1), (1, q2)):
            if len(tlb) <= k:
                out.append(ans.not_measured(q, f"the 4 KiB curve shows {len(tlb)} knee(s) that "
                                               f"are not cache steps; level {k + 1} needs "
                                               f"{k + 1}: its reach may lie outside "
                                               f"{pts4[0]['params']['page_count']}.."
                                               f"{pts4[-1]['params']['page_count']} pages"))
                continue
            i, lv = tlb[k]
            after = levels[i + 1]
            sizes = [p["params"]["page_count"] for p in pts4]
            res = resolution(data.params, lv.knee_low)
            count, lo, hi, first_slow = count_at_step(lv, sizes, res)
            wide = ("" if first_slow - lv.knee_low <= 2 * res else
                    f" (nothing measured between: a bracket wider than the declared "
                    f"resolution, +-{res:.0f})")
            rep = reported[k + 1]
            cmp = (f"; CPUID reports {rep} entries ({count / rep:.2f}x)" if rep
                   else "; CPUID reports no figure for it")
            shared = shared_knee(lv.knee_size, xy(huge) if huge else None)
            control = ("" if shared is None else
                       "; the huge-page curve takes the same step (guest huge pages that the "
                       "host maps with 4 KiB pages keep 4 KiB TLB entries)" if shared else
                       "; the huge-page curve does not take it")
            a = ans.Answer(q.id, ans.MEASURED,
                           f"a load takes {lv.latency_ns:.2f} ns up to {lv.knee_low} pages, "
                           f"is slower at {first_slow}{wide}, and reaches "
                           f"{after.latency_ns:.2f} ns by {lv.knee_high} pages, away from "
                           f"every cache's capacity in lines{control}{cmp}",
                           value=count, ci_low=lo, ci_high=hi,
                           evidence=ans.evidence_keys(
                               [p for p in pts4 if lv.knee_low <= p["params"]["page_count"]
                                <= lv.knee_high]),
                           details=details + [detail("CPUID", value=rep,
                                                     unit="entries", ci=None)],
                           estimator="last page count on the plateau before the knee "
                                     "(stats.find_levels' knee_low); CI = it and the next count "
                                     "measured, widened to +- the declared resolution")
            out.append(a)
        out.append(self._walk_answer(qw, tlb, levels, pts4, huge_by_n, share))
        out.append(self._gib_answer(data, pts4))
        return out

    def _gib_answer(self, data, pts4):
        q = self.declared("gib_pages")
        gib = {p["params"]["page_count"]: p for p in data.points
               if p["arm"] == "1g" and p["n"] and p["median"]}
        common = [p for p in pts4 if p["params"]["page_count"] in gib]
        if not common:
            codes = {int(c) for c in (p.get("counters", {}).get("gib_pages_state")
                                       for p in pts4) if c in GIB_WHY}
            if codes:
                reason = "no 1g arm: " + "; ".join(GIB_WHY[c] for c in sorted(codes))
            elif gib:
                reason = "the 1g arm has no page count in common with the 4k arm"
            else:
                reason = ("no 1g arm: the run measured none (pages left 1g out, or the pages "
                          "free could not hold the chain)")
            return ans.not_measured(q, reason)
        details = []
        for p in common:
            g = gib[p["params"]["page_count"]]
            r = stats.ratio_of_medians(p["values"], g["values"])
            details.append(detail(f"{p['params']['page_count']} pages",
                                  page_count=p["params"]["page_count"], value=r["ratio"],
                                  unit="ratio", ci_low=r["ci_low"], ci_high=r["ci_high"],
                                  ns_4k=p["median"], ns_1g=g["median"]))
        last = common[-1]
        g = gib[last["params"]["page_count"]]
        e = ans.effect(q, last["values"], g["values"], "",
                       evidence=[ans.point_key(last), ans.point_key(g)])
        e.details = details
        e.because = (f"at {last['params']['page_count']} pages a load takes "
                     f"{last['median']:.2f} ns on 4 KiB pages and {g['median']:.2f} ns on 1 GiB "
                     f"pages: {e.value:.2f}x")
        return e

    def _walk_answer(self, q, tlb, levels, pts4, huge_by_n, share):
        if len(tlb) < 2:
            return ans.not_measured(q, "needs the L2 TLB's knee (two TLB knees on the 4 KiB "
                                       "curve)")
        i, before = tlb[1]
        after = levels[i + 1]

        def on(lv):
            return [p for p in pts4 if lv.first_size <= p["params"]["page_count"] <= lv.last_size]
        # just past the knee: the page tables themselves still sit in the
        # caches (further out their lines leave too and the walk grows)
        pb, pa = on(before), on(after)[:2]
        vb, va = ans.pooled_values(pb), ans.pooled_values(pa)
        if vb.size == 0 or va.size == 0:
            return ans.not_measured(q, "no samples on the plateaus around the L2 TLB's knee")
        d = stats.per_op_difference(vb, va, 0, 1)
        ratio = [p["cycles_est"] / p["median"] for p in pa if p.get("cycles_est") and p["median"]]
        cyc = float(np.median(ratio)) * d["value"] if ratio else None
        enough = min(vb.size, va.size) >= 3
        thp = [detail(f"{p['params']['page_count']} pages, 4k - thp",
                      page_count=p["params"]["page_count"],
                      value=p["median"] - huge_by_n[p["params"]["page_count"]]["median"],
                      unit="ns", ci=None, ns_4k=p["median"],
                      ns_thp=huge_by_n[p["params"]["page_count"]]["median"])
               for p in pa if p["params"]["page_count"] in huge_by_n]
        hs = (f"; the thp arm got huge pages for {min(share):.0%}..{max(share):.0%} of its "
              f"chain" if share else "")
        return ans.Answer(
            q.id, ans.MEASURED,
            f"just past {before.knee_size} pages ({', '.join(str(p['params']['page_count']) for p in pa)}) "
            f"a load takes {float(np.median(va)):.2f} ns instead of {float(np.median(vb)):.2f}: "
            f"a page walk adds {d['value']:.2f} ns over an L2 TLB hit"
            + (f" (~{cyc:.0f} cycles, est.)" if cyc else "") + hs,
            value=d["value"], ci_low=d["ci_low"] if enough else None,
            ci_high=d["ci_high"] if enough else None,
            evidence=ans.evidence_keys(pb + pa),
            details=[detail("before the L2 TLB knee", value=before.latency_ns, unit="ns",
                            ci=None, first_pages=before.first_size,
                            last_pages=before.last_size),
                     detail("after the L2 TLB knee", value=after.latency_ns, unit="ns",
                            ci=None, first_pages=after.first_size,
                            last_pages=after.last_size),
                     detail("cycles (est.)", value=cyc, unit="cycles", ci=None)] + thp,
            estimator="median of the first two points after the L2 TLB knee minus the plateau "
                      "before it (pooled samples, stats.per_op_difference bootstrap)")
