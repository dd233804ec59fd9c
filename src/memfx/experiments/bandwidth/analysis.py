"""Bandwidth's analysis: analyze and the answers it gathers (per level,
knees, random order, the non-temporal crossover, write and read back, thread
scaling, loaded latency), as methods of BandwidthAnswers, which Bandwidth
inherits, and the pure helpers they rest on (curves, plateaus by level, bytes
per cycle).  The protocol (__init__.py) re-exports every name."""
from __future__ import annotations

import math

import numpy as np

from ...model import answers as ans
from ...model import stats
from ...model.details import detail
from ...model.units import format_size
from .._kit import cpu_text
from ..levels import (
    DRAM_FROM,
    INSIDE_ABOVE,
    data_caches,
    level_windows,
)
from .kernels import (
    KERNELS,
    LEVEL_KINDS,
    LEVEL_LABEL,
    LEVELS,
)

# A knee within this factor of a reported cache size is that cache's.
KNEE_MATCH_FACTOR = 2.0
# The pooled samples of a plateau spread more than this (CV): a contended
# (shared) cache or a noisy host, flagged in the details.
CONTENDED_CV = 0.10
# The best sustained figure: this quantile of the samples (high: GB/s).
BEST_QUANTILE = 0.9


def where(level):
    """The working sets a level's figure comes from, e.g. "3 working sets 2 MiB..8 MiB"."""
    first, last = format_size(level["first_size"]), format_size(level["last_size"])
    if level["points"] == 1:
        return f"1 working set of {first}"
    return f"{level['points']} working sets {first}..{last}"


