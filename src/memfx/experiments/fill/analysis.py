"""Fill's analysis: analyze and the answers it gathers (store elimination,
the value and kernel arms, bandwidth, the L2 eviction counters), as methods
of FillAnswers, which Fill inherits (a mixin: `self` is the registered
experiment), the ratio tables they read, and the cache levels and level
ratio (shared with fill_alloc): the level a region lives in ("L1d", "L2", ... "DRAM", by the
Fingerprint), and the ratio of two arms over several sizes
with its two-stage bootstrap CI and verdict.  The protocol (__init__.py)
re-exports every name."""
from __future__ import annotations

import math

import numpy as np

from ...model import answers as ans
from ...model import stats
from ...model.details import detail
from ...model.findings import DETECTED, INCONCLUSIVE, NOT_DETECTED, effect_verdict, threshold
from ...model.machine_view import Fingerprint
from ...model.units import format_size

# ---- cache levels ------------------------------------------------------------------

# Fill's one level when the fingerprint reports no cache: all sizes together.
ALL_SIZES = "all"


def fill_levels(fp):
    """The levels fill reports on, smallest first: the Fingerprint's level
    names (DRAM last), or ALL_SIZES alone when it reports no cache."""
    return fp.level_names if fp.caches else [ALL_SIZES]


def fill_level(fp, size):
    """The level a region of `size` bytes lives in (Fingerprint.level_of),
    ALL_SIZES when the fingerprint reports no cache."""
    return fp.level_of(size) if fp.caches else ALL_SIZES


# ---- statistics -----------------------------------------------------------------------

def level_ratio(pairs, confidence=None, n_boot=2000, seed=0, min_samples=None):
    """Ratio of two arms over several sizes: the median over sizes of the
    per-size ratios of medians, median(a_s)/median(b_s), with a two-stage
    percentile bootstrap CI (stats.median_ratio_over_groups): sizes are
    resampled with replacement, and each arm's samples within each size.  The first stage carries the size-to-size
    scatter of the ratio: each size has its own buffers, and in a VM a
    buffer can be slowed for seconds by the host whatever value it holds
    (seen here: one 4 MiB buffer at a quarter of its neighbours' speed), so
    placement effects differ between sizes but not between the samples of
    one size.  The median keeps one disturbed size from moving the estimate;
    working on per-size ratios keeps the spread of bandwidth across sizes out.

    pairs: [(a_values, b_values)] per size.  With min_samples, sizes where an
    arm has fewer samples are left out as long as another size has enough
    (they are counted in "dropped"); otherwise all sizes are used and the
    small n makes the verdict inconclusive.  Returns None when no size has
    samples in both arms, else {ratio, ci_low, ci_high, sizes, dropped, n_a,
    n_b} with n_a / n_b the smallest per-size sample counts (what the
    min_samples threshold of the verdict applies to)."""
    conf = threshold("ci_level") if confidence is None else confidence
    clean = []
    for a, b in pairs:
        a = np.asarray(a, float)
        b = np.asarray(b, float)
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        if a.size and b.size and np.median(a) > 0 and np.median(b) > 0:
            clean.append((a, b))
    if not clean:
        return None
    chosen = clean
    if min_samples:
        chosen = [(a, b) for a, b in clean if min(a.size, b.size) >= min_samples] or clean
    ratio, lo, hi = stats.median_ratio_over_groups(chosen, conf, n_boot, seed)
    k = len(chosen)
    return {"ratio": ratio, "ci_low": lo, "ci_high": hi,
            "sizes": k, "dropped": len(clean) - k,
            "n_a": min(a.size for a, _ in chosen), "n_b": min(b.size for _, b in chosen)}


def ratio_verdict(r):
    """detected / not_detected / inconclusive for a level_ratio result, by the
    named thresholds effect_min and min_samples (findings.effect_verdict)."""
    if r is None:
        return INCONCLUSIVE
    return effect_verdict(r["ratio"], r["ci_low"], r["ci_high"], r["n_a"], r["n_b"])

