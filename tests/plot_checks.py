"""What a matplotlib figure shows, for tests that check a plot's content
rather than the size of the file it was saved to."""
from matplotlib.collections import PathCollection
from matplotlib.image import AxesImage
from matplotlib.patches import Polygon, Rectangle


def axes_summary(ax):
    """The data-bearing artists of one Axes, counted and labelled."""
    lines = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 0]
    scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
    legend = ax.get_legend()
    return {
        "ax": ax,
        "title": ax.get_title(),
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "xscale": ax.get_xscale(),
        "yscale": ax.get_yscale(),
        # a curve has more than the two points of an axvline/axhline
        "curves": [ln for ln in lines if len(ln.get_xdata()) > 2],
        "curve_labels": [ln.get_label() for ln in lines
                         if len(ln.get_xdata()) > 2 and not ln.get_label().startswith("_")],
        "scatter_points": sum(len(c.get_offsets()) for c in scatters),
        # axvspan draws a Rectangle (matplotlib >= 3.9) or a Polygon (older)
        "bands": [p for p in ax.patches if isinstance(p, (Polygon, Rectangle))],
        "texts": [t.get_text() for t in ax.texts],
        "legend": [t.get_text() for t in legend.get_texts()] if legend else [],
        "images": [im for im in ax.get_images() if isinstance(im, AxesImage)],
    }


def figure_summary(fig):
    return [axes_summary(ax) for ax in fig.axes]


def band_span(patch):
    """(low, high) in data x of a band drawn with axvspan."""
    if isinstance(patch, Rectangle):
        x, width = patch.get_x(), patch.get_width()
        return min(x, x + width), max(x, x + width)
    xs = [x for x, _ in patch.get_xy()]
    return min(xs), max(xs)


def _texts(fig):
    """Every visible, non-empty piece of text the figure draws: titles, axis
    and tick labels (within the view), annotations, legend entries."""
    out = [t for t in fig.texts]
    for ax in fig.axes + [c for a in fig.axes for c in a.child_axes]:
        if not ax.get_visible() or not ax.axison and not ax.texts and not ax.get_legend():
            continue
        out += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label]
        out += list(ax.texts)
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            out += [t.label1 for loc, t in zip(axis.get_majorticklocs(), axis.get_major_ticks())
                    if lo - 1e-9 * abs(lo) <= loc <= hi + 1e-9 * abs(hi)]
        legend = ax.get_legend()
        if legend is not None:
            out += list(legend.get_texts())
    return [t for t in out if t.get_visible() and t.get_text().strip()]


def text_overlaps(fig, tolerance=0.5):
    """Pairs of texts whose drawn extents overlap by more than ``tolerance``
    pixels each way, as [(text, text)], measured with the figure's renderer
    after drawing it (an empty list: nothing prints over anything)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in _texts(fig)]
    out = []
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1:]:
            w = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
            h = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
            if w > tolerance and h > tolerance:
                out.append((a, b))
    return out
