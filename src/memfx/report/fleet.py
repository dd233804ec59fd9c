"""`memfx report --fleet`: the fleet document (memfx.analysis.fleet) as one offline
HTML file, one table per question.  A few machines: a column each, so
"which hosts show store elimination" is one glance.  More than a screen's
worth, or grouped by CPU model: a row per CPU model with its hosts'
distribution on one scale shared by every model of the question (so each
question's spread across models is one glance), its verdicts counted and
its outlier hosts named.  Reads the document only."""
from __future__ import annotations

import math

from ..model.units import format_ci, format_value
from .report import CSS, e, table

# Machine columns that fit a 1280 px page side by side; beyond it the
# report summarises per CPU model.
SCREEN_COLUMNS = 6
# A question's scale is logarithmic when its values span more than this
# ratio (latencies from L1 to DRAM), so small models stay visible.
LOG_SCALE_RATIO = 20.0

FLEET_CSS = """
table.models { table-layout: fixed; width: 100%; }
table.models th:nth-child(1) { width: 24%; } table.models th:nth-child(2) { width: 6%; }
table.models th:nth-child(3) { width: 17%; } table.models th:nth-child(4) { width: 25%; }
table.models th:nth-child(5) { width: 12%; } table.models th:nth-child(6) { width: 16%; }
table.models td { overflow-wrap: anywhere; vertical-align: middle; }
.dist { position: relative; height: 14px; background: var(--bg2); border-radius: 3px; }
.dist i { position: absolute; top: 5px; height: 4px; background: #8c959f; }
.dist u { position: absolute; top: 2px; height: 10px; background: #54aeff; text-decoration: none; }
.dist b { position: absolute; top: 0; width: 2px; height: 14px; background: #0a3069; }
"""


def _cell_html(cell, unit, group_by) -> str:
    verdict = cell.get("verdict") or "not_measured"
    if cell.get("value") is None:
        return f'<span class="dim">{e(verdict)}</span>'
    value = e(format_value(cell["value"], unit))
    if group_by == "cpu-model":
        spread = format_ci(cell.get("spread_low"), cell.get("spread_high"), unit)
        return (f"<b>{value}</b><br>median of {cell['n_hosts']} host(s)<br>"
                f"spread {e(spread)}<br>{_verdicts(cell)}")
    ci = format_ci(cell.get("ci_low"), cell.get("ci_high"), unit)
    return f"<b>{value}</b><br>{e(verdict)}<br>CI {e(ci)}"


def _verdicts(cell) -> str:
    return ", ".join(f"{e(v)} {n}" for v, n in sorted((cell.get("verdicts") or {}).items(),
                                                      key=lambda kv: str(kv[0])))


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


class _Scale:
    """Positions (0-100 %) on one question's axis: min..max over its models."""

    def __init__(self, cells):
        values = [x for c in cells for x in (c.get("spread_low"), c.get("spread_high")) if _finite(x)]
        self.lo, self.hi = (min(values), max(values)) if values else (0.0, 1.0)
        self.log = self.lo > 0 and self.hi / self.lo > LOG_SCALE_RATIO

    def at(self, x) -> float:
        lo, hi = (math.log(self.lo), math.log(self.hi)) if self.log else (self.lo, self.hi)
        if self.log:
            x = math.log(x)
        return 50.0 if hi <= lo else max(0.0, min(100.0, 100.0 * (x - lo) / (hi - lo)))


def _distribution(cell, scale: _Scale) -> str:
    """The hosts' min..max (line), quartiles (box) and median (tick)."""
    if not _finite(cell.get("value")):
        return ""
    lo, hi = scale.at(cell["spread_low"]), scale.at(cell["spread_high"])
    q1 = scale.at(cell.get("q1", cell["value"]))
    q3 = scale.at(cell.get("q3", cell["value"]))
    mid = scale.at(cell["value"])
    return (f'<div class="dist"><i style="left:{lo:.1f}%;width:{max(hi - lo, 0.3):.1f}%"></i>'
            f'<u style="left:{q1:.1f}%;width:{max(q3 - q1, 0.3):.1f}%"></u>'
            f'<b style="left:{min(mid, 99.5):.1f}%"></b></div>')


def _outliers(cell, unit) -> str:
    named = cell.get("outliers") or []
    if not named:
        return ""
    shown = ", ".join(f"{e(o.get('host') or o.get('machine_id'))} ({e(format_value(o.get('value'), unit))})"
                      for o in named)
    more = (cell.get("n_outliers") or len(named)) - len(named)
    return shown + (f" and {more} more" if more > 0 else "")


