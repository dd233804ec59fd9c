"""4K aliasing: how much slower is a copy (or `a[i] += b[i]`) when the
destination sits just past the source modulo 4096?

Seed 002 (David Laight on Zen 5): "the 'elephant in the room' is when
(dest - src) % 4096 is between 1 and 63.  In that case short copies jump
to 55 clocks."  A load whose address matches an earlier, still pending
store in bits 11:0 is held back as if it depended on it, although the full
addresses differ (Intel Optimization Reference Manual, "4K Aliasing").

Sweep: offset = (dst - src) mod 4096 over 0..4095, every `fine_step`
bytes within `fine_span` of 0 and of 4096 (both directions), every
`coarse_step` bytes in between.  The source starts at a page boundary
(+ src_offset), the destination `gap + offset` bytes after it with gap a
multiple of 4096 >= size, so the two never overlap.

Every point also times its control, in the same cell and interleaved with
it (arm `<strategy>:control`): the same strategy with the destination at
2048 + (offset mod 64), i.e. the same misalignment far from any aliasing.
Comparing within the cell cancels the drift of a shared machine, and
comparing at the same misalignment keeps a plain misaligned-store cost from
being taken for aliasing.

Arms: rep_movsb, the widest vector loop this CPU supports (avx512, avx2 or
sse; "vector" in the strategies list), libc memcpy, and rmw_add (the
load/store loop a[i] += b[i] with a = dst, b = src, 8-byte elements).

Analysis, per arm, size and mode: each offset is compared with its control;
an offset is penalised when the ratio of medians is >= 1 + PENALTY_MIN with
its CI above 1 + effect_min.  Runs of penalised offsets (up to three
unpenalised offsets within 64 bytes inside a run are tolerated) with at
least MIN_BAND_OFFSETS members are the bands; lone penalised offsets make
the combination inconclusive.  Two declared questions: aliasing.penalty_4k
(one detail per arm/size/mode with its bands; value = the largest band
slowdown) and aliasing.misaligned_dst (from the controls).
"""
from __future__ import annotations

import math

import numpy as np

from ...model import stats
from ...model.answers import LOWER, Answer, Question, measured, not_measured
from ...model.details import detail
from ...model.errors import MemfxError, ParamError
from ...model.findings import DETECTED, INCONCLUSIVE, NOT_DETECTED, threshold
from ...model.plotspec import Mark, PlotSpec
from ...model.units import format_size
from ..base import Experiment, Param, Point, Region, Trial, register
from ..copy.kernels import MODES, check_no_overlap, fill_pattern

PAGE = 4096
CONTROL_BASE = 2048           # far from both 0 and 4096 modulo 4096
VECTOR_ORDER = ("avx512", "avx2", "sse")   # widest first
KNOWN = ("rep_movsb", "vector", "libc", "rmw_add", "avx512", "avx2", "sse", "gpr_unrolled",
         "rep_movsq")
# An offset is penalised when it is at least this much slower than its control.
PENALTY_MIN = 0.10
# A band needs this many penalised offsets; a lone one is reported as isolated.
MIN_BAND_OFFSETS = 2


def kernel_for(arm):
    arm = strategy_of(arm)
    return "rmw_add_loop" if arm == "rmw_add" else f"copy_{arm}"


CONTROL_SUFFIX = ":control"


def offsets(fine_span, fine_step, coarse_step):
    """The swept offsets (sorted): fine near 0 and 4096, coarse between."""
    fine = set(range(0, fine_span, fine_step)) | {fine_span - 1}
    fine |= set(range(PAGE - fine_span, PAGE, fine_step)) | {PAGE - 1}
    coarse = {o for o in range(coarse_step, PAGE, coarse_step) if fine_span <= o < PAGE - fine_span}
    return sorted(fine | coarse)


def control_of(offset):
    """Where the control's destination goes: the same misalignment, far from 0 and 4096."""
    return CONTROL_BASE + offset % 64


def control_arm(arm):
    return arm + CONTROL_SUFFIX


def strategy_of(arm):
    return arm[:-len(CONTROL_SUFFIX)] if arm.endswith(CONTROL_SUFFIX) else arm


def signed(offset):
    """offset as dst - src in -2048..2047 (negative: dst just below src mod 4096)."""
    return offset if offset < PAGE // 2 else offset - PAGE


