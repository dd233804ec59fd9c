"""The PostgreSQL fleet store (memfx.store.postgres), push and the fleet views,
against a real throwaway server started by the `pgserver` package (no mock
database).  Where the server cannot start, every test here skips with the
reason."""

import copy
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import memfx
from conftest import _url  # the pg_server and pg_url fixtures are conftest's
from memfx.analysis.documents import run_document, survey_document
from memfx.model.errors import StoreError, StoreUnavailable
from memfx.store.store import SCHEMA_VERSION, Store, open_store

# the memfx under test (installed, in place or sanitized), for child processes
SRC = str(Path(memfx.__file__).resolve().parent.parent)
EXPORT = Path(__file__).parent / "data" / "export_latency_small.json"

# platformdirs (under pgserver) warns when XDG_RUNTIME_DIR is unset, as in CI
pytestmark = pytest.mark.filterwarnings("ignore:XDG_RUNTIME_DIR")


def _sql(url, statement, params=None):
    import psycopg
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else None


def _sqlite_with_export(path):
    doc = json.loads(EXPORT.read_text())
    with Store(path) as st:
        run_id = st.import_run(doc)
    return doc, run_id


MACHINE = {"cpu": {"vendor": "AuthenticAMD", "model_name": "Test CPU 9000", "family": 25,
                   "model": 17, "logical_cpus": 2},
           "caches": [{"level": 1, "type": "Data", "size_bytes": 32768}]}


def _samples(first, n, arm="seq"):
    return [{"arm": arm, "point": {"size_bytes": 4096 * (first + i + 1)}, "metric": "ns_per_load",
             "unit": "ns", "value": 1.0 + (first + i) / 8, "length": 1000, "ns": 1000.0 + first + i}
            for i in range(n)]


def cli(*args, env=None):
    e = dict(os.environ, PYTHONPATH=SRC)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "memfx", *args], capture_output=True,
                          text=True, timeout=120, env=e)


# ---- the store itself ------------------------------------------------------

@pytest.mark.measuring
def test_store_round_trip_keeps_everything(pg_url):
    with open_store(pg_url, "test") as st:
        assert st.backend == "postgresql"
        sid = st.begin_survey("quick", ["survey", "--quick"], labels={"fleet": "a"})
        rid = st.begin_run("latency", {"max_size": 4096}, "quick", MACHINE, survey_id=sid,
                           labels={"kernel": "6.1"})
        st.add_samples(rid, _samples(0, 3))
        st.add_samples(rid, _samples(3, 2))
        st.set_artifact(rid, "worker", {"pid": 1})
        st.set_artifact(rid, "worker", {"pid": 2})          # upsert
        st.finish_run(rid, "complete")
        st.finish_survey(sid, "complete")
        run = st.run(rid[:12])                               # a unique prefix
        assert run["id"] == rid and run["status"] == "complete" and run["n_samples"] == 5
        assert run["labels"] == {"fleet": "a", "kernel": "6.1"}
        assert run["machine"]["cpu"]["model_name"] == "Test CPU 9000"
        assert [s["seq"] for s in st.samples(rid)] == [0, 1, 2, 3, 4]
        assert st.samples(rid)[4]["value"] == 1.5
        assert st.artifacts(rid) == {"worker": {"pid": 2}}
        assert st.survey(sid)["labels"] == {"fleet": "a"}
        assert st.run("latest")["id"] == rid and st.run("latest:latency")["id"] == rid
        assert st.runs(labels={"kernel": "6.1"})[0]["id"] == rid
        assert [m["n_runs"] for m in st.machines()] == [1]
        removed = st.remove([sid])
        assert {r["kind"] for r in removed} == {"run", "survey"}
        assert st.runs() == [] and st.surveys() == []


@pytest.mark.measuring
def test_interrupted_run_keeps_its_samples(pg_url):
    with open_store(pg_url) as st:
        rid = st.begin_run("latency", {}, "quick", MACHINE)
        st.add_samples(rid, _samples(0, 4))
        st.finish_run(rid, "interrupted", error="interrupted by the user (Ctrl-C)")
    with open_store(pg_url) as st:
        run = st.run(rid)
        assert run["status"] == "interrupted" and run["n_samples"] == 4


