"""Plots from result documents (every sample visible, median line, cache sizes
from sysfs as bands).  Reads documents only; never measures."""
from __future__ import annotations

from dataclasses import replace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: F401 -- callers close figures through it
import numpy as np

from ..model.machine_view import Fingerprint
from ..model.plotspec import PlotSpec, best_ranges, specs_from_dicts
from ..model.units import format_size

CACHE_COLOURS = ["#e8f4e8", "#e8eef8", "#f8f0e0", "#f4e4f4"]
# Series colours: every series of a spec takes its own (a reused colour made
# two strategies read as one), and its own line style, so that they stay
# apart where colours are hard to tell (print, colour blindness).
SERIES_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939",
                  "#ad494a", "#7b4173", "#3182bd", "#e6550d"]
SERIES_STYLES = ["-", (0, (5, 1.5)), (0, (1.5, 1.2)), (0, (6, 1.5, 1.5, 1.5)),
                 (0, (3, 1.2, 1, 1.2, 1, 1.2)), (0, (9, 2.5)), (0, (2.5, 2.5)),
                 (0, (9, 1.5, 1.5, 1.5, 1.5, 1.5)), (0, (4, 1, 4, 3)), (0, (1, 3)),
                 (0, (12, 2, 3, 2)), (0, (2, 1, 2, 4))]
# Legend text in points: at the report's 80 dpi this is ten pixels, which
# reads without zooming (seven points made six-pixel glyphs).
LEGEND_POINTS = 9
# Consecutive points of a series are joined by a line only when they are at
# most this factor apart on a log axis (about two points per octave): a
# straight segment across octaves with nothing measured in between draws a
# shape no measurement showed.  Sparser points are drawn as markers only.
JOIN_RATIO = 1.5
# ... and on a linear axis at most this many times the series' smallest step.
JOIN_STEPS = 4
# The answer's envelope: the fastest series at each x, drawn under the
# series as a wide translucent band.
ENVELOPE_COLOUR = "#202020"
ENVELOPE_LABEL = "fastest (the answer)"


# A category or count axis with at most this many values measured is ticked
# at exactly those values.
MAX_MEASURED_TICKS = 12
# Height of one row of cache labels above a panel, in points.
CACHE_LABEL_ROW = 9.0
# Panel titles sit at this height (axes fraction) plus their pad.  Given
# explicitly, it spares matplotlib's search for ticks above the frame on
# every draw (none has any: x ticks are below, and tick labels are plain
# numbers without an offset text), a sixth of a report's drawing time.
TITLE_Y = 1.0
# A size axis ends this factor beyond the smallest and largest size measured.
EDGE = 1.25
# ... or just past a cache boundary up to this factor beyond the largest size.
NEAR = 4


def metric_words(metric, unit=""):
    """An axis label in words from a metric name: "ns_per_increment" ->
    "ns per increment", "gb_per_s" -> "GB/s"; the unit when there is no metric."""
    m = str(metric or "")
    if not m:
        return str(unit or "")
    if m == "gb_per_s":
        return "GB/s"
    head, _, tail = m.partition("_per_")
    if tail:
        head = "ns" if head == "ns" else head.replace("_", " ")
        return f"{head} per {tail.replace('_', ' ')}"
    words = m.replace("_", " ")
    return f"{words} ({unit})" if unit and unit not in words else words


def _plain(value, _pos=None):
    """A tick label as a plain number: 20, 0.5, 1000 -- never 2x10^1."""
    if value == 0 or not np.isfinite(value):
        return "0"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def spread_ticks(values, ratio=1.3):
    """Measured values as ticks, leaving out one within ``ratio`` of the tick
    before it on a log scale (56 and 64 B would print over each other)."""
    out = []
    for v in sorted(set(values)):
        if out and v > 0 and out[-1] > 0 and v / out[-1] < ratio:
            continue
        out.append(v)
    return out


def plain_log_ticks(axis, values=()):
    """A log axis ticked 1-2-5 per decade (1-only over many decades), its
    labels plain numbers; ticked at the values measured when they are few."""
    from matplotlib import ticker
    finite = [v for v in values if isinstance(v, (int, float)) and np.isfinite(v) and v > 0]
    distinct = sorted(set(finite))
    # Minor ticks only where the labelled ones are a decade apart, at 2 and 5
    # (matplotlib's 2..9 each cost a tick object: an eighth of a report's
    # drawing time, for marks the 1-2-5 labels and the grid already give).
    minor = ticker.NullLocator()
    if distinct and len(distinct) <= MAX_MEASURED_TICKS and all(float(v).is_integer() for v in distinct):
        axis.set_major_locator(ticker.FixedLocator(spread_ticks(distinct)))
    else:
        decades = (np.log10(max(finite)) - np.log10(min(finite))) if finite else 0
        axis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0,) if decades > 3
                                                 else (1.0, 2.0, 5.0)))
        if decades > 3:
            minor = ticker.LogLocator(base=10, subs=(2.0, 5.0))
    axis.set_minor_locator(minor)
    axis.set_major_formatter(ticker.FuncFormatter(_plain))
    axis.set_minor_formatter(ticker.NullFormatter())


