"""Tests for the SQLite results store (pure Python, no C core)."""

import csv
import hashlib
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import memfx
from memfx.model.errors import StoreError
from memfx.store import sql as store_mod  # the schema and its migrations
from memfx.store.store import APPLICATION_ID, SCHEMA_VERSION, Store, default_db_path, utcnow_iso

# the memfx under test (installed, in place or sanitized), for child processes
SRC = str(Path(memfx.__file__).resolve().parent.parent)
MACHINE = {"cpu": {"vendor": "GenuineIntel", "model": 85},
           "caches": [{"level": 1, "type": "Data", "size_bytes": 32768},
                      {"level": 2, "type": "Unified", "size_bytes": 1048576}]}


def sample(i, arm="seq", **extra):
    s = {
        "arm": arm, "point": {"size_bytes": 4096 * (i + 1), "stride": 64},
        "metric": "ns_per_load", "unit": "ns", "value": 1.25 + i / 7,
        "length": 1000 + i, "ns": 1250.5 + i, "ticks": 3000 + i, "cycles_est": 4.5 + i,
        "counters": {"page_faults": i % 3}, "rejected": i % 4 == 3,
        "reason": "migrated" if i % 4 == 3 else None,
    }
    s.update(extra)
    return s


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def child_env():
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


@pytest.fixture
def db(tmp_path):
    with Store(tmp_path / "results.db", memfx_version="9.9") as st:
        yield st


# ---- paths and timestamps ---------------------------------------------------

def test_default_path_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_db_path() == tmp_path / "xdg" / "memfx" / "results.db"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_db_path() == tmp_path / "home" / ".local" / "share" / "memfx" / "results.db"


def test_store_none_uses_default_path_and_makes_parents(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "a" / "b"))
    with Store() as st:
        assert st.path == tmp_path / "a" / "b" / "memfx" / "results.db"
    assert (tmp_path / "a" / "b" / "memfx" / "results.db").is_file()


def test_utcnow_iso_format():
    assert utcnow_iso(0) == "1970-01-01T00:00:00Z"
    assert utcnow_iso(1795303101.9) == "2026-11-21T23:18:21Z"


# ---- round trip ---------------------------------------------------------------

def test_round_trip_in_batches(db):
    run_id = db.begin_run("latency", {"sizes": [1, 2], "pattern": "random"}, "quick", MACHINE)
    sent = [sample(i) for i in range(10)]
    db.add_samples(run_id, sent[:3])
    db.add_samples(run_id, sent[3:4])
    db.add_samples(run_id, [])
    db.add_samples(run_id, sent[4:])
    assert db.run(run_id)["status"] == "running"
    db.finish_run(run_id, "complete")

    got = db.samples(run_id)
    assert [s["seq"] for s in got] == list(range(10))
    assert [{k: v for k, v in s.items() if k != "seq"} for s in got] == [
        dict(s, replica=0) for s in sent]                   # one process: replica 0
    assert [s["rejected"] for s in got] == [i % 4 == 3 for i in range(10)]
    assert all(type(s["rejected"]) is bool for s in got)

    run = db.run(run_id)
    assert run["id"] == run_id and run["experiment"] == "latency"
    assert run["status"] == "complete" and run["error"] is None
    assert run["params"] == {"sizes": [1, 2], "pattern": "random"}
    assert run["preset"] == "quick" and run["memfx_version"] == "9.9"
    assert run["machine"] == MACHINE
    assert run["n_samples"] == 10
    assert run["finished"] >= run["started"]
    assert 0 <= run["duration_s"] < 60
    assert run["pid"] == os.getpid()


def test_missing_optional_sample_keys_get_defaults(db):
    run_id = db.begin_run("fill", {}, "quick", MACHINE)
    db.add_samples(run_id, [{"metric": "gbps", "value": 3.0}])
    (s,) = db.samples(run_id)
    assert s == {"seq": 0, "arm": None, "point": {}, "metric": "gbps", "unit": None,
                 "value": 3.0, "length": None, "ns": None, "ticks": None,
                 "cycles_est": None, "counters": {}, "rejected": False, "reason": None,
                 "replica": 0}


def test_bad_samples_are_refused_whole(db):
    run_id = db.begin_run("fill", {}, "quick", MACHINE)
    with pytest.raises(StoreError, match="cycles"):
        db.add_samples(run_id, [sample(0), {**sample(1), "cycles": 3}])
    with pytest.raises(StoreError, match="metric"):
        db.add_samples(run_id, [{"value": 1.0}])
    with pytest.raises(StoreError, match="no run"):
        db.add_samples("nope", [sample(0)])
    assert db.samples(run_id) == []


