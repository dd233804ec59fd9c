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
