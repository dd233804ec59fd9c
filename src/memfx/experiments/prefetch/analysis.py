"""Prefetch's analysis: a prefetch's cost by kind and target, the trap
check for invalid targets, the list walk with and without prefetch, the TLB
part and the stream answers, as methods of PrefetchAnswers, which Prefetch
inherits (a mixin: `self` is the registered experiment), and the pure
helpers they rest on (tlb_verdict, the loop names).  The protocol
(__init__.py) re-exports every name."""
from __future__ import annotations

import numpy as np

from ...model import answers as ans
from ...model import stats
from ...model.details import detail
from ...model.units import format_size

INVALID_TARGETS = ("null", "unmapped", "prot_none", "kernel", "kernel_hole", "noncanonical")


# Targets whose PTE is absent, so that a prefetch of them misses the TLB
# every time: no TLB entry is kept for a translation that is not present
# (SDM Vol. 3A, 4.10.2.2), and PROT_NONE pages are kept not present by Linux.
# A non-canonical address is refused before translation (a load of one
# raises #GP, not a page fault: SDM Vol. 1, 3.3.7.1), so its prefetch never
# walks.
WALKING_TARGETS = ("unmapped", "prot_none", "kernel_hole")


# "short": an 8-node list, so 2 of every 8 prefetches are of NULL (the
# seed's loop at its worst); the others fill about half of a level.
LIST_LEVELS = ("short", "l1", "l2", "llc", "dram")


# A system-time share of the prefetch loop's CPU time above this is a trap
# into the kernel (the seed saw 52 %); below it, scheduler ticks and noise.
TRAP_SYSTEM_SHARE = 0.05


# Distances whose median time per load is within this of the fastest one's
# serve the streaming loop alike; the answer is the shortest of them (the
# least early traffic).  As the argmin it read 8 or 32 from replica to
# replica and survey to survey (their medians a few % apart), and compare
# called A/A pairs "changed" (docs/machine-notes.md, "Prefetch").  10 %, as copy's CLEAR_WIN: a few % of a few
# ns per load is not worth a different distance.
DISTANCE_TIE = 0.10


def tlb_verdict(best, control, ahead):
    """The tlb_priming verdict from effects none/prefetch (answers with
    value, CI and verdict by effect_verdict's named thresholds):
    detected when the best distance ahead gains beyond effect_min, the d = -1
    control shows no gain beyond effect_min (a prefetch behind does the same
    work but can prime nothing: if it gains, the loop is not measuring
    priming), and the CI ahead lies wholly above the control's; not_detected
    when every distance ahead is a measured non-effect; else inconclusive (a
    CI crossing the band, a gain the control shares, no control)."""
    if best.verdict == ans.DETECTED and best.value > 1:
        if control is None or control.ci_high is None or best.ci_low is None:
            return ans.INCONCLUSIVE
        control_gains = control.verdict == ans.DETECTED and control.value > 1
        if control_gains or best.ci_low <= control.ci_high:
            return ans.INCONCLUSIVE
        return ans.DETECTED
    if ahead and all(e.verdict == ans.NOT_DETECTED for e in ahead):
        return ans.NOT_DETECTED
    return ans.INCONCLUSIVE


def _tlb_inconclusive(best, control):
    if best.verdict == ans.DETECTED and best.value > 1:
        if control is None or control.ci_high is None:
            return "inconclusive: no d = -1 control to tell priming from the loop itself"
        return ("inconclusive: the control gains too, so the gain is not (only) the "
                "prefetch running ahead")
    return (f"inconclusive: the CI [{_num(best.ci_low)}, {_num(best.ci_high)}] reaches across "
            f"1 +- effect_min")


# What the per-target ratios of the cost part mean, said where they are.
_WALK_NOTE = ("; a target whose page is not present (unmapped, prot_none, kernel_hole) "
              "has no TLB entry to keep, so each prefetch of it walks the page tables, "
              "which costs where prefetches come back to back and hides behind a loop "
              "with other work per prefetch")


