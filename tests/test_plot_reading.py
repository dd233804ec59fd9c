"""What a reader sees in the plots (issue 23): rates for copy strategies,
legends and cache labels outside the data, plain tick labels, labelled
heatmap axes, a core-to-core map sized by the CPU count, true captions."""
import matplotlib.pyplot as plt
import numpy as np

from memfx.model.plotspec import PlotSpec
from memfx.report import plots

MACHINE = {"caches": [{"level": 1, "type": "Data", "size_bytes": 48 << 10},
                      {"level": 2, "type": "Unified", "size_bytes": 2 << 20}]}


def _pt(arm, median, metric="ns_per_call", unit="ns", **params):
    return {"arm": arm, "params": params, "median": median, "values": [median] * 3,
            "metric": metric, "unit": unit}


def _doc(points, machine=None):
    return {"experiment": "none", "run_id": "t", "machine": machine or {}, "points": points,
            "answers": []}


def _draw(doc, spec):
    fig = plt.figure(figsize=(8, 4))
    ax = fig.add_subplot(1, 1, 1)
    plots.draw_spec(doc, spec, ax)
    fig.canvas.draw()
    return fig, ax


def test_a_rate_spec_draws_bytes_per_ns_and_its_legend_outside_the_data():
    sizes = [1 << k for k in range(4, 22)]
    pts = [_pt(arm, size / gbs, size_bytes=size) for arm, gbs in (("a", 10.0), ("b", 40.0))
           for size in sizes]
    spec = PlotSpec("calls", "t", size_x=True, rate_of="size_bytes", ylabel="GB/s")
    fig, ax = _draw(_doc(pts, MACHINE), spec)
    ys = {ln.get_label(): set(np.round(ln.get_ydata(), 6)) for ln in ax.get_lines()
          if len(ln.get_xdata()) > 2}
    assert ys == {"a": {10.0}, "b": {40.0}}               # size / ns per call = GB/s
    assert ax.get_yscale() == "linear"
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1           # right of the panel
    # cache labels sit above the frame, where no curve goes
    frame = ax.get_window_extent()
    labels = [t for t in ax.texts if t.get_text().endswith("(sysfs)")]
    assert [t.get_text() for t in labels] == ["L1d 48 KiB (sysfs)", "L2 2 MiB (sysfs)"]
    assert all(t.get_window_extent().y0 >= frame.y1 for t in labels)
    # ticked at sizes measured (powers of two in the sweep), no more than 12
    ticks = ax.get_xticks()
    assert 2 <= len(ticks) <= plots.MAX_MEASURED_TICKS and set(ticks) <= set(sizes)
    plt.close(fig)


def test_log_axes_are_ticked_in_plain_numbers():
    pts = [_pt("x", v, threads=t) for t, v in ((1, 14.0), (2, 27.0))]
    spec = PlotSpec("scaling", "t", x="threads", log_y=True)
    fig, ax = _draw(_doc(pts), spec)
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert labels and not any("10^" in t or "times" in t or "\u00d7" in t for t in labels)
    assert list(ax.get_xticks()) == [1, 2]
    assert ax.get_ylabel() == "ns per call"                  # the metric in words
    plt.close(fig)


def test_a_map_of_two_cpus_is_small_labelled_and_says_its_value():
    pts = [_pt("pingpong", 70.4, cpu_a=0, cpu_b=1)]
    spec = PlotSpec("c2c", "transfer", kind="heatmap", x="cpu_a", y_param="cpu_b",
                    symmetric=True, xlabel="CPU", y_axis_label="CPU", ylabel="ns per transfer")
    fig, ax = _draw(_doc(pts), spec)
    (inner,) = [a for a in ax.child_axes if a.get_images()]       # an inset of the panel
    assert inner.get_xlabel() == "CPU" and inner.get_ylabel() == "CPU"
    assert [t.get_text() for t in inner.texts] == ["70.4", "70.4"]     # both orders
    side = inner.get_window_extent().height / fig.dpi
    assert side < 0.6 + 2 * plots.PAIR_CELL_INCHES + 0.01
    many = [_pt("pingpong", 70.0 + a + b, cpu_a=a, cpu_b=b) for a in range(6) for b in range(a + 1, 6)]
    fig2, ax2 = _draw(_doc(many), spec)
    (inner2,) = [a for a in ax2.child_axes if a.get_images()]
    assert inner2.get_window_extent().height > inner.get_window_extent().height
    plt.close(fig)
    plt.close(fig2)