class FillAnswers:
    """The answers of the Fill experiment (a mixin: `self` is the
    registered experiment, whose declared questions they answer)."""

    # -- analysis --
    def analyze(self, data):
        fp = Fingerprint.of(data.machine)
        pts = [p for p in data.points if p.get("metric") == "gb_per_s" and p.get("values")]
        if not pts:
            return []
        kernels = sorted({p["params"]["kernel"] for p in pts}, key=_kernel_order)
        kp = primary_kernel(kernels)
        return [self._store_elimination(data, fp, pts),
                self._arm_answer("zero_loaded_from_memory", data, kp, "zero_volatile", ("zero",),
                                 "zero re-read through a volatile pointer vs zero from the argument"),
                self._arm_answer("nonzero_values_alike", data, kp, ("ones", "random"), ("one",),
                                 "other non-zero bytes (0xff, a random byte) vs 0x01"),
                self._arm_answer("alternating_passes", data, kp, "one_zero", ("one",),
                                 "passes alternating 0x01 and 0x00 vs 0x01 only"),
                self._bandwidth(data, fp, pts, kernels),
                self._counters_answer(data, fp, kp)]

    def _store_elimination(self, data, fp, pts):
        q = self.declared("zero_store_elimination")
        table = zero_ratio_table(data)
        if not table:
            return ans.not_measured(q, "needs the zero arm and a non-zero arm (one, ones or random) "
                                       "of the same kernel and size")
        by = _points_by(pts)
        details = []
        for r in table:
            keys = [ans.point_key(p) for (k, s, a), p in by.items()
                    if k == r["kernel"] and a in (r["zero_arm"], r["nonzero_arm"])
                    and fill_level(fp, s) == r["level"]]
            details.append(detail(f"{kernel_label(r['kernel'])} {r['level']}", value=r["ratio"],
                                  unit="ratio", ci_low=r["ci_low"], ci_high=r["ci_high"],
                                  verdict=_row_verdict(r), kernel=r["kernel"], family=r["family"],
                                  level=r["level"], n=r["n"], sizes=r["sizes"],
                                  gbps_zero=r["gbps_zero"], gbps_nonzero=r["gbps_nonzero"],
                                  nonzero_arm=r["nonzero_arm"], points=keys))
        details += _unreached(data, fp, table)
        measured_rows = [d for d in details if d["verdict"] != ans.NOT_MEASURED]
        faster = [d for d in measured_rows if d["verdict"] == DETECTED and d["value"] > 1]
        if faster:
            verdict = DETECTED
        elif all(d["verdict"] == NOT_DETECTED for d in measured_rows):
            verdict = NOT_DETECTED
        else:
            verdict = INCONCLUSIVE
        top = max(faster or measured_rows, key=lambda d: d["value"])
        nz = top["nonzero_arm"]
        outer = [d for d in measured_rows if d["level"] not in ("L1d", "L1", "L2", "all")]
        excluded = bool(outer) and all(d["ci_high"] < SEED_EFFECT for d in outer)
        if faster:
            cells = sorted(faster, key=lambda d: -d["value"])
            shown = "; ".join(f"{kernel_label(d['kernel'])} in {d['level']} {d['value']:.2f}x "
                              f"[{d['ci_low']:.2f}, {d['ci_high']:.2f}]" for d in cells[:4])
            more = f" and {len(cells) - 4} more cells" if len(cells) > 4 else ""
            quiet = sum(d["verdict"] == NOT_DETECTED for d in measured_rows)
            unsure = len(measured_rows) - len(cells) - quiet
            others = ([f"{quiet} within ±{threshold('effect_min'):.0%}"] if quiet else []) \
                + ([f"{unsure} inconclusive"] if unsure else [])
            because = (f"Zero bytes are stored faster than {value_words(nz)}: {shown}{more}"
                       + (f"; other kernel/level cells: {', '.join(others)}" if others else ""))
        else:
            lo = min(d["value"] for d in measured_rows)
            hi = max(d["value"] for d in measured_rows)
            levels = [lv for lv in fill_levels(fp) if any(d["level"] == lv for d in measured_rows)]
            fams = list(dict.fromkeys(d["family"] for d in measured_rows))
            span = f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}x"
            because = (f"Filling with zero bytes runs at {span} the bandwidth of filling with "
                       f"{value_words(nz)} in {levels[0]}..{levels[-1]} "
                       f"({', '.join(fams)})")
            if verdict == INCONCLUSIVE:     # why: the cell that decides nothing, and its CI
                d = max((d for d in measured_rows if d["verdict"] == INCONCLUSIVE),
                        key=lambda d: d["value"], default=top)
                e, few = threshold("effect_min"), threshold("min_samples")
                because += (f"; inconclusive: {kernel_label(d['kernel'])} in {d['level']} "
                            f"{d['value']:.2f}x [{d['ci_low']:.2f}, {d['ci_high']:.2f}] "
                            + (f"rests on {d['n']} samples (min_samples {few})" if d["n"] < few
                               else f"reaches across the edge of the no-effect band "
                                    f"{1 - e:.2f}-{1 + e:.2f}"))
            if excluded:
                because += f"; seed 000's {SEED_EFFECT - 1:.0%} excluded beyond L2"
        missing = [d for d in details if d["verdict"] == ans.NOT_MEASURED]
        if missing:
            kinds = sorted({d["kernel"] for d in missing if d["level"] is None}, key=_kernel_order)
            cells = sum(d["level"] is not None for d in missing)
            because += " (not measured: " + "; ".join(
                ([f"kernels {', '.join(kinds)}"] if kinds else [])
                + ([f"{cells} levels the sweep did not reach"] if cells else [])) + ")"
        return ans.Answer(question=q.id, verdict=verdict, because=because, value=top["value"],
                          ci_low=top["ci_low"], ci_high=top["ci_high"], evidence=top["points"],
                          details=details, estimator=RATIO_ESTIMATOR)

    def _arm_answer(self, name, data, kernel, a_arms, b_arms, what):
        """a/b bandwidth per level for one kernel: detected when any level differs."""
        q = self.declared(name)
        a_arms = (a_arms,) if isinstance(a_arms, str) else tuple(a_arms)
        rows = [r for a in a_arms for r in ratio_table(data, a, b_arms, kernels=(kernel,))]
        if not rows:
            return ans.not_measured(q, f"needs the value arm {' or '.join(a_arms)} and "
                                       f"{' or '.join(b_arms)} (--set values=...)")
        details = [detail(f"{r['a_arm']}/{r['b_arm']} {r['kernel']} {r['level']}",
                          value=r["ratio"], unit="ratio", ci_low=r["ci_low"],
                          ci_high=r["ci_high"], verdict=_row_verdict(r), kernel=r["kernel"],
                          level=r["level"], arms=[r["a_arm"], r["b_arm"]], n=r["n"],
                          sizes=r["sizes"]) for r in rows]
        differs = [d for d in details if d["verdict"] == DETECTED]
        if differs:
            verdict = DETECTED
        elif all(d["verdict"] == NOT_DETECTED for d in details):
            verdict = NOT_DETECTED
        else:
            verdict = INCONCLUSIVE
        top = max(differs or details, key=lambda d: abs(math.log(d["value"])))
        lo, hi = min(d["value"] for d in details), max(d["value"] for d in details)
        span = f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}x"
        levels = list(dict.fromkeys(d["level"] for d in details))
        because = f"{what}: {span} in {levels[0]}..{levels[-1]} ({kernel})"
        if differs:
            because += "; differs in " + ", ".join(f"{d['level']} {d['value']:.2f}x" for d in differs)
        elif verdict == NOT_DETECTED:
            because += f", within ±{threshold('effect_min'):.0%} everywhere"
        return ans.Answer(question=q.id, verdict=verdict, because=because, value=top["value"],
                          ci_low=top["ci_low"], ci_high=top["ci_high"], details=details,
                          evidence=[f"kernel={kernel}", f"level={top['level']}"],
                          estimator=RATIO_ESTIMATOR)

    def _bandwidth(self, data, fp, pts, kernels):
        """Median fill bandwidth of a non-zero value per kernel and level."""
        q = self.declared("bandwidth")
        arms = {p["arm"] for p in pts}
        arm = next((a for a in NONZERO_ORDER if a in arms), None) or sorted(arms)[0]
        mine = [p for p in pts if p["arm"] == arm]
        details = []
        for k in kernels:
            for lv in fill_levels(fp):
                ps = [p for p in mine if p["params"]["kernel"] == k
                      and fill_level(fp, p["params"]["size_bytes"]) == lv]
                if ps:
                    details.append(detail(f"{k} {lv}", kernel=k, level=lv,
                                          value=float(np.median([p["median"] for p in ps])),
                                          unit="GB/s", sizes=len(ps), arm=arm,
                                          points=ans.evidence_keys(ps)))
        largest = max(p["params"]["size_bytes"] for p in mine)
        at = [p for p in mine if p["params"]["size_bytes"] == largest]
        best = max(at, key=lambda p: p["median"])
        a = ans.measured(q, best["values"], "", evidence=[ans.point_key(best)], details=details,
                         estimator="median of samples, largest region measured")
        a.because = (f"{best['params']['kernel']} fills {format_size(largest)} with "
                     f"{value_words(arm)} at "
                     f"{a.value:.1f} GB/s ({fill_level(fp, largest)}); every kernel and level "
                     f"in details")
        return a

    def _counters_answer(self, data, fp, kp):
        """L2 silent/non-silent evictions per line written, or why they cannot be read."""
        q = self.declared("l2_evictions")
        cpu = data.machine.get("cpu") or {}
        pmu = data.machine.get("pmu") or {}
        events, note = l2_eviction_events(cpu.get("vendor"), cpu.get("family"), cpu.get("model"))
        line = data.machine.get("line_bytes") or 64
        per = {}
        for s in data.samples:
            c = s.get("counters") or {}
            if "l2_lines_out_silent" not in c or s.get("point", {}).get("kernel") != kp:
                continue
            size = s["point"]["size_bytes"]
            lines = (c.get("chunk_bytes") or size) * s["length"] / line
            d = per.setdefault((fill_level(fp, size), s["arm"]), {"silent": [], "non_silent": []})
            d["silent"].append(c["l2_lines_out_silent"] / lines)
            d["non_silent"].append(c.get("l2_lines_out_non_silent", 0) / lines)
        if not per:
            if pmu.get("available") is False:
                why = f"no hardware PMU ({pmu.get('reason')})"
            elif events is None:
                why = note
            else:
                why = "the L2_LINES_OUT events could not be opened"
            return ans.not_measured(q, f"L2_LINES_OUT.SILENT / NON_SILENT cannot be counted here: "
                                       f"{why}; the store-elimination verdict rests on timing alone")
        details = [detail(f"{lv} {arm}", level=lv, arm=arm,
                          value=float(np.median(d["silent"])), unit="silent evictions/line",
                          non_silent_per_line=float(np.median(d["non_silent"])))
                   for (lv, arm), d in sorted(per.items())]
        beyond = [lv for lv in fill_levels(fp) if lv not in ("L1d", "L1", "L2")]
        shares = [si / (si + ns) for (lv, arm), d in per.items() if arm == "zero" and lv in beyond
                  for si, ns in zip(d["silent"], d["non_silent"]) if si + ns > 0]
        if not shares:
            return ans.not_measured(q, "no zero-arm sample beyond L2 carried the L2 eviction counts")
        return ans.measured(q, shares, f"filling zeros beyond L2 ({kp}), "
                            f"{float(np.median(shares)):.0%} of L2 evictions are silent "
                            f"(events: {note})", details=details,
                            estimator="median over samples of silent / (silent + non-silent)")