def _repeated_targets(data):
    """Targets whose throughput samples came from the repeated loop
    (pf_rep_*; the trial says so in its counters): runs stored before it
    existed measured every target with the table loop."""
    return {s["point"].get("target") for s in data.samples
            if s["point"].get("part") == "cost" and s["point"].get("mode") == "throughput"
            and (s.get("counters") or {}).get("repeated")}


def _loop_name(mode, target, repeated):
    if mode != "throughput":
        return "on a dependent chain"
    if target in repeated:
        return "back to back, one address in a register"
    return "one table load and add per prefetch"


def _num(x):
    return "?" if x is None else f"{x:.2f}"


class PrefetchAnswers:
    """The answers of the Prefetch experiment (a mixin: `self` is the
    registered experiment, whose declared questions they answer)."""

    # -- analysis --
    def analyze(self, data):
        out = []
        out += self._cost_answers(data)
        out += self._list_answer(data)
        out += self._tlb_answer(data)
        out += self._stream_answers(data)
        return out

    def _cost_answers(self, data):
        pts = [p for p in data.points if p["params"].get("part") == "cost" and p["n"]]
        if not pts:
            return []
        by = {(p["params"]["mode"], p["params"]["target"], p["arm"]): p for p in pts}
        repeated = _repeated_targets(data)
        details = []
        for (mode, target, arm), p in sorted(by.items()):
            base = by.get((mode, target, "none"))
            l1 = by.get((mode, "l1", arm))
            details.append(detail(f"{mode} {target} {arm}", mode=mode, target=target,
                                  kind=arm, value=p["median"], unit="ns",
                                  ci_low=p["ci_low"], ci_high=p["ci_high"],
                                  cycles_est=p.get("cycles_est"),
                                  vs_none=p["median"] / base["median"] if base and base["median"]
                                  else None,
                                  vs_l1=p["median"] / l1["median"] if l1 and l1["median"] else None,
                                  loop=_loop_name(mode, target, repeated),
                                  point=ans.point_key(p)))
        result = []
        q = self.declared("null_cost")
        null = by.get(("throughput", "null", "t0"))
        if null:
            base = by.get(("throughput", "null", "none"))
            l1 = by.get(("throughput", "l1", "t0"))
            loop = _loop_name("throughput", "null", repeated)
            extra = f"; the loop without it takes {base['median']:.2f} ns" if base else ""
            if l1 and l1["median"]:
                extra += (f"; an L1 line {l1['median']:.2f} ns "
                          f"({null['median'] / l1['median']:.2f}x)")
            result.append(ans.measured(q, null["values"], f"prefetcht0 of NULL: "
                                       f"{null['median']:.2f} ns per prefetch ({loop}){extra}",
                                       evidence=[ans.point_key(null)], details=details))
        else:
            result.append(ans.not_measured(q, "the sweep did not include target null with "
                                              "prefetcht0 in throughput mode"))
        q = self.declared("invalid_target_penalty")
        l1 = by.get(("throughput", "l1", "t0"))
        invalid = [by[("throughput", t, "t0")] for t in INVALID_TARGETS
                   if ("throughput", t, "t0") in by]
        if l1 and invalid:
            worst = max(invalid, key=lambda p: p["median"])
            cheapest = min(invalid, key=lambda p: p["median"])
            a = ans.effect(q, worst["values"], l1["values"], "", evidence=[
                ans.point_key(worst), ans.point_key(l1)])
            each = ", ".join(f"{p['params']['target']} {p['median'] / l1['median']:.2f}x"
                             for p in invalid) if l1["median"] else ""
            a.because = (f"dearest invalid target: {worst['params']['target']} at "
                         f"{worst['median']:.2f} ns vs {l1['median']:.2f} ns for an L1 line "
                         f"({a.value:.2f}x); cheapest: {cheapest['params']['target']} at "
                         f"{cheapest['median']:.2f} ns; per target vs the L1 line, "
                         f"{_loop_name('throughput', 'l1', repeated)}: {each}"
                         + (_WALK_NOTE if any(p['params']['target'] in WALKING_TARGETS
                                              for p in invalid) else ""))
            a.details = [d for d in details if d["mode"] == "throughput" and d["kind"] == "t0"]
            result.append(a)
        else:
            result.append(ans.not_measured(q, "needs prefetcht0 of the l1 target and of at least "
                                              "one invalid target, throughput mode"))
        result.append(self._trap_answer(data, pts))
        return result

    def _trap_answer(self, data, pts):
        q = self.declared("traps")
        invalid = [p for p in pts if p["params"]["target"] in INVALID_TARGETS and p["arm"] != "none"]
        if not invalid:
            return ans.not_measured(q, "no invalid target was measured")
        samples = [s for s in data.samples if s["point"].get("part") == "cost"
                   and s["point"].get("target") in INVALID_TARGETS and s["arm"] != "none"]
        shares, details = [], []
        groups = {}
        for s in samples:
            groups.setdefault((s["point"]["target"], s["arm"], s["point"]["mode"]), []).append(s)
        for (target, kind, mode), ss in sorted(groups.items()):
            user = sum((s["counters"].get("user_ns") or 0) for s in ss)
            system = sum((s["counters"].get("system_ns") or 0) for s in ss)
            faults = sum((s["counters"].get("page_faults") or 0) for s in ss)
            ops = sum(s["ns"] / s["value"] for s in ss if s["value"])
            details.append(detail(f"{target} {kind} {mode}", target=target, kind=kind,
                                  mode=mode, value=system / (user + system)
                                  if user + system else 0.0, unit="ratio",
                                  system_ms=system / 1e6, user_ms=user / 1e6,
                                  system_s_per_million=system / 1e9 / ops * 1e6 if ops else None,
                                  page_faults_per_million=faults / ops * 1e6 if ops else None,
                                  prefetches=ops))
            shares += [(s["counters"].get("system_ns") or 0) /
                       max(1.0, (s["counters"].get("system_ns") or 0)
                           + (s["counters"].get("user_ns") or 0)) for s in ss]
        total_faults = max((d["page_faults_per_million"] or 0 for d in details), default=0)
        shares = np.asarray(shares, float)
        # the value and its CI are one estimator: the mean per-sample share
        # (the worst target and kind, a few ticks at most, is in details)
        value = float(np.mean(shares)) if shares.size else 0.0
        lo = hi = None
        if shares.size >= 3:
            lo, hi = stats.bootstrap_ci(shares, statistic=np.mean)
        if lo is None:
            verdict = "inconclusive"
        elif lo > TRAP_SYSTEM_SHARE:
            verdict = "detected"
        elif hi < TRAP_SYSTEM_SHARE:
            verdict = "not_detected"
        else:
            verdict = "inconclusive"
        a = ans.Answer(q.id, verdict, "", value=value, ci_low=lo, ci_high=hi,
                       evidence=ans.evidence_keys(invalid), details=details,
                       estimator="system share of CPU time per sample over every invalid "
                                 "target (mean, bootstrap CI)")
        # the worst by system time per prefetch: getrusage splits CPU time
        # between user and system by timer ticks, so the share of one target's
        # few milliseconds can be 100 % from a single tick
        worst = max(details, key=lambda d: d["system_s_per_million"] or 0.0)
        per_million = worst["system_s_per_million"] or 0.0
        if a.verdict == "detected":
            a.because = (f"yes: {a.value:.0%} of the CPU time prefetching invalid addresses was "
                         f"system time, the most for {worst['label']} ({per_million:.3g} s per "
                         f"million prefetches; the seed saw 1.34 s)")
        else:
            verb = "no" if a.verdict == "not_detected" else "no clear sign of"
            a.because = (f"{verb} system time: {a.value:.1%} of the CPU time on average over "
                         f"{sum(d['prefetches'] for d in details):.3g} prefetches of invalid "
                         f"addresses, at most {per_million:.3g} s per million prefetches "
                         f"({worst['label']}; the seed saw 1.34 s), at most {total_faults:.2g} "
                         f"page faults per million"
                         + ("; x86 prefetches of NULL, unmapped or kernel addresses are dropped "
                            "in hardware" if a.verdict == "not_detected" else ""))
        return a

    def _list_answer(self, data):
        q = self.declared("seed_loop")
        pts = [p for p in data.points if p["params"].get("part") == "list" and p["n"]]
        if not pts:
            return [ans.not_measured(q, "the list part was not measured")]
        by = {(p["params"]["level"], p["arm"]): p for p in pts}
        details, first = [], None
        for level in LIST_LEVELS:
            u, g, n = by.get((level, "unguarded")), by.get((level, "guarded")), by.get((level, "none"))
            if not (u and g):
                continue
            e = ans.effect(q, u["values"], g["values"], "", evidence=[ans.point_key(u),
                                                                     ans.point_key(g)])
            nodes = u["params"]["nodes"]
            # two of every `nodes` prefetches are of NULL: what each costs
            per_null = (u["median"] - g["median"]) * nodes / 2
            details.append(detail(level, level=level, nodes=nodes,
                                  value=e.value, unit="ratio", ci_low=e.ci_low,
                                  ci_high=e.ci_high, verdict=e.verdict,
                                  unguarded_ns=u["median"], guarded_ns=g["median"],
                                  none_ns=n["median"] if n else None,
                                  ns_per_null_prefetch=per_null))
            if first is None:
                first = (level, e, per_null)
        if first is None:
            return [ans.not_measured(q, "needs the unguarded and guarded arms of one level")]
        level, a, per_null = first
        a.details = details
        if a.verdict == "detected" and a.value > 1:
            guard = (f"guard the prefetch (if (nn)): each NULL prefetch costs about "
                     f"{per_null:.1f} ns more than the branch")
        elif a.verdict == "detected":
            guard = "the unguarded prefetch is faster: the branch costs more than prefetching NULL"
        else:
            guard = "the branch buys nothing measurable: prefetching NULL is about as cheap"
        a.because = (f"unguarded/guarded = {a.value:.3f} on the {level} list "
                     f"({a.details[0]['nodes']} nodes, 2 NULL prefetches per walk); {guard}")
        return [a]

    def _tlb_answer(self, data):
        q = self.declared("tlb_priming")
        pts = [p for p in data.points if p["params"].get("part") == "tlb" and p["n"]]
        if not pts:
            return [ans.not_measured(q, "the tlb part was not measured")]
        gains = {}
        details = []
        for p in pts:
            if p["arm"] != "prefetch":
                continue
            pr = p["params"]
            base = next((b for b in pts if b["arm"] == "none" and b["params"] == pr), None)
            if not base:
                continue
            e = ans.effect(q, base["values"], p["values"], "",
                           evidence=[ans.point_key(base), ans.point_key(p)])
            gains[(pr["pages"], pr["distance"])] = e
            details.append(detail(f"{pr['pages']} d={pr['distance']}", pages=pr["pages"],
                                  distance_pages=pr["distance"], value=e.value, unit="ratio",
                                  ci_low=e.ci_low, ci_high=e.ci_high, verdict=e.verdict,
                                  none_ns=base["median"], prefetch_ns=p["median"]))
        ahead = {k: v for k, v in gains.items() if k[0] == "4k" and k[1] >= 1}
        if not ahead:
            return [ans.not_measured(q, "needs 4 KiB pages and a distance of at least one page")]
        (_, d), best = max(ahead.items(), key=lambda kv: kv[1].value)
        control = gains.get(("4k", -1))
        thp = [v for k, v in gains.items() if k[0] == "thp" and k[1] >= 1]
        a = ans.Answer(q.id, tlb_verdict(best, control, list(ahead.values())), "",
                       value=best.value, ci_low=best.ci_low, ci_high=best.ci_high,
                       evidence=best.evidence + (control.evidence if control else []),
                       details=sorted(details, key=lambda x: (x["pages"], x["distance_pages"])),
                       estimator=f"ratio of medians none / prefetch at the best of {len(ahead)} "
                                 f"distances >= 1 page (4 KiB pages), bootstrap CI; detected "
                                 f"only when that CI clears 1 +- effect_min and lies above the "
                                 f"d = -1 control's")
        parts = [f"a prefetch {d} page(s) ahead makes the dependent page walk "
                 f"{best.value:.2f}x as fast with 4 KiB pages (best of {len(ahead)} distances)"]
        if control:
            parts.append(f"{control.value:.2f}x when it points one page behind (control)")
        if thp:
            parts.append(f"best {max(v.value for v in thp):.2f}x with huge pages")
        parts.append({
            ans.DETECTED: "so a prefetch to a page missing from the TLB is not dropped: it "
                          "starts the page walk ('strong' in the seed's terms)",
            ans.NOT_DETECTED: "no gain at any distance: prefetches to pages missing from the "
                              "TLB are dropped ('weak')",
        }.get(a.verdict, _tlb_inconclusive(best, control)))
        a.because = "; ".join(parts)
        return [a]

    def _stream_answers(self, data):
        qg, qd = self.declared("stream_gain"), self.declared("stream_distance")
        pts = [p for p in data.points if p["params"].get("part") == "stream" and p["n"]]
        if not pts:
            reason = "the stream part was not measured"
            return [ans.not_measured(qg, reason), ans.not_measured(qd, reason)]
        stride = min(p["params"]["stride_bytes"] for p in pts)
        rows = []
        details = []
        for p in pts:
            if p["arm"] != "prefetch":
                continue
            base = next((b for b in pts if b["arm"] == "none" and b["params"] == p["params"]), None)
            if base is None:
                continue
            pr = p["params"]
            e = ans.effect(qg, base["values"], p["values"], "")
            details.append(detail(f"stride {pr['stride_bytes']} d={pr['distance']}",
                                  stride_bytes=pr["stride_bytes"], distance=pr["distance"],
                                  value=e.value, ci_low=e.ci_low, ci_high=e.ci_high,
                                  verdict=e.verdict, unit="ratio", prefetch_ns=p["median"],
                                  none_ns=base["median"]))
            if pr["stride_bytes"] == stride:
                rows.append((p, base))
        if not rows:
            reason = "needs the none and prefetch arms at one stride"
            return [ans.not_measured(qg, reason), ans.not_measured(qd, reason)]
        fastest = min(r[0]["median"] for r in rows)
        tied = {r[0]["params"]["distance"] for r in rows
                if r[0]["median"] <= fastest * (1 + DISTANCE_TIE)}
        p, base = min((r for r in rows if r[0]["params"]["distance"] in tied),
                      key=lambda r: r[0]["params"]["distance"])
        d = p["params"]["distance"]
        # the choices, and the ties compare reads (choice_ties)
        details = [row.updated(choice=row["distance"], tied=row["distance"] in tied)
                   if row["stride_bytes"] == stride else row for row in details]
        gain = ans.effect(qg, base["values"], p["values"], "",
                          evidence=[ans.point_key(base), ans.point_key(p)])
        gain.details = details
        if gain.verdict == "detected" and gain.value > 1:
            advice = f"prefetch {d} elements ({format_size(d * stride)}) ahead"
        else:
            advice = "leave it to the hardware prefetchers: no software prefetch distance helps"
        gain.because = (f"best distance {d} elements at stride {stride} B: "
                        f"{gain.value:.2f}x the loop without prefetch; {advice}")
        dist = ans.measured(qd, [float(d)], f"{d} elements of {stride} B "
                            f"({format_size(d * stride)}) ahead; {advice}",
                            evidence=[ans.point_key(p)], details=details,
                            estimator=f"shortest distance within {DISTANCE_TIE:.0%} of the "
                                      f"lowest median time per load", value=float(d))
        return [gain, dist]