@pytest.mark.measuring
def test_bad_input_changes_nothing(pg_url):
    doc = json.loads(EXPORT.read_text())
    with open_store(pg_url) as st:
        rid = st.import_run(doc)
        before = (len(st.runs()), len(st.samples(rid)))
        bad = copy.deepcopy(doc)
        bad["run"]["id"] = "other-run"
        bad["samples"][5]["seq"] = bad["samples"][4]["seq"]          # duplicate seq
        with pytest.raises(StoreError):
            st.import_run(bad)
        with pytest.raises(StoreError, match="already"):
            st.import_run(doc)
        with pytest.raises(StoreError, match="unknown sample field"):
            st.add_samples(rid, [{"metric": "x", "value": 1, "bogus": 1}])
        assert (len(st.runs()), len(st.samples(rid))) == before


@pytest.mark.measuring
def test_sqlite_postgres_round_trip_gives_identical_documents(pg_url, tmp_path):
    from memfx.analysis.fleet import push, push_selection
    sqlite_path = tmp_path / "local.db"
    doc, run_id = _sqlite_with_export(sqlite_path)
    with Store(sqlite_path) as local, open_store(pg_url) as shared:
        push(local, shared, push_selection(local, [run_id]))
        assert run_document(shared, run_id) == run_document(local, run_id)
        assert shared.samples(run_id) == local.samples(run_id)
        back = shared.export_run(run_id)
        assert back == local.export_run(run_id)
    with Store(tmp_path / "back.db") as again:          # and back into SQLite
        again.import_run(back)
        with Store(sqlite_path) as local:
            assert run_document(again, run_id) == run_document(local, run_id)


@pytest.mark.measuring
def test_survey_written_directly_and_pushed_give_the_same_answers(pg_url, tmp_path):
    """The same survey stored straight into PostgreSQL and pushed from
    SQLite: identical survey documents and fleet answers."""
    from memfx.analysis.fleet import fleet_document, push, push_selection
    doc = json.loads(EXPORT.read_text())
    with Store(tmp_path / "local.db") as local:
        sid = local.begin_survey("quick", ["survey"])
        rid = local.begin_run("latency", doc["run"]["params"], "quick", doc["machine"],
                              survey_id=sid)
        local.add_samples(rid, [{k: v for k, v in s.items() if k != "seq"} for s in doc["samples"]])
        local.finish_run(rid, "complete")
        local.finish_survey(sid, "complete")
        with open_store(pg_url) as shared:
            push(local, shared, push_selection(local, [sid]))
            assert survey_document(shared, sid) == survey_document(local, sid)
            assert fleet_document(shared)["questions"] == fleet_document(local)["questions"]


@pytest.mark.measuring
def test_push_is_idempotent_and_dedupes_machines(pg_url, tmp_path):
    sqlite_path = tmp_path / "local.db"
    doc, run_id = _sqlite_with_export(sqlite_path)
    with Store(sqlite_path) as local:              # a second run on the same machine
        second = copy.deepcopy(doc)
        second["run"]["id"] = run_id + "-b"
        local.import_run(second)
    first = cli("push", "--to", pg_url, "--db", str(sqlite_path), "--all")
    assert first.returncode == 0, first.stderr
    assert "pushed 2 of 2 runs" in first.stdout and " in " in first.stdout
    again = cli("push", "--to", pg_url, "--db", str(sqlite_path))
    assert again.returncode == 0, again.stderr
    assert "pushed 0 of 2 runs" in again.stdout and "2 already there" in again.stdout
    n_samples = len(doc["samples"])
    assert _sql(pg_url, "SELECT count(*) FROM runs")[0][0] == 2
    assert _sql(pg_url, "SELECT count(*) FROM samples")[0][0] == 2 * n_samples
    assert _sql(pg_url, "SELECT count(*) FROM machines")[0][0] == 1
    # a partial copy (as a dropped connection leaves) is replaced by the whole run
    _sql(pg_url, "DELETE FROM samples WHERE run_id = %s AND seq > 10", (run_id,))
    _sql(pg_url, "UPDATE runs SET status = 'running' WHERE id = %s", (run_id,))
    third = cli("push", "--to", pg_url, "--db", str(sqlite_path), run_id)
    assert third.returncode == 0 and "replaced a partial copy" in third.stdout
    with open_store(pg_url) as shared, Store(sqlite_path) as local:
        assert shared.samples(run_id) == local.samples(run_id)
        assert shared.run(run_id)["status"] == local.run(run_id)["status"]


