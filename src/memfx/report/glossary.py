"""The words memfx uses, defined once.

docs/glossary.md is written from this module (`python -m memfx.report.glossary
> docs/glossary.md`; a test checks they agree), and the report's "How to read
this" fold shows the same definitions, so the two never drift apart."""
from __future__ import annotations

import html
from typing import List, Optional, Tuple

from ..model.answers import SEEDS

INTRO = ("What each term means where memfx prints it: on the terminal, in the report, "
         "in the JSON documents.")

# (term, what else it is called or None, definition); alphabetical, as read
TERMS: Tuple[Tuple[str, Optional[str], str], ...] = (
    ('answer', None,
     'what a run says to one declared question: a verdict, a value with its unit and a 95 '
     '% confidence interval, and a sentence saying what was found. Every run answers every '
     'question of its experiment (`not measured`, with the reason, when it could not).'),
    ('arm', None,
     'one of the things an experiment compares at the same point: the zero fill and the '
     'non-zero fill, rep movsb and an AVX2 loop, the aligned and the line-splitting load. '
     'Arms of a point are measured interleaved (A B B A), each re-warmed after the other '
     'ran.'),
    ('band', 'no-effect band',
     'how large a difference must be before memfx calls it an effect or a change; below it '
     'the verdict is "not detected" or "unchanged". Each question declares its band (5 % '
     'by default, `effect_band`); in a virtual machine absolute figures get a wider one, '
     "because the host moves them. `memfx compare` widens it further by the machine's own "
     'history.'),
    ('busy', None,
     'other work kept the CPUs busy while memfx measured. memfx measures how much (other '
     "processes' CPU time, steal time, load average, the share of samples it had to "
     "reject) and says so on the data-quality line and beside `compare`'s rows."),
    ('cell', None,
     'the points a worker measures together: every arm at one size or setting. The '
     'progress line counts cells.'),
    ('CI', 'confidence interval',
     'the range that holds the true value with 95 % confidence, computed from the '
     'replicas, not from the samples of one process: samples of one process share its '
     "buffers, page placement and the host's state at the time, and would give a range "
     'that the next run falls outside.'),
    ('crossover', None,
     'the size at which one strategy starts beating another (rep movsb against a vector '
     'loop, non-temporal against ordinary stores).'),
    ('detected / not detected / inconclusive', None,
     "an effect's verdict: its CI lies entirely beyond the band, entirely within it, or "
     "straddles the band's edge (or the replicas or host states disagree)."),
    ('headline', None,
     'the answers to the seed questions, which a survey shows first.'),
    ('host state', None,
     'a mode of a shared host that whole replicas fall into (the host placed the two vCPUs '
     "on one core's two threads, or on two cores; a neighbour evicted the shared last- "
     'level cache). An answer whose replicas split into states lists each state with its '
     'value and share; `compare` reads a move between known states as "host state '
     'changed", not as a regression.'),
    ('host-shared', None,
     "a figure a virtual machine shares with the host's other tenants (the last-level "
     'cache, DRAM bandwidth, time itself), and so compared with the wider band.'),
    ('point', None,
     'one arm at one set of parameters (a size, a stride, an offset): its samples, their '
     'median and CI.'),
    ('preset', None,
     "a named set of parameter values: `quick` (the survey's default) or `full` (more "
     'sizes, more samples).'),
    ('replica', None,
     'one worker process measuring a whole run: its own buffers, physical pages, random '
     'orders and moment. A run has several (three in quick and full, seven for atomics), '
     'measured minutes apart in a survey; the CI comes from the spread between them.'),
    ('run', None,
     'one experiment measured once (all its replicas), stored with every sample, its '
     "parameters and the machine's fingerprint."),
    ('sample', None,
     'one timed stretch of a kernel (at least `min_sample_ms`), rejected when a context '
     'switch, migration or page fault touched it.'),
    ('seed', None,
     'one of the stories memfx reproduces and measures, by number:'),
    ('survey', None,
     'every experiment run once (`memfx survey`), in rounds (replica 1 of each experiment, '
     'then replica 2, ...), with the advice checked and one report.'),
    ('x', None,
     'a ratio: "2.1x" is 2.1 times. Shares of time or of samples are percentages.'),
)

# the term whose definition the seed table follows
SEED_TERM = "seed"


def _seed_rows() -> List[Tuple[str, str, str]]:
    return [(number, title, question) for number, (title, question) in SEEDS.items()]


def markdown() -> str:
    """docs/glossary.md."""
    out = ["# The words memfx uses", "", *_wrap(INTRO), ""]
    for term, aside, body in TERMS:
        head = f"**{term}**" + (f" ({aside})" if aside else "")
        out += _wrap(f"{head} — {body}") + [""]
        if term == SEED_TERM:
            out += ["| seed | story | question |", "|---|---|---|"]
            out += [f"| {n} | {t} | {q} |" for n, t, q in _seed_rows()] + [""]
    return "\n".join(out)


def _wrap(text: str, width: int = 76) -> List[str]:
    lines: List[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def html_fold() -> str:
    """The report's "How to read this" fold: every term, then the seeds."""
    e = html.escape
    items = "".join(f"<dt>{e(term)}" + (f" <span class=\"aside\">({e(aside)})</span>" if aside else "")
                    + f"</dt><dd>{_code(e(body))}</dd>" for term, aside, body in TERMS)
    seeds = "".join(f"<tr><td>{e(n)}</td><td>{e(t)}</td><td>{e(q)}</td></tr>"
                    for n, t, q in _seed_rows())
    return ("<details class=\"fold\"><summary>every term memfx uses, and the seeds</summary>"
            f"<p>{e(INTRO)}</p><dl>{items}</dl>"
            "<table><tr><th>seed</th><th>story</th><th>question</th></tr>"
            f"{seeds}</table></details>")


def _code(escaped: str) -> str:
    """`x` in a definition as <code>x</code>."""
    parts = escaped.split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


if __name__ == "__main__":
    print(markdown(), end="")
