"""`memfx survey`: every registered experiment with one preset, grouped as
one survey in the store, then one HTML report.  Ctrl-C keeps every finished
run and still writes the report of what exists, marked incomplete."""
from __future__ import annotations

import sys
import time

from .errors import MemfxError

# Experiments run in this order when present (the foundation first); any
# other registered experiment follows in registration order.
PREFERRED_ORDER = ["latency", "fill", "copy", "aliasing", "store-forward"]


def select(only=None, skip=None):
    from .experiments import REGISTRY
    names = [n for n in PREFERRED_ORDER if n in REGISTRY] + \
            [n for n in REGISTRY if n not in PREFERRED_ORDER]
    for opt, given in (("--only", only), ("--skip", skip)):
        for n in given or []:
            if n not in REGISTRY:
                raise MemfxError(f"{opt}: unknown experiment {n!r}; known: {', '.join(names)}")
    if only:
        names = [n for n in names if n in only]
    if skip:
        names = [n for n in names if n not in skip]
    if not names:
        raise MemfxError("the survey selects no experiment")
    return names


def _split(text):
    return [s.strip() for s in text.split(",") if s.strip()] if text else None


def run_survey(args, get_machine, open_store, progress_runner, console):
    from .report import write_report
    from .runner import RunInterrupted, prepare
    preset = "full" if args.full else "quick"
    names = select(_split(args.only), _split(args.skip))
    fp = get_machine()
    for n in names:          # validate everything before the DB is touched
        prepare(n, preset, {}, fp)
    store = open_store(args)
    survey_id = store.begin_survey(preset, sys.argv[1:])
    con = console()
    status, t0 = "complete", time.monotonic()
    failures = []
    try:
        for i, name in enumerate(names, 1):
            con.print(f"[bold]survey {survey_id}[/bold]: experiment {i} of {len(names)}: {name} "
                      f"({time.monotonic() - t0:.0f} s so far)")
            try:
                progress_runner(store, fp, name, preset, {}, args.quiet, survey_id=survey_id)
            except RunInterrupted:
                raise
            except MemfxError as e:   # one experiment failing does not end the survey
                failures.append(f"{name}: {e}")
                con.print(f"[red]{name} failed:[/red] {e}")
    except (RunInterrupted, KeyboardInterrupt):
        status = "interrupted"
        con.print("[yellow]interrupted: keeping the finished runs and writing the report[/yellow]")
    store.finish_survey(survey_id, status)
    path = write_report(store, [survey_id], args.output)
    elapsed = time.monotonic() - t0
    con.print(f"survey {survey_id} {status} in {elapsed:.0f} s; report: {path}")
    if failures:
        con.print("[red]failed experiments:[/red] " + "; ".join(failures))
    return 130 if status == "interrupted" else (1 if failures else 0)
