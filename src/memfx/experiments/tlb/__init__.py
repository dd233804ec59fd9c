"""TLB reach and page-walk cost: one load per page over N pages.

Seed 004 (Drepper, "What every programmer should know about memory", 3.3.2
"TLB Influence for Sequential Read" and "Page-Wise Randomization"): a chain
that visits N pages in random order, one line in each, so every load needs a
translation and the lines themselves stay few.  The time per load steps up
when N passes the L1 data TLB's entries (an L2 TLB hit is added) and again
past the L2 TLB's (a page walk is added).  Knees near a cache's capacity in
lines (one line per page; sysfs) are cache steps; the others are TLB reach.
The same chain on transparent huge pages is the control: on bare metal its
curve shows the cache steps alone; in a VM whose host maps guest memory with
4 KiB pages it takes the TLB steps too (the TLB caches the combined
translation at the host's page size), which the answer then says.

Layout: element e of the chain starts at e * (4096 + 64) bytes, so each
element's pointer sits in a page of its own and the line offset inside the
page moves on by one line per element (64 offsets in turn): the lines spread
over every set of a 4 KiB-indexed L1d instead of piling into one.

Arms: 4k (base pages) and thp (madvise(MADV_HUGEPAGE)), interleaved per N,
and 1g (MAP_HUGETLB | MAP_HUGE_1GB: the whole chain in one page) where the
machine has 1 GiB hugetlb pages reserved (memfx never reserves them: that
takes root, `echo N > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages`);
elsewhere the 1g answer is not measured, with the reason.
Compared with CPUID's TLB fields (machine.cpuid_tlb) where it reports them.
"""
from __future__ import annotations

import math
import os

import numpy as np

from ...model import answers as ans
from ...model import stats
from ...model.answers import LOWER, Question
from ...model.details import detail
from ...model.errors import ParamError
from ...model.machine_view import Fingerprint
from ...model.plotspec import PlotSpec
from ...model.units import format_size
from ..base import Experiment, Param, Point, Trial, register

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
# The grid measures these factors of each cache's capacity in lines, so that
# the cache's step is bracketed on its own and never merges with a TLB step
# beside it into one knee.
CACHE_ANCHORS = (0.9, 1.1)
GIB_PAGE = 1 << 30   # x86-64 PDPE page, where CPUID reports Page1GB (pdpe1gb; SDM Vol. 3A 4.5)
GIB_SYSFS = "/sys/kernel/mm/hugepages/hugepages-1048576kB"
# Page counts refinement adds above a step's last fast count, at most: 2 x
# the resolution apart, they reach two thirds of a doubling past an L2 TLB
# step of a few thousand entries at resolution_pct = 2, twice the quick
# grid's spacing (per_octave = 3).
REFINE_POINTS = 16


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


def gib_pages(root="/"):
    """(free 1 GiB hugetlb pages, 0) where this machine has them to use,
    else (0, a GIB_WHY code)."""
    def read(path):
        try:
            with open(os.path.join(root, path.lstrip("/"))) as f:
                return f.read()
        except OSError:
            return None
    info = read("/proc/cpuinfo") or ""
    flags = next((ln.split(":", 1)[1].split() for ln in info.splitlines()
                  if ln.startswith("flags")), None)
    if flags is not None and "pdpe1gb" not in flags:
        return 0, 1
    total = read(f"{GIB_SYSFS}/nr_hugepages")
    if total is None:
        return 0, 2
    free = read(f"{GIB_SYSFS}/free_hugepages")
    total, free = int(total), int(free) if free is not None else int(total)
    if total == 0:
        return 0, 3
    if free == 0:
        return 0, 4
    return free, 0


def element_offsets(n):
    """(page index, line offset in the page) of each of n elements' pointers."""
    starts = np.arange(n, dtype=np.int64) * ELEMENT
    return starts // PAGE, starts % PAGE


