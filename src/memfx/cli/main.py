"""memfx command line: subcommands -> cmd_* functions.  Every error a user can
cause is one line on stderr and exit status 2, with the database unchanged
(main() lists the other exit statuses)."""
from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from functools import partial

from ..model.errors import MemfxError
from ..model.units import param_value_text
from .show import (
    cmd_compare,
    cmd_export,
    cmd_machines,
    cmd_prune,
    cmd_rm,
    cmd_runs,
    cmd_show,
    emit_document,
    emit_tune_document,
)

# Exit statuses (the README's exit-status table, `memfx --help`): 1 is a
# command's own verdict (compare: regressed; survey: an experiment failed;
# tune: the program failed; push: a run refused), never an error of memfx.
EXIT_USAGE = 2          # bad input or an unusable store: nothing was changed
EXIT_OUTPUT = 3         # standard output could not be written: what was done stays done
EXIT_FAILED = 4         # a measurement failed (a worker killed by a signal, an internal error)
EXIT_INTERRUPTED = 130
EXIT_STATUS_HELP = ("exit status: 0 done; 1 the command's own verdict (compare: a regression; "
                    "survey: an experiment failed; tune: the program failed; push: a run "
                    "refused); 2 bad input, nothing changed; 3 standard output could not be "
                    "written (what the command did is kept); 4 a measurement failed: its worker "
                    "was killed by a signal or failed (the run is kept, marked failed), or memfx "
                    "itself failed; 130 interrupted (Ctrl-C)")


class _Parser(argparse.ArgumentParser):
    # a help text built only when shown: `run`'s lists every experiment's
    # parameters, and building it imports them all (a quarter of a second
    # that every other command would pay at start-up)
    epilog_fn = None

    def format_help(self):
        if self.epilog is None and self.epilog_fn is not None:
            self.epilog = self.epilog_fn()
        return super().format_help()

    def error(self, message):       # one line, exit 2 (argparse prints usage too)
        from ..report.render import one_line
        sys.stderr.write(f"memfx: error: {one_line(message)} (see memfx {self.prog.split()[-1]} "
                         f"--help)\n" if " " in self.prog else f"memfx: error: {one_line(message)}\n")
        sys.exit(EXIT_USAGE)

    def _print_message(self, message, file=None):
        # argparse drops a write that fails; one to standard output (--help
        # > /dev/full) must fail the command instead (main: exit 3)
        file = file or sys.stderr
        if not message:
            return
        try:
            file.write(message)
        except (AttributeError, OSError):
            if file is sys.stdout:
                raise


def _int_arg(text):
    """argparse type: an integer in ASCII digits (units.parse_int; int()
    takes "٣" too)."""
    from ..model.units import parse_int
    try:
        return parse_int(text)
    except MemfxError:
        raise ValueError(text) from None      # argparse: "invalid int value: '٣'"


def _number_arg(text):
    """argparse type: a finite number in ASCII digits (units.parse_number)."""
    from ..model.units import parse_number
    try:
        return parse_number(text)
    except MemfxError:
        raise ValueError(text) from None


_int_arg.__name__, _number_arg.__name__ = "int", "float"    # the names argparse shows


from .args import (  # noqa: E402,F401 (show.py and the tests use them from here too)
    SQLITE_SIBLING_SUFFIXES,
    _console,
    _db_path,
    _labels,
    _open_store,
    _pairs,
    _sqlite_path,
)


def _machine():
    from ..lab.machine import fingerprint
    return fingerprint()


def _overrides(pairs):
    return _pairs(pairs, "--set", "NAME=VALUE")


def _preset(args):
    return "full" if getattr(args, "full", False) else "quick"


# ---- commands --------------------------------------------------------------

def cmd_machine(args):
    from ..lab.machine import capabilities, cautions
    fp = _machine()
    if args.json:
        print(json.dumps({"machine": fp, "capabilities": capabilities(fp), "warnings": cautions(fp)},
                         indent=2))
        return 0
    from ..report.render import cautions_table, machine_table
    con = _console()
    con.print(machine_table(fp, cautions(fp), capabilities(fp)))
    cs = cautions(fp)
    if cs:
        con.print(cautions_table(cs))
    return 0


