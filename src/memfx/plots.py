"""Plots from result documents (every sample visible, median line, cache sizes
from sysfs as bands).  Reads documents only; never measures."""
from __future__ import annotations

from dataclasses import replace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .plotspec import PlotSpec  # noqa: E402
from .units import format_size  # noqa: E402

CACHE_COLOURS = ["#e8f4e8", "#e8eef8", "#f8f0e0", "#f4e4f4"]


def size_axis(ax, sizes):
    ax.set_xscale("log", base=2)
    # a log axis shows positive sizes only (an imported run may hold a 0)
    sizes = [s for s in sizes if isinstance(s, (int, float)) and np.isfinite(s) and s > 0]
    if not sizes:
        return
    lo, hi = min(sizes), max(sizes)
    ticks = [2 ** k for k in range(int(np.floor(np.log2(lo))), int(np.ceil(np.log2(hi))) + 1, 2)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([format_size(t) for t in ticks], rotation=45, fontsize=8)


def cache_bands(ax, machine, lo, hi):
    """Shade each cache level's capacity range and label it with the sysfs size
    (entries without a size, as an old or damaged fingerprint may hold, are skipped)."""
    caches = sorted((c for c in machine.get("caches") or [] if isinstance(c, dict)
                     and c.get("type") in ("Data", "Unified")
                     and isinstance(c.get("size_bytes"), int) and c["size_bytes"] > 0),
                    key=lambda c: c["size_bytes"])
    prev = lo
    for i, c in enumerate(caches):
        level = c.get("level") if c.get("level") is not None else "?"
        label = f"L{level}{'d' if c['type'] == 'Data' else ''} {format_size(c['size_bytes'])}B (sysfs)"
        ax.axvspan(prev, c["size_bytes"], color=CACHE_COLOURS[i % len(CACHE_COLOURS)], zorder=0, lw=0)
        ax.axvline(c["size_bytes"], color="grey", ls=":", lw=1, zorder=1)
        ax.text(c["size_bytes"], 0.98, label, transform=ax.get_xaxis_transform(), rotation=90,
                ha="right", va="top", fontsize=7, color="dimgrey")
        prev = c["size_bytes"]


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


def scatter_samples(ax, xs, points, **style):
    """Every sample of every point as one semi-transparent scatter (one
    collection per series: thousands of per-point collections made the
    report's plots take tens of seconds)."""
    x_all, y_all = [], []
    for x, p in zip(xs, points):
        vals = p.get("values") or []
        x_all.extend([x] * len(vals))
        y_all.extend(vals)
    if x_all:
        ax.scatter(x_all, y_all, lw=0, **style)


def _title(doc):
    cpu = (doc.get("machine") or {}).get("cpu", {})
    return f"memfx {doc['experiment']} — {cpu.get('model_name', '?')} — run {doc['run_id']}"


def _declared_plots(doc):
    from .experiments import get_experiment
    exp = get_experiment(doc["experiment"], missing_ok=True)
    return tuple(getattr(exp, "plots", ()) or ()) if exp else ()


def draw_spec(doc, spec, ax, facet_values=None, pts=None):
    """Draw one panel of a declared PlotSpec (plotspec.py) of a document on
    ax: the spec's points (of one facet, when given) and its marks."""
    if pts is None:
        pts = spec.points(doc)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    if not pts:
        ax.text(0.5, 0.5, "no points measured for this panel", ha="center", va="center",
                transform=ax.transAxes, color="grey")
    elif spec.kind == "curve":
        groups = {}
        keys = spec.series_keys(pts)
        for p in pts:
            groups.setdefault(spec.label(p, keys), []).append(p)
        # a series keeps its colour in every panel of the spec (the zoom of
        # a copy run lacks the NT arm, and must not shift the others' colours)
        base = sorted({spec.label(p, keys) for p in replace(spec, x_max=None).points(doc)}
                      | set(groups))
        base = [label for label in base if not (spec.dashed and label.endswith(spec.dashed))]
        for i, (label, ps) in enumerate(sorted(groups.items())):
            ps.sort(key=lambda p: spec.x_of(p) if spec.x_wrap else spec.value_of(p, spec.x))
            xs = [spec.x_of(p) for p in ps]
            dashed = bool(spec.dashed) and label.endswith(spec.dashed)
            owner = label[:-len(spec.dashed)] if dashed else label
            c = colours[(base.index(owner) if owner in base else i) % len(colours)]
            alpha = 0.5 if dashed else 1.0
            scatter_samples(ax, xs, ps, s=6, alpha=0.25 * alpha, color=c)
            ax.plot(xs, [p["median"] for p in ps], "--" if dashed else "-", marker="o", ms=2.5,
                    lw=1.2, color=c, alpha=alpha,
                    label=owner + spec.dashed_label if dashed else label)
        xs = [spec.x_of(p) for p in pts]
        if spec.size_x and spec.x_max is None:
            size_axis(ax, xs)
            cache_bands(ax, doc.get("machine") or {}, min(xs), max(xs))
        elif spec.log_x and spec.x_max is None:
            ax.set_xscale("symlog", linthresh=spec.linthresh, linscale=spec.linscale)
        elif all(float(x).is_integer() for x in xs) and len(set(xs)) <= 16:
            # counts (threads, distances): tick the values measured, not 1.2, 1.4
            ax.set_xticks(sorted(set(xs)))
        if spec.ylim_percentile:
            ax.set_ylim(0, float(np.percentile([p["median"] for p in pts],
                                               spec.ylim_percentile)) * 1.5)
        ax.legend(fontsize=7)
    elif spec.kind == "bars":
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
                           rotation=30, fontsize=8)
        ax.legend(fontsize=7)
    else:
        key = spec.value
        if key != "median" and not all(p.get(key) for p in pts):
            key = "median"
        xs = sorted({spec.value_of(p, spec.x) for p in pts})
        ys = sorted({spec.value_of(p, spec.y_param) for p in pts})
        grid = np.full((len(ys), len(xs)), np.nan)
        for p in pts:
            grid[ys.index(spec.value_of(p, spec.y_param)), xs.index(spec.value_of(p, spec.x))] = \
                p[key]
        vals = [p[key] for p in pts]
        # the colour scale may ignore the top of the range (clip_percentile):
        # one preempted sample must not wash out the map
        im = ax.imshow(grid, aspect="auto", origin="lower", cmap="viridis",
                       vmin=min(vals), vmax=float(np.percentile(vals, spec.clip_percentile)),
                       interpolation="nearest")
        step = 1 if len(xs) <= 10 else 4 if len(xs) <= 24 else 8
        ax.set_xticks(range(0, len(xs), step))
        ax.set_xticklabels([str(xs[t]) for t in range(0, len(xs), step)], fontsize=7)
        ax.set_yticks(range(len(ys)))
        ax.set_yticklabels([str(y) for y in ys], fontsize=7)
        unit = "est. cycles" if key == "cycles_est" else (pts[0].get("unit") or "")
        ax.figure.colorbar(im, ax=ax, extend="max" if spec.clip_percentile < 100 else "neither",
                           label=(spec.ylabel + f" ({unit})") if spec.ylabel else unit)
    if spec.log_y and spec.kind != "heatmap":
        ax.set_yscale("log")
    if pts and spec.kind != "heatmap":
        draw_marks(doc, spec, ax, facet_values)
    if spec.xlim:
        ax.set_xlim(*spec.xlim)
    if spec.xticks:
        ax.set_xticks(list(spec.xticks))
    ax.set_title(spec.panel_title(facet_values), fontsize=9)
    ax.set_xlabel(spec.panel_xlabel(facet_values))
    if spec.kind != "heatmap":
        unit = pts[0].get("unit", "") if pts else ""
        ax.set_ylabel(spec.ylabel or (f"{pts[0]['metric']} ({unit})" if pts else ""))
    ax.grid(True, which="both", alpha=0.3)


