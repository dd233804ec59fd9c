"""The command line end to end: a tiny real latency run, the commands that
read it back, bad input (one line, exit 2, DB untouched), Ctrl-C and a
crashing worker."""
import csv
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import run_cli
from memfx.lab.machine import fingerprint
from memfx.model.errors import MemfxError
from memfx.running.runner import run_experiment
from memfx.store.store import Store

# every test here starts a worker or a process, or times kernels
pytestmark = pytest.mark.measuring

TINY = ["--set", "max_size=64K", "--set", "samples=5", "--set", "min_sample_ms=0.05",
        "--set", "per_octave=1", "--set", "refine=false"]


def dump(db):
    con = sqlite3.connect(db)
    try:
        return "\n".join(con.iterdump())
    finally:
        con.close()


@pytest.fixture(scope="module")
def tiny_db(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("cli") / "r.db")
    p = run_cli("run", "latency", *TINY, "--json", db=db)
    assert p.returncode == 0, p.stderr
    return db, json.loads(p.stdout)


def test_run_prints_the_result_document(tiny_db):
    db, doc = tiny_db
    for key in ("schema_version", "run_id", "experiment", "status", "started", "finished",
                "machine", "params", "points", "answers", "warnings", "plots",
                "experiment_info", "capabilities"):
        assert key in doc
    assert doc["schema_version"] == 4 and doc["status"] == "complete" and "findings" not in doc
    sizes = sorted({p["params"]["size_bytes"] for p in doc["points"]})
    assert sizes[0] == 1024 and sizes[-1] == 64 << 10
    for p in doc["points"]:
        assert p["metric"] == "ns_per_load" and p["unit"] == "ns"
        assert p["n"] >= 3 and p["median"] is not None
        for k in ("min", "max", "mad", "ci_low", "ci_high", "cycles_est", "counters", "rejected"):
            assert k in p
    answers = {a["question"]: a for a in doc["answers"]}
    assert answers["latency.l1d"]["verdict"] == "measured"          # 1K .. 64K reaches the L1d
    assert answers["latency.memory"]["verdict"] == "not_measured"   # and not memory
    assert doc["machine"]["caches"]


def test_runs_show_export_import_plot(tiny_db, tmp_path):
    db, doc = tiny_db
    rid = doc["run_id"]
    p = run_cli("runs", "--json", db=db)
    assert p.returncode == 0 and rid in [r["id"] for r in json.loads(p.stdout)]
    p = run_cli("show", rid[:-2], "--json", db=db)
    shown = json.loads(p.stdout)
    assert shown["run_id"] == rid and len(shown["points"]) == len(doc["points"])
    p = run_cli("show", "latest", db=db)
    # latency declares questions: `show` leads with its answers (older render: findings)
    assert p.returncode == 0 and ("answers" in p.stdout or "Findings" in p.stdout)
    p = run_cli("export", rid, "--format", "csv", db=db)
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    with Store(db) as st:
        assert len(rows) == len(st.samples(rid))
    assert {"arm", "size_bytes", "value", "ns", "rejected"} <= set(rows[0])
    raw = tmp_path / "raw.json"
    assert run_cli("export", rid, "--format", "raw", "-o", str(raw), db=db).returncode == 0
    other = str(tmp_path / "other.db")
    p = run_cli("import", str(raw), db=other)
    assert p.returncode == 0 and p.stdout.strip() == rid
    again = json.loads(run_cli("show", rid, "--json", db=other).stdout)
    assert again["points"] == shown["points"]
    png = tmp_path / "lat.png"
    p = run_cli("plot", rid, "-o", str(png), db=db)
    assert p.returncode == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, fragment", [
    (["run", "nosuch"], "unknown experiment"),
    (["run", "latency", "--set", "nosuch=1"], "unknown parameter"),
    (["run", "latency", "--set", "max_size=12 parsecs"], "expected a size"),
    (["run", "latency", "--set", "samples=many"], "expected an integer"),
    (["run", "latency", "--set", "max_size=900T"], "does not fit"),
    (["run", "latency", "--set", "novalue"], "NAME=VALUE"),
    (["show", "no-such-run"], "no run"),
    (["export", "latest", "--format", "xml"], "invalid choice"),
    (["plot", "latest", "-o", "x.gif"], ".png"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_input_is_one_line_exit_2_and_db_untouched(tiny_db, args, fragment, tmp_path):
    db, _ = tiny_db
    before = dump(db)
    p = run_cli(*args, db=db)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], p.stderr
    assert dump(db) == before


