"""Issue 41, the store and secrets items of the adversarial audit: one
store-opening path for the command line and the API, one redaction rule for
every password form libpq takes (messages and stored command lines), one-line
messages, reading a database on read-only media, a role without SELECT, and
tune records that export, import and push."""
import copy
import json
import os
import sqlite3
import subprocess
import uuid
from pathlib import Path

import pytest

import memfx
from conftest import _url, run_cli
from memfx.model.errors import StoreError
from memfx.store.sql import mask_secrets, redact_argv, redact_commands
from memfx.store.store import SCHEMA_VERSION, Store, open_store
from test_postgres import _sql

DATA = Path(__file__).parent / "data" / "export_latency_small.json"
PW = "S3cretPW"
MACHINE = {"cpu": {"vendor": "AuthenticAMD", "model_name": "Test CPU", "family": 25,
                   "model": 17, "logical_cpus": 2}}

# pgserver warns when XDG_RUNTIME_DIR is unset
pytestmark = pytest.mark.filterwarnings("ignore:XDG_RUNTIME_DIR")


def raw_doc():
    return json.loads(DATA.read_text())


def one_line_exit_2(p, fragment=""):
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], p.stderr
    assert "Traceback" not in p.stderr


# ---- 1. the API opens through the command line's checks ------------------------

@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_the_api_refuses_sqlite_side_files_and_writes_nothing(tmp_path, suffix):
    db = str(tmp_path / f"x.db{suffix}")
    for call in (lambda: memfx.runs(db=db), lambda: memfx.load("latest", db=db),
                 lambda: open_store(db), lambda: Store(db), lambda: open_store(Path(db))):
        with pytest.raises(StoreError, match="SQLite's own file"):
            call()
    assert os.listdir(tmp_path) == []


def test_a_run_through_the_api_no_longer_lands_in_a_wal_file(tmp_path):
    """The loss the audit showed: a store at x.db-wal, then x.db opened."""
    with pytest.raises(StoreError):
        with Store(tmp_path / "x.db-wal") as st:
            st.begin_run("latency", {}, "quick", MACHINE)
    Store(tmp_path / "x.db").close()
    assert not (tmp_path / "x.db-wal").exists() or (tmp_path / "x.db-wal").stat().st_size == 0


