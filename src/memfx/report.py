"""`memfx report`: one self-contained HTML file a person reads.

The report reads only the store: every run's stored samples are re-analysed
through `results.document`, so a report written today from an old database
shows what the current analysis makes of those samples.  It works offline:
the CSS is inline, the plots are embedded as data URIs, there is no script
and no external resource.  Every piece of text that comes from the machine or
the database goes through `html.escape`, so a CPU model string or a parameter
value holding markup shows as text.

Sections, in order (their element ids in brackets): the verdicts of every
finding [verdicts], the machine with its capabilities and noise warnings
[machine], the tuning advice when `memfx advise` stored some [advice], one
section per run [experiments], and how to get the raw data [raw-data].
"""
from __future__ import annotations

import base64
import calendar
import html
import io
import json
import math
import os
import re
import shlex
import time
from dataclasses import dataclass, field

from .errors import MemfxError, StoreError
from .units import format_size

# Short titles of the seed stories in shared/seeds (the DESIGN.md table).
SEED_TITLES = {
    "000": "hardware store elimination",
    "001": "strong prefetch",
    "002": "rep movs/stos vs loops & 4K aliasing",
    "003": "store forwarding (a tale of two copies)",
    "004": "Drepper, what every programmer should know about memory",
}

VERDICT_LABELS = {"detected": "detected", "not_detected": "not detected",
                  "inconclusive": "inconclusive", "measured": "measured",
                  "not_measured": "not measured"}

# A key table longer than this shows evenly spaced rows over the sweep and
# says where the rest is; a reader wants the shape, the export has it all.
MAX_TABLE_ROWS = 60
# An SVG with many thousands of samples gets heavy; past this size the plot
# is embedded as a PNG instead.
MAX_SVG_BYTES = 1_500_000
ADVICE_ARTIFACT = "advice"

PLOT_CAPTION = ("Faint dots: every accepted sample. Lines: medians. Shaded bands on size axes: "
                "the cache capacities the OS reports (sysfs).")


def e(value) -> str:
    """Escaped text of any value (also safe inside double-quoted attributes)."""
    return html.escape("" if value is None else str(value), quote=True)


# ---- which runs -------------------------------------------------------------

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
            latest = {}
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


# ---- one run, analysed ------------------------------------------------------

@dataclass
class RunView:
    run: dict
    doc: dict | None
    analysis_error: str | None
    experiment: object | None      # the registered Experiment, if this memfx knows it
    anchor: str


def _analyse(store, run, index, documents=None) -> RunView:
    """The run's view; its document from ``documents`` ({run id: document
    with values}) when the caller analysed it already (the survey does)."""
    from .experiments import get_experiment
    from .results import document
    exp = get_experiment(run["experiment"], missing_ok=True)
    anchor = f"run-{index + 1}-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", str(run["id"]))
    try:
        doc = (documents or {}).get(run["id"])
        if doc is None:
            doc = document(run, store.samples(run["id"]), include_values=True)
        return RunView(run, doc, None, exp, anchor)
    except MemfxError:
        raise
    except Exception as err:   # a broken run must not take the whole report down
        return RunView(run, None, f"{type(err).__name__}: {err}", exp, anchor)


# ---- text formatting --------------------------------------------------------

def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def num(v) -> str:
    """A number for people: 3 significant digits, thousands grouped."""
    if v is None:
        return "–"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if not math.isfinite(v):
        return "n/a"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10000 else str(v)
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if v == 0:
        return "0"
    return f"{v:.3g}"


_BINARY_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def bytes_text(v) -> str:
    """Bytes as binary K/M/G sizes: 49152 -> '48 KiB', 888373 -> '867.6 KiB',
    25276502016 -> '23.5 GiB'."""
    if not _finite(v):
        return num(v)
    n = int(round(v))
    for unit, factor in _BINARY_UNITS:
        if abs(n) >= factor:
            if n % factor == 0:
                return f"{n // factor} {unit}"
            text = f"{n / factor:.1f}"
            return f"{text[:-2] if text.endswith('.0') else text} {unit}"
    return f"{n} B"


def exact_bytes_text(v) -> str:
    """Like bytes_text, with the exact count when the short form is rounded
    (thresholds are compared byte for byte)."""
    short = bytes_text(v)
    return f"{short} ({int(v):,} B)" if "." in short else short


def value_text(v, unit) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return num(v)
    unit = unit or ""
    if unit == "bytes" and _finite(v):
        return bytes_text(v)
    if unit in ("x", "ratio") and _finite(v):
        return f"{num(v)}×"
    return f"{num(v)} {unit}".strip()


def ci_text(lo, hi, unit) -> str:
    if lo is None or hi is None:
        return "–"
    return f"{value_text(lo, unit)} – {value_text(hi, unit)}"


def duration_text(seconds) -> str:
    if not _finite(seconds):
        return "unknown"
    if seconds < 60:
        return f"{seconds:.1f} s"
    m, s = divmod(int(round(seconds)), 60)
    return f"{m} min {s:02d} s" if m < 60 else f"{m // 60} h {m % 60:02d} min"


def _params_of(exp) -> dict:
    """{name: Param} of a registered experiment ({} when unknown)."""
    if exp is None:
        return {}
    try:
        return {p.name: p for p in exp.all_params()}
    except Exception:
        return {}


def _kind(params, name) -> str:
    p = params.get(name)
    return getattr(p, "kind", "") or ""


def param_text(name, value, kind="") -> str:
    """A parameter value for people; kind is the Param kind (sizes as K/M)."""
    kind = kind or ""
    if isinstance(value, (list, tuple)):
        inner = kind[5:] if kind.startswith("list:") else ""
        return ", ".join(param_text(name, v, inner) for v in value)
    if _finite(value) and (kind == "size" or str(name).endswith("_bytes")):
        return bytes_text(value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, bool):
        return "true" if value else "false"      # as --set takes it
    return num(value) if isinstance(value, float) else str(value)


def _first_line(text) -> str:
    lines = [ln.strip() for ln in str(text or "").splitlines() if ln.strip()]
    return lines[0] if lines else ""


def status_label(run) -> tuple[str, str]:
    """(css class, label) of a run's status."""
    status = run.get("status")
    if status == "complete":
        return "ok", "complete"
    if status == "failed":
        return "bad", f"failed: {_first_line(run.get('error')) or 'no error message stored'}"
    if status == "interrupted":
        return "warn", "interrupted: partial results"
    if status == "running":
        return "warn", "running: partial results (not finished when this report was written)"
    return "warn", f"{status}: partial results"


def seed_text(seed) -> str:
    if not seed:
        return "–"
    seed = str(seed)
    title = SEED_TITLES.get(seed)
    return f"{seed} · {title}" if title else seed


# ---- plots ------------------------------------------------------------------

