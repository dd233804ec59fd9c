"""Cache associativity: how many lines one set holds, how many sets there are,
and what a power-of-two leading dimension costs.

Seed 004 (Drepper, "What every programmer should know about memory", 3.3.1
"Size vs Associativity" and 3.3.4 "Cache Associativity Effects"): M lines
spaced `stride` bytes apart share the sets whose index bits the stride
leaves alone.  Once the stride reaches a cache's way size (sets x line) all
M lines fall into one set, and a random chase through them stays fast only
while M <= ways.  Below the way size the lines spread over way_size/stride
sets and the capacity is ways x way_size / stride.  So, per stride, the
largest M still served by a level gives: ways = the smallest such capacity,
way size = the smallest stride that reaches it, sets = way size / line.

A level "serves" a chase when its time per load stays below the geometric
mean of that level's latency and the next one's (from reference chases:
a chain of one line for L1, random chains of half the L2 and of 4x the L2
for L2 and the next level).  Lines <= 64 keep every chain inside a 72-entry
L1 TLB's reach at strides up to 4 KiB... and inside a page walk's cheap
range above it, so TLB steps do not pass for set overflows.  Buffers ask for
transparent huge pages so that the physical index bits of the L2 follow the
virtual ones (true on bare metal; a VM's host may still map guest huge
pages with 4 KiB pages, which the answer then cannot see through).

The practical answer: summing the columns of a 1024x1024 row-major double
matrix (leading dimension 1024: a column's 1024 lines fall into few sets)
vs the same matrix with the leading dimension padded to 1032.
"""
from __future__ import annotations

import numpy as np

from ...model import answers as ans
from ...model.answers import Question
from ...model.errors import ParamError
from ...model.machine_view import Fingerprint
from ...model.plotspec import PlotSpec
from ...model.units import format_size
from ..base import Experiment, Param, Point, Trial, register
from .analysis import (  # noqa: F401
    LINE,
    AssocAnswers,
    capacity,
    ways_and_sets,
)

PARTS = ("stride", "matrix")
REF_LEVELS = ("l2", "beyond_l2")


