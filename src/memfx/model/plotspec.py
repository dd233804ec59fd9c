"""Plot declarations: what an experiment wants drawn, as data.

An experiment lists its plots (``plots = (PlotSpec(...), ...)``); the result
document carries them as plain data (``to_dict``, read back by
``specs_from_dicts``) and plots.py draws any spec of a known kind from it.  Experiments never
import matplotlib and plots.py knows no experiment: a new effect gets its
plots by declaring them.
"""
from __future__ import annotations

from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

KINDS = ("curve", "bars", "heatmap")


@dataclass(frozen=True)
class Mark:
    """Vertical lines (or shaded bands) at x values an answer gives, so a plot
    shows what the answers say without parsing their ids.

    question  the declared question id, or a prefix ending in "*"
              ("copy.*_crossover" style: prefix and suffix around one "*").
    at        the answer field holding the x; with ``details``, the field of
              each detail (a number, a list of numbers, or [low, high] pairs
              when ``band``).
    where     fields (of the detail, or of the answer) that must equal these
              values; ``facet`` names detail fields that must equal the
              panel's facet values of the same name.
    label     format string: {x} (the x formatted as a size), {label_first}
              and {label_head} (the detail label's first word / text before
              " ("), and any field of the detail or answer.
    skip      answer verdicts that draw nothing (not_measured by default).
    """

    question: str
    at: str = "value"
    details: bool = False
    where: Mapping[str, object] = field(default_factory=dict)
    facet: Tuple[str, ...] = ()
    only: Mapping[str, object] = field(default_factory=dict)   # panels with these facet values
    label: str = ""
    style: str = "-"
    colour: str = "red"
    band: bool = False
    alpha: float = 0.12         # of a band (overlapping bands darken)
    label_y: float = 0.02
    legend: str = ""            # a band's legend entry (drawn once, when a band is)
    skip: Tuple[str, ...] = ("not_measured",)

    def to_dict(self) -> Dict[str, Any]:
        return _declared_fields(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Mark:
        return _from_fields(cls, data)

    def asks(self, question_id: object) -> bool:
        q = str(question_id or "")
        if "*" not in self.question:
            return q == self.question
        head, tail = self.question.split("*", 1)
        return q.startswith(head) and q.endswith(tail)

    def items(self, doc: Mapping[str, Any], facet_values: Optional[Mapping[str, Any]] = None
              ) -> List[Tuple[Any, str]]:
        """[(x or (low, high), label)] this mark draws on a panel of ``doc``
        with these facet values (None: on any panel)."""
        out: List[Tuple[Any, str]] = []
        if facet_values is not None and any(facet_values.get(k, v) != v
                                            for k, v in self.only.items()):
            return out
        for a in doc.get("answers") or []:
            if not self.asks(a.get("question")) or a.get("verdict") in self.skip:
                continue
            for d in (a.get("details") or []) if self.details else [a]:
                if any(d.get(k) != v for k, v in self.where.items()):
                    continue
                if facet_values is not None and any(d.get(k) != facet_values.get(k)
                                                    for k in self.facet):
                    continue
                for x in self._values(d):
                    out.append((x, self._text(x, d, a)))
        return out

    def _values(self, d: Mapping[str, Any]) -> List[Any]:
        """The x values of one answer or detail: ``at``, or ``list[].key``
        (the key of every item of a list field)."""
        if "[]." in self.at:
            name, key = self.at.split("[].", 1)
            raw = [item.get(key) for item in d.get(name) or [] if isinstance(item, dict)]
        else:
            at = d.get(self.at)
            raw = list(at) if isinstance(at, (list, tuple)) else [at]
        out: List[Any] = []
        for v in raw:
            if isinstance(v, (list, tuple)) and len(v) == 2:
                out.append((v[0], v[1]))
            elif isinstance(v, (int, float)) and not isinstance(v, bool) and (v or self.band):
                out.append(v)
        return out

    def _text(self, x: Any, detail: Mapping[str, Any], answer: Mapping[str, Any]) -> str:
        if not self.label:
            return ""
        from .units import format_size
        text = str(detail.get("label") or "")
        fields = {**answer, **detail, "x": format_size(x) if isinstance(x, (int, float)) else x,
                  "label_first": text.split(" ")[0], "label_head": text.split(" (")[0]}
        return self.label.format_map(_Missing(fields))


class _Missing(Dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "?"


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
    # one panel per distinct value of these point parameters; the panel's
    # title is ``facet_title`` formatted with them (and {title})
    facets: Tuple[str, ...] = ()
    facet_title: str = ""
    facet_order: Tuple[Tuple[str, Tuple[object, ...]], ...] = ()   # (param, values in order)
    x_max: Optional[float] = None     # only points with x <= x_max (a zoom), linear x
    x_wrap: int = 0             # x >= x_wrap / 2 is drawn as x - x_wrap (a signed offset)
    linthresh: float = 1.0      # symlog x (log_x without size_x): linear within +-linthresh
    linscale: float = 1.0
    xlim: Optional[Tuple[float, float]] = None
    xticks: Tuple[float, ...] = ()
    ylim_percentile: float = 0.0      # > 0: y from 0 to 1.5x this percentile of the medians
    # a series whose label ends with ``dashed`` is drawn dashed and faint,
    # labelled with ``dashed`` replaced by ``dashed_label``
    dashed: str = ""
    dashed_label: str = ""
    colour_by: str = ""         # a dashed series takes the colour of the one it controls
    value: str = "median"       # heatmap colour: "median", or "cycles_est" when every point has it
    clip_percentile: float = 100.0    # heatmap colour scale ends at this percentile
    marks: Tuple[Mark, ...] = ()
    # series parameters that take one value on a panel are left out of the
    # labels (a quick latency run adds huge-page points only around knees)
    hide_constant: bool = False
    # y = this point parameter / the measured value: a time per call over a
    # size in bytes becomes bytes per ns, i.e. GB/s (strategies compared as
    # throughput, where their crossovers show)
    rate_of: str = ""
    # heatmap: the label of its y axis (``ylabel`` names the colour scale)
    y_axis_label: str = ""
    # heatmap of pairs: each cell also drawn at (y, x), and the map drawn
    # square with cells of a fixed size (it grows with the number of CPUs)
    symmetric: bool = False

    def to_dict(self) -> Dict[str, Any]:
        """The spec as JSON-ready data: the fields that differ from their
        defaults (tuples as lists, marks as dicts)."""
        return _declared_fields(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlotSpec:
        """The spec ``to_dict`` gave (fields this memfx does not know are
        left out: a document of a newer memfx)."""
        marks = tuple(Mark.from_dict(m) for m in data.get("marks") or ())
        return _from_fields(cls, {k: v for k, v in data.items() if k != "marks"}, marks=marks)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"plot {self.name}: kind must be one of {', '.join(KINDS)}")
        if self.kind == "heatmap" and not self.y_param:
            raise ValueError(f"plot {self.name}: a heatmap needs y_param")

    def points(self, doc: Mapping[str, Any]) -> List[Dict[str, Any]]:
        """The document's points this panel draws (with a median)."""
        out: List[Dict[str, Any]] = []
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
                if self.x_max is not None and not self.value_of(p, self.x) <= self.x_max:
                    continue
                out.append(p)
        return out

    def panels(self, doc: Mapping[str, Any]) -> List[Tuple[Dict[str, Any], List[Dict[str, Any]]]]:
        """[(facet values, points)], one per distinct value of ``facets`` in
        the order the facet values sort (one panel without facets)."""
        pts = self.points(doc)
        if not self.facets:
            return [({}, pts)]
        groups: Dict[Tuple[Any, ...], List[Dict[str, Any]]] = {}
        for p in pts:
            key = tuple(self.value_of(p, k) for k in self.facets)
            groups.setdefault(key, []).append(p)
        if not groups:
            return [({}, [])]
        return [(dict(zip(self.facets, key)), groups[key]) for key in sorted(groups, key=self._facet_key)]

    def _facet_key(self, values: Sequence[Any]) -> Tuple[Any, ...]:
        """Facet values in ``facet_order`` first (as listed), then numbers, then text."""
        out = []
        for name, v in zip(self.facets, values):
            order = tuple(dict(self.facet_order).get(name, ()))
            out.append((order.index(v) if v in order else len(order),
                        0 if isinstance(v, (int, float)) else 1,
                        v if isinstance(v, (int, float)) else 0, str(v)))
        return tuple(out)

    def panel_title(self, facet_values: Optional[Mapping[str, Any]]) -> str:
        if not facet_values or not self.facet_title:
            return self.title
        return self.facet_title.format_map(_Missing({**facet_values, "title": self.title}))

    def panel_xlabel(self, facet_values: Optional[Mapping[str, Any]]) -> str:
        """xlabel, formatted with the panel's facet values ("{op} size (bytes)")."""
        if not self.xlabel:
            return self.x
        return self.xlabel.format_map(_Missing(dict(facet_values or {})))

    def y_of(self, point: Mapping[str, Any], value: Optional[float] = None) -> Optional[float]:
        """The y a point (or one of its samples, ``value``) is drawn at:
        the median, or the rate (``rate_of`` / value) when declared."""
        v: Optional[float] = point.get("median") if value is None else value
        if not self.rate_of or v is None:
            return v
        amount = (point.get("params") or {}).get(self.rate_of)
        if not isinstance(amount, (int, float)) or not v or v <= 0:
            return float("nan")
        return amount / v

    def x_of(self, point: Mapping[str, Any]) -> Any:
        """The x a point is drawn at (wrapped to a signed offset with x_wrap)."""
        x = self.value_of(point, self.x)
        if self.x_wrap and isinstance(x, (int, float)) and x >= self.x_wrap / 2:
            return x - self.x_wrap
        return x

    @staticmethod
    def value_of(point: Mapping[str, Any], key: str) -> Any:
        return point.get("arm") if key == "arm" else (point.get("params") or {}).get(key)

    def label(self, point: Mapping[str, Any], keys: Optional[Sequence[str]] = None) -> str:
        return " ".join(str(self.value_of(point, k)) for k in (keys or self.series))

    def series_keys(self, points: Sequence[Mapping[str, Any]]) -> Tuple[str, ...]:
        """The series parameters a panel's labels use (see hide_constant)."""
        if not self.hide_constant:
            return self.series
        keys = tuple(k for k in self.series if len({self.value_of(p, k) for p in points}) > 1)
        return keys or self.series[:1]


def best_ranges(doc: Mapping[str, Any], spec: PlotSpec,
                facet_values: Optional[Mapping[str, Any]] = None) -> List[Dict[str, Any]]:
    """The answer's best series per x range on a panel of ``spec``, as
    [{"series", "low", "high"}].

    The rule, read from the document: an answer detail of kind "ranges"
    lists the best arm per range of sizes ({"strategy", "min_size",
    "max_size"}, as copy.best_strategy gives them); it belongs to the panels
    whose facet values equal its fields of the same names (op, mode).  Only
    a curve panel whose series are the arms draws it: its labels are the
    strategies the ranges name."""
    if spec.kind != "curve" or tuple(spec.series) != ("arm",):
        return []
    facets = dict(facet_values or {})
    out: List[Dict[str, Any]] = []
    for a in doc.get("answers") or []:
        for d in a.get("details") or []:
            if not isinstance(d, Mapping) or d.get("kind") != "ranges":
                continue
            if any(k in d and d.get(k) != v for k, v in facets.items()):
                continue
            for r in d.get("ranges") or []:
                low, high = (r.get("min_size"), r.get("max_size")) if isinstance(r, Mapping) \
                    else (None, None)
                if (isinstance(low, (int, float)) and isinstance(high, (int, float))
                        and r.get("strategy")):
                    out.append({"series": str(r["strategy"]), "low": low, "high": high})
    return out


def specs_from_dicts(items: Optional[Iterable[Mapping[str, Any]]]) -> Tuple[PlotSpec, ...]:
    """The PlotSpecs of a document's ``plots``; an entry this memfx cannot
    read (another kind, a field of another type) is left out."""
    out: List[PlotSpec] = []
    for item in items or ():
        try:
            out.append(PlotSpec.from_dict(item))
        except (TypeError, ValueError, AttributeError):
            continue
    return tuple(out)


def _default(f: Field[Any]) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default


def _plain(value: Any) -> Any:
    if isinstance(value, Mark):
        return value.to_dict()
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _tuples(value: Any) -> Any:
    # JSON has no tuples: every list read back was declared as a tuple
    # (a tuple in ``select`` means "any of these values")
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


def _declared_fields(spec: Union[Mark, PlotSpec]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for f in fields(spec):
        value = getattr(spec, f.name)
        if _default(f) is MISSING or value != _default(f):
            out[f.name] = _plain(value)
    return out


_Spec = TypeVar("_Spec", Mark, PlotSpec)


def _from_fields(cls: type[_Spec], data: Mapping[str, Any], **given: Any) -> _Spec:
    known = {f.name for f in fields(cls)}
    return cls(**{k: _tuples(v) for k, v in data.items() if k in known and k not in given}, **given)