def _figure_data_uri(doc) -> str:
    """The run's plot as a data URI: SVG (text kept as escaped <text>, so a
    label cannot inject markup), PNG when the SVG would be too heavy."""
    from . import plots

    def save(fig):
        buf = io.BytesIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
        data, mime = buf.getvalue(), "image/svg+xml"
        if len(data) > MAX_SVG_BYTES:
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
            data, mime = buf.getvalue(), "image/png"
        return f"data:{mime};base64," + base64.b64encode(data).decode("ascii")
    return plots.draw(doc, save, {"svg.fonttype": "none", "svg.hashsalt": "memfx-report"})


def plot_html(view) -> str:
    doc = view.doc
    if doc is None:
        return ""
    if not any(p.get("median") is not None for p in doc["points"]):
        return '<p class="note">No samples were stored for this run, so there is nothing to plot.</p>'
    try:
        uri = _figure_data_uri(doc)
    except Exception as err:
        return f'<p class="note">The plot could not be drawn: {e(type(err).__name__)}: {e(err)}</p>'
    alt = f"plot of run {view.run['id']} ({view.run['experiment']})"
    return (f'<figure><img src="{uri}" alt="{e(alt)}">'
            f'<figcaption>{e(PLOT_CAPTION)}</figcaption></figure>')


# ---- HTML pieces -------------------------------------------------------------

