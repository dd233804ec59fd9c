"""The terminal screens a person reads: one line per answer, as wide as the
terminal.  `memfx show` (a run or a survey), the end of `memfx survey` and
`memfx compare` print through here.

Rules: a line never exceeds the width (`term_width`: COLUMNS, else the
tty's width, never below 80); a question id is never cut -- the sentence
after it is shortened instead, with the whole of it under `--details`; a
survey leads with its headline answers grouped by seed story (one 40-line
screen), then the advice with its measured gains, one data-quality line and
how to see the rest.  Reads documents only; prints plain lines.
"""
from __future__ import annotations

import fnmatch
import os
import sys
import textwrap
from typing import Any, Iterable, List, Mapping, Optional, Sequence

from rich.cells import cell_len

from ..model.units import format_estimate, format_value, gain_text
from .render import clean

MIN_WIDTH = 80
# Width when standard output is not a terminal and COLUMNS is not set.
PIPE_WIDTH = 100
# The first screen of `memfx show SURVEY`: the headline answers fit in it.
SCREEN_LINES = 40
# Below this many columns the sentence is left out rather than cut to a stub.
MIN_BECAUSE = 12

VERDICT_WORDS = {"detected": "detected", "not_detected": "not detected",
                 "inconclusive": "inconclusive", "measured": "", "not_measured": "not measured"}


def term_width(stream=None) -> int:
    """COLUMNS, else the terminal's width, else PIPE_WIDTH; at least MIN_WIDTH."""
    from ..model.errors import ParamError
    from ..model.units import parse_int
    try:                    # ASCII digits only: str.isdigit() took "²", which int() refuses
        given = parse_int(os.environ.get("COLUMNS", ""), "COLUMNS")
    except ParamError:
        given = 0
    if 0 < given < 1 << 16:
        return max(MIN_WIDTH, given)
    stream = stream or sys.stdout
    try:
        return max(MIN_WIDTH, os.get_terminal_size(stream.fileno()).columns)
    except (OSError, AttributeError, ValueError):
        return PIPE_WIDTH


def console(stderr: bool = False):
    """memfx's one way to a terminal: a rich Console on stdout (results) or
    stderr (progress, warnings), as wide as term_width() says, with emoji
    codes and automatic highlighting off -- text from a measurement, a user
    or a program (`libcall:-1:noalign`, a command line) prints as it is."""
    from rich.console import Console
    return Console(stderr=stderr, width=term_width(sys.stderr if stderr else sys.stdout),
                   emoji=False, highlight=False)


def fit(line: str, width: int) -> str:
    """``line`` fitted to ``width`` terminal cells by wrapping it at spaces
    (continuation lines indented, joined by newlines): never cut, and a word
    longer than the width (a flag, a path, an id) stands whole on its own
    line (wrap_whole).  Screens split the result into lines (_lines)."""
    return "\n".join(wrap_whole(line, width))


def _lines(out: Iterable[str]) -> List[str]:
    """A screen's entries as terminal lines (a fitted entry may hold several)."""
    return [line for entry in out for line in str(entry).split("\n")]


def _pad(text: str, width: int) -> str:
    return text + " " * max(0, width - cell_len(text))


def select(answers: Iterable[Mapping[str, Any]], pattern: Optional[str]) -> List[Mapping[str, Any]]:
    """The answers whose question id matches the glob ``pattern`` (all without one)."""
    answers = list(answers)
    if not pattern:
        return answers
    return [a for a in answers if fnmatch.fnmatchcase(str(a.get("question")), pattern)]


# ---- one answer ---------------------------------------------------------------

def value_text(a: Mapping[str, Any]) -> str:
    """'1.27 ns [1.12–1.45]', '6.61x [6.4–6.8]', '4 ranges', '' without a value."""
    return format_estimate(a.get("value"), a.get("ci_low"), a.get("ci_high"), a.get("unit"))


def answer_text(a: Mapping[str, Any]) -> str:
    """The verdict in words and the value: 'detected 8.38x [8.04–8.76]'."""
    word = VERDICT_WORDS.get(str(a.get("verdict")), str(a.get("verdict") or ""))
    return " ".join(x for x in (word, value_text(a)) if x)


