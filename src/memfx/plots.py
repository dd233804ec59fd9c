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


def curve_plot(doc, ax, x_key, series_key=None, log_y=False, size_x=True, ylabel=None):
    """Generic: one line per (arm[, series]) through point medians over x_key,
    every sample drawn semi-transparent."""
    pts = [p for p in doc["points"] if p.get("median") is not None and x_key in p["params"]]
    groups = {}
    for p in pts:
        label = str(p["arm"]) if not series_key else f"{p['arm']} {p['params'].get(series_key)}"
        groups.setdefault(label, []).append(p)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, ps) in enumerate(sorted(groups.items())):
        ps.sort(key=lambda p: p["params"][x_key])
        c = colours[i % len(colours)]
        scatter_samples(ax, [p["params"][x_key] for p in ps], ps, s=6, alpha=0.25, color=c)
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
    """Random and sequential chase per page size; the capacity answers'
    knees (solid) and the TLB knees of latency.tlb_reach (dashed) marked."""
    ax = fig.add_subplot(1, 1, 1)
    # by the points, not the params: a quick run adds huge-page points
    # around the knees no cache explains
    pages = {p["params"].get("pages") for p in doc["points"]}
    curve_plot(doc, ax, "size_bytes", series_key="pages" if len(pages) > 1 else None, log_y=True,
               ylabel="ns per dependent load (log)")
    ax.set_xlabel("working set (bytes)")
    for size, label, style in latency_marks(doc.get("answers") or []):
        ax.axvline(size, color="red", lw=1, alpha=0.6, ls=style)
        ax.text(size, 0.02, f" {label}", color="red", fontsize=7,
                transform=ax.get_xaxis_transform(), rotation=90, va="bottom")
    ax.set_title(_title(doc))


def latency_marks(answers):
    """(size, label, line style) for each knee the latency answers name:
    the capacity answers' values and the TLB knees among tlb_reach's details."""
    marks = []
    for a in answers:
        q = a.get("question", "")
        if q.endswith("_capacity") and a.get("value") and a.get("verdict") != "not_measured":
            name = q.split(".", 1)[1][:-len("_capacity")].upper().replace("D", "d")
            marks.append((a["value"], f"{name} ends ~{format_size(a['value'])}", "-"))
        elif q == "latency.tlb_reach":
            marks.extend((d["value"], f"TLB knee {format_size(d['value'])}", "--")
                         for d in a.get("details") or []
                         if d.get("verdict") == "tlb" and d.get("value"))
    return marks


def _title(doc):
    cpu = (doc.get("machine") or {}).get("cpu", {})
    return f"memfx {doc['experiment']} — {cpu.get('model_name', '?')} — run {doc['run_id']}"


def _declared_plots(doc):
    from .experiments import get_experiment
    exp = get_experiment(doc["experiment"], missing_ok=True)
    return tuple(getattr(exp, "plots", ()) or ()) if exp else ()


def draw_spec(doc, spec, ax):
    """Draw one declared PlotSpec (plotspec.py) of a document on ax."""
    pts = spec.points(doc)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    if not pts:
        ax.text(0.5, 0.5, "no points measured for this panel", ha="center", va="center",
                transform=ax.transAxes, color="grey")
    elif spec.kind == "curve":
        groups = {}
        for p in pts:
            groups.setdefault(spec.label(p), []).append(p)
        for i, (label, ps) in enumerate(sorted(groups.items())):
            ps.sort(key=lambda p: spec.value_of(p, spec.x))
            xs = [spec.value_of(p, spec.x) for p in ps]
            c = colours[i % len(colours)]
            scatter_samples(ax, xs, ps, s=6, alpha=0.25, color=c)
            ax.plot(xs, [p["median"] for p in ps], "-o", ms=3, lw=1.2, color=c, label=label)
        if spec.size_x:
            xs = [spec.value_of(p, spec.x) for p in pts]
            size_axis(ax, xs)
            cache_bands(ax, doc.get("machine") or {}, min(xs), max(xs))
        elif spec.log_x:
            ax.set_xscale("symlog", linthresh=1)
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
        ax.set_xticklabels([str(c) for c in cats], rotation=30, fontsize=8)
        ax.legend(fontsize=7)
    else:
        xs = sorted({spec.value_of(p, spec.x) for p in pts})
        ys = sorted({spec.value_of(p, spec.y_param) for p in pts})
        grid = np.full((len(ys), len(xs)), np.nan)
        for p in pts:
            grid[ys.index(spec.value_of(p, spec.y_param)), xs.index(spec.value_of(p, spec.x))] = \
                p["median"]
        im = ax.imshow(grid, aspect="auto", origin="lower", cmap="viridis")
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels([str(x) for x in xs], fontsize=7)
        ax.set_yticks(range(len(ys)))
        ax.set_yticklabels([str(y) for y in ys], fontsize=7)
        ax.figure.colorbar(im, ax=ax, label=spec.ylabel or (pts[0].get("unit") or ""))
    if spec.log_y and spec.kind != "heatmap":
        ax.set_yscale("log")
    ax.set_title(spec.title, fontsize=10)
    ax.set_xlabel(spec.xlabel or spec.x)
    if spec.kind != "heatmap":
        unit = pts[0].get("unit", "") if pts else ""
        ax.set_ylabel(spec.ylabel or (f"{pts[0]['metric']} ({unit})" if pts else ""))
    ax.grid(True, which="both", alpha=0.3)


