"""The report's HTML building blocks: text formatting for people (sizes,
values with their CI, durations, parameters), escaped tables and the one
style sheet.  Every piece of text from the machine or the database goes
through `e` (html.escape), so markup in a CPU model or a parameter shows as
text."""
from __future__ import annotations

import html
import json
import math
import re
from typing import TYPE_CHECKING

from ..model.units import format_number, format_size, param_value_text

if TYPE_CHECKING:
    from typing import TypeGuard

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


def e(value) -> str:
    """Escaped text of any value (also safe inside double-quoted attributes)."""
    return html.escape("" if value is None else str(value), quote=True)


def _finite(v: object) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def exact_bytes_text(v) -> str:
    """Like format_size, with the exact count when the short form is rounded
    (thresholds are compared byte for byte)."""
    short = format_size(v)
    return f"{short} ({int(v):,} B)" if "." in short else short


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
    """A parameter value for people (units.param_value_text; a list reads
    with ", " in a table cell)."""
    if isinstance(value, (list, tuple)):
        inner = kind[5:] if (kind or "").startswith("list:") else ""
        return ", ".join(param_value_text(name, v, inner) for v in value)
    return param_value_text(name, value, kind)


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
    return scroll("".join(out))


def scroll(inner) -> str:
    """A box that scrolls sideways when its content is wider than the page
    (a wide table never makes the whole page scroll)."""
    return f'<div class="scroll">{inner}</div>'



def fold(summary, inner) -> str:
    """A tall part of the page, folded (closed until clicked; a link to an
    element inside opens it): ``summary`` is text, ``inner`` HTML."""
    return f'<details class="fold"><summary>{e(summary)}</summary>{inner}</details>'