# Kernel short names (the `kernel` parameter) -> table row and required ISA.
KERNELS = {
    "scalar4": ("fill_scalar4", ""),
    "scalar8": ("fill_scalar8", ""),
    "sse": ("fill_sse", "sse2"),
    "avx2": ("fill_avx2", "avx2"),
    "avx512": ("fill_avx512", "avx512f"),
    "rep_stosb": ("fill_rep_stosb", ""),
    "memset": ("fill_memset", ""),
    "nt_movnti": ("fill_nt_movnti", "sse2"),
    "nt_sse": ("fill_nt_sse", "sse2"),
}


# The kernel the per-level verdicts are about: seed 000 used AVX2 stores;
# the first of these that was measured is chosen.
PRIMARY_ORDER = ("avx2", "avx512", "sse", "scalar8", "rep_stosb", "memset", "scalar4",
                 "nt_sse", "nt_movnti")


# Seed 000's effect: zeros ~17-18% faster beyond L2 on Skylake client.
SEED_EFFECT = 1.17


_SKL_CLIENT = {"l2_lines_out_silent": 0x01F2, "l2_lines_out_non_silent": 0x02F2}


L2_EVICTION_EVENTS = {("GenuineIntel", 6, m): _SKL_CLIENT
                      for m in (0x4E, 0x5E, 0x8E, 0x9E, 0xA5, 0xA6)}


