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