def page_grid(lo, hi, per_octave, anchors=(), cache_lines=()):
    """Geometric page counts from lo to hi, plus 0.75x and 1.5x each anchor
    (a TLB's reported entries) and CACHE_ANCHORS x each cache's capacity in
    lines."""
    n = max(1, int(round(math.log2(hi / lo) * per_octave)))
    out = {int(round(lo * 2 ** (i / per_octave))) for i in range(n + 1)} | {int(hi)}
    for anchor, factors in ([(a, (0.75, 1.5)) for a in anchors]
                            + [(c, CACHE_ANCHORS) for c in cache_lines]):
        for f in factors:
            if lo <= int(anchor * f) <= hi:
                out.add(int(anchor * f))
    return sorted(out)


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


@register
class Tlb(Experiment):
    name = "tlb"
    order = 70
    title = "TLB reach and page-walk cost"
    question = ("How many pages do the L1 and L2 data TLBs cover, and what does a page walk "
                "add to a load?")
    seeds = ("004",)
    arms = ("4k", "thp", "1g")
    params = [
        Param("min_pages", "int", 8, "fewest pages visited", "16", minimum=2, maximum=1 << 20),
        Param("max_pages", "int", 65536, "most pages visited (64 Ki pages = 260 MiB of chain)",
              "32768", minimum=4, maximum=1 << 20),
        Param("per_octave", "int", 4, "page counts per doubling (geometric steps)", "6",
              minimum=1, maximum=16),
        Param("resolution_entries", "int", 2, "declared resolution of a TLB count (+- entries): "
              "refinement measures page counts 2x this apart past each step's last fast "
              "count, and a count's CI is never narrower", "4", minimum=1, maximum=4096),
        Param("resolution_pct", "float", 2.0, "the same resolution relative to the count "
              "(percent), where it is the wider (an L2 TLB's thousands of entries)", "5",
              minimum=0.0, maximum=50.0),
        Param("refine", "bool", True, "after the first pass, measure page counts at the "
              "declared resolution past each TLB step", "false"),
        Param("pages", "list:str", ["4k", "thp", "1g"], "page sizes: 4k, thp (transparent huge "
              "pages, the control) and 1g (1 GiB hugetlb pages, where reserved)", "4k",
              choices=("4k", "thp", "1g")),
    ]
    presets = {
        # 16 Ki pages: 5x past a 3 Ki-entry L2 TLB, 65 MiB of chain per arm
        "quick": {"samples": 5, "min_sample_ms": 0.3, "per_octave": 3, "min_pages": 16,
                  "max_pages": 16384},
        "full": {"samples": 7, "per_octave": 6},
    }
    questions = (
        Question("tlb.l1_entries", "How many 4 KiB translations does the L1 data TLB hold?",
                 "entries", "004", "the last page count on the fast plateau before the first "
                 "step of the 4 KiB curve (stats.find_levels) away from every cache's "
                 "capacity in lines; CI = that count and the next one measured, at least "
                 "+- the declared resolution", headline=True),
        Question("tlb.l2_entries", "How many 4 KiB translations does the L2 TLB hold?",
                 "entries", "004", "the same at the second such step; CI = the bracket of "
                 "measured page counts around it, at least +- the declared resolution"),
        Question("tlb.walk_ns", "What does a page walk add to a load, over an L2 TLB hit?",
                 "ns", "004", "the step of the 4 KiB curve at the L2 TLB's knee: median of the "
                 "first two page counts after it minus the plateau before (bootstrap CI of the "
                 "difference)",
                 better=LOWER, host_shared=True),
        Question("tlb.gib_pages", "How much faster is one load per page on 1 GiB pages than "
                 "on 4 KiB pages, past the L2 TLB's reach?", "ratio", "004",
                 "ratio of medians 4k / 1g (ns per load) at the largest page count measured "
                 "on both; every common page count in details; not measured where no 1 GiB "
                 "hugetlb pages are reserved", band=ans.EFFECT_BAND),
    )
    plots = (
        PlotSpec("reach", "one load per page, pages in random order: 4 KiB vs huge pages",
                 kind="curve", x="page_count", series=("arm",), log_x=True, log_y=True,
                 xlabel="pages visited (one line each)", ylabel="ns per load"),
    )

    # -- plan --
    def plan(self, params, machine):
        lo, hi = params["min_pages"], params["max_pages"]
        if lo >= hi:
            raise ParamError(f"min_pages ({lo}) must be below max_pages ({hi})")
        region = hi * ELEMENT
        avail = (machine.get("memory") or {}).get("available_bytes")
        arms = [a for a in self.arms if a in params["pages"]]
        if "1g" in arms:
            free, _code = gib_pages()
            if not free or region > free * GIB_PAGE:
                arms.remove("1g")
        region_bytes = {"1g": -(-region // GIB_PAGE) * GIB_PAGE}   # hugetlb: whole pages
        need = sum(region_bytes.get(a, region) for a in arms)
        if avail and need > avail * 0.8:
            raise ParamError(f"max_pages {hi} does not fit: {len(arms)} arms need "
                             f"{format_size(need)} and {format_size(avail)} is "
                             f"available")
        from ...lab import machine as mach
        anchors = [e for e in (mach.tlb_entries(machine, 1), mach.tlb_entries(machine, 2)) if e]
        return [Point(arm, {"page_count": n})
                for n in page_grid(lo, hi, params["per_octave"], anchors, _cache_lines(machine))
                for arm in arms]

    def refine(self, data, params, machine):
        """After the first pass: page counts 2 x the declared resolution
        apart past each TLB step's last fast count, up to the first count on
        the next plateau (at most REFINE_POINTS), so that one round brings
        the bracket around the step within the resolution."""
        if not params.get("refine", True):
            return []
        pts = sorted((p for p in data.points if p["arm"] == "4k" and p["n"] and p["median"]),
                     key=lambda p: p["params"]["page_count"])
        if len(pts) < 3:
            return []
        have = {p["params"]["page_count"] for p in pts}
        tlb, _levels = tlb_knees(([p["params"]["page_count"] for p in pts],
                                  [p["median"] for p in pts]), _cache_lines(machine))
        extra = set()
        for _i, lv in tlb[:2]:
            low, high = lv.knee_low, lv.knee_high
            step = max(1, int(2 * resolution(params, low)))
            extra |= {n for n in range(low + step, high, step)[:REFINE_POINTS] if n not in have}
        return [Point("4k", {"page_count": n}) for n in sorted(extra)]

    def estimate_seconds(self, params, machine):
        pts = self.plan(params, machine)
        return 2 + len(pts) * (params["samples"] * 3 * params["min_sample_ms"] / 1000 + 0.05)

    # -- one trial --
    def prepare(self, point, params, lab):
        n = point.params["page_count"]
        huge = point.arm == "thp"
        if point.arm == "1g":
            region = lab.hugetlb_buffer(n * ELEMENT, GIB_PAGE)
        else:
            region = lab.buffer(n * ELEMENT, align=PAGE, hugepages=huge)
        order = np.random.default_rng([params["seed"], n]).permutation(n).astype(np.int32)
        chain = lab.link_chain(region, ELEMENT, n, order)
        extra = {"elements": n}
        if point.arm == "4k":
            # why a 1g arm ran or not, recorded with the data the answer reads
            extra["gib_pages_state"] = gib_pages()[1]
        if huge:
            share = lab.huge_page_share(region)
            if share is not None:
                extra["huge_page_share"] = round(share, 3)
        return Trial("chase_ptr", src=chain, metric="time", difference=True, resume=True,
                     warmup=min(2 * n, 1 << 20), extra=extra)

    def verify(self, lab, params):
        """Each element's pointer sits in a page of its own, and the line
        offsets go round all 64 lines of a page."""
        pages, offsets = element_offsets(4096)
        if len(set(pages.tolist())) != 4096 or set(offsets.tolist()) != set(range(0, PAGE, LINE)):
            raise AssertionError("tlb chain layout: elements share pages or miss line offsets")

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
