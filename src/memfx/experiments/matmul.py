"""Drepper's matrix multiplication table, on the machine at hand.

Seed 004 (Drepper, "What every programmer should know about memory", 6.2.1,
table 6.2 "Matrix Multiplication Timing", N = 1000 doubles on a Core 2):

    naive                    100 %
    mul2 transposed first    23.4 %
    blocked, SM = line / 8   17.3 %
    blocked + SSE2           9.47 %

The same four forms (kernels mm_* in layout.c), timed 8 rows of the product
per iteration (a sample stays short on a busy machine), arms interleaved, every result checked equal to numpy's product of
the same integer-valued matrices (exact in doubles, whatever the order).
N: "auto" = the largest multiple of 8 whose one matrix fits the L2 that
sysfs reports (so the three spill it), and 1000 (Drepper's) in the full
preset.
"""
from __future__ import annotations

import math

import numpy as np

from .. import answers as ans
from ..answers import Question
from ..errors import ParamError
from ..plotspec import PlotSpec
from .base import Experiment, Param, Point, Trial, register

FORMS = ("naive", "transposed", "blocked", "blocked_simd")
SM = 8                     # doubles per 64-byte line: Drepper's tile edge
# Drepper's table 6.2, relative to naive.
DREPPER = {"naive": 1.0, "transposed": 0.234, "blocked": 0.173, "blocked_simd": 0.0947}


def auto_n(machine):
    l2 = next((c["size_bytes"] for c in machine.get("caches", []) or []
               if c.get("level") == 2 and c.get("size_bytes")), 1 << 20)
    return max(SM, int(math.isqrt(l2 // 8)) // SM * SM)


def matrices(n, seed):
    """mul1 and mul2 as one (2, n, n) array of small integers in doubles."""
    rng = np.random.default_rng([seed, n])
    return rng.integers(-3, 4, size=(2, n, n)).astype(np.float64)


@register
class Matmul(Experiment):
    name = "matmul"
    order = 76
    title = "Matrix multiplication: naive, transposed, blocked, blocked + SIMD"
    question = ("How much faster than the naive loop are a transposed, a cache-blocked and a "
                "blocked SIMD matrix multiplication here (Drepper's table 6.2)?")
    seeds = ("004",)
    arms = FORMS
    params = [
        Param("n", "list:str", ["auto", "1000"], "matrix sizes (multiples of 8, or auto = "
              "one matrix the size of the L2)", "auto,512"),
    ]
    presets = {
        "quick": {"samples": 5, "min_sample_ms": 0.5, "n": "auto"},
        "full": {"samples": 9},
    }
    questions = (
        Question("matmul.transposed", "What share of the naive loop's time does the "
                 "transposed form take?", "ratio", "004",
                 "ratio of medians transposed / naive at the largest N measured (Drepper: "
                 "0.234)", headline=True),
        Question("matmul.blocked", "What share does the blocked form (SM = line / 8) take?",
                 "ratio", "004", "ratio of medians blocked / naive (Drepper: 0.173)"),
        Question("matmul.blocked_simd", "What share does the blocked SSE2 form take?",
                 "ratio", "004", "ratio of medians blocked_simd / naive (Drepper: 0.0947)"),
    )
    plots = (
        PlotSpec("times", "time per 8 rows of the product, by form", kind="bars", x="arm",
                 series=("n",), log_y=True, xlabel="form", ylabel="ns per 8 rows"),
    )

    def sizes(self, params, machine):
        out = []
        for v in params["n"]:
            if str(v).strip().lower() == "auto":
                out.append(auto_n(machine))
                continue
            try:
                n = int(v)
            except ValueError:
                raise ParamError(f"n: expected auto or an integer, got {v!r}") from None
            if n < SM or n % SM or n > 4096:
                raise ParamError(f"n: {n} must be a multiple of {SM} from {SM} to 4096")
            out.append(n)
        return sorted(set(out))

    def plan(self, params, machine):
        return [Point(form, {"n": n}) for n in self.sizes(params, machine) for form in FORMS]

    def estimate_seconds(self, params, machine):
        # warm-up: one product per form, the naive at ~1.2 ns per multiply-add
        warm = sum(n ** 3 for n in self.sizes(params, machine)) * 1.2e-9 * 2.5
        return 1 + warm + len(self.plan(params, machine)) * params["samples"] * 3 \
            * params["min_sample_ms"] / 1000

    def prepare(self, point, params, lab):
        n = point.params["n"]
        src = lab.buffer(2 * n * n * 8)
        view = np.frombuffer(src.buffer, dtype=np.float64, count=2 * n * n, offset=src.offset)
        view[:] = matrices(n, params["seed"]).ravel()
        del view
        dst = lab.buffer(2 * n * n * 8 + 8)     # res, mul2 transposed, the row cursor
        # one iteration = the next 8 rows of the product, so a sample lasts
        # min_sample_ms at any n; warm-up: one whole product
        return Trial(f"mm_{point.arm}", src=src, dst=dst, size=n, warmup=n // SM,
                     extra={"n": n})

    def verify(self, lab, params):
        """Every form computes numpy's product exactly (integer-valued doubles)."""
        for n in (8, 16, 40):
            m = matrices(n, params["seed"])
            want = m[0] @ m[1]
            for form in FORMS:
                src = lab.buffer(2 * n * n * 8)
                np.frombuffer(src.buffer, dtype=np.float64, count=2 * n * n,
                              offset=src.offset)[:] = m.ravel()
                dst = lab.buffer(2 * n * n * 8 + 8)
                lab.call(Trial(f"mm_{form}", src=src, dst=dst, size=n), n // SM)
                got = np.frombuffer(dst.buffer, dtype=np.float64, count=n * n,
                                    offset=dst.offset).reshape(n, n)
                if not np.array_equal(got, want):
                    raise AssertionError(f"mm_{form} n={n}: the product differs from numpy's")
                del got
        lab.release()

    def analyze(self, data):
        pts = [p for p in data.points if p["n"] and p["median"]]
        out = []
        sizes = sorted({p["params"]["n"] for p in pts})
        by = {(p["arm"], p["params"]["n"]): p for p in pts}
        table = [{"label": f"{form} n={n}", "form": form, "n": n,
                  "value": by[(form, n)]["median"] / by[("naive", n)]["median"],
                  "unit": "ratio", "ci_low": None, "ci_high": None,
                  "ns_per_8_rows": by[(form, n)]["median"], "drepper": DREPPER[form]}
                 for n in sizes for form in FORMS if (form, n) in by and ("naive", n) in by]
        for form in FORMS[1:]:
            q = self.declared(form)
            both = [n for n in sizes if (form, n) in by and ("naive", n) in by]
            if not both:
                out.append(ans.not_measured(q, f"needs the naive and {form} forms at one N"))
                continue
            n = both[-1]
            a, b = by[(form, n)], by[("naive", n)]
            e = ans.effect(q, a["values"], b["values"], "",
                           evidence=[ans.point_key(a), ans.point_key(b)])
            e.details = table
            rest = "; ".join(f"{d['value']:.1%} at N={d['n']}" for d in table
                             if d["form"] == form and d["n"] != n)
            e.because = (f"{form.replace('_', ' + ')} takes {e.value:.1%} of the naive loop's "
                         f"time at N={n} ({a['median'] / 1e6:.2f} vs {b['median'] / 1e6:.2f} ms per 8 rows;"
                         f" Drepper's Core 2: {DREPPER[form]:.1%})" + (f"; {rest}" if rest else ""))
            out.append(e)
        return out
