"""The commands that read or prune stored results: `runs`, `show`,
`compare`, `export`, `machines`, `rm`, `prune` (main.py dispatches to them).  Screens are composed in report/screen.py;
documents come from analysis/documents.py.  Every error a user can cause is a
MemfxError (one line, exit status 2 in cli.main)."""
from __future__ import annotations

import csv
import json
import re
import sys

from ..model.errors import MemfxError
from ..model.units import UNSIGNED_DECIMAL, parse_number


def _cli():
    from . import args as cli_args
    return cli_args


def _out(lines):
    for line in lines:
        sys.stdout.write(line + "\n")


def _width():
    from ..report.screen import term_width
    return term_width()


def _check_pattern(pattern, answers, target=None):
    """A glob that matches no question is bad input (one line, status 2)."""
    if not pattern:
        return
    from ..report.screen import select
    if not select(answers, pattern):
        where = f"; `memfx show {target} --all` lists them" if target else ""
        raise MemfxError(f"no question {'of ' + target + ' ' if target else ''}matches "
                         f"{pattern!r} (question ids look like latency.l1d{where})")


# ---- runs ------------------------------------------------------------------------

def cmd_runs(args):
    from ..report.render import clean
    from ..report.screen import fit
    cli = _cli()
    wanted = cli._labels(args.label)
    store = cli._open_store(args, must_exist=True)
    runs = store.runs(experiment=args.experiment, labels=wanted)
    if args.json:
        print(json.dumps(runs, indent=2, default=str))
        return 0
    width = _width()
    surveys = {s["id"]: s for s in store.surveys()}
    machines = sorted({r.get("machine_id") or "?" for r in runs})
    one_machine = len(machines) == 1
    cpus = {m["machine_id"]: ((m.get("fingerprint") or {}).get("cpu") or {}).get("model_name")
            for m in store.machines()}
    lines = [fit(f"{len(runs)} runs, newest first, by survey, in {store.path}", width)]
    lines += [fit(f"machine {mid}: {cpus.get(mid) or 'unknown CPU'}", width) for mid in machines]
    id_w = max([len(clean(r["id"])) for r in runs] or [0])
    for sid in dict.fromkeys(r.get("survey_id") for r in runs):
        mine = [r for r in runs if r.get("survey_id") == sid]
        on = "" if one_machine else " on " + ", ".join(
            sorted({r.get("machine_id") or "?" for r in mine}))
        if sid is None:
            lines.append(fit(f"runs outside surveys{on}", width))
        else:
            s = surveys.get(sid) or {}
            labels = " ".join(f"{k}={v}" for k, v in sorted((s.get("labels") or {}).items()))
            lines.append(fit(f"survey {sid} ({s.get('status', '?')}, {s.get('preset') or '?'}, "
                             f"started {s.get('started', '?')}){on} {labels}".rstrip(), width))
        for r in mine:
            d = r.get("duration_s")
            secs = f"{d:6.1f} s" if isinstance(d, (int, float)) else "     - s"
            labels = " ".join(f"{k}={v}" for k, v in sorted((r.get("labels") or {}).items()))
            preset = "" if sid is not None else (r.get("preset") or "")
            # the id is whole (it is what the other commands take); the rest may be cut
            head = f"  {clean(r['id']).ljust(id_w)}  "
            tail = f"{r['status']:<11} {r['n_samples']:>6} samples {secs}  {preset} {labels}"
            lines.append(head + fit(tail.rstrip(), max(10, width - len(head))))
    _out(lines)
    return 0


# ---- show ------------------------------------------------------------------------