def draw_marks(doc, spec, ax, facet_values=None):
    """The spec's marks: a line (with its label) at each x an answer gives,
    or a shaded band over each x (+-0.5) or [low, high] pair."""
    lo, hi = ax.get_xlim()
    for mark in spec.marks:
        for x, label in mark.items(doc, facet_values or {}):
            if mark.band:
                a, b = x if isinstance(x, tuple) else (x, x)
                ax.axvspan(a - 0.5, b + 0.5, color=mark.colour, alpha=mark.alpha, zorder=0, lw=0)
                continue
            if isinstance(x, tuple) or spec.x_max is not None and x > spec.x_max:
                continue
            ax.axvline(x, color=mark.colour, lw=1, alpha=0.6, ls=mark.style)
            if label:
                ax.text(x, mark.label_y, f" {label}", color=mark.colour, fontsize=7, rotation=90,
                        va="bottom" if mark.label_y < 0.3 else "center",
                        transform=ax.get_xaxis_transform())
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


def figure_for(doc, samples_values=None):
    panels = panels_for(doc)
    if panels:
        cols = 1 if len(panels) == 1 else 2
        rows = (len(panels) + cols - 1) // cols
        fig = plt.figure(figsize=(11 if cols == 1 else 14, 4.6 * rows), dpi=100)
        for i, (spec, facet, pts) in enumerate(panels):
            draw_spec(doc, spec, fig.add_subplot(rows, cols, i + 1), facet, pts)
        fig.suptitle(_title(doc), fontsize=10)
        # tight_layout ignores the suptitle: keep ~0.45 inch above the panels
        # for it (it overlapped the first panel's title on tall figures)
        fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / (4.6 * rows)))
        return fig
    # an experiment this memfx does not know (an imported document): one
    # curve per arm over the first swept parameter
    fig = plt.figure(figsize=(10, 6), dpi=100)
    # the first parameter that is a number at every point (a kernel name or
    # page size cannot be an x axis)
    params = [p.get("params") or {} for p in doc.get("points") or []]
    key = next((k for k in (params[0] if params else {})
                if all(isinstance(q.get(k), (int, float)) and not isinstance(q.get(k), bool)
                       for q in params)), None)
    draw_spec(doc, PlotSpec("points", _title(doc), x=key or "arm", size_x=bool(key) and
                            key.endswith("bytes")), fig.add_subplot(1, 1, 1))
    fig.tight_layout()
    return fig


def draw(doc, save, rc=None):
    """Draw a document's figure and return save(fig).  A '$' in a label (a
    CPU model, an arm name, a parameter value) starts matplotlib's mathtext,
    which can fail to parse; the second attempt draws every label literally."""
    last_error = None
    for parse_math in (True, False):
        try:
            with matplotlib.rc_context({**(rc or {}), "text.parse_math": parse_math}):
                fig = figure_for(doc)
                try:
                    return save(fig)
                finally:
                    plt.close(fig)
        except Exception as err:
            last_error = err
            plt.close("all")
    raise last_error


def plot_document(doc, path):
    """Draw a result document (whose points carry 'values') to a file."""
    draw(doc, lambda fig: fig.savefig(path))
    return path