def find_bands(ratios, penalty_min=PENALTY_MIN, effect_min=None, max_hole=3, max_gap=64,
               min_offsets=MIN_BAND_OFFSETS):
    """Penalty bands from per-offset comparisons.

    `ratios`: {offset: (ratio, ci_low, ci_high)} of offset vs its control.
    Penalised: ratio >= 1 + penalty_min and ci_low > 1 + effect_min.
    Penalised offsets that follow each other among the offsets tested form
    a band; a band also bridges up to `max_hole` unpenalised offsets when
    the penalised ones around them are at most `max_gap` bytes apart.  A
    band needs `min_offsets` members:
    {first, last, offsets, signed, worst_offset, worst_ratio, median_ratio}.
    Returns (bands, isolated penalised offsets)."""
    e = threshold("effect_min") if effect_min is None else effect_min
    order = sorted(ratios)
    pen_set = {o for o in order if ratios[o][0] >= 1 + penalty_min and ratios[o][1] > 1 + e}
    bands, current, holes = [], [], 0
    for o in order:
        if o not in pen_set:
            holes += 1
            continue
        if current and (holes == 0 or (holes <= max_hole and o - current[-1] <= max_gap)):
            current.append(o)
        else:
            if current:
                bands.append(current)
            current = [o]
        holes = 0
    if current:
        bands.append(current)
    isolated = [o for b in bands if len(b) < min_offsets for o in b]
    bands = [b for b in bands if len(b) >= min_offsets]
    out = []
    for b in bands:
        worst = max(b, key=lambda o: ratios[o][0])
        out.append({"first": b[0], "last": b[-1], "offsets": b,
                    "signed": [signed(b[0]), signed(b[-1])],
                    "worst_offset": worst, "worst_ratio": ratios[worst][0],
                    "median_ratio": float(np.median([ratios[o][0] for o in b]))})
    return out, isolated


