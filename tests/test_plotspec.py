"""One drawing path: every experiment declares its plots as PlotSpecs
(plotspec.py) and plots.py draws them without knowing any experiment."""
import inspect

import pytest

from memfx.experiments import all_experiments
from memfx.model.plotspec import Mark, PlotSpec
from memfx.report import plots


@pytest.mark.parametrize("exp", all_experiments(), ids=lambda e: e.name)
def test_every_experiment_declares_its_plots_as_plotspecs(exp):
    assert exp.plots, f"{exp.name} declares no plot"
    assert all(isinstance(spec, PlotSpec) for spec in exp.plots)
    assert len({spec.name for spec in exp.plots}) == len(exp.plots)
    ids = {q.id for q in exp.questions}
    for spec in exp.plots:
        for mark in spec.marks:
            assert isinstance(mark, Mark)
            # a mark reads a question the experiment declares
            assert any(mark.asks(q) for q in ids), (spec.name, mark.question)


def test_plots_module_knows_no_experiment():
    source = inspect.getsource(plots)
    assert not hasattr(plots, "PLOTTERS") and "@plotter" not in source
    for exp in all_experiments():
        assert f'"{exp.name}"' not in source, exp.name


def _doc(points, answers=()):
    return {"experiment": "none", "run_id": "t", "machine": {}, "points": points,
            "answers": list(answers)}


def _pt(arm, median, **params):
    return {"arm": arm, "params": params, "median": median, "values": [median] * 3,
            "metric": "ns_per_call", "unit": "ns"}


def test_facets_wrap_dashed_controls_and_marks():
    spec = PlotSpec("p", "t", x="offset", x_wrap=4096, facets=("size_bytes",),
                    facet_title="{size_bytes} B", dashed=":c", dashed_label=" control",
                    marks=(Mark("q.bands", details=True, at="bands[].span", facet=("size_bytes",),
                                band=True),
                           Mark("q.line", details=True, where={"verdict": "detected"},
                                label="at {x}")))
    pts = [_pt(a, 1.0 + o / 1000, offset=o, size_bytes=s) for s in (2048, 256)
           for o in (0, 8, 4088) for a in ("v", "v:c")]
    answers = [{"question": "q.bands", "verdict": "detected",
                "details": [{"size_bytes": 256, "bands": [{"span": [1, 9]}]}]},
               {"question": "q.line", "verdict": "measured",
                "details": [{"verdict": "detected", "value": 64},
                            {"verdict": "not_detected", "value": 128}]}]
    doc = _doc(pts, answers)
    panels = spec.panels(doc)
    assert [(f, len(p)) for f, p in panels] == [({"size_bytes": 256}, 6), ({"size_bytes": 2048}, 6)]
    assert spec.panel_title(panels[0][0]) == "256 B"
    assert sorted(spec.x_of(p) for p in panels[0][1] if p["arm"] == "v") == [-8, 0, 8]
    (band,) = spec.marks[:1]
    assert band.items(doc, {"size_bytes": 256}) == [((1, 9), "")]
    assert band.items(doc, {"size_bytes": 2048}) == []
    assert plots.spec_marks(doc, spec) == [(64, "at 64 B", "-")]
    import matplotlib.pyplot as plt

    from plot_checks import figure_summary
    fig = plt.figure()
    ax = fig.add_subplot(1, 1, 1)
    plots.draw_spec(doc, spec, ax, *panels[0])
    (s,) = figure_summary(fig)
    assert sorted(s["curve_labels"]) == ["v", "v control"]
    assert len(s["bands"]) == 1 and s["title"] == "256 B"
    plt.close(fig)


def test_a_document_of_an_unknown_experiment_is_plotted_over_its_first_numeric_parameter():
    """An imported run of an experiment this memfx does not know gets one
    curve per arm; its x axis is the first parameter that is a number at
    every point, not a kernel name that comes first."""
    pts = [{"arm": arm, "params": {"kernel": "k_avx2", "size_bytes": size, "pages": "4k"},
            "median": size / 1e9 * (1 + i), "unit": "ns", "metric": "ns_per_load"}
           for i, arm in enumerate(("a", "b")) for size in (4096, 65536, 1 << 20)]
    doc = {"experiment": "from_the_future", "run_id": "r", "machine": {}, "points": pts}
    fig = plots.figure_for(doc)
    axis = fig.axes[0]
    assert axis.get_xscale() == "log"                   # a size axis
    xs = sorted({x for line in axis.get_lines() for x in line.get_xdata()})
    assert xs == [4096, 65536, 1 << 20]


