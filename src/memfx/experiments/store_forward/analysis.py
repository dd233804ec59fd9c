"""Store forwarding's analysis (the kit): pure helpers (size ranges, cycles
per ns, a bootstrapped difference of medians) and the classification of
sizes and cells by code path (entry_paths, matrix_classes) that the answers
judge against.  Moved out of store_forward.py, which re-exports every
name."""
from __future__ import annotations

import numpy as np

from ...model import stats
from ...model.answers import evidence_keys, pooled_values
from ...model.findings import threshold
from .kernels import cell_kind, copy_shape, shape_overlaps

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
