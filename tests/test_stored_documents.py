"""A run's result document is analysed once and stored (the analyses table,
schema 7) with the version of the analysis that made it; readers take the
stored one and analyse again only when none is current (issue 42, item 2).

The runs are tests/data's small latency export, imported: no measuring."""
import json
import sqlite3
from pathlib import Path

import pytest

from memfx.analysis import documents
from memfx.cli.main import main
from memfx.model.errors import StoreError
from memfx.store import sql as store_sql
from memfx.store.store import Store

DATA = Path(__file__).parent / "data"


def export():
    return json.loads((DATA / "export_latency_small.json").read_text())


@pytest.fixture(autouse=True)
def _no_reanalyse():
    documents.reanalyse(False)
    yield
    documents.reanalyse(False)


@pytest.fixture
def stored(tmp_path):
    db = tmp_path / "r.db"
    with Store(db) as st:
        run_id = st.import_run(export())
    return db, run_id


@pytest.fixture
def analyses(monkeypatch):
    """The runs the analysis was asked for, in order (the real analysis)."""
    made = []
    real = documents.document

    def counting(run, samples, *args, **kwargs):
        made.append(run["id"])
        return real(run, samples, *args, **kwargs)
    monkeypatch.setattr(documents, "document", counting)
    return made


def rows(db):
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT run_id, analysis FROM analyses").fetchall()
    finally:
        con.close()


def same(a, b):
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def test_a_runs_document_is_stored_once_and_read_back_equal(stored, analyses):
    from memfx.analysis.answer_cache import analysis_key
    db, run_id = stored
    with Store(db) as st:
        first = documents.run_document(st, run_id, include_values=True)
        assert rows(db) == [(run_id, analysis_key())]
        again = documents.run_document(st, run_id, include_values=True)
        plain = documents.run_document(st, run_id)
    assert analyses == [run_id]                 # analysed once, read twice
    assert same(first, again)
    assert any("values" in p for p in again["points"])
    assert not any("values" in p for p in plain["points"])


def test_a_changed_analysis_version_reanalyses_and_replaces(stored, analyses, monkeypatch):
    from memfx.analysis import answer_cache
    db, run_id = stored
    with Store(db) as st:
        documents.run_document(st, run_id)
        monkeypatch.setattr(answer_cache, "analysis_key", lambda: "another-analysis")
        documents.run_document(st, run_id)
        documents.run_document(st, run_id)
    assert analyses == [run_id, run_id]
    assert rows(db) == [(run_id, "another-analysis")]     # the older one is gone


def test_reanalyse_flag_analyses_again_once_and_stores(stored, analyses, capsys):
    db, run_id = stored
    assert main(["show", run_id, "--db", str(db), "--json"]) == 0
    assert main(["show", run_id, "--db", str(db), "--json"]) == 0
    assert analyses == [run_id]
    assert main(["show", run_id, "--db", str(db), "--json", "--reanalyse"]) == 0
    assert analyses == [run_id, run_id]
    assert main(["export", run_id, "--db", str(db), "--reanalyse"]) == 0
    assert main(["export", run_id, "--db", str(db)]) == 0
    assert analyses == [run_id, run_id, run_id]
    assert len(rows(db)) == 1
    capsys.readouterr()


def test_a_running_run_is_never_served_stale(tmp_path, analyses):
    from memfx.analysis.answer_cache import analysis_key
    raw = export()
    with Store(tmp_path / "r.db") as st:
        run_id = st.begin_run("latency", raw["run"]["params"], "quick", raw["machine"])
        st.add_samples(run_id, [{k: v for k, v in s.items() if k != "seq"}
                                for s in raw["samples"][:10]])
        documents.run_document(st, run_id)
        assert rows(tmp_path / "r.db") == []            # a running run's is not kept
        run = st.run(run_id)
        st.save_analysis(run_id, analysis_key(), {"run_id": run_id, "status": run["status"],
                                                  "finished": None, "answers": []})
        assert documents.stored_document(st, run) is None
        documents.run_document(st, run_id)
        assert analyses == [run_id, run_id]
        st.finish_run(run_id, "complete")
        documents.run_document(st, run_id)              # finished since: analysed again
        assert analyses == [run_id] * 3
        assert [r[0] for r in rows(tmp_path / "r.db")] == [run_id]