def symlog_ticks(linthresh, reach):
    """Ticks of a symlog axis that do not collide: 0, half and all of the
    linear range, then every fourth multiple outwards, on both sides."""
    out = [linthresh / 2, linthresh]
    while out[-1] * 4 <= reach * 1.01:
        out.append(out[-1] * 4)
    return [-t for t in reversed(out)] + [0] + out


def size_axis(ax, sizes):
    """A log2 axis of sizes, ticked at the sizes measured (at most
    MAX_MEASURED_TICKS of them, else at powers of two in the measured range)."""
    from matplotlib import ticker
    ax.set_xscale("log", base=2)
    # a log axis shows positive sizes only (an imported run may hold a 0)
    sizes = sorted({s for s in sizes if isinstance(s, (int, float)) and np.isfinite(s) and s > 0})
    if not sizes:
        return
    if len(sizes) <= MAX_MEASURED_TICKS:
        ticks = sizes
    else:
        lo, hi = int(np.ceil(np.log2(sizes[0]))), int(np.floor(np.log2(sizes[-1])))
        step = max(1, int(np.ceil((hi - lo + 1) / MAX_MEASURED_TICKS)))
        ticks = [2 ** k for k in range(lo, hi + 1, step)]
    ax.xaxis.set_major_locator(ticker.FixedLocator(ticks))
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    ax.set_xticks(ticks)
    ax.set_xticklabels([format_size(t) for t in ticks], rotation=45, fontsize=8)


def cache_bands(ax, machine, lo, hi):
    """Shade each cache level's capacity range and label it with the sysfs
    size above the panel's frame, where no curve can cover it (entries
    without a size, as an old or damaged fingerprint may hold, are skipped).
    Returns the rows of labels drawn (0, 1 or 2: labels too close to their
    neighbour go one row up)."""
    from matplotlib import transforms
    caches = sorted(Fingerprint.of(machine).caches, key=lambda c: c.size_bytes)
    # the x axis ends at the data, or just past a cache boundary near it: a
    # cache far larger than the sweep would stretch it over an empty band
    # (its band is clipped and its label left out)
    near = [c.size_bytes for c in caches if c.size_bytes <= hi * NEAR]
    right = max([hi * EDGE] + [size * 1.1 for size in near])
    prev = lo
    rows, last = 0, {}
    left = np.log2(lo / EDGE) if lo > 0 else 0.0
    width = max(1e-9, np.log2(right) - left)
    # the panel's width in inches, roughly (before the layout settles it)
    panel_in = max(1.0, ax.get_position().width * ax.figure.get_figwidth())
    for i, c in enumerate(caches):
        label = f"{c.name} {format_size(c.size_bytes)} (sysfs)"
        ax.axvspan(prev, c.size_bytes, color=CACHE_COLOURS[i % len(CACHE_COLOURS)], zorder=0, lw=0)
        ax.axvline(c.size_bytes, color="grey", ls=":", lw=1, zorder=1)
        prev = c.size_bytes
        if c.size_bytes > right:
            continue
        # a label ends at its boundary; one that would start left of the
        # frame starts at the frame instead (it ran into the y axis' label)
        end = (np.log2(c.size_bytes) - left) / width
        text_w = len(label) * 7 * 0.58 / 72 / panel_in      # axes fraction
        near_left = end - text_w < 0
        start, end = (0.0, text_w) if near_left else (end - text_w, end)
        # a label that would meet the previous one on its row goes a row up
        row = 0 if start > last.get(0, -np.inf) + 0.01 else 1
        last[row] = end
        rows = max(rows, row + 1)
        base = transforms.blended_transform_factory(ax.transAxes, ax.transAxes) if near_left \
            else ax.get_xaxis_transform()
        place = transforms.offset_copy(base, fig=ax.figure, x=0,
                                       y=2 + row * CACHE_LABEL_ROW, units="points")
        text = ax.text(0.0 if near_left else c.size_bytes, 1.0, label, transform=place,
                       ha="left" if near_left else "right", va="bottom",
                       fontsize=7, color="dimgrey", clip_on=False)
        text._memfx_cache_row = (base, row)
    if lo > 0:              # a log axis: a damaged document's sizes may reach 0
        ax.set_xlim(lo / EDGE, right)
    return rows


