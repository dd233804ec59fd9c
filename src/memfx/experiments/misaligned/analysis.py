"""Misaligned's analysis: the cost of a line split and of a page split per
mode (load, store, latency) against the aligned access, as methods of
MisalignedAnswers, which Misaligned inherits (a mixin: `self` is the
registered experiment), and `splits`, which says what an access crosses.
The protocol (__init__.py) re-exports every name."""
from __future__ import annotations

import numpy as np

from ...model import answers as ans
from ...model.details import detail

LINE = 64


# The width whose penalty is an answer's value (a long / a pointer); every
# width is in its details.
MAIN_WIDTH = 8


def splits(width, offset):
    """Whether an access of `width` bytes at `offset` in a line crosses it."""
    return offset + width > LINE


class MisalignedAnswers:
    """The answers of the Misaligned experiment (a mixin: `self` is the
    registered experiment, whose declared questions they answer)."""

    # -- analysis --
    def analyze(self, data):
        pts = [p for p in data.points if p["n"] and p["median"]]
        table = [detail(f"{p['arm']} {p['params']['width']}B {p['params']['position']} "
                        f"+{p['params']['offset']}",
                        mode=p["arm"], width=p["params"]["width"],
                        position=p["params"]["position"], offset=p["params"]["offset"],
                        value=p["median"], unit="ns", ci_low=p["ci_low"],
                        ci_high=p["ci_high"], cycles_est=p.get("cycles_est"),
                        point=ans.point_key(p)) for p in pts]
        cases = {
            "line_split_load": ("load", "line", "split"),
            "page_split_load": ("load", "page", "split"),
            "line_split_store": ("store", "line", "split"),
            "page_split_store": ("store", "page", "split"),
            "line_split_latency": ("latency", "line", "split"),
            "page_split_latency": ("latency", "page", "split"),
            "unaligned_in_line": ("load", "line", "inside"),
        }
        return [self._case(self.declared(name), pts, table, *case)
                for name, case in cases.items()]

    def _case(self, q, pts, table, mode, position, kind):
        def chosen(p, w):
            pr = p["params"]
            if p["arm"] != mode or pr["width"] != w or pr["position"] != position:
                return False
            o = pr["offset"]
            if kind == "split":
                return splits(w, o)
            return o % w != 0 and not splits(w, o)
        details, main = [], None
        for w in sorted({p["params"]["width"] for p in pts}):
            # the reference: every aligned offset measured (0, w, 2w, ... inside the line)
            aligned = [p for p in pts if p["arm"] == mode and p["params"]["width"] == w
                       and p["params"]["position"] == "line" and p["params"]["offset"] % w == 0
                       and not splits(w, p["params"]["offset"])]
            case = [p for p in pts if chosen(p, w)]
            if not aligned or not case:
                continue
            e = ans.effect(q, ans.pooled_values(case), ans.pooled_values(aligned), "",
                           evidence=ans.evidence_keys(aligned) + ans.evidence_keys(case))
            aligned_ns = float(np.median([p["median"] for p in aligned]))
            extra_ns = float(np.median([p["median"] for p in case])) - aligned_ns
            details.append(detail(f"{w} bytes", width=w, value=e.value, unit="ratio",
                                  ci_low=e.ci_low, ci_high=e.ci_high, verdict=e.verdict,
                                  aligned_ns=aligned_ns, extra_ns=extra_ns,
                                  offsets=sorted(p["params"]["offset"] for p in case)))
            if main is None or w == MAIN_WIDTH:
                main = (w, e, aligned, extra_ns)
        what = {"split": f"splitting a {'page' if position == 'page' else 'line'}",
                "inside": "misaligned inside the line"}[kind]
        if main is None:
            return ans.not_measured(q, f"needs {mode} at an aligned offset and at an offset "
                                       f"{what} for one width")
        w, e, aligned, extra = main
        e.details = details + [d for d in table if d["mode"] == mode]
        others = ", ".join(f"{d['width']} B {d['value']:.2f}x" for d in details if d["width"] != w)
        if e.verdict == "detected":
            size = f"costs {e.value:.2f}x an aligned one ({extra:+.2f} ns)"
        elif e.verdict == "not_detected":
            size = f"costs no more than an aligned one ({e.value:.2f}x)"
        else:
            size = f"costs {e.value:.2f}x an aligned one"    # inconclusive: results.py adds why
        noun = {"load": "load", "store": "store", "latency": "dependent load"}[mode]
        article = "an" if str(w)[0] == "8" else "a"
        e.because = (f"{article} {w}-byte {noun} {what} {size}"
                     + (f"; other widths: {others}" if others else ""))
        return e