def answer_lines(answers: Sequence[Mapping[str, Any]], width: int, indent: str = "",
                 full: bool = False) -> List[str]:
    """One line per answer: id, verdict and value, then as much of the
    sentence as fits (``full``: the whole sentence, wrapped, under the line)."""
    if not answers:
        return []
    ids = [clean(a.get("question")) for a in answers]
    texts = [clean(answer_text(a)) for a in answers]
    id_w = max(cell_len(i) for i in ids)
    out = []
    for qid, t, a in zip(ids, texts, answers):
        # ids aligned; the verdict and value as long as they are, so that
        # the sentence gets every column left
        head = f"{indent}{_pad(qid, id_w)}  {t}"
        because = clean(a.get("because")).strip()
        room = width - cell_len(head) - 2
        if full:
            out.append(fit(head.rstrip(), width) if cell_len(head.rstrip()) > width
                       else head.rstrip())
            sub = indent + "    "
            out += textwrap.wrap(because, width=max(20, width - len(sub)),
                                 initial_indent=sub, subsequent_indent=sub) or []
            continue
        if cell_len(head) > width - MIN_BECAUSE:     # a long value: id and value kept whole
            line = f"{indent}{qid}  {t}"
            out += [line] if cell_len(line) <= width else [f"{indent}{qid}", f"{indent}    {t}"]
            continue
        # the sentence only whole: a sentence cut after twenty characters
        # says less than none (`memfx show --full` has every one)
        out.append((head + "  " + because).rstrip() if because and cell_len(because) <= room
                   else head.rstrip())
    return _lines(out)


# ---- the parts of a screen ----------------------------------------------------------

def seed_heading(seed: str) -> str:
    from ..model.answers import SEEDS
    title, question = SEEDS.get(str(seed), (None, None))
    return f"{seed} {title}: {question}" if title else f"seed {seed}"


def headline_lines(answers: Sequence[Mapping[str, Any]], width: int) -> List[str]:
    """The headline answers grouped under their seed story, seeds in order."""
    heads = [a for a in answers if a.get("headline")]
    out = []
    for seed in sorted({str(a.get("seed") or "") for a in heads}):
        out.append(fit(seed_heading(seed), width))
        out += answer_lines([a for a in heads if str(a.get("seed") or "") == seed], width,
                            indent="  ")
    return _lines(out)


def _gain_text(overall: Optional[Mapping[str, Any]]) -> str:
    """'measured +3.1% [+1.0%, +5.3%]' (units.gain_text), or 'not measured'."""
    if not overall or not overall.get("ratio"):
        return "not measured"
    return "measured " + gain_text(overall.get("ratio"), overall.get("ci_low"),
                                   overall.get("ci_high"))


def advice_lines(advice: Optional[Mapping[str, Any]], width: int) -> List[str]:
    """One line per piece of advice: what to do, and the gain the check measured."""
    if not advice:
        return []
    out = []
    for fn, g in (advice.get("gcc") or {}).items():
        if not isinstance(g, dict):
            continue
        flag = f"-m{fn}-strategy={g.get('string')}"
        gain = _gain_text((g.get("check") or {}).get("overall"))
        decision = g.get("decision") or "keep"
        if not g.get("string"):
            out.append(f"  keep GCC's {fn} default: {g.get('reason') or 'no strategy proposed'}")
        elif decision == "advise":
            out.append(f"  advise {flag}: {gain}")
        elif decision == "unchecked":
            out.append(f"  unchecked: {flag} ({g.get('check_reason') or 'not measured'})")
        else:
            out.append(f"  keep GCC's {fn} default; {flag} {gain}")
    for p in (advice.get("glibc") or {}).get("tunables") or []:
        name = str(p.get("tunable") or "?")
        gain = _gain_text((p.get("check") or {}).get("overall"))
        decision = p.get("decision") or "keep"
        if decision == "advise":
            out.append(f"  advise GLIBC_TUNABLES={name}={p.get('proposed')} (now "
                       f"{p.get('current')}): {gain}")
        elif decision == "unchecked":
            out.append(f"  unchecked: {name}={p.get('proposed')} (now {p.get('current')})")
        elif p.get("proposed") is None:    # nothing to propose: say why
            out.append(f"  keep glibc's {name.split('.')[-1]} {p.get('current')}: "
                       f"{p.get('reason') or 'no better value measured'}")
        else:
            out.append(f"  keep glibc's {name.split('.')[-1]} {p.get('current')}; "
                       f"{p.get('proposed')} {gain}")
    for i in (advice.get("prefetch") or {}).get("items") or []:
        chk = i.get("check") or {}
        ratio = chk.get("ratio")
        measured = (f"check: {chk.get('ratio_is', 'ratio')} {ratio:.3f}" if ratio is not None
                    else "not checked")
        out.append(f"  prefetch ({i.get('decision')}): {i.get('advice') or i.get('reason') or '-'}"
                   f" ({measured})")
    return _lines(fit(x, width) for x in out)


