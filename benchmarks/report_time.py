#!/usr/bin/env python3
"""How long does the HTML report of a stored survey take to write? (issue 23)

Two ways, as memfx writes it:

    survey   the report step of `memfx survey`: the runs' documents are
             made first (the survey's "analysis" step, timed apart) and
             the report is written from them
    report   `memfx report SURVEY`: the report analyses every run itself

Each is written --repeat times; the line gives the best and the median wall
time, the CPU time of this process and its workers (the figures are drawn
by one process per CPU), and the report's size.  A report keeps the figures
it draws beside the runs' stored documents and reads them back on the next
write; --draw times the drawing instead: the store is copied to a temporary
directory and the kept figures are forgotten before every write.  The
reports go to a temporary directory.  Other work on the machine
slows it down: run it with nothing else running.  It measures the memfx
installed in this Python (`pip install .`).

    python benchmarks/report_time.py --db surveys.db               # latest survey
    python benchmarks/report_time.py --db surveys.db s-2026... --jobs 1 --repeat 5
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and of its finished workers."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn, repeat):
    """(wall times, CPU times) of `repeat` calls of fn()."""
    walls, cpus = [], []
    for _ in range(repeat):
        c, t = cpu_seconds(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t)
        cpus.append(cpu_seconds() - c)
    return walls, cpus


def line(name, walls, cpus, size):
    return (f"{name:7s} best {min(walls):5.2f} s, median {statistics.median(walls):5.2f} s wall "
            f"(CPU {statistics.median(cpus):5.2f} s) over {len(walls)}; {size / 1e6:.2f} MB")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("survey", nargs="?", help="survey id (default: the latest survey)")
    ap.add_argument("--db", required=True, help="the database that holds the survey")
    ap.add_argument("--repeat", type=int, default=3, help="writes of each kind (default 3)")
    ap.add_argument("--jobs", type=int, default=None,
                    help="processes that draw the figures (default: one per CPU)")
    ap.add_argument("--only", choices=("survey", "report"), help="time one way only")
    ap.add_argument("--draw", action="store_true",
                    help="draw every figure on every write (kept figures forgotten first)")
    args = ap.parse_args(argv)

    from memfx.analysis.documents import survey_run_documents
    from memfx.report.report import write_report
    from memfx.store.store import Store
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db
        if args.draw:
            db = os.path.join(tmp, "copy.db")
            shutil.copyfile(args.db, db)
        with Store(db) as store:
            return _time_writes(args, store, db, tmp, survey_run_documents, write_report)


def forget_figures(db: str) -> None:
    """Remove the figures a report kept (the analyses rows named figure:...)."""
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("DELETE FROM analyses WHERE analysis LIKE 'figure:%'")
    except sqlite3.OperationalError:
        pass                                  # an older store: none kept
    finally:
        con.close()


def _time_writes(args, store, db, tmp, survey_run_documents, write_report):
    """The timed writes of main(), on ``store`` (at path ``db``)."""
    surveys = store.surveys()
    if not surveys and not args.survey:
        sys.exit(f"no survey in {args.db}")
    sid = store.survey(args.survey or surveys[0]["id"])["id"]
    out = os.path.join(tmp, "report.html")
    # (a memfx older than --jobs is timed too: it is not passed unless given)
    jobs = {} if args.jobs is None else {"jobs": args.jobs}

    def write(documents):
        if args.draw:
            forget_figures(db)
        write_report(store, [sid], out, documents, **jobs)
    print(f"survey {sid} in {args.db}, {os.cpu_count()} CPUs, jobs {args.jobs or 'default'}, "
          f"figures {'drawn every time' if args.draw else 'kept between writes'}")
    if args.only != "report":
        t = time.perf_counter()
        documents = survey_run_documents(store, sid)
        print(f"analysis {time.perf_counter() - t:5.2f} s (the survey's own step)")
        walls, cpus = timed(lambda: write(documents), args.repeat)
        print(line("survey", walls, cpus, os.path.getsize(out)))
    if args.only != "survey":
        walls, cpus = timed(lambda: write(None), args.repeat)
        print(line("report", walls, cpus, os.path.getsize(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