def cmd_show(args):
    from ..analysis.documents import document_of, survey_advice
    store = _cli()._open_store(args, must_exist=True)
    doc = document_of(store, args.run)
    pattern = getattr(args, "pattern", None)
    if doc.get("kind") == "survey":
        _check_pattern(pattern, doc.get("answers") or [], doc["survey_id"])
        if args.json:
            return _print_json(_filtered(doc, pattern))
        return emit_survey(doc, args, advice=survey_advice(store, doc))
    if isinstance(doc.get("tune"), dict):           # a `memfx tune` record: its own document
        return emit_tune_document(doc["tune"], args)
    _check_pattern(pattern, doc.get("answers") or [], doc["run_id"])
    if args.json:
        return _print_json(_filtered(doc, pattern))
    return emit_document(doc, args)


def _filtered(doc, pattern):
    if not pattern:
        return doc
    from ..report.screen import select
    return dict(doc, answers=select(doc.get("answers") or [], pattern))


def _print_json(doc):
    sys.stdout.write(indented_json(doc) + "\n")
    return 0


# The standard library's encoder indents in pure Python (its C encoder
# ignores indent): most of a second for a survey's document.  Here the C
# encoder lays out each container, with the item separator of its depth;
# its nested containers stand in as a marker string while it runs, and
# their own texts take the markers' places after.  The output is
# json.dumps(obj, indent=2, default=default) byte for byte
# (tests/test_show_json.py); a document holding the marker itself is left
# to json.dumps.
_SCALARS = (str, int, float, type(None))     # bool is an int
_CONTAINERS = (dict, list, tuple)
_MARK = "\x00memfx-nested\x00"


class _Unusual(Exception):
    """What indented_json leaves to json.dumps."""


def indented_json(obj, default=str):
    """json.dumps(obj, indent=2, default=default), faster."""
    from json.encoder import c_make_encoder, encode_basestring_ascii
    if c_make_encoder is None or not isinstance(obj, _CONTAINERS):
        return json.dumps(obj, indent=2, default=default)
    mark = encode_basestring_ascii(_MARK)
    encoders = {}

    def encoder(depth):
        enc = encoders.get(depth)
        if enc is None:
            enc = encoders[depth] = c_make_encoder(
                None, default, encode_basestring_ascii, None, ": ",
                ",\n" + "  " * (depth + 1), False, False, True)
        return enc

    def render(o, depth, out):
        """Append the text of ``o``, a container at ``depth``, to ``out``."""
        if not o:
            out.append("{}" if isinstance(o, dict) else "[]")
            return
        is_dict = isinstance(o, dict)
        nested = []
        if not all(isinstance(v, _SCALARS) for v in (o.values() if is_dict else o)):
            def item(v):
                while not isinstance(v, _SCALARS):
                    if isinstance(v, _CONTAINERS):
                        nested.append(v)
                        return _MARK
                    v = default(v)          # as json.dumps: what default makes of it
                return v
            o = ({k: v if isinstance(v, _SCALARS) else item(v) for k, v in o.items()}
                 if is_dict else [v if isinstance(v, _SCALARS) else item(v) for v in o])
        text = "".join(encoder(depth)(o, depth))
        inner, outer = "\n" + "  " * (depth + 1), "\n" + "  " * depth
        if not nested:
            out.append(text[0] + inner + text[1:-1] + outer + text[-1])
            return
        parts = text.split(mark)
        if len(parts) != len(nested) + 1:
            raise _Unusual                  # the marker is in the document itself
        out.append(text[0] + inner + parts[0][1:])
        for v, after in zip(nested, parts[1:-1]):
            render(v, depth + 1, out)
            out.append(after)
        render(nested[-1], depth + 1, out)
        out.append(parts[-1][:-1] + outer + text[-1])

    out = []
    try:
        render(obj, 0, out)
    except (_Unusual, RecursionError, TypeError):
        # the marker, a cycle, or a Python whose C encoder takes other
        # arguments: the standard library's encoder as it is
        return json.dumps(obj, indent=2, default=default)
    return "".join(out)


