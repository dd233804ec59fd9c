"""memfx command line: subcommands -> cmd_* functions.  Every error a user can
cause is one line on stderr and exit status 2."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .errors import MemfxError

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    def error(self, message):       # one line, exit 2 (argparse prints usage too)
        sys.stderr.write(f"memfx: error: {message} (see memfx {self.prog.split()[-1]} --help)\n"
                         if " " in self.prog else f"memfx: error: {message}\n")
        sys.exit(EXIT_USAGE)


def _console():
    from rich.console import Console
    con = Console()
    if not con.is_terminal:      # piped or redirected: don't squeeze tables into 80 columns
        con = Console(width=140)
    return con


def _open_store(args, must_exist=False):
    from .store import Store, default_db_path
    path = args.db or default_db_path()
    if must_exist and not os.path.exists(path):
        raise MemfxError(f"no results database at {path} (run `memfx run latency` first, or pass --db)")
    from . import __version__
    return Store(path, memfx_version=__version__)


def _machine():
    from .machine import fingerprint
    return fingerprint()


def _overrides(pairs):
    out = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise MemfxError(f"--set expects NAME=VALUE, got {pair!r}")
        k, v = pair.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _preset(args):
    return "full" if getattr(args, "full", False) else "quick"


# ---- commands --------------------------------------------------------------

def cmd_machine(args):
    from .machine import capabilities, cautions
    fp = _machine()
    if args.json:
        print(json.dumps({"machine": fp, "capabilities": capabilities(fp), "warnings": cautions(fp)},
                         indent=2))
        return 0
    from .render import cautions_table, machine_table
    con = _console()
    con.print(machine_table(fp, cautions(fp), capabilities(fp)))
    cs = cautions(fp)
    if cs:
        con.print(cautions_table(cs))
    return 0


def cmd_list(args):
    from .experiments import all_experiments
    if args.json:
        print(json.dumps([{"name": e.name, "question": e.question, "seeds": list(e.seeds),
                           "arms": list(e.arms), "params": [p.describe() for p in e.all_params()]}
                          for e in all_experiments()], indent=2))
        return 0
    from rich.table import Table
    t = Table(title="Experiments")
    t.add_column("name", style="bold")
    t.add_column("question")
    t.add_column("seed")
    for e in all_experiments():
        t.add_row(e.name, e.question, ", ".join(e.seeds))
    _console().print(t)
    return 0


def _progress_runner(store, fp, name, preset, overrides, quiet, survey_id=None):
    from .runner import run_experiment
    if quiet:
        return run_experiment(name, store, fp, preset, overrides, survey_id=survey_id)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[label]}"),
                  transient=True, console=_console_err()) as prog:
        task = prog.add_task(name, total=None, label="")

        def on_progress(done, total, label):
            prog.update(task, completed=done, total=total, label=label)
        return run_experiment(name, store, fp, preset, overrides, survey_id=survey_id,
                              on_progress=on_progress)


def _console_err():
    from rich.console import Console
    return Console(stderr=True)


def cmd_run(args):
    from .results import document
    from .runner import RunInterrupted, prepare
    fp = _machine()
    overrides = _overrides(args.set)
    prepare(args.experiment, _preset(args), overrides, fp)   # bad input fails before the DB is touched
    store = _open_store(args)
    try:
        run_id = _progress_runner(store, fp, args.experiment, _preset(args), overrides,
                                  args.json or args.quiet)
    except RunInterrupted as e:
        run = store.run(e.run_id)
        sys.stderr.write(f"memfx: interrupted: run {e.run_id} kept with {run['n_samples']} samples, "
                         f"marked interrupted\n")
        return EXIT_INTERRUPTED
    doc = document(store.run(run_id), store.samples(run_id))
    return _emit_document(doc, args)


def _emit_document(doc, args):
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
        return 0
    from .render import print_document
    con = _console()
    print_document(doc, con, details=getattr(args, "details", False))
    con.print(f"[dim]run {doc['run_id']} stored; plot it with: memfx plot {doc['run_id']}[/dim]")
    return 0


def cmd_runs(args):
    store = _open_store(args, must_exist=True)
    store.mark_stale_running()
    runs = store.runs(experiment=args.experiment)
    if args.json:
        print(json.dumps(runs, indent=2, default=str))
        return 0
    from rich.table import Table
    t = Table(title=f"Runs in {store.path}")
    for c in ("id", "started", "experiment", "preset", "status", "samples", "seconds", "machine"):
        t.add_column(c)
    machines = {}
    for r in runs:
        if r.get("machine_id") not in machines:
            cpu = (store.run(r["id"]).get("machine") or {}).get("cpu") or {}
            machines[r.get("machine_id")] = f"#{r.get('machine_id')} {cpu.get('model_name', '?')}"
        t.add_row(r["id"], r["started"], r["experiment"], r.get("preset") or "", r["status"],
                  str(r["n_samples"]), f"{r['duration_s']:.1f}" if r.get("duration_s") else "-",
                  machines[r.get("machine_id")])
    _console().print(t)
    return 0


def cmd_show(args):
    from .documents import side
    store = _open_store(args, must_exist=True)
    _, _, doc = side(store, args.run)
    if doc.get("kind") == "survey":
        return _emit_survey_document(doc, args)
    return _emit_document(doc, args)


def _emit_survey_document(doc, args):
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
        return 0
    from .render import answers_table, print_document
    con = _console()
    con.print(answers_table(doc["answers"], title=f"survey {doc['survey_id']} "
                                                  f"({doc['status']}): answers"))
    if getattr(args, "details", False):
        for d in doc["documents"]:
            print_document(d, con, details=True)
    return 0


def cmd_compare(args):
    from .compare import compare, markdown, parse_threshold
    from .documents import side
    try:
        limit = parse_threshold(args.threshold)
    except ValueError as e:
        raise MemfxError(str(e)) from None
    store = _open_store(args, must_exist=True)
    a_label, a_answers, _ = side(store, args.a)
    b_label, b_answers, _ = side(store, args.b)
    doc = compare(a_answers, b_answers, limit, a_label, b_label)
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
    elif args.format == "markdown":
        print(markdown(doc))
    else:
        from .render import compare_table
        con = _console()
        con.print(compare_table(doc))
        c = doc["counts"]
        con.print(", ".join(f"{n} {k}" for k, n in sorted(c.items())))
    if doc["regressed"]:
        sys.stderr.write(f"memfx: regressed beyond {limit:.0%}: {', '.join(doc['regressed'])}\n")
        return 1
    return 0


def cmd_export(args):
    from .results import document
    store = _open_store(args, must_exist=True)
    run = store.run(args.run)
    out = open(args.output, "w", newline="") if args.output else sys.stdout
    try:
        if args.format == "csv":
            store.samples_csv(run["id"], out)
        elif args.format == "raw":
            json.dump(store.export_run(run["id"]), out, indent=1)
            out.write("\n")
        else:
            json.dump(document(run, store.samples(run["id"])), out, indent=2, default=str)
            out.write("\n")
    finally:
        if args.output:
            out.close()
    return 0


def cmd_import(args):
    from .schema import MAX_FILE_BYTES, SchemaError, load_export
    # The whole document is read and checked before the database is opened:
    # a refused import changes no file and creates none.
    try:
        with open(args.file, "rb") as f:
            text = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise MemfxError(f"cannot read {args.file}: {e.strerror or e}") from None
    try:
        doc = load_export(text, what="the file")
    except SchemaError as e:
        raise MemfxError(f"cannot import {args.file}: {e}") from None
    store = _open_store(args)
    run_id = store.import_run(doc)
    print(run_id)
    return 0


def cmd_plot(args):
    from .plots import plot_document
    from .results import document
    store = _open_store(args, must_exist=True)
    run = store.run(args.run)
    doc = document(run, store.samples(run["id"]), include_values=True)
    out = args.output or f"memfx-{run['id']}.png"
    if not out.endswith((".png", ".svg", ".pdf")):
        raise MemfxError(f"plot output must end in .png, .svg or .pdf: {out}")
    plot_document(doc, out)
    print(out)
    return 0


def cmd_survey(args):
    from .survey import run_survey
    return run_survey(args, _machine, _open_store, _console)


def cmd_report(args):
    from .report import write_report
    store = _open_store(args, must_exist=True)
    path = write_report(store, args.ids, args.output)
    print(path)
    return 0


def cmd_advise(args):
    from rich.console import Console

    from .advise import NoCopyResults, advise, copy_sources, render
    from .runner import run_experiment
    from .store import default_db_path
    if not args.run_missing and not os.path.exists(args.db or default_db_path()):
        raise NoCopyResults("no copy results in DB; run `memfx run copy` or pass --run-missing")
    store = _open_store(args)
    if not args.run_missing:
        copy_sources(store)         # fails now, before anything is measured
    fp = _machine()
    err = Console(stderr=True)

    def run_missing(name):          # --run-missing is the user's consent to measure
        err.print(f"[dim]no complete {name} run in the DB: running {name} --quick[/dim]")
        return run_experiment(name, store, fp, "quick", {})
    doc = advise(store, fp, check=not args.no_check, run_missing=args.run_missing, runner=run_missing,
                 progress=None if args.json else (lambda msg: err.print(f"[dim]{msg}[/dim]")))
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        render(doc, _console())
    return 0


# ---- parser ----------------------------------------------------------------

def _params_help():
    from .experiments import all_experiments
    lines = ["parameters (--set NAME=VALUE; sizes take K/M/G suffixes):"]
    for e in all_experiments():
        lines.append(f"  {e.name}:")
        for p in e.all_params():
            lines.append(f"    {p.describe()}")
    return "\n".join(lines)


def build_parser():
    from . import __version__
    p = _Parser(prog="memfx", description="A laboratory for memory-system effects: measures how "
                "this machine's memory hierarchy behaves and says what it means.")
    p.add_argument("--version", action="version", version=f"memfx {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def add(name, fn, help_, **kw):
        sp = sub.add_parser(name, help=help_, description=help_, **kw)
        sp.set_defaults(fn=fn)
        return sp

    def db(sp):
        sp.add_argument("--db", metavar="PATH", help="results database (default $XDG_DATA_HOME/memfx/results.db)")

    sp = add("machine", cmd_machine, "fingerprint and capabilities of this machine")
    sp.add_argument("--json", action="store_true", help="print JSON")
    sp = add("list", cmd_list, "the experiments, one line each")
    sp.add_argument("--json", action="store_true", help="print JSON (with parameters)")

    sp = add("run", cmd_run, "run one experiment and store every sample",
             formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_params_help()
             + "\n\nexample: memfx run latency --quick --set max_size=32M --set pages=4k,thp")
    sp.add_argument("experiment", help="experiment name (see memfx list)")
    g = sp.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="quick preset (default)")
    g.add_argument("--full", action="store_true", help="full preset")
    sp.add_argument("--set", action="append", metavar="NAME=VALUE", help="override a parameter")
    sp.add_argument("--json", action="store_true", help="print the result document as JSON")
    sp.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    db(sp)

    sp = add("runs", cmd_runs, "list stored runs")
    sp.add_argument("--experiment", help="only this experiment")
    sp.add_argument("--json", action="store_true")
    db(sp)
    sp = add("show", cmd_show, "one run's or survey's answers, re-analysed from its samples")
    sp.add_argument("run", help="run or survey id, unique prefix, or 'latest'")
    sp.add_argument("--json", action="store_true", help="print the result document as JSON")
    sp.add_argument("--details", action="store_true",
                    help="also each answer's details and the point table")
    db(sp)
    sp = add("compare", cmd_compare, "compare two runs, surveys or machines question by question; "
             "exit 1 when anything regressed beyond the threshold",
             epilog="example: memfx compare s-20261123-1200-ab12 latest --threshold 5%%")
    sp.add_argument("a", help="run id, survey id (s-...), machine id (m-...) or 'latest'")
    sp.add_argument("b", help="the same, compared against A (ratios are B/A)")
    sp.add_argument("--threshold", default="5%",
                    help="smallest change called improved/regressed (default 5%%)")
    sp.add_argument("--json", action="store_true", help="print the comparison as JSON")
    sp.add_argument("--format", choices=("table", "markdown"), default="table",
                    help="table (terminal) or markdown")
    db(sp)
    sp = add("export", cmd_export, "write a run as a result document (json), raw samples (raw) or CSV")
    sp.add_argument("run", help="run id, unique prefix, or 'latest'")
    sp.add_argument("--format", choices=("json", "csv", "raw"), default="json",
                    help="json = result document; raw = importable run with samples; csv = one row per sample")
    sp.add_argument("-o", "--output", metavar="FILE", help="file to write (default stdout)")
    db(sp)
    sp = add("import", cmd_import, "import a run written by `memfx export --format raw`")
    sp.add_argument("file")
    db(sp)
    sp = add("plot", cmd_plot, "plot a run (every sample visible, cache sizes marked)")
    sp.add_argument("run", help="run id, unique prefix, or 'latest'")
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
    sp.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    db(sp)

    sp = add("report", cmd_report, "write an HTML report from stored runs (offline, one file)")
    sp.add_argument("ids", nargs="*", help="survey or run ids (default: the latest survey)")
    sp.add_argument("-o", "--output", metavar="FILE", default="memfx-report.html", help="report file")
    db(sp)

    sp = add("advise", cmd_advise, "GCC -mmemcpy/-mmemset-strategy strings and glibc tunables from "
             "stored copy results, each checked by measuring it")
    sp.add_argument("--json", action="store_true", help="print the advice as one JSON document")
    sp.add_argument("--run-missing", action="store_true",
                    help="run missing copy/aliasing/fill experiments (quick preset) first")
    sp.add_argument("--no-check", action="store_true",
                    help="skip the measured checks (advice is then marked unchecked)")
    db(sp)
    return p


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "fn", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return args.fn(args)
    except MemfxError as e:
        sys.stderr.write(f"memfx: error: {e}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("memfx: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
