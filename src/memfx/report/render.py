"""Terminal rendering (rich) of machines, result documents and findings.
Reads documents; never measures."""
from __future__ import annotations

import json
import re

from rich.table import Table
from rich.text import Text

from ..model.units import format_ci, format_number, format_size, format_value, param_value_text

# C0 controls, DEL and C1 controls (which include the CSI introducer 0x9b):
# stored strings come from imports and /proc, and an escape sequence in one
# must not reach the terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def clean(value) -> str:
    """A stored value as one printable line: control characters become
    spaces, so nothing in the data can move the cursor or retitle the
    terminal."""
    return _CONTROL.sub(" ", "" if value is None else str(value))


_BREAKS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(message) -> str:
    """A message as one line with nothing lost: control characters and line
    separators escaped (a newline in an -o path prints as \\n), so an error
    stays the one line it is meant to be."""
    return _BREAKS.sub(lambda m: _NAMED.get(m.group(), m.group().encode("unicode_escape")
                                            .decode("ascii")), str(message))


def text(value, style: str = "") -> Text:
    """Data for a table cell or a console line: never parsed as rich markup,
    so `[/]` or `[link=...]` in a CPU name or run id print as typed."""
    return Text(clean(value), style=style)


def safe_table(*columns, title=None, caption=None, **kw) -> Table:
    """The one way tables are made here: title and caption are data, too."""
    t = Table(title=text(title) if title is not None else None,
              caption=text(caption) if caption is not None else None, **kw)
    for column in columns:
        t.add_column(column)
    return t


def add_row(table: Table, *cells) -> None:
    """Add one row; strings are data (see text()), Text cells keep their style."""
    table.add_row(*(c if isinstance(c, Text) else text(c) for c in cells))

# A table of more rows than this is printed as aligned plain columns: rich
# lays out every cell of a table before printing its first line, and a
# fleet's machine list of a thousand rows took most of a second there.
PLAIN_TABLE_ROWS = 100


