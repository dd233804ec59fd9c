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

from ...model.answers import LOWER, Question
from ...model.errors import MemfxError, ParamError
from ...model.plotspec import Mark, PlotSpec
from ..base import Experiment, Param, Point, Region, Trial, register
from ..copy.kernels import MODES, check_no_overlap, fill_pattern
from .analysis import (  # noqa: F401
    CONTROL_BASE,
    CONTROL_SUFFIX,
    DECLARED_KERNELS,
    DECLARED_MODE,
    DECLARED_SIZE,
    MIN_BAND_OFFSETS,
    PAGE,
    PENALTY_MIN,
    AliasingAnswers,
    _ci,
    _what,
    combo_result,
    common_band,
    control_arm,
    declared_combo,
    find_bands,
    offsets,
    signed,
    signed_ranges,
    strategy_of,
)

VECTOR_ORDER = ("avx512", "avx2", "sse")   # widest first
KNOWN = ("rep_movsb", "vector", "libc", "rmw_add", "avx512", "avx2", "sse", "gpr_unrolled",
         "rep_movsq")


def kernel_for(arm):
    arm = strategy_of(arm)
    return "rmw_add_loop" if arm == "rmw_add" else f"copy_{arm}"


def control_of(offset):
    """Where the control's destination goes: the same misalignment, far from 0 and 4096."""
    return CONTROL_BASE + offset % 64


@register
class Aliasing(AliasingAnswers, Experiment):
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


