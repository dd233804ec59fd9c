"""Misaligned access: what a load or store costs when it is not aligned to its
width, splits a cache line, or splits a 4 KiB page.

Seed 004 (Drepper, "What every programmer should know about memory", 6.2
"Overhead of Unaligned Accesses"): on the CPUs of 2007 an unaligned access
that crosses a line costs two; one crossing a page also needs two
translations.  Here for 4, 8, 16, 32 and 64-byte accesses (the 64-byte ones
as two adjacent 32-byte AVX accesses) at byte offsets within a line:

  position line   the line is in the middle of a page: an access with
                  offset + width > 64 splits the line only
  position page   the line is the last of a page: the same offsets split the
                  page too

Arms (interleaved per cell)
  load      throughput: 8 independent loads of the address per iteration
  store     throughput: 8 stores of a pattern to the address per iteration
  latency   load-to-use: each load's address comes from the previous load

Stores are checked byte-exact against a reference at every offset, in both
positions and every width, before anything is timed.
"""
from __future__ import annotations

from ...model import answers as ans
from ...model.answers import Question
from ...model.plotspec import PlotSpec
from ..base import Experiment, Param, Point, Trial, register
from .analysis import (
    LINE,
    MAIN_WIDTH,
    MisalignedAnswers,
    splits,
)

PAGE = 4096
WIDTHS = (4, 8, 16, 32, 64)
MODES = ("load", "store", "latency")
KERNEL = {"load": "mis_load_{}", "store": "mis_store_{}", "latency": "mis_lat_{}"}
# Where the line sits in the two-page buffer.
LINE_BASE = 10 * LINE              # a line in the middle of the first page
PAGE_BASE = PAGE - LINE            # the last line of the first page
PATTERN = 0x0123456789ABCDEF


def base_of(position):
    return LINE_BASE if position == "line" else PAGE_BASE