@pytest.mark.measuring
def test_push_refuses_bad_arguments_before_connecting(tmp_path):
    _sqlite_with_export(tmp_path / "local.db")
    r = cli("push", "--db", str(tmp_path / "local.db"), "--to", "postgresql://x@/y?host=/nonexistent",
            "no-such-run")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no run" in r.stderr
    r = cli("push", "--db", str(tmp_path / "local.db"), "--to", str(tmp_path / "other.db"))
    assert r.returncode == 2 and "postgresql://" in r.stderr
    r = cli("push", "--db", str(tmp_path / "local.db"), env={"MEMFX_DB": ""})
    assert r.returncode == 2 and "--to" in r.stderr


# ---- many hosts --------------------------------------------------------------

_WRITER = """
import sys
from memfx.store.store import open_store
url, index, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
machine = {"cpu": {"model_name": "Writer CPU", "family": 25, "model": index}}
with open_store(url, "test") as st:
    rid = st.begin_run("latency", {}, "quick", machine, labels={"writer": str(index)})
    for b in range(batches):
        st.add_samples(rid, [{"arm": "w", "point": {"i": b * 5 + k}, "metric": "ns",
                              "value": float(index * 1000 + b * 5 + k), "length": 1, "ns": 1.0}
                             for k in range(5)])
    st.finish_run(rid, "complete")
print(rid)
"""


@pytest.mark.measuring
def test_eight_concurrent_writers_lose_and_duplicate_nothing(pg_url):
    """Eight processes start on an empty database at once (so they also race
    to create the schema: one does, the others wait) and stream samples."""
    batches = 20
    env = dict(os.environ, PYTHONPATH=SRC)
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, pg_url, str(i), str(batches)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i in range(8)]
    run_ids = {}
    for i, p in enumerate(procs):
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        run_ids[i] = out.strip()
    assert len(set(run_ids.values())) == 8
    with open_store(pg_url) as st:
        for i, rid in run_ids.items():
            samples = st.samples(rid)
            assert [s["seq"] for s in samples] == list(range(batches * 5))
            assert [s["value"] for s in samples] == [float(i * 1000 + j) for j in range(batches * 5)]
            assert st.run(rid)["labels"] == {"writer": str(i)}
        assert len(st.machines()) == 8
    assert _sql(pg_url, "SELECT count(*) FROM meta WHERE key = 'schema_version'")[0][0] == 1