def test_seq_continues_across_store_instances(tmp_path):
    path = tmp_path / "r.db"
    with Store(path) as st:
        run_id = st.begin_run("latency", {}, "quick", MACHINE)
        st.add_samples(run_id, [sample(0), sample(1)])
    with Store(path) as st:
        st.add_samples(run_id, [sample(2)])
        assert [s["seq"] for s in st.samples(run_id)] == [0, 1, 2]


def test_run_ids_unique_within_one_second(db):
    ids = [db.begin_run("latency", {}, "quick", MACHINE) for _ in range(50)]
    assert len(set(ids)) == 50
    stamp = time.strftime("%Y%m%d-", time.gmtime())
    assert all(i.startswith(stamp) and "-latency-" in i for i in ids)


def test_runs_filtering_and_order(db):
    s1 = db.begin_survey("quick", ["memfx", "survey"])
    a = db.begin_run("latency", {}, "quick", MACHINE, survey_id=s1)
    b = db.begin_run("fill", {}, "quick", MACHINE, survey_id=s1)
    c = db.begin_run("latency", {}, "full", MACHINE)
    db.finish_run(a, "complete")
    db.finish_run(b, "failed", error="boom")
    assert [r["id"] for r in db.runs()] == [c, b, a]
    assert [r["id"] for r in db.runs(experiment="latency")] == [c, a]
    assert [r["id"] for r in db.runs(survey_id=s1)] == [b, a]
    assert [r["id"] for r in db.runs(status="running")] == [c]
    assert [r["id"] for r in db.runs(experiment="latency", status="complete")] == [a]
    assert db.runs(experiment="copy") == []
    assert db.run(b)["error"] == "boom"
    with pytest.raises(StoreError, match="bad status"):
        db.runs(status="done")
    with pytest.raises(StoreError, match="bad status"):
        db.finish_run(c, "running")


def test_prefix_latest_unknown_ambiguous(db):
    a = db.begin_run("latency", {}, "quick", MACHINE)
    b = db.begin_run("latency", {}, "quick", MACHINE)
    with pytest.raises(StoreError, match="no complete run"):
        db.run("latest")                       # latest means the latest complete run
    db.finish_run(a, "complete")
    db.finish_run(b, "complete")
    assert db.run("latest")["id"] == b
    c = db.begin_run("fill", {}, "quick", MACHINE)
    assert db.run("latest")["id"] == b         # c is still running
    db.finish_run(c, "failed")
    assert db.run("latest")["id"] == b         # ... and then failed
    assert db.run("latest:latency")["id"] == b
    with pytest.raises(StoreError, match="no complete fill run"):
        db.run("latest:fill")
    assert db.run(a)["id"] == a
    distinct = next(n for n in range(len(a)) if a[:n] != b[:n])
    assert db.run(a[:distinct])["id"] == a
    with pytest.raises(StoreError, match=r"matches 3 runs"):
        db.run(a[:8])
    with pytest.raises(StoreError) as err:
        db.run("xyz")
    assert str(err.value) == f"no run 'xyz' in {db.path}"


def test_latest_on_empty_db(db):
    with pytest.raises(StoreError, match="no complete run"):
        db.run("latest")


def test_surveys(db):
    sid = db.begin_survey("quick", ["memfx", "survey", "--quick"], note="first")
    assert sid.startswith("s-") and len(sid) == len("s-20261121-232501-ab12")
    r1 = db.begin_run("latency", {}, "quick", MACHINE, survey_id=sid)
    db.begin_run("fill", {}, "quick", MACHINE)
    db.finish_survey(sid, "complete")
    (listed,) = db.surveys()
    assert listed["id"] == sid and listed["n_runs"] == 1 and listed["status"] == "complete"
    full = db.survey(sid)
    assert full["argv"] == ["memfx", "survey", "--quick"] and full["note"] == "first"
    assert [r["id"] for r in full["runs"]] == [r1]
    assert db.survey("latest")["id"] == sid
    with pytest.raises(StoreError, match="no survey"):
        db.begin_run("latency", {}, "quick", MACHINE, survey_id="s-missing")
    with pytest.raises(StoreError, match="no survey"):
        db.finish_survey("s-missing", "complete")


def test_artifacts_upsert(db):
    run_id = db.begin_run("copy", {}, "quick", MACHINE)
    db.set_artifact(run_id, "advice", {"glibc": "x"})
    db.set_artifact(run_id, "knees", [1, 2])
    db.set_artifact(run_id, "advice", {"glibc": "y"})
    assert db.artifacts(run_id) == {"advice": {"glibc": "y"}, "knees": [1, 2]}