class BandwidthAnswers:
    """The answers of the bandwidth experiment (a mixin: `self` is the
    Bandwidth experiment, whose declared questions they answer)."""

    @staticmethod
    def _one_cpu_reason(data):
        """Why the threaded parts could not run, or None."""
        cpus = data.params.get("cpus")
        if isinstance(cpus, (list, tuple)) and len(cpus) < 2:
            return (f"only one CPU ({cpu_text(cpus)}) is allowed to this process: no second "
                    f"thread to run beside the first")
        most = data.params.get("threads")
        if most == 1:
            return "threads=1: no second thread to run beside the first"
        return None

    def _scaling_answer(self, data):
        q = self.declared("thread_scaling")
        pts = [p for p in data.points if p["params"].get("part") == "scaling"]
        why = self._one_cpu_reason(data)
        if why:
            return ans.not_measured(q, why)
        if not pts:
            return ans.not_measured(q, "the scaling part was not measured (scaling=none, or no "
                                       "level's working set lies between min_size and max_size)")
        groups = {}
        for p in pts:
            pr = p["params"]
            groups.setdefault((pr["level"], p["arm"][len("threads_"):]), {})[pr["threads"]] = p
        details = []
        for (lid, kind), by_n in sorted(groups.items(), key=lambda kv: (
                LEVELS.index(kv[0][0]) if kv[0][0] in LEVELS else 9, kv[0][1])):
            one = by_n.get(1)
            for n in sorted(by_n):
                if n == 1:
                    continue
                p = by_n[n]
                # the columns a reader wants first come first (tables show the first few)
                d = detail(f"{LEVEL_LABEL.get(lid, lid)} {kind} x{n}", value=None,
                           unit="ratio", ci=None,
                           single_gb_per_s=one["median"] if one and one.get("n") else None,
                           aggregate_gb_per_s=p["median"] if p.get("n") else None,
                           level=lid, kind=kind, threads=n, kernel=p["params"]["kernel"],
                           size_bytes_per_thread=p["params"]["size_bytes"],
                           rejected=p.get("rejected", 0) + (one.get("rejected", 0) if one else 0),
                           evidence=ans.evidence_keys([x for x in (p, one) if x]))
                if not (one and one.get("n") and p.get("n")):
                    d = d.updated(value=None, ci=None, verdict=ans.NOT_MEASURED,
                             why="every sample of one side was rejected (threads not side by "
                                 "side, switched out or migrated: a busy machine)")
                else:
                    e = ans.effect(q, p["values"], one["values"], "")
                    d = d.updated(value=e.value, ci_low=e.ci_low, ci_high=e.ci_high,
                                  verdict="measured", per_thread_gb_per_s=p["median"] / n,
                                  efficiency=e.value / n if e.value is not None else None)
                details.append(d)
        ok = [d for d in details if d["value"] is not None]
        if not ok:
            return ans.not_measured(q, "no level has both its 1-thread and its N-thread point: "
                                       "every sample of one side was rejected (threads not side "
                                       "by side, switched out or migrated: a busy machine)")
        # The same evidence every run (issue 22): the answer is the declared
        # cell -- read, DRAM, the most threads planned -- or not measured;
        # never whichever level happened to survive (DRAM in one run and L3
        # in the next made a 1.98 -> 1.30 "regression").
        most = max(d["threads"] for d in details)
        top = [d for d in ok if d["threads"] == most]
        head = next((d for d in top if d["kind"] == "read" and d["level"] == "dram"), None)
        if head is None:
            return ans.Answer(q.id, ans.NOT_MEASURED,
                              f"the declared cell (read in DRAM with {most} threads) has no "
                              f"value: not planned, or every sample of one side was rejected; "
                              f"the other levels are in details", details=details)
        reads = [d for d in top if d["kind"] == head["kind"]]
        because = (f"{most} threads, each on its own buffer (sharing nothing, as two processes; "
                   f"in DRAM one 2x-LLC set split among them, as STREAM does), "
                   f"{head['kind']} {head['value']:.2f}x one thread's GB/s in "
                   f"{LEVEL_LABEL.get(head['level'], head['level'])} "
                   f"({head['single_gb_per_s']:.1f} -> {head['aggregate_gb_per_s']:.1f} GB/s); "
                   + ", ".join(f"{LEVEL_LABEL.get(d['level'], d['level'])} {d['value']:.2f}x"
                               for d in reads if d is not head))
        return ans.Answer(q.id, "measured", because.rstrip("; "), value=head["value"],
                          ci_low=head["ci_low"], ci_high=head["ci_high"],
                          evidence=head["evidence"], details=details, estimator=q.decides)

    def _loaded_answer(self, data):
        q = self.declared("loaded_latency")
        why = self._one_cpu_reason(data)
        if why:
            return ans.not_measured(q, why.replace("run beside the first",
                                                   "stream reads while the first chases"))
        pts = [p for p in data.points if p["params"].get("part") == "loaded"]
        if not pts:
            return ans.not_measured(q, "the loaded-latency part was not measured "
                                       "(latency_levels=none, as in the quick preset: --full or "
                                       "--set latency_levels=dram measures it; or no level's "
                                       "working set lies between min_size and max_size)")
        by_size = {}
        for p in pts:
            by_size.setdefault(p["params"]["size_bytes"], {})[p["arm"]] = p
        loader = {}
        for smp in data.samples:
            pr = smp.get("point") or {}
            if pr.get("part") == "loaded" and smp["arm"] == "loaded_latency":
                c = smp.get("counters") or {}
                if c.get("team_loader_gb_per_s") is not None:
                    loader.setdefault(pr["size_bytes"], []).append(c["team_loader_gb_per_s"])
        details = []
        for size in sorted(by_size):
            idle, busy = by_size[size].get("idle_latency"), by_size[size].get("loaded_latency")
            lid = (idle or busy)["params"]["level"]
            d = detail(f"{format_size(size)} ({LEVEL_LABEL.get(lid, lid)})", value=None,
                       unit="ratio", ci=None,
                       idle_ns=idle["median"] if idle and idle.get("n") else None,
                       loaded_ns=busy["median"] if busy and busy.get("n") else None,
                       level=lid, size_bytes=size,
                       loaders=(busy or idle)["params"]["threads"] - 1,
                       loader_gb_per_s=float(np.median(loader[size])) if loader.get(size) else None,
                       rejected=sum(x.get("rejected", 0) for x in (idle, busy) if x),
                       evidence=ans.evidence_keys([x for x in (idle, busy) if x]))
            if d["idle_ns"] is None or d["loaded_ns"] is None:
                d = d.updated(value=None, ci=None, verdict=ans.NOT_MEASURED)
            else:
                e = ans.effect(q, busy["values"], idle["values"], "")
                d = d.updated(value=e.value, ci_low=e.ci_low, ci_high=e.ci_high,
                              verdict=e.verdict)
            details.append(d)
        ok = [d for d in details if d["value"] is not None]
        if not ok:
            return ans.not_measured(q, "every sample of the idle or the loaded chase was "
                                       "rejected (loaders not covering the chase, switched out "
                                       "or migrated: a busy machine)")
        head = next((d for d in ok if d["level"] == "dram"), ok[-1])
        bw = f", loaders {head['loader_gb_per_s']:.1f} GB/s" if head["loader_gb_per_s"] else ""
        because = (f"a random load takes {head['value']:.2f}x as long in {head['label']} while "
                   f"{head['loaders']} other CPU(s) stream reads ({head['idle_ns']:.0f} -> "
                   f"{head['loaded_ns']:.0f} ns{bw})"
                   + "".join(f"; {d['label']} {d['value']:.2f}x" for d in ok if d is not head))
        return ans.Answer(q.id, "measured", because, value=head["value"], ci_low=head["ci_low"],
                          ci_high=head["ci_high"], evidence=head["evidence"], details=details,
                          estimator=q.decides)

    def _level_answer(self, kind, lid, candidates, caches, curves, bpc, planned):
        q = self.declared(f"{kind}_{lid}")
        label = LEVEL_LABEL[lid]
        if not caches:
            return ans.not_measured(q, "the machine reports no cache sizes, so no level can be "
                                       "told apart")
        if lid != "dram" and lid not in dict(caches):
            return ans.not_measured(q, f"this machine reports no {label}")
        if not any(k == kind for k, _, _ in curves):
            return ans.not_measured(q, f"the {kind} kind was not measured")
        if not candidates:
            return ans.not_measured(q, _unreached(kind, lid, caches, curves, planned))
        details = []
        for kernel, pages, ps, how in candidates:
            values = ans.pooled_values(ps)
            cyc = [c for p in ps for c in bpc.get(ans.point_key(p), [])]
            lo_ci, hi_ci = stats.bootstrap_ci(values) if values.size >= 3 else (None, None)
            cv = stats.cv_of(values) if values.size else None
            details.append(detail(
                f"{kernel} ({pages})", kernel=kernel, pages=pages,
                value=float(np.median(values)), unit="GB/s", ci_low=lo_ci,
                ci_high=hi_ci, bytes_per_cycle=float(np.median(cyc)) if cyc else None,
                best_sustained_gb_per_s=float(np.quantile(values, BEST_QUANTILE)),
                first_size=ps[0]["params"]["size_bytes"], last_size=ps[-1]["params"]["size_bytes"],
                points=len(ps), plateau=how, cv=cv,
                contended=bool(cv is not None and cv > CONTENDED_CV),
                evidence=ans.evidence_keys(ps)))
        best = max(range(len(details)), key=lambda i: details[i]["value"])
        d = details[best]
        ps = candidates[best][2]
        a = ans.measured(q, ans.pooled_values(ps), "", evidence=ans.evidence_keys(ps),
                         details=details, estimator="median of the plateau's samples (pooled), "
                                                    "best kernel")
        per_cycle = f", {d['bytes_per_cycle']:.1f} B/cycle (est.)" if d["bytes_per_cycle"] else ""
        how = "" if d["plateau"] == "find_levels" else \
            " (no plateau found there: the points inside the level)"
        flag = "; the samples spread widely (contended or noisy), take it with care" \
            if d["contended"] else ""
        a.because = (f"{a.value:.1f} GB/s{per_cycle} with {d['kernel']} ({d['pages']} pages), "
                     f"{where(d)}{how}{flag}")
        return a

    def _knee_answer(self, read_levels, caches):
        q = self.declared("knees")
        if read_levels is None:
            return ans.not_measured(q, "the read kind was not measured")
        pts, levels, kernel, pages = read_levels
        if len(pts) < 4:
            return ans.not_measured(q, "fewer than 4 working sets: no curve to find knees on")
        details, matched = [], set()
        for lv in levels[:-1]:
            if not lv.knee_size:
                continue
            cache = _nearest_cache(caches, lv.knee_size)
            d = detail(f"knee {format_size(lv.knee_size)}", value=float(lv.knee_size),
                       unit="bytes", ci_low=lv.knee_low, ci_high=lv.knee_high,
                       gb_per_s_before=1.0 / lv.latency_ns if lv.latency_ns else None)
            if cache:
                matched.add(cache[0])
                d = d.updated(cache=LEVEL_LABEL.get(cache[0], cache[0]),
                              reported_bytes=cache[1], verdict="detected")
            else:
                d = d.updated(cache=None, verdict="not_detected")
            details.append(d)
        reached = [lid for lid, cap in caches if cap * DRAM_FROM <= pts[-1]["params"]["size_bytes"]
                   and cap * INSIDE_ABOVE >= pts[0]["params"]["size_bytes"]]
        for lid in reached:
            if lid not in matched:
                cap = dict(caches)[lid]
                details.append(detail(f"{LEVEL_LABEL.get(lid, lid)} {format_size(cap)}",
                                      value=None, unit="bytes", cache=LEVEL_LABEL.get(lid, lid),
                                      reported_bytes=cap, verdict="not_detected"))
        if not reached:
            return ans.not_measured(q, "the sweep does not span any reported cache size "
                                       "(from inside it to twice it)")
        names = ", ".join(f"{d['cache']} at {format_size(d['value'])}" for d in details
                          if d.get("verdict") == "detected")
        missing = [d["cache"] for d in details if d.get("value") is None]
        unmatched = [format_size(d["value"]) for d in details
                     if d.get("value") is not None and not d.get("cache")]
        because = (f"read curve ({kernel}, {pages}): knees {names or 'none matched'}"
                   + (f"; no step at {', '.join(missing)}" if missing else "")
                   + (f"; knees at no reported size: {', '.join(unmatched)}" if unmatched else ""))
        return ans.Answer(q.id, "measured", because, value=float(len(matched & set(reached))),
                          evidence=ans.evidence_keys(pts), details=details,
                          estimator=f"stats.find_levels on 1/GB/s; a knee within "
                                    f"{KNEE_MATCH_FACTOR:g}x of a reported size matches it")

    def _random_answer(self, curves, caches):
        q = self.declared("random_vs_sequential")
        pairs = []
        for (kind, kernel, pages), rnd in curves.items():
            if kind != "random":
                continue
            width = kernel[len("bw_random_"):]
            seq = curves.get(("read", KERNELS["read"][width], pages))
            if seq:
                pairs.append((width, pages, seq, rnd))
        if not pairs:
            return ans.not_measured(q, "needs the read and random kinds at one width")
        width, pages, seq, rnd = sorted(pairs, key=lambda x: (x[1] != "4k", x[0]))[0]
        details, effects = [], []
        for lid, (lo, hi) in level_windows(caches).items():
            s = [p for p in seq if lo < p["params"]["size_bytes"] <= hi]
            r = [p for p in rnd if lo < p["params"]["size_bytes"] <= hi]
            common = {p["params"]["size_bytes"] for p in s} & {p["params"]["size_bytes"] for p in r}
            s = [p for p in s if p["params"]["size_bytes"] in common]
            r = [p for p in r if p["params"]["size_bytes"] in common]
            if not common:
                continue
            e = ans.effect(q, ans.pooled_values(s), ans.pooled_values(r), "")
            details.append(detail(LEVEL_LABEL.get(lid, lid), level=lid, value=e.value,
                                  unit="ratio", ci_low=e.ci_low, ci_high=e.ci_high,
                                  verdict=e.verdict,
                                  sequential_gb_per_s=float(np.median(ans.pooled_values(s))),
                                  random_gb_per_s=float(np.median(ans.pooled_values(r))),
                                  evidence=ans.evidence_keys(s + r)))
            effects.append(e)
        if not details:
            return ans.not_measured(q, "no working set inside a cache level or DRAM has both "
                                       "the read and the random kind")
        i = next((i for i, d in enumerate(details) if d["level"] == "dram"), len(details) - 1)
        head, a = details[i], effects[i]
        a.details, a.evidence = details, head["evidence"]
        a.because = (f"Reading lines in sequential order is {a.value:.2f}x as fast as in random "
                     f"order in {head['label']} "
                     f"({head['sequential_gb_per_s']:.1f} vs {head['random_gb_per_s']:.1f} GB/s, "
                     f"{width}, {pages} pages); "
                     + ", ".join(f"{d['label']} {d['value']:.2f}x" for d in details))
        return a

    def _nt_crossover_answer(self, curves):
        q = self.declared("nt_write_crossover")
        nt = next((ps for (k, _, _pg), ps in curves.items() if k == "nt_write" and _pg == "4k"),
                  None) or next((ps for (k, _, _), ps in curves.items() if k == "nt_write"), None)
        if not nt:
            return ans.not_measured(q, "the nt_write kind was not measured")
        pages = nt[0]["params"]["pages"]
        normal = {}
        for (k, kernel, pg), ps in curves.items():
            if k == "write" and pg == pages:
                for p in ps:
                    s = p["params"]["size_bytes"]
                    if s not in normal or p["median"] > normal[s]["median"]:
                        normal[s] = p
        rows = []
        for p in nt:
            s = p["params"]["size_bytes"]
            if s in normal:
                e = ans.effect(q, p["values"], normal[s]["values"], "")
                rows.append((s, e, p, normal[s]))
        if not rows:
            return ans.not_measured(q, "needs nt_write and a normal write at the same sizes")
        details = [detail(f"{format_size(s)}", size_bytes=s, value=e.value,
                          unit="ratio", ci_low=e.ci_low, ci_high=e.ci_high,
                          verdict=e.verdict, nt_gb_per_s=p["median"],
                          normal_gb_per_s=w["median"], normal_kernel=w["params"]["kernel"])
                   for s, e, p, w in rows]
        wins = [e.verdict == "detected" and e.value > 1 for _, e, _, _ in rows]
        cross = None
        for i in range(len(rows)):
            if all(wins[i:]):
                cross = i
                break
        top = format_size(rows[-1][0])
        if cross is None:
            return ans.Answer(q.id, "not_detected",
                              f"a non-temporal write never beats a normal one from some size up "
                              f"to {top} (largest measured: {rows[-1][1].value:.2f}x)",
                              details=details, evidence=ans.evidence_keys([rows[-1][2]]),
                              estimator=q.decides)
        s, e, p, w = rows[cross]
        below = f"; below it {rows[cross - 1][1].value:.2f}x at {format_size(rows[cross - 1][0])}" \
            if cross > 0 else "; it wins at every size measured"
        return ans.Answer(q.id, "detected",
                          f"from {format_size(s)} up to {top} non-temporal stores win: "
                          f"{e.value:.2f}x at {format_size(s)} ({p['median']:.1f} vs "
                          f"{w['median']:.1f} GB/s, {w['params']['kernel']}){below}",
                          value=float(s), ci_low=float(rows[cross - 1][0]) if cross > 0 else None,
                          ci_high=float(s), details=details,
                          evidence=ans.evidence_keys([p, w]),
                          estimator=q.decides + "; the interval is the bracket: the last size "
                                                "measured below the crossover .. the crossover")

    def _readback_answer(self, curves, caches):
        q = self.declared("nt_readback")
        nt = next((ps for (k, _, _), ps in curves.items() if k == "nt_write_readback"), None)
        normal = next((ps for (k, _, _), ps in curves.items() if k == "write_readback"), None)
        if not (nt and normal):
            return ans.not_measured(q, "needs both write_readback and nt_write_readback")
        details, effects = [], []
        for lid, (lo, hi) in level_windows(caches).items():
            a_pts = [p for p in nt if lo < p["params"]["size_bytes"] <= hi]
            b_pts = [p for p in normal if lo < p["params"]["size_bytes"] <= hi]
            if not (a_pts and b_pts):
                continue
            e = ans.effect(q, ans.pooled_values(a_pts), ans.pooled_values(b_pts), "")
            details.append(detail(LEVEL_LABEL.get(lid, lid), level=lid, value=e.value,
                                  unit="ratio", ci_low=e.ci_low, ci_high=e.ci_high,
                                  verdict=e.verdict,
                                  nt_gb_per_s=float(np.median(ans.pooled_values(a_pts))),
                                  normal_gb_per_s=float(np.median(ans.pooled_values(b_pts))),
                                  evidence=ans.evidence_keys(a_pts + b_pts)))
            effects.append(e)
        if not details:
            return ans.not_measured(q, "no working set inside a level has both readback kinds")
        cached = [i for i, d in enumerate(details) if d["level"] != "dram"]
        i = cached[-1] if cached else len(details) - 1
        head, a = details[i], effects[i]
        a.details, a.evidence = details, head["evidence"]
        a.because = (f"write + read back with non-temporal stores runs at {a.value:.2f}x the "
                     f"normal stores' GB/s in {head['label']} ({head['nt_gb_per_s']:.1f} vs "
                     f"{head['normal_gb_per_s']:.1f}): the data is read back from "
                     f"{'memory' if a.value < 1 else 'where it was written'}; "
                     + ", ".join(f"{d['label']} {d['value']:.2f}x" for d in details))
        return a

    # -- analysis --
    def analyze(self, data):
        caches = data_caches(data.machine)
        bpc = _bytes_per_cycle(data.samples)
        curves = _curves(data.points)
        out = []
        read_levels = None
        for kind in LEVEL_KINDS:
            found = {}
            for (k, kernel, pages), pts in curves.items():
                if k != kind:
                    continue
                levels, plateaus = plateaus_by_level(pts, caches)
                # the knees' curve: 4 KiB pages and the most sizes (curves=widest
                # sweeps one width; the others have the level cells only)
                if kind == "read" and (read_levels is None or (pages == "4k", len(pts)) >= (
                        read_levels[3] == "4k", len(read_levels[0]))):
                    read_levels = (pts, levels, kernel, pages)
                for lid, (ps, how) in plateaus.items():
                    found.setdefault(lid, []).append((kernel, pages, ps, how))
            for lid in LEVELS:
                out.append(self._level_answer(kind, lid, found.get(lid), caches, curves, bpc,
                                              data.points))
        if data.params.get("sweep") == "levels":
            out.append(ans.not_measured(self.declared("knees"), "one working set per level was "
                                        "measured (sweep=levels, the quick preset): knees need "
                                        "the octave sweep (--set sweep=octaves)"))
        else:
            out.append(self._knee_answer(read_levels, caches))
        out.append(self._random_answer(curves, caches))
        out.append(self._nt_crossover_answer(curves))
        out.append(self._readback_answer(curves, caches))
        out.append(self._scaling_answer(data))
        out.append(self._loaded_answer(data))
        return out


