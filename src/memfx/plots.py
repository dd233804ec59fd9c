"""Plots from result documents (every sample visible, median line, cache sizes
from sysfs as bands).  Reads documents only; never measures."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .units import format_size  # noqa: E402

CACHE_COLOURS = ["#e8f4e8", "#e8eef8", "#f8f0e0", "#f4e4f4"]
PLOTTERS = {}


def plotter(experiment):
    """Register a plot function for an experiment: fn(doc, fig) -> None."""
    def deco(fn):
        PLOTTERS[experiment] = fn
        return fn
    return deco


def size_axis(ax, sizes):
    ax.set_xscale("log", base=2)
    lo, hi = min(sizes), max(sizes)
    ticks = [2 ** k for k in range(int(np.floor(np.log2(lo))), int(np.ceil(np.log2(hi))) + 1, 2)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([format_size(t) for t in ticks], rotation=45, fontsize=8)


def cache_bands(ax, machine, lo, hi):
    """Shade each cache level's capacity range and label it with the sysfs size."""
    caches = sorted((c for c in machine.get("caches", []) if c.get("type") in ("Data", "Unified")),
                    key=lambda c: c["size_bytes"])
    prev = lo
    for i, c in enumerate(caches):
        label = f"L{c['level']}{'d' if c['type'] == 'Data' else ''} {format_size(c['size_bytes'])}B (sysfs)"
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


def curve_plot(doc, ax, x_key, series_key=None, log_y=False, size_x=True, ylabel=None):
    """Generic: one line per (arm[, series]) through point medians over x_key,
    every sample drawn semi-transparent."""
    pts = [p for p in doc["points"] if p.get("median") is not None and x_key in p["params"]]
    groups = {}
    for p in pts:
        label = p["arm"] if not series_key else f"{p['arm']} {p['params'].get(series_key)}"
        groups.setdefault(label, []).append(p)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, ps) in enumerate(sorted(groups.items())):
        ps.sort(key=lambda p: p["params"][x_key])
        c = colours[i % len(colours)]
        for p in ps:
            vals = p.get("values") or []
            if vals:
                ax.scatter([p["params"][x_key]] * len(vals), vals, s=6, alpha=0.25, color=c, lw=0)
        ax.plot([p["params"][x_key] for p in ps], [p["median"] for p in ps], "-o", ms=2.5, lw=1.2,
                color=c, label=label)
    if size_x and pts:
        xs = [p["params"][x_key] for p in pts]
        size_axis(ax, xs)
        cache_bands(ax, doc.get("machine") or {}, min(xs), max(xs))
    if log_y:
        ax.set_yscale("log")
    unit = pts[0]["unit"] if pts else ""
    ax.set_ylabel(ylabel or f"{pts[0]['metric'] if pts else ''} ({unit})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


@plotter("latency")
def plot_latency(doc, fig):
    ax = fig.add_subplot(1, 1, 1)
    pages = doc["params"].get("pages", ["4k"])
    curve_plot(doc, ax, "size_bytes", series_key="pages" if len(pages) > 1 else None, log_y=True,
               ylabel="ns per dependent load (log)")
    ax.set_xlabel("working set (bytes)")
    for f in doc["findings"]:
        if f["id"].startswith("knee") and f["verdict"] == "detected" and f.get("value"):
            ax.axvline(f["value"], color="red", lw=1, alpha=0.6)
            ax.text(f["value"], 0.02, f" knee {format_size(f['value'])}", color="red", fontsize=7,
                    transform=ax.get_xaxis_transform(), rotation=90, va="bottom")
    ax.set_title(_title(doc))


def _title(doc):
    cpu = (doc.get("machine") or {}).get("cpu", {})
    return f"memfx {doc['experiment']} — {cpu.get('model_name', '?')} — run {doc['run_id']}"


def figure_for(doc, samples_values=None):
    fn = PLOTTERS.get(doc["experiment"])
    fig = plt.figure(figsize=(10, 6), dpi=100)
    if fn is None:
        ax = fig.add_subplot(1, 1, 1)
        key = next(iter(doc["points"][0]["params"]), None) if doc["points"] else None
        if key:
            curve_plot(doc, ax, key, size_x=key.endswith("bytes"))
        ax.set_title(_title(doc))
    else:
        fn(doc, fig)
    fig.tight_layout()
    return fig


def plot_document(doc, path):
    """Draw a result document (whose points carry 'values') to a file."""
    fig = figure_for(doc)
    fig.savefig(path)
    plt.close(fig)
    return path