def long_table_lines(title, columns, rows):
    """A long table (more than PLAIN_TABLE_ROWS rows) as plain lines: the
    title, the header, a rule and one line a row, each column as wide as
    its widest cell, every cell clean()ed."""
    cells = [[clean(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(columns)]

    def line(values):
        return "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()
    head = [clean(title)] if title else []
    return head + [line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells]


VERDICT_STYLE = {"detected": "bold green", "not_detected": "yellow",
                 "inconclusive": "magenta", "measured": "cyan"}


def machine_table(fp, cautions, caps):
    cpu = fp.get("cpu", {})
    t = Table(title="Machine", show_header=False, box=None)
    t.add_column(style="bold")
    t.add_column()
    row = lambda *cells: add_row(t, *cells)  # noqa: E731
    row("CPU", f"{cpu.get('model_name')} (family {cpu.get('family')}, model "
                     f"{cpu.get('model')}, stepping {cpu.get('stepping')}, microcode {cpu.get('microcode')})")
    row("CPUs", f"{cpu.get('logical_cpus')} logical, SMT {'on' if cpu.get('smt_active') else 'off'}, "
                      f"{cpu.get('numa_nodes')} NUMA node(s)")
    flags = fp.get("flags", {})
    shown = [(k, v) for k, v in flags.items()
             if k in ("erms", "fsrm", "fzrm", "fsrs", "fsrc", "avx2", "avx512f",
                      "avx512bw", "clflushopt", "clwb", "movdir64b", "invariant_tsc")]
    row("Flags", Text(" ").join(text(k) if v else text(f"-{k}", "dim") for k, v in shown))
    for c in fp.get("caches") or []:
        if not isinstance(c, dict) or not isinstance(c.get("size_bytes"), int):
            continue
        row(f"L{c.get('level', '?')} {c.get('type', '?')}",
            f"{format_size(c['size_bytes'])}, {c.get('ways')}-way, "
            f"{c.get('line_bytes')} B lines, shared by CPUs {c.get('shared_cpu_list')}")
    llc = fp.get("llc") or {}
    views = [(llc.get(k), label) for k, label in (
        ("sysfs_bytes", "sysfs"), ("cpuid_bytes", "CPUID leaf 4/0x8000001D"),
        ("cpuid_legacy_bytes", "CPUID 0x80000006"), ("glibc_bytes", "glibc"))]
    if any(v for v, _ in views):
        nt = llc.get("glibc_non_temporal_threshold")
        t.add_row("Last-level cache", ", ".join(f"{format_size(v)} ({label})" for v, label in views if v)
                  + (f"; glibc non_temporal_threshold {format_size(nt)}" if nt else "")
                  + ("" if llc.get("agree", True) else " -- the sources disagree"))
    tsc = fp.get("tsc", {})
    hz = tsc.get("hz")
    row("TSC", f"{hz / 1e9:.4f} GHz ({tsc.get('source')}), invariant {tsc.get('invariant')}" if hz else "unknown")
    hv = fp.get("hypervisor", {})
    row("Hypervisor", hv.get("vendor") or ("yes" if hv.get("present") else "none"))
    pw = fp.get("power", {})
    turbo = pw.get("turbo") if pw.get("turbo") is not None else "unknown"
    row("Power", f"governor {pw.get('governor') or 'n/a'}, turbo {turbo}")
    mem = fp.get("memory", {})
    row("Memory", f"{format_size(mem.get('total_bytes') or 0)} total, "
                        f"{format_size(mem.get('available_bytes') or 0)} available, THP {mem.get('thp_enabled')}")
    k = fp.get("kernel", {})
    row("Kernel", f"{k.get('release')}, perf_event_paranoid={k.get('perf_event_paranoid')}")
    pmu = fp.get("pmu", {})
    row("PMU", ("available" if pmu.get("available") else f"not available: {pmu.get('reason')}")
              + f"; software events {'work' if pmu.get('software_events') else 'unavailable'}")
    g = fp.get("glibc") or {}
    diag = g.get("diagnostics") or {}
    thr = diag.get("thresholds") or {}
    row("glibc", f"{g.get('version')}" + ("; " + ", ".join(f"{k.split('.')[-1]}={v}" for k, v in sorted(thr.items()))
                                                if thr else ""))
    comp = fp.get("compiler") or {}
    row("Core built with", f"{comp.get('compiler')} {comp.get('cflags')}" if comp else "unknown")
    return t


def cautions_table(cautions, title="Warnings"):
    t = Table(title=text(title), show_lines=False)
    t.add_column("id", style="yellow")
    t.add_column("what")
    t.add_column("what to do", style="dim")
    for c in cautions:
        add_row(t, c.get("id", ""), c.get("message", ""), c.get("advice", "") or "")
    return t


def points_table(doc, max_rows=400):
    pts = doc["points"]
    pkeys = []
    for p in pts:
        for k in p["params"]:
            if k not in pkeys:
                pkeys.append(k)
    # parameters with one value across all points go to the caption
    constant = {k: pts[0]["params"].get(k) for k in pkeys
                if len({json.dumps(p["params"].get(k)) for p in pts}) == 1} if len(pts) > 1 else {}
    pkeys = [k for k in pkeys if k not in constant]
    t = Table(title=text(f"{doc['experiment']} — run {doc['run_id']} ({doc['status']})"))
    for k in pkeys:
        t.add_column(text(k), justify="right")
    t.add_column("arm")
    metric = pts[0]["metric"] if pts else ""
    t.add_column("median", justify="right")
    t.add_column("95% CI", justify="right")
    t.add_column("min", justify="right")
    t.add_column("est. cycles", justify="right")
    t.add_column("CV", justify="right")
    t.add_column("n", justify="right")
    t.add_column("rej", justify="right")
    for p in pts[:max_rows]:
        cv = p.get("cv")
        add_row(t, *[param_value_text(k, p["params"].get(k, "")) for k in pkeys], p["arm"],
                format_value(p['median'], p.get('unit')), format_ci(p['ci_low'], p['ci_high'], p.get('unit')),
                format_value(p["min"], p.get('unit')), format_number(p.get("cycles_est")),
                text(f"{cv:.1%}" if cv is not None else "-", "red" if cv and cv >= 0.1 else ""),
                str(p["n"]), str(p["rejected"]))
    caption = [f"metric: {metric}"] if metric else []
    caption += [f"{k}={param_value_text(k, v)}" for k, v in constant.items()]
    if len(pts) > max_rows:
        caption.append(f"{len(pts) - max_rows} more points: memfx export {doc['run_id']}")
    t.caption = text("; ".join(caption))
    return t


def findings_table(findings, title="Findings"):
    t = Table(title=text(title))
    t.add_column("verdict")
    t.add_column("claim")
    t.add_column("value", justify="right")
    t.add_column("95% CI", justify="right")
    for f in findings:
        style = VERDICT_STYLE.get(f["verdict"], "")
        add_row(t, text(f["verdict"], style), f["claim"], format_value(f.get("value"), f.get("unit")),
                format_ci(f.get("ci_low"), f.get("ci_high"), f.get("unit")))
    return t


# ---- answers (issue 9: the answer is what a user reads first) --------------

def _plain(value):
    """Stored text as a rich Text (never markup), control characters removed."""
    return text(value)


# a detail's value and its CI bounds are in the detail's unit: shown as the
# answer's are (sizes for bytes), so that a table never reads 8291179 beside
# an answer of 7.9 MiB
_IN_UNIT = ("value", "ci_low", "ci_high")


def _detail_cell(d, k):
    v = d.get(k)
    if k in _IN_UNIT and d.get("unit") == "bytes" and isinstance(v, (int, float)) \
            and not isinstance(v, bool):
        return format_size(v)
    return format_number(v) if isinstance(v, float) else v


def details_tables(answers, width=100):
    """Per answer with details: its sub-results, in tables ``width`` wide."""
    out = []
    for a in answers:
        det = a.get("details") or []
        if not det:
            continue
        t = Table(title=_plain(f"{a['question']}: {a.get('asks', '')}"), width=width)
        keys = []
        for d in det:
            for k in d:
                if k not in keys and not isinstance(d[k], (list, dict)):
                    keys.append(k)
        for k in keys[:7]:
            t.add_column(k)
        for d in det[:60]:
            t.add_row(*[_plain(_detail_cell(d, k)) for k in keys[:7]])
        if len(det) > 60:
            t.caption = f"{len(det) - 60} more rows in --json"
        out.append(t)
    return out