def samples_by_point(doc, samples):
    """Map (arm, point json) -> per-sample values (longest run length)."""
    import json
    out = {}
    for s in samples:
        if s.get("rejected"):
            continue
        out.setdefault((s["arm"], json.dumps(s["point"], sort_keys=True)), []).append(s)
    res = {}
    for k, ss in out.items():
        top = max(x["length"] for x in ss)
        res[k] = [x["value"] for x in ss if x["length"] == top]
    return res


def scatter_samples(ax, xs, points, y_of=None, **style):
    """Every sample of every point as one semi-transparent scatter (one
    collection per series: thousands of per-point collections made the
    report's plots take tens of seconds); ``y_of(point, value)`` maps a
    sample to its y (a rate) when given."""
    x_all, y_all = [], []
    for x, p in zip(xs, points):
        vals = p.get("values") or []
        x_all.extend([x] * len(vals))
        y_all.extend(vals if y_of is None else [y_of(p, v) for v in vals])
    if x_all:
        # arrays, not lists: matplotlib turns a list of floats into a masked
        # array element by element, a tenth of a second per 10,000 samples
        ax.scatter(np.asarray(x_all, dtype=float), np.asarray(y_all, dtype=float), lw=0,
                   **style)


def _title(doc):
    cpu = (doc.get("machine") or {}).get("cpu", {})
    return f"memfx {doc['experiment']} — {cpu.get('model_name', '?')} — run {doc['run_id']}"


def _declared_plots(doc):
    """The plots the document declares (older documents: see documents.plots_of)."""
    from ..analysis.documents import plots_of
    return specs_from_dicts(plots_of(doc))


