"""Matmul's analysis: the four forms' times against Drepper's table and
the initialisation arms (row vs column, with and without non-temporal
stores), as methods of MatmulAnswers, which Matmul inherits (a mixin: `self`
is the registered experiment), with the forms, tiles and bands they read.
The protocol (__init__.py) re-exports every name."""
from __future__ import annotations

from ...model import answers as ans
from ...model import stats
from ...model.details import detail
from ...model.findings import threshold

FORMS = ("naive", "transposed", "blocked", "blocked_simd")


SM = 8                     # doubles per 64-byte line: Drepper's tile edge


# Warm-up and re-warm (the settle's pass) of a form: n / 8 tiles, a band of 8
# rows for the blocked forms and 8 rows for the row-order ones, in each of
# which every form reads all of mul2 (its column walks or its tiles) and its
# own rows of mul1 and res: they leave the caches as a whole product does.
# A whole product per visit was ten times the samples' time in settling
# (docs/machine-notes.md, "Matmul").
TILE = SM * SM             # results of res per iteration (MM_TILE in layout.c)


def tiles(n):
    """Iterations in one whole product."""
    return n * n // TILE


# Drepper's table 6.2, relative to naive.
DREPPER = {"naive": 1.0, "transposed": 0.234, "blocked": 0.173, "blocked_simd": 0.0947}


# Drepper's table 6.1 (seed 004, "Timing Matrix Initialization"), seconds.
INIT_ARMS = ("init_row", "init_column", "init_row_nt", "init_column_nt")


DREPPER_INIT_S = {"init_row": 0.048, "init_column": 0.127, "init_row_nt": 0.048,
                  "init_column_nt": 0.160}


INIT_BAND = 16                   # rows or columns per iteration: a 64-byte line of int32


def init_bands(n):
    return -(-n // INIT_BAND)


def product_ms(point):
    """Milliseconds per whole product from a point's median per iteration:
    a tile, or 8 rows in documents before tiles (metric ns_per_row_block)."""
    n = point["params"]["n"]
    per = n // SM if point.get("metric") == "ns_per_row_block" else tiles(n)
    return point["median"] * per / 1e6


class MatmulAnswers:
    """The answers of the Matmul experiment (a mixin: `self` is the
    registered experiment, whose declared questions they answer)."""

    def analyze(self, data):
        return self._multiply(data) + self._init(data)

    def _init(self, data):
        """The 2 x 2 table at the largest init_n measured, relative to the
        normal row-order init, beside Drepper's."""
        pts = [p for p in data.points if p["arm"] in INIT_ARMS and p["n"] and p["median"]]
        by = {(p["arm"], p["params"]["init_n"]): p for p in pts}
        sizes = sorted({p["params"]["init_n"] for p in pts})
        base = "init_row"
        table = []
        for n in sizes:
            if (base, n) not in by:
                continue
            for arm in INIT_ARMS:
                if (arm, n) not in by:
                    continue
                r = stats.ratio_of_medians(by[(arm, n)]["values"], by[(base, n)]["values"],
                                           confidence=threshold("ci_level"))
                table.append(detail(f"{arm} n={n}", arm=arm, init_n=n,
                                    value=r["ratio"], unit="ratio vs init_row",
                                    ci_low=r["ci_low"], ci_high=r["ci_high"],
                                    ms_per_matrix=by[(arm, n)]["median"] * init_bands(n) / 1e6,
                                    drepper_s=DREPPER_INIT_S[arm],
                                    drepper_ratio=DREPPER_INIT_S[arm] / DREPPER_INIT_S[base],
                                    point=ans.point_key(by[(arm, n)])))
        out = []
        for name, slow, fast in (("init_column_vs_row", "init_column", "init_row"),
                                 ("init_nt_vs_normal", "init_row_nt", "init_row"),
                                 ("init_nt_column", "init_column_nt", "init_column")):
            q = self.declared(name)
            both = [n for n in sizes if (slow, n) in by and (fast, n) in by]
            if not both:
                out.append(ans.not_measured(q, f"needs {slow} and {fast} at one init_n (the "
                                               f"initialisation arms run where init_n is set)"))
                continue
            n = both[-1]
            a, b = by[(slow, n)], by[(fast, n)]
            e = ans.effect(q, a["values"], b["values"], "",
                           evidence=[ans.point_key(a), ans.point_key(b)])
            e.details = table
            drepper = DREPPER_INIT_S[slow] / DREPPER_INIT_S[fast]
            rest = "; ".join(f"{by[(slow, m)]['median'] / by[(fast, m)]['median']:.2f}x at "
                             f"n={m}" for m in both[:-1])
            per = init_bands(n) / 1e6
            e.because = (f"{slow} takes {e.value:.2f}x the time of {fast} for a {n} x {n} int32 "
                         f"matrix ({a['median'] * per:.2f} vs {b['median'] * per:.2f} ms; "
                         f"Drepper's Core 2: {DREPPER_INIT_S[slow]:.3f} vs "
                         f"{DREPPER_INIT_S[fast]:.3f} s = {drepper:.2f}x)"
                         + (f"; {rest}" if rest else ""))
            out.append(e)
        return out

    def _multiply(self, data):
        pts = [p for p in data.points if p["arm"] in FORMS and p["n"] and p["median"]]
        out = []
        sizes = sorted({p["params"]["n"] for p in pts})
        by = {(p["arm"], p["params"]["n"]): p for p in pts}
        table = [detail(f"{form} n={n}", form=form, n=n,
                        value=by[(form, n)]["median"] / by[("naive", n)]["median"],
                        unit="ratio", ci=None,
                        ms_per_product=product_ms(by[(form, n)]), drepper=DREPPER[form])
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
                         f"time at N={n} ({product_ms(a):.0f} vs {product_ms(b):.0f} ms per product;"
                         f" Drepper's Core 2: {DREPPER[form]:.1%})" + (f"; {rest}" if rest else ""))
            out.append(e)
        return out
