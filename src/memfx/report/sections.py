"""The report's sections: the answers (headline cards and every answer),
the round-1 verdicts, the machine, one section per run, the raw data, and
the presets and parameters at the end."""
from __future__ import annotations

import calendar
import json
import re
import shlex
import time

from ..analysis.documents import machine_facts
from ..model.findings import hint_of
from ..model.units import format_ci, format_estimate, format_number, format_size, format_value
from .html import (
    VERDICT_LABELS,
    _finite,
    _kind,
    _params_of,
    code,
    duration_text,
    e,
    exact_bytes_text,
    fold,
    json_html,
    kv_table,
    param_text,
    seed_text,
    status_label,
    table,
    yes_no,
)

# Findings that differ only by a numeric suffix (e.g. crossover_copy_a_vs_b_2,
# _3, ...) fold into one verdict row when there are at least this many.
GROUP_MIN = 3
# A key table longer than this shows evenly spaced rows over the sweep and
# says where the rest is; a reader wants the shape, the export has it all.
MAX_TABLE_ROWS = 60
# The verdict of an answer in words, as a card says it.
VERDICT_WORDS = {"detected": "yes: detected", "not_detected": "no: not detected",
                 "inconclusive": "not sure: inconclusive", "measured": "measured",
                 "not_measured": "not measured"}
# The seed stories first, in their order, then Drepper's (004) questions.
SEED_ORDER = ("000", "001", "002", "003", "004")