def test_a_heatmap_labels_its_y_axis():
    pts = [_pt("m", 1.0 + s + o, store_bytes=s, load_offset=o) for s in (4, 8) for o in (0, 4)]
    spec = PlotSpec("matrix", "t", kind="heatmap", x="load_offset", y_param="store_bytes",
                    xlabel="load offset (bytes)", y_axis_label="store size (bytes)")
    fig, ax = _draw(_doc(pts), spec)
    assert ax.get_ylabel() == "store size (bytes)" and ax.get_xlabel() == "load offset (bytes)"
    plt.close(fig)


def test_the_caption_names_only_what_the_figure_draws(monkeypatch):
    curve = PlotSpec("c", "t", size_x=True)
    monkeypatch.setattr(plots, "_declared_plots", lambda doc: (curve,))
    pts = [_pt("a", 1.0 + i, size_bytes=4096 << i) for i in range(3)]
    assert "shaded" in plots.caption(_doc(pts, MACHINE))
    assert "shaded" not in plots.caption(_doc(pts))              # no cache sizes: no bands
    bars = PlotSpec("b", "t", kind="bars", x="arm")
    monkeypatch.setattr(plots, "_declared_plots", lambda doc: (bars,))
    text = plots.caption(_doc([_pt("a", 1.0, n=1)]))
    assert "bars" in text.lower() and "dots" not in text and "shaded" not in text


def test_metric_names_in_words():
    assert plots.metric_words("ns_per_increment", "ns") == "ns per increment"
    assert plots.metric_words("gb_per_s", "GB/s") == "GB/s"
    assert plots.spread_ticks([8, 16, 32, 56, 64, 128]) == [8, 16, 32, 56, 128]


# ---- plots that show the answer (issue 42, item 5) ----------------------------

COPY_SIZES = [1 << k for k in range(3, 23)]


def copy_doc():
    """A copy-like document: three strategies over sizes (dense below 1 KiB,
    then one size per octave), and the analysis's best-per-size answer:
    "a" up to 1 KiB, "b" above (a detail of kind "ranges")."""
    sizes = [8 * k for k in range(1, 129)] + [1 << k for k in range(11, 23)]
    speed = {"a": lambda s: 40.0 if s <= 1024 else 5.0, "b": lambda s: 10.0 if s <= 1024 else 30.0,
             "c": lambda s: 2.0}
    pts = [_pt(arm, size / speed[arm](size), op="copy", mode="throughput", size_bytes=size)
           for arm in speed for size in sizes]
    ranges = [{"strategy": "a", "min_size": 8, "max_size": 1024},
              {"strategy": "b", "min_size": 2048, "max_size": 1 << 22}]
    answer = {"question": "copy.best_strategy", "verdict": "measured", "value": 2.0,
              "details": [{"kind": "ranges", "op": "copy", "mode": "throughput",
                           "ranges": ranges},
                          {"kind": "ranges", "op": "set", "mode": "throughput",
                           "ranges": [{"strategy": "c", "min_size": 8, "max_size": 1 << 22}]}]}
    doc = _doc(pts, MACHINE)
    doc["answers"] = [answer]
    return doc


COPY_SPEC = PlotSpec("calls", "t", series=("arm",), facets=("op", "mode"), size_x=True,
                     rate_of="size_bytes")


def _envelope(ax):
    from matplotlib.collections import LineCollection
    return [c for c in ax.collections if isinstance(c, LineCollection)]


def test_the_copy_plot_draws_the_answer_as_the_envelope():
    doc = copy_doc()
    fig = plots.new_figure((8, 3), 80)
    ax = fig.add_subplot(1, 1, 1)
    plots.draw_spec(doc, COPY_SPEC, ax, {"op": "copy", "mode": "throughput"},
                    COPY_SPEC.panels(doc)[0][1])
    (band,) = _envelope(ax)
    # the band passes through the answer's strategy at each size: "a"'s
    # 40 GB/s up to 1 KiB, "b"'s 30 GB/s above, never "c"
    on_band = {(round(x), round(y, 6)) for x, y in ax._memfx_envelope}
    assert on_band == ({(8 * k, 40.0) for k in range(1, 129)}
                       | {(1 << k, 30.0) for k in range(11, 23)})
    # the set detail (op set) is not drawn on the copy panel
    assert not any(y == 2.0 for _, y in ax._memfx_envelope)
    # above 1 KiB the sizes are an octave apart: no segment joins them
    segments = band.get_segments()
    assert all(max(s[:, 0]) <= 1024 for s in segments)
    assert "fastest strategy at each size" in plots.caption(
        dict(doc, plots=[COPY_SPEC.to_dict()]))