def test_a_part_left_out_of_a_run_gets_no_empty_panel(monkeypatch):
    """A run without one of its experiment's parts (a bandwidth run with
    threads=1 has no scaling points) shows only the panels it measured;
    a run with no point at all still gets one panel that says so."""
    specs = (PlotSpec("a", "measured", x="size_bytes", arms=("m",)),
             PlotSpec("b", "left out", x="threads", arms=("scaling",)))
    monkeypatch.setattr(plots, "_declared_plots", lambda doc: specs)
    doc = _doc([_pt("m", 1.0 + i, size_bytes=4096 << i) for i in range(3)])
    assert [spec.name for spec, _, _ in plots.panels_for(doc)] == ["a"]
    fig = plots.figure_for(doc)
    assert len(fig.axes) == 1 and fig.axes[0].get_title() == "measured"
    import matplotlib.pyplot as plt
    plt.close(fig)
    empty = plots.panels_for(_doc([]))
    assert [(spec.name, pts) for spec, _, pts in empty] == [("a", [])]


@pytest.mark.parametrize("exp", all_experiments(), ids=lambda e: e.name)
def test_every_declared_plot_survives_the_document_as_plain_json(exp):
    import json

    from memfx.model.plotspec import specs_from_dicts
    data = json.loads(json.dumps([spec.to_dict() for spec in exp.plots]))
    assert specs_from_dicts(data) == tuple(exp.plots)


def test_a_plot_entry_of_a_newer_memfx_is_read_or_left_out():
    from memfx.model.plotspec import specs_from_dicts
    spec = PlotSpec("c", "curve", select={"kernel": ("a", "b")}, xlim=(1.0, 2.0),
                    marks=(Mark("q.*_knee", where={"verdict": "detected"}),))
    newer = dict(spec.to_dict(), glow=True)               # a field this memfx does not know
    assert specs_from_dicts([newer, {"name": "v", "title": "t", "kind": "violin"}]) == (spec,)


def test_plots_draw_what_the_document_declares_not_what_the_registry_holds():
    import matplotlib.pyplot as plt
    pts = [_pt("m", 1.0 + i, size_bytes=4096 << i) for i in range(3)]
    declared = PlotSpec("only", "from the document", size_x=True)
    doc = dict(_doc(pts), experiment="latency", plots=[declared.to_dict()])
    fig = plots.figure_for(doc)
    assert [ax.get_title() for ax in fig.axes] == ["from the document"]
    plt.close(fig)
    # a document that declares no plot gets the generic one, not latency's
    fig = plots.figure_for(dict(doc, plots=[]))
    assert len(fig.axes) == 1 and fig.axes[0].get_title().startswith("memfx latency")
    plt.close(fig)


def test_a_document_before_version_4_gets_its_experiments_plots_from_the_analysis():
    from memfx.analysis.documents import plots_of
    from memfx.experiments import get_experiment
    latency = get_experiment("latency")
    assert plots_of({"experiment": "latency"}) == [s.to_dict() for s in latency.plots]
    assert plots_of({"experiment": "from_the_future"}) == []


def test_best_ranges_are_read_from_the_answer_details_of_the_panel():
    from memfx.model.plotspec import best_ranges
    detail = {"kind": "ranges", "op": "copy", "mode": "throughput",
              "ranges": [{"strategy": "libc", "min_size": 1, "max_size": 64},
                         {"strategy": "rep_movsb", "min_size": 65, "max_size": 4096}]}
    other = dict(detail, op="set", ranges=[{"strategy": "rep_stosb", "min_size": 1,
                                            "max_size": 4096}])
    doc = {"answers": [{"question": "copy.best_strategy", "details": [detail, other,
                                                                      {"kind": "pair"}]}]}
    spec = PlotSpec("calls", "t", series=("arm",), facets=("op", "mode"))
    assert best_ranges(doc, spec, {"op": "copy", "mode": "throughput"}) == [
        {"series": "libc", "low": 1, "high": 64}, {"series": "rep_movsb", "low": 65, "high": 4096}]
    assert [r["series"] for r in best_ranges(doc, spec, {"op": "set", "mode": "throughput"})] == \
        ["rep_stosb"]
    assert best_ranges(doc, spec, {"op": "copy", "mode": "latency"}) == []
    # only panels whose series are the strategies (arms) draw it
    assert best_ranges(doc, PlotSpec("c", "t", series=("arm", "pages")), {"op": "copy"}) == []
    assert best_ranges(doc, PlotSpec("b", "t", kind="bars"), {"op": "copy"}) == []
