"""`memfx report`: one self-contained HTML file a person reads.

The report reads the store, and writes to it only what it derives: a run's
document is the one stored by the current analysis (documents.stored_document),
else the run's samples are analysed through `results.document` and that
document is kept, so a report written today from an old database shows what
the current analysis makes of those samples; a figure, once drawn, is kept
beside its document (see "figures kept in the store").  It works offline:
the CSS is inline, the plots are embedded as PNG data URIs, there is no
script and no external resource.  Every piece of text
that comes from the machine or the database goes through `html.escape`, so a
CPU model string or a parameter value holding markup shows as text.

Sections, in order (their element ids in brackets): the seed questions'
answers as cards and the advice in short [summary] -- the first screen --,
every term the report uses, folded [how-to-read], the round-1 verdicts of
runs without questions [verdicts], the machine with its capabilities
[machine], the tuning advice in full when `memfx advise`
stored some [advice], one section per run [experiments], how to get the raw
data [raw-data]; then the tall lists, each folded in a <details>: every
answer [answers], the noise warnings [warnings], and what the preset traded
away with every run's parameters [presets].

The pieces live in html.py (formatting, tables, CSS),
sections.py (the sections) and advice.py (the advice).
"""
from __future__ import annotations

import base64
import io
import os
import re
import time
from dataclasses import dataclass, field

from ..model.errors import MemfxError, StoreError
from ..model.forking import fork_map
from .advice import (  # noqa: F401
    ADVICE_ARTIFACT,
    advice_html,
    advice_summary_html,
    find_advice,
    first_screen_advice_html,
)
from .html import (  # noqa: F401
    CSS,
    SEED_TITLES,
    VERDICT_LABELS,
    code,
    duration_text,
    e,
    exact_bytes_text,
    json_html,
    kv_table,
    param_text,
    seed_text,
    status_label,
    table,
)
from .sections import (  # noqa: F401
    GROUP_MIN,
    MAX_TABLE_ROWS,
    answers_html,
    experiments_html,
    export_command,
    group_findings,
    header_html,
    machine_html,
    params_section_html,
    points_html,
    raw_html,
    summary_html,
    verdicts_html,
    warnings_html,
)

# Plots are PNGs of this resolution (a 14-inch figure is 1,120 px wide, the
# width of the page's column), reduced to a palette of at most this many
# colours: a quick survey's fourteen figures then weigh well under a MB.
PLOT_DPI = 80
PLOT_COLOURS = 128
# zlib level of the PNGs: 9 takes twice as long for a tenth less
PNG_LEVEL = 6


@dataclass
class Selection:
    """What a report covers: surveys (each with its runs) and the runs, in
    the order they are shown."""
    surveys: list = field(default_factory=list)
    runs: list = field(default_factory=list)       # store.run() dicts, with machine


def resolve(store, ids) -> Selection:
    """Survey ids, run ids, unique prefixes or "latest" -> a Selection.

    No ids: the latest survey; when the store holds no survey, the latest run
    of each experiment.  An unknown id is a StoreError (one line)."""
    sel = Selection()
    seen = set()

    def add_run(run_id):
        if run_id not in seen:
            seen.add(run_id)
            sel.runs.append(store.run(run_id))

    def add_survey(survey):
        if survey["id"] in {s["id"] for s in sel.surveys}:
            return
        sel.surveys.append(survey)
        # store.runs() is newest first; a survey reads best in the order it ran.
        for run in reversed(survey["runs"]):
            add_run(run["id"])

    ids = [i for i in (ids or []) if i is not None]
    if not ids:
        surveys = store.surveys()
        if surveys:
            add_survey(store.survey(surveys[0]["id"]))
        else:
            latest: dict[str, dict] = {}
            for run in store.runs():            # newest first
                latest.setdefault(run["experiment"], run)
            if not latest:
                raise StoreError(f"no runs in {store.path} (run `memfx survey` or `memfx run latency`)")
            for run in sorted(latest.values(), key=lambda r: (r["started"] or "", r["id"])):
                add_run(run["id"])
        return sel
    for key in ids:
        key = str(key)
        survey, run, survey_error = None, None, None
        try:
            survey = store.survey(key)
        except StoreError as err:
            survey_error = err
        if survey is None:
            try:
                run = store.run(key)
            except StoreError as run_error:
                if "ambiguous" in str(run_error):
                    raise
                if survey_error is not None and "ambiguous" in str(survey_error):
                    raise survey_error from None
                raise StoreError(f"no survey or run {key!r} in {store.path} "
                                 f"(see `memfx runs`)") from None
        if survey is not None:
            add_survey(survey)
        else:
            add_run(run["id"])
    if not sel.runs and not sel.surveys:
        raise StoreError(f"nothing to report in {store.path}")
    return sel