def cmd_list(args):
    from ..experiments import all_experiments
    if args.json:
        print(json.dumps([{"name": e.name, "question": e.question, "seeds": list(e.seeds),
                           "arms": list(e.arms), "presets": list(e.presets),
                           "params": param_records(e)}
                          for e in all_experiments()], indent=2, default=str))
        return 0
    from ..report.render import add_row, safe_table
    t = safe_table("name", "question", "seed", title="Experiments")
    for e in all_experiments():
        add_row(t, e.name, e.question, ", ".join(e.seeds))
    _console().print(t)
    return 0


def param_records(exp):
    """Each parameter of `exp` as a structured record: what it means, its
    default and the value each preset uses."""
    resolved = {preset: exp.resolve(preset) for preset in exp.presets}
    return [{"name": p.name, "kind": p.kind, "help": p.help, "default": p.default,
             "presets": {preset: values[p.name] for preset, values in resolved.items()},
             "choices": list(p.choices) or None, "min": p.minimum, "max": p.maximum,
             "example": p.example or None}
            for p in exp.all_params()]


def _preset_values(rec, text):
    """'quick (the default) 5, full 11': the value each preset runs with (a
    parameter's own default is only what a preset starts from)."""
    presets = rec["presets"]
    if not presets:
        return f"default {text(rec['default'])}"
    return ", ".join(f"{name}{' (the default)' if name == 'quick' else ''} {text(v)}"
                     for name, v in presets.items())


def experiment_help(exp):
    """`memfx run EXP --help`: that experiment's parameters only."""
    lines = [f"{exp.name}: {exp.question}", "",
             f"parameters of {exp.name} (--set NAME=VALUE; sizes take K/M/G suffixes):"]
    for rec in param_records(exp):
        text = partial(param_value_text, rec["name"], kind=rec["kind"])
        lines.append(f"  {rec['name']} ({rec['kind']}): {rec['help']}")
        values = [_preset_values(rec, text)]
        if rec["choices"]:
            values.append("one of " + ", ".join(map(str, rec["choices"])))
        if rec["min"] is not None or rec["max"] is not None:
            values.append(f"range {'' if rec['min'] is None else text(rec['min'])}.."
                          f"{'' if rec['max'] is None else text(rec['max'])}")
        lines.append("      " + "; ".join(values))
        if rec["example"]:
            lines.append(f"      e.g. --set {rec['name']}={rec['example']}")
    example = next((r for r in param_records(exp) if r["example"]), None)
    lines += ["", f"example: memfx run {exp.name} --quick"
              + (f" --set {example['name']}={example['example']}" if example else "")]
    return "\n".join(lines)


