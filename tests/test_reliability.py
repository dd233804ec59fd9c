"""Issue 26: nothing reported stored is lost, no secret in any message, one
line instead of a traceback.  Each reproducer of the audit is a test here
(the binding's are in test_core.py and test_core_fuzz.py, the worker's in
test_worker_parent.py)."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli
from memfx.model.errors import MemfxError, StoreError
from memfx.model.protocol import Param
from memfx.store.postgres import classify_target, mask_secrets
from memfx.store.store import Store

DATA = Path(__file__).parent / "data" / "export_latency_small.json"
SECRET = "S3cretPW"


def one_line_exit_2(p, fragment=""):
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def raw_doc():
    return json.loads(DATA.read_text())


def imported_db(tmp_path, doc=None, name="r.db"):
    src = tmp_path / f"{name}.json"
    src.write_text(json.dumps(doc or raw_doc()))
    db = str(tmp_path / name)
    p = run_cli("import", str(src), db=db)
    assert p.returncode == 0, p.stderr
    return db


# ---- 1. a store at SQLite's own sibling names ----------------------------------

@pytest.mark.measuring
@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_a_store_at_a_sqlite_sibling_name_is_refused_and_nothing_written(tmp_path, suffix):
    db = str(tmp_path / "results.db")
    src = tmp_path / "r.json"
    src.write_text(DATA.read_text())
    for args in (["import", str(src)], ["runs"], ["run", "latency", "--set", "samples=3"]):
        p = run_cli(*args, db=db + suffix)
        one_line_exit_2(p, "SQLite")
        assert sorted(os.listdir(tmp_path)) == ["r.json"]
    p = run_cli("runs", env={"MEMFX_DB": db + suffix})
    one_line_exit_2(p, "SQLite")


# ---- 3. imports ----------------------------------------------------------------

@pytest.mark.measuring
def test_an_imported_running_run_is_stored_interrupted_and_can_be_removed(tmp_path):
    doc = raw_doc()
    doc["run"].update(status="running", finished=None, host=socket.gethostname(), pid=1)
    db = imported_db(tmp_path, doc)
    store = Store(db)
    run = store.run(doc["run"]["id"])
    assert run["status"] == "interrupted"
    store.close()
    p = run_cli("rm", doc["run"]["id"], db=db)
    assert p.returncode == 0, p.stderr
    assert json.loads(run_cli("runs", "--json", db=db).stdout) == []


@pytest.mark.measuring
def test_an_import_does_not_join_a_survey_it_was_not_exported_with(tmp_path):
    db = str(tmp_path / "s.db")
    store = Store(db)
    survey_id = store.begin_survey("quick", ["survey"])
    store.finish_survey(survey_id, "complete")
    survey = store.survey(survey_id)
    store.close()
    doc = raw_doc()
    doc["run"]["survey_id"] = survey_id
    doc["survey"] = {k: v for k, v in survey.items() if k != "runs"}
    doc["survey"]["argv"] = ["survey", "--full"]      # another survey under the same id
    src = tmp_path / "join.json"
    src.write_text(json.dumps(doc))
    one_line_exit_2(run_cli("import", str(src), db=db), "not the survey it was exported with")
    # the same survey row, but a run of an experiment it already has
    store = Store(db)
    doc["survey"]["argv"] = survey["argv"]
    store.import_run(doc)       # its first latency run: allowed (as a survey export is imported)
    doc2 = json.loads(json.dumps(doc))
    doc2["run"]["id"] = doc["run"]["id"] + "x"
    with pytest.raises(StoreError, match="not the survey it was exported with"):
        store.import_run(doc2)
    assert len(store.runs(survey_id=survey_id)) == 1
    store.close()


@pytest.mark.measuring
def test_a_run_naming_a_survey_it_does_not_carry_joins_no_survey(tmp_path):
    db = str(tmp_path / "s.db")
    store = Store(db)
    survey_id = store.begin_survey("quick", ["survey"])
    store.finish_survey(survey_id, "complete")
    store.close()
    doc = raw_doc()
    doc["run"]["survey_id"] = survey_id
    doc.pop("survey", None)
    src = tmp_path / "join.json"
    src.write_text(json.dumps(doc))
    one_line_exit_2(run_cli("import", str(src), db=db), "not in the document")
    assert Store(db).runs(survey_id=survey_id) == []


# ---- 5. one classifier, no secret in any message ----------------------------------

def test_a_driver_message_quoting_the_password_is_masked():
    from memfx.store.postgres import _without_secret
    url = f"postgresql://memfx:{SECRET}%zz@127.0.0.1:1/memfx"
    msg = f'invalid percent-encoded token: "{SECRET}%zz"'
    assert SECRET not in _without_secret(msg, url) and "***" in _without_secret(msg, url)


@pytest.mark.measuring
@pytest.mark.parametrize("target", [
    f"postgresq://memfx:{SECRET}@db.example/memfx",
    f"postgresql:/memfx:{SECRET}@/memfx?host=/tmp",
    f"memfx:{SECRET}@db.example:5432/memfx",
    f"mysql://memfx:{SECRET}@db.example/memfx",
    f"postgresql://memfx:{SECRET}@db.example:notaport/memfx",
    f"http://db.example/memfx?password={SECRET}",
    f"host=/tmp dbname=memfx password={SECRET}",          # libpq's keyword/value form
])
def test_url_like_targets_are_refused_with_the_password_masked(tmp_path, target):
    with pytest.raises(StoreError) as e:
        classify_target(target, "--db")
    assert SECRET not in str(e.value) and "***" in str(e.value)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    runs = [run_cli("runs", db=target), run_cli("runs", env={"MEMFX_DB": target}),
            run_cli("push", "--all", "--to", target),
            run_cli("push", "--all", env={"MEMFX_DB": target}),
            run_cli("push", "--all", "--to", "postgresql://h/x", "--db", target)]
    for p in runs:
        one_line_exit_2(p)
        assert SECRET not in p.stderr + p.stdout
    assert not any(Path(".").glob("postgres*"))


def test_valid_postgres_urls_and_paths_are_classified():
    assert classify_target("postgresql://u:pw@h/db", "--db") == "url"
    assert classify_target("postgres://h/db", "--db") == "url"
    for path in ("results.db", "/tmp/a b/r.db", "./x:y.db", "dir/r@home.db"):
        assert classify_target(path, "--db") == "path"


def test_mask_secrets():
    assert mask_secrets(f"postgresq://memfx:{SECRET}@h/x") == "postgresq://memfx:***@h/x"
    assert SECRET not in mask_secrets(f"x://u:pa/{SECRET}@h")
    assert SECRET not in mask_secrets(f"host=h password={SECRET} dbname=x")
    assert mask_secrets("/plain/path.db") == "/plain/path.db"


@pytest.mark.measuring
def test_no_secret_on_a_connection_failure(tmp_path):
    pytest.importorskip("psycopg")
    for url in (f"postgresql://memfx:{SECRET}@127.0.0.1:1/memfx?connect_timeout=2",
                f"postgres://memfx@127.0.0.1:1/memfx?password={SECRET}&connect_timeout=2"):
        for p in (run_cli("runs", db=url, timeout=60),
                  run_cli("report", "-o", str(tmp_path / "r.html"), db=url, timeout=60),
                  run_cli("push", "--all", "--to", url, timeout=60)):
            assert p.returncode == 2, p.stderr
            assert SECRET not in p.stderr + p.stdout and "Traceback" not in p.stderr


@pytest.mark.measuring
def test_psycopg_log_lines_never_reach_stderr():
    code = ("import logging, memfx.store.postgres; "
            "logging.getLogger('psycopg').warning('error ignored in rollback on x')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0 and p.stderr == ""


# ---- 6. one line instead of a traceback ---------------------------------------------

@pytest.mark.measuring
def test_mathtext_in_a_cpu_model_or_arm_name_plots(tmp_path):
    doc = raw_doc()
    doc["machine"]["cpu"]["model_name"] = r"CPU $\foo{bar}$"
    for s in doc["samples"]:
        s["arm"] = r"$\foo{bar}$" + s["arm"]
    db = imported_db(tmp_path, doc)
    out = tmp_path / "p.png"
    p = run_cli("plot", "latest", "-o", str(out), db=db)
    assert p.returncode == 0, p.stderr
    assert out.stat().st_size > 0


@pytest.mark.measuring
def test_a_non_utf8_argument_is_one_line(tmp_path):
    bad = os.fsencode(str(tmp_path)) + b"/\xff.db"
    for args in ([b"runs", b"--db", bad], [b"show", b"\xff"], [b"run", b"latency", b"--set", b"x=\xff"],
                 [b"export", b"latest", b"-o", bad], [b"report", b"-o", bad], [b"import", bad],
                 [b"compare", b"\xff", b"\xfe"], [b"plot", b"latest", b"-o", bad]):
        p = subprocess.run([sys.executable.encode(), b"-m", b"memfx", *args],
                           capture_output=True)
        assert p.returncode == 2, p.stderr
        err = p.stderr.decode("utf-8", "replace")
        assert len(err.strip().splitlines()) == 1 and "UTF-8" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())


@pytest.mark.measuring
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["runs"], ["machine"], ["list"], ["show", "latest"],
                                  ["runs", "--json"], ["machines"]])
def test_stdout_on_a_full_device_is_one_line(tmp_path, args):
    db = imported_db(tmp_path)
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "memfx", *args, "--db", db]
                           if args[0] not in ("list", "machine") else
                           [sys.executable, "-m", "memfx", *args],
                           stdout=full, stderr=subprocess.PIPE, text=True)
    # exit 3, not 2: output that cannot be written is not bad input (issue 41)
    assert p.returncode == 3, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "standard output" in lines[0] and "Traceback" not in p.stderr


@pytest.mark.measuring
def test_prune_with_an_age_beyond_the_epoch_is_one_line(tmp_path):
    db = imported_db(tmp_path)
    one_line_exit_2(run_cli("prune", "--older-than", "99999999999999999999d", db=db), "1970")
    assert Store(db).runs()


# ---- 7. smaller ---------------------------------------------------------------------

def test_list_values_given_twice_are_measured_once():
    p = Param("pages", "list:str", "4k", "page sizes", choices=("4k", "2m"))
    assert p.parse("4k,4k,2m,4k") == ["4k", "2m"]
    sizes = Param("sizes", "list:size", "4K", "sizes")
    assert sizes.parse("4K,4096,8K") == [4096, 8192]


@pytest.mark.measuring
def test_compare_group_by_an_empty_cpu_model_is_one_line(tmp_path):
    db = imported_db(tmp_path)
    one_line_exit_2(run_cli("compare", "--group-by", "cpu-model", "", "", db=db), "empty")


@pytest.mark.measuring
def test_a_survey_in_which_every_experiment_failed_is_failed_and_markup_prints_as_typed(
        tmp_path, monkeypatch, capsys):
    from memfx.cli import main as cli

    def fail(self, *a, **k):
        raise MemfxError(f"{self.name}: [/] disk full [bold")
    monkeypatch.setattr("memfx.running.runner.Measurement.measure_replica", fail)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "[").mkdir()
    db = str(tmp_path / "f.db")
    status = cli.main(["survey", "--only", "latency,fill", "-q", "-o", "[/]r.html", "--db", db])
    out = capsys.readouterr()
    assert status == 1, out.err
    assert "Traceback" not in out.err and "MarkupError" not in out.err
    assert "report: [/]r.html" in out.out and "[/] disk full [bold" in out.err
    assert (tmp_path / "[" / "]r.html").exists()
    (s,) = Store(db).surveys()
    assert s["status"] == "failed"


@pytest.mark.measuring
def test_a_killed_writer_leaves_no_temporary_behind(tmp_path):
    from memfx.model.outputs import atomic_output
    out = tmp_path / "r.html"
    code = ("import os, sys, memfx.model.outputs as o\n"
            "with o.atomic_output(sys.argv[1]) as tmp:\n"
            "    print(tmp, flush=True)\n"
            "    os.kill(os.getpid(), 9)\n")
    p = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True)
    assert p.returncode == -9
    stale = Path(p.stdout.strip())
    assert stale.exists()              # SIGKILL runs no cleanup ...
    with atomic_output(str(out)) as tmp:
        Path(tmp).write_text("x")
    assert not stale.exists()          # ... the next writer of that name removes it
    assert sorted(os.listdir(tmp_path)) == ["r.html"]