L2_EVENT_SOURCE = ("Intel perfmon SKL/events/skylake_core.json (mapfile.csv: family 6 models "
                   "4E/5E/8E/9E/A5/A6): L2_LINES_OUT.SILENT event 0xF2 umask 0x1, "
                   "L2_LINES_OUT.NON_SILENT event 0xF2 umask 0x2")


def l2_eviction_events(vendor, family, model):
    """(events {name: raw config}, note) for this CPU, or (None, why not).
    Unknown models get None: memfx never guesses an encoding."""
    key = (vendor, family, model)
    if key in L2_EVICTION_EVENTS:
        return dict(L2_EVICTION_EVENTS[key]), f"encodings from {L2_EVENT_SOURCE}"
    m = f"{model:#x}" if isinstance(model, int) else str(model)
    return None, (f"no L2_LINES_OUT encodings in memfx's table for {vendor} family {family} "
                  f"model {m}; not guessing (they differ between generations)")


# The value arms in words, for the answers' sentences.
VALUE_WORDS = {"zero": "zero bytes", "one": "0x01 bytes", "ones": "0xFF bytes",
               "random": "a random non-zero byte", "zero_volatile": "zero bytes read through "
               "a volatile pointer", "one_zero": "passes alternating 0x01 and 0x00"}


