#!/usr/bin/env python3
"""How long memfx takes to read a quick survey back (issue 42, item 2).

Times `memfx show SURVEY`, `show SURVEY --json`, `compare OTHER SURVEY` and
`report SURVEY`, each as its own process (what a user waits for, imports
included): cold (the first read, which analyses the runs and stores their
documents) and warm (the median of --repeat reads of the stored documents),
against the targets: show <= 0.5 s, compare <= 1 s, report <= 2 s.
OTHER: --against, else the newest other complete survey of the store, else
SURVEY itself.

The store:
    --db PATH --survey ID   an existing store (copied first: the cold read
                            writes the analyses into the copy, not the original)
    --import FILE           a survey's exports (tests/data/survey_quick.json.gz:
                            {"runs": [raw export, ...]}) imported into a temp store
    neither                 `memfx survey --quick` into a temp store (measures)

Cold is cold for memfx's stored documents only: the analyses are removed
from the copy before it, not the OS's page cache.  The answer cache
(compare's machine history) is turned off (MEMFX_CACHE_DIR=off) so that it
cannot stand in for the store.  Python's compiled sources are kept in the
temporary directory (PYTHONPYCACHEPREFIX, whatever PYTHONDONTWRITEBYTECODE
says), so that the warm reads, as an installed memfx's, do not compile
memfx's sources again each time."""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGETS = {"show": 0.5, "show --json": 0.5, "compare": 1.0, "report": 2.0}


def commands(db: str, survey: str, other: str, out: str) -> dict:
    base = [sys.executable, "-m", "memfx"]
    return {
        "show": base + ["show", survey, "--db", db],
        "show --json": base + ["show", survey, "--json", "--db", db],
        "compare": base + ["compare", other, survey, "--db", db],
        "report": base + ["report", survey, "-o", out, "--db", db],
    }


def timed(argv, env) -> float:
    start = time.perf_counter()
    p = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True, check=False)
    took = time.perf_counter() - start
    if p.returncode not in (0, 1):            # compare's 1 is its verdict, not a failure
        sys.exit(f"read_times: {' '.join(argv[2:4])} failed ({p.returncode}): "
                 f"{p.stderr.strip()[-300:]}")
    return took


def forget_analyses(db: str) -> None:
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("DELETE FROM analyses")
    except sqlite3.OperationalError:
        pass                                  # an older store: none stored yet
    finally:
        con.close()


def make_store(args, where: Path, env) -> tuple[str, str]:
    db = str(where / "read_times.db")
    if args.db:
        if not args.survey:
            sys.exit("read_times: --db needs --survey ID")
        shutil.copyfile(args.db, db)
        return db, args.survey
    if args.import_file:
        from memfx.store.store import Store
        opener = gzip.open if args.import_file.endswith(".gz") else open
        with opener(args.import_file, "rt") as f:
            runs = json.load(f)["runs"]
        with Store(db) as st:
            for run in runs:
                st.import_run(run)
            return db, st.surveys()[0]["id"]
    subprocess.run([sys.executable, "-m", "memfx", "survey", "--quick", "-o",
                    str(where / "survey.html"), "--db", db], env=env, check=True)
    from memfx.store.store import Store
    with Store(db) as st:
        return db, st.surveys()[0]["id"]


def other_survey(db: str, survey: str) -> str:
    """The newest complete survey of the store other than ``survey``, else
    ``survey``."""
    con = sqlite3.connect(db)
    try:
        row = con.execute("SELECT id FROM surveys WHERE status = 'complete' AND id != ?"
                          " ORDER BY started DESC LIMIT 1", (survey,)).fetchone()
    finally:
        con.close()
    return row[0] if row else survey


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", help="a store holding a quick survey (copied first)")
    ap.add_argument("--survey", help="the survey's id in --db")
    ap.add_argument("--import", dest="import_file", metavar="FILE",
                    help="a survey's raw exports to import instead")
    ap.add_argument("--against", metavar="ID",
                    help="the survey compare compares with (default: the newest other "
                         "complete survey of the store, else the survey itself)")
    ap.add_argument("--repeat", type=int, default=5, help="warm reads per command (median)")
    args = ap.parse_args()
    if args.repeat < 1:
        sys.exit("read_times: --repeat must be at least 1")
    with tempfile.TemporaryDirectory(prefix="memfx-read-times-") as tmp:
        where = Path(tmp)
        env = dict(os.environ, MEMFX_CACHE_DIR="off", PYTHONPYCACHEPREFIX=str(where / "pycache"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        db, survey = make_store(args, where, env)
        other = args.against or other_survey(db, survey)
        forget_analyses(db)
        cmds = commands(db, survey, other, str(where / "report.html"))
        cold = {}
        for name, argv in cmds.items():
            if name in ("show", "compare", "report"):
                forget_analyses(db)           # each cold read analyses the whole survey
            cold[name] = timed(argv, env)
        for argv in cmds.values():
            # once untimed: what a later cold read removed (compare's other
            # survey, its history) is stored again before the warm reads
            timed(argv, env)
        warm = {name: statistics.median(timed(argv, env) for _ in range(args.repeat))
                for name, argv in cmds.items()}
    print(f"survey {survey} (compare: {other} -> {survey}), {os.cpu_count()} CPUs; "
          f"warm = median of {args.repeat}")
    print(f"{'read':<14}{'cold s':>9}{'warm s':>9}{'target s':>10}  met")
    missed = 0
    for name in cmds:
        met = warm[name] <= TARGETS[name]
        missed += not met
        print(f"{name:<14}{cold[name]:9.2f}{warm[name]:9.2f}{TARGETS[name]:10.1f}  "
              f"{'yes' if met else 'NO'}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