def test_the_api_refuses_what_the_command_line_refuses(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for db, fragment in (("", "empty path"), ("   ", "empty path"),
                         (str(tmp_path), "is a directory"), (str(fifo), "not a regular file")):
        with pytest.raises(StoreError, match=fragment):
            memfx.runs(db=db)


# ---- 2. a URL look-alike creates nothing -----------------------------------------

@pytest.mark.parametrize("target", [f"postgresq://u:{PW}@h/x", f"mysql://u:{PW}@h/x",
                                    f"postgresql:/u:{PW}@h/x"])
def test_a_url_look_alike_is_refused_before_any_directory(tmp_path, monkeypatch, target):
    monkeypatch.chdir(tmp_path)
    for db in (target, Path(target)):
        with pytest.raises(StoreError) as e:
            memfx.load("latest", db=db)
        assert PW not in str(e.value) and "***" in str(e.value)
        assert "\n" not in str(e.value)
    assert os.listdir(tmp_path) == []


# ---- 3 and 4. one redaction rule ----------------------------------------------------

SECRET_FORMS = [
    f"postgresql://writer:{PW}@db.example/fleet",
    f"postgres://writer:{PW}@db.example:5432/fleet?sslmode=require",
    f"postgresql://u@127.0.0.1:1/db?sslpassword={PW}",
    f"postgresql://u@h/db?Password={PW}",
    f"postgresql://u@h/db?sslmode=require&PASSWORD={PW}",
    f"postgresql://u@h/db?ssl%70assword={PW}",
    f"postgresql://u@h/db;password={PW}",
    f"postgresql://u@h/db#password={PW}",
    f"host=h dbname=x password={PW}",
    f"host=h password = '{PW} with spaces' dbname=x",
    f"host=h sslpassword={PW}",
    f"--db=postgresql://writer:{PW}@h/fleet",
    f"MEMFX_DB=postgresql://writer:{PW}@h/fleet",
    f"writer:{PW}@h:5432/fleet",
]


@pytest.mark.parametrize("form", SECRET_FORMS)
def test_one_rule_masks_every_password_form(form):
    for masked in (mask_secrets(form), mask_secrets(f"memfx runs --db {form} --json"),
                   redact_argv(["runs", "--db", form])[2]):
        assert PW not in masked and "***" in masked
    assert redact_commands({"command": f"memfx runs --db '{form}'"})["command"].count(PW) == 0


def test_the_rule_leaves_what_is_no_secret():
    for text in ("/plain/path.db", "dir/r@home.db", "./x:y.db", "postgresql://u@h/db?sslmode=require",
                 "postgresql://postgres:@/db?host=/tmp", "survey --quick --no-advise"):
        assert mask_secrets(text) == text


ARGV = ["survey", "--quick", "--db", f"postgresql://writer:{PW}@db.example/fleet"]


def _survey_with_a_run(st, argv=ARGV):
    """A survey begun with `argv`, holding the sample export's run, imported
    with the survey as an older memfx exported it (password and all)."""
    sid = st.begin_survey("quick", argv)
    st.finish_survey(sid, "complete")
    survey = {k: v for k, v in st.survey(sid).items() if k != "runs"}
    doc = raw_doc()
    doc["run"]["survey_id"] = sid
    doc["survey"] = dict(survey, argv=list(argv))
    st.import_run(doc)
    return sid, doc["run"]["id"]


def test_a_survey_command_line_is_stored_printed_and_exported_without_its_password(tmp_path):
    from memfx.report.report import write_report
    db = tmp_path / "r.db"
    with Store(db) as st:
        sid, run_id = _survey_with_a_run(st)
        assert st.survey(sid)["argv"] == ["survey", "--quick", "--db",
                                          "postgresql://writer:***@db.example/fleet"]
        raw = json.dumps(st.export_run(run_id))
        out = write_report(st, [sid], tmp_path / "r.html")
    assert PW not in raw and "writer:***@" in raw
    html = Path(out).read_text()
    assert PW not in html and "writer:***@db.example" in html
    con = sqlite3.connect(db)
    assert PW not in json.dumps(con.execute("SELECT argv FROM surveys").fetchall())
    con.close()


def test_an_imported_survey_and_a_tune_command_are_stored_redacted(tmp_path):
    doc = raw_doc()
    doc["survey"] = {"id": "s-20260101-000000-abcd", "started": "2026-01-01T00:00:00Z",
                     "finished": None, "status": "complete", "preset": "quick",
                     "argv": ["survey", f"--db=postgres://w:{PW}@h/f"], "note": None,
                     "pid": None, "host": "h", "labels": {}}
    doc["run"]["survey_id"] = doc["survey"]["id"]
    with Store(tmp_path / "r.db") as st:
        st.import_run(doc)
        run_id = st.begin_run("tune", {"command": f"memfx runs --db postgresql://w:{PW}@h/f",
                                       "rounds": 3}, None, MACHINE)
        st.set_artifact(run_id, "tune", {"command": ["memfx", "runs", "--db",
                                                     f"postgresql://w:{PW}@h/f"]})
        assert PW not in json.dumps(st.survey(doc["survey"]["id"]))
        assert PW not in json.dumps(st.export_run(run_id))
    con = sqlite3.connect(tmp_path / "r.db")
    stored = con.execute("SELECT argv FROM surveys").fetchall() + \
        con.execute("SELECT params FROM runs").fetchall() + \
        con.execute("SELECT data FROM artifacts").fetchall()
    con.close()
    assert PW not in json.dumps(stored) and "w:***@h" in json.dumps(stored)


def _write_unredacted_rows(conn, sid, run_id):
    """What a schema-5 memfx stored: command lines as typed."""
    conn.execute("UPDATE surveys SET argv = ? WHERE id = ?", (json.dumps(ARGV), sid))
    conn.execute("UPDATE runs SET params = ? WHERE id = ?",
                 (json.dumps({"command": f"prog --db postgresql://w:{PW}@h/f"}), run_id))
    conn.execute("INSERT INTO artifacts(run_id, name, data) VALUES (?, 'tune', ?)",
                 (run_id, json.dumps({"command": ["prog", f"password={PW}"]})))


def test_a_schema_5_file_is_redacted_by_its_migration(tmp_path):
    db = tmp_path / "old.db"
    with Store(db) as st:
        sid, run_id = _survey_with_a_run(st, ["survey", "--quick"])
    con = sqlite3.connect(db, isolation_level=None)
    _write_unredacted_rows(con, sid, run_id)
    con.execute("PRAGMA user_version = 5")
    con.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    con.close()
    with Store(db) as st:
        assert st.survey(sid)["argv"][-1] == "postgresql://writer:***@db.example/fleet"
        assert st.run(run_id)["n_samples"] > 0
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 8
    rows = json.dumps(con.execute("SELECT argv FROM surveys").fetchall()
                      + con.execute("SELECT params FROM runs").fetchall()
                      + con.execute("SELECT data FROM artifacts").fetchall())
    con.close()
    assert PW not in rows and rows.count("***") == 3


@pytest.mark.measuring
def test_a_schema_5_postgresql_store_is_redacted_and_a_reader_reads_it_first(pg_url, pg_server):
    with open_store(pg_url) as st:
        sid, run_id = _survey_with_a_run(st, ["survey", "--quick"])
    import psycopg
    with psycopg.connect(pg_url, autocommit=True) as conn:
        from memfx.store.postgres import _Connection
        _write_unredacted_rows(_Connection(conn), sid, run_id)
        conn.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    # a read-only role cannot migrate; it reads the store, redacted on reading
    role = "reader_" + uuid.uuid4().hex[:8]
    _sql(pg_url, f"CREATE ROLE {role} LOGIN")
    _sql(pg_url, f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    reader = _url(pg_server[1], pg_url.split("/")[3].split("?")[0], user=role)
    with open_store(reader) as st:
        assert PW not in json.dumps([st.survey(sid), st.export_run(run_id)])
    assert _sql(pg_url, "SELECT value FROM meta WHERE key = 'schema_version'") == [("5",)]
    with open_store(pg_url) as st:            # a writer migrates it
        assert st.survey(sid)["argv"][-1] == "postgresql://writer:***@db.example/fleet"
    assert _sql(pg_url, "SELECT value FROM meta WHERE key = 'schema_version'") == \
        [(str(SCHEMA_VERSION),)]
    stored = json.dumps(_sql(pg_url, "SELECT argv FROM surveys") + _sql(pg_url, "SELECT params FROM runs")
                        + _sql(pg_url, "SELECT data FROM artifacts"))
    assert PW not in stored and stored.count("***") == 3


@pytest.mark.measuring
@pytest.mark.parametrize("url", [f"postgresql://u@127.0.0.1:1/db?sslpassword={PW}",
                                 f"postgresql://u@127.0.0.1:1/db?Password={PW}",
                                 f"postgresql://u@127.0.0.1:1/db?connect_timeout=2;password={PW}",
                                 f"postgresql://u@127.0.0.1:1/db?connect_timeout=2#password={PW}"])
def test_no_password_form_is_echoed_by_a_failed_connection(url):
    pytest.importorskip("psycopg")
    p = run_cli("runs", db=url, timeout=60)
    one_line_exit_2(p)
    assert PW not in p.stderr + p.stdout and "***" in p.stderr


# ---- 5. one line, whatever the name holds ------------------------------------------

def test_a_newline_in_a_path_is_shown_escaped(tmp_path):
    odd = tmp_path / "a\nb"
    odd.mkdir()
    for target in (odd, str(odd) + "/r.db-wal", f"postgresq://u:{PW}@h/x\ny"):
        with pytest.raises(StoreError) as e:
            open_store(target)
        assert "\n" not in str(e.value) and "\\n" in str(e.value), str(e.value)


@pytest.mark.measuring
def test_a_newline_in_a_db_url_or_path_gives_one_line(tmp_path):
    pytest.importorskip("psycopg")
    odd = tmp_path / "a\nb"
    odd.mkdir()
    for db in (str(odd), "postgresql://u@127.0.0.1:1/db?connect_timeout=2\nX"):
        p = run_cli("runs", db=db, timeout=60)
        one_line_exit_2(p, "\\n")


# ---- 6. reading needs no write ---------------------------------------------------

def _unmount(path):
    import gc
    gc.collect()                  # the API's stores are closed when collected
    if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture
def read_only_copy(tmp_path):
    """A directory holding a results database, bind-mounted read-only (root
    ignores permission bits, not a read-only mount); skips where mounting
    is not allowed."""
    src, ro = tmp_path / "src", tmp_path / "ro"
    src.mkdir()
    ro.mkdir()
    with Store(src / "r.db") as st:
        run_id = st.import_run(raw_doc())
    p = subprocess.run(["mount", "--bind", "-o", "ro", str(src), str(ro)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot bind-mount read-only here: {p.stderr.strip()}")
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("the read-only mount is writable")
        yield src, ro, run_id
    finally:
        _unmount(ro)


@pytest.mark.measuring
def test_a_database_on_read_only_media_is_read(read_only_copy):
    src, ro, run_id = read_only_copy
    db = str(ro / "r.db")
    with pytest.raises(StoreError, match="not writable"):
        open_store(db)                       # a writer is refused as before
    with open_store(db, for_reading=True) as st:
        assert st.run(run_id)["n_samples"] == len(raw_doc()["samples"])
        with pytest.raises(StoreError, match="read-only"):
            st.begin_run("latency", {}, "quick", MACHINE)
    assert memfx.load(run_id, db=db)["run_id"] == run_id
    for args in (["runs"], ["show", run_id], ["export", run_id, "--format", "raw"],
                 ["machines"]):
        p = run_cli(*args, db=db)
        assert p.returncode == 0, p.stderr
    one_line_exit_2(run_cli("rm", run_id, db=db), "not writable")
    assert sorted(os.listdir(ro)) == ["r.db"]


@pytest.mark.measuring
def test_an_older_schema_on_read_only_media_is_read_untouched(tmp_path):
    src, ro = tmp_path / "src", tmp_path / "ro"
    src.mkdir()
    ro.mkdir()
    with Store(src / "r.db") as st:
        run_id = st.import_run(raw_doc())
    con = sqlite3.connect(src / "r.db", isolation_level=None)
    con.execute("PRAGMA user_version = 5")
    con.close()
    if subprocess.run(["mount", "--bind", "-o", "ro", str(src), str(ro)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount read-only here")
    try:
        with open_store(ro / "r.db", for_reading=True) as st:
            assert st.run(run_id)["id"] == run_id
    finally:
        _unmount(ro)
    con = sqlite3.connect(src / "r.db")
    assert con.execute("PRAGMA user_version").fetchone()[0] == 5
    con.close()


def test_a_refused_write_makes_a_reader_fall_back_to_read_only(tmp_path, monkeypatch):
    """The fallback follows SQLite's own refusal (here a real one: a write
    through a read-only connection), not a permission check root passes."""
    from memfx.store import sqlite as store_sqlite
    from memfx.store.files import file_uri, open_error
    db = tmp_path / "r.db"
    with Store(db) as st:
        run_id = st.import_run(raw_doc())

    def refused(self):
        conn = sqlite3.connect(file_uri(self.path, "mode=ro"), uri=True)
        try:
            conn.execute("CREATE TABLE x (y)")
        except sqlite3.Error as e:
            raise open_error(f"cannot use {self.path}", e) from None
        finally:
            conn.close()
    monkeypatch.setattr(store_sqlite.Store, "_open_read_write", refused)
    with pytest.raises(StoreError, match="readonly"):
        Store(db)
    with Store(db, for_reading=True) as st:
        assert st.run(run_id)["id"] == run_id
        with pytest.raises(StoreError, match="read-only"):
            st.remove([run_id])
    assert memfx.runs(db=str(db))[0]["id"] == run_id


# ---- 7. a role without SELECT ------------------------------------------------------

@pytest.mark.measuring
def test_a_role_without_select_is_told_so(pg_url, pg_server):
    with open_store(pg_url) as st:
        st.import_run(raw_doc())
    dbname = pg_url.split("/")[3].split("?")[0]
    role = "nosel_" + uuid.uuid4().hex[:8]
    _sql(pg_url, f"CREATE ROLE {role} LOGIN")
    url = _url(pg_server[1], dbname, user=role)
    with pytest.raises(StoreError) as e:
        open_store(url)
    assert f"the role {role} lacks SELECT on memfx's tables" in str(e.value)
    assert "GRANT SELECT" in str(e.value) and "another program" not in str(e.value)
    one_line_exit_2(run_cli("runs", db=url), "lacks SELECT")
    # SELECT on meta only: the first read of a run says the same
    _sql(pg_url, f"GRANT SELECT ON meta TO {role}")
    with open_store(url) as st, pytest.raises(StoreError, match="lacks SELECT"):
        st.runs()


# ---- 8. tune records travel like any run -----------------------------------------

def _tune_record(st):
    """A tune record as memfx.advice.tune writes one: a rejected profiling run and
    warm-up, measured rounds without a length, its "tune" artifact."""
    run_id = st.begin_run("tune", {"command": "/bin/true", "rounds": 2, "timeout_s": 60.0,
                                   "cpu": None, "show_output": False}, None, MACHINE)
    samples = [{"arm": "profile", "point": {}, "metric": "wall_ns", "unit": "ns",
                "value": 2e6, "ns": 2e6, "counters": {}, "rejected": True,
                "reason": "profiling run (under the LD_PRELOAD interposer): not compared"},
               {"arm": "baseline", "point": {}, "metric": "wall_ns", "unit": "ns",
                "value": 1e6, "ns": 1e6, "counters": {}, "rejected": True, "reason": "warm-up run"}]
    samples += [{"arm": arm, "point": {}, "metric": "wall_ns", "unit": "ns", "value": 1e6 + r,
                 "ns": 1e6 + r, "counters": {"round": r}, "rejected": False, "reason": None}
                for r in range(2) for arm in ("baseline", "c1")]
    st.add_samples(run_id, samples)
    st.set_artifact(run_id, "tune", {
        "run_id": run_id, "kind": "memfx-tune", "command": ["/bin/true"],
        "sources": {"copy": None, "latency": None}, "glibc": {"version": "2.36"},
        "noise_band": 0.02, "profile": None, "candidates": [], "dropped": [],
        "recommendation": None})
    st.finish_run(run_id, "complete")
    return run_id


def test_a_tune_record_exports_and_imports(tmp_path):
    with Store(tmp_path / "a.db") as st:
        doc = st.export_run(_tune_record(st))
    with Store(tmp_path / "b.db") as st:
        run_id = st.import_run(copy.deepcopy(doc))
        assert st.run(run_id)["n_samples"] == 6
    # the rule stands for the experiments whose samples have a length
    bad = raw_doc()
    next(s for s in bad["samples"] if not s.get("rejected"))["length"] = None
    with Store(tmp_path / "c.db") as st, pytest.raises(StoreError, match="length"):
        st.import_run(bad)


@pytest.mark.measuring
def test_a_tune_record_is_pushed(pg_url, tmp_path):
    from memfx.analysis.fleet import push
    with Store(tmp_path / "a.db") as src:
        run_id = _tune_record(src)
        with open_store(pg_url) as target:
            summary = push(src, target, [run_id])
            assert summary["counts"]["refused"] == 0 and summary["counts"]["added"] == 1
            assert target.run(run_id)["n_samples"] == 6