def value_words(arm):
    """A value arm as words ("one" -> "0x01 bytes")."""
    return VALUE_WORDS.get(arm, f"the {arm} value")


def primary_kernel(kernels):
    for k in PRIMARY_ORDER:
        if k in kernels:
            return k
    return sorted(kernels)[0] if kernels else None


# Kernel -> family, for the zero/non-zero table: the store-elimination answer
# must cover every kind of store: the zero effect can differ by store width
# and kind (issue 16; docs/machine-notes.md, "Fill").
FAMILIES = {
    "scalar4": "scalar", "scalar8": "scalar", "sse": "SSE", "avx2": "AVX2",
    "avx512": "AVX-512", "rep_stosb": "rep stosb", "memset": "memset",
    "nt_movnti": "NT", "nt_sse": "NT",
}


# The non-zero arm a ratio is taken against: the first of these measured.
NONZERO_ORDER = ("one", "ones", "random")


RATIO_ESTIMATOR = ("median over the level's sizes of per-size ratios of medians; two-stage "
                   "bootstrap CI (sizes, then samples within each size)")


def kernel_label(k):
    """'AVX2 (avx2)', or just the name where the family is the kernel (memset)."""
    fam = FAMILIES.get(k, k)
    return k if fam.replace(" ", "_").lower() == k else f"{fam} ({k})"


def _kernel_order(k):
    return list(KERNELS).index(k) if k in KERNELS else len(KERNELS)


def _points_by(pts):
    """{(kernel, size, arm): point} of bandwidth points with samples."""
    return {(p["params"]["kernel"], p["params"]["size_bytes"], p["arm"]): p for p in pts}