def _summary_table(q, columns, cells, unit) -> str:
    """One row per CPU model, its hosts' distribution on the question's scale."""
    measured = [cells[c["key"]] for c in columns if cells[c["key"]].get("n_hosts")]
    scale = _Scale(measured)
    # the scale's ends head the distribution column (escaped by table())
    axis = (f"distribution: {format_value(scale.lo, unit)} … {format_value(scale.hi, unit)}"
            + (" (log scale)" if scale.log else "")) if measured else "distribution"
    rows = []
    for c in columns:
        cell = cells[c["key"]]
        if not cell.get("n_hosts"):
            continue
        if cell.get("value") is None:
            value = f'<span class="dim">{e(cell.get("verdict"))}</span>'
        else:
            value = (f"<b>{e(format_value(cell['value'], unit))}</b> "
                     f'<span class="dim">median of {cell["n_hosts"]} host(s)</span><br>'
                     f"{e(format_ci(cell.get('spread_low'), cell.get('spread_high'), unit))}")
        rows.append([e(c["label"]), str(cell["n_hosts"]), value, _distribution(cell, scale),
                     _verdicts(cell), _outliers(cell, unit)])
    head = ["CPU model", "hosts", "median (min–max)", axis, "verdicts", "outlier hosts"]
    return table(head, rows, cls="models")


def fleet_html(doc, version="") -> str:
    by_model = doc["group_by"] == "cpu-model"
    summarised = by_model or len(doc["columns"]) > SCREEN_COLUMNS
    columns = doc["columns"] if by_model else doc.get("models") or []
    n = len(doc["columns"])
    what = f"{n} {'CPU model' if by_model else 'machine'}{'s' if n != 1 else ''}"
    parts = [f"<h1>memfx fleet report: {what}</h1>"]
    if summarised:
        n_hosts = len({m for c in columns for m in c.get("machines") or []})
        parts.append(
            f'<p class="dim">store {e(doc["store"])}; {n_hosts} machine(s) of {len(columns)} CPU '
            "model(s); each machine's newest complete run of each experiment; per question a row "
            "per CPU model: the median of its hosts, their spread min–max (line), quartiles (box) "
            "and median (tick) on one scale for every model, the verdicts counted, and the hosts "
            "far outside the model's quartiles named (outliers)</p>")
        rows = [[e(c["label"]), str(len(c.get("machines") or [])),
                 e(", ".join((c.get("hosts") or [])[:3]) + (" …" if len(c.get("hosts") or []) > 3 else ""))]
                for c in columns]
        parts.append(table(["CPU model", "machines", "hosts"], rows, cls="kv"))
    else:
        headers = ["", *[c["label"] + f" ({c['key']})" for c in doc["columns"]]]
        hosts_row = ["hosts", *[e(", ".join(c.get("hosts") or []) or "-") for c in doc["columns"]]]
        source_row = ["from", *[e(", ".join(c.get("sources") or [])) for c in doc["columns"]]]
        parts += [f'<p class="dim">store {e(doc["store"])}; each machine\'s newest complete run of '
                  "each experiment (the surveys or runs it comes from are listed)</p>",
                  table(headers, [hosts_row, source_row], cls="kv")]
    for q in doc["questions"]:
        parts.append(f"<h2><code>{e(q['question'])}</code></h2><p>{e(q.get('asks'))}</p>")
        if summarised:
            cells = q["cells"] if by_model else q.get("models") or {}
            parts.append(_summary_table(q, columns, cells, q.get("unit")))
        else:
            headers = ["", *[c["label"] + f" ({c['key']})" for c in doc["columns"]]]
            cells = [_cell_html(q["cells"][c["key"]], q.get("unit"), doc["group_by"])
                     for c in doc["columns"]]
            parts.append(table(headers, [[e(q.get("unit") or ""), *cells]]))
    return "\n".join(["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
                      '<meta name="viewport" content="width=device-width, initial-scale=1">',
                      "<title>memfx fleet report</title>", f"<style>{CSS}{FLEET_CSS}</style>",
                      "</head>", "<body>", *parts,
                      f'<footer><p class="dim">Written by memfx {e(version)}</p></footer>',
                      "</body>", "</html>"])