def emit_document(doc, args):
    """A run's document: --json, else its screen (--details: each answer's
    whole sentence, its details and the point table; --warnings)."""
    if args.json:
        return _print_json(doc)
    from ..report.screen import run_screen, warning_lines
    width = _width()
    details = getattr(args, "details", False)
    _out(run_screen(doc, width, full=details, pattern=getattr(args, "pattern", None)))
    if getattr(args, "warnings", False):
        _out(warning_lines([doc], width))
    if details:
        from ..report.render import details_tables, points_table
        con = _cli()._console()
        for t in details_tables(doc.get("answers") or [], width=width):
            con.print(t)
        if doc.get("points"):
            con.print(points_table(doc))
    if doc.get("error"):
        from ..report.render import clean
        _out([f"error: {clean(doc['error'])}"])
    from ..report.screen import fit
    _out([fit(f"more with --details and --warnings; the curve: memfx plot {doc['run_id']}",
              width)])
    return 0


def emit_survey(doc, args, advice=None):
    """A survey's screen: the headline answers by seed, the advice, one
    data-quality line, how to see the rest (--all, --details, --warnings)."""
    from ..report.screen import survey_screen, warning_lines
    width = _width()
    details = getattr(args, "details", False)
    _out(survey_screen(doc, width, advice=advice, show_all=getattr(args, "all", False),
                       full=details, pattern=getattr(args, "pattern", None)))
    pattern = getattr(args, "pattern", None)
    if details and pattern:                 # the sub-results of the questions asked for
        from ..report.render import details_tables
        from ..report.screen import select
        con = _cli()._console()
        for t in details_tables(select(doc.get("answers") or [], pattern), width=width):
            con.print(t)
    if getattr(args, "warnings", False):
        _out(warning_lines(doc.get("documents") or [], width))
    return 0


def emit_tune_document(doc, args):
    if args.json:
        return _print_json(doc)
    from ..advice.tune import render
    from ..report.render import text
    con = _cli()._console()
    render(doc, con)
    con.print(text(f"run {doc['run_id']} stored; see it again with: memfx show {doc['run_id']}",
                   "dim"))
    return 0


# ---- compare ------------------------------------------------------------------------

def cmd_compare(args):
    from ..analysis.compare import markdown, parse_threshold
    from ..analysis.comparison import comparison
    try:
        limit = parse_threshold(args.threshold)
    except ValueError as e:
        raise MemfxError(str(e)) from None
    store = _cli()._open_store(args, must_exist=True)
    from ..analysis.documents import share_reads
    share_reads()           # `compare S S` decodes S's documents once
    doc = comparison(store, args.a, args.b, limit, pattern=getattr(args, "pattern", None),
                     group_by=getattr(args, "group_by", None))
    if args.json:
        sys.stdout.write(indented_json(doc) + "\n")
    elif args.format == "markdown":
        print(markdown(doc))
    else:
        from ..report.screen import compare_lines
        _out(compare_lines(doc, _width(), show_all=getattr(args, "all", False)))
    noisy = doc["noisy"] + doc.get("noisy_curves", [])
    if noisy:
        sys.stderr.write(f"memfx: within the noise of a noisy run (not counted as regressed): "
                         f"{', '.join(noisy)}\n")
    # a curve range that regressed fails as a regressed answer does
    regressed = doc["regressed"] + doc.get("regressed_curves", [])
    if regressed:
        sys.stderr.write(f"memfx: regressed beyond {limit:.0%}: {', '.join(regressed)}\n")
        return 1
    return 0


# ---- export -------------------------------------------------------------------------

def _is_survey_key(store, key):
    """Whether ``key`` names a survey (and no run)."""
    from ..model.errors import StoreError
    key = str(key)
    from ..store.sql import surveys_back
    if key.startswith("s-") or surveys_back(key) is not None:
        return True
    try:
        store.run(key)
        return False
    except StoreError:
        try:
            store.survey(key)
            return True
        except StoreError:
            return False


