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
from ...model.answers import LOWER, Question
from ...model.errors import ParamError
from ...model.plotspec import PlotSpec
from ...model.units import format_size
from ..base import Experiment, Param, Point, Trial, register
from .analysis import (  # noqa: F401
    CACHE_KNEE_FACTOR,
    CACHE_LINE_FACTOR,
    ELEMENT,
    GIB_SYSFS,
    GIB_WHY,
    LINE,
    PAGE,
    TlbAnswers,
    _cache_lines,
    _cache_step,
    _near,
    count_at_step,
    resolution,
    shared_knee,
    tlb_knees,
)

# The grid measures these factors of each cache's capacity in lines, so that
# the cache's step is bracketed on its own and never merges with a TLB step
# beside it into one knee.
CACHE_ANCHORS = (0.9, 1.1)
GIB_PAGE = 1 << 30   # x86-64 PDPE page, where CPUID reports Page1GB (pdpe1gb; SDM Vol. 3A 4.5)
# Page counts refinement adds above a step's last fast count, at most: 2 x
# the resolution apart, they reach two thirds of a doubling past an L2 TLB
# step of a few thousand entries at resolution_pct = 2, twice the quick
# grid's spacing (per_octave = 3).
REFINE_POINTS = 16


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


@register
class Tlb(TlbAnswers, Experiment):
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


