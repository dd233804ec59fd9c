"""The advice in the report: what `memfx advise` stored with the reported
runs (or later on the same machine), as a summary of decisions and checked
gains, the whole document folded under it, and the short list the first
screen shows."""
from __future__ import annotations

from ..model.errors import StoreError
from ..model.units import MISSING, format_ratio, gain_text
from .html import _finite, code, e, json_html, table

ADVICE_ARTIFACT = "advice"


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
    """A check's overall gain (units.gain_text), or '–' when nothing was measured."""
    overall = (check or {}).get("overall") or {}
    return gain_text(overall.get("ratio"), overall.get("ci_low"), overall.get("ci_high"))


def _slower_at(item):
    """Sizes a stored check measured slower where the setting changes the
    code (gain CI wholly below zero): such a setting is never advised, even
    in a document stored before `decide` said so."""
    return [r.get("size") for r in ((item.get("check") or {}).get("per_size") or [])
            if r.get("affected", True) and _finite(r.get("ci_low")) and r["ci_low"] > 1.0]


def _decision(item):
    d = item.get("decision")
    return "keep" if d == "advise" and _slower_at(item) else d


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
        rows.append(["GCC", what, _decision_html(_decision(g)),
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
                     _decision_html(_decision(t)),
                     f'<span class="num">{e(_gain_text(t.get("check")))}</span>',
                     e(t.get("check_reason") or t.get("reason") or "")])
    rows += _prefetch_advice_rows(advice.get("prefetch") or {})
    out = [table(["for", "setting", "decision", "checked gain [95% CI]", "why"], rows, "advice")]
    env = ":".join(f"{t.get('tunable')}={t.get('proposed')}" for t in glibc.get("tunables") or []
                   if _decision(t) == "advise") if glibc.get("advised_env") else None
    if env:
        out.append(f"<p>Advised environment: {code('GLIBC_TUNABLES=' + env)}</p>")
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
        measured = (f"{e(chk.get('ratio_is'))} {format_ratio(ratio, lo, hi)}"
                    if all(_finite(x) for x in (ratio, lo, hi)) else MISSING)
        rows.append(["prefetch", e(i.get("advice") or i.get("reason") or i.get("topic")),
                     _decision_html(i.get("decision")), f'<span class="num">{measured}</span>',
                     e(f"{i.get('topic')}: {i.get('check_reason') or ''}")])
    return rows


# Decisions that recommend a change (the rest keep the default).
RECOMMENDED = ("advise", "confirmed")
# At most this many advice lines on the first screen; the rest are in #advice.
FIRST_SCREEN_ITEMS = 6


def _advice_lines(advice):
    """[(recommended?, html)] of a memfx-advice document: each GCC string,
    glibc tunable and prefetch item with its decision and checked gain."""
    lines = []
    for fn, g in (advice.get("gcc") or {}).items():
        if g.get("string"):
            lines.append((_decision(g) in RECOMMENDED,
                          f"GCC {code('-m' + fn + '-strategy=' + str(g['string']))}: "
                          f"{_decision_html(_decision(g))} "
                          f"<span class=\"num\">{e(_gain_text(g.get('check')))}</span>"))
    glibc = advice.get("glibc") or {}
    for t in glibc.get("tunables") or []:
        if t.get("proposed") is not None:
            lines.append((_decision(t) in RECOMMENDED,
                          f"glibc {code(str(t.get('tunable')) + '=' + str(t.get('proposed')))}"
                          f" (now {e(t.get('current'))}): {_decision_html(_decision(t))} "
                          f"<span class=\"num\">{e(_gain_text(t.get('check')))}</span>"))
    for i in (advice.get("prefetch") or {}).get("items") or []:
        lines.append((i.get("decision") in RECOMMENDED,
                      f"prefetch: {e(i.get('advice') or i.get('reason') or i.get('topic'))} "
                      f"{_decision_html(i.get('decision'))}"))
    return lines


def first_screen_advice_html(advice_items, views) -> str:
    """The advice in a few lines for the first screen: what is recommended,
    with its checked gain, or why nothing is; the whole of it is in #advice."""
    out = ["<h3>Advice</h3>"]
    if not advice_items:
        out.append('<p class="note">No advice is stored for these runs or this machine: '
                   '<code>memfx advise</code> derives GCC and glibc settings from the copy run '
                   'and checks each by measuring it (<code>memfx survey</code> runs it unless '
                   'given <code>--no-advise</code>).</p>')
        return "\n".join(out)
    for run, advice, _ in advice_items:
        lines = _advice_lines(advice) if (isinstance(advice, dict)
                                          and advice.get("kind") == "memfx-advice") else None
        if lines is None:
            out.append('<p>Advice stored by <code>memfx advise</code>: '
                       '<a href="#advice">see the advice section</a>.</p>')
            continue
        good = [html for ok, html in lines if ok]
        if good:
            shown = good[:FIRST_SCREEN_ITEMS]
            out.append('<ul class="advice-short">' + "".join(f"<li>{x}</li>" for x in shown)
                       + "</ul>")
            more = len(lines) - len(shown)
            out.append('<p class="dim">Gains are checked by measuring (positive is faster). '
                       + (f"{more} more setting(s) checked: " if more > 0 else "")
                       + '<a href="#advice">the advice in full</a>.</p>')
        else:
            out.append(f"<p>{len(lines)} setting(s) checked by measuring; none was faster than "
                       f"the default: keep the defaults (<a href=\"#advice\">the advice in "
                       f"full</a>).</p>")
    return "\n".join(out)