def wrap_whole(text: str, width: int, indent: str = "    ") -> List[str]:
    """``text`` wrapped at spaces to ``width``, continuation lines indented;
    a word is never broken (a flag, a tunable, a path or an id longer than
    the width stands whole on its own line), so what a user copies is exact."""
    text = clean(text)
    lead = text[:len(text) - len(text.lstrip())]
    return textwrap.wrap(text, width=max(20, width), initial_indent="",
                         subsequent_indent=lead + indent, break_long_words=False,
                         break_on_hyphens=False, drop_whitespace=True) or [text] \
        if cell_len(text) > width else [text]


def noisy_points(documents: Iterable[Mapping[str, Any]]):
    """(points with more than the threshold noisy_run of their samples
    rejected, points) over the documents."""
    from ..model.findings import threshold
    limit = threshold("noisy_run")
    noisy = total = 0
    for d in documents:
        for p in d.get("points") or []:
            taken = (p.get("n") or 0) + (p.get("rejected") or 0)
            total += 1
            if taken and (p.get("rejected") or 0) / taken > limit:
                noisy += 1
    return noisy, total


def quality_line(documents: Sequence[Mapping[str, Any]], target: str, width: int) -> str:
    """One line: how many points had too many samples rejected, how many
    warnings the runs carry, and where to see them."""
    from ..model.findings import threshold
    noisy, total = noisy_points(documents)
    warnings = sum(len(d.get("warnings") or []) for d in documents)
    limit = threshold("noisy_run")
    busy = busy_text(documents)
    long = (f"data quality: {noisy} of {total} points had > {limit:.0%} of their samples "
            f"rejected" + (": noisy" if noisy else "") + (f"; {busy}" if busy else "")
            + (f"; {warnings} warnings: memfx show {target} --warnings" if warnings else ""))
    if cell_len(long) <= width:
        return long
    return fit(f"data quality: {noisy} of {total} points noisy (>{limit:.0%} rejected)"
               + (f", {busy}" if busy else "")
               + (f", {warnings} warnings (--warnings)" if warnings else ""), width)


def busy_text(documents: Sequence[Mapping[str, Any]]) -> str:
    """'busy: other work kept 1.6 CPUs busy in 5 of 12 runs', or '' when
    no run measured on a busy machine (results.busy_summary)."""
    busy = [d["busy"] for d in documents if isinstance(d.get("busy"), Mapping)]
    marked = [b for b in busy if b.get("busy")]
    if not marked:
        return ""
    most = max(b.get("others_cpus") or 0.0 for b in marked)
    where = f" in {len(marked)} of {len(busy)} runs" if len(busy) > 1 else ""
    return f"busy: other work kept up to {most:.1f} CPUs busy{where}"


def warning_lines(documents: Sequence[Mapping[str, Any]], width: int) -> List[str]:
    """Each run's warnings, one line each, under its run."""
    out = []
    for d in documents:
        ws = d.get("warnings") or []
        if not ws:
            continue
        out.append(fit(f"{d.get('experiment')} run {d.get('run_id')}: {len(ws)} warnings", width))
        for w in ws:
            out.append(fit(f"  {w.get('id')}: {w.get('message')}", width))
    return _lines(out)


# ---- whole screens ---------------------------------------------------------------