def legend_outside(ax):
    """The legend to the right of the panel, outside the data."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, fontsize=LEGEND_POINTS, loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False,
                  handlelength=3.2, labelspacing=0.3)


class GappedLine:
    """Makes a Line2D whose segments are drawn only between points that
    ``joined`` joins, while its data stay the points themselves (readers of
    the figure see one value per point)."""

    @staticmethod
    def make(xs, ys, log, step=None, **style):
        from matplotlib.lines import Line2D

        class _Line(Line2D):
            def draw(self, renderer):
                gx, gy = joined(self._memfx_xy[0], self._memfx_xy[1], log, step)
                if len(gx) == len(self._memfx_xy[0]):
                    return super().draw(renderer)
                self.set_data(gx, gy)
                try:
                    return super().draw(renderer)
                finally:
                    self.set_data(*self._memfx_xy)
        line = _Line(xs, ys, **style)
        line._memfx_xy = (list(xs), list(ys))
        return line


def smallest_step(xs):
    """The smallest gap between distinct numeric x values (0 when none)."""
    distinct = sorted({float(x) for x in xs if isinstance(x, (int, float))})
    return min((b - a for a, b in zip(distinct, distinct[1:])), default=0.0)


def joined(xs, ys, log, step=None):
    """(xs, ys) of a series' line, with a break (NaN) between consecutive
    points too far apart to join (JOIN_RATIO on a log axis, JOIN_STEPS
    smallest steps on a linear one: ``step``, the panel's, else the
    series' own); unchanged when none is."""
    pairs = [(float(x), float(y)) for x, y in zip(xs, ys)
             if isinstance(x, (int, float)) and y is not None]
    if len(pairs) < 2:
        return [x for x, _ in pairs], [y for _, y in pairs]
    smallest = smallest_step([x for x, _ in pairs]) if step is None else step

    def far(a, b):
        if log:
            if a > 0 and b > 0:
                return b / a > JOIN_RATIO
            return a < 0 < b or b - a > smallest * JOIN_STEPS
        return smallest > 0 and b - a > smallest * JOIN_STEPS
    out_x, out_y = [pairs[0][0]], [pairs[0][1]]
    for (a, _), (b, yb) in zip(pairs, pairs[1:]):
        if far(a, b):
            out_x.append(float("nan"))
            out_y.append(float("nan"))
        out_x.append(b)
        out_y.append(yb)
    return out_x, out_y


def draw_envelope(doc, spec, ax, pts, facet_values=None, log=False):
    """The answer's best series per x range (plotspec.best_ranges), drawn as
    one wide translucent band under the series' own lines: the y of the
    series the answer names at each x it covers.  Returns whether any was drawn."""
    ranges = best_ranges(doc, spec, facet_values)
    if not ranges:
        return False
    keys = spec.series_keys(pts)
    env = []
    for p in pts:
        x, y = spec.x_of(p), spec.y_of(p)
        label = spec.label(p, keys)
        if y is None or not isinstance(x, (int, float)) or not np.isfinite(y):
            continue
        if any(r["series"] == label and r["low"] <= x <= r["high"] for r in ranges):
            env.append((x, y))
    if not env:
        return False
    env.sort()
    lx, ly = joined([x for x, _ in env], [y for _, y in env], log,
                    smallest_step(spec.x_of(p) for p in pts))
    sparse = len(lx) != len(env)
    # a collection, not a line: the series stay the panel's only lines, and
    # the caption (not the legend) says what the band is
    from matplotlib.collections import LineCollection
    segments, current = [], []
    for x, y in zip(lx, ly):
        if np.isnan(x):
            segments.append(current)
            current = []
        else:
            current.append((x, y))
    segments.append(current)
    ax.add_collection(LineCollection([seg for seg in segments if len(seg) > 1], linewidths=7,
                                     colors=ENVELOPE_COLOUR, alpha=0.22, zorder=1.5,
                                     capstyle="round", label="_" + ENVELOPE_LABEL),
                      autolim=False)
    if sparse:
        # discs where the band cannot join points (circles, not a scatter:
        # the panel's scatters are the samples)
        from matplotlib.collections import CircleCollection
        ax.add_collection(CircleCollection([90.0] * len(env), offsets=env,
                                           offset_transform=ax.transData, facecolors=ENVELOPE_COLOUR,
                                           edgecolors="none", alpha=0.22, zorder=1.5),
                          autolim=False)
    ax._memfx_envelope = env
    return True


def _curve(doc, spec, ax, pts, colours, facet_values=None):
    """A curve panel; returns the rows of cache labels drawn above it."""
    groups = {}
    keys = spec.series_keys(pts)
    for p in pts:
        groups.setdefault(spec.label(p, keys), []).append(p)
    # a series keeps its colour in every panel of the spec (the zoom of
    # a copy run lacks the NT arm, and must not shift the others' colours)
    base = sorted({spec.label(p, keys) for p in replace(spec, x_max=None).points(doc)}
                  | set(groups))
    base = [label for label in base if not (spec.dashed and label.endswith(spec.dashed))]
    log = (spec.size_x or spec.log_x) and spec.x_max is None
    # on a linear axis, density is judged on the panel's x values: a series
    # measured at two of them only is as sparse as the panel says
    step = smallest_step(spec.x_of(p) for p in pts)
    for i, (label, ps) in enumerate(sorted(groups.items())):
        ps.sort(key=lambda p: spec.x_of(p) if spec.x_wrap else spec.value_of(p, spec.x))
        xs = [spec.x_of(p) for p in ps]
        dashed = bool(spec.dashed) and label.endswith(spec.dashed)
        owner = label[:-len(spec.dashed)] if dashed else label
        k = base.index(owner) if owner in base else len(base) + i
        c = colours[k % len(colours)]
        alpha = 0.5 if dashed else 1.0
        scatter_samples(ax, xs, ps, spec.y_of if spec.rate_of else None,
                        s=6, alpha=0.25 * alpha, color=c)
        ys = [spec.y_of(p) for p in ps]
        sparse = len(joined(xs, ys, log, step)[0]) != len(xs)
        # markers carry a series where its points are too sparse to join
        ax.add_line(GappedLine.make(
            xs, ys, log, step, ls="--" if dashed else SERIES_STYLES[k % len(SERIES_STYLES)],
            marker="o", ms=4 if sparse else 2.5, lw=1.3, color=c, alpha=alpha,
            label=owner + spec.dashed_label if dashed else label))
    draw_envelope(doc, spec, ax, pts, facet_values, log)
    xs = [spec.x_of(p) for p in pts]
    rows = 0
    if spec.size_x and spec.x_max is None:
        size_axis(ax, xs)
        rows = cache_bands(ax, doc.get("machine") or {}, min(xs), max(xs))
    elif spec.log_x and spec.x_max is None:
        ax.set_xscale("symlog", linthresh=spec.linthresh, linscale=spec.linscale)
        from matplotlib import ticker
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(_plain))
        distinct = sorted(set(xs))
        if len(distinct) <= MAX_MEASURED_TICKS:
            ax.set_xticks(spread_ticks(distinct))
        else:
            ax.set_xticks(symlog_ticks(spec.linthresh, max(abs(x) for x in xs)))
    elif all(float(x).is_integer() for x in xs) and len(set(xs)) <= 16:
        # counts (threads, distances): tick the values measured, not 1.2, 1.4
        ax.set_xticks(sorted(set(xs)))
    if spec.ylim_percentile:
        ax.set_ylim(0, float(np.percentile([spec.y_of(p) for p in pts],
                                           spec.ylim_percentile)) * 1.5)
    return rows