def table(headers, rows, cls="", caption=None) -> str:
    """headers: escaped here; rows: lists of cells already in HTML."""
    out = [f'<table class="{cls}">' if cls else "<table>"]
    if caption:
        out.append(f"<caption>{caption}</caption>")
    out.append("<thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in headers) + "</tr></thead>")
    out.append("<tbody>")
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def kv_table(rows, cls="kv") -> str:
    """rows: (label, html) pairs."""
    body = "".join(f"<tr><th>{e(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="{cls}"><tbody>{body}</tbody></table>'


def code(text) -> str:
    return f"<code>{e(text)}</code>"


def yes_no(flag) -> str:
    if flag is None:
        return '<span class="dim">unknown</span>'
    return '<span class="yes">yes</span>' if flag else '<span class="no">no</span>'


# Keys of advice-like data in the order a reader wants them: what to set,
# to which value, what it gains and how sure; anything else keeps its place.
_KEY_ORDER = (("summary", "headline"), ("gcc",), ("glibc",),
              ("flag", "option", "tunable", "name", "setting", "strategy", "string"),
              ("value",), ("gain", "speedup"), ("ci",), ("checked", "verified"))


def _reading_order(keys) -> list:
    def rank(key):
        k = str(key).lower()
        return next((i for i, words in enumerate(_KEY_ORDER) if any(w in k for w in words)),
                    len(_KEY_ORDER))
    return sorted(keys, key=rank)       # stable: equal ranks keep their order


def json_html(value, depth=0) -> str:
    """Any JSON value as nested HTML (for data whose shape is not fixed)."""
    if depth > 8:
        return code(json.dumps(value, default=str)[:500])
    if isinstance(value, dict):
        if not value:
            return '<span class="dim">(empty)</span>'
        return kv_table([(k, json_html(value[k], depth + 1)) for k in _reading_order(value)],
                        "kv nested")
    if isinstance(value, list):
        if not value:
            return '<span class="dim">(none)</span>'
        if all(isinstance(x, dict) for x in value):
            cols = []
            for x in value:
                cols.extend(k for k in x if k not in cols)
            cols = _reading_order(cols)
            return table(cols, [[json_html(x.get(c), depth + 1) if c in x else ""
                                 for c in cols] for x in value], "nested")
        return "<ul>" + "".join(f"<li>{json_html(x, depth + 1)}</li>" for x in value) + "</ul>"
    if isinstance(value, str):
        # flags, tunables and environment settings read best as code
        if re.match(r"^(-|GLIBC_TUNABLES|glibc\.)", value) or re.match(r"^[\w.]+=\S", value):
            return code(value)
        return e(value)
    if isinstance(value, bool):
        return yes_no(value)
    return e(num(value))


# ---- sections -----------------------------------------------------------------

def _survey_state(sel, views):
    """(css class, sentence) saying whether what is reported is complete."""
    failed = [v for v in views if v.run.get("status") == "failed"]
    partial = [v for v in views if v.run.get("status") in ("interrupted", "running")]
    if sel.surveys:
        states = {s["status"] for s in sel.surveys}
        if states - {"complete"}:
            worst = "interrupted" if "interrupted" in states else sorted(states - {"complete"})[0]
            why = {"interrupted": "this report shows what was measured before it stopped",
                   "running": "it was still running (or stopped without being marked) when this "
                              "report was written",
                   "failed": "it failed"}.get(worst, worst)
            return "incomplete", f"Survey incomplete ({worst}): {why}."
    if partial or failed:
        parts = []
        if partial:
            parts.append(f"{len(partial)} run(s) interrupted with partial results")
        if failed:
            parts.append(f"{len(failed)} run(s) failed")
        what = "Survey complete" if sel.surveys else "Runs"
        return "incomplete", f"{what}, but " + " and ".join(parts) + "."
    return "complete", ("Survey complete: every experiment finished." if sel.surveys
                        else "Every selected run finished.")


def _preset_differences(view):
    """[(param, value used, full-preset value)] for a run made with a lighter
    preset than full: what that preset traded away."""
    exp, run = view.experiment, view.run
    if exp is None or run.get("preset") in (None, "full"):
        return []
    try:
        full = exp.resolve("full")
    except Exception:
        return []
    params = run.get("params") or {}
    known = _params_of(exp)
    out = []
    for name, used in params.items():
        if name in full and used != full[name] and name != "cpu":
            out.append((name, param_text(name, used, _kind(known, name)),
                        param_text(name, full[name], _kind(known, name))))
    return out


def header_html(sel, views, store, generated, version) -> str:
    state_cls, state = _survey_state(sel, views)
    machines = [v.run.get("machine") for v in views if isinstance(v.run.get("machine"), dict)]
    cpu = ((machines[0].get("cpu") or {}).get("model_name") if machines else None) or "unknown CPU"
    out = ['<header>', '<h1>memfx report</h1>',
           f'<p class="sub">{e(cpu)} · written {e(generated)} by memfx {e(version)} · '
           f'database {code(store.path)}</p>',
           f'<p class="state {state_cls}">{e(state)}</p>']
    rows = []
    for s in sel.surveys:
        span = ""
        if s.get("started") and s.get("finished"):
            span = f" → {e(s['finished'])} ({e(_iso_span(s['started'], s['finished']))})"
        rows.append((f"survey {s['id']}",
                     f"{e(s.get('status'))}, preset {e(s.get('preset'))}, "
                     f"{len(s.get('runs') or [])} run(s); {e(s.get('started'))}{span}"
                     + (f"; command {code('memfx ' + ' '.join(s.get('argv') or []))}"
                        if s.get("argv") else "")
                     + (f"; host {e(s.get('host'))}" if s.get("host") else "")))
    if not sel.surveys:
        rows.append(("runs", f"{len(views)} run(s) chosen one by one (no survey)"))
    total = sum(v.run["duration_s"] for v in views if _finite(v.run.get("duration_s")))
    rows.append(("measuring time", e(duration_text(total)) + " (sum of the runs' durations)"))
    out.append(kv_table(rows, "kv meta"))
    out.append(_tradeoff_html(sel, views))
    out.append('</header>')
    return "\n".join(out)


def _tradeoff_html(sel, views) -> str:
    presets = {s.get("preset") for s in sel.surveys} | {v.run.get("preset") for v in views}
    presets.discard(None)
    notes = [s.get("note") for s in sel.surveys if s.get("note")]
    light = sorted(p for p in presets if p != "full")
    if not light and not notes:
        if presets:
            return (f'<p class="tradeoff">Preset {e(", ".join(sorted(presets)))}: the most thorough '
                    f'setting memfx has.</p>')
        return ""
    name = ", ".join(light) or ", ".join(sorted(presets))
    out = [f'<div class="tradeoff"><h2 class="small">What the {e(name)} preset traded away</h2>']
    if notes:
        out.extend(f"<p>{e(n)}</p>" for n in notes)
    else:
        out.append(f"<p>The {e(name)} preset measures fewer points per sweep and fewer samples per "
                   f"point than <code>--full</code>, with shorter samples, so curves are coarser, "
                   f"knees are located less precisely and confidence intervals are wider. "
                   f"Run <code>memfx survey --full</code> for the thorough version.</p>")
    items = []
    for v in views:
        diffs = _preset_differences(v)
        if diffs:
            items.append(f"<li><a href=\"#{e(v.anchor)}\">{e(v.run['experiment'])}</a>: "
                         + "; ".join(f"{e(n)} {e(used)} (full: {e(full)})" for n, used, full in diffs)
                         + "</li>")
    if items:
        out.append("<ul>" + "".join(items) + "</ul>")
    out.append("</div>")
    return "\n".join(out)


def _iso_span(a, b) -> str:
    try:
        t0 = calendar.timegm(time.strptime(a, "%Y-%m-%dT%H:%M:%SZ"))
        t1 = calendar.timegm(time.strptime(b, "%Y-%m-%dT%H:%M:%SZ"))
    except (TypeError, ValueError):
        return "duration unknown"
    return duration_text(t1 - t0)


# Findings that differ only by a numeric suffix (e.g. crossover_copy_a_vs_b_2,
# _3, ...) fold into one verdict row when there are at least this many.
GROUP_MIN = 3


def group_findings(findings):
    """[(first finding, [the others of its kind])] in order of appearance; a
    kind = the id without a trailing _<number>, the same verdict."""
    import re
    stems = {}
    for f in findings:
        stem = re.sub(r"_\d+$", "", str(f.get("id", "")))
        stems.setdefault((stem, f.get("verdict")), []).append(f)
    out, seen = [], set()
    for f in findings:
        key = (re.sub(r"_\d+$", "", str(f.get("id", ""))), f.get("verdict"))
        if key in seen:
            continue
        group = stems[key]
        if len(group) >= GROUP_MIN:
            seen.add(key)
            out.append((group[0], group[1:]))
        else:
            out.extend((g, []) for g in group)
            seen.add(key)
    return out


def verdicts_html(views) -> str:
    rows = []
    counts = {}
    for v in views:
        exp_seeds = tuple(getattr(v.experiment, "seeds", ()) or ())
        link = f'<a href="#{e(v.anchor)}">{e(v.run["experiment"])}</a>'
        partial = v.run.get("status") != "complete"
        findings = (v.doc or {}).get("findings") or []
        if not (v.doc or {}).get("points"):
            # a run that measured nothing answers every declared question
            # not_measured: it has no verdict, and its row says why
            findings = [f for f in findings if f.get("verdict") != "not_measured"]
        for f in findings:
            counts[f.get("verdict")] = counts.get(f.get("verdict"), 0) + 1
        for f, more in group_findings(findings):
            verdict = f.get("verdict")
            label = VERDICT_LABELS.get(verdict, verdict)
            seed = f.get("seed") or (exp_seeds[0] if len(exp_seeds) == 1 else ", ".join(exp_seeds))
            claim = e(f.get("claim") or f.get("id"))
            if more:
                items = "".join(f"<li>{e(m.get('claim') or m.get('id'))}: "
                                f"{e(value_text(m.get('value'), m.get('unit')))}</li>" for m in more)
                claim = (f"<details><summary>{claim} <span class=\"dim\">(+{len(more)} more of this "
                         f"kind)</span></summary><ul>{items}</ul></details>")
            if partial:
                claim += ' <span class="dim">(from partial results)</span>'
            rows.append([claim,
                         f'<span class="verdict v-{e(verdict)}">{e(label)}</span>',
                         f'<span class="num">{e(value_text(f.get("value"), f.get("unit")))}</span>',
                         f'<span class="num">{e(ci_text(f.get("ci_low"), f.get("ci_high"), f.get("unit")))}</span>',
                         f'<span class="seed">{e(seed_text(seed))}</span>', link])
        if not findings:
            cls, label = status_label(v.run)
            why = v.analysis_error or label
            if v.run.get("status") == "complete" and not v.analysis_error:
                why = "no findings from this run's data"
            rows.append([f'<span class="dim">no verdict: {e(why)}</span>', "", "", "",
                         f'<span class="seed">{e(", ".join(seed_text(s) for s in exp_seeds) or "–")}</span>',
                         link])
    summary = ", ".join(f"{n} {VERDICT_LABELS.get(k, k)}" for k, n in
                        sorted(counts.items(), key=lambda kv: list(VERDICT_LABELS).index(kv[0])
                               if kv[0] in VERDICT_LABELS else 99))
    out = ['<section id="verdicts">', "<h2>Verdicts</h2>",
           f"<p>{sum(counts.values())} findings across {len(views)} run(s)"
           + (f": {e(summary)}" if summary else "") + ". Values are medians with their 95% "
           "confidence interval; <em>detected</em> and <em>not detected</em> compare two arms, "
           "<em>measured</em> reports a quantity of this machine.</p>",
           table(["claim", "verdict", "value", "95% CI", "seed", "experiment"], rows, "verdicts"),
           "</section>"]
    return "\n".join(out)


# The one-word answer a card leads with, per verdict.
ANSWER_WORD = {"detected": "Yes", "not_detected": "No", "inconclusive": "Not sure",
               "not_measured": "Not measured", "measured": ""}


def _answer_value(a) -> str:
    v = value_text(a.get("value"), a.get("unit"))
    if a.get("value") is None:
        return ""
    ci = ci_text(a.get("ci_low"), a.get("ci_high"), a.get("unit"))
    return v + (f" {ci}" if ci and ci != "–" else "")


def _details_html(a) -> str:
    det = a.get("details") or []
    if not det:
        return ""
    keys = []
    for d in det:
        for k in d:
            if k not in keys and not isinstance(d[k], (list, dict)):
                keys.append(k)
    keys = keys[:7]
    rows = [[e(num(d.get(k)) if isinstance(d.get(k), float) else d.get(k)) for k in keys]
            for d in det[:200]]
    more = f'<p class="dim">{len(det) - 200} more in the JSON export</p>' if len(det) > 200 else ""
    return (f"<details><summary>{len(det)} detail(s)</summary>"
            f"{table([e(k) for k in keys], rows, 'details')}{more}</details>")


def answers_html(views) -> str:
    """Headline cards (the seeds' questions), then every answer with its
    details folded under it; runs whose experiment declares no questions
    keep their round-1 verdict rows (verdicts_html)."""
    answered = [(v, a) for v in views if (v.doc or {}).get("points")
                for a in ((v.doc or {}).get("answers") or [])]
    # A run that measured nothing has no answers worth a row each: one line says why.
    silent = [v for v in views if (v.doc or {}).get("answers") and not (v.doc or {}).get("points")]
    cards = []
    for v, a in answered:
        if not a.get("headline"):
            continue
        word = ANSWER_WORD.get(a.get("verdict"), "")
        value = _answer_value(a)
        lead = ": ".join(x for x in (word, value) if x)
        cards.append(f'<div class="card v-{e(a.get("verdict"))}"><p class="asks">'
                     f'{e(a.get("asks"))} <span class="seed">{e(seed_text(a.get("seed")))}</span></p>'
                     f'<p class="lead">{e(lead)}</p><p>{e(a.get("because"))}</p>'
                     f'<p class="dim"><a href="#{e(v.anchor)}">{e(a.get("question"))}</a></p></div>')
    rows = []
    for v, a in answered:
        verdict = a.get("verdict")
        rows.append([f'<code>{e(a.get("question"))}</code><br>{e(a.get("asks"))}',
                     f'<span class="verdict v-{e(verdict)}">{e(VERDICT_LABELS.get(verdict, verdict))}</span>',
                     f'<span class="num">{e(_answer_value(a))}</span>',
                     e(a.get("because")) + _details_html(a),
                     f'<a href="#{e(v.anchor)}">{e(v.run["experiment"])}</a>'])
    for v in silent:
        cls, label = status_label(v.run)
        why = v.analysis_error or label
        rows.append([f'<span class="dim">no verdict: {e(why)}</span>', "", "", "",
                     f'<a href="#{e(v.anchor)}">{e(v.run["experiment"])}</a>'])
    out = ['<section id="answers">', "<h2>Answers</h2>"]
    if cards:
        out.append('<div class="cards">' + "".join(cards) + "</div>")
    if rows:
        out.append(table(["question", "verdict", "value [95% CI]", "because", "run"], rows,
                         "answers"))
    out.append("</section>")
    return "\n".join(out) if answered or silent else ""


def _machine_rows(fp) -> list:
    cpu = fp.get("cpu") or {}
    rows = [("CPU", e(cpu.get("model_name") or "unknown")
             + f' <span class="dim">({e(cpu.get("vendor"))}, family {e(cpu.get("family"))}, '
               f'model {e(cpu.get("model"))}, stepping {e(cpu.get("stepping"))}, '
               f'microcode {e(cpu.get("microcode"))})</span>')]
    if cpu.get("logical_cpus") is not None:
        rows.append(("CPUs", e(f"{cpu.get('logical_cpus')} logical, {cpu.get('cores')} core(s), "
                               f"{cpu.get('sockets')} socket(s), SMT "
                               f"{'active' if cpu.get('smt_active') else 'inactive'}, "
                               f"{cpu.get('numa_nodes')} NUMA node(s)")))
    caches = fp.get("caches") or []
    cache_lines = []
    for c in caches:
        if isinstance(c, dict):
            cache_lines.append(e(f"L{c.get('level')} {c.get('type')}: {bytes_text(c.get('size_bytes'))}, "
                                 f"{c.get('ways')}-way, {c.get('line_bytes')} B lines, shared by CPUs "
                                 f"{c.get('shared_cpu_list')}"))
        else:
            cache_lines.append(e(c))
    if cache_lines:
        src = fp.get("caches_source")
        rows.append(("Caches", "<br>".join(cache_lines)
                     + (f' <span class="dim">(from {e(src)})</span>' if src else "")))
    tsc = fp.get("tsc") or {}
    if tsc:
        hz = tsc.get("hz")
        rows.append(("TSC", e((f"{hz / 1e9:.4f} GHz" if _finite(hz) else "frequency unknown")
                              + f" ({tsc.get('source')}), invariant {tsc.get('invariant')}, "
                                f"clocksource {tsc.get('clocksource')}")))
    hv = fp.get("hypervisor") or {}
    if hv:
        rows.append(("Hypervisor", e(hv.get("vendor") or ("present" if hv.get("present") else "none"))))
    pw = fp.get("power") or {}
    if pw:
        rows.append(("Power", e(f"governor {pw.get('governor') or 'n/a'}, turbo "
                                f"{pw.get('turbo') if pw.get('turbo') is not None else 'unknown'}")))
    mem = fp.get("memory") or {}
    if mem:
        rows.append(("Memory", e(f"{bytes_text(mem.get('total_bytes'))} total, "
                                 f"{bytes_text(mem.get('available_bytes'))} available; transparent huge "
                                 f"pages {mem.get('thp_enabled')} (defrag {mem.get('thp_defrag')}); "
                                 f"{mem.get('hugepages_total')} reserved huge pages of "
                                 f"{bytes_text(mem.get('hugepage_size'))}")))
    k = fp.get("kernel") or {}
    if k:
        rows.append(("Kernel", e(f"{k.get('release')} {k.get('version') or ''}; perf_event_paranoid="
                                 f"{k.get('perf_event_paranoid')}; isolated CPUs "
                                 f"{k.get('isolated_cpus') or 'none'}")))
    g = fp.get("glibc") or {}
    if g:
        diag = g.get("diagnostics") or {}
        thr = diag.get("thresholds") or {}
        text = e(g.get("version") or "unknown")
        if thr:
            text += "; string-op thresholds: " + ", ".join(
                f"{code(name)} = {e(exact_bytes_text(val) if _finite(val) else val)}"
                for name, val in sorted(thr.items()))
        elif diag.get("reason"):
            text += f' <span class="dim">(thresholds unknown: {e(diag.get("reason"))})</span>'
        if diag.get("tunables_set"):
            text += "; tunables set: " + ", ".join(
                code(f"{n}={val}") for n, val in sorted(diag["tunables_set"].items()))
        if diag.get("glibc_tunables_env"):
            text += "; GLIBC_TUNABLES=" + code(diag["glibc_tunables_env"])
        if diag.get("isa_level"):
            text += f"; ISA level {e(diag['isa_level'])}"
        rows.append(("glibc", text))
    comp = fp.get("compiler") or {}
    if comp:
        rows.append(("memfx core built with", e(f"{comp.get('compiler')} {comp.get('cflags')}")))
    versions = []
    if (fp.get("memfx") or {}).get("version"):
        versions.append(f"memfx {fp['memfx']['version']}")
    if (fp.get("python") or {}).get("version"):
        versions.append(f"Python {fp['python']['version']}")
    if versions:
        rows.append(("Software", e(", ".join(versions))))
    return rows


def _capability_rows(fp) -> list:
    from .machine import capabilities
    caps = capabilities(fp)
    pmu = fp.get("pmu") or {}
    mem = fp.get("memory") or {}
    rows = [("Hardware counters (PMU)", yes_no(caps.get("pmu") if pmu else None)
             + (f" — {e(pmu.get('reason'))}" if pmu.get("reason") else "")
             + ("" if caps.get("pmu") else
                ' <span class="dim">(verdicts come from timing; counter columns stay empty)</span>')),
            ("Software events", yes_no(caps.get("software_events") if pmu else None)
             + (f" — {e(pmu.get('software_reason'))}" if pmu.get("software_reason") else "")
             + ' <span class="dim">(used to reject samples hit by context switches, migrations '
               'or page faults)</span>'),
            ("Huge pages", yes_no(caps.get("huge_pages") if mem else None)
             + e(f" — transparent huge pages: {mem.get('thp_enabled')}; reserved: "
                 f"{mem.get('hugepages_total')}" if mem else ""))]
    flag_names = ("erms", "fsrm", "fzrm", "fsrs", "avx2", "avx512", "rdtscp", "invariant_tsc",
                  "clflushopt", "movdir64b")
    chips = " ".join(f'<span class="chip {"on" if caps.get(n) else "off"}">{e(n)} '
                     f'{"✓" if caps.get(n) else "✗"}</span>' for n in flag_names)
    rows.append(("CPU features", chips))
    rows.append(("NUMA nodes", e(caps.get("numa_nodes"))))
    return rows


def machine_html(views) -> str:
    from .machine import cautions
    groups = {}        # one entry per distinct fingerprint
    for v in views:
        fp = v.run.get("machine")
        if not isinstance(fp, dict):
            continue
        key = json.dumps(fp, sort_keys=True, default=str)
        groups.setdefault(key, (fp, []))[1].append(v)
    out = ['<section id="machine">', "<h2>The machine</h2>"]
    if not groups:
        out.append('<p class="note">No machine fingerprint was stored with these runs.</p>')
    warn_rows = []
    for i, (fp, members) in enumerate(groups.values()):
        if len(groups) > 1:
            out.append(f"<h3>Machine {i + 1}: runs "
                       + ", ".join(f'<a href="#{e(v.anchor)}">{e(v.run["id"])}</a>' for v in members)
                       + "</h3>")
        try:
            out.append("<h3>Fingerprint</h3>" + kv_table(_machine_rows(fp)))
            out.append("<h3>Capabilities</h3>" + kv_table(_capability_rows(fp)))
        except Exception as err:     # an odd fingerprint (imported, older) still shows raw
            out.append(f'<p class="note">This fingerprint has an unexpected shape '
                       f'({e(type(err).__name__)}: {e(err)}); raw:</p>' + json_html(fp))
        try:
            machine_cautions = cautions(fp)
        except Exception:
            machine_cautions = []
        where = "machine" if len(groups) == 1 else f"machine {i + 1}"
        for c in machine_cautions:
            warn_rows.append([e(where), f"<b>{e(c.get('id'))}</b>: {e(c.get('message'))}",
                              e(c.get("advice") or "–")])
    machine_ids = {"hypervisor", "governor", "turbo", "smt", "thp_always", "no_pmu",
                   "no_invariant_tsc", "perf_event_paranoid", "low_memory"}
    if groups:
        try:
            machine_ids |= {c["id"] for fp, _ in groups.values() for c in cautions(fp)}
        except Exception:
            pass
    for v in views:
        for w in (v.doc or {}).get("warnings") or []:
            if w.get("id") in machine_ids or str(w.get("id", "")).startswith("run_"):
                continue        # machine cautions listed once above; run status in its section
            warn_rows.append([f'<a href="#{e(v.anchor)}">{e(v.run["experiment"])}</a>',
                              f"<b>{e(w.get('id'))}</b>: {e(w.get('message'))}",
                              e(w.get("advice") or _default_advice(w))])
    out.append("<h3>Noise warnings</h3>")
    if warn_rows:
        out.append(table(["where", "warning", "what to do"], warn_rows, "warnings"))
    else:
        out.append("<p>No noise warnings: nothing in the machine or in the samples crossed a "
                   "threshold.</p>")
    out.append("</section>")
    return "\n".join(out)


def _default_advice(warning) -> str:
    if warning.get("id") == "analysis":
        return "the data are shown as measured; re-run the experiment for a complete analysis"
    return "–"


def find_advice(store, views):
    """[(run, advice)] stored with the reported runs; when there is none, the
    latest advice stored on the same machine (`memfx advise` may have made its
    own run)."""
    found = []
    for v in views:
        try:
            arts = store.artifacts(v.run["id"])
        except StoreError:
            continue
        if ADVICE_ARTIFACT in arts:
            found.append((v.run, arts[ADVICE_ARTIFACT], True))
    if found:
        return found
    machine_ids = {v.run.get("machine_id") for v in views} - {None}
    reported = {v.run["id"] for v in views}
    for run in store.runs():                   # newest first
        if run["id"] in reported or run.get("machine_id") not in machine_ids:
            continue
        arts = store.artifacts(run["id"])
        if ADVICE_ARTIFACT in arts:
            return [(run, arts[ADVICE_ARTIFACT], False)]
    return []


def advice_html(advice_items, views) -> str:
    anchors = {v.run["id"]: v.anchor for v in views}
    out = ['<section id="advice">', "<h2>Advice</h2>"]
    for run, advice, in_report in advice_items:
        where = (f'<a href="#{e(anchors[run["id"]])}">{e(run["id"])}</a>' if run["id"] in anchors
                 else code(run["id"]) + " (not part of this report's runs)")
        out.append(f"<p>Stored by <code>memfx advise</code> with run {where} "
                   f"({e(run.get('experiment'))}, {e(run.get('started'))}). Each suggestion comes with "
                   f"the gain its check measured; apply one only where that gain is real for "
                   f"your sizes.</p>")
        try:
            summary = advice_summary_html(advice)
        except Exception:        # a shape this report does not know: show it as stored
            summary = None
        if summary is None:
            out.append(json_html(advice))
        else:
            out.append(summary)
            out.append("<details><summary>everything <code>memfx advise</code> stored "
                       "(best strategy per size, per-size checks)</summary>"
                       + json_html(advice) + "</details>")
    out.append("</section>")
    return "\n".join(out)


def _gain_text(check) -> str:
    """'+8.0% [+5.0%, +11.0%]' from a check's overall ratio advised/current
    (gain = 1 - ratio), or '–' when nothing was measured."""
    overall = (check or {}).get("overall") or {}
    ratio, lo, hi = overall.get("ratio"), overall.get("ci_low"), overall.get("ci_high")
    if not all(_finite(x) for x in (ratio, lo, hi)):
        return "–"
    return f"{(1 - ratio) * 100:+.1f}% [{(1 - hi) * 100:+.1f}%, {(1 - lo) * 100:+.1f}%]"


def _decision_html(decision) -> str:
    decision = decision or "keep"
    cls = {"advise": "v-detected", "keep": "v-not_detected", "unchecked": "v-inconclusive",
           "confirmed": "v-detected", "contradicted": "v-not_detected"}.get(
        decision, "v-inconclusive")
    return f'<span class="verdict {cls}">{e(decision)}</span>'


def advice_summary_html(advice):
    """The headline of a `memfx advise` document (kind memfx-advice): every
    GCC string and glibc tunable with its decision and checked gain.  None
    for any other shape."""
    if not isinstance(advice, dict) or advice.get("kind") != "memfx-advice":
        return None
    rows = []
    for fn, g in (advice.get("gcc") or {}).items():
        what = (code(f"-m{fn}-strategy={g['string']}") if g.get("string")
                else f"{code(f'-m{fn}-strategy')} <span class=\"dim\">no string proposed</span>")
        rows.append(["GCC", what, _decision_html(g.get("decision")),
                     f'<span class="num">{e(_gain_text(g.get("check")))}</span>',
                     e(g.get("check_reason") or g.get("reason") or "")])
    glibc = advice.get("glibc") or {}
    for t in glibc.get("tunables") or []:
        if t.get("proposed") is None:
            what = f"{code(t.get('tunable'))} <span class=\"dim\">keep {e(t.get('current'))}</span>"
        else:
            what = (code(f"{t.get('tunable')}={t.get('proposed')}")
                    + f' <span class="dim">(now {e(t.get("current"))})</span>')
        rows.append([f"glibc {e(glibc.get('version') or '')}".strip(), what,
                     _decision_html(t.get("decision")),
                     f'<span class="num">{e(_gain_text(t.get("check")))}</span>',
                     e(t.get("check_reason") or t.get("reason") or "")])
    rows += _prefetch_advice_rows(advice.get("prefetch") or {})
    out = [table(["for", "setting", "decision", "checked gain [95% CI]", "why"], rows, "advice")]
    if glibc.get("advised_env"):
        out.append(f"<p>Advised environment: {code('GLIBC_TUNABLES=' + str(glibc['advised_env']))}</p>")
    if not advice.get("checked", True):
        out.append('<p class="note">These proposals were not checked by measuring them '
                   '(memfx advise ran without checks).</p>')
    for w in advice.get("warnings") or []:
        out.append(f'<p class="note">warning: {e(w.get("message") if isinstance(w, dict) else w)}</p>')
    out.append('<p class="dim">Gain = how much less time the advised setting took than the '
               'default where it changes the code path (positive is faster); only a gain whose '
               'confidence interval clears the threshold is advised.</p>')
    return "\n".join(out)


def _prefetch_advice_rows(part):
    """Rows of the prefetch advice (advise.prefetch_advice): the advice, the
    decision of its fresh check, and the check's ratio with its CI."""
    rows = []
    for i in part.get("items") or []:
        chk = i.get("check") or {}
        ratio, lo, hi = chk.get("ratio"), chk.get("ci_low"), chk.get("ci_high")
        measured = (f"{e(chk.get('ratio_is'))} {ratio:.3f} [{lo:.3f}, {hi:.3f}]"
                    if all(_finite(x) for x in (ratio, lo, hi)) else "–")
        rows.append(["prefetch", e(i.get("advice") or i.get("reason") or i.get("topic")),
                     _decision_html(i.get("decision")), f'<span class="num">{measured}</span>',
                     e(f"{i.get('topic')}: {i.get('check_reason') or ''}")])
    return rows


def _sort_key(point):
    def k(v):
        return (0, v, "") if _finite(v) else (1, 0, json.dumps(v, sort_keys=True, default=str))
    return (str(point.get("arm")), tuple(k(v) for v in (point.get("params") or {}).values()))


def points_html(view, db_arg) -> str:
    doc = view.doc
    points = sorted(doc["points"], key=_sort_key)
    if not points:
        return '<p class="note">No points: the run stored no samples.</p>'
    shown = points
    note = ""
    if len(points) > MAX_TABLE_ROWS:
        step = (len(points) - 1) / (MAX_TABLE_ROWS - 1)
        shown = [points[round(i * step)] for i in range(MAX_TABLE_ROWS)]
        note = (f"Showing {MAX_TABLE_ROWS} of {len(points)} points, evenly spaced over the sweep; "
                f"every point and sample: {code(export_command(view.run['id'], 'csv', db_arg))}")
    known = _params_of(view.experiment)
    keys = []
    for p in points:
        keys.extend(k for k in p.get("params") or {} if k not in keys)
    # A swept parameter with one value for every point is said once, not per row.
    constant = {}
    if len(points) > 1:
        for k in keys:
            values = {json.dumps((p.get("params") or {}).get(k, None), sort_keys=True, default=str)
                      for p in points}
            if len(values) == 1 and k in (points[0].get("params") or {}):
                constant[k] = points[0]["params"][k]
    keys = [k for k in keys if k not in constant]
    metrics = sorted({p.get("metric") for p in points if p.get("metric")})
    rows = []
    for p in shown:
        params = p.get("params") or {}
        unit = p.get("unit") or ""
        cv = p.get("cv")
        cv_cell = "–" if not _finite(cv) else (f'<span class="{"noisy" if cv >= 0.10 else ""}">'
                                               f"{cv:.1%}</span>")
        rows.append([*(e(param_text(k, params.get(k), _kind(known, k))) if k in params else ""
                       for k in keys),
                     e(p.get("arm")),
                     f'<span class="num">{e(value_text(p.get("median"), unit))}</span>',
                     f'<span class="num">{e(ci_text(p.get("ci_low"), p.get("ci_high"), unit))}</span>',
                     e(p.get("n")), e(p.get("rejected")), cv_cell])
    caption_parts = []
    if metrics:
        caption_parts.append("metric: " + ", ".join(code(m) for m in metrics))
    if constant:
        caption_parts.append("every point has " + ", ".join(
            f"{e(k)} = {e(param_text(k, v, _kind(known, k)))}" for k, v in constant.items()))
    caption = "; ".join(caption_parts) or None
    out = table([*keys, "arm", "median", "95% CI", "n", "rejected", "CV"], rows, "points", caption)
    if note:
        out += f'<p class="note">{note}</p>'
    return out


def params_html(view) -> str:
    run = view.run
    params = run.get("params") or {}
    known = _params_of(view.experiment)
    diffs = {n: full for n, _, full in _preset_differences(view)}
    show_full = bool(diffs)
    rows = []
    for name, value in params.items():
        p = known.get(name)
        meaning = p.help if p is not None else "(not a parameter this memfx knows)"
        row = [code(name), e(param_text(name, value, _kind(known, name)))]
        if show_full:
            row.append(e(diffs.get(name, "same")))
        row.append(e(meaning))
        rows.append(row)
    headers = ["parameter", "value"] + (["in --full"] if show_full else []) + ["meaning"]
    if not rows:
        return '<p class="note">No parameters were stored with this run.</p>'
    return table(headers, rows, "params")


def run_html(view, db_arg) -> str:
    run, doc, exp = view.run, view.doc, view.experiment
    cls, label = status_label(run)
    title = getattr(exp, "title", "") or ""
    out = [f'<section class="run" id="{e(view.anchor)}">',
           f'<h3>{e(run["experiment"])}' + (f": {e(title)}" if title else "") + "</h3>",
           f'<p class="status {cls}">{e(label)}</p>']
    if run.get("status") == "interrupted" and run.get("error"):
        out.append(f'<p class="note">{e(run["error"])}</p>')
    err = str(run.get("error") or "")
    if run.get("status") == "failed" and len(err.strip().splitlines()) > 1:
        out.append(f"<details><summary>full error</summary><pre>{e(err)}</pre></details>")
    question = getattr(exp, "question", "") or ""
    if question:
        out.append(f'<p class="question">{e(question)}</p>')
    elif exp is None:
        out.append('<p class="note">This memfx does not know this experiment; its points are '
                   'shown as stored, without findings.</p>')
    seeds = tuple(getattr(exp, "seeds", ()) or ())
    meta = [("run", code(run["id"])),
            ("preset", e(run.get("preset") or "–")),
            ("started", e(run.get("started") or "–")),
            ("took", e(duration_text(run.get("duration_s")))
             + ("" if _finite(run.get("duration_s")) else
                ' <span class="dim">(the run did not finish)</span>')),
            ("samples stored", e(run.get("n_samples")))]
    if seeds:
        meta.append(("seeds", e("; ".join(seed_text(s) for s in seeds))))
    out.append(kv_table(meta, "kv meta"))
    if view.analysis_error:
        out.append(f'<p class="note">The stored samples could not be analysed: '
                   f'{e(view.analysis_error)}</p>')
    if doc is not None:
        for w in doc.get("warnings") or []:
            if w.get("id") == "analysis":
                out.append(f'<p class="note">{e(w.get("message"))}</p>')
        out.append(plot_html(view))
        findings = doc.get("findings") or []
        if findings:
            out.append("<h4>Findings</h4><ul class=\"findings\">" + "".join(
                f'<li><span class="verdict v-{e(f.get("verdict"))}">'
                f'{e(VERDICT_LABELS.get(f.get("verdict"), f.get("verdict")))}</span> '
                f'{e(f.get("claim"))}: <b>{e(value_text(f.get("value"), f.get("unit")))}</b>'
                + (f' <span class="dim">(95% CI {e(ci_text(f.get("ci_low"), f.get("ci_high"), f.get("unit")))})</span>'
                   if f.get("ci_low") is not None else "") + "</li>"
                for f in findings) + "</ul>")
        out.append("<h4>Key table</h4>" + points_html(view, db_arg))
    out.append("<h4>Parameters</h4>" + params_html(view))
    out.append("</section>")
    return "\n".join(out)


def experiments_html(views, db_arg) -> str:
    out = ['<section id="experiments">', "<h2>Experiments</h2>"]
    out.extend(run_html(v, db_arg) for v in views)
    out.append("</section>")
    return "\n".join(out)


def _command(args, db_arg) -> str:
    """A shell command line; --db only when the store is not the default one."""
    return " ".join(shlex.quote(str(a)) for a in
                    ["memfx", *args, *(["--db", db_arg] if db_arg else [])])


def export_command(run_id, fmt, db_arg) -> str:
    return _command(["export", run_id, "--format", fmt], db_arg)


def raw_html(views, sel, db_arg) -> str:
    rows = []
    for v in views:
        cls, label = status_label(v.run)
        rows.append([code(v.run["id"]), f'<a href="#{e(v.anchor)}">{e(v.run["experiment"])}</a>',
                     f'<span class="status-inline {cls}">{e(label)}</span>', e(v.run.get("n_samples")),
                     code(export_command(v.run["id"], "json", db_arg)) + "<br>"
                     + code(export_command(v.run["id"], "csv", db_arg))])
    out = ['<section id="raw-data">', "<h2>Raw data</h2>",
           "<p>Every sample is in the results database. <code>--format json</code> writes the "
           "result document (points, findings, warnings), <code>--format csv</code> one row per "
           "sample, <code>--format raw</code> an importable copy of the run "
           "(<code>memfx import</code>).</p>",
           table(["run", "experiment", "status", "samples", "export"], rows, "raw")]
    for s in sel.surveys:
        out.append(f"<p>Survey {code(s['id'])}: rewrite this report with "
                   f"{code(_command(['report', s['id'], '-o', 'report.html'], db_arg))}.</p>")
    out.append("</section>")
    return "\n".join(out)


CSS = """
:root { --fg:#1f2328; --dim:#656d76; --line:#d0d7de; --bg2:#f6f8fa; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: var(--fg); max-width: 1180px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 28px; margin: 8px 0 2px; }
h2 { font-size: 22px; border-bottom: 2px solid var(--line); padding-bottom: 4px; margin-top: 36px; }
h2.small { font-size: 16px; border: 0; margin: 0 0 4px; }
h3 { font-size: 18px; margin: 22px 0 8px; }
h4 { font-size: 15px; margin: 16px 0 6px; }
a { color: #0969da; }
code { font: 13px ui-monospace, "DejaVu Sans Mono", monospace; background: var(--bg2);
       padding: 1px 4px; border-radius: 4px; overflow-wrap: anywhere; }
p code { white-space: nowrap; }
table.points td { text-align: right; }
table.points td:nth-last-child(6) { text-align: left; }
table.nested code { white-space: nowrap; overflow-wrap: normal; }
pre { background: var(--bg2); padding: 8px; overflow-x: auto; font-size: 12px; white-space: pre-wrap; }
table { border-collapse: collapse; margin: 6px 0 10px; font-size: 14px; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
thead th { background: var(--bg2); }
caption { caption-side: bottom; text-align: left; color: var(--dim); font-size: 13px; padding-top: 3px; }
table.kv th { background: var(--bg2); white-space: nowrap; width: 1%; }
table.kv.meta { font-size: 13px; }
table.nested { margin: 0; font-size: 13px; }
table.points td, table.verdicts td { white-space: nowrap; }
table.verdicts { width: 100%; }
table.advice td { vertical-align: top; }
table.advice td:nth-child(4) { white-space: nowrap; }
table.verdicts td:first-child { white-space: normal; width: 40%; }
table.verdicts td:nth-child(5) { white-space: normal; font-size: 13px; color: var(--dim); min-width: 17em; }
.num { font-variant-numeric: tabular-nums; }
.sub { color: var(--dim); margin: 0 0 10px; }
.dim { color: var(--dim); }
.note { color: var(--dim); font-style: italic; }
.question { font-size: 16px; font-style: italic; }
.state, .status { display: inline-block; font-weight: 600; padding: 4px 10px; border-radius: 6px; margin: 4px 0; }
.state.complete, .status.ok { background: #dafbe1; color: #116329; }
.state.incomplete, .status.warn { background: #fff8c5; color: #7d4e00; border: 1px solid #d4a72c; }
.status.bad { background: #ffebe9; color: #a40e26; border: 1px solid #ff8182; }
.status-inline.bad { color: #a40e26; } .status-inline.warn { color: #7d4e00; }
.verdict { display: inline-block; font-weight: 600; padding: 0 6px; border-radius: 4px; white-space: nowrap; }
.v-detected { background: #dafbe1; color: #116329; }
.v-not_detected { background: #eaeef2; color: #424a53; }
.v-inconclusive { background: #fbefff; color: #6e40c9; }
.v-measured { background: #ddf4ff; color: #0550ae; }
.yes { color: #116329; font-weight: 600; } .no { color: #a40e26; font-weight: 600; }
.chip { display: inline-block; border: 1px solid var(--line); border-radius: 10px; padding: 0 7px;
        margin: 1px; font-size: 13px; }
.chip.on { background: #dafbe1; } .chip.off { background: #f6f8fa; color: var(--dim); }
.noisy { color: #a40e26; font-weight: 600; }
.tradeoff { background: var(--bg2); border-left: 4px solid #d4a72c; padding: 8px 12px; margin: 10px 0; }
nav ul { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 4px 18px; margin: 8px 0; }
figure { margin: 8px 0; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { color: var(--dim); font-size: 13px; }
section.run { border-top: 1px solid var(--line); margin-top: 26px; }
ul.findings { padding-left: 18px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(330px, 1fr)); gap: 10px; }
.card { border: 1px solid var(--line); border-left-width: 6px; border-radius: 6px; padding: 6px 12px; }
.card p { margin: 4px 0; } .card .asks { font-weight: 600; }
.card .lead { font-size: 20px; font-variant-numeric: tabular-nums; }
.card.v-detected { border-left-color: #1a7f37; } .card.v-not_detected { border-left-color: #8c959f; }
.card.v-inconclusive { border-left-color: #8250df; } .card.v-measured { border-left-color: #0969da; }
.card.v-not_measured { border-left-color: var(--line); }
.v-not_measured { background: #f6f8fa; color: var(--dim); }
table.answers { width: 100%; table-layout: fixed; }
table.answers td { overflow-wrap: anywhere; }
table.answers th:nth-child(1) { width: 26%; } table.answers th:nth-child(2) { width: 10%; }
table.answers th:nth-child(3) { width: 18%; } table.answers th:nth-child(5) { width: 9%; }
table.details { font-size: 12px; }
@media print {
  body { max-width: none; padding: 0; font-size: 11pt; }
  nav { display: none; }
  a { color: inherit; text-decoration: none; }
  section.run { break-before: page; }
  figure, tr, .kv { break-inside: avoid; }
}
"""


def build_report(store, ids, documents=None) -> str:
    """The report's HTML for the given survey/run ids (see `resolve`);
    ``documents``: run documents (with values) already made, by run id."""
    from . import __version__
    try:
        store.mark_stale_running()   # a killed survey's runs show as interrupted, not running
    except StoreError:
        pass
    sel = resolve(store, ids)
    views = [_analyse(store, run, i, documents) for i, run in enumerate(sel.runs)]
    from .store import default_db_path
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
    legacy_views = [v for v in views if not (v.doc or {}).get("answers")]
    nav = ['<nav aria-label="sections"><ul>']
    if answers_section:
        nav.append('<li><a href="#answers">Answers</a></li>')
    if legacy_views or not answers_section:
        nav.append('<li><a href="#verdicts">Verdicts</a></li>')
    nav.append('<li><a href="#machine">Machine</a></li>')
    if advice:
        nav.append('<li><a href="#advice">Advice</a></li>')
    nav.append('<li><a href="#experiments">Experiments</a>: '
               + ", ".join(f'<a href="#{e(v.anchor)}">{e(v.run["experiment"])}</a>' for v in views)
               + "</li>")
    nav.append('<li><a href="#raw-data">Raw data</a></li></ul></nav>')
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{e(title)}</title>", f"<style>{CSS}</style>", "</head>", "<body>",
             header_html(sel, views, store, generated, __version__), "\n".join(nav),
             "<main>", answers_section,
             verdicts_html(legacy_views) if legacy_views or not answers_section else "",
             machine_html(views)]
    if advice:
        parts.append(advice_html(advice, views))
    parts += [experiments_html(views, db_arg), raw_html(views, sel, db_arg), "</main>",
              f'<footer><p class="dim">Written by memfx {e(__version__)} from {e(store.path)}; '
              f'no measurement was made to write it.</p></footer>', "</body>", "</html>", ""]
    return "\n".join(parts)


def write_report(store, ids, path, documents=None) -> str:
    """Write the report of `ids` (survey or run ids/prefixes; empty = latest
    survey) to `path`; returns the path.  Written to a temporary file first,
    so an existing report is replaced whole or not at all."""
    path = str(path or "memfx-report.html")
    text = build_report(store, ids, documents)
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