def test_machine_dedupe(db):
    fp = {"cpu": {"model_name": "X", "family": 6}, "memory": {"available_bytes": 5}}
    db.begin_run("latency", {}, "quick", fp)
    # the same machine, keys reordered and another volatile state
    db.begin_run("fill", {}, "quick", {"memory": {"available_bytes": 9},
                                       "cpu": {"family": 6, "model_name": "X"}})
    db.begin_run("fill", {}, "quick", {"cpu": {"model_name": "X", "family": 7}})
    con = sqlite3.connect(db.path)
    assert con.execute("SELECT count(*) FROM machines").fetchone()[0] == 2
    con.close()
    ids = [r["machine_id"] for r in db.runs()]          # newest first
    assert ids[1] == ids[2] != ids[0]


# ---- schema, identity, refusing foreign files -------------------------------

def test_schema_identity_and_pragmas(db):
    con = sqlite3.connect(db.path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 8
    assert con.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    meta = dict(con.execute("SELECT key, value FROM meta"))
    assert meta["schema_version"] == "8" and meta["created_by"] == "9.9"
    assert meta["created"].endswith("Z")
    con.close()
    assert db._conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30000
    assert db._conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL


def make_sqlite(path, *, app_id=0, user_version=0, table=True):
    con = sqlite3.connect(path)
    if table:
        con.execute("CREATE TABLE foo (x)")
        con.execute("INSERT INTO foo VALUES (1)")
    con.execute(f"PRAGMA application_id = {app_id}")
    con.execute(f"PRAGMA user_version = {user_version}")
    con.commit()
    con.close()


def assert_refused_untouched(path, match):
    before = sha256(path)
    listing = sorted(os.listdir(path.parent))
    with pytest.raises(StoreError, match=match) as err:
        Store(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    assert sha256(path) == before
    assert sorted(os.listdir(path.parent)) == listing


def test_newer_schema_refused_untouched(tmp_path):
    path = tmp_path / "results.db"
    make_sqlite(path, app_id=APPLICATION_ID, user_version=99)
    assert_refused_untouched(path, rf"written by a newer memfx \(schema 99 > {SCHEMA_VERSION}\)")


def test_text_file_refused_untouched(tmp_path):
    path = tmp_path / "results.db"
    path.write_text("these are my notes, not a database\n" * 50)
    assert_refused_untouched(path, "not a memfx results database")


def test_foreign_sqlite_refused_untouched(tmp_path):
    path = tmp_path / "results.db"
    make_sqlite(path)
    assert_refused_untouched(path, "another program")


def test_other_application_id_refused(tmp_path):
    path = tmp_path / "results.db"
    make_sqlite(path, app_id=0x12345678, table=False)
    assert_refused_untouched(path, "another program")


def test_empty_file_and_empty_sqlite_are_initialised(tmp_path):
    empty = tmp_path / "empty.db"
    empty.touch()
    bare = tmp_path / "bare.db"
    make_sqlite(bare, table=False)
    for path in (empty, bare):
        with Store(path) as st:
            st.begin_run("latency", {}, "quick", MACHINE)
        con = sqlite3.connect(path)
        assert con.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        con.close()


def test_directory_and_unwritable_paths(tmp_path):
    with pytest.raises(StoreError, match="is a directory"):
        Store(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot create directory"):
        Store(blocker / "sub" / "results.db")


# The mechanism is tested one step past the current schema.
NEXT = SCHEMA_VERSION + 1


def test_migration_mechanism(tmp_path, monkeypatch):
    path = tmp_path / "results.db"
    with Store(path) as st:
        run_id = st.begin_run("latency", {}, "quick", MACHINE)
        st.add_samples(run_id, [sample(0)])

    def add_tags(conn):
        conn.execute("ALTER TABLE runs ADD COLUMN tags TEXT")

    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", NEXT)
    monkeypatch.setitem(store_mod.MIGRATIONS, NEXT - 1, add_tags)
    with Store(path) as st:
        assert st.samples(run_id)[0]["value"] == sample(0)["value"]
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == NEXT
    assert "tags" in [r[1] for r in con.execute("PRAGMA table_info(runs)")]
    assert dict(con.execute("SELECT key, value FROM meta"))["schema_version"] == str(NEXT)
    con.close()

    # A fresh DB is created at v1 and then migrated, so it gets the column too.
    with Store(tmp_path / "fresh.db"):
        pass
    con = sqlite3.connect(tmp_path / "fresh.db")
    assert con.execute("PRAGMA user_version").fetchone()[0] == NEXT
    assert "tags" in [r[1] for r in con.execute("PRAGMA table_info(runs)")]
    con.close()


def test_failed_migration_leaves_db_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "results.db"
    with Store(path) as st:
        st.begin_run("latency", {}, "quick", MACHINE)

    def half_done(conn):
        conn.execute("CREATE TABLE half (x)")
        conn.execute("SELECT no_such_function()")

    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", NEXT)
    monkeypatch.setitem(store_mod.MIGRATIONS, NEXT - 1, half_done)
    with pytest.raises(StoreError, match=f"migration from schema {NEXT - 1} failed"):
        Store(path)
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == NEXT - 1
    assert con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'half'").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    con.close()


def test_missing_migration_step(tmp_path, monkeypatch):
    path = tmp_path / "results.db"
    Store(path).close()
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", NEXT + 1)
    monkeypatch.setitem(store_mod.MIGRATIONS, NEXT - 1, lambda conn: None)
    with pytest.raises(StoreError, match=f"no migration from schema {NEXT}"):
        Store(path)


# ---- crashes and concurrency ---------------------------------------------------

KILLED_CHILD = """
import os, signal, sys
from memfx.store.store import Store
st = Store(sys.argv[1])
run_id = st.begin_run("latency", {"n": 25}, "quick", {"host": "child"})
print(run_id, flush=True)
for i in range(25):
    st.add_samples(run_id, [{"metric": "ns", "value": float(i), "point": {"i": i}}])
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.measuring
def test_sigkilled_run_keeps_samples_and_is_marked_interrupted(tmp_path):
    path = tmp_path / "results.db"
    child = subprocess.run([sys.executable, "-c", KILLED_CHILD, str(path)], env=child_env(),
                           capture_output=True, text=True, timeout=30)
    assert child.returncode == -signal.SIGKILL, child.stderr
    run_id = child.stdout.strip()
    with Store(path) as st:
        own = st.begin_run("latency", {}, "quick", MACHINE)  # this process is alive
        run = st.run(run_id)
        # read as interrupted at once, without writing ...
        assert run["status"] == "interrupted" and run["n_samples"] == 25
        con = sqlite3.connect(path)
        assert con.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()[0] == "running"
        con.close()
        assert [(s["seq"], s["value"], s["point"]) for s in st.samples(run_id)] == \
            [(i, float(i), {"i": i}) for i in range(25)]
        assert st.mark_stale_running() == 1          # ... and stored so by this
        run = st.run(run_id)
        assert run["status"] == "interrupted" and str(run["pid"]) in run["error"]
        assert st.run(own)["status"] == "running"
        assert st.mark_stale_running() == 0


STREAMING_CHILD = """
import sys
from memfx.store.store import Store
st = Store(sys.argv[1])
run_id = st.begin_run("fill", {}, "quick", {"host": "child"})
print(run_id, flush=True)
i = 0
while True:
    st.add_samples(run_id, [{"metric": "ns", "value": float(i + k)} for k in range(3)])
    i += 3
"""


@pytest.mark.measuring
def test_sigkill_at_random_moment_leaves_consistent_db(tmp_path):
    path = tmp_path / "results.db"
    child = subprocess.Popen([sys.executable, "-c", STREAMING_CHILD, str(path)],
                             env=child_env(), stdout=subprocess.PIPE, text=True)
    run_id = child.stdout.readline().strip()
    time.sleep(0.3)
    child.kill()
    child.wait(timeout=10)
    child.stdout.close()
    with Store(path) as st:
        values = [s["value"] for s in st.samples(run_id)]
        assert len(values) > 0 and len(values) % 3 == 0  # whole batches only
        assert values == [float(i) for i in range(len(values))]
        assert st._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


WRITER_CHILD = """
import sys, time
from pathlib import Path
from memfx.store.store import Store
db, go, tag = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
deadline = time.time() + 20
while not go.exists() and time.time() < deadline:
    time.sleep(0.005)
# All writers open the (not yet existing) DB together: creation races too.
with Store(db) as st:
    run_id = st.begin_run("writer", {"tag": tag}, "quick", {"m": 1})
    for i in range(0, 200, 4):
        st.add_samples(run_id, [{"metric": "ns", "value": float(j), "arm": tag}
                                for j in range(i, i + 4)])
    st.finish_run(run_id, "complete")
"""


@pytest.mark.measuring
def test_concurrent_writers(tmp_path):
    path = tmp_path / "results.db"
    go = tmp_path / "go"
    children = [subprocess.Popen([sys.executable, "-c", WRITER_CHILD, str(path), str(go), tag],
                                 env=child_env(), stderr=subprocess.PIPE, text=True)
                for tag in ("a", "b", "c")]
    time.sleep(0.3)  # let the interpreters start and reach the wait loop
    go.touch()
    for child in children:
        _, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
    with Store(path) as st:
        runs = st.runs(experiment="writer")
        assert len(runs) == 3 and all(r["status"] == "complete" for r in runs)
        for run in runs:
            got = st.samples(run["id"])
            assert [s["seq"] for s in got] == list(range(200))
            assert [s["value"] for s in got] == [float(j) for j in range(200)]
            assert {s["arm"] for s in got} == {run["params"]["tag"]}
        con = st._conn
        assert con.execute("SELECT count(*) FROM samples").fetchone()[0] == 600
        assert con.execute("SELECT count(*) FROM machines").fetchone()[0] == 1
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


# ---- export / import / CSV ------------------------------------------------------

def filled_run(st):
    sid = st.begin_survey("quick", ["memfx", "survey"])
    run_id = st.begin_run("latency", {"sizes": [4096]}, "quick", MACHINE, survey_id=sid)
    st.add_samples(run_id, [sample(i, arm="seq" if i % 2 else "random") for i in range(6)])
    st.set_artifact(run_id, "advice", {"GLIBC_TUNABLES": "glibc.cpu.x86_rep_stosb_threshold=2048"})
    st.finish_run(run_id, "complete")
    return run_id


def test_export_import_round_trip(tmp_path):
    with Store(tmp_path / "a.db") as a:
        run_id = filled_run(a)
        doc = a.export_run(run_id)
        original_run = a.run(run_id)
    text = json.dumps(doc)  # must be plain JSON
    assert doc["format"] == "memfx-run" and doc["format_version"] == 2
    assert len(doc["samples"]) == 6 and doc["machine"] == MACHINE
    with Store(tmp_path / "b.db") as b:
        assert b.import_run(json.loads(text)) == run_id
        # the survey was still running when exported: it is stored as
        # interrupted, as no process here runs it (issue 26 item 3)
        assert doc["survey"]["status"] == "running"
        assert b.export_run(run_id) == dict(doc, survey=dict(doc["survey"], status="interrupted"))
        assert b.run(run_id) == original_run
        assert b.survey(doc["survey"]["id"])["argv"] == ["memfx", "survey"]
        with pytest.raises(StoreError, match=f"run {run_id} already in"):
            b.import_run(doc)
        assert b.run(run_id)["n_samples"] == 6


def test_import_rejects_unknown_formats(db):
    doc = {"format": "memfx-run", "format_version": 3, "run": {}, "samples": []}
    with pytest.raises(StoreError, match="newer memfx"):
        db.import_run(doc)
    with pytest.raises(StoreError, match="not a memfx-run"):
        db.import_run({"format": "other", "format_version": 1})
    with pytest.raises(StoreError, match="format_version 0"):
        db.import_run({**doc, "format_version": 0})
    assert db.runs() == []


def test_import_is_all_or_nothing(tmp_path):
    with Store(tmp_path / "a.db") as a:
        doc = a.export_run(filled_run(a))
    doc["samples"][3]["seq"] = doc["samples"][2]["seq"]
    with Store(tmp_path / "b.db") as b:
        with pytest.raises(StoreError, match="duplicate sample seq"):
            b.import_run(doc)
        assert b.runs() == [] and b.surveys() == []


def test_samples_csv(db):
    run_id = db.begin_run("latency", {}, "quick", MACHINE)
    db.add_samples(run_id, [sample(0), sample(1)])
    db.add_samples(run_id, [{"metric": "ns", "value": 2.0, "point": {"align": 8, "length": 3}}])
    buf = io.StringIO(newline="")
    db.samples_csv(run_id, buf)
    rows = list(csv.reader(io.StringIO(buf.getvalue())))
    header, body = rows[0], rows[1:]
    assert header == ["run_id", "seq", "arm", "align", "point.length", "size_bytes", "stride",
                      "metric", "unit", "value", "length", "ns", "ticks", "cycles_est",
                      "rejected", "reason", "counters"]
    assert len(body) == 3
    first = dict(zip(header, body[0]))
    assert first["run_id"] == run_id and first["seq"] == "0" and first["size_bytes"] == "4096"
    assert first["align"] == "" and float(first["value"]) == sample(0)["value"]
    assert first["rejected"] == "0" and json.loads(first["counters"]) == {"page_faults": 0}
    last = dict(zip(header, body[2]))
    assert last["point.length"] == "3" and last["length"] == "" and last["seq"] == "2"


# ---- labels, latest, rm and prune (schema 2) -----------------------------------

def test_a_schema_1_database_is_migrated_and_keeps_its_runs(tmp_path):
    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.executescript(store_mod._SCHEMA_V1)
    con.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    con.execute("PRAGMA user_version = 1")
    con.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    con.execute("INSERT INTO runs(id, experiment, status, started, started_unix)"
                " VALUES ('old-run', 'latency', 'complete', '2026-01-01T00:00:00Z', 1767225600)")
    con.execute("INSERT INTO samples(run_id, seq, metric, value) VALUES ('old-run', 0, 'x', 1.5)")
    con.commit()
    con.close()
    with Store(path) as st:
        (run,) = st.runs()
        assert run["id"] == "old-run" and run["labels"] == {}
        assert st.run("latest")["id"] == "old-run"
        (s,) = st.samples("old-run")             # schema 4: one process, replica 0
        assert s["replica"] == 0 and s["value"] == 1.5
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    con.close()


# Schema 4 as memfx wrote it, frozen here: runs.machine_id held the
# machines-table row and machines.fingerprint_hash the key of the row (the
# stable "m-..." id since schema 3, a hash of the whole fingerprint before).
SCHEMA_4 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE machines (id INTEGER PRIMARY KEY, fingerprint_hash TEXT NOT NULL UNIQUE,
                       fingerprint TEXT NOT NULL);
CREATE TABLE surveys (id TEXT PRIMARY KEY, started TEXT NOT NULL, finished TEXT,
    status TEXT NOT NULL, preset TEXT, argv TEXT, note TEXT, pid INTEGER, host TEXT, labels TEXT);
CREATE TABLE runs (id TEXT PRIMARY KEY, survey_id TEXT, experiment TEXT NOT NULL,
    status TEXT NOT NULL, started TEXT NOT NULL, finished TEXT, preset TEXT, params TEXT,
    machine_id INTEGER, memfx_version TEXT, error TEXT, duration_s REAL, pid INTEGER, host TEXT,
    started_unix REAL, labels TEXT, machine_state TEXT);
CREATE INDEX runs_by_experiment ON runs(experiment);
CREATE INDEX runs_by_survey ON runs(survey_id);
CREATE INDEX runs_by_started ON runs(started);
CREATE TABLE samples (run_id TEXT NOT NULL, seq INTEGER NOT NULL, arm TEXT, point TEXT,
    metric TEXT, unit TEXT, value REAL, length INTEGER, ns REAL, ticks INTEGER, cycles_est REAL,
    counters TEXT, rejected INTEGER NOT NULL DEFAULT 0, reason TEXT,
    replica INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (run_id, seq));
CREATE TABLE artifacts (run_id TEXT NOT NULL, name TEXT NOT NULL, data TEXT,
    PRIMARY KEY (run_id, name));
"""


def legacy_machines():
    """Fingerprints of two machines: A seen twice before schema 3 (two rows
    keyed by the whole fingerprint), B once since (its m- row) and once
    before (a row of its own)."""
    a = {"cpu": {"vendor": "X", "family": 6, "model": 1, "model_name": "Old CPU",
                 "microcode": "0x1"}, "memory": {"total_bytes": 8 << 30, "available_bytes": 5 << 30},
         "caches": []}
    a_later = json.loads(json.dumps(a))
    a_later["memory"]["available_bytes"] = 1 << 30
    b = json.loads(json.dumps(a))
    b["cpu"]["microcode"] = "0x2"
    b_before = json.loads(json.dumps(b))
    b_before["memory"]["available_bytes"] = 2 << 30
    return a, a_later, b, b_before


def fill_schema_4(execute):
    """Rows as memfx wrote them up to schema 4, through execute(sql, params)
    ("?" placeholders): machines 1, 2 and 4 keyed by a whole-fingerprint
    hash, machine 3 by its m- id; the runs before schema 3 have no state."""
    from memfx.lab.machine import machine_id
    a, a_later, b, b_before = legacy_machines()

    def whole(fp):
        return hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()
    text = {k: json.dumps(fp, sort_keys=True) for k, fp in
            (("a", a), ("a_later", a_later), ("b", b), ("b_before", b_before))}
    for row, key, fp in ((1, whole(a), "a"), (2, whole(a_later), "a_later"),
                         (3, machine_id(b), "b"), (4, whole(b_before), "b_before")):
        execute("INSERT INTO machines(id, fingerprint_hash, fingerprint) VALUES (?, ?, ?)",
                (row, key, text[fp]))
    for run_id, row, day, state in (("r1", 1, 1, None), ("r2", 2, 2, None),
                                    ("r3", 3, 3, text["b"]), ("r4", 4, 4, None),
                                    ("r5", None, 5, None)):
        execute("INSERT INTO runs(id, experiment, status, started, started_unix, machine_id,"
                " machine_state) VALUES (?, 'latency', 'complete', ?, ?, ?, ?)",
                (run_id, f"2026-01-0{day}T00:00:00Z", 1767225600 + day * 86400, row, state))
    execute("INSERT INTO samples(run_id, seq, metric, value) VALUES ('r1', 0, 'x', 1.5)", ())


def check_schema_4_read(st):
    """What a store migrated from fill_schema_4 must read."""
    from memfx.lab.machine import machine_id
    a, a_later, b, b_before = legacy_machines()
    runs = {r["id"]: r for r in st.runs()}
    assert sorted(runs) == ["r1", "r2", "r3", "r4", "r5"]
    assert [runs[r]["machine_id"] for r in ("r1", "r2", "r3", "r4", "r5")] == \
        [machine_id(a)] * 2 + [machine_id(b)] * 2 + [None]
    assert runs["r1"]["machine_row"] == runs["r2"]["machine_row"] != runs["r3"]["machine_row"]
    assert runs["r3"]["machine_row"] == runs["r4"]["machine_row"] and runs["r5"]["machine_row"] is None
    # each run still reads the fingerprint it was measured with
    for run_id, fp in (("r1", a), ("r2", a_later), ("r3", b), ("r4", b_before)):
        assert st.run(run_id)["machine"] == fp, run_id
        assert st.run(run_id)["machine_id"] == runs[run_id]["machine_id"]
    assert st.run("r5")["machine"] is None
    machines = {m["machine_id"]: m for m in st.machines()}
    assert sorted(machines) == sorted([machine_id(a), machine_id(b)])
    assert machines[machine_id(a)]["n_runs"] == machines[machine_id(b)]["n_runs"] == 2
    # the machine shows its newest run's fingerprint, as before the merge
    assert machines[machine_id(a)]["fingerprint"] == a_later
    assert machines[machine_id(b)]["fingerprint"] == b_before
    assert [s["value"] for s in st.samples("r1")] == [1.5]


def test_a_schema_4_database_is_migrated_to_named_machine_columns(tmp_path):
    path = tmp_path / "v4.db"
    con = sqlite3.connect(path)
    con.executescript(SCHEMA_4)
    con.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    con.execute("PRAGMA user_version = 4")
    con.execute("INSERT INTO meta VALUES ('schema_version', '4')")
    fill_schema_4(con.execute)
    con.commit()
    con.close()
    with Store(path) as st:
        check_schema_4_read(st)
        # a new run on machine A joins its row
        a = legacy_machines()[0]
        new = st.begin_run("latency", {}, "quick", a)
        assert st.run(new)["machine_row"] == st.run("r1")["machine_row"]
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 8
    assert [r[1] for r in con.execute("PRAGMA table_info(machines)")] == \
        ["id", "machine_id", "fingerprint"]
    columns = [r[1] for r in con.execute("PRAGMA table_info(runs)")]
    assert "machine_row" in columns and "machine_id" not in columns
    assert all(k.startswith("m-") for (k,) in con.execute("SELECT machine_id FROM machines"))
    con.close()


def test_runs_name_their_machine_by_its_stable_id_and_their_row(db):
    from memfx.lab.machine import machine_id
    run_id = db.begin_run("latency", {}, "quick", MACHINE)
    run = db.run(run_id)
    assert run["machine_id"] == machine_id(MACHINE) and isinstance(run["machine_row"], int)
    assert db.runs()[0]["machine_id"] == machine_id(MACHINE)
    (m,) = db.machines()
    assert m["machine_id"] == machine_id(MACHINE) and m["row_ids"] == [run["machine_row"]]
    exported = db.export_run(run_id)["run"]
    assert "machine_id" not in exported and "machine_row" not in exported


def test_labels_are_stored_filtered_and_inherited_from_the_survey(db):
    a = db.begin_run("latency", {}, "quick", MACHINE, labels={"host": "a", "kernel": "6.1"})
    b = db.begin_run("latency", {}, "quick", MACHINE, labels={"host": "b"})
    sid = db.begin_survey("quick", [], labels={"host": "c", "batch": "7"})
    c = db.begin_run("fill", {}, "quick", MACHINE, survey_id=sid)
    assert db.run(a)["labels"] == {"host": "a", "kernel": "6.1"}
    assert db.survey(sid)["labels"] == {"host": "c", "batch": "7"}
    assert db.run(c)["labels"] == {"host": "c", "batch": "7"}
    assert [r["id"] for r in db.runs(labels={"host": "a"})] == [a]
    assert [r["id"] for r in db.runs(labels={"host": "b", "kernel": "6.1"})] == []
    assert {r["id"] for r in db.runs()} == {a, b, c}
    for bad in ({"a b": "x"}, {"k": "x\x1b[2J"}, {"": "x"}, {"k": 3}):
        with pytest.raises(StoreError, match="label"):
            db.begin_run("latency", {}, "quick", MACHINE, labels=bad)


def test_remove_runs_and_surveys_all_or_nothing(db):
    a = db.begin_run("latency", {}, "quick", MACHINE)
    db.add_samples(a, [sample(0), sample(1)])
    db.set_artifact(a, "x", 1)
    db.finish_run(a, "complete")
    sid = db.begin_survey("quick", [])
    b = db.begin_run("fill", {}, "quick", MACHINE, survey_id=sid)
    db.finish_run(b, "complete")
    keep = db.begin_run("copy", {}, "quick", MACHINE)
    db.finish_run(keep, "complete")
    with pytest.raises(StoreError, match="no run or survey 'nope'"):
        db.remove([a, "nope"])
    assert len(db.runs()) == 3                       # nothing removed
    removed = db.remove([a, sid])
    assert {(r["kind"], r["id"]) for r in removed} == {("run", a), ("run", b), ("survey", sid)}
    assert [r for r in removed if r["id"] == a][0]["n_samples"] == 2
    assert [r["id"] for r in db.runs()] == [keep] and db.surveys() == []
    con = sqlite3.connect(db.path)
    for table in ("samples", "artifacts"):
        assert con.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", (a,)).fetchone()[0] == 0
    con.close()


def test_a_live_running_run_is_not_removed(db):
    live = db.begin_run("latency", {}, "quick", MACHINE)      # this process: alive
    with pytest.raises(StoreError, match="still running"):
        db.remove([live])
    assert db.prune(0) == []
    assert [r["id"] for r in db.runs()] == [live]


def test_prune_removes_what_is_older_than_the_cutoff(db):
    old = db.begin_run("latency", {}, "quick", MACHINE)
    db.finish_run(old, "complete")
    new = db.begin_run("latency", {}, "quick", MACHINE)
    db.finish_run(new, "complete")
    con = sqlite3.connect(db.path)
    con.execute("UPDATE runs SET started_unix = started_unix - 40 * 86400,"
                " started = '2020-01-01T00:00:00Z' WHERE id = ?", (old,))
    con.commit()
    con.close()
    removed = db.prune(30 * 86400)
    assert [r["id"] for r in removed] == [old]
    assert [r["id"] for r in db.runs()] == [new]
    assert db.prune(30 * 86400) == []


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "results.db"
    os.mkfifo(fifo)
    with pytest.raises(StoreError, match="not a regular file"):
        Store(fifo)


def test_one_machine_row_for_runs_on_an_unchanged_machine_each_run_keeps_its_state(tmp_path):
    from memfx.lab.machine import machine_id
    fp = {"cpu": {"vendor": "X", "family": 6, "model": 1, "model_name": "Test CPU",
                  "microcode": "0x1"},
          "memory": {"total_bytes": 8 << 30, "available_bytes": 5 << 30}, "tsc": {"hz": 2.0e9},
          "caches": []}
    later = json.loads(json.dumps(fp))
    later["memory"]["available_bytes"] = 1 << 30
    later["tsc"]["hz"] = 2.0001e9
    with Store(tmp_path / "m.db") as st:
        a = st.begin_run("latency", {}, "quick", fp)
        b = st.begin_run("latency", {}, "quick", later)
        ra, rb = st.run(a), st.run(b)
        assert ra["machine_id"] == rb["machine_id"]
        # the volatile state is the run's own
        assert ra["machine"]["memory"]["available_bytes"] == 5 << 30
        assert rb["machine"]["memory"]["available_bytes"] == 1 << 30
        assert machine_id(ra["machine"]) == machine_id(rb["machine"])
        upgraded = json.loads(json.dumps(fp))
        upgraded["cpu"]["microcode"] = "0x2"
        c = st.begin_run("latency", {}, "quick", upgraded)
        assert st.run(c)["machine_id"] != ra["machine_id"]


def test_latest_survey_is_the_latest_complete_survey(tmp_path):
    with Store(tmp_path / "s.db") as st:
        with pytest.raises(StoreError, match="no complete survey"):
            st.survey("latest-survey")
        done = st.begin_survey("quick", ["survey"])
        st.finish_survey(done, "complete")
        time.sleep(1.1)                                   # a later start (ids carry seconds)
        st.begin_survey("quick", ["survey"])             # still running: not "latest-survey"
        assert st.survey("latest-survey")["id"] == done
        assert st.survey("latest")["id"] != done
        with pytest.raises(StoreError, match="names a survey"):
            st.run("latest-survey")