def figure_for(doc, samples_values=None):
    specs = _declared_plots(doc)
    if specs:
        fig = plt.figure(figsize=(10, 4.2 * ((len(specs) + 1) // 2)), dpi=100)
        cols = 1 if len(specs) == 1 else 2
        rows = (len(specs) + cols - 1) // cols
        for i, spec in enumerate(specs):
            draw_spec(doc, spec, fig.add_subplot(rows, cols, i + 1))
        fig.suptitle(_title(doc), fontsize=10)
        fig.tight_layout()
        return fig
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


def _answer(doc, question):
    """The answer dict to a declared question in a result document, or None."""
    return next((a for a in doc.get("answers") or [] if a.get("question") == question), None)


def _answer_detail_values(doc, question, field, **match):
    """Every item of the list `field` over the details of one answer whose
    other fields equal `match` (e.g. the failing sizes of one move width)."""
    a = _answer(doc, question)
    out = []
    for d in (a or {}).get("details") or []:
        if all(d.get(k) == v for k, v in match.items()):
            out.extend(d.get(field) or [])
    return out


@plotter("store-forward")
def plot_store_forward(doc, fig):
    """Entry-size curve (every sample), the two-store sweep, and one heatmap
    per load size: rows store size, columns load offset, colour = latency."""
    pts = doc["points"]
    entry = [p for p in pts if p["params"].get("part") == "entry"]
    pair = [p for p in pts if p["params"].get("part") == "two_stores"]
    cells = [p for p in pts if p["params"].get("part") == "matrix" and p.get("median") is not None]
    fig.set_size_inches(15, 10 if cells and (entry or pair) else 6)
    top = bool(entry or pair)
    both = top and cells
    gs = fig.add_gridspec(2 if both else 1, 8, height_ratios=[1.2, 1] if both else [1])
    if top:
        if entry:
            ax = fig.add_subplot(gs[0, :5] if pair else gs[0, :])
            widths = {p["params"]["widest"] for p in entry}
            curve_plot(doc, ax, "entry_bytes", series_key="widest" if len(widths) > 1 else None,
                       size_x=False, ylabel="ns per entry")
            ax.set_xlabel("entry size S (bytes)")
            ax.set_xticks(range(0, 65, 4))
            narrow = min(widths)
            for s in _answer_detail_values(doc, "store_forward.failing_entry_sizes",
                                           "failing_sizes", widest=narrow):
                ax.axvspan(s - 0.5, s + 0.5, color="#f4cccc", zorder=0, lw=0)
            ax.set_title(f"{_title(doc)}\nentry copies (shaded: sizes whose copy with moves of "
                         f"up to {narrow} bytes fails to forward)", fontsize=9)
        if pair:
            ax2 = fig.add_subplot(gs[0, 5:] if entry else gs[0, :])
            curve_plot(doc, ax2, "second_store_offset", size_x=False, ylabel="ns per round trip")
            ax2.set_xlabel("second 16-byte store at offset d (first at 0)")
            ax2.set_title("two stores, then one 16-byte load", fontsize=9)
    if cells:
        # one panel per load size; columns are the offsets measured for that
        # load size (all of them in the full preset, the edges in quick)
        use_cycles = all(p.get("cycles_est") for p in cells)
        key, unit = ("cycles_est", "est. cycles") if use_cycles else ("median", "ns")
        stores = sorted({p["params"]["store_bytes"] for p in cells})
        loads = sorted({p["params"]["load_bytes"] for p in cells})
        offsets = {ld: sorted({p["params"]["load_offset"] for p in cells
                               if p["params"]["load_bytes"] == ld}) for ld in loads}
        vals = [p[key] for p in cells]
        sub = gs[1 if top else 0, :].subgridspec(
            1, len(loads) + 1, wspace=0.08,
            width_ratios=[max(len(offsets[ld]), 4) for ld in loads] + [2])
        im = None
        for i, ld in enumerate(loads):
            cols = offsets[ld]
            grid = np.full((len(stores), len(cols)), np.nan)
            for p in cells:
                if p["params"]["load_bytes"] == ld:
                    grid[stores.index(p["params"]["store_bytes"]),
                         cols.index(p["params"]["load_offset"])] = p[key]
            hx = fig.add_subplot(sub[0, i])
            # the colour scale ignores the top 2 % (a preempted sample must
            # not wash out the map); those cells show as the brightest colour
            im = hx.imshow(grid, aspect="auto", cmap="viridis", vmin=max(0.0, min(vals)),
                           vmax=float(np.percentile(vals, 98)), interpolation="nearest")
            hx.set_yticks(range(len(stores)))
            hx.set_yticklabels([str(s) for s in stores] if i == 0 else [], fontsize=7)
            step = 1 if len(cols) <= 10 else 4 if len(cols) <= 24 else 8
            ticks = list(range(0, len(cols), step))
            hx.set_xticks(ticks)
            hx.set_xticklabels([str(cols[t]) for t in ticks], fontsize=6,
                               rotation=90 if len(cols) <= 10 else 0)
            hx.set_title(f"load {ld} B", fontsize=8)
            if i == 0:
                hx.set_ylabel("store size (B), at offset 0", fontsize=8)
                hx.set_xlabel("load offset (B)", fontsize=7)
        cax = fig.add_subplot(sub[0, len(loads)])
        fig.colorbar(im, cax=cax, extend="max").set_label(f"store→load round trip ({unit})",
                                                          fontsize=8)


def _copy_panel(ax, doc, zoom):
    """One strategy per line, the same colour for a strategy in every panel."""
    order = ["rep_movsb", "rep_stosb", "rep_movsq", "rep_stosq", "gpr_unrolled", "sse", "avx2",
             "avx512", "libc", "nt"]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    arms = sorted({p["arm"] for p in doc["points"]},
                  key=lambda a: (order.index(a) if a in order else 99, a))
    for arm in arms:
        ps = sorted((p for p in doc["points"] if p["arm"] == arm),
                    key=lambda p: p["params"]["size_bytes"])
        i = order.index(arm) if arm in order else len(order)
        c = colours[(i // 2 if i < 4 else i - 2) % len(colours)]   # movsb/stosb share a colour
        scatter_samples(ax, [p["params"]["size_bytes"] for p in ps], ps, s=5, alpha=0.25, color=c)
        ax.plot([p["params"]["size_bytes"] for p in ps], [p["median"] for p in ps], "-o", ms=2,
                lw=1.1, color=c, label=arm)
    xs = [p["params"]["size_bytes"] for p in doc["points"]]
    if zoom:
        ax.set_xlim(0, 520)
        ax.set_ylim(0, float(np.percentile([p["median"] for p in doc["points"]], 95)) * 1.5)
        ax.set_ylabel("ns per call")
    else:
        size_axis(ax, xs)
        cache_bands(ax, doc.get("machine") or {}, min(xs), max(xs))
        ax.set_yscale("log")
        ax.set_ylabel("ns per call (log)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="upper left")


@plotter("copy")
def plot_copy(doc, fig):
    """ns per call vs size (log-log), one panel per op and timing mode, every
    sample visible; the rep movsb/stosb step and cache sizes marked."""
    pts = [p for p in doc["points"] if p.get("median")]
    ops = [o for o in ("copy", "set") if any(p["params"].get("op") == o for p in pts)]
    modes = [m for m in ("throughput", "latency", "chained")
             if any(p["params"].get("mode") == m for p in pts)]
    if not ops or not modes:
        return
    ncols = len(modes) + 1          # the last column: a linear zoom on small sizes
    fig.set_size_inches(6 * ncols, 5 * len(ops))
    for r, op in enumerate(ops):
        for c, mode in enumerate(modes + [modes[0]]):
            zoom = c == len(modes)
            ax = fig.add_subplot(len(ops), ncols, r * ncols + c + 1)
            sub = dict(doc, points=[p for p in pts if p["params"].get("op") == op
                                    and p["params"].get("mode") == mode
                                    and (not zoom or p["params"]["size_bytes"] <= 512)])
            if not sub["points"]:
                continue
            _copy_panel(ax, sub, zoom)
            ax.set_xlabel(f"{op} size (bytes)" + (", linear, up to 512 B" if zoom else ""))
            ax.set_title((_title(doc) + "\n" if r == 0 and c == 0 else "")
                         + f"{op}, {mode}" + (" (zoom)" if zoom else ""), fontsize=9)
            for d in _copy_steps(doc, op, mode):
                ax.axvline(d["value"], color="red", lw=1, alpha=0.6)
                ax.text(d["value"], 0.02, f" {d['label'].split(' ')[0]} step "
                        f"{d['fast_up_to']}→{d['slow_from']} B", color="red", fontsize=7,
                        rotation=90, va="bottom", transform=ax.get_xaxis_transform())
            if not zoom:
                for d in _copy_envelope_crossings(doc, op, mode):
                    ax.axvline(d["value"], color="purple", lw=1, ls="--", alpha=0.6)
                    ax.text(d["value"], 0.5, f" {d['label'].split(' (')[0]}: "
                            f"{format_size(d['value'])}B", color="purple", fontsize=7,
                            rotation=90, va="center", transform=ax.get_xaxis_transform())


def _copy_envelope_crossings(doc, op, mode):
    """Where rep movsb/stosb starts to beat the best loop, and NT stores the
    best of rep and libc (detected crossings of the copy answers)."""
    out = []
    for a in doc.get("answers") or []:
        if not str(a.get("question", "")).startswith("copy.") \
                or not str(a.get("question")).endswith("_crossover"):
            continue
        out += [d for d in a.get("details") or [] if d.get("kind") == "envelope"
                and d.get("op") == op and d.get("mode") == mode
                and d.get("verdict") == "detected" and d.get("value")]
    return out


def _copy_steps(doc, op, mode):
    """The detected rep movsb/stosb steps of one op and mode, from the copy
    answers (copy.rep_movsb_step / copy.rep_stosb_step, one detail per mode)."""
    qid = "copy.rep_movsb_step" if op == "copy" else "copy.rep_stosb_step"
    out = []
    for a in doc.get("answers") or []:
        if a.get("question") != qid:
            continue
        out += [d for d in a.get("details") or [] if d.get("mode") == mode
                and d.get("verdict") == "detected" and d.get("value")]
    return out


@plotter("aliasing")
def plot_aliasing(doc, fig):
    """ns per call vs (dst - src) mod 4096, shown as a signed offset on a
    symlog axis so the fine parts near 0 and 4096 are readable; each
    strategy solid, its same-misalignment control dashed; every sample
    visible."""
    pts = [p for p in doc["points"] if p.get("median")]
    keys = sorted({(p["params"]["mode"], p["params"]["size_bytes"]) for p in pts},
                  key=lambda k: (k[0] != "throughput", k[0], k[1]))
    if not keys:
        return
    fig.set_size_inches(11, 3.2 * len(keys))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    strategies = sorted({p["arm"].split(":")[0] for p in pts})
    for i, (mode, size) in enumerate(keys):
        ax = fig.add_subplot(len(keys), 1, i + 1)
        for j, s in enumerate(strategies):
            for arm, style, alpha in ((s, "-", 1.0), (s + ":control", "--", 0.5)):
                ps = sorted((p for p in pts if p["arm"] == arm and p["params"]["mode"] == mode
                             and p["params"]["size_bytes"] == size),
                            key=lambda p: (p["params"]["offset"] + 2048) % 4096)
                if not ps:
                    continue
                xs = [p["params"]["offset"] - 4096 if p["params"]["offset"] >= 2048
                      else p["params"]["offset"] for p in ps]
                scatter_samples(ax, xs, ps, s=5, alpha=0.2 * alpha, color=colours[j % len(colours)])
                ax.plot(xs, [p["median"] for p in ps], style, lw=1, ms=2, marker="o",
                        color=colours[j % len(colours)], alpha=alpha,
                        label=arm if style == "-" else f"{s} control (same misalignment)")
        for b in _answer_detail_values(doc, "aliasing.penalty_4k", "bands", size_bytes=size,
                                       mode=mode):
            ax.axvspan(b["signed"][0] - 0.5, b["signed"][1] + 0.5, color="red", alpha=0.06)
        ax.set_xscale("symlog", linthresh=64, linscale=2)
        ax.set_xlim(-2048, 2048)
        ax.set_yscale("log")
        ax.set_ylabel("ns per call (log)")
        ax.set_title((_title(doc) + "\n" if i == 0 else "")
                     + f"{format_size(size)}B per call, {mode}; red: penalty bands", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, ncol=2, loc="upper right")
    ax.set_xlabel("(dst - src) mod 4096, as a signed offset in bytes (symlog)")