def test_every_series_has_its_own_colour_and_line_style():
    arms = [f"s{i:02d}" for i in range(11)]
    pts = [_pt(arm, 1.0 + i, size_bytes=size) for i, arm in enumerate(arms) for size in COPY_SIZES]
    fig, ax = _draw(_doc(pts), PlotSpec("calls", "t", size_x=True))
    lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
    assert len(lines) == len(arms)
    colours = [ln.get_color() for ln in lines]
    styles = [str(ln.get_linestyle()) + str(ln.get_dashes() if hasattr(ln, "get_dashes") else "")
              for ln in lines]
    assert len(set(colours)) == len(arms)
    assert len({(str(ln._dash_pattern), ln.get_linestyle()) for ln in lines}) == len(arms), styles
    # the legend reads at the report's 80 dpi: at least nine pixels a line
    texts = ax.get_legend().get_texts()
    assert min(t.get_fontsize() for t in texts) * 80 / 72 >= 9.5
    plt.close(fig)


def test_sparse_points_are_markers_not_straight_lines_across_octaves():
    # dense (every 8 B) below 256 B, then one size per octave
    xs = [8 * k for k in range(1, 33)] + [512, 1024, 2048, 4096]
    gx, gy = plots.joined(xs, [1.0] * len(xs), log=True)
    breaks = [i for i, x in enumerate(gx) if x != x]
    assert len(breaks) == 1 + 4           # 8->16 (x2), and each octave from 256 up
    assert plots.joined([1, 2, 3, 4], [1, 1, 1, 1], log=False)[0] == [1, 2, 3, 4]
    assert sum(1 for x in plots.joined([0, 1, 62], [1, 1, 1], log=False)[0] if x != x) == 1
    # the drawn line keeps one value per point (readers of the figure)
    pts = [_pt("a", 1.0, size_bytes=x) for x in xs]
    fig, ax = _draw(_doc(pts), PlotSpec("calls", "t", size_x=True))
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "a"]
    assert list(line.get_xdata()) == xs
    plt.close(fig)


def test_ticks_and_texts_never_overlap():
    from plot_checks import text_overlaps
    # offsets 0, 1 and 2000 on a linear axis: 0 and 1 print over each other
    pts = [_pt(arm, 1.0 + o / 100, offset=o) for arm in ("4 line", "4 page") for o in (0, 1, 2000)]
    fig = plots.figure_for(_doc(pts), dpi=80)
    ax = fig.axes[0]
    assert text_overlaps(fig) == []
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert "0" in labels and "2000" in labels and "1" not in labels
    # a copy figure: cache labels, marks, legends, four panels
    doc = copy_doc()
    doc["plots"] = [COPY_SPEC.to_dict()]
    assert text_overlaps(plots.figure_for(doc, dpi=80)) == []


def test_cache_labels_clear_the_axis_label_and_each_other():
    """Few sizes from just under L1d to far past L3 (a quick bandwidth
    sweep): L1d's label would end left of the frame, over the y label, and
    L1d's and L2's meet; three panels a row make them narrow."""
    from plot_checks import text_overlaps
    machine = {"caches": MACHINE["caches"] + [{"level": 3, "type": "Unified",
                                                "size_bytes": 300 << 20}]}
    sizes = [16 << 10, 768 << 10, 112 << 20, 600 << 20]
    specs = [PlotSpec(f"p{i}", f"kind {i}: GB/s vs working set", select={"kind": i}, size_x=True,
                      ylabel="GB/s") for i in range(3)]
    pts = [dict(_pt("bw", 10.0, kind=i, size_bytes=s), metric="gb_per_s", unit="GB/s")
           for i in range(3) for s in sizes]
    doc = dict(_doc(pts, machine), plots=[s.to_dict() for s in specs])
    fig = plots.figure_for(doc, dpi=80)
    assert len(fig.axes) == 3 and text_overlaps(fig) == []
    for ax in fig.axes:
        frame = ax.get_window_extent()
        (l1,) = [t for t in ax.texts if t.get_text().startswith("L1d")]
        assert l1.get_window_extent().x0 >= frame.x0 - 1        # not over the y label