@register
class Assoc(AssocAnswers, Experiment):
    name = "assoc"
    order = 72
    title = "Cache associativity and power-of-two strides"
    question = ("How many ways and sets do L1d and L2 have, and what does a power-of-two "
                "leading dimension cost?")
    seeds = ("004",)
    arms = ("chase", "ld_pow2", "ld_padded")
    params = [
        Param("parts", "list:str", list(PARTS), "stride (ways and sets) and/or matrix "
              "(column sums with a power-of-two vs padded leading dimension)", "stride",
              choices=PARTS),
        Param("strides", "list:size", [1 << k for k in range(10, 20)],
              "distances between the chased lines, bytes (powers of two)", "4K,128K",
              minimum=LINE, maximum=1 << 24),
        Param("lines", "list:int", list(range(1, 21)) + [24, 28, 32, 40, 48, 56, 64],
              "lines chased per stride", "4,8,9,16", minimum=1, maximum=64),
        Param("matrix_n", "int", 1024, "matrix part: rows and columns of the double matrix",
              "512", minimum=16, maximum=8192),
        Param("pad", "int", 8, "matrix part: elements added to the leading dimension of the "
              "padded arm", "16", minimum=1, maximum=1024),
    ]
    presets = {
        "quick": {"samples": 5, "min_sample_ms": 0.3,
                  "strides": "2K,4K,8K,128K,256K",
                  "lines": "1,2,4,6,7,8,9,10,12,16,17,24,32,48,64"},
        # 5 samples x 3 replicas as in quick: a full replica is seconds of
        # timed samples over 272 cells
        "full": {"samples": 5},
    }
    questions = (
        Question("assoc.l1_ways", "How many lines does one L1d set hold (associativity)?",
                 "ways", "004", "the lines a chase keeps below the L1/L2 latency midpoint "
                 "where that count stops falling as the stride doubles (the way size); "
                 "compared with sysfs ways_of_associativity",
                 headline=True),
        Question("assoc.l1_sets", "How many sets does the L1d have?", "sets", "004",
                 "smallest stride at which the L1 capacity falls to its ways, / line size; "
                 "compared with sysfs number_of_sets"),
        Question("assoc.l2_ways", "How many lines does one L2 set hold?", "ways", "004",
                 "as l1_ways, at the L2/next-level latency midpoint"),
        Question("assoc.l2_sets", "How many sets does the L2 have?", "sets", "004",
                 "as l1_sets, for the L2"),
        Question("assoc.leading_dimension", "How much slower is summing a column of a "
                 "1024x1024 double matrix than of the same matrix with a padded leading "
                 "dimension (1032)?", "ratio", "004",
                 "ratio of medians ns per element, ld = n vs ld = n + pad", band=ans.EFFECT_BAND,
                 # host-shared: a column's elements 8 KiB apart map to one L1 set and a few
                 # L2 sets, so the ld = n walk is served from the host's shared L3
                 # (docs/machine-notes.md, "Host-shared answers")
                 host_shared=True),
    )
    plots = (
        PlotSpec("stride", "random chase of M lines spaced `stride` apart", kind="curve",
                 x="lines", series=("stride_bytes",), select={"part": "stride"}, log_y=True,
                 xlabel="lines chased", ylabel="ns per load"),
        PlotSpec("matrix", "column sums: power-of-two vs padded leading dimension",
                 kind="bars", x="arm", series=("n",), select={"part": "matrix"},
                 xlabel="leading dimension", ylabel="ns per column"),
    )

    # -- plan --
    def plan(self, params, machine):
        pts = []
        if "stride" in params["parts"]:
            for s in params["strides"]:
                if s & (s - 1):
                    raise ParamError(f"strides: {format_size(s)} is not a power of two")
            l2_cache = Fingerprint.of(machine).cache(2)
            l2 = l2_cache.size_bytes if l2_cache else 1 << 20
            pts += [Point("chase", {"part": "ref", "level": lv,
                                    "size_bytes": l2 // 2 if lv == "l2" else 4 * l2})
                    for lv in REF_LEVELS]
            pts += [Point("chase", {"part": "stride", "stride_bytes": s, "lines": m})
                    for s in sorted(set(params["strides"])) for m in sorted(set(params["lines"]))]
        if "matrix" in params["parts"]:
            n = params["matrix_n"]
            pts += [Point(arm, {"part": "matrix", "n": n, "ld": n + (arm == "ld_padded")
                                * params["pad"]}) for arm in ("ld_pow2", "ld_padded")]
        return pts

    def estimate_seconds(self, params, machine):
        return 2 + len(self.plan(params, machine)) * (params["samples"] * 3
                                                      * params["min_sample_ms"] / 1000 + 0.01)

    # -- one trial --
    def prepare(self, point, params, lab):
        p = point.params
        rng = np.random.default_rng([params["seed"], p.get("lines", 0), p.get("stride_bytes", 0)])
        if p["part"] == "matrix":
            n, ld = p["n"], p["ld"]
            m = lab.buffer(n * ld * 8)
            view = np.frombuffer(m.buffer, dtype=np.float64, count=n * ld, offset=m.offset)
            view[:] = np.arange(n * ld) % 7
            del view
            out = lab.buffer(8)
            return Trial("col_sum", src=m, dst=out, size=n * 8, aux=ld,
                         warmup=n, extra={"elements_per_column": n})
        if p["part"] == "ref":
            elem = LINE
            n = p["size_bytes"] // elem
        else:
            elem, n = p["stride_bytes"], p["lines"]
        region = lab.buffer(n * elem, hugepages=True)
        chain = lab.link_chain(region, elem, n, rng.permutation(n).astype(np.int32))
        extra = {}
        share = lab.huge_page_share(region)
        if share is not None:
            extra["huge_page_share"] = round(share, 3)
        return Trial("chase_ptr", src=chain, resume=True, warmup=max(4 * n, 64), extra=extra)

    def verify(self, lab, params):
        """col_sum returns the exact total of every element of the columns it
        summed (small integers, so any order sums exactly) for several leading
        dimensions and column counts."""
        for n, ld, count in ((3, 3, 3), (5, 8, 7), (16, 24, 40), (64, 64, 64)):
            # an n x n matrix in rows of ld elements
            m = lab.buffer(n * ld * 8)
            view = np.frombuffer(m.buffer, dtype=np.float64, count=n * ld, offset=m.offset)
            view[:] = np.arange(n * ld) % 7
            cols = [k % n for k in range(count)]
            want = float(sum(view.reshape(n, ld)[:, c].sum() for c in cols))
            del view
            out = lab.buffer(8)
            stop = lab.call(Trial("col_sum", src=m, dst=out, size=n * 8, aux=ld), count)
            got = np.frombuffer(out.buffer, dtype=np.float64, count=1, offset=out.offset)[0]
            if got != want or stop != count % n:
                raise AssertionError(f"col_sum n={n} ld={ld}: {got} != {want}")
        lab.release()