def group_findings(findings):
    """[(first finding, [the others of its kind])] in order of appearance; a
    kind = the id without a trailing _<number>, the same verdict."""
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
    counts: dict[str, int] = {}
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
                                f"{e(format_value(m.get('value'), m.get('unit')))}</li>" for m in more)
                claim = (f"<details><summary>{claim} <span class=\"dim\">(+{len(more)} more of this "
                         f"kind)</span></summary><ul>{items}</ul></details>")
            if partial:
                claim += ' <span class="dim">(from partial results)</span>'
            rows.append([claim,
                         f'<span class="verdict v-{e(verdict)}">{e(label)}</span>',
                         f'<span class="num">{e(format_value(f.get("value"), f.get("unit")))}</span>',
                         f'<span class="num">{e(format_ci(f.get("ci_low"), f.get("ci_high"), f.get("unit")))}</span>',
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


def _answer_value(a) -> str:
    """"182 ns [177–188]": the value with its unit, the CI in brackets."""
    return format_estimate(a.get("value"), a.get("ci_low"), a.get("ci_high"), a.get("unit"))


def _card(v, a) -> str:
    """One headline answer: the question (two lines at most; all of it and
    its id on hover; a link to its run), the value with its CI in brackets,
    the verdict in words with the seed, and the reason in one line (all of it
    on hover, and in the answers table)."""
    verdict = a.get("verdict")
    value = a.get("value")
    shown = format_value(value, a.get("unit")) if value is not None else ""
    # the estimate is the value, then its CI in brackets (styled apart here)
    ci = _answer_value(a)[len(shown):].strip()
    lead = e(shown)
    if ci:
        lead += f' <span class="ci">{e(ci)}</span>'
    words = VERDICT_WORDS.get(verdict, str(verdict))
    seed = a.get("seed")
    return (f'<div class="card c-{e(verdict)}" id="card-{e(a.get("question"))}">'
            f'<p class="asks"><a href="#{e(v.anchor)}" title="{e(a.get("question"))}: '
            f'{e(a.get("asks"))}">{e(a.get("asks"))}</a></p>'
            + (f'<p class="lead">{lead}</p>' if lead else "")
            + f'<p class="tags"><span class="verdict v-{e(verdict)}">{e(words)}</span> '
              f'<span class="seed" title="{e(seed_text(seed))}">seed {e(seed or "–")}</span></p>'
              f'<p class="because" title="{e(a.get("because"))}">{e(a.get("because"))}</p></div>')


def summary_html(views, advice) -> str:
    """The first screen: the headline answer of each seed question as a card
    (value, CI in brackets, the verdict in words), then the advice in short."""
    cards = [(v, a) for v in views if (v.doc or {}).get("points")
             for a in ((v.doc or {}).get("answers") or []) if a.get("headline")]

    def order(item):
        seed = str(item[1].get("seed") or "")
        return SEED_ORDER.index(seed) if seed in SEED_ORDER else len(SEED_ORDER)
    cards.sort(key=order)                   # stable: a seed's cards keep the run order
    out = ['<section id="summary">', "<h2>Answers to the seed questions</h2>"]
    if cards:
        out.append('<div class="cards">' + "".join(_card(v, a) for v, a in cards) + "</div>")
    else:
        out.append('<p class="note">No headline answer: no run of these measured a seed '
                   'question (every answer is listed below).</p>')
    out.append(advice)
    out.append("</section>")
    return "\n".join(out)


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
    rows = [[e(format_number(d.get(k)) if isinstance(d.get(k), float) else d.get(k)) for k in keys]
            for d in det[:200]]
    more = f'<p class="dim">{len(det) - 200} more in the JSON export</p>' if len(det) > 200 else ""
    return (f"<details><summary>{len(det)} detail(s)</summary>"
            f"{table([e(k) for k in keys], rows, 'details')}{more}</details>")


def answers_html(views) -> str:
    """Every answer with its details folded under it (the headline ones are
    also cards in summary_html); runs whose experiment declares no questions
    keep their round-1 verdict rows (verdicts_html)."""
    answered = [(v, a) for v in views if (v.doc or {}).get("points")
                for a in ((v.doc or {}).get("answers") or [])]
    # A run that measured nothing has no answers worth a row each: one line says why.
    silent = [v for v in views if (v.doc or {}).get("answers") and not (v.doc or {}).get("points")]
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
    counts: dict[str, int] = {}
    for _, a in answered:
        counts[a.get("verdict")] = counts.get(a.get("verdict"), 0) + 1
    tally = ", ".join(f"{n} {VERDICT_LABELS.get(k, k)}" for k, n in
                      sorted(counts.items(), key=lambda kv: -kv[1]))
    out = ['<section id="answers">', "<h2>Every answer</h2>"]
    if rows:
        out.append(fold(f"{len(answered)} answer(s)" + (f": {tally}" if tally else "")
                        + (f"; {len(silent)} run(s) without a verdict" if silent else ""),
                        table(["question", "verdict", "value [95% CI]", "because", "run"], rows,
                              "answers")))
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
            cache_lines.append(e(f"L{c.get('level')} {c.get('type')}: {format_size(c.get('size_bytes'))}, "
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
        rows.append(("Memory", e(f"{format_size(mem.get('total_bytes'))} total, "
                                 f"{format_size(mem.get('available_bytes'))} available; transparent huge "
                                 f"pages {mem.get('thp_enabled')} (defrag {mem.get('thp_defrag')}); "
                                 f"{mem.get('hugepages_total')} reserved huge pages of "
                                 f"{format_size(mem.get('hugepage_size'))}")))
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


def _capability_rows(fp, caps) -> list:
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


def _fingerprints(views) -> list:
    """[(fingerprint, [views])]: one entry per distinct machine fingerprint."""
    groups: dict[str, tuple[dict, list]] = {}
    for v in views:
        fp = v.run.get("machine")
        if not isinstance(fp, dict):
            continue
        key = json.dumps(fp, sort_keys=True, default=str)
        groups.setdefault(key, (fp, []))[1].append(v)
    return list(groups.values())


def machine_html(views) -> str:
    """The machine: its fingerprint and capabilities (its noise warnings are
    folded at the end, in warnings_html)."""
    groups = _fingerprints(views)
    out = ['<section id="machine">', "<h2>The machine</h2>"]
    if not groups:
        out.append('<p class="note">No machine fingerprint was stored with these runs.</p>')
    for i, (fp, members) in enumerate(groups):
        if len(groups) > 1:
            out.append(f"<h3>Machine {i + 1}: runs "
                       + ", ".join(f'<a href="#{e(v.anchor)}">{e(v.run["id"])}</a>' for v in members)
                       + "</h3>")
        try:
            caps, _ = machine_facts(fp, [v.doc for v in members])
            out.append("<h3>Fingerprint</h3>" + kv_table(_machine_rows(fp)))
            out.append("<h3>Capabilities</h3>" + kv_table(_capability_rows(fp, caps)))
        except Exception as err:     # an odd fingerprint (imported, older) still shows raw
            out.append(f'<p class="note">This fingerprint has an unexpected shape '
                       f'({e(type(err).__name__)}: {e(err)}); raw:</p>' + json_html(fp))
    n = len(_warning_rows(views, groups))
    out.append(f'<p>{n} noise warning(s) from the machine and the samples: '
               f'<a href="#warnings">at the end</a>.</p>' if n else
               "<p>No noise warnings: nothing in the machine or in the samples crossed a "
               "threshold.</p>")
    out.append("</section>")
    return "\n".join(out)


def _warning_rows(views, groups) -> list:
    """[where, warning, what to do] of the machines' cautions (once each)
    and of the runs' own warnings."""
    rows = []
    # the machine's cautions of documents before version 4 (no "source")
    machine_ids = {"hypervisor", "governor", "turbo", "smt", "thp_always", "no_pmu",
                   "no_invariant_tsc", "perf_event_paranoid", "low_memory"}
    for i, (fp, members) in enumerate(groups):
        try:
            machine_cautions = machine_facts(fp, [v.doc for v in members])[1]
        except Exception:
            machine_cautions = []
        where = "machine" if len(groups) == 1 else f"machine {i + 1}"
        for c in machine_cautions:
            rows.append([e(where), f"<b>{e(c.get('id'))}</b>: {e(c.get('message'))}",
                         e(c.get("advice") or "–")])
        machine_ids |= {str(c.get("id")) for c in machine_cautions if c.get("id")}
    for v in views:
        for w in (v.doc or {}).get("warnings") or []:
            if w.get("source") == "machine" or w.get("id") in machine_ids \
                    or str(w.get("id", "")).startswith("run_"):
                continue        # machine cautions listed once above; run status in its section
            rows.append([f'<a href="#{e(v.anchor)}">{e(v.run["experiment"])}</a>',
                         f"<b>{e(w.get('id'))}</b>: {e(w.get('message'))}",
                         e(w.get("advice") or _default_advice(w))])
    return rows


def warnings_html(views) -> str:
    """At the end, folded: every noise warning of the machine and the runs
    ("" when there is none: the machine section says so)."""
    rows = _warning_rows(views, _fingerprints(views))
    if not rows:
        return ""
    return "\n".join(['<section id="warnings">', "<h2>Noise warnings</h2>",
                      fold(f"{len(rows)} warning(s) from the machine and the samples",
                           table(["where", "warning", "what to do"], rows, "warnings")),
                      "</section>"])


def _default_advice(warning) -> str:
    # a warning written without advice (a note) shows its kind's hint
    return hint_of(warning.get("id")) or "–"


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
    keys: list[str] = []
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
                     f'<span class="num">{e(format_value(p.get("median"), unit))}</span>',
                     f'<span class="num">{e(format_ci(p.get("ci_low"), p.get("ci_high"), unit))}</span>',
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


def run_html(view, db_arg, plot_html) -> str:
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
                f'{e(f.get("claim"))}: <b>{e(format_value(f.get("value"), f.get("unit")))}</b>'
                + (' <span class="dim">(95% CI '
                   f'{e(format_ci(f.get("ci_low"), f.get("ci_high"), f.get("unit")))})</span>'
                   if f.get("ci_low") is not None else "") + "</li>"
                for f in findings) + "</ul>")
        # folded: the figure shows the shape; the table is there to read numbers
        out.append(f"<details><summary>Key table: {len(doc.get('points') or [])} point(s), "
                   f"median and 95% CI each</summary>" + points_html(view, db_arg) + "</details>")
    out.append(f'<p class="dim">Parameters: <a href="#params-{e(view.anchor)}">at the end</a>.</p>')
    out.append("</section>")
    return "\n".join(out)


def experiments_html(views, db_arg, plot_html) -> str:
    """One section per run; plot_html(view) draws its figure."""
    out = ['<section id="experiments">', "<h2>Experiments</h2>"]
    out.extend(run_html(v, db_arg, plot_html) for v in views)
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
    """One title line, one line of what and when, the state: the rest of the
    first screen is the answers."""
    state_cls, state = _survey_state(sel, views)
    machines = [v.run.get("machine") for v in views if isinstance(v.run.get("machine"), dict)]
    cpu = ((machines[0].get("cpu") or {}).get("model_name") if machines else None) or "unknown CPU"
    what = (", ".join(f"survey {s['id']} ({s.get('preset')})" for s in sel.surveys)
            or f"{len(views)} run(s)")
    return "\n".join(['<header>', f'<h1>memfx report <span class="state {state_cls}">'
                                   f'{e(state)}</span></h1>',
                      f'<p class="sub">{e(cpu)} · {e(what)} · written {e(generated)} by memfx '
                      f'{e(version)} · <a href="#presets">presets and parameters</a></p>',
                      '</header>'])


def params_section_html(sel, views) -> str:
    """At the end: the surveys (command, host, times), what a light preset
    traded away, and every run's parameters."""
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
    out = ['<section id="presets">', "<h2>Presets and parameters</h2>", kv_table(rows, "kv meta"),
           _tradeoff_html(sel, views)]
    each = []
    for v in views:
        each.append(f'<h3 id="params-{e(v.anchor)}"><a href="#{e(v.anchor)}">{e(v.run["experiment"])}'
                    f'</a> <span class="dim">({e(v.run.get("preset") or "no preset")})</span></h3>')
        each.append(params_html(v))
    if each:
        n = sum(len(v.run.get("params") or {}) for v in views)
        out.append(fold(f"Every run's parameters: {n} value(s) in {len(views)} run(s)",
                        "\n".join(each)))
    out.append("</section>")
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
