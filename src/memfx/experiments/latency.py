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

Analysis: plateaus and knees of the random curve (stats.find_levels), each
matched to a cache size that sysfs reports; knees with no cache nearby are
reported as TLB reach when the 4 KiB curve shows them and the huge-page
curve does not.
"""
from __future__ import annotations

import math

import numpy as np

from .. import stats
from ..errors import ParamError
from ..findings import DETECTED, MEASURED, NOT_DETECTED, Finding, effect_verdict
from ..units import format_size
from .base import Experiment, Param, Point, Region, Trial, register

# A knee within this factor of a reported cache size is taken to be that cache.
KNEE_MATCH_FACTOR = 2.0


def chain_links(order):
    """next_index[e] for the cyclic chain visiting elements in `order`."""
    nxt = np.empty(len(order), dtype=np.int64)
    nxt[order] = np.roll(order, -1)
    return nxt


def linked_successors(order, elem):
    """next_index[e] as read back from a chain the core linked in `order`."""
    from .. import _core
    n = len(order)
    buf = bytearray(n * elem)
    _core.link_chain(buf, 0, elem, n, order)
    words = np.frombuffer(buf, dtype=np.uint64)[::elem // 8]
    return ((words - np.uint64(_core.address(buf))) // np.uint64(elem)).astype(np.int64)


def index_itemsize(n):
    """Bytes per index of a shuffled order of n elements: int32 below 2^31."""
    return 4 if n < 2 ** 31 else 8


def shuffled_order(n, seed):
    """The random arm's visiting order: a permutation of 0..n-1 shuffled in
    place in the narrowest index type (the same permutation as
    default_rng(seed).permutation(n), without its int64 array)."""
    order = np.arange(n, dtype=np.int32 if index_itemsize(n) == 4 else np.int64)
    np.random.default_rng(seed).shuffle(order)
    return order


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


def size_grid(lo, hi, per_octave, anchors=()):
    """Geometric sizes from lo to hi plus points on both sides of each anchor;
    never outside [lo, hi], so lo == hi measures exactly that one size."""
    if hi <= lo:
        return [int(lo)]
    n = max(1, int(round(math.log2(hi / lo) * per_octave)))
    sizes = {int(round(lo * 2 ** (i / per_octave))) for i in range(n + 1)}
    sizes = {s for s in sizes if s <= hi}
    sizes.add(int(hi))
    for a in anchors:
        for f in (0.75, 1.5):
            s = int(a * f)
            if lo <= s <= hi:
                sizes.add(s)
    return sorted(sizes)


@register
class Latency(Experiment):
    name = "latency"
    title = "Load latency vs working-set size"
    question = "How long does a load take in each level of the memory hierarchy, and where does each level end?"
    seeds = ("004",)
    arms = ("random", "sequential")
    params = [
        Param("min_size", "size", 1024, "smallest working set, bytes", "4K", minimum=64),
        Param("max_size", "size", "auto",
              "largest working set, bytes; auto = 4x the last-level cache (bounded by free memory)",
              "256M"),
        Param("per_octave", "int", 4, "working-set sizes per doubling (geometric steps)", "8",
              minimum=1, maximum=32),
        Param("npad", "int", 7,
              "padding words per element (Drepper's NPAD): element = 8*(npad+1) bytes", "0",
              minimum=0, maximum=511),
        Param("pages", "list:str", ["4k"], "page sizes to compare: 4k and/or thp (MADV_HUGEPAGE)",
              "4k,thp", choices=("4k", "thp")),
        Param("refine", "bool", True, "add fine-step points inside each knee found", "false"),
    ]
    presets = {
        "quick": {"max_size": "64M", "per_octave": 4, "samples": 9},
        "full": {"per_octave": 4, "pages": "4k,thp", "samples": 11},
    }

    # -- plan --
    def max_bytes(self, params, machine):
        if params["max_size"] != "auto":
            return params["max_size"]
        llc = max((c["size_bytes"] for c in machine.get("caches", [])
                   if c.get("type") in ("Data", "Unified")), default=32 << 20)
        avail = (machine.get("memory") or {}).get("available_bytes") or (4 << 30)
        # both arms of a point live at once: keep them within a third of free memory
        return int(min(4 * llc, avail / 6))

    def plan(self, params, machine):
        lo, hi = params["min_size"], self.max_bytes(params, machine)
        elem = 8 * (params["npad"] + 1)
        if hi < lo:
            raise ParamError(f"max_size ({format_size(hi)}) is below min_size ({format_size(lo)})")
        if lo < 2 * elem:
            raise ParamError(f"min_size must hold at least two {elem}-byte elements")
        anchors = [c["size_bytes"] for c in machine.get("caches", [])
                   if c.get("type") in ("Data", "Unified")]
        sizes = size_grid(lo, hi, params["per_octave"], anchors)
        # the largest planned working set (the grid may step just past max_size)
        avail = (machine.get("memory") or {}).get("available_bytes")
        peak = peak_bytes(max(sizes), params["npad"])
        if avail and peak > avail * 0.8:
            raise ParamError(f"max_size {format_size(hi)} does not fit: both arms and the shuffled "
                             f"order need {format_size(peak)} and {format_size(avail)} is available")
        return [Point(arm, {"size_bytes": s, "pages": pg, "npad": params["npad"]})
                for pg in params["pages"]
                for s in sizes
                for arm in self.arms]

    def refine(self, data, params, machine):
        """Fine steps (8 per octave) across each knee of the random curves."""
        if not params["refine"]:
            return []
        extra = []
        for pg in params["pages"]:
            pts = sorted(data.select("random", pages=pg), key=lambda p: p["params"]["size_bytes"])
            pts = [p for p in pts if p["median"]]
            if len(pts) < 4:
                continue
            levels = stats.find_levels([p["params"]["size_bytes"] for p in pts],
                                       [p["median"] for p in pts])
            have = {p["params"]["size_bytes"] for p in pts}
            for lv in levels[:-1]:
                lo, hi = lv.knee_low or lv.last_size, lv.knee_high or lv.last_size * 2
                for s in size_grid(lo, hi, 8)[1:-1][:6]:
                    if s not in have:
                        extra += [Point(arm, {"size_bytes": s, "pages": pg, "npad": params["npad"]})
                                  for arm in self.arms]
        return extra

    # -- one trial --
    def prepare(self, point, params, lab):
        from .. import _core
        size, npad = point.params["size_bytes"], point.params["npad"]
        elem = 8 * (npad + 1)
        n = size // elem
        region = lab.buffer(n * elem, align=4096, hugepages=point.params["pages"] == "thp")
        order = shuffled_order(n, [params["seed"], size, npad]) if point.arm == "random" else None
        # the core writes the next-pointers itself (element order[i] -> order[i + 1])
        chain = _core.link_chain(region.buffer, region.offset, elem, n, order)
        del order
        region = Region(chain, region.offset, region.size, region.address)
        extra = {"elements": n}
        if point.params["pages"] == "thp":
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
    def analyze(self, data):
        caches = [c for c in data.machine.get("caches", []) if c.get("type") in ("Data", "Unified")]
        findings = []
        curves = {}
        for pg in data.params.get("pages", ["4k"]):
            pts = sorted((p for p in data.select("random", pages=pg) if p["median"]),
                         key=lambda p: p["params"]["size_bytes"])
            if len(pts) < 3:
                continue
            levels = stats.find_levels([p["params"]["size_bytes"] for p in pts],
                                       [p["median"] for p in pts])
            curves[pg] = (pts, levels)
        if not curves:
            return findings
        main_pg = "4k" if "4k" in curves else next(iter(curves))
        pts, levels = curves[main_pg]
        other_knees = None          # knees of the huge-page curve, when measured
        for pg, (_, lv) in curves.items():
            if pg != main_pg:
                other_knees = [x.knee_size for x in lv[:-1] if x.knee_size]
        matched = set()
        for i, lv in enumerate(levels):
            in_level = [p for p in pts if lv.first_size <= p["params"]["size_bytes"] <= lv.last_size]
            pooled = np.concatenate([np.asarray(p["values"], float) for p in in_level]) \
                if in_level else np.array([lv.latency_ns])
            lo, hi = stats.bootstrap_ci(pooled)
            cyc = [p["cycles_est"] for p in in_level if p.get("cycles_est")]
            name = f"level {i + 1}" if i < len(levels) - 1 else f"level {i + 1} (last: memory)"
            findings.append(Finding(
                id=f"level{i + 1}_latency", claim=f"Load-to-use latency, {name}, random chase ({main_pg} pages)",
                verdict=MEASURED, value=float(np.median(pooled)), unit="ns", ci_low=lo, ci_high=hi,
                evidence={"first_size": lv.first_size, "last_size": lv.last_size,
                          "points": len(in_level), "cycles_est": float(np.median(cyc)) if cyc else None},
                seed="004", experiment=self.name))
            if i == len(levels) - 1 or not lv.knee_size:
                continue
            knee = lv.knee_size
            cache = _nearest_cache(caches, knee)
            evidence = {"knee_bytes": knee, "knee_low": lv.knee_low, "knee_high": lv.knee_high,
                        "latency_before_ns": lv.latency_ns, "latency_after_ns": levels[i + 1].latency_ns}
            # A step that the huge-page curve does not show is a page-walk /
            # TLB-reach effect even when a cache size happens to be nearby.
            tlb_only = other_knees is not None and not any(
                abs(math.log2(knee / k)) < 1 for k in other_knees)
            if tlb_only:
                claim = f"Knee at {format_size(knee)} with 4 KiB pages only (absent with huge pages): TLB reach / page walks"
                fid = f"knee_tlb_{i + 1}"
            elif cache is not None:
                matched.add(id(cache))
                label = _cache_label(cache)
                evidence.update(reported_bytes=cache["size_bytes"], reported=label)
                claim = (f"Capacity knee at {format_size(knee)} matches {label} "
                         f"({format_size(cache['size_bytes'])} per sysfs)")
                fid = f"knee_{label.lower()}"
            else:
                near = min(caches, key=lambda c: abs(math.log2(knee / c["size_bytes"])), default=None)
                claim = f"Knee at {format_size(knee)} matches no cache size the OS reports"
                if near is not None:
                    claim += (f" (nearest: {_cache_label(near)} = {format_size(near['size_bytes'])}, "
                              f"{max(knee, near['size_bytes']) / min(knee, near['size_bytes']):.1f}x away)")
                    evidence.update(nearest_reported=_cache_label(near),
                                    nearest_reported_bytes=near["size_bytes"])
                fid = f"knee_{i + 1}"
            findings.append(Finding(id=fid, claim=claim, verdict=DETECTED, value=float(knee),
                                    unit="bytes", ci_low=lv.knee_low, ci_high=lv.knee_high,
                                    evidence=evidence, seed="004", experiment=self.name))
        max_size = pts[-1]["params"]["size_bytes"]
        for c in caches:
            if id(c) in matched or c["size_bytes"] * 1.5 > max_size:
                continue
            label = _cache_label(c)
            findings.append(Finding(
                id=f"knee_{label.lower()}", verdict=NOT_DETECTED, value=float(c["size_bytes"]),
                unit="bytes", claim=f"No latency step at {label} = {format_size(c['size_bytes'])} "
                                    f"(the size sysfs reports)",
                evidence={"reported_bytes": c["size_bytes"], "levels_found": len(levels)},
                seed="004", experiment=self.name))
        if "thp" in curves and main_pg == "4k":
            big4k, bigthp = curves["4k"][0][-1], curves["thp"][0][-1]
            if big4k["params"]["size_bytes"] == bigthp["params"]["size_bytes"] and bigthp["median"]:
                r = stats.ratio_of_medians(big4k["values"], bigthp["values"])
                findings.append(Finding(
                    id="huge_page_benefit",
                    claim=f"Random loads at {format_size(big4k['params']['size_bytes'])}: 4 KiB pages vs "
                          f"transparent huge pages (x slower with 4 KiB pages)",
                    verdict=effect_verdict(r["ratio"], r["ci_low"], r["ci_high"], r["n_a"], r["n_b"]),
                    value=r["ratio"], unit="x", ci_low=r["ci_low"], ci_high=r["ci_high"],
                    evidence={"ns_4k": big4k["median"], "ns_thp": bigthp["median"],
                              "huge_page_share": bigthp.get("counters", {}).get("huge_page_share")},
                    seed="004", experiment=self.name))
        seq = sorted((p for p in data.select("sequential", pages=main_pg) if p["median"]),
                     key=lambda p: p["params"]["size_bytes"])
        if seq and pts:
            big_r, big_s = pts[-1], seq[-1]
            findings.append(Finding(
                id="prefetch_benefit", claim="Sequential chase vs random at the largest working set "
                                             "(hardware prefetch benefit, x faster)",
                verdict=MEASURED, value=big_r["median"] / big_s["median"] if big_s["median"] else None,
                unit="x", evidence={"size_bytes": big_r["params"]["size_bytes"],
                                    "random_ns": big_r["median"], "sequential_ns": big_s["median"]},
                seed="004", experiment=self.name))
        return findings


def _cache_label(c):
    return f"L{c['level']}" + ("d" if c.get("type") == "Data" else "")


def _nearest_cache(caches, size):
    best = None
    for c in caches:
        r = abs(math.log2(size / c["size_bytes"]))
        if r <= math.log2(KNEE_MATCH_FACTOR) and (best is None or r < best[0]):
            best = (r, c)
    return best[1] if best else None