def expected_store(buf, aux, width, value=PATTERN):
    """The buffer after a store of `width` bytes of the pattern at aux."""
    out = bytearray(buf)
    pattern = int(value).to_bytes(8, "little") * (width // 8 or 1)
    out[aux:aux + width] = pattern[:width]
    return bytes(out)


@register
class Misaligned(MisalignedAnswers, Experiment):
    name = "misaligned"
    order = 74
    title = "Misaligned loads and stores: line and page splits"
    question = ("What does an access cost when it is misaligned, splits a cache line, or "
                "splits a 4 KiB page?")
    seeds = ("004",)
    arms = MODES
    params = [
        Param("widths", "list:int", list(WIDTHS), "access widths, bytes: 4, 8, 16, 32, 64",
              "8,16", choices=WIDTHS),
        Param("offsets", "list:int", list(range(LINE)), "byte offsets within the line",
              "0,1,60", minimum=0, maximum=LINE - 1),
        Param("modes", "list:str", list(MODES), "load (throughput), store (throughput), "
              "latency (dependent loads)", "load", choices=MODES),
    ]
    presets = {
        # 9 samples of 0.3 ms: with 5 samples of 0.2 ms (~0.1 ns a load) a
        # noisy hour spread line_split_load's replicas wide enough to leave a
        # headline inconclusive (docs/machine-notes.md, "Misaligned").  A
        # quick replica is ~0.5 s longer
        "quick": {"samples": 9, "min_sample_ms": 0.3, "offsets": "0,1,62"},
        # 0.2 ms samples, as quick: the loops stay in the L1d and one sample
        # is still ~10^5 accesses; 1 ms samples over 5 widths x 64 offsets x
        # 3 modes made a replica of most of a minute
        "full": {"samples": 5, "min_sample_ms": 0.2},   # as quick; the replicas make the CI
    }
    questions = (
        Question("misaligned.line_split_load", "How much dearer is a load that splits a "
                 "cache line than an aligned one (throughput)?", "ratio", "004",
                 f"ratio of medians, line-splitting offsets vs aligned offsets (pooled), "
                 f"{MAIN_WIDTH}-byte loads; every width in details", headline=True, band=ans.EFFECT_BAND),
        Question("misaligned.page_split_load", "How much dearer is a load that splits a "
                 "4 KiB page than an aligned one (throughput)?", "ratio", "004",
                 f"ratio of medians, page-splitting offsets vs aligned offsets, "
                 f"{MAIN_WIDTH}-byte loads", band=ans.EFFECT_BAND),
        Question("misaligned.line_split_store", "How much dearer is a store that splits a "
                 "cache line (throughput)?", "ratio", "004",
                 f"as line_split_load, {MAIN_WIDTH}-byte stores", band=ans.EFFECT_BAND),
        Question("misaligned.page_split_store", "How much dearer is a store that splits a "
                 "4 KiB page (throughput)?", "ratio", "004",
                 f"as page_split_load, {MAIN_WIDTH}-byte stores", band=ans.EFFECT_BAND),
        Question("misaligned.line_split_latency", "How much longer is the load-to-use "
                 "latency of a line-splitting load?", "ratio", "004",
                 f"ratio of medians, dependent {MAIN_WIDTH}-byte loads", band=ans.EFFECT_BAND),
        Question("misaligned.page_split_latency", "How much longer is the load-to-use "
                 "latency of a page-splitting load?", "ratio", "004",
                 f"ratio of medians, dependent {MAIN_WIDTH}-byte loads", band=ans.EFFECT_BAND),
        Question("misaligned.unaligned_in_line", "Does a misaligned load that stays inside "
                 "its line cost anything?", "ratio", "004",
                 f"ratio of medians, offsets not a multiple of the width that do not split vs "
                 f"aligned offsets, {MAIN_WIDTH}-byte loads", band=ans.EFFECT_BAND),
    )
    plots = tuple(
        PlotSpec(f"{mode}", f"{title} by offset in the line", kind="curve", x="offset",
                 series=("width", "position"), arms=(mode,), xlabel="byte offset in the line",
                 ylabel=unit)
        for mode, title, unit in (("load", "load throughput", "ns per load"),
                                  ("store", "store throughput", "ns per store"),
                                  ("latency", "load-to-use latency", "ns per dependent load")))

    # -- plan --
    def plan(self, params, machine):
        pts = []
        flags = machine.get("flags") or {}
        for w in params["widths"]:
            if w >= 32 and flags and not flags.get("avx"):
                continue        # the 32/64-byte rows need AVX; their answers say not measured
            for pos in ("line", "page"):
                for o in sorted(set(params["offsets"])):
                    if pos == "page" and not splits(w, o):
                        continue        # the same access as position line
                    pts += [Point(m, {"width": w, "position": pos, "offset": o})
                            for m in params["modes"]]
        return pts

    def estimate_seconds(self, params, machine):
        return 1 + len(self.plan(params, machine)) * (params["samples"] * 3
                                                      * params["min_sample_ms"] / 1000 + 0.005)

    # -- one trial --
    def prepare(self, point, params, lab):
        p = point.params
        buf = lab.buffer(2 * PAGE)
        aux = base_of(p["position"]) + p["offset"]
        kernel = KERNEL[point.arm].format(p["width"])
        if point.arm == "load":
            return Trial(kernel, src=buf, aux=aux, warmup=16)
        return Trial(kernel, dst=buf, aux=aux, value=PATTERN, warmup=16)

    def verify(self, lab, params):
        """Every store kernel writes exactly its width of the pattern at every
        offset of both positions and nothing else; every latency kernel
        writes its one-element chain there and ends on it; every load kernel
        leaves memory alone."""
        widths = [w for w in WIDTHS if lab.kernels[f"mis_store_{w}"].supported]
        before = bytes((i * 37 + 11) & 0xFF for i in range(2 * PAGE))
        for w in widths:
            for pos in ("line", "page"):
                for o in range(LINE):
                    aux = base_of(pos) + o
                    buf = lab.buffer(2 * PAGE)
                    buf.buffer[buf.offset:buf.offset + 2 * PAGE] = before
                    lab.call(Trial(f"mis_store_{w}", dst=buf, aux=aux, value=PATTERN), 3)
                    got = bytes(buf.buffer[buf.offset:buf.offset + 2 * PAGE])
                    if got != expected_store(before, aux, w):
                        raise AssertionError(f"mis_store_{w} at offset {aux} is not byte-exact")
                    buf.buffer[buf.offset:buf.offset + 2 * PAGE] = before
                    end = lab.call(Trial(f"mis_lat_{w}", dst=buf, aux=aux), 5)
                    want = bytearray(before)
                    want[aux:aux + w] = aux.to_bytes(4, "little") + bytes(w - 4)
                    if end != aux or bytes(buf.buffer[buf.offset:buf.offset + 2 * PAGE]) \
                            != bytes(want):
                        raise AssertionError(f"mis_lat_{w} at offset {aux} wrote the wrong "
                                             f"chain or left it")
                    buf.buffer[buf.offset:buf.offset + 2 * PAGE] = before
                    lab.call(Trial(f"mis_load_{w}", src=buf, aux=aux), 3)
                    if bytes(buf.buffer[buf.offset:buf.offset + 2 * PAGE]) != before:
                        raise AssertionError(f"mis_load_{w} wrote to memory")
            lab.release()


