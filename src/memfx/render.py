"""Terminal rendering (rich) of machines, result documents and findings.
Reads documents; never measures."""
from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from .units import format_size, human_size

VERDICT_STYLE = {"detected": "bold green", "not_detected": "yellow",
                 "inconclusive": "magenta", "measured": "cyan"}


def fmt(v, digits=3):
    if v is None:
        return "-"
    if isinstance(v, float):
        if v != v:
            return "nan"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.{digits}g}"
    return str(v)


def fmt_value(v, unit):
    if v is None:
        return "-"
    if unit == "bytes":
        return format_size(v) + "B" if v >= 1024 else f"{v:.0f} B"
    return f"{fmt(v)} {unit}".strip()


def _param_text(k, v):
    if k.endswith("_bytes") and isinstance(v, (int, float)):
        return format_size(v)
    return str(v)


def machine_table(fp, cautions, caps):
    cpu = fp.get("cpu", {})
    t = Table(title="Machine", show_header=False, box=None)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("CPU", f"{cpu.get('model_name')} (family {cpu.get('family')}, model "
                     f"{cpu.get('model')}, stepping {cpu.get('stepping')}, microcode {cpu.get('microcode')})")
    t.add_row("CPUs", f"{cpu.get('logical_cpus')} logical, SMT {'on' if cpu.get('smt_active') else 'off'}, "
                      f"{cpu.get('numa_nodes')} NUMA node(s)")
    flags = fp.get("flags", {})
    t.add_row("Flags", " ".join(f"{k}" if v else f"[dim]-{k}[/dim]" for k, v in flags.items()
                               if k in ("erms", "fsrm", "fzrm", "fsrs", "fsrc", "avx2", "avx512f",
                                        "avx512bw", "clflushopt", "clwb", "movdir64b", "invariant_tsc")))
    for c in fp.get("caches", []):
        t.add_row(f"L{c['level']} {c['type']}", f"{format_size(c['size_bytes'])}B, {c.get('ways')}-way, "
                                               f"{c.get('line_bytes')} B lines, shared by CPUs {c.get('shared_cpu_list')}")
    tsc = fp.get("tsc", {})
    hz = tsc.get("hz")
    t.add_row("TSC", f"{hz / 1e9:.4f} GHz ({tsc.get('source')}), invariant {tsc.get('invariant')}" if hz else "unknown")
    hv = fp.get("hypervisor", {})
    t.add_row("Hypervisor", hv.get("vendor") or ("yes" if hv.get("present") else "none"))
    pw = fp.get("power", {})
    t.add_row("Power", f"governor {pw.get('governor') or 'n/a'}, turbo {pw.get('turbo') if pw.get('turbo') is not None else 'unknown'}")
    mem = fp.get("memory", {})
    t.add_row("Memory", f"{human_size(mem.get('total_bytes') or 0)} total, "
                        f"{human_size(mem.get('available_bytes') or 0)} available, THP {mem.get('thp_enabled')}")
    k = fp.get("kernel", {})
    t.add_row("Kernel", f"{k.get('release')}, perf_event_paranoid={k.get('perf_event_paranoid')}")
    pmu = fp.get("pmu", {})
    t.add_row("PMU", ("available" if pmu.get("available") else f"not available: {pmu.get('reason')}")
              + f"; software events {'work' if pmu.get('software_events') else 'unavailable'}")
    g = fp.get("glibc") or {}
    diag = g.get("diagnostics") or {}
    thr = diag.get("thresholds") or {}
    t.add_row("glibc", f"{g.get('version')}" + ("; " + ", ".join(f"{k.split('.')[-1]}={v}" for k, v in sorted(thr.items()))
                                                if thr else ""))
    comp = fp.get("compiler") or {}
    t.add_row("Core built with", f"{comp.get('compiler')} {comp.get('cflags')}" if comp else "unknown")
    return t


def cautions_table(cautions, title="Warnings"):
    t = Table(title=title, show_lines=False)
    t.add_column("id", style="yellow")
    t.add_column("what")
    t.add_column("what to do", style="dim")
    for c in cautions:
        t.add_row(c.get("id", ""), c.get("message", ""), c.get("advice", "") or "")
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
    t = Table(title=f"{doc['experiment']} — run {doc['run_id']} ({doc['status']})")
    for k in pkeys:
        t.add_column(k, justify="right")
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
        t.add_row(*[_param_text(k, p["params"].get(k, "")) for k in pkeys], p["arm"],
                  f"{fmt(p['median'])} {p.get('unit', '')}", f"{fmt(p['ci_low'])}–{fmt(p['ci_high'])}",
                  fmt(p["min"]), fmt(p.get("cycles_est")),
                  ("[red]" if cv and cv >= 0.1 else "") + (f"{cv:.1%}" if cv is not None else "-"),
                  str(p["n"]), str(p["rejected"]))
    caption = [f"metric: {metric}"] if metric else []
    caption += [f"{k}={_param_text(k, v)}" for k, v in constant.items()]
    if len(pts) > max_rows:
        caption.append(f"{len(pts) - max_rows} more points: memfx export {doc['run_id']}")
    t.caption = "; ".join(caption)
    return t


def findings_table(findings, title="Findings"):
    t = Table(title=title)
    t.add_column("verdict")
    t.add_column("claim")
    t.add_column("value", justify="right")
    t.add_column("95% CI", justify="right")
    for f in findings:
        style = VERDICT_STYLE.get(f["verdict"], "")
        ci = "-" if f.get("ci_low") is None else \
            f"{fmt_value(f['ci_low'], f.get('unit', ''))} – {fmt_value(f['ci_high'], f.get('unit', ''))}"
        verdict = f"[{style}]{f['verdict']}[/]" if style else f["verdict"]    # "[]..[/]" is bad markup
        t.add_row(verdict, f["claim"], fmt_value(f.get("value"), f.get("unit", "")), ci)
    return t


def print_document(doc, console=None):
    console = console or Console()
    if doc["points"]:
        console.print(points_table(doc))
    if doc["findings"]:
        console.print(findings_table(doc["findings"]))
    if doc["warnings"]:
        console.print(cautions_table(doc["warnings"]))
    if doc.get("error"):
        console.print(f"[red]error:[/red] {doc['error']}")
