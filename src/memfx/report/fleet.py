"""`memfx report --fleet`: the fleet document (memfx.analysis.fleet) as one offline
HTML file: one table per question, one column per machine or CPU model, so
"which hosts show store elimination" is one glance.  Reads the document only."""
from __future__ import annotations

from ..model.units import format_ci, format_value
from .report import CSS, e, table


def _cell_html(cell, unit, group_by) -> str:
    verdict = cell.get("verdict") or "not_measured"
    if cell.get("value") is None:
        return f'<span class="dim">{e(verdict)}</span>'
    value = e(format_value(cell["value"], unit))
    if group_by == "cpu-model":
        spread = format_ci(cell.get("spread_low"), cell.get("spread_high"), unit)
        counted = ", ".join(f"{e(v)} {n}" for v, n in sorted((cell.get("verdicts") or {}).items(),
                                                               key=lambda kv: str(kv[0])))
        return (f"<b>{value}</b><br>median of {cell['n_hosts']} host(s)<br>"
                f"spread {e(spread)}<br>{counted}")
    ci = format_ci(cell.get("ci_low"), cell.get("ci_high"), unit)
    return f"<b>{value}</b><br>{e(verdict)}<br>CI {e(ci)}"


def fleet_html(doc, version="") -> str:
    by_model = doc["group_by"] == "cpu-model"
    headers = ["", *[c["label"] + ("" if by_model else f" ({c['key']})") for c in doc["columns"]]]
    hosts_row = ["hosts", *[e(", ".join(c.get("hosts") or []) or "-") for c in doc["columns"]]]
    source_row = ["from", *[e(", ".join(c.get("sources") or [])) for c in doc["columns"]]]
    parts = [f"<h1>memfx fleet report: {len(doc['columns'])} "
             f"{'CPU model' if by_model else 'machine'}{'s' if len(doc['columns']) != 1 else ''}</h1>",
             f'<p class="dim">store {e(doc["store"])}; each machine\'s newest complete run of '
             'each experiment (the surveys or runs it comes from are listed)'
             + ("; per CPU model the median of its hosts and the spread min–max across them"
                if by_model else "") + "</p>",
             table(headers, [hosts_row, source_row], cls="kv")]
    for q in doc["questions"]:
        cells = [_cell_html(q["cells"][c["key"]], q.get("unit"), doc["group_by"])
                 for c in doc["columns"]]
        parts.append(f"<h2><code>{e(q['question'])}</code></h2><p>{e(q.get('asks'))}</p>")
        parts.append(table(headers, [[e(q.get("unit") or ""), *cells]]))
    return "\n".join(["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
                      "<title>memfx fleet report</title>", f"<style>{CSS}</style>", "</head>",
                      "<body>", *parts,
                      f'<footer><p class="dim">Written by memfx {e(version)}</p></footer>',
                      "</body>", "</html>"])