def ratio_table(data, a_arm, b_arms, kernels=None):
    """Bandwidth of arm `a_arm` over the first measured of `b_arms`, per
    kernel and cache level, as plain data (a pure function of a RunData).

    Every size goes to the smallest reported cache that holds it, DRAM
    beyond the last (`fill_level`); a level's ratio is level_ratio's median
    over its sizes of per-size ratios of medians, with the two-stage
    bootstrap CI.  Returns [{kernel, family, level, ratio, ci_low, ci_high,
    n, sizes, a_arm, b_arm, gbps_a, gbps_b}] in kernel order (KERNELS), then
    level order; n = the smallest per-size sample count of either arm;
    gbps_* = the median over the level's sizes of each arm's point median.
    Kernels or levels without both arms are left out."""
    fp = Fingerprint.of(data.machine)
    vals = {}
    for p in data.points:
        if p.get("metric") == "gb_per_s" and p.get("values"):
            vals[(p["params"]["kernel"], p["params"]["size_bytes"], p["arm"])] = p["values"]
    arms = {a for _, _, a in vals}
    b_arm = next((a for a in b_arms if a in arms), None)
    if a_arm not in arms or b_arm is None:
        return []
    kernels = sorted({k for k, _, _ in vals if kernels is None or k in kernels}, key=_kernel_order)
    sizes = sorted({s for _, s, _ in vals})
    rows = []
    for k in kernels:
        for lv in fill_levels(fp):
            both = [s for s in sizes if fill_level(fp, s) == lv
                    and (k, s, a_arm) in vals and (k, s, b_arm) in vals]
            r = level_ratio([(vals[(k, s, a_arm)], vals[(k, s, b_arm)]) for s in both],
                            min_samples=threshold("min_samples"))
            if r is None:
                continue
            rows.append({"kernel": k, "family": FAMILIES.get(k, k), "level": lv,
                         "ratio": r["ratio"], "ci_low": r["ci_low"], "ci_high": r["ci_high"],
                         "n": min(r["n_a"], r["n_b"]), "sizes": r["sizes"],
                         "a_arm": a_arm, "b_arm": b_arm,
                         "gbps_a": float(np.median([np.median(vals[(k, s, a_arm)]) for s in both])),
                         "gbps_b": float(np.median([np.median(vals[(k, s, b_arm)]) for s in both]))})
    return rows


def zero_ratio_table(data):
    """Zero / non-zero fill bandwidth per kernel and cache level (ratio_table
    of the `zero` arm over the first measured of `one`, `ones`, `random`):
    [{kernel, family, level, ratio, ci_low, ci_high, n, sizes, zero_arm,
    nonzero_arm, gbps_zero, gbps_nonzero}].  The store-elimination answer is
    computed from these rows and nothing else, so the table beside it cannot
    contradict it."""
    out = []
    for r in ratio_table(data, "zero", NONZERO_ORDER):
        r = dict(r)
        r["zero_arm"], r["nonzero_arm"] = r.pop("a_arm"), r.pop("b_arm")
        r["gbps_zero"], r["gbps_nonzero"] = r.pop("gbps_a"), r.pop("gbps_b")
        out.append(r)
    return out


def _row_verdict(r):
    """detected / not_detected / inconclusive of one table row (named
    thresholds effect_min and min_samples)."""
    return effect_verdict(r["ratio"], r["ci_low"], r["ci_high"], r["n"], r["n"])


def _unreached(data, fp, table):
    """not_measured detail rows: every kernel absent from the table (not in
    this run's `kernels`, the CPU lacks its ISA, or no sample survived), so
    the answer names every kernel family, and levels the sweep did not reach
    for the kernels measured."""
    out = []
    done = {(r["kernel"], r["level"]) for r in table}
    measured = list(dict.fromkeys(r["kernel"] for r in table))
    asked = [k for k in (data.params or {}).get("kernels") or [] if k in KERNELS]
    sizes = [p["params"]["size_bytes"] for p in data.points if "size_bytes" in (p.get("params") or {})]
    largest = max(sizes) if sizes else 0
    for k in KERNELS:
        if k not in measured:
            isa = KERNELS[k][1]
            if k not in asked:
                why = f"not in this run's kernels (--set kernels=...,{k})"
            elif isa:
                why = f"needs {isa}, or no zero/non-zero pair of samples survived"
            else:
                why = "no zero/non-zero pair of samples survived"
            out.append(detail(kernel_label(k), kernel=k, family=FAMILIES[k],
                              level=None, value=None, unit="ratio", ci=None,
                              verdict=ans.NOT_MEASURED, reason=why))
    for k in measured:
        for lv in fill_levels(fp):
            if (k, lv) not in done:
                out.append(detail(f"{kernel_label(k)} {lv}", kernel=k,
                                  family=FAMILIES.get(k, k), level=lv, value=None,
                                  unit="ratio", ci=None,
                                  verdict=ans.NOT_MEASURED,
                                  reason=f"the sweep did not reach {lv} (largest region "
                                         f"{format_size(largest)})" if largest else "no sizes"))
    return out