def test_rm_removes_a_runs_analyses(stored):
    db, run_id = stored
    with Store(db) as st:
        documents.run_document(st, run_id)
        assert len(rows(db)) == 1
        st.remove([run_id])
    assert rows(db) == []


def test_a_schema_6_store_migrates_and_its_runs_read(stored, analyses):
    db, run_id = stored
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("DROP TABLE analyses")
    con.execute("PRAGMA user_version = 6")
    con.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    con.close()
    with Store(db) as st:
        assert documents.run_document(st, run_id)["run_id"] == run_id
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA user_version").fetchone()[0] == store_sql.SCHEMA_VERSION == 8
    con.close()
    assert len(rows(db)) == 1


def test_export_import_and_push_do_not_carry_analyses(stored, tmp_path):
    db, run_id = stored
    with Store(db) as st:
        documents.run_document(st, run_id)
        raw = st.export_run(run_id)
    assert "analyses" not in raw and "analysis" not in json.dumps(sorted(raw))
    with Store(tmp_path / "imported.db") as other:
        other.import_run(raw)
    with Store(tmp_path / "pushed.db") as other:
        assert other.push_run(raw) == "added"
    assert rows(tmp_path / "imported.db") == [] and rows(tmp_path / "pushed.db") == []


def test_a_read_only_store_still_shows_and_stores_nothing(stored, analyses, monkeypatch, capsys):
    """As test_audit_store's fallback: SQLite's own refusal of a write."""
    from memfx.store import sqlite as store_sqlite
    from memfx.store.files import file_uri, open_error
    db, run_id = stored

    def refused(self):
        conn = sqlite3.connect(file_uri(self.path, "mode=ro"), uri=True)
        try:
            conn.execute("CREATE TABLE x (y)")
        except sqlite3.Error as e:
            raise open_error(f"cannot use {self.path}", e) from None
        finally:
            conn.close()
    monkeypatch.setattr(store_sqlite.Store, "_open_read_write", refused)
    assert main(["show", run_id, "--db", str(db)]) == 0
    assert main(["show", run_id, "--db", str(db)]) == 0
    assert analyses == [run_id, run_id]                 # computed, never kept
    assert rows(db) == []
    capsys.readouterr()


def test_a_stored_document_holds_no_secret(stored):
    db, run_id = stored
    with Store(db) as st:
        doc = dict(documents.run_document(st, run_id),
                   params={"command": ["x", "--db", "postgresql://u:hunter2@h/db"]})
        assert st.save_analysis(run_id, "v", doc)
        assert "hunter2" not in json.dumps(st.analysis(run_id, "v"))
        with pytest.raises(StoreError):
            st.remove(["no-such-run"])


@pytest.mark.measuring          # starts a PostgreSQL server
@pytest.mark.filterwarnings("ignore:XDG_RUNTIME_DIR")
def test_a_postgresql_store_keeps_documents_and_a_schema_6_one_migrates(pg_url, pg_server,
                                                                        analyses):
    from memfx.analysis.answer_cache import analysis_key
    from memfx.store.store import open_store
    from test_postgres import _sql
    with open_store(pg_url) as st:
        run_id = st.import_run(export())
        first = documents.run_document(st, run_id, include_values=True)
        assert same(documents.run_document(st, run_id, include_values=True), first)
    assert analyses == [run_id]
    assert _sql(pg_url, "SELECT run_id, analysis FROM analyses") == [(run_id, analysis_key())]
    _sql(pg_url, "DROP TABLE analyses")
    _sql(pg_url, "UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    with open_store(pg_url) as st:
        documents.run_document(st, run_id)
        st.remove([run_id])
    assert _sql(pg_url, "SELECT value FROM meta WHERE key = 'schema_version'") == [("8",)]
    assert _sql(pg_url, "SELECT count(*) FROM analyses") == [(0,)]