@pytest.mark.measuring
def test_a_writer_killed_mid_run_costs_the_others_nothing(pg_url):
    import signal
    import time
    open_store(pg_url).close()
    env = dict(os.environ, PYTHONPATH=SRC)
    victim = subprocess.Popen([sys.executable, "-c", _WRITER, pg_url, "9", "100000"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 60
    while _sql(pg_url, "SELECT count(*) FROM samples")[0][0] < 50 and time.monotonic() < deadline:
        time.sleep(0.05)
    others = [subprocess.Popen([sys.executable, "-c", _WRITER, pg_url, str(i), "10"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
              for i in range(3)]
    time.sleep(0.2)
    victim.send_signal(signal.SIGKILL)           # in the middle of its writes
    victim.communicate(timeout=30)
    for p in others:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    rows = _sql(pg_url, "SELECT r.labels, r.status, count(s.seq), min(s.seq), max(s.seq)"
                        " FROM runs r LEFT JOIN samples s ON s.run_id = r.id"
                        " GROUP BY r.id, r.labels, r.status")
    by_writer = {json.loads(labels)["writer"]: (status, n, lo, hi)
                 for labels, status, n, lo, hi in rows}
    for i in "012":
        assert by_writer[i] == ("complete", 50, 0, 49)
    status, n, lo, hi = by_writer["9"]           # kept as it was: every committed batch whole
    assert status == "running" and n >= 50 and n % 5 == 0 and (lo, hi) == (0, n - 1)


@pytest.mark.measuring
def test_concurrent_migration_one_host_wins_the_others_wait(pg_url):
    open_store(pg_url).close()
    _sql(pg_url, "ALTER TABLE runs DROP COLUMN machine_state")
    _sql(pg_url, "ALTER TABLE runs DROP COLUMN labels")
    _sql(pg_url, "ALTER TABLE surveys DROP COLUMN labels")
    _sql(pg_url, "ALTER TABLE samples DROP COLUMN replica")
    _with_schema_4_machine_columns(pg_url)
    _sql(pg_url, "UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    env = dict(os.environ, PYTHONPATH=SRC)
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, pg_url, str(i), "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err            # none failed on a half-migrated schema
    assert _sql(pg_url, "SELECT value FROM meta WHERE key = 'schema_version'") == \
        [(str(SCHEMA_VERSION),)]
    assert _sql(pg_url, "SELECT count(*) FROM runs WHERE labels IS NOT NULL")[0][0] == 4


# ---- refusing what is not ours ----------------------------------------------

@pytest.mark.measuring
def test_foreign_database_is_refused_untouched(pg_url):
    _sql(pg_url, "CREATE TABLE customers (id int PRIMARY KEY, name text)")
    with pytest.raises(StoreError, match="another program"):
        open_store(pg_url)
    r = cli("runs", "--db", pg_url)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "another program" in r.stderr
    tables = _sql(pg_url, "SELECT table_name FROM information_schema.tables"
                          " WHERE table_schema = 'public'")
    assert tables == [("customers",)]


@pytest.mark.measuring
def test_a_newer_schema_is_refused(pg_url):
    open_store(pg_url).close()
    _sql(pg_url, "UPDATE meta SET value = %s WHERE key = 'schema_version'",
         (str(SCHEMA_VERSION + 1),))
    with pytest.raises(StoreError, match="newer memfx"):
        open_store(pg_url)


@pytest.mark.measuring
def test_an_older_schema_is_migrated(pg_url):
    open_store(pg_url).close()
    _sql(pg_url, "ALTER TABLE runs DROP COLUMN machine_state")
    _sql(pg_url, "ALTER TABLE runs DROP COLUMN labels")
    _sql(pg_url, "ALTER TABLE surveys DROP COLUMN labels")
    _sql(pg_url, "ALTER TABLE samples DROP COLUMN replica")
    _with_schema_4_machine_columns(pg_url)
    _sql(pg_url, "UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    with open_store(pg_url) as st:
        rid = st.begin_run("latency", {}, "quick", MACHINE, labels={"a": "b"})
        assert st.run(rid)["labels"] == {"a": "b"}
    assert _sql(pg_url, "SELECT value FROM meta WHERE key = 'schema_version'") == \
        [(str(SCHEMA_VERSION),)]


def _with_schema_4_machine_columns(url):
    """The machine columns named as up to schema 4."""
    _sql(url, "ALTER TABLE runs RENAME COLUMN machine_row TO machine_id")
    _sql(url, "ALTER TABLE machines RENAME COLUMN machine_id TO fingerprint_hash")


@pytest.mark.measuring
def test_a_schema_4_database_is_migrated_to_named_machine_columns(pg_url):
    from test_store import check_schema_4_read, fill_schema_4
    open_store(pg_url).close()
    _with_schema_4_machine_columns(pg_url)
    _sql(pg_url, "UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    fill_schema_4(lambda sql, params: _sql(pg_url, sql.replace("?", "%s"), params))
    with open_store(pg_url) as st:
        check_schema_4_read(st)
    assert _sql(pg_url, "SELECT value FROM meta WHERE key = 'schema_version'") == \
        [(str(SCHEMA_VERSION),)]
    assert _sql(pg_url, "SELECT count(*) FROM machines WHERE machine_id NOT LIKE 'm-%%'") == [(0,)]


@pytest.mark.measuring
def test_unreachable_server_is_one_line(tmp_path):
    pytest.importorskip("psycopg")
    r = cli("runs", "--db", f"postgresql://nobody@/memfx?host={tmp_path}")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "cannot connect" in r.stderr


@pytest.mark.measuring
def test_read_only_role_reads_but_cannot_write(pg_url, pg_server):
    doc = json.loads(EXPORT.read_text())
    with open_store(pg_url) as st:
        rid = st.import_run(doc)
    dbname = pg_url.split("/")[3].split("?")[0]
    role = "reader_" + uuid.uuid4().hex[:8]
    _sql(pg_url, f"CREATE ROLE {role} LOGIN")
    _sql(pg_url, f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    reader = _url(pg_server[1], dbname, user=role)
    with open_store(reader) as st:
        assert st.run(rid)["n_samples"] == len(doc["samples"])
        with pytest.raises(StoreError, match="may not write"):
            st.begin_run("latency", {}, "quick", MACHINE)
    r = cli("rm", rid, "--db", reader)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "read-only" in r.stderr
    assert _sql(pg_url, "SELECT count(*) FROM runs")[0][0] == 1


# ---- fleet views -------------------------------------------------------------

def _fleet(url):
    """Three machines: two hosts of one CPU model, one of another."""
    doc = json.loads(EXPORT.read_text())
    with open_store(url) as st:
        for i, model in enumerate(["Model A", "Model A", "Model B"]):
            d = copy.deepcopy(doc)
            d["machine"] = copy.deepcopy(doc["machine"] or {})
            d["machine"].setdefault("cpu", {})["model_name"] = model
            d["machine"]["memory"] = dict(d["machine"].get("memory") or {},
                                          total_bytes=(i + 1) * 2 ** 30)
            d["run"]["id"] = f"{doc['run']['id']}-{i}"
            d["run"]["host"] = f"host{i}"
            for s in d["samples"]:          # each host a little slower
                s["value"] *= 1 + i / 10
                s["ns"] *= 1 + i / 10
            st.import_run(d)


@pytest.mark.measuring
def test_fleet_views_read_an_sqlite_store_too(tmp_path):
    from memfx.analysis.fleet import fleet_document, machines_document
    path = str(tmp_path / "fleet.db")
    _fleet(path)
    with Store(path) as st:
        assert len(machines_document(st)["machines"]) == 3
        doc = fleet_document(st, "cpu-model")
    assert [c["key"] for c in doc["columns"]] == ["Model A", "Model B"]
    assert [c["hosts"] for c in doc["columns"]] == [["host0", "host1"], ["host2"]]
    r = cli("report", "--group-by", "cpu-model", "--db", path, "-o", str(tmp_path / "x.html"))
    assert r.returncode == 2 and "--fleet" in r.stderr


@pytest.mark.measuring
def test_machines_and_fleet_report(pg_url, tmp_path):
    _fleet(pg_url)
    r = cli("machines", "--json", "--db", pg_url)
    assert r.returncode == 0, r.stderr
    machines = json.loads(r.stdout)["machines"]
    assert sorted(m["hosts"][0] for m in machines) == ["host0", "host1", "host2"]
    assert sorted(m["cpu_model"] for m in machines) == ["Model A", "Model A", "Model B"]
    from memfx.analysis.fleet import fleet_document
    with open_store(pg_url) as st:
        by_machine = fleet_document(st)
        by_model = fleet_document(st, "cpu-model")
    assert len(by_machine["columns"]) == 3 and [c["key"] for c in by_model["columns"]] == \
        ["Model A", "Model B"]
    measured = [q for q in by_model["questions"] if q["cells"]["Model A"]["value"] is not None]
    assert measured
    for q in measured:
        a = q["cells"]["Model A"]
        per_host = [by_machine["questions"][by_machine["questions"].index(
            next(x for x in by_machine["questions"] if x["question"] == q["question"]))]
            ["cells"][m]["value"] for m in by_model["columns"][0]["machines"]]
        assert a["n_hosts"] == 2
        assert a["spread_low"] == min(per_host) and a["spread_high"] == max(per_host)
    out = tmp_path / "fleet.html"
    r = cli("report", "--fleet", "--group-by", "cpu-model", "-o", str(out), env={"MEMFX_DB": pg_url})
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    assert "Model A" in html and "Model B" in html and "median of 2 host(s)" in html
    r = cli("compare", "--group-by", "cpu-model", "Model A", "model b", "--json", "--db", pg_url)
    assert r.returncode in (0, 1), r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert rows and any(row["ratio"] is not None and row["ratio"] > 1 for row in rows)
    r = cli("compare", "--group-by", "cpu-model", "Model", "Model B", "--db", pg_url)
    assert r.returncode == 2 and "ambiguous" in r.stderr


# ---- a dropped connection ------------------------------------------------------

def _terminate_others(url):
    return _sql(url, "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                     " WHERE datname = current_database() AND pid <> pg_backend_pid()) t")[0][0]


@pytest.mark.measuring
def test_dropped_connection_finishes_the_run_locally_then_push(pg_url, tmp_path):
    from memfx.analysis.fleet import push, push_selection
    from memfx.store.postgres import PostgresStore
    told = []
    local_path = tmp_path / "fallback.db"
    st = PostgresStore(pg_url, fallback_path=local_path, notify=told.append)
    sid = st.begin_survey("quick", ["survey"], labels={"site": "x"})
    rid = st.begin_run("latency", {}, "quick", MACHINE, survey_id=sid)
    st.add_samples(rid, _samples(0, 5))
    st.set_artifact(rid, "worker", {"pid": 7})
    assert _terminate_others(pg_url) == 1           # the server drops our connection
    st.add_samples(rid, _samples(5, 5))              # measured after the drop
    st.finish_run(rid, "complete")
    st.finish_survey(sid, "complete")
    assert len(told) == 1 and "memfx push --to" in told[0] and str(local_path) in told[0]
    # this process reads on from the local file
    assert [s["seq"] for s in st.samples(rid)] == list(range(10))
    st.close()
    with Store(local_path) as local:
        assert local.run(rid)["status"] == "complete"
        assert local.samples(rid) == [dict(s, seq=i) for i, s in enumerate(local.samples(rid))]
        assert [s["value"] for s in local.samples(rid)] == [s["value"] for s in _samples(0, 10)]
        assert local.artifacts(rid) == {"worker": {"pid": 7}}
        assert local.survey(sid)["labels"] == {"site": "x"} and local.survey(sid)["status"] == \
            "complete"
        with open_store(pg_url) as shared:
            assert shared.run(rid)["n_samples"] == 5        # what was committed before the drop
            summary = push(local, shared, push_selection(local, []))
            assert summary["counts"]["replaced"] == 1
            assert shared.samples(rid) == local.samples(rid)
            assert shared.run(rid)["status"] == "complete"
            assert shared.survey(sid)["status"] == "complete"


@pytest.mark.measuring
def test_dropped_connection_with_nothing_in_flight_is_an_error(pg_url):
    with open_store(pg_url) as st:
        _terminate_others(pg_url)
        with pytest.raises(StoreUnavailable, match="lost the connection"):
            st.runs()


@pytest.mark.measuring
def test_memfx_run_survives_the_server_dropping_it(pg_url, tmp_path):
    """A real `memfx run` whose connection is terminated mid-run: it finishes
    into the local SQLite store, says so on one line, and `memfx push` makes
    the shared copy whole."""
    import time
    env = dict(os.environ, PYTHONPATH=SRC, XDG_DATA_HOME=str(tmp_path / "xdg"))
    proc = subprocess.Popen([sys.executable, "-m", "memfx", "run", "store-forward", "--quick",
                             "-q", "--json", "--db", pg_url], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if _sql(pg_url, "SELECT count(*) FROM samples")[0][0] > 0:
                break
        except Exception:           # the schema is not there yet
            pass
        time.sleep(0.05)
    running = _sql(pg_url, "SELECT status FROM runs") == [("running",)]
    if running:
        _terminate_others(pg_url)
    out, err = proc.communicate(timeout=300)
    if not running:
        pytest.skip("the run ended before its connection could be dropped")
    assert proc.returncode == 0, err
    lines = [line for line in err.splitlines() if "memfx push --to" in line]
    assert len(lines) == 1 and "lost the connection" in lines[0]
    run_id = json.loads(out)["run_id"]
    local_path = tmp_path / "xdg" / "memfx" / "results.db"
    with Store(local_path) as local:
        assert local.run(run_id)["status"] == "complete"
        n = local.run(run_id)["n_samples"]
    assert _sql(pg_url, "SELECT count(*) FROM samples")[0][0] < n
    r = cli("push", "--to", pg_url, "-q", env={"XDG_DATA_HOME": str(tmp_path / "xdg")})
    assert r.returncode == 0, r.stderr
    assert _sql(pg_url, "SELECT count(*), min(seq), max(seq) FROM samples") == [(n, 0, n - 1)]
    assert _sql(pg_url, "SELECT status FROM runs") == [("complete",)]


# ---- the SQLite store's own tests, on PostgreSQL -------------------------------

# The tests of test_store.py that use the store's interface only (no file,
# no sqlite3 connection of their own): the same guarantees, checked the same way.
SHARED_STORE_TESTS = (
    "test_round_trip_in_batches", "test_missing_optional_sample_keys_get_defaults",
    "test_bad_samples_are_refused_whole", "test_run_ids_unique_within_one_second",
    "test_runs_filtering_and_order", "test_prefix_latest_unknown_ambiguous",
    "test_latest_on_empty_db", "test_surveys", "test_artifacts_upsert",
    "test_labels_are_stored_filtered_and_inherited_from_the_survey",
    "test_a_live_running_run_is_not_removed",
)


@pytest.mark.measuring
@pytest.mark.parametrize("name", SHARED_STORE_TESTS)
def test_store_tests_pass_on_postgresql(name, pg_url):
    import test_store as sqlite_store_tests
    with open_store(pg_url, memfx_version="9.9") as st:
        getattr(sqlite_store_tests, name)(st)


def test_runs_whose_parts_have_their_own_point_keys_can_be_pushed(tmp_path):
    """A quick survey's prefetch, sharing and assoc runs have points whose
    keys differ within an arm (a part of its own, an extra key for one
    target): export/import and push take them; a key whose type changes
    within an arm is still refused."""
    doc = json.loads(EXPORT.read_text())
    doc["samples"][0]["point"]["region_bytes"] = 1 << 27          # an extra key on one point
    doc["samples"][1]["point"] = {"part": "other", "lines": 4}     # a part of its own
    with Store(tmp_path / "a.db") as st:
        run_id = st.import_run(doc)
        assert st.samples(run_id)[0]["point"]["region_bytes"] == 1 << 27
    bad = copy.deepcopy(doc)
    bad["run"]["id"] += "-bad"
    bad["samples"][4]["point"]["region_bytes"] = "128M"      # the arm of samples[0]
    with Store(tmp_path / "a.db") as st, pytest.raises(StoreError, match="region_bytes"):
        st.import_run(bad)


@pytest.mark.measuring
def test_passwords_never_reach_messages(tmp_path):
    from memfx.store.postgres import redact
    assert redact("postgresql://u:s3cret@db:5432/memfx?sslmode=require") == \
        "postgresql://u:***@db:5432/memfx?sslmode=require"
    assert "s3cret" not in redact("postgresql://u@db/memfx?password=s3cret&host=/x")
    pytest.importorskip("psycopg")
    r = cli("runs", "--db", f"postgresql://u:s3cret@/memfx?host={tmp_path}")
    assert r.returncode == 2 and "s3cret" not in r.stderr and "***" in r.stderr
