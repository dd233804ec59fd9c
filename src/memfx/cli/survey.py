"""`memfx survey`: every registered experiment with one preset, grouped as
one survey in the store, then one HTML report.  Ctrl-C keeps every finished
run and still writes the report of what exists, marked incomplete."""
from __future__ import annotations

import json
import statistics
import sys
import time

from ..model.errors import MemfxError


def select(only=None, skip=None):
    """Experiment names in survey order: each experiment's declared `order`
    (the foundation first), or the user's order given to --only."""
    from ..experiments import REGISTRY, all_experiments
    names = [e.name for e in all_experiments()]
    for opt, given in (("--only", only), ("--skip", skip)):
        for n in given or []:
            if n not in REGISTRY:
                raise MemfxError(f"{opt}: unknown experiment {n!r}; known: {', '.join(names)}")
    if only:                 # the user's order
        names = list(dict.fromkeys(only))
    if skip:
        names = [n for n in names if n not in skip]
    if not names:
        raise MemfxError("the survey selects no experiment")
    return names


def _split(text):
    return [s.strip() for s in text.split(",") if s.strip()] if text else None


def estimate(store, name, preset, exp, params, machine):
    """Seconds a run will take: the median of earlier complete runs with the
    same preset and replicas in this DB, measured alone (honest: a survey's
    run spans the rounds between its replicas), else the experiment's own
    guess for one replica times the replicas."""
    replicas = int(params.get("replicas") or 1)
    past = [r["duration_s"] for r in store.runs(experiment=name, status="complete")
            if r.get("preset") == preset and r.get("duration_s") and not r.get("survey_id")
            and int((r.get("params") or {}).get("replicas") or 1) == replicas]
    if past:
        return statistics.median(past[:5]), "from earlier runs"
    return exp.estimate_seconds(params, machine) * replicas, "rough guess"


def past_survey_seconds(store, preset, names, with_advice):
    """The median wall time of up to 5 earlier complete surveys in this
    store with the same preset, the same number of runs and advice the same
    way (a survey's runs interleave their replicas, so their own durations
    do not add up to it); None without one."""
    from datetime import datetime
    past = []
    for s in store.surveys():
        if (s.get("status") != "complete" or s.get("preset") != preset or not s.get("finished")
                or s.get("n_runs") != len(names)
                or ("--no-advise" in (s.get("argv") or [])) == with_advice):
            continue
        try:
            t0, t1 = (datetime.fromisoformat(str(s[k]).replace("Z", "+00:00"))
                      for k in ("started", "finished"))
        except ValueError:
            continue
        past.append((t1 - t0).total_seconds())
        if len(past) == 5:
            break
    return statistics.median(past) if past else None