def _bars(spec, ax, pts, colours):
    cats = list(dict.fromkeys(spec.value_of(p, spec.x) for p in pts))
    series = sorted({spec.label(p) for p in pts})
    width = 0.8 / max(1, len(series))
    for j, label in enumerate(series):
        xs, ys, lo, hi = [], [], [], []
        for i, cat in enumerate(cats):
            p = next((p for p in pts if spec.label(p) == label
                      and spec.value_of(p, spec.x) == cat), None)
            if p is None:
                continue
            xs.append(i + (j - (len(series) - 1) / 2) * width)
            ys.append(p["median"])
            lo.append(p["median"] - (p.get("ci_low") if p.get("ci_low") is not None else p["median"]))
            hi.append((p.get("ci_high") if p.get("ci_high") is not None else p["median"]) - p["median"])
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=label,
               color=colours[j % len(colours)])
    ax.set_xticks(range(len(cats)))
    sizes = spec.x == "size_bytes" and all(isinstance(c, int) for c in cats)
    ax.set_xticklabels([format_size(c) if sizes else str(c) for c in cats],
                       rotation=30 if len(cats) > 4 else 0, fontsize=8)


# Side of one heatmap cell of a symmetric (pairs) map, in inches.
PAIR_CELL_INCHES = 0.55


def _heatmap(spec, ax, pts):
    """A heatmap on ax (or, for a symmetric map of pairs, on a square inset
    whose side grows with the number of CPUs); returns the axes drawn on."""
    key = spec.value
    if key != "median" and not all(p.get(key) for p in pts):
        key = "median"
    cells = {(spec.value_of(p, spec.x), spec.value_of(p, spec.y_param)): p[key] for p in pts}
    if spec.symmetric:
        cells.update({(y, x): v for (x, y), v in list(cells.items()) if (y, x) not in cells})
        xs = ys = sorted({k for pair in cells for k in pair})
    else:
        xs = sorted({x for x, _ in cells})
        ys = sorted({y for _, y in cells})
    grid = np.full((len(ys), len(xs)), np.nan)
    for (x, y), v in cells.items():
        grid[ys.index(y), xs.index(x)] = v
    vals = list(cells.values())
    target = ax
    if spec.symmetric:
        fig = ax.figure
        box = ax.get_position()
        w_in, h_in = box.width * fig.get_figwidth(), box.height * fig.get_figheight()
        side = min(h_in, w_in * 0.7, 0.6 + PAIR_CELL_INCHES * len(xs))
        ax.set_axis_off()
        target = ax.inset_axes([0.0, 1.0 - side / h_in, side / w_in, side / h_in])
    # the colour scale may ignore the top of the range (clip_percentile):
    # one preempted sample must not wash out the map
    im = target.imshow(grid, aspect="auto", origin="lower", cmap="viridis",
                       vmin=min(vals), vmax=float(np.percentile(vals, spec.clip_percentile)),
                       interpolation="nearest")
    step = 1 if len(xs) <= 16 else 2 if len(xs) <= 32 else 8
    target.set_xticks(range(0, len(xs), step))
    target.set_xticklabels([str(xs[t]) for t in range(0, len(xs), step)], fontsize=7)
    target.set_yticks(range(len(ys)))
    target.set_yticklabels([str(y) for y in ys], fontsize=7)
    annotated = len(xs) * len(ys) <= 64
    if annotated:
        # few cells: each says its value (white on viridis' dark end)
        for (x, y), v in cells.items():
            shade = float(np.ma.filled(im.norm(v), 0.0))
            target.text(xs.index(x), ys.index(y), _plain(v), ha="center", va="center", fontsize=7,
                        color="white" if shade < 0.6 else "black")
    unit = "est. cycles" if key == "cycles_est" else (pts[0].get("unit") or "")
    label = (spec.ylabel + f" ({unit})") if spec.ylabel else unit
    if spec.ylabel and unit and unit in spec.ylabel:
        label = spec.ylabel
    if spec.symmetric and annotated:
        # a map of pairs writes its value in each cell: the colours only
        # repeat them, and a colour bar beside a small map would dwarf it
        target.set_title(f"{spec.title} ({label})", fontsize=9, y=TITLE_Y)
    else:
        target.figure.colorbar(im, ax=target, label=label,
                               extend="max" if spec.clip_percentile < 100 else "neither")
    target.set_ylabel(spec.y_axis_label or spec.y_param.replace("_", " "))
    return target