def write_answers_csv(doc, out):
    """One CSV row per answer (documents.ANSWER_COLUMNS)."""
    from ..analysis.documents import ANSWER_COLUMNS, answer_records
    writer = csv.writer(out)
    writer.writerow(ANSWER_COLUMNS)
    for rec in answer_records(doc):
        writer.writerow(["" if rec[k] is None else rec[k] for k in ANSWER_COLUMNS])


def cmd_export(args):
    from ..analysis.documents import run_document, survey_document
    from ..model.outputs import check_output_path, write_text_output
    cli = _cli()
    db = cli._db_path(args)
    if args.output is not None:
        check_output_path(args.output, protect=[db])     # before any work
    store = cli._open_store(args, must_exist=True)
    if _is_survey_key(store, args.run):
        if args.format == "raw":
            raise MemfxError("--format raw exports one run: export each run of the survey "
                             "(memfx runs lists them), or use --format json or csv")
        doc = survey_document(store, args.run)

        def write(out):
            if args.format == "csv":
                write_answers_csv(doc, out)
            else:
                json.dump(doc, out, indent=2, default=str)
                out.write("\n")
    else:
        run = store.run(args.run)

        def write(out):
            if args.format == "csv":
                store.samples_csv(run["id"], out)
            elif args.format == "raw":
                json.dump(store.export_run(run["id"]), out, indent=1)
                out.write("\n")
            else:
                json.dump(run_document(store, run["id"]), out, indent=2, default=str)
                out.write("\n")
    if args.output is None:
        write(sys.stdout)
    else:
        write_text_output(args.output, write, protect=[db], newline="")
    return 0


# ---- machines, rm, prune ---------------------------------------------------------

def cmd_machines(args):
    from ..analysis.fleet import machines_document
    store = _cli()._open_store(args, must_exist=True)
    doc = machines_document(store)
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
        return 0
    from ..report.render import PLAIN_TABLE_ROWS, add_row, long_table_lines, safe_table
    columns = ("machine", "CPU", "hosts", "runs", "last survey", "started", "status")
    title = f"Machines in {store.path}"
    rows = [(m["machine_id"], m["label"], ", ".join(m["hosts"]), str(m["n_runs"]),
             (m["last_survey"] or {}).get("id") or "-",
             (m["last_survey"] or {}).get("started") or "-",
             (m["last_survey"] or {}).get("status") or "-") for m in doc["machines"]]
    if len(rows) > PLAIN_TABLE_ROWS:
        print("\n".join(long_table_lines(title, columns, rows)))
        return 0
    t = safe_table(*columns, title=title)
    for row in rows:
        add_row(t, *row)
    _cli()._console().print(t)
    return 0


def _print_removed(removed):
    from ..report.render import clean
    for item in ({k: clean(v) for k, v in i.items()} for i in removed):
        if item["kind"] == "run":
            print(f"removed run {item['id']} ({item['experiment']}, {item['n_samples']} samples)")
        else:
            print(f"removed survey {item['id']}")


def cmd_rm(args):
    store = _cli()._open_store(args, must_exist=True)
    _print_removed(store.remove(args.ids))
    return 0


_AGE = re.compile(rf"^\s*({UNSIGNED_DECIMAL})\s*([dh])\s*$", re.ASCII)   # ASCII digits only


def parse_age(text):
    """"30d" or "12h" -> seconds."""
    m = _AGE.match(text or "")
    if not m:
        raise MemfxError(f"--older-than: expected an age like 30d or 12h, got {text!r}")
    import time
    age = parse_number(m.group(1), "--older-than") * (86400 if m.group(2) == "d" else 3600)
    if not age <= time.time():          # also inf and nan
        raise MemfxError(f"--older-than {text.strip()} reaches back before 1970: "
                         "no run can be that old")
    return age


def cmd_prune(args):
    age = parse_age(args.older_than)
    store = _cli()._open_store(args, must_exist=True)
    removed = store.prune(age)
    _print_removed(removed)
    if not removed:
        print(f"nothing started more than {args.older_than.strip()} ago")
    return 0