# ---- analysis helpers (pure) ----------------------------------------------------

def _curves(points):
    """{(kind, kernel, pages): points sorted by size} of the bandwidth points."""
    out = {}
    for p in points:
        if p.get("metric") != "gb_per_s" or not p.get("values") or not p.get("median"):
            continue
        pr = p["params"]
        out.setdefault((p["arm"], pr.get("kernel"), pr.get("pages", "4k")), []).append(p)
    for ps in out.values():
        ps.sort(key=lambda p: p["params"]["size_bytes"])
    return out


def _unreached(kind, lid, caches, curves, planned):
    """Why a level of a kind has no points: the sweep stopped short, or every
    sample there was rejected."""
    lo, hi = level_windows(caches)[lid]
    window = f"{format_size(lo)}.." + ("" if math.isinf(hi) else f"{format_size(hi)}")
    if lid == "dram":
        window = f"from {format_size(lo + 1)} (2x the LLC)"
    empty = sorted({p["params"]["size_bytes"] for p in planned if p["arm"] == kind and not p.get("n")
                    and lo < p["params"]["size_bytes"] <= hi})
    if empty:
        return (f"every sample at {', '.join(format_size(s) for s in empty)} was rejected "
                f"(context switches or migrations: a busy machine); nothing is concluded "
                f"about {LEVEL_LABEL[lid]}")
    sizes = sorted({p["params"]["size_bytes"] for (k, _, _), ps in curves.items()
                    if k == kind for p in ps})
    return (f"the sweep ({format_size(sizes[0])}..{format_size(sizes[-1])}) has no point inside "
            f"{LEVEL_LABEL[lid]} ({window}); raise max_size to reach it")