def draw_spec(doc, spec, ax, facet_values=None, pts=None):
    """Draw one panel of a declared PlotSpec (plotspec.py) of a document on
    ax: the spec's points (of one facet, when given) and its marks."""
    if pts is None:
        pts = spec.points(doc)
    colours = SERIES_COLOURS
    rows = 0
    target = ax
    if not pts:
        ax.text(0.5, 0.5, "no points measured for this panel", ha="center", va="center",
                transform=ax.transAxes, color="grey")
    elif spec.kind == "curve":
        rows = _curve(doc, spec, ax, pts, colours, facet_values)
    elif spec.kind == "bars":
        _bars(spec, ax, pts, colours)
    else:
        target = _heatmap(spec, ax, pts)
    if spec.kind != "heatmap":
        if spec.log_y:
            ax.set_yscale("log")
            plain_log_ticks(ax.yaxis, [spec.y_of(p) for p in pts])
        if pts:
            draw_marks(doc, spec, ax, facet_values)
            legend_outside(ax)
        if spec.xlim:
            ax.set_xlim(*spec.xlim)
        if spec.xticks:
            ax.set_xticks(list(spec.xticks))
        unit = pts[0].get("unit", "") if pts else ""
        ax.set_ylabel(spec.ylabel or (metric_words(pts[0].get("metric"), unit) if pts else ""))
        ax.grid(True, which="major", alpha=0.3)
    if target is ax:
        ax.set_title(spec.panel_title(facet_values), fontsize=9, y=TITLE_Y,
                     pad=6 + rows * CACHE_LABEL_ROW + (2 if rows else 0))
    target.set_xlabel(spec.panel_xlabel(facet_values))


MARK_LABEL_CHARS = 24


def wrap_label(label):
    """A mark's label in lines of at most MARK_LABEL_CHARS (first broken after ": ")."""
    import textwrap
    head, sep, tail = label.partition(": ")
    parts = [head + sep.strip(), tail] if sep else [label]
    lines = [line for part in parts if part
             for line in textwrap.wrap(part, MARK_LABEL_CHARS, break_on_hyphens=False)]
    return "\n".join(lines) or label


def draw_marks(doc, spec, ax, facet_values=None):
    """The spec's marks: a line (with its label) at each x an answer gives,
    or a shaded band over each x (+-0.5) or [low, high] pair."""
    lo, hi = ax.get_xlim()
    for mark in spec.marks:
        legend = mark.legend
        for x, label in mark.items(doc, facet_values or {}):
            if mark.band:
                a, b = x if isinstance(x, tuple) else (x, x)
                # the legend names the bands once, and only when one is drawn
                ax.axvspan(a - 0.5, b + 0.5, color=mark.colour, alpha=mark.alpha, zorder=0, lw=0,
                           label=legend or None)
                legend = ""
                continue
            if isinstance(x, tuple) or spec.x_max is not None and x > spec.x_max:
                continue
            ax.axvline(x, color=mark.colour, lw=1, alpha=0.6, ls=mark.style)
            if label:
                # on a light box above the curves, so none covers it
                # wrapped after ": " or at MARK_LABEL_CHARS: a long label
                # ran past a short panel's frame into the cache labels
                ax.text(x, mark.label_y, wrap_label(label), color=mark.colour, fontsize=7,
                        rotation=90,
                        va="bottom" if mark.label_y < 0.3 else "center",
                        transform=ax.get_xaxis_transform(), zorder=5,
                        bbox={"facecolor": "white", "alpha": 0.75, "lw": 0, "pad": 1})
    ax.set_xlim(lo, hi)


def spec_marks(doc, spec):
    """[(x, label, style)] of every line mark a spec draws (for tests and readers)."""
    return [(x, label, mark.style) for mark in spec.marks if not mark.band
            for x, label in mark.items(doc)]


def panels_for(doc):
    """[(spec, facet values, points)] of every panel the document's
    experiment declares that has points (a run that left a part out, e.g.
    the bandwidth experiment's thread scaling, gets no empty panel for it);
    the first panel alone when none has any, so the figure says so."""
    panels = [(spec, facet, pts) for spec in _declared_plots(doc)
              for facet, pts in spec.panels(doc)]
    return [panel for panel in panels if panel[2]] or panels[:1]