def run_survey(args, get_machine, open_store, console):
    from ..analysis.documents import survey_document
    from ..model.outputs import atomic_output
    from ..report.report import write_report
    from ..running.runner import Measurement, RunInterrupted, prepare
    preset = "full" if args.full else "quick"
    names = select(_split(args.only), _split(args.skip))
    fp = get_machine()
    prepared = {n: prepare(n, preset, {}, fp) for n in names}   # bad input fails before the DB is touched
    store = open_store(args)
    store.mark_stale_running()
    guesses = {n: estimate(store, n, preset, prepared[n][0], prepared[n][1], fp)[0] for n in names}
    with_advice = "copy" in names and not args.no_advise
    if with_advice:
        guesses["advise"] = ADVICE_SECONDS[preset]
    past_seconds = past_survey_seconds(store, preset, names, with_advice)
    survey_id = store.begin_survey(preset, sys.argv[1:], labels=getattr(args, "labels", None))
    # stdout carries the results only (the answers, or --json's document);
    # the progress and the step lines go to stderr
    out = None if getattr(args, "json", False) else console()
    con = _stderr_console()
    quiet = bool(getattr(args, "quiet", False))
    status, t0 = "complete", time.monotonic()
    failures, durations = {}, {}
    documents = None            # {run id: result document}, made once after the runs
    guessed = sum(guesses.values())
    how_long = (f"about {past_seconds:.0f} s (earlier surveys here)" if past_seconds else
                f"about {guessed:.0f} s (a rough guess)")
    # the bar's seconds: each step's guess, scaled to this machine's history
    scale = past_seconds / guessed if past_seconds and guessed else 1.0
    if not quiet:
        con.print(f"memfx survey {survey_id} ({preset}): {len(names)} experiment"
                  f"{'s' if len(names) != 1 else ''}, {how_long}",
                  markup=False, highlight=False, soft_wrap=True)
    steps = _Steps(con, quiet)
    open_runs = {}              # name -> Measurement begun and not yet finished
    try:
        with _progress(con, quiet) as prog:
            bar = prog.add_task("survey", total=guessed * scale, label="") if prog else None
            # Rounds: replica r of every experiment, then replica r + 1 of
            # every experiment, ... so that a run's replicas are minutes apart
            # and a host that is busy for a while hits one replica of many
            # runs, not every replica of one (issue 22).
            rounds = max(prepared[n][1].get("replicas", 1) for n in names)
            for rnd in range(rounds):
                for i, name in enumerate(names, 1):
                    if name in failures:
                        continue
                    if rnd == 0:
                        try:
                            open_runs[name] = Measurement(name, store, fp, preset, {},
                                                          survey_id=survey_id)
                        except MemfxError as e:
                            failures[name] = str(e)
                            steps.failed(name, e)
                            continue
                    m = open_runs.get(name)
                    if m is None or rnd >= m.replicas:
                        continue
                    start = time.monotonic()
                    base = sum(durations.values()) * scale
                    title = f"{i}/{len(names)} {name}" + (f", round {rnd + 1}/{rounds}"
                                                          if rounds > 1 else "")
                    if prog:
                        prog.update(bar, description=title, label="")

                    def on_progress(done, total, label, start=start, base=base,
                                    share=guesses[name] * scale / m.replicas):
                        if not prog:
                            return
                        prog.update(bar, label=_cell_label(done, total, label),
                                    completed=base + min(time.monotonic() - start, share))

                    try:
                        m.measure_replica(rnd, on_progress=on_progress)
                        if m.measured == m.replicas:
                            m.finish("complete")
                            del open_runs[name]
                    except MemfxError as e:   # one experiment failing does not end the survey
                        failures[name] = str(e)
                        open_runs.pop(name, None)
                        steps.failed(name, e)
                    durations[name] = durations.get(name, 0.0) + time.monotonic() - start
                    if prog:
                        prog.update(bar, completed=sum(durations.values()) * scale)
                    steps.done(f"{name}" + (f" replica {rnd + 1}" if rounds > 1 else ""),
                               time.monotonic() - start)
        # the survey's runs are analysed once, here, for the advice, the
        # report and the survey document alike
        documents = _analyse(store, survey_id, durations, steps)
        if with_advice and "copy" not in failures:
            steps.begin("advise: deriving GCC/glibc advice from the copy run and checking it "
                        "by measurement")
            start = time.monotonic()
            _advise(store, fp, preset, con, documents)
            durations["advise"] = time.monotonic() - start
            steps.done("advise", durations["advise"])
    except (RunInterrupted, KeyboardInterrupt):
        status = "interrupted"
        for m in open_runs.values():     # begun, waiting for a later round
            if not m.finished:
                m.finish("interrupted", error="interrupted by the user (Ctrl-C) after "
                         f"{m.measured} of {m.replicas} replicas")
        open_runs.clear()
        con.print("interrupted: keeping the finished runs and writing the report",
                  style="yellow", markup=False, highlight=False)
    if status == "complete" and names and len(failures) == len(names):
        status = "failed"          # nothing was measured: not a complete survey
    store.finish_survey(survey_id, status)
    if documents is None:
        documents = _analyse(store, survey_id, durations, steps)
    steps.begin("writing the report")
    start = time.monotonic()
    with atomic_output(args.output, protect=[store.path]) as tmp:   # never over the database
        write_report(store, [survey_id], tmp, documents=documents)
    path = args.output
    doc = survey_document(store, survey_id, documents=documents)
    durations["report"] = time.monotonic() - start
    elapsed = time.monotonic() - t0
    over = budget_caution(preset, elapsed, durations) if status == "complete" else None
    # the time breakdown and any warning first (stderr), then the answers
    # (stdout), so that the answers are what the screen ends with
    plain = {"markup": False, "highlight": False, "soft_wrap": True}
    if not quiet or over:
        con.print(timing_line(preset, elapsed, durations), **plain)
    if over:
        con.print(f"warning ({over['id']}): {over['message']}; {over['advice']}",
                  style="yellow", **plain)
    if failures:
        con.print("failed experiments: " + "; ".join(f"{n}: {e}" for n, e in failures.items()),
                  style="red", **plain)
    if out is None:
        doc_out = {k: v for k, v in doc.items() if k != "documents"}
        doc_out["timing"] = timing(preset, elapsed, durations)
        doc_out["warnings"] = [over] if over else []
        print(json.dumps(doc_out, indent=2, default=str))
    else:
        from ..analysis.documents import survey_advice
        from ..report.screen import survey_screen, term_width
        for line in survey_screen(doc, term_width(), advice=survey_advice(store, doc)):
            out.print(line, **plain)
        out.print(f"survey {survey_id} {status} in {elapsed:.0f} s; report: {path}", **plain)
    return 130 if status == "interrupted" else (1 if failures else 0)


def _analyse(store, survey_id, durations, steps):
    """{run id: result document} of the survey's runs, timed as the step "analysis"."""
    from ..analysis.documents import survey_run_documents
    steps.begin("analysing every run")
    start = time.monotonic()
    documents = survey_run_documents(store, survey_id)
    durations["analysis"] = time.monotonic() - start
    steps.done("analysis", durations["analysis"])
    return documents


