"""Latency vs working set: where does each cache level end, and what does a
load cost in each?

Seed 004 (Drepper, "What every programmer should know about memory",
sections 3.3.2 and 4.3): a chain of pointers walked in sequential or random
order; the time per dependent load rises in steps as the working set leaves
each cache level and (with 4 KiB pages) each TLB's reach.

Arms
  random      the elements form one cycle in a shuffled order, so the
              hardware prefetchers cannot guess the next line
  sequential  the elements are chained in address order (prefetch-friendly)

Analysis (declared questions latency.*): plateaus and knees of the random
curve (stats.find_levels). A flat plateau (>= 3 consecutive sizes of low
spread) belongs to the smallest reported cache whose size its last point lies
within; a cache's latency is read at declared working sets on the first
plateau under it (LEVEL_WINDOW: 2-4x the cache below; the L1d at 1/8-1/2 of
itself), or over that whole plateau where they are not on it. A knee is
a cache's capacity only within +-25 % of the size sysfs reports, and TLB reach
only when the huge-page curve lacks it (the quick preset measures huge pages
around each knee no cache explains); otherwise the level's end is reported as
its effective capacity, next to the size sysfs reports.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...model.answers import (
    EFFECT_BAND,
    LOWER,
    NEITHER,
    Question,
)
from ...model.errors import ParamError
from ...model.machine_view import Fingerprint
from ...model.plotspec import Mark, PlotSpec
from ...model.units import format_size
from .._sweep import SPARSE_FROM, SPARSE_FROM_HELP, index_itemsize, shuffled_order, size_grid
from ..base import Experiment, Param, Point, Trial, register
from .analysis import (  # noqa: F401
    CACHE_LEVELS,
    CACHE_MATCH_TOLERANCE,
    ESTIMATOR,
    KNEE_ESTIMATOR,
    L1_WINDOW,
    LEVEL_WINDOW,
    MEMORY_FROM,
    MEMORY_TO,
    MIN_HUGE_PAGE_SHARE,
    MIN_POINT_SAMPLES,
    TLB_STEP_SHARE,
    LatencyAnswers,
    bimodal,
    bimodal_sizes,
    chase_curve,
    curve_levels,
    describe_knee,
    huge_backed,
    level_points,
    level_window,
    matching_cache,
    median_cycles,
    ns_at,
    owning_cache,
    plateau_detail,
    plateau_ns,
    point_detail,
    point_ns,
    reported_caches,
    size_of,
    usable,
)


def _question(name, asks, unit, decides, better, band=None):
    return Question(f"latency.{name}", asks, unit, "004", decides, better, band=band)


def _latency_question(name, label):
    window = ("1/8-1/2 of its own size" if name == "l1d" else
              f"{LEVEL_WINDOW[0]}-{LEVEL_WINDOW[1]}x the size of the cache below (at most half "
              f"of its own)")
    return _question(name, f"Load-to-use latency of the {label} (random pointer chase)?", "ns",
                     f"median of the samples at the planned working sets of {window}, where "
                     f"they lie on the first flat plateau (>= 3 consecutive sizes of low "
                     f"spread) whose last size lies within the {label} size the OS reports; "
                     f"else over that whole plateau", LOWER)


def _capacity_question(name, label):
    return _question(f"{name}_capacity",
                     f"Effective capacity of the {label}, vs the size the OS reports?", "bytes",
                     f"the knee that ends the {label} plateau (TLB knees skipped): within "
                     f"+-25 % of the size sysfs reports = as reported, else the effective "
                     f"capacity", NEITHER)


QUESTIONS = (
    *(_latency_question(name, label) for name, label in CACHE_LEVELS),
    _question("memory", "Load-to-use latency of memory (random chase beyond every cache)?", "ns",
              f"median of the samples at working sets of {MEMORY_FROM:g}-{MEMORY_TO:g}x the "
              f"largest cache the OS reports", LOWER),
    *(_capacity_question(name, label) for name, label in CACHE_LEVELS),
    _question("tlb_reach", "Working set where 4 KiB pages start to cost TLB misses "
                           "(a knee the huge-page curve lacks)?", "bytes",
              "smallest knee of the 4 KiB random curve across which the huge-page curve (its "
              "median on each of the two plateaus' size ranges) rises by less than half as much "
              "(log scale) and stays below the 4 KiB curve after it",
              NEITHER),
    _question("huge_page_benefit", "How much slower is a random chase in memory with 4 KiB "
                                   "pages than with transparent huge pages?", "x",
              f"ratio of medians 4k/thp at the largest working set measured with both, "
              f">= {MEMORY_FROM:g}x the largest cache; verdict by effect_band", NEITHER, EFFECT_BAND),
    _question("prefetch_benefit", "How much faster is a sequential chase than a random one in "
                                  "memory (hardware prefetch)?", "x",
              f"ratio of medians random/sequential at the largest working set, >= "
              f"{MEMORY_FROM:g}x the largest cache; verdict by effect_band", NEITHER, EFFECT_BAND),
)
# The seed's own questions: the report opens with a card for each.
QUESTIONS = tuple(replace(q, headline=True) if q.id in ("latency.memory", "latency.l3_capacity")
                  else q for q in QUESTIONS)
# What rests on the host's shared last-level cache and memory (compare's
# guest_drift_cv; docs/machine-notes.md, "Drift in a guest").
QUESTIONS = tuple(replace(q, host_shared=True) if q.id in (
    "latency.l3", "latency.memory", "latency.l3_capacity") else q for q in QUESTIONS)


def chain_links(order):
    """next_index[e] for the cyclic chain visiting elements in `order`."""
    nxt = np.empty(len(order), dtype=np.int64)
    nxt[order] = np.roll(order, -1)
    return nxt


def linked_successors(order, elem):
    """next_index[e] as read back from a chain the core linked in `order`."""
    from ...lab.core import address_of, link_chain_at
    n = len(order)
    buf = bytearray(n * elem)
    link_chain_at(buf, 0, elem, n, order)
    words = np.frombuffer(buf, dtype=np.uint64)[::elem // 8]
    return ((words - np.uint64(address_of(buf))) // np.uint64(elem)).astype(np.int64)


def peak_bytes(size, npad):
    """What one cell of `size`-byte chains holds at its peak in the worker:
    both arms' chains (sampled interleaved, so alive together) plus the
    random arm's index order while the core links it.  The plan's memory
    check uses this; tests/test_memory_peak.py measures it."""
    n = size // (8 * (npad + 1))
    return 2 * size + n * index_itemsize(n)


def cycle_length(nxt, start=0):
    """Elements visited before the chain returns to `start` (test helper)."""
    seen, e = 0, start
    while True:
        e = int(nxt[e])
        seen += 1
        if e == start or seen > len(nxt):
            return seen


@register
class Latency(LatencyAnswers, Experiment):
    name = "latency"
    order = 10
    title = "Load latency vs working-set size"
    question = "How long does a load take in each level of the memory hierarchy, and where does each level end?"
    seeds = ("004",)
    arms = ("random", "sequential")
    params = [
        Param("min_size", "size", 1024, "smallest working set, bytes", "4K", minimum=64),
        Param("max_size", "size", "auto",
              "largest working set, bytes; auto = 2x the last-level cache, the top of the memory "
              "window (bounded by free memory)",
              "256M"),
        Param("per_octave", "int", 4, "working-set sizes per doubling (geometric steps)", "8",
              minimum=1, maximum=32),
        Param("sparse_from", "size", SPARSE_FROM, SPARSE_FROM_HELP, "0", minimum=0),
        Param("npad", "int", 7,
              "padding words per element (Drepper's NPAD): element = 8*(npad+1) bytes", "0",
              minimum=0, maximum=511),
        Param("pages", "list:str", ["4k"], "page sizes to compare: 4k and/or thp (MADV_HUGEPAGE)",
              "4k,thp", choices=("4k", "thp")),
        Param("refine", "bool", True, "add fine-step points inside each knee found", "false"),
        Param("huge_from", "size", 0,
              "with pages=4k: the random chase on huge pages too, at one size per doubling "
              "from this size to max_size, so that every run can tell a cache step from a "
              "TLB step there, bytes; 0 = only around the knees each run finds (refine)",
              "1M", minimum=0),
    ]
    presets = {
        # 3 sizes per doubling: a quarter fewer points than the full grid
        # (the refine step still puts 8 per doubling across every knee);
        # measured here ~15 % less worker CPU time, the same verdicts.
        # 64M keeps two sizes in a 32 MiB LLC's memory window (1.5-2x the LLC).
        # Samples of 0.5 ms (a pair: 0.5 and 1 ms): a quarter less time a
        # quick replica, with the same answers (docs/machine-notes.md)
        "quick": {"max_size": "64M", "per_octave": 3, "samples": 5,   # x 3 replicas
                  "min_sample_ms": 0.5,
                  # huge pages at 1, 2, ... 64 MiB in every replica: with them
                  # only around each replica's own knees, a step where TLB
                  # reach and the L3 meet was left undecided and l3_capacity
                  # inconclusive (docs/machine-notes.md)
                  "huge_from": "1M"},
        # samples of 0.5 ms as in quick: the timed samples (1 and 2 ms) were
        # half of a 71 s full replica and each visit's re-warm scales with them
        "full": {"per_octave": 3, "pages": "4k,thp", "samples": 7, "min_sample_ms": 0.5},
    }

    # -- plan --
    def max_bytes(self, params, machine):
        if params["max_size"] != "auto":
            return params["max_size"]
        avail = (machine.get("memory") or {}).get("available_bytes") or (4 << 30)
        # both arms of a point live at once: keep them within a third of free
        # memory.  To the window's top, not past it: each cell beyond took
        # seconds a replica and answered nothing (docs/machine-notes.md)
        return int(min(MEMORY_TO * Fingerprint.of(machine).llc_bytes, avail / 6))

    def plan(self, params, machine):
        lo, hi = params["min_size"], self.max_bytes(params, machine)
        elem = 8 * (params["npad"] + 1)
        if hi < lo:
            raise ParamError(f"max_size ({format_size(hi)}) is below min_size ({format_size(lo)})")
        if lo < 2 * elem:
            raise ParamError(f"min_size must hold at least two {elem}-byte elements")
        anchors = [c.size_bytes for c in Fingerprint.of(machine).caches]
        sizes = size_grid(lo, hi, params["per_octave"], anchors,
                          params.get("sparse_from") or 0)   # runs stored before it: 0
        # the largest planned working set (the grid may step just past max_size)
        avail = (machine.get("memory") or {}).get("available_bytes")
        peak = peak_bytes(max(sizes), params["npad"])
        if avail and peak > avail * 0.8:
            raise ParamError(f"max_size {format_size(hi)} does not fit: both arms and the shuffled "
                             f"order need {format_size(peak)} and {format_size(avail)} is available")
        # largest first: each arm's mapping is pooled for the replica (see
        # prepare), so the first cell maps and faults it once
        points = [Point(arm, {"size_bytes": s, "pages": pg, "npad": params["npad"]})
                  for pg in params["pages"]
                  for s in sorted(sizes, reverse=True)
                  for arm in self.arms]
        huge_from = params.get("huge_from") or 0      # runs stored before it have none
        if huge_from and "thp" not in params["pages"] and lo < hi and huge_from <= hi:
            points += [Point("random", {"size_bytes": s, "pages": "thp", "npad": params["npad"]})
                       for s in sorted(size_grid(max(lo, huge_from), hi, 1),
                                       reverse=True)]
        return points

    def refine(self, data, params, machine):
        """After the first pass: fine steps (8 per octave) across each knee of
        the random curves, and -- when huge pages are not swept -- the random
        chase with huge pages at the sizes around each knee no reported cache
        size explains, so the analysis can tell a cache from a TLB knee."""
        if not params["refine"]:
            return []
        caches = reported_caches(machine)
        extra = []
        for pg in params["pages"]:
            pts = chase_curve(data, pg)
            if len(pts) < 4:
                continue
            have = {p["params"]["size_bytes"] for p in pts}
            levels = curve_levels(pts)
            sparse = params.get("sparse_from") or 0
            for lv in levels[:-1]:
                lo, hi = lv.knee_low or lv.last_size, lv.knee_high or lv.last_size * 2
                # past sparse_from 4 steps per doubling: each size there is a
                # DRAM chain of a second or more (docs/machine-notes.md)
                steps = 4 if sparse and lo >= sparse else 8
                for s in size_grid(lo, hi, steps)[1:-1][:6]:
                    if s not in have:
                        extra += [Point(arm, {"size_bytes": s, "pages": pg, "npad": params["npad"]})
                                  for arm in self.arms]
            if pg != "4k" or "thp" in params["pages"]:
                continue
            sizes = [p["params"]["size_bytes"] for p in pts]
            have_huge = {p["params"]["size_bytes"] for p in chase_curve(data, "thp")}
            for lv in levels[:-1]:
                if lv.knee_size is None or matching_cache(caches, lv.knee_size) is not None:
                    continue
                # the last two sizes of the plateau, the ramp, the first two
                # of the next one (the fine steps may move the knee inside)
                lo, hi = sizes.index(lv.knee_low), sizes.index(lv.knee_high)
                for s in sizes[max(0, lo - 1):hi + 2]:
                    if s not in have_huge:
                        extra.append(Point("random", {"size_bytes": s, "pages": "thp",
                                                      "npad": params["npad"]}))
        unique = {}
        for p in extra:
            unique.setdefault((p.arm, tuple(sorted(p.params.items()))), p)
        return list(unique.values())

    # -- one trial --
    def prepare(self, point, params, lab):
        size, npad = point.params["size_bytes"], point.params["npad"]
        elem = 8 * (npad + 1)
        n = size // elem
        thp = point.params["pages"] == "thp"
        # One mapping per arm and page size for the whole replica
        # (lab.pooled_buffer), the largest cell first (plan): a fresh mapping
        # per cell faulted ~5x the largest set per arm, and in a guest fresh
        # pages fault slowly (the host backs them on first touch:
        # docs/machine-notes.md, "Latency's sizes"): most of a full
        # replica's time.  The chain is relinked over the mapping every cell;
        # each replica is its own process, so replicas still get fresh pages.
        lab.drop_pooled(("latency", point.arm), not thp)
        region = lab.pooled_buffer(("latency", point.arm), n * elem, hugepages=thp)
        order = shuffled_order(n, [params["seed"], size, npad]) if point.arm == "random" else None
        # the core writes the next-pointers itself (element order[i] -> order[i + 1])
        region = lab.link_chain(region, elem, n, order)
        del order
        extra = {"elements": n}
        if thp:
            share = lab.huge_page_share(region)
            if share is not None:
                extra["huge_page_share"] = round(share, 3)
        return Trial("chase_ptr", src=region, size=0, metric="time", difference=True,
                     extra=extra, warmup=min(n, 1 << 20), resume=True)

    def verify(self, lab, params):
        """The chain the core links must be one cycle through every element,
        each element pointing at its successor in the order (chain_links)."""
        for n in (1, 2, 3, 64, 1000):
            order = shuffled_order(n, params["seed"])
            nxt = linked_successors(order, elem=16)
            if cycle_length(nxt) != n or not np.array_equal(nxt, chain_links(order)):
                raise AssertionError(f"pointer chain of {n} elements is not a single cycle")

    # -- analysis --
    questions = QUESTIONS

    # random and sequential chase per page size (pages in the labels only
    # when both were measured); a line at each capacity answer's knee, a
    # dashed one at each TLB knee of latency.tlb_reach
    plots = (
        PlotSpec("chase", "ns per dependent load vs working set", x="size_bytes",
                 series=("arm", "pages"), hide_constant=True, size_x=True, log_y=True,
                 xlabel="working set (bytes)", ylabel="ns per dependent load (log)",
                 marks=tuple(Mark(f"latency.{name}_capacity",
                                  label=("L1d" if name == "l1d" else name.upper()) + " ends ~{x}")
                             for name, _ in CACHE_LEVELS)
                 + (Mark("latency.tlb_reach", details=True, where={"verdict": "tlb"},
                         label="TLB knee {x}", style="--"),)),
    )


# --------------------------------------------------------------------------
# analysis helpers (pure functions of points)