class _RunHelp(argparse.Action):
    """-h/--help of `run`: after an experiment name, that experiment's
    parameters only (argparse has consumed the name by the time it gets here)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from ..experiments import REGISTRY
        name = getattr(namespace, "experiment", None)
        if name in REGISTRY:
            parser.epilog = experiment_help(REGISTRY[name])
        parser.print_help()
        parser.exit()


def _progress_runner(store, fp, name, preset, overrides, quiet, survey_id=None, labels=None):
    from ..running.runner import run_experiment
    if quiet:
        return run_experiment(name, store, fp, preset, overrides, survey_id=survey_id,
                              labels=labels)
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(bar_width=20),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                  TimeRemainingColumn(compact=True),
                  TextColumn("{task.fields[label]}", markup=False),
                  transient=True, console=_console_err()) as prog:
        task = prog.add_task(name, total=None, label="")

        def on_progress(done, total, label):
            prog.update(task, completed=done, total=total, label=label)
        return run_experiment(name, store, fp, preset, overrides, survey_id=survey_id,
                              on_progress=on_progress, labels=labels)


def _console_err():
    from ..report.screen import console
    return console(stderr=True)


def cmd_run(args):
    from ..analysis.documents import run_document
    from ..running.runner import RunInterrupted, prepare
    overrides = _overrides(args.set)
    labels = _labels(args.label)
    _db_path(args)
    fp = _machine()
    prepare(args.experiment, _preset(args), overrides, fp)   # bad input fails before the DB is touched
    store = _open_store(args)
    try:
        run_id = _progress_runner(store, fp, args.experiment, _preset(args), overrides,
                                  args.json or args.quiet, labels=labels)
    except RunInterrupted as e:
        run = store.run(e.run_id)
        sys.stderr.write(f"memfx: interrupted: run {e.run_id} kept with {run['n_samples']} samples, "
                         f"marked interrupted\n")
        return EXIT_INTERRUPTED
    # analysed once, here, and stored with the analysis that made it: show,
    # compare, report and plot read it from then on
    return emit_document(run_document(store, run_id), args)


def cmd_import(args):
    from ..store.schema import MAX_FILE_BYTES, SchemaError, load_export
    # The whole document is read and checked before the database is opened:
    # a refused import changes no file and creates none.
    try:
        if not os.path.isfile(args.file):
            raise OSError("not a regular file")
        with open(args.file, "rb") as f:
            text = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        reason = e.strerror if e.strerror else str(e) or type(e).__name__
        raise MemfxError(f"cannot read {args.file}: {reason}") from None
    try:
        doc = load_export(text, what="the file")
    except SchemaError as e:
        raise MemfxError(f"cannot import {args.file}: {e}") from None
    from ..store.postgres import is_url
    path = _db_path(args)
    created = not is_url(path) and not os.path.exists(path)
    store = _open_store(args)
    try:
        run_id = store.import_run(doc)
    except BaseException:
        if created:          # a failed import into a new path leaves no empty database behind
            store.close()
            for suffix in ("", "-wal", "-shm", "-journal"):
                try:
                    os.unlink(path + suffix)
                except FileNotFoundError:
                    pass
        raise
    from ..report.render import clean
    print(clean(run_id))
    return 0

PLOT_EXTENSIONS = (".png", ".svg", ".pdf")


def cmd_plot(args):
    from ..analysis.documents import run_values_document
    from ..model.outputs import atomic_output, check_output_path, safe_name_part
    from ..report.plots import plot_document
    db = _db_path(args)
    if args.output is not None:
        if not args.output.endswith(PLOT_EXTENSIONS):
            raise MemfxError(f"plot output must end in .png, .svg or .pdf: {args.output}")
        check_output_path(args.output, protect=[db])
    store = _open_store(args, must_exist=True)
    run = store.run(args.run)
    out = args.output or f"memfx-{safe_name_part(run['id'])}.png"
    doc = run_values_document(store, run)      # the stored analysis, else analysed and stored
    with atomic_output(out, protect=[db]) as tmp:
        plot_document(doc, tmp)
    print(out)
    return 0


def cmd_survey(args):
    from ..model.outputs import check_output_path
    from .survey import run_survey
    if args.only is not None and not [n for n in args.only.split(",") if n.strip()]:
        raise MemfxError("--only: give at least one experiment name (see memfx list)")
    args.labels = _labels(args.label)
    check_output_path(args.output, protect=[_db_path(args)])   # before anything is measured
    return run_survey(args, _machine, _open_store, _console)


def cmd_report(args):
    from ..model.outputs import atomic_output, check_output_path
    from ..report.report import write_report
    db = _db_path(args)
    check_output_path(args.output, protect=[db])
    if args.group_by and not args.fleet:
        raise MemfxError("--group-by goes with --fleet")
    store = _open_store(args, must_exist=True)
    if args.fleet:
        return _write_fleet_report(store, args, db)
    with atomic_output(args.output, protect=[db]) as tmp:
        write_report(store, args.ids, tmp)
    print(args.output)
    return 0


def _write_fleet_report(store, args, db):
    from ..analysis.fleet import fleet_document
    from ..model.outputs import write_text_output
    from ..model.version import __version__
    from ..report.fleet import fleet_html
    if args.ids:
        raise MemfxError("report --fleet takes no ids: it shows every machine's newest runs")
    doc = fleet_document(store, args.group_by or "machine")
    write_text_output(args.output, lambda out: out.write(fleet_html(doc, __version__)),
                      protect=[db])
    print(args.output)
    return 0


def cmd_push(args):
    from ..analysis.fleet import push, push_selection
    from ..model.version import __version__
    from ..store.postgres import classify_target, mask_secrets
    from ..store.store import Store, default_db_path
    target = args.to or os.environ.get("MEMFX_DB") or None
    if not target:
        raise MemfxError("push needs a target: --to postgresql://... (or MEMFX_DB)")
    if classify_target(target, "--to" if args.to else "MEMFX_DB") != "url":
        raise MemfxError(f"--to: expected a postgresql:// URL, got {mask_secrets(target)!r}")
    if args.all and args.ids:
        raise MemfxError("give run/survey ids or --all, not both")
    if args.db and classify_target(args.db, "--db") == "url":
        raise MemfxError("push copies from a local SQLite file: --db takes a path here")
    source_path = _sqlite_path(args.db) if args.db else str(default_db_path())
    if not os.path.isfile(source_path):
        from ..store.store import shown
        raise MemfxError(f"no results database at {shown(source_path)}")
    source = Store(source_path, memfx_version=__version__)
    run_ids = push_selection(source, args.ids, args.all)      # bad ids fail before connecting
    from ..store.store import open_store
    target_store = open_store(target, memfx_version=__version__)
    from ..report.render import clean

    def on_run(run_id, run, outcome, reason):
        if outcome == "refused":
            sys.stderr.write(f"memfx: {clean(run_id)} not pushed: {clean(reason)}\n")
        elif not args.quiet:
            print(f"{clean(run_id)} ({clean(run['experiment'])}, {run['n_samples']} samples): "
                  + {"added": "pushed", "replaced": "pushed (replaced a partial copy)",
                     "unchanged": "already there"}[outcome])
    summary = push(source, target_store, run_ids, on_run=on_run)
    c = summary["counts"]
    print(f"pushed {c['added'] + c['replaced']} of {summary['runs']} runs "
          f"({summary['samples']} samples, {summary['surveys']} surveys; {c['unchanged']} already "
          f"there) to {target_store.path} in {summary['seconds']:.1f} s"
          + (f"; {c['refused']} refused" if c["refused"] else ""))
    return 1 if c["refused"] else 0


def cmd_advise(args):

    from ..advice.advise import NoCopyResults, advise, copy_sources, render
    from ..running.runner import run_experiment
    from ..store.postgres import is_url
    if not args.run_missing and not is_url(_db_path(args)) and not os.path.exists(_db_path(args)):
        raise NoCopyResults("no copy results in DB; run `memfx run copy` or pass --run-missing")
    store = _open_store(args)
    if not args.run_missing:
        copy_sources(store)         # fails now, before anything is measured
    fp = _machine()
    from ..report.screen import console
    err = console(stderr=True)
    from rich.markup import escape

    def run_missing(name):          # --run-missing is the user's consent to measure
        err.print(f"[dim]no complete {name} run in the DB: running {name} --quick[/dim]")
        return run_experiment(name, store, fp, "quick", {})
    doc = advise(store, fp, check=not args.no_check, run_missing=args.run_missing, runner=run_missing,
                 progress=None if args.json else (lambda msg: err.print(f"[dim]{escape(msg)}[/dim]")))
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        render(doc, _console())
    return 0


def cmd_tune(args):
    from ..advice.advise import NoCopyResults
    from ..advice.tune import (
        EXIT_PROGRAM_FAILED,
        ProgramFailed,
        check_command,
        interposer_path,
        tune,
    )
    from ..report.render import text
    from ..running.runner import run_experiment
    from ..store.postgres import is_url
    argv = list(args.cmd or [])
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if args.runs < 1 or args.runs > 1000:
        raise MemfxError(f"--runs: expected 1..1000 rounds, got {args.runs}")
    if not args.timeout > 0:
        raise MemfxError(f"--timeout: expected a positive number of seconds, got {args.timeout:g}")
    allowed = sorted(os.sched_getaffinity(0))
    cpu = allowed[-1] if args.cpu is None else args.cpu
    if cpu not in allowed:
        raise MemfxError(f"--cpu {cpu}: not one of the CPUs this process may use "
                         f"({', '.join(map(str, allowed))})")
    check_command(argv)                   # bad input fails before the DB is touched
    interposer_path()
    db = _db_path(args)
    if not args.run_missing and not is_url(db) and not os.path.exists(db):
        raise NoCopyResults("no copy results in DB; run `memfx run copy` or pass --run-missing")
    store = _open_store(args)
    fp = _machine()
    err = _console_err()

    def run_missing(name):                # --run-missing is the user's consent to measure
        err.print(f"[dim]no complete {name} run in the DB: running {name} --quick[/dim]")
        return run_experiment(name, store, fp, "quick", {})

    def progress(msg):                    # the command in it is data, never markup
        err.print(text(msg, "dim"), soft_wrap=True)
    try:
        doc = tune(argv, store, fp, rounds=args.runs, timeout_s=args.timeout, cpu=cpu,
                   show_output=args.show_output, run_missing=args.run_missing,
                   runner_fn=run_missing, progress=None if args.json else progress)
    except ProgramFailed as e:            # the program's failure (or its profile's), not bad input
        sys.stderr.write(f"memfx: error: {e}\n")
        return EXIT_PROGRAM_FAILED
    return emit_tune_document(doc, args)


# ---- parser ----------------------------------------------------------------

def _params_help():
    from ..experiments import all_experiments
    lines = ["parameters (--set NAME=VALUE; sizes take K/M/G suffixes):"]
    for e in all_experiments():
        lines.append(f"  {e.name}:")
        for rec in param_records(e):
            text = partial(param_value_text, rec["name"], kind=rec["kind"])
            ex = f"  (e.g. --set {rec['name']}={rec['example']})" if rec["example"] else ""
            lines.append(f"    {rec['name']} [{rec['kind']}; {_preset_values(rec, text)}]: "
                         f"{rec['help']}{ex}")
    return "\n".join(lines)


def build_parser():
    from ..model.version import __version__
    p = _Parser(prog="memfx", description="A laboratory for memory-system effects: measures how "
                "this machine's memory hierarchy behaves and says what it means.",
                epilog=EXIT_STATUS_HELP + ".")
    p.add_argument("--version", action="version", version=f"memfx {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def add(name, fn, help_, **kw):
        sp = sub.add_parser(name, help=help_, description=help_, **kw)
        sp.set_defaults(fn=fn)
        return sp

    def db(sp):
        sp.add_argument("--db", metavar="PATH|URL",
                        help="results database: an SQLite file or a postgresql:// URL "
                             "(default $MEMFX_DB, else $XDG_DATA_HOME/memfx/results.db)")

    def label(sp, help_):
        sp.add_argument("--label", action="append", metavar="KEY=VALUE", help=help_)

    def reanalysing(sp):        # the commands that read result documents
        sp.add_argument("--reanalyse", action="store_true",
                        help="analyse the runs' samples again (and store the new documents) "
                             "instead of reading the stored ones")

    sp = add("machine", cmd_machine, "fingerprint and capabilities of this machine")
    sp.add_argument("--json", action="store_true", help="print JSON")
    sp = add("list", cmd_list, "the experiments, one line each")
    sp.add_argument("--json", action="store_true", help="print JSON (with parameters)")

    sp = add("run", cmd_run, "run one experiment and store every sample",
             formatter_class=argparse.RawDescriptionHelpFormatter, add_help=False)
    sp.epilog_fn = lambda: (_params_help() + "\n\nexample: memfx run latency --quick --set "
                            "max_size=32M --set pages=4k,thp\n`memfx run EXPERIMENT --help` shows "
                            "one experiment's parameters with the value each preset uses.")
    sp.add_argument("-h", "--help", action=_RunHelp,
                    help="show this help; after an experiment name, that experiment's parameters")
    sp.add_argument("experiment", help="experiment name (see memfx list)")
    g = sp.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="quick preset (default)")
    g.add_argument("--full", action="store_true", help="full preset")
    sp.add_argument("--set", action="append", metavar="NAME=VALUE", help="override a parameter")
    label(sp, "store this label with the run (repeatable)")
    sp.add_argument("--json", action="store_true", help="print the result document as JSON")
    sp.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    db(sp)

    sp = add("runs", cmd_runs, "list stored runs")
    sp.add_argument("--experiment", help="only this experiment")
    label(sp, "only runs with this label (repeatable: all must match)")
    sp.add_argument("--json", action="store_true")
    db(sp)
    sp = add("show", cmd_show, "one run's or survey's answers (analysed once, then read from the store); "
             "a survey leads with the seed questions' answers",
             epilog="example: memfx show latest-survey 'fill.*'")
    sp.add_argument("run", help="run or survey id, unique prefix, 'latest-survey' (the latest "
                    "complete survey), " + RUN_HELP.split(", ", 1)[1])
    sp.add_argument("pattern", nargs="?", metavar="QUESTIONS",
                    help="only the questions whose id matches this glob, e.g. 'fill.*'")
    sp.add_argument("--json", action="store_true", help="print the result document as JSON")
    sp.add_argument("--all", action="store_true", help="a survey: every answer, not only the "
                    "seed questions'")
    sp.add_argument("--details", action="store_true",
                    help="every answer with its whole sentence, its details and the point table")
    sp.add_argument("--warnings", action="store_true", help="also every run's warnings")
    reanalysing(sp)
    db(sp)
    sp = add("compare", cmd_compare, "compare two runs, surveys or machines question by question; "
             "exit 1 when anything regressed beyond the threshold",
             epilog="example: memfx compare previous latest-survey --threshold 5%")
    sp.add_argument("a", help="run id, survey id (s-...), machine id (m-...), 'latest', "
                    "'latest-survey', 'previous' (the survey before it) or 'latest-survey~N'")
    sp.add_argument("b", help="the same, compared against A (ratios are B/A)")
    sp.add_argument("pattern", nargs="?", metavar="QUESTIONS",
                    help="only the questions whose id matches this glob, e.g. 'copy.*'")
    sp.add_argument("--all", action="store_true",
                    help="every row (default: the summary and the rows that changed)")
    sp.add_argument("--threshold", default="5%",
                    help="smallest change called improved/regressed (default 5%%)")
    sp.add_argument("--json", action="store_true", help="print the comparison as JSON")
    sp.add_argument("--format", choices=("table", "markdown"), default="table",
                    help="table (terminal) or markdown (at most 40 lines, for a pull request)")
    sp.add_argument("--group-by", choices=("cpu-model",),
                    help="A and B name CPU models: each side is the median of its machines "
                         "(newest runs), with the spread across hosts as its interval")
    reanalysing(sp)
    db(sp)
    sp = add("export", cmd_export, "write a run or a survey as a result document (json), raw "
             "samples (raw, a run) or CSV")
    sp.add_argument("run", help="run or survey id, unique prefix, 'latest-survey', "
                    + RUN_HELP.split(", ", 1)[1])
    sp.add_argument("--format", choices=("json", "csv", "raw"), default="json",
                    help="json = result document (a survey's: all its answers); raw = "
                         "importable run with samples; csv = a run: one row per sample, a "
                         "survey: one row per answer")
    sp.add_argument("-o", "--output", metavar="FILE", help="file to write (default stdout)")
    reanalysing(sp)
    db(sp)
    sp = add("import", cmd_import, "import a run written by `memfx export --format raw`")
    sp.add_argument("file")
    db(sp)
    sp = add("plot", cmd_plot, "plot a run (every sample visible, cache sizes marked)")
    sp.add_argument("run", help=RUN_HELP)
    sp.add_argument("-o", "--output", metavar="FILE", help="output .png, .svg or .pdf")
    db(sp)

    sp = add("survey", cmd_survey, "run every experiment and write one HTML report")
    g = sp.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="quick preset (default, about 2 minutes)")
    g.add_argument("--full", action="store_true", help="full preset")
    sp.add_argument("--only", metavar="EXP,...", help="only these experiments")
    sp.add_argument("--skip", metavar="EXP,...", help="skip these experiments")
    sp.add_argument("-o", "--output", metavar="FILE", default="memfx-report.html", help="report file")
    sp.add_argument("--json", action="store_true",
                    help="print the survey document (answers of every run) as JSON")
    sp.add_argument("--no-advise", action="store_true",
                    help="skip the checked GCC/glibc advice that follows the copy experiment")
    label(sp, "store this label with the survey and each of its runs (repeatable)")
    sp.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    db(sp)

    sp = add("report", cmd_report, "write an HTML report from stored runs (offline, one file)")
    sp.add_argument("ids", nargs="*", help="survey or run ids, 'latest' or 'latest:EXPERIMENT'"
                    " (default: the latest survey)")
    sp.add_argument("-o", "--output", metavar="FILE", default="memfx-report.html", help="report file")
    sp.add_argument("--fleet", action="store_true",
                    help="one table per question, one column per machine (its newest complete run "
                         "of each experiment)")
    sp.add_argument("--group-by", choices=("machine", "cpu-model"),
                    help="with --fleet: a column per machine (default) or per CPU model "
                         "(median and spread across hosts)")
    reanalysing(sp)
    db(sp)

    sp = add("machines", cmd_machines, "every machine in the store with its latest survey")
    sp.add_argument("--json", action="store_true", help="print JSON")
    db(sp)
    sp = add("push", cmd_push, "copy local runs and surveys into a shared PostgreSQL store "
             "(idempotent: a run pushed twice is stored once)",
             epilog="example: memfx push --to postgresql://memfx@db.example/memfx --all")
    sp.add_argument("ids", nargs="*", metavar="RUN|SURVEY",
                    help="run or survey ids (or prefixes, 'latest'); default: every run")
    sp.add_argument("--all", action="store_true", help="every run in the local database")
    sp.add_argument("--to", metavar="URL", help="target store (default $MEMFX_DB)")
    sp.add_argument("-q", "--quiet", action="store_true", help="only the summary line")
    sp.add_argument("--db", metavar="PATH",
                    help="local SQLite database to push from (default $XDG_DATA_HOME/memfx/results.db)")

    sp = add("rm", cmd_rm, "remove runs and surveys (a survey with all its runs) from the database")
    sp.add_argument("ids", nargs="+", metavar="ID", help="full run or survey id (see memfx runs)")
    db(sp)
    sp = add("prune", cmd_prune, "remove every run and survey older than an age")
    sp.add_argument("--older-than", required=True, metavar="AGE",
                    help="age with a unit: 30d (days) or 12h (hours)")
    db(sp)

    sp = add("advise", cmd_advise, "GCC -mmemcpy/-mmemset-strategy strings and glibc tunables from "
             "stored copy results, each checked by measuring it")
    sp.add_argument("--json", action="store_true", help="print the advice as one JSON document")
    sp.add_argument("--run-missing", action="store_true",
                    help="run missing copy/aliasing/fill experiments (quick preset) first")
    sp.add_argument("--no-check", action="store_true",
                    help="skip the measured checks (advice is then marked unchecked)")
    db(sp)

    sp = add("tune", cmd_tune, "profile a program's memcpy/memmove/memset sizes, propose the "
             "GLIBC_TUNABLES that change glibc's choice at those sizes (from the stored copy "
             "results), and measure each on the program itself",
             formatter_class=argparse.RawDescriptionHelpFormatter,
             epilog="example: memfx tune --runs 9 -- ./ring_copy 48M 8 4\n\n"
                    "exit status: 0 done (with or without a recommendation); 1 the program "
                    "failed, was killed, timed out, could not be started or left no readable "
                    "profile (one line says which run); 2 bad input (no command, a static or "
                    "set-uid executable, no copy run without --run-missing); 130 Ctrl-C. "
                    "When a run ends, every process it left is killed.\n"
                    "The program's environment is kept; only GLIBC_TUNABLES (a candidate "
                    "appended with ':') and, for the profiling run, LD_PRELOAD change. "
                    "stdin is /dev/null.")
    sp.add_argument("--json", action="store_true",
                    help="print the tune document (schema_version 1) as JSON")
    sp.add_argument("--runs", type=_int_arg, default=7, metavar="N",
                    help="rounds of the check: each runs the baseline and every candidate once, "
                         "in a shuffled order (default 7; e.g. --runs 15)")
    sp.add_argument("--timeout", type=_number_arg, default=300.0, metavar="S",
                    help="seconds each run of the program may take before it and every "
                         "process it started are killed (default 300; e.g. --timeout 60)")
    sp.add_argument("--show-output", action="store_true",
                    help="let the program write to this terminal (default: its stdout and "
                         "stderr go to /dev/null)")
    sp.add_argument("--cpu", type=_int_arg, metavar="N",
                    help="pin every run to this CPU (default: the last CPU this process may "
                         "use; e.g. --cpu 1)")
    sp.add_argument("--run-missing", action="store_true",
                    help="run the copy experiment (quick preset) first when the DB has no "
                         "complete copy run (default: say so and exit 2)")
    db(sp)
    sp.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]",
                    help="the program to tune and its arguments, after --")
    return p


RUN_HELP = "run id, unique prefix, 'latest' (latest complete run) or 'latest:EXPERIMENT'"


def _tolerant_streams():
    # A terminal or pipe that cannot encode a character (PYTHONIOENCODING=ascii,
    # LANG=C) gets a replacement character, not a UnicodeEncodeError.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="replace")
        except (AttributeError, ValueError, OSError):
            pass


def _check_utf8(argv):
    """Arguments (and MEMFX_DB) that are not valid UTF-8 reach Python as lone
    surrogates, which no file name, database or message can encode: refused
    up front, whichever command they were meant for."""
    given = list(sys.argv[1:] if argv is None else argv)
    named = [(f"argument {i}", a) for i, a in enumerate(given, 1)]
    named.append(("MEMFX_DB", os.environ.get("MEMFX_DB") or ""))
    for what, text in named:
        try:
            str(text).encode("utf-8")
        except UnicodeEncodeError:
            shown = str(text).encode("utf-8", "backslashreplace").decode("ascii", "replace")
            raise MemfxError(f"{what} is not valid UTF-8: {shown}") from None


_DEVICE_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


def _stdout_failed(probe=False) -> bool:
    """Whether standard output cannot take what is waiting for it (probe:
    or one more line, for when a failed write left nothing waiting)."""
    try:
        if probe:
            sys.stdout.write("\n")
        sys.stdout.flush()
        return False
    except OSError:
        return True


def _abandon_stdout():
    # What could not be written is dropped, and the interpreter's final flush
    # goes nowhere instead of printing a traceback of its own.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, AttributeError, ValueError):
        pass


def main(argv=None):
    """Exit status: 0 ok; 1 a command's own verdict (compare: a regression;
    survey: a failed experiment; tune: the program failed); 2 bad input or
    an unusable store, nothing changed; 3 standard output could not be
    written (closed, a full device), whatever the command did is kept; 4 a
    measurement failed (its worker killed by a signal, an internal error;
    the run is kept, marked failed), or memfx itself failed; 130
    interrupted.  Every error is one line on stderr."""
    from ..model.errors import MeasurementFailed
    try:
        _tolerant_streams()
        if sys.stdout is None:        # started with standard output closed (>&-)
            return _stdout_lost(OSError(errno.EBADF, "it is closed"))
        _check_utf8(argv)
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "fn", None):
            parser.print_help()
            return EXIT_USAGE
        if getattr(args, "reanalyse", False) or "memfx.documents" in sys.modules:
            from ..analysis.documents import reanalyse  # this command's, not an earlier main()'s
            reanalyse(getattr(args, "reanalyse", False))
        status = args.fn(args)
        if _stdout_failed():
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return status
    except MemfxError as e:
        from ..report.render import one_line
        sys.stderr.write(f"memfx: error: {one_line(e)}\n")
        return EXIT_FAILED if isinstance(e, MeasurementFailed) else EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("memfx: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except SystemExit as e:            # argparse's --help and usage errors
        if e.code not in (0, None) or not _stdout_failed():
            raise
        return _stdout_lost(OSError(errno.EIO, os.strerror(errno.EIO)))
    except OSError as e:
        # errors a full or failing device gives; the probe writes a newline
        if e.errno not in _DEVICE_FULL or not _stdout_failed(probe=True):
            if argv is None:
                return _internal_error()
            raise
        return _stdout_lost(e)
    except Exception:
        if argv is None:              # the program: exit 4, not Python's 1 (a verdict here)
            return _internal_error()
        raise                         # in-process callers (tests) get the exception itself


def _internal_error() -> int:
    import traceback
    traceback.print_exc()
    sys.stderr.write("memfx: internal error (the traceback above): please report it\n")
    return EXIT_FAILED


def _stdout_lost(e: OSError) -> int:
    _abandon_stdout()
    sys.stderr.write(f"memfx: error: cannot write standard output: {e.strerror or e}\n")
    return EXIT_OUTPUT

if __name__ == "__main__":
    sys.exit(main())