@register
class Aliasing(Experiment):
    name = "aliasing"
    order = 40
    title = "4K aliasing: copy time vs (dst - src) mod 4096"
    question = ("How much slower are copies and a[i] += b[i] when the destination is just "
                "past the source modulo 4096, and for which offsets?")
    seeds = ("002",)
    arms = ("rep_movsb", "avx512", "avx2", "sse", "libc", "rmw_add", "gpr_unrolled", "rep_movsq")
    questions = (
        Question("aliasing.penalty_4k",
                 "How much slower are copies (and a[i] += b[i]) when (dst - src) mod 4096 is "
                 "just above 0 or just below 4096, and at which offsets?", "x", "002",
                 "per kernel, size and mode, each offset vs its control (same strategy and "
                 "misalignment, dst at 2048 + offset mod 64, interleaved in one cell); offsets "
                 ">= 1.1x with the CI above 1 + effect_min form bands; value and verdict: the "
                 "median band slowdown at the declared combination (rep movsb, throughput, "
                 "256 B: the seed's case), the others in details", better=LOWER, headline=True),
        Question("aliasing.misaligned_dst",
                 "How much slower is a copy whose destination is misaligned within its cache "
                 "line than an aligned one, far from 4K aliasing?", "x", "002",
                 "per kernel, size and mode, the misaligned control cells (dst at 2048 + "
                 "offset mod 64) vs the aligned ones (ratio of medians of their medians); "
                 "value: the median over them", better=LOWER),
    )
    params = [
        Param("sizes", "list:size", [64, 256, 2048, 16384], "bytes per copy (per array for "
              "rmw_add)", "256,4K", minimum=8, maximum=1 << 20),
        Param("strategies", "str", "rep_movsb,vector,libc,rmw_add",
              "what to sweep: rep_movsb, vector (the widest vector loop supported), libc, "
              "rmw_add (a[i] += b[i]), or avx512/avx2/sse/gpr_unrolled/rep_movsq",
              "rep_movsb,vector"),
        Param("fine_span", "int", 128, "offsets within this many bytes of 0 and of 4096 are "
              "swept finely", "64", minimum=1, maximum=1024),
        Param("fine_step", "int", 1, "step of the fine part, bytes", "4", minimum=1, maximum=512),
        Param("coarse_step", "int", 128, "step between the fine parts, bytes", "512",
              minimum=1, maximum=4096),
        Param("modes", "list:str", ["throughput", "latency"],
              "timing modes (as in the copy experiment): throughput, latency (lfence per "
              "call), chained", "throughput", choices=tuple(MODES)),
        Param("src_offset", "int", 0, "source start past a page boundary, bytes", "32",
              minimum=0, maximum=4095),
    ]
    # ns per call vs (dst - src) mod 4096 as a signed offset on a symlog axis
    # (the fine parts near 0 and 4096 readable), one panel per mode and size;
    # each strategy solid, its same-misalignment control dashed, every sample
    # visible, the penalty bands of aliasing.penalty_4k shaded
    plots = (
        PlotSpec("offset", "4K aliasing", x="offset", x_wrap=PAGE, series=("arm",),
                 facets=("mode", "size_bytes"),
                 facet_order=(("mode", ("throughput", "latency", "chained")),),
                 facet_title="{size_bytes} B per call, {mode}",
                 log_x=True, linthresh=64, linscale=2, xlim=(-2048, 2048), log_y=True,
                 dashed=CONTROL_SUFFIX, dashed_label=" control (same misalignment)",
                 xlabel="(dst - src) mod 4096, as a signed offset in bytes (symlog)",
                 ylabel="ns per call (log)",
                 marks=(Mark("aliasing.penalty_4k", details=True, at="bands[].signed",
                             facet=("mode", "size_bytes"), band=True, alpha=0.06,
                             legend="penalty band"),)),
    )

    presets = {
        # 5 samples x 3 replicas: with 7, a replica's time was mostly timed
        # samples (docs/machine-notes.md)
        "quick": {"sizes": "256,2K,16K", "fine_span": 64, "fine_step": 4, "coarse_step": 512,
                  "modes": "throughput", "samples": 5, "min_sample_ms": 0.2},
        # the fine parts every 4 B, as quick: at every 2 B they were 128 of
        # the 160 offsets for band edges no sharper than the 64-byte line
        # they come from
        # 5 samples x 3 replicas as in quick (the replicas make the CI)
        "full": {"samples": 5, "min_sample_ms": 0.2, "fine_step": 4},
    }

    def strategies(self, params):
        from ...lab.core import kernel_table
        rows = kernel_table()
        names = [s.strip() for s in str(params["strategies"]).split(",") if s.strip()]
        bad = [n for n in names if n not in KNOWN]
        if not names or bad:
            raise ParamError(f"strategies: unknown {', '.join(bad) or '(none)'}; known: "
                             f"{', '.join(KNOWN)}")
        out = []
        for n in names:
            if n == "vector":
                n = next((v for v in VECTOR_ORDER if rows[kernel_for(v)].supported), None)
                if n is None:
                    raise ParamError("strategies: this CPU supports no vector loop")
            row = rows.get(kernel_for(n))
            if row is None:
                raise MemfxError(f"the C core lacks kernel {kernel_for(n)}")
            if not row.supported:
                raise ParamError(f"strategies: {n} needs {row.isa}, which this CPU lacks")
            if n not in out:
                out.append(n)
        return out

    def plan(self, params, machine):
        if params["fine_span"] * 2 > CONTROL_BASE:
            raise ParamError("fine_span must be at most 1024 bytes (the controls sit at 2048)")
        arms = self.strategies(params)
        offs = offsets(params["fine_span"], params["fine_step"], params["coarse_step"])
        return [Point(a, {"size_bytes": size, "offset": o, "mode": mode})
                for mode in params["modes"] for size in params["sizes"] for o in offs
                for arm in arms for a in (arm, control_arm(arm))]

    def estimate_seconds(self, params, machine):
        return len(self.plan(params, machine)) * (params["samples"] * params["min_sample_ms"]
                                                  / 1000 + 0.002) * 1.3 + 2

    def prepare(self, point, params, lab):
        size, off, mode = point.params["size_bytes"], point.params["offset"], point.params["mode"]
        if not 0 <= off < PAGE:
            raise ParamError(f"offset must be in 0..4095, got {off}")
        if point.arm.endswith(CONTROL_SUFFIX):
            off = control_of(off)
        key = (size, off, params["src_offset"])
        cache = lab.cache.setdefault("aliasing", {})
        cached = cache.get(key)
        if cached and not cached[0].buffer.closed:
            src, dst = cached[0], cached[1]
        else:
            gap = -(-size // PAGE) * PAGE
            region = lab.buffer(gap + off + size, align=PAGE, offset=params["src_offset"])
            src = Region(region.buffer, region.offset, size, region.address)
            dst = Region(region.buffer, region.offset + gap + off, size, region.address + gap + off)
            check_no_overlap(src.address, dst.address, size)
            assert (dst.address - src.address) % PAGE == off
            fill_pattern(region.buffer, src.offset, size)
            # the arms of one cell share their two placements; older cells' are unmapped
            for k in [k for k, v in cache.items() if v[0].buffer.closed]:
                del cache[k]
            cache[key] = (src, dst)
        # per-sample values, as in the copy experiment (thousands of calls per sample)
        return Trial(kernel_for(point.arm), size=size, dst=dst, src=src, aux=MODES[mode],
                     metric="time", difference=False, warmup=2)

    def verify(self, lab, params):
        """Every kernel swept, byte-exact (sizes 0..4096 x 64 misalignments), in each mode."""
        for arm in self.strategies(params):
            kernel = kernel_for(arm)
            err = lab.verify_copy(kernel, 4096, 64, False, 0, 1)
            for mode in params["modes"]:
                if err is None and MODES[mode]:
                    err = lab.verify_copy(kernel, 300, 64, False, MODES[mode], 3)
            if err is not None:
                raise MemfxError(f"kernel verification failed: {err}")

    def analyze(self, data):
        keys = sorted({(p["arm"], p["params"]["size_bytes"], p["params"]["mode"])
                       for p in data.points if not p["arm"].endswith(CONTROL_SUFFIX)},
                      key=lambda k: (k[2] != "throughput", k[2], k[1],
                                     self.arms.index(k[0]) if k[0] in self.arms else 99))
        combos = []
        for arm, size, mode in keys:
            pts = {p["params"]["offset"]: p for p in data.select(arm, size_bytes=size, mode=mode)
                   if p.get("values")}
            ctl = {p["params"]["offset"]: p for p in
                   data.select(control_arm(arm), size_bytes=size, mode=mode) if p.get("values")}
            ratios = {}
            for o, p in pts.items():
                if o in ctl:
                    r = stats.ratio_of_medians(p["values"], ctl[o]["values"])
                    ratios[o] = (r["ratio"], r["ci_low"], r["ci_high"])
            if ratios:
                combos.append(combo_result(arm, size, mode, ratios, pts, ctl))
        return [self._penalty_4k(combos), self._misaligned_dst(combos)]

    def _penalty_4k(self, combos):
        q = self.declared("aliasing.penalty_4k")
        if not combos:
            return not_measured(q, "no offset was measured together with its control")
        details = [c["detail"] for c in combos]
        found = [c for c in combos if c["verdict"] == DETECTED]
        n = len(combos)
        # The answer is read at one declared combination (issue 22), not the
        # largest over all of them: a maximum over cells is a different cell
        # from run to run and has no honest CI ("3.47x [1.83, 33.71]").  The
        # others hang in the details and the sentence.
        cell = declared_combo(combos)
        at = f"{_what(cell['arm'])}, {format_size(cell['size'])}, {cell['mode']}"
        parts = []
        by_kernel = {}
        for c in found:
            by_kernel.setdefault(c["arm"], []).append(c)
        for arm, cs in by_kernel.items():
            lo, hi = min(c["value"] for c in cs), max(c["value"] for c in cs)
            span = f"{lo:.2f}x" if abs(hi - lo) < 0.005 else f"{lo:.2f}-{hi:.2f}x"
            of = sum(c["arm"] == arm for c in combos)
            parts.append(f"{_what(arm)} {span} in {len(cs)} of {of}, {common_band(cs)}")
        elsewhere = (f"; a band in {len(found)} of the {n} kernel/size/mode combinations "
                     f"measured: " + "; ".join(parts) if found else
                     f"; no band in any of the {n} combinations measured")
        if cell["verdict"] == DETECTED:
            because = (f"A copy whose destination 4K-aliases its source runs {cell['value']:.2f}x"
                       f"{_ci(cell)} slower at offsets {', '.join(cell['where'])} ({at}, "
                       f"the declared combination)" + elsewhere
                       + " (offsets: dst - src mod 4096, signed; every band in the details)")
            value, lo, hi = cell["value"], cell["ci_low"], cell["ci_high"]
        else:
            w = (f"the worst offset is {signed(cell['worst_offset']):+d} at "
                 f"{cell['worst_ratio']:.2f}x its control")
            state = "lone slow offsets, no band" if cell["verdict"] == INCONCLUSIVE else "no band"
            because = f"{state} at {at} (the declared combination); {w}" + elsewhere
            value, (lo, hi) = cell["worst_ratio"], cell["worst_ci"]
        return Answer(question=q.id, verdict=cell["verdict"], because=because, value=value,
                      ci_low=lo, ci_high=hi, evidence=cell["detail"]["points"], details=details,
                      estimator="median slowdown over the band (ratio of medians to the "
                                "same-misalignment control) at the declared combination; "
                                "without a band its worst offset")

    def _misaligned_dst(self, combos):
        q = self.declared("aliasing.misaligned_dst")
        usable = [c for c in combos if c["misaligned"]]
        if not usable:
            return not_measured(q, "no aligned and misaligned controls measured in one "
                                   "kernel/size/mode combination")
        details = []
        for c in usable:
            r = stats.ratio_of_medians(c["misaligned"], c["aligned"])
            enough = min(r["n_a"], r["n_b"]) >= threshold("min_ci_samples")
            details.append(detail(f"{_what(c['arm'])}, {format_size(c['size'])}, {c['mode']}",
                                  value=r["ratio"], unit="x",
                                  ci_low=r["ci_low"] if enough else None,
                                  ci_high=r["ci_high"] if enough else None,
                                  kernel=c["arm"], size_bytes=c["size"], mode=c["mode"],
                                  misaligned_cells=r["n_a"], aligned_cells=r["n_b"],
                                  points=c["control_points"]))
        per = [d["value"] for d in details]
        ans = measured(q, per, "", details=details,
                       evidence=[k for c in usable for k in c["control_points"]],
                       estimator="median over combinations of (median over the misaligned "
                                 "control cells / median over the aligned ones)")
        worst = max(details, key=lambda d: d["value"])
        ans.because = (f"A destination misaligned within its cache line, far from 4K aliasing, "
                       f"costs {ans.value:.2f}x an aligned one (median over the {len(details)} "
                       f"combinations measured; most: {worst['value']:.2f}x, {worst['label']}); "
                       f"controls of different cells, so machine drift is included")
        return ans


def signed_ranges(offsets):
    """Signed offsets -> '-63..-1, +1..+31' (runs of consecutive integers)."""
    out, run = [], []
    for o in sorted(offsets):
        if run and o == run[-1] + 1:
            run.append(o)
            continue
        if run:
            out.append(run)
        run = [o]
    if run:
        out.append(run)
    return ", ".join(f"{r[0]:+d}" if len(r) == 1 else f"{r[0]:+d}..{r[-1]:+d}" for r in out)


def common_band(combos):
    """Where a kernel's bands lie, in words: the signed offsets inside a band
    in at least half of the given combinations (in every one when fewer than
    three), as ranges -- one line for a kernel whose bands differ a little
    from size to size; all of them when no offset is common to most."""
    counts = {}
    for c in combos:
        for b in c["detail"]["bands"]:
            for o in range(b["signed"][0], b["signed"][1] + 1):
                counts[o] = counts.get(o, 0) + 1
    need = len(combos) if len(combos) < 3 else -(-len(combos) // 2)
    core = [o for o, k in counts.items() if k >= need]
    if core:
        return ("at " if len(combos) == 1 else "mostly at ") + signed_ranges(core)
    return "at " + signed_ranges(counts) + " (no offset common to most)"


def _what(arm):
    return "a[i] += b[i]" if strategy_of(arm) == "rmw_add" else strategy_of(arm)


def _ci(c):
    return (f" [{c['ci_low']:.2f}, {c['ci_high']:.2f}]"
            if c.get("ci_low") is not None and c.get("ci_high") is not None else "")


# The combination aliasing.penalty_4k is read at: the seed's own case (seed
# 002, David Laight on Zen 5: short `rep movsb` copies "jump to 55 clocks"
# when (dest - src) % 4096 is between 1 and 63), throughput, 256 bytes per
# copy -- the first kernel of DECLARED_KERNELS the sweep measured, the size
# nearest DECLARED_SIZE.
DECLARED_KERNELS = ("rep_movsb", "avx512", "avx2", "sse", "gpr_unrolled", "libc", "rep_movsq",
                    "rmw_add")
DECLARED_SIZE = 256
DECLARED_MODE = "throughput"


def declared_combo(combos):
    """The combination an answer is read at (see DECLARED_KERNELS): the same
    one on every run of one machine and one sweep."""
    def rank(c):
        kernel = DECLARED_KERNELS.index(c["arm"]) if c["arm"] in DECLARED_KERNELS else 99
        return (c["mode"] != DECLARED_MODE, kernel,
                abs(math.log2(c["size"] / DECLARED_SIZE)), c["size"])
    return min(combos, key=rank)


def combo_result(arm, size, mode, ratios, pts, ctl):
    """One kernel/size/mode combination: its bands (find_bands), verdict,
    value and CI, and its detail row for the answer."""
    from ...model.answers import evidence_keys
    bands, isolated = find_bands(ratios)
    for b in bands:
        b["ns"] = {str(o): pts[o]["median"] for o in b["offsets"]}
        b["control_ns"] = {str(o): ctl[o]["median"] for o in b["offsets"]}
    # The controls also show the plain misalignment cost (different cells:
    # drift included): the misaligned controls' medians vs the aligned ones'
    # (every offset = 0 mod 64 has its control at exactly 2048).
    aligned = [c["median"] for o, c in ctl.items() if o % 64 == 0 and c.get("median")]
    misaligned = [c["median"] for o, c in ctl.items() if o % 64 and c.get("median")]
    worst = max(ratios, key=lambda o: ratios[o][0])
    where = [f"{b['signed'][0]:+d}..{b['signed'][1]:+d}" for b in bands]
    if bands:
        per = [ratios[o][0] for b in bands for o in b["offsets"]]
        value = float(np.median(per))
        if len(per) >= threshold("min_ci_samples"):
            lo, hi = stats.bootstrap_ci(per)
        else:
            o = bands[0]["offsets"][0]
            lo, hi = ratios[o][1], ratios[o][2]
        verdict = DETECTED
        label = f"x{value:.2f} at {', '.join(where)}"
    else:
        value, lo, hi = ratios[worst][0], ratios[worst][1], ratios[worst][2]
        verdict = INCONCLUSIVE if isolated else NOT_DETECTED
        label = (f"no band; lone slow offsets {', '.join(f'{signed(o):+d}' for o in isolated[:6])}"
                 if isolated else f"no band (worst {signed(worst):+d}: x{value:.2f})")
    offs = sorted({o for b in bands for o in b["offsets"]} | {worst})
    det = detail(f"{_what(arm)}, {format_size(size)}, {mode}: {label}", value=value,
                 unit="x", ci_low=lo, ci_high=hi, verdict=verdict, kernel=arm,
                 size_bytes=size, mode=mode, bands=bands,
                 isolated_offsets={str(o): ratios[o][0] for o in isolated},
                 worst_offset=worst, worst_signed=signed(worst),
                 worst_ratio=ratios[worst][0], offsets_tested=len(ratios),
                 penalty_min=PENALTY_MIN,
                 control=f"same strategy, same cell, dst at {CONTROL_BASE} + offset mod 64",
                 points=evidence_keys([pts[o] for o in offs] + [ctl[o] for o in offs]))
    return {"arm": arm, "size": size, "mode": mode, "verdict": verdict, "value": value,
            "ci_low": lo, "ci_high": hi, "where": where, "worst_offset": worst,
            "worst_ratio": ratios[worst][0], "worst_ci": (ratios[worst][1], ratios[worst][2]),
            "misaligned": misaligned if aligned else [], "aligned": aligned,
            "control_points": evidence_keys([c for o, c in sorted(ctl.items())
                                             if o % 64 == 0 or o in (1, 63)][:8]),
            "detail": det}