def survey_screen(doc: Mapping[str, Any], width: int, advice=None, show_all=False,
                  full=False, pattern=None) -> List[str]:
    """`memfx show SURVEY` (and the end of `memfx survey`)."""
    sid = doc.get("survey_id")
    answers = doc.get("answers") or []
    head = (f"survey {sid} ({doc.get('status')}, {doc.get('preset') or '?'})"
            + (f" on {doc['machine_id']}" if doc.get("machine_id") else ""))
    if pattern:
        chosen = select(answers, pattern)
        return _lines([fit(f"{head}: {len(chosen)} of {len(answers)} answers match "
                           f"{pattern!r}", width)] + answer_lines(chosen, width, full=full))
    out = [fit(head, width)]
    out += headline_lines(answers, width)
    advised = advice_lines(advice, width)
    if advised:
        out.append("advice (checked by measuring):")
        out += advised
    out.append(quality_line(doc.get("documents") or [], str(sid), width))
    rest = [a for a in answers if not a.get("headline")]
    if show_all or full:
        for exp in dict.fromkeys(str(a.get("experiment") or a["question"].split(".")[0])
                                 for a in rest):
            out.append(exp + ":")
            out += answer_lines([a for a in rest if str(a.get("experiment") or
                                                        a["question"].split(".")[0]) == exp],
                                width, indent="  ", full=full)
    elif rest:
        out.append(fit(f"{len(rest)} more answers: memfx show {sid} --all", width))
    return _lines(out)


def run_screen(doc: Mapping[str, Any], width: int, full=False, pattern=None) -> List[str]:
    """`memfx show RUN`: the run's answers, one line each, then data quality."""
    answers = doc.get("answers") or []
    chosen = select(answers, pattern)
    what = (f"{len(chosen)} of {len(answers)} answers match {pattern!r}" if pattern
            else f"{len(answers)} answers")
    out = [fit(f"{doc.get('experiment')} run {doc.get('run_id')} ({doc.get('status')}, "
               f"{doc.get('preset') or '?'} preset): {what}", width)]
    out += answer_lines(chosen, width, indent="  ", full=full)
    out.append(quality_line([doc], str(doc.get("run_id")), width))
    return _lines(out)


# ---- compare ------------------------------------------------------------------------

def compare_lines(doc: Mapping[str, Any], width: int, show_all=False) -> List[str]:
    """`memfx compare`: the summary first, then one line per changed row
    (every row with ``show_all``): question, verdict, B/A [CI], A -> B."""
    from ..analysis.compare import changed, ratio_text, sides, summary
    rows = list(doc.get("rows") or [])
    shown = rows if show_all else changed(rows)
    out = [fit(summary(doc), width), fit(sides(doc), width)]
    if shown:
        id_w = max(cell_len(clean(r["question"])) for r in shown)
        verdict_w = max(cell_len(str(r["verdict"])) for r in shown)
        for r in shown:
            unit = r.get("unit") or ""
            line = (f"  {_pad(clean(r['question']), id_w)}  {_pad(str(r['verdict']), verdict_w)}  "
                    f"{ratio_text(r)}  {format_value(r.get('a'), unit)} -> {format_value(r.get('b'), unit)}"
                    + (f"  ({r['busy']} busy)" if r.get("busy") else ""))
            out.append(fit(line, width))
            if r.get("reason") and r["verdict"] != "unchanged":
                out.append(fit(f"    {r['reason']}", width))
    hidden = len(rows) - len(shown)
    if hidden:
        out.append(fit(f"{hidden} rows unchanged, not judged or not comparable: --all lists "
                       f"every row", width))
    return out + curve_lines(doc, width, show_all)


def curve_lines(doc: Mapping[str, Any], width: int, show_all=False) -> List[str]:
    """After the answers: the curve ranges that changed (every range with
    ``show_all``), one line each, then the details that changed; nothing
    for a document that did not compare curves (version 2)."""
    from ..analysis.compare import curve_changes, curve_heading, detail_text
    out = []
    heading = curve_heading(doc)
    if heading:
        out.append(fit(heading, width))
        ranges = curve_changes(doc, show_all)
        verdict_w = max((cell_len(str(r.get("verdict"))) for r in ranges), default=0)
        for r in ranges:
            out.append(fit(f"  {_pad(str(r.get('verdict')), verdict_w)}  "
                           f"{clean(str(r.get('text')))}", width))
            if show_all and r.get("reason"):
                out.append(fit(f"    {r['reason']}", width))
    changes = list(doc.get("detail_changes") or [])
    if changes:
        out.append(fit("details changed:", width))
        for c in changes:
            out.append(fit(f"  {clean(str(c.get('question')))}  {clean(detail_text(c))}", width))
    return _lines(out)