@dataclass
class RunView:
    run: dict
    doc: dict | None
    analysis_error: str | None
    experiment: object | None      # documents.ExperimentAbout, if the experiment is known
    anchor: str
    plot: str | None = None        # the figure's HTML, once drawn (see draw_views)


def _anchor(run, index) -> str:
    return f"run-{index + 1}-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", str(run["id"]))


def _document(run, samples):
    """(document with values, None), or (None, what went wrong): a broken run
    must not take the whole report down (a MemfxError does)."""
    from ..analysis.results import document
    try:
        return document(run, samples, include_values=True), None
    except MemfxError:
        raise
    except Exception as err:
        return None, f"{type(err).__name__}: {err}"


# ---- plots ------------------------------------------------------------------

def png_bytes(fig) -> bytes:
    """The figure as a small PNG: rendered once at PLOT_DPI, its pixels
    reduced to a palette (plots are flat colours, lines and faint dots) and
    encoded once.  The palette is median cut's, made from a quarter of the
    pixels in half its time (the fast octree method drops faint colours: a
    shaded band vanished)."""
    try:
        from PIL import Image
    except ImportError:          # matplotlib depends on Pillow; a full PNG if absent
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=PLOT_DPI, metadata={"Software": None})
        return buf.getvalue()
    fig.set_dpi(PLOT_DPI)
    fig.canvas.draw()
    rgba = fig.canvas.buffer_rgba()
    w, h = fig.canvas.get_width_height()
    im = Image.frombuffer("RGBA", (w, h), rgba, "raw", "RGBA", 0, 1).convert("RGB")
    # the palette: median cut over every other pixel of every other row
    # (picked, not averaged: black text stays black), each pixel mapped to it
    sample = im.resize((max(1, w // 2), max(1, h // 2)), Image.Resampling.NEAREST)
    palette = sample.quantize(colors=PLOT_COLOURS, method=Image.Quantize.MEDIANCUT,
                              dither=Image.Dither.NONE)
    out = io.BytesIO()
    im.quantize(palette=palette, dither=Image.Dither.NONE).save(out, format="PNG",
                                                                compress_level=PNG_LEVEL)
    return out.getvalue()


def _figure(doc):
    """(data URI, width, height, caption) of the run's plot."""
    from . import plots

    def save(fig):
        data = png_bytes(fig)
        w, h = (int(round(v * PLOT_DPI)) for v in fig.get_size_inches())
        return "data:image/png;base64," + base64.b64encode(data).decode("ascii"), w, h
    # the section's heading names the run: the figure needs no title of its own
    uri, w, h = plots.draw(doc, save, dpi=PLOT_DPI, title=False)
    return uri, w, h, plots.caption(doc)


def _plot(run, doc) -> str:
    """The HTML of a run's figure (or of why there is none)."""
    if doc is None:
        return ""
    if not any(p.get("median") is not None for p in doc["points"]):
        return '<p class="note">No samples were stored for this run, so there is nothing to plot.</p>'
    try:
        uri, w, h, caption = _figure(doc)
    except Exception as err:
        return f'<p class="note">The plot could not be drawn: {e(type(err).__name__)}: {e(err)}</p>'
    alt = f"plot of run {run['id']} ({run['experiment']})"
    return (f'<figure><img src="{uri}" width="{w}" height="{h}" alt="{e(alt)}">'
            + (f'<figcaption>{e(caption)}</figcaption>' if caption else "") + '</figure>')


def plot_html(view) -> str:
    """The view's figure: as drawn by draw_views, else drawn now."""
    return view.plot if view.plot is not None else _plot(view.run, view.doc)


def _run_task(task):
    """(document, analysis error, figure HTML) of one run: analysed first when
    no document came with it (task: run, document or None, samples)."""
    run, doc, samples = task
    error = None
    if doc is None:
        doc, error = _document(run, samples)
    return doc, error, _plot(run, doc)


# ---- drawing in parallel ------------------------------------------------------------
# Drawing is matplotlib's Python, one CPU per figure: the figures of a
# survey are drawn by forked processes (forking.fork_map), one per CPU, each
# figure once; a worker sends back text and never touches the store.

def _pooled(task):
    """_run_task in a worker; a document that came with the task stays
    where it is (only one analysed here goes back)."""
    doc, error, plot = _run_task(task)
    return (None if task[1] is not None else doc), error, plot


def _cost(task) -> int:
    """How long a task takes, roughly: its samples (and points) to draw."""
    run, doc, samples = task
    if doc is None:
        return len(samples or ())
    return sum(len(p.get("values") or ()) + 50 for p in doc.get("points") or ())


def run_tasks(tasks, jobs=None) -> list:
    """_run_task over the tasks, in up to ``jobs`` forked processes
    (forking.fork_map; default: one per CPU), the costliest first."""
    from . import plots  # noqa: F401 -- imported once, here, not in every worker
    out = fork_map(_pooled, tasks, jobs, cost=_cost)
    return [((task[1] if doc is None else doc), error, plot)
            for task, (doc, error, plot) in zip(tasks, out)]


# ---- figures kept in the store --------------------------------------------------
# Drawing is most of a report's time, and a figure depends only on its run's
# document and on the code that draws it.  So a drawn figure's HTML is kept
# beside the run's stored document (store.save_derived: a row of the
# analyses table, deleted with the document) under a name made of the
# analysis key (a hash of memfx's sources, the drawing code included) and
# matplotlib's version, with a digest of the document it was drawn from: a
# report of stored documents then draws nothing, and imports no matplotlib.

FIGURE_FORMAT = 1


def figure_name() -> str:
    """The name a figure is kept under: what drew it."""
    from importlib.metadata import PackageNotFoundError, version

    from ..analysis.answer_cache import analysis_key
    try:
        mpl = version("matplotlib")
    except PackageNotFoundError:
        mpl = "?"
    return f"figure:{FIGURE_FORMAT}:{analysis_key()}:mpl-{mpl}"


def document_digest(doc) -> str:
    """A digest of what a figure shows of a document: the run's state, its
    points (medians and sample counts) and its answers."""
    import hashlib
    import json
    points = [(p.get("arm"), p.get("params"), p.get("median"), len(p.get("values") or ()))
              for p in doc.get("points") or ()]
    answers = [(a.get("question"), a.get("verdict"), a.get("value"), a.get("details"))
               for a in doc.get("answers") or ()]
    head = [doc.get(k) for k in ("run_id", "experiment", "status", "finished", "labels",
                                 "plots", "schema")]
    text = json.dumps([head, points, answers], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def kept_figure(store, run, doc, name):
    """The figure HTML kept for this document, or None."""
    read = getattr(store, "derived", None)
    if read is None or doc is None:
        return None
    kept = read(run["id"], name)
    if not isinstance(kept, dict) or kept.get("of") != document_digest(doc):
        return None
    html = kept.get("html")
    return html if isinstance(html, str) else None


def keep_figure(store, run, doc, name, html) -> None:
    """Keep a drawn figure (not a run's that may still change, nor an error
    message: a failed drawing is tried again)."""
    from ..model.status import RUNNING
    save = getattr(store, "save_derived", None)
    if (save is None or doc is None or run.get("status") == RUNNING
            or not html.startswith("<figure")):
        return
    save(run["id"], name, {"of": document_digest(doc), "html": html})


def draw_views(store, runs, documents=None, jobs=None) -> list:
    """The runs' views with their figures drawn; a run without a document
    in ``documents`` takes its stored one (documents.stored_document), else
    is analysed from its stored samples (read here, in this process) along
    with its drawing, and that document is stored (documents.keep_document).
    A figure kept for the same document is read, not drawn (see above)."""
    from ..analysis.documents import experiment_about, keep_document, stored_document
    documents = dict(documents or {})
    for run in runs:
        if run["id"] not in documents:
            stored = stored_document(store, run)
            if stored is not None:
                documents[run["id"]] = stored
    name = figure_name()
    kept = {run["id"]: kept_figure(store, run, documents.get(run["id"]), name) for run in runs}
    todo = [run for run in runs if kept[run["id"]] is None]
    tasks = [(run, documents.get(run["id"]),
              None if run["id"] in documents else store.samples(run["id"])) for run in todo]
    drawn = dict(zip([run["id"] for run in todo], run_tasks(tasks, jobs) if tasks else []))
    views = []
    for i, run in enumerate(runs):
        if run["id"] in drawn:
            doc, error, plot = drawn[run["id"]]
            if run["id"] not in documents and doc is not None:
                keep_document(store, run, doc)
            if plot is not None and error is None:
                keep_figure(store, run, doc, name, plot)
        else:
            doc, error, plot = documents[run["id"]], None, kept[run["id"]]
        views.append(RunView(run, doc, error, experiment_about(doc, run["experiment"]),
                             _anchor(run, i), plot))
    return views


# ---- the page -----------------------------------------------------------------

def build_report(store, ids, documents=None, jobs=None) -> str:
    """The report's HTML for the given survey/run ids (see `resolve`);
    ``documents``: run documents (with values) already made, by run id;
    ``jobs``: processes that draw the figures (default: one per CPU).
    Changes no run: a run left `running` by a killed survey shows as
    running here (`memfx runs` marks such runs interrupted); what it writes
    is derived (documents and figures, see draw_views)."""
    from ..model.version import __version__
    sel = resolve(store, ids)
    views = draw_views(store, sel.runs, documents, jobs)
    from ..model.outputs import default_db_path
    try:
        same_db = os.path.abspath(store.path) == os.path.abspath(default_db_path())
    except Exception:
        same_db = False
    db_arg = None if same_db else str(store.path)
    generated = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    advice = find_advice(store, views)
    title = "memfx report — " + (", ".join(s["id"] for s in sel.surveys) or
                                 f"{len(views)} run(s)")
    answers_section = answers_html(views)
    warnings_section = warnings_html(views)
    legacy_views = [v for v in views if not (v.doc or {}).get("answers")]
    nav = ['<nav aria-label="sections"><ul>', '<li><a href="#summary">Summary</a></li>',
           '<li><a href="#how-to-read">How to read this</a></li>']
    if legacy_views or not answers_section:
        nav.append('<li><a href="#verdicts">Verdicts</a></li>')
    nav.append('<li><a href="#machine">Machine</a></li>')
    if advice:
        nav.append('<li><a href="#advice">Advice</a></li>')
    nav.append('<li><a href="#experiments">Experiments</a>: '
               + ", ".join(f'<a href="#{e(v.anchor)}">{e(v.run["experiment"])}</a>' for v in views)
               + "</li>")
    nav.append('<li><a href="#raw-data">Raw data</a></li>')
    # the tall lists come last, folded
    if answers_section:
        nav.append('<li><a href="#answers">Every answer</a></li>')
    if warnings_section:
        nav.append('<li><a href="#warnings">Noise warnings</a></li>')
    nav.append('<li><a href="#presets">Presets and parameters</a></li></ul></nav>')
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{e(title)}</title>", f"<style>{CSS}</style>", "</head>", "<body>",
             header_html(sel, views, store, generated, __version__),
             "<main>", summary_html(views, first_screen_advice_html(advice, views)),
             how_to_read_html(),
             "\n".join(nav),
             verdicts_html(legacy_views) if legacy_views or not answers_section else "",
             machine_html(views)]
    if advice:
        parts.append(advice_html(advice, views))
    parts += [experiments_html(views, db_arg, plot_html), raw_html(views, sel, db_arg),
              answers_section, warnings_section, params_section_html(sel, views), "</main>",
              f'<footer><p class="dim">Written by memfx {e(__version__)} from {e(store.path)}; '
              f'no measurement was made to write it.</p></footer>', "</body>", "</html>", ""]
    return "\n".join(parts)


def how_to_read_html() -> str:
    """Every term the report uses, folded under the first screen (the
    glossary's one source: glossary.py, as docs/glossary.md)."""
    from .glossary import html_fold
    return f'<section id="how-to-read"><h2>How to read this report</h2>{html_fold()}</section>'


def write_report(store, ids, path, documents=None, jobs=None) -> str:
    """Write the report of `ids` (survey or run ids/prefixes; empty = latest
    survey) to `path`; returns the path.  Written to a temporary file first,
    so an existing report is replaced whole or not at all."""
    path = str(path or "memfx-report.html")
    text = build_report(store, ids, documents, jobs)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as err:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise MemfxError(f"cannot write report to {path}: {err.strerror or err}") from None
    return path