def _bytes_per_cycle(samples):
    """{point key: [bytes per estimated cycle per sample]}."""
    out = {}
    for s in samples:
        if s.get("metric") != "gb_per_s" or not s.get("cycles_est") or not s.get("ns"):
            continue
        key = ans.point_key({"arm": s["arm"], "params": s["point"]})
        out.setdefault(key, []).append(s["value"] * s["ns"] / s["cycles_est"])
    return out


def plateaus_by_level(pts, caches):
    """(levels, {level id: (plateau points, how)}) of one curve.

    stats.find_levels runs on the time per byte (1 / GB/s: a curve that
    rises at every boundary, like a latency).  A level's plateau is the one
    with the most points well inside the level (its window), restricted to
    those points; one plateau serves two levels when there is no step
    between them.  A level with points inside it on no plateau (all on
    ramps) gets those points ("window")."""
    sizes = [p["params"]["size_bytes"] for p in pts]
    levels = stats.find_levels(sizes, [1.0 / p["median"] for p in pts]) if len(pts) >= 3 else []
    out = {}
    for lid, (lo, hi) in level_windows(caches).items():
        inside = [p for p in pts if lo < p["params"]["size_bytes"] <= hi]
        if not inside:
            continue
        best = []
        for lv in levels:
            on = [p for p in inside if lv.first_size <= p["params"]["size_bytes"] <= lv.last_size]
            if len(on) > len(best):
                best = on
        out[lid] = (best, "find_levels") if best else (inside, "window")
    return levels, out


def _nearest_cache(caches, size):
    best = None
    for lid, cap in caches:
        r = abs(math.log2(size / cap))
        if r <= math.log2(KNEE_MATCH_FACTOR) and (best is None or r < best[0]):
            best = (r, (lid, cap))
    return best[1] if best else None