def test_foreign_or_unreadable_db_is_refused_unchanged(tmp_path):
    foreign = tmp_path / "foreign.db"
    con = sqlite3.connect(foreign)
    con.execute("create table customers(id integer)")
    con.commit()
    con.close()
    text = tmp_path / "notes.db"
    text.write_text("not a database\n" * 100)
    for path in (foreign, text):
        data = path.read_bytes()
        p = run_cli("run", "latency", *TINY, db=str(path))
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
        assert path.read_bytes() == data
    p = run_cli("runs", db=str(tmp_path / "missing.db"))
    assert p.returncode == 2 and "no results database" in p.stderr
    assert not (tmp_path / "missing.db").exists()


def test_ctrl_c_keeps_samples_and_marks_interrupted(tmp_path):
    db = str(tmp_path / "int.db")
    args = [sys.executable, "-m", "memfx", "run", "latency", "--db", db, "--quiet",
            "--set", "max_size=64M", "--set", "samples=5", "--set", "min_sample_ms=1"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    n = 0
    while time.time() < deadline and n == 0:
        time.sleep(0.3)
        if os.path.exists(db):
            try:
                with Store(db) as st:
                    runs = st.runs()
                    n = runs[0]["n_samples"] if runs else 0
            except Exception:
                n = 0
    assert n > 0, "no samples were stored in time"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    with Store(db) as st:
        run = st.runs()[0]
        assert run["status"] == "interrupted"
        assert run["n_samples"] >= n
        assert all(not s["rejected"] or s["reason"] for s in st.samples(run["id"]))


def test_worker_crash_fails_the_run_and_keeps_the_store(tmp_path):
    db = str(tmp_path / "crash.db")
    store = Store(db)
    fp = fingerprint()

    def crash(info):
        os.kill(info["pid"], signal.SIGSEGV)

    with pytest.raises(MemfxError, match="SIGSEGV"):
        run_experiment("latency", store, fp, "quick", {"max_size": "64K"}, on_info=crash)
    run = store.runs()[0]
    assert run["status"] == "failed" and "SIGSEGV" in run["error"]
    assert sqlite3.connect(db).execute("pragma integrity_check").fetchone()[0] == "ok"


def test_list_and_machine(tmp_path):
    p = run_cli("list", "--json")
    names = [e["name"] for e in json.loads(p.stdout)]
    assert "latency" in names
    p = run_cli("machine", "--json")
    m = json.loads(p.stdout)
    assert m["machine"]["caches"] and "pmu" in m["capabilities"]
    assert isinstance(m["warnings"], list)
    p = run_cli("run", "--help")
    assert p.returncode == 0 and "max_size" in p.stdout and "--set" in p.stdout


def test_run_stores_its_analysis_and_plot_reads_it(tiny_db, tmp_path):
    """`memfx run` analyses the run once and stores the document with the
    analysis that made it; `memfx plot` then reads it (issue 42 item 2)."""
    from memfx.analysis.answer_cache import analysis_key
    db, doc = tiny_db
    con = sqlite3.connect(db)
    try:
        kept = con.execute("SELECT run_id, analysis FROM analyses").fetchall()
    finally:
        con.close()
    assert kept == [(doc["run_id"], analysis_key())]
    from memfx.analysis import documents, results
    from memfx.cli.main import main

    def no_analysis(*args, **kwargs):
        raise AssertionError("plot analysed the run again instead of reading its stored document")
    documents.reanalyse(False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(documents, "document", no_analysis)
        mp.setattr(results, "document", no_analysis)
        out = tmp_path / "p.png"
        assert main(["plot", doc["run_id"], "-o", str(out), "--db", db]) == 0
    assert out.stat().st_size > 1000