def caption(doc):
    """What the document's figure shows, in words, from the panels it draws
    (a caption never mentions a kind of mark the figure lacks)."""
    panels = panels_for(doc)
    kinds = {spec.kind for spec, _, pts in panels if pts}
    parts = []
    if "curve" in kinds:
        parts.append("Faint dots: every accepted sample; lines: the medians")
    if "bars" in kinds:
        parts.append("bars: medians, with their 95% confidence interval")
    if "heatmap" in kinds:
        parts.append("heatmap colours (and the numbers in small maps): each cell's median")
    if any(spec.rate_of for spec, _, pts in panels if pts):
        parts.append("GB/s = bytes per call / ns per call, so the highest curve is the "
                     "fastest strategy at that size")
    has_caches = bool(Fingerprint.of(doc.get("machine")).caches)
    if has_caches and any(spec.size_x and spec.x_max is None and spec.kind == "curve"
                          for spec, _, pts in panels if pts):
        parts.append("shaded bands on size axes: the cache capacities the OS reports (sysfs), "
                     "labelled above the panel")
    if any(best_ranges(doc, spec, facet) for spec, facet, pts in panels if pts):
        parts.append("wide grey band: the fastest strategy at each size, as the answer gives it")
    if any(not m.band and m.items(doc) for spec, _, pts in panels if pts for m in spec.marks):
        parts.append("vertical lines: where an answer places a step, knee or crossover")
    if not parts:
        return ""
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def new_figure(figsize, dpi=100):
    """A figure on its own Agg canvas, outside pyplot's list of open
    figures (nothing to close; pyplot's bookkeeping costs time per figure)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def tight_below(fig, rows, inches):
    """fig.tight_layout(rect=(0, 0, 1, 1 - inches / height)) of a grid of
    ``rows`` rows, at half its cost: given a rect, tight_layout measures
    every panel's decorations twice, and they come out the same both times.
    So: measure once, then lower the top by ``inches`` and keep the gap
    between rows as it was, in inches, as the second pass would."""
    fig.tight_layout()
    p = fig.subplotpars
    top = p.top - inches / fig.get_figheight()
    adjust = {"top": top}
    if rows > 1:
        gap = p.hspace * (p.top - p.bottom) / (rows + (rows - 1) * p.hspace)
        adjust["hspace"] = gap / ((top - p.bottom - gap * (rows - 1)) / rows)
    fig.subplots_adjust(**adjust)


# Height of one row of panels, in inches (a figure of one panel: ONE_PANEL);
# with the width of the page's column, a row reads as a whole on one screen.
ROW_INCHES = 2.55
ONE_PANEL = (9.0, 2.8)
FIGURE_WIDTH = 14.0
# A figure of this many panels or more goes in three columns when each
# panel's legend is short (few series, short names): the page stays short.
THREE_COLUMNS_FROM = 3
NARROW_LEGEND = (6, 18)         # at most this many series, labels this long
# Space above the panels kept for the figure's title (when drawn), in inches.
SUPTITLE_INCHES = 0.25


def _columns(panels):
    """1, 2 or 3 columns for the panels (see THREE_COLUMNS_FROM)."""
    if len(panels) == 1:
        return 1
    if len(panels) < THREE_COLUMNS_FROM:
        return 2
    for spec, _, pts in panels:
        if spec.kind == "heatmap":
            continue
        labels = {spec.label(p, spec.series_keys(pts)) for p in pts}
        if len(labels) > NARROW_LEGEND[0] or max((len(t) for t in labels), default=0) > NARROW_LEGEND[1]:
            return 2
    return 3


def figure_for(doc, samples_values=None, dpi=100, title=True):
    """The document's figure: one panel per declared plot with points;
    ``title``: the run's title above them (the report's section names it)."""
    panels = panels_for(doc)
    if panels:
        cols = _columns(panels)
        rows = (len(panels) + cols - 1) // cols
        top = SUPTITLE_INCHES if title else 0.0
        size = ONE_PANEL if cols == 1 else (FIGURE_WIDTH, ROW_INCHES * rows)
        fig = new_figure((size[0], size[1] + top), dpi)
        for i, (spec, facet, pts) in enumerate(panels):
            draw_spec(doc, spec, fig.add_subplot(rows, cols, i + 1), facet, pts)
        # the panels are laid out below the title's height, and the title
        # drawn after (tight_layout would leave room for it a second time)
        tight_below(fig, rows, top)
        if lift_cache_labels(fig):
            tight_below(fig, rows, top)       # the titles that moved up need room
        if title:
            # a few points below the top edge, so no glyph is cut
            fig.suptitle(_title(doc), fontsize=10, va="top",
                         y=1.0 - 0.04 / fig.get_figheight())
        thin_ticks(fig)
        return fig
    # an experiment this memfx does not know (an imported document): one
    # curve per arm over the first swept parameter
    fig = new_figure((10, 6), dpi)
    # the first parameter that is a number at every point (a kernel name or
    # page size cannot be an x axis)
    params = [p.get("params") or {} for p in doc.get("points") or []]
    key = next((k for k in (params[0] if params else {})
                if all(isinstance(q.get(k), (int, float)) and not isinstance(q.get(k), bool)
                       for q in params)), None)
    draw_spec(doc, PlotSpec("points", _title(doc), x=key or "arm", size_x=bool(key) and
                            key.endswith("bytes")), fig.add_subplot(1, 1, 1))
    fig.tight_layout()
    thin_ticks(fig)
    return fig


def lift_cache_labels(fig, pad=3.0):
    """Cache labels measured once the layout is settled: one that meets the
    last label on its row goes a row up (the title moves up with it).
    Returns whether any moved."""
    from matplotlib import transforms
    renderer = fig.canvas.get_renderer()
    any_moved = False
    for ax in fig.axes:
        labels = [t for t in ax.texts if hasattr(t, "_memfx_cache_row")]
        if len(labels) < 2:
            continue
        ends, rows, moved = {}, 0, False
        for t in labels:
            base, row = t._memfx_cache_row
            box = t.get_window_extent(renderer)
            while box.x0 < ends.get(row, -np.inf) + pad and row < 3:
                row += 1
            if row != t._memfx_cache_row[1]:
                moved = True
                t.set_transform(transforms.offset_copy(base, fig=fig, x=0,
                                                       y=2 + row * CACHE_LABEL_ROW, units="points"))
                t._memfx_cache_row = (base, row)
            ends[row] = box.x1
            rows = max(rows, row + 1)
        if moved:
            any_moved = True
            ax.set_title(ax.get_title(), fontsize=9, y=TITLE_Y,
                         pad=6 + rows * CACHE_LABEL_ROW + 2)
    return any_moved


def _all_axes(fig):
    out = []
    for ax in fig.axes:
        out.append(ax)
        out.extend(a for a in ax.child_axes if a not in out)
    return out


def thin_ticks(fig, pad=2.0):
    """Leave out tick labels that would print over the one before them (on
    a symlog or linear axis, offsets 0 and 1 are a few pixels apart): each
    axis keeps a label only when its extent clears the last one kept by
    ``pad`` pixels.  Measured on the laid-out figure, so it holds for any
    font, rotation or width."""
    from matplotlib import ticker
    renderer = fig.canvas.get_renderer()
    for ax in _all_axes(fig):
        for axis, along in ((ax.xaxis, 0), (ax.yaxis, 1)):
            lo, hi = sorted(axis.get_view_interval())
            ticks = [(loc, t.label1) for loc, t in zip(axis.get_majorticklocs(),
                                                       axis.get_major_ticks())
                     if lo <= loc <= hi and t.label1.get_visible() and t.label1.get_text()]
            if len(ticks) < 2:
                continue
            spans = []
            for loc, label in ticks:
                box = label.get_window_extent(renderer)
                spans.append(((box.x0, box.x1) if along == 0 else (box.y0, box.y1), loc, label))
            kept, last = [], None
            for span, loc, label in sorted(spans, key=lambda item: item[0]):
                if last is not None and span[0] < last + pad:
                    continue
                kept.append((loc, label))
                last = span[1]
            if len(kept) == len(ticks):
                continue
            first = kept[0][1]
            style = {"rotation": first.get_rotation(), "fontsize": first.get_fontsize(),
                     "ha": first.get_ha(), "va": first.get_va()}
            kept.sort(key=lambda item: item[0])
            axis.set_major_locator(ticker.FixedLocator([loc for loc, _ in kept]))
            axis.set_ticklabels([label.get_text() for _, label in kept], **style)


# Drawing settings of every figure: linear axes print their numbers whole,
# never as an offset ("+1e3") above the frame, where it could meet a title.
RC = {"axes.formatter.useoffset": False}


def draw(doc, save, rc=None, dpi=100, title=True):
    """Draw a document's figure (at ``dpi``) and return save(fig).  A '$' in
    a label (a CPU model, an arm name, a parameter value) starts matplotlib's
    mathtext, which can fail to parse; the second attempt draws every label
    literally."""
    last_error = None
    for parse_math in (True, False):
        try:
            with matplotlib.rc_context({**RC, **(rc or {}), "text.parse_math": parse_math}):
                # outside pyplot, a figure is freed like any object (clearing
                # it would make new ticks for nothing)
                return save(figure_for(doc, dpi=dpi, title=title))
        except Exception as err:
            last_error = err
    raise last_error


def plot_document(doc, path):
    """Draw a result document (whose points carry 'values') to a file."""
    draw(doc, lambda fig: fig.savefig(path))
    return path