def kv_table(rows, cls="kv") -> str:
    """rows: (label, html) pairs."""
    body = "".join(f"<tr><th>{e(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return scroll(f'<table class="{cls}"><tbody>{body}</tbody></table>')


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
            cols: list[str] = []
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
    return e(format_number(value))


CSS = """
:root { --fg:#1f2328; --dim:#656d76; --line:#d0d7de; --bg2:#f6f8fa; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: var(--fg); max-width: 1200px; margin: 0 auto; padding: 10px 24px 48px; }
h1 { font-size: 22px; margin: 4px 0 0; }
h2 { font-size: 21px; border-bottom: 2px solid var(--line); padding-bottom: 4px; margin-top: 32px; }
h3 { font-size: 17px; margin: 20px 0 8px; }
h4 { font-size: 15px; margin: 16px 0 6px; }
a { color: #0969da; }
code { font: 13px ui-monospace, "DejaVu Sans Mono", monospace; background: var(--bg2);
       padding: 1px 4px; border-radius: 4px; overflow-wrap: anywhere; }
.scroll { max-width: 100%; overflow-x: auto; margin: 6px 0 10px; }
.scroll .scroll { margin: 0; }
table.points td { text-align: right; }
table.points td:nth-last-child(6) { text-align: left; }
table.nested code { white-space: nowrap; overflow-wrap: normal; }
pre { background: var(--bg2); padding: 8px; overflow-x: auto; font-size: 12px; white-space: pre-wrap;
      overflow-wrap: anywhere; }
table { border-collapse: collapse; font-size: 14px; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
thead th { background: var(--bg2); }
caption { caption-side: bottom; text-align: left; color: var(--dim); font-size: 13px; padding-top: 3px; }
table.kv th { background: var(--bg2); white-space: nowrap; width: 1%; }
table.kv.meta { font-size: 13px; }
table.nested { margin: 0; font-size: 13px; }
table.points td, table.verdicts td { white-space: nowrap; }
table.verdicts { width: 100%; }
table.advice td:nth-child(4) { white-space: nowrap; }
table.verdicts td:first-child { white-space: normal; width: 40%; }
table.verdicts td:nth-child(5) { white-space: normal; font-size: 13px; color: var(--dim); min-width: 17em; }
.num { font-variant-numeric: tabular-nums; }
.sub { color: var(--dim); margin: 0; font-size: 13px; }
.dim { color: var(--dim); }
.note { color: var(--dim); font-style: italic; }
.question { font-size: 16px; font-style: italic; }
.state, .status { display: inline-block; font-weight: 600; padding: 2px 10px; border-radius: 6px; margin: 4px 0; }
.state { font-size: 13px; vertical-align: middle; margin: 0 0 0 8px; }
.state.complete, .status.ok { background: #dafbe1; color: #116329; }
.state.incomplete, .status.warn { background: #fff8c5; color: #7d4e00; border: 1px solid #d4a72c; }
.status.bad { background: #ffebe9; color: #a40e26; border: 1px solid #ff8182; }
.status-inline.bad { color: #a40e26; } .status-inline.warn { color: #7d4e00; }
.verdict { display: inline-block; font-weight: 600; padding: 0 6px; border-radius: 4px; white-space: nowrap; }
.v-detected { background: #dafbe1; color: #116329; }
.v-not_detected { background: #eaeef2; color: #424a53; }
.v-inconclusive { background: #fbefff; color: #6e40c9; }
.v-measured { background: #ddf4ff; color: #0550ae; }
.v-not_measured { background: #f6f8fa; color: var(--dim); }
.yes { color: #116329; font-weight: 600; } .no { color: #a40e26; font-weight: 600; }
.chip { display: inline-block; border: 1px solid var(--line); border-radius: 10px; padding: 0 7px;
        margin: 1px; font-size: 13px; }
.chip.on { background: #dafbe1; } .chip.off { background: #f6f8fa; color: var(--dim); }
.noisy { color: #a40e26; font-weight: 600; }
.tradeoff { background: var(--bg2); border-left: 4px solid #d4a72c; padding: 8px 12px; margin: 10px 0; }
nav ul { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 2px 16px; margin: 14px 0 0;
         font-size: 14px; }
figure { margin: 8px 0; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { color: var(--dim); font-size: 13px; }
section.run { border-top: 1px solid var(--line); margin-top: 26px; }
ul.findings { padding-left: 18px; }
#summary h2 { margin-top: 6px; font-size: 18px; }
#summary h3 { margin: 12px 0 4px; font-size: 16px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(100%, 270px), 1fr));
         gap: 8px; }
.card { border: 1px solid var(--line); border-left-width: 5px; border-radius: 6px; padding: 4px 10px;
        min-width: 0; background: #fff; }
.card p { margin: 2px 0; }
.card .asks { display: -webkit-box; -webkit-line-clamp: 2; -webkit-box-orient: vertical;
             overflow: hidden; font-weight: 600; font-size: 13px; line-height: 1.3; }
.card .asks a { color: inherit; text-decoration: none; }
.card .because { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.card .lead { font-size: 19px; font-variant-numeric: tabular-nums; line-height: 1.25; }
.card .lead .ci { font-size: 14px; color: var(--dim); }
.card .tags { font-size: 12px; color: var(--dim); overflow-wrap: anywhere; }
.card .tags .verdict { font-size: 13px; }
.card .because { font-size: 12px; color: var(--dim); line-height: 1.3; }
.card.c-detected { border-left-color: #1a7f37; } .card.c-not_detected { border-left-color: #8c959f; }
.card.c-inconclusive { border-left-color: #8250df; } .card.c-measured { border-left-color: #0969da; }
.card.c-not_measured { border-left-color: var(--line); }
details.fold > summary { cursor: pointer; font-weight: 600; padding: 4px 0; }
details.fold[open] > summary { margin-bottom: 6px; }
ul.advice-short { margin: 4px 0; padding-left: 20px; font-size: 14px; }
table.answers { width: 100%; min-width: 720px; table-layout: fixed; }
table.answers td { overflow-wrap: anywhere; }
table.answers th:nth-child(1) { width: 26%; } table.answers th:nth-child(2) { width: 10%; }
table.answers th:nth-child(3) { width: 18%; } table.answers th:nth-child(5) { width: 9%; }
table.details { font-size: 12px; }
/* a run's facts read as one or two lines, not a six-row table: the page of
   a survey stays short enough to scroll through */
section.run table.kv.meta, section.run table.kv.meta tbody { display: block; }
section.run table.kv.meta tr { display: inline-block; margin: 0 14px 0 0; }
section.run table.kv.meta th, section.run table.kv.meta td { display: inline; border: 0;
  padding: 0 4px 0 0; background: none; width: auto; }
section.run table.kv.meta th { color: var(--dim); font-weight: normal; }
section.run { margin-top: 16px; }
section.run > h3 { display: inline-block; margin: 12px 10px 2px 0; }
section.run > .status { margin: 0; }
section.run .question { margin: 2px 0; }
section.run > p.dim, section.run > details { margin: 2px 0; font-size: 14px; }
/* the closed key table and the link to the parameters share one line */
section.run > details:not([open]), section.run > details:not([open]) + p.dim {
  display: inline-block; margin-right: 16px; }
section.run figure { margin: 4px 0; }
.tradeoff { font-size: 14px; }
section.run figcaption { font-size: 12px; line-height: 1.3; }
#machine table.kv, #presets table.kv { font-size: 13px; }
#machine th, #machine td, #presets th, #presets td { padding: 2px 6px; }
table.raw { font-size: 12px; }
table.raw code { font-size: 11px; }
@media (max-width: 600px) {
  body { padding: 8px 10px 32px; font-size: 14px; }
  h2 { font-size: 19px; }
}
@media print {
  body { max-width: none; padding: 0; font-size: 11pt; }
  nav { display: none; }
  a { color: inherit; text-decoration: none; }
  section.run { break-before: page; }
  figure, tr, .kv { break-inside: avoid; }
  .scroll { overflow: visible; }
}
"""
