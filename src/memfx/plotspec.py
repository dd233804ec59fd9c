"""Plot declarations: what an experiment wants drawn, as data.

An experiment lists its plots (``plots = (PlotSpec(...), ...)``); plots.py
draws any spec of a known kind from a result document.  Experiments never
import matplotlib and plots.py knows no experiment: a new effect gets its
plots by declaring them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Tuple

KINDS = ("curve", "bars", "heatmap")


@dataclass(frozen=True)
class PlotSpec:
    """One panel.

    kind    curve: one line per series through the point medians over ``x``,
            every sample drawn; bars: one group per ``x`` value, one bar per
            series, median with its CI; heatmap: ``x`` by ``y_param``, colour
            = median.
    select  only points whose params contain these key=value pairs (a tuple
            value means any of them); ``arms`` restricts the arms.
    x       a point parameter, or "arm".
    series  point parameters (or "arm") whose values label a line / bar.
    """

    name: str
    title: str
    kind: str = "curve"
    x: str = "size_bytes"
    series: Tuple[str, ...] = ("arm",)
    select: Mapping[str, object] = field(default_factory=dict)
    arms: Tuple[str, ...] = ()
    y_param: str = ""
    ylabel: str = ""
    xlabel: str = ""
    log_x: bool = False
    log_y: bool = False
    size_x: bool = False        # x is a size in bytes: binary ticks and cache bands

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"plot {self.name}: kind must be one of {', '.join(KINDS)}")
        if self.kind == "heatmap" and not self.y_param:
            raise ValueError(f"plot {self.name}: a heatmap needs y_param")

    def points(self, doc):
        """The document's points this panel draws (with a median)."""
        out = []
        for p in doc.get("points") or []:
            if p.get("median") is None:
                continue
            if self.arms and p.get("arm") not in self.arms:
                continue
            params = p.get("params") or {}
            ok = True
            for k, v in self.select.items():
                want = v if isinstance(v, tuple) else (v,)
                if params.get(k) not in want:
                    ok = False
                    break
            if ok and (self.x == "arm" or self.x in params):
                out.append(p)
        return out

    @staticmethod
    def value_of(point, key):
        return point.get("arm") if key == "arm" else (point.get("params") or {}).get(key)

    def label(self, point):
        return " ".join(str(self.value_of(point, k)) for k in self.series)