def budget_seconds(preset):
    """The survey's time budget (the named threshold survey_budget_<preset>)."""
    from ..model.findings import THRESHOLDS
    t = THRESHOLDS.get(f"survey_budget_{preset}")
    return t.value if t else None


def timing(preset, total_s, durations):
    """The survey's times as data: seconds per step (each experiment, advise,
    report), the total and the budget it is held to."""
    return {"steps_s": {k: round(v, 1) for k, v in durations.items()},
            "total_s": round(total_s, 1), "budget_s": budget_seconds(preset),
            "budget_threshold": f"survey_budget_{preset}"}


def timing_line(preset, total_s, durations):
    """One line: each step's time, slowest first, and the total against the budget."""
    steps = ", ".join(f"{k} {v:.1f} s" for k, v in
                      sorted(durations.items(), key=lambda kv: -kv[1]))
    budget = budget_seconds(preset)
    of = f" of a {budget:.0f} s budget (survey_budget_{preset})" if budget else ""
    return f"time: {steps}; total {total_s:.0f} s{of}"


def budget_caution(preset, total_s, durations):
    """A caution (as data) when the survey took longer than its budget, naming
    the slowest steps; None within budget."""
    from ..model.findings import caution
    budget = budget_seconds(preset)
    if budget is None or total_s <= budget:
        return None
    slowest = sorted(durations.items(), key=lambda kv: -kv[1])[:3]
    return caution(
        "survey_over_budget",
        (f"the {preset} survey took {total_s:.0f} s, over its {budget:.0f} s budget "
         f"(survey_budget_{preset}); slowest: "
         + ", ".join(f"{k} {v:.0f} s" for k, v in slowest)),
        value=round(total_s, 1), threshold=budget, preset=preset).as_dict()


# Interleaved rounds of the advice checks (compile-and-run for GCC, child
# processes with GLIBC_TUNABLES for glibc) per preset: the quick survey
# trades CI width for time.
ADVICE_ROUNDS = {"quick": (5, 5), "full": (9, 7)}
# The quick survey's glibc checks use no control size above this: the
# control above a DRAM-sized non-temporal threshold is a copy of hundreds of
# MiB, which made each check process take six times as long (docs/machine-notes.md);
# the size below the changed range still controls the check.
ADVICE_CONTROL_MAX = {"quick": 64 << 20, "full": None}
# What those checks take (seconds), for the first estimate; the machine's
# own past surveys replace it (docs/machine-notes.md).
ADVICE_SECONDS = {"quick": 12.0, "full": 20.0}


def _advise(store, fp, preset, con, documents=None):
    """Derive and check GCC/glibc advice from the survey's copy run; it is
    stored as that run's artifact, which the report shows."""
    from ..advice.advise import advise
    rounds_gcc, rounds_glibc = ADVICE_ROUNDS[preset]
    try:
        advise(store, fp, check=True, rounds_gcc=rounds_gcc, rounds_glibc=rounds_glibc,
               documents=documents, control_max=ADVICE_CONTROL_MAX[preset])
    except MemfxError as e:
        con.print(f"advice failed: {e}", style="red", markup=False, highlight=False)


class _NoProgress:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _stderr_console():
    from ..report.screen import console
    return console(stderr=True)


def _progress(con, quiet):
    """One live region on stderr, redrawn in place and gone at the end
    (transient): where the survey is, the current experiment and round, the
    cell being measured, the time so far and left.  None when stderr is not
    a terminal (piped: one line per finished step instead, _Steps) or with
    --quiet."""
    if quiet or not con.is_terminal:
        return _NoProgress()
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    return Progress(TextColumn("{task.description}", markup=False), BarColumn(bar_width=20),
                    TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(compact=True),
                    TextColumn("{task.fields[label]}", markup=False), console=con,
                    transient=True, redirect_stdout=False, redirect_stderr=False)


def _cell_label(done, total, label):
    """'cell 3/12 size_bytes=4096' (the live region cuts it to the terminal)."""
    return f"cell {done}/{total} {label}" if total else str(label or "")


class _Steps:
    """The step lines of a survey: at a terminal the live region says it all
    and nothing is printed; piped, one line per finished step on stderr;
    nothing with --quiet.  Failures are always said."""

    def __init__(self, con, quiet):
        self.con, self.quiet = con, quiet
        self.lines = not quiet and not con.is_terminal

    def begin(self, what):
        if self.lines:
            self.con.print(f"  {what}", markup=False, highlight=False, soft_wrap=True)

    def done(self, what, seconds):
        if self.lines:
            self.con.print(f"  {what}: {seconds:.1f} s", markup=False, highlight=False)

    def failed(self, name, error):
        self.con.print(f"{name} failed: {error}", style="red", markup=False, highlight=False,
                       soft_wrap=True)
