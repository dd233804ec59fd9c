"""The fleet at scale (issue 43): the store's set-based reads (schema 8),
the fleet document read as a stream and summarised per CPU model, the
report that summarises once the machines are more than a screen's worth,
and pushes from many hosts at once into one PostgreSQL store."""

import copy
import json
import sqlite3
import subprocess
import sys

import pytest

from memfx.analysis import documents
from memfx.analysis import fleet as F
from memfx.report.fleet import SCREEN_COLUMNS, fleet_html
from memfx.store.sql import SCHEMA_VERSION
from memfx.store.store import Store, open_store
from test_postgres import EXPORT, SRC, _fleet

# platformdirs (under pgserver) warns when XDG_RUNTIME_DIR is unset, as in CI
pytestmark = pytest.mark.filterwarnings("ignore:XDG_RUNTIME_DIR")


def _old_fleet(store, group_by):
    """The fleet document as documents.py builds it: every machine's runs
    read one by one (the reference the streamed one must equal)."""
    return documents._fleet(store, group_by)[0]


def _comparable(cell):
    return {k: cell.get(k) for k in ("value", "spread_low", "spread_high", "verdict", "verdicts",
                                     "n_hosts", "ci_low", "ci_high")}


# ---- the streamed fleet equals the one read run by run ---------------------------

@pytest.mark.measuring
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_streamed_fleet_document_equals_the_one_read_run_by_run(backend, request, tmp_path):
    target = str(tmp_path / "fleet.db") if backend == "sqlite" else request.getfixturevalue("pg_url")
    _fleet(target)
    with open_store(target) as st:
        for group_by in ("machine", "cpu-model"):
            old, new = _old_fleet(st, group_by), F.fleet_document(st, group_by)
            assert [c["key"] for c in new["columns"]] == [c["key"] for c in old["columns"]]
            assert [c["sources"] for c in new["columns"]] == [c["sources"] for c in old["columns"]]
            assert [q["question"] for q in new["questions"]] == [q["question"] for q in old["questions"]]
            for q_new, q_old in zip(new["questions"], old["questions"]):
                assert {k: _comparable(v) for k, v in q_new["cells"].items()} == \
                    {k: _comparable(v) for k, v in q_old["cells"].items()}
        # the second read takes the stored answers apart from the documents
        runs = st.newest_runs_per_machine()
        from memfx.analysis.answer_cache import analysis_key
        parts = st.stored_answers([r["id"] for r in runs], analysis_key())
        assert set(parts) == {r["id"] for r in runs}
        assert all(p["answers"] and "points" not in p for p in parts.values())


@pytest.mark.measuring
def test_model_sides_read_only_the_models_named_and_pool_their_curves(tmp_path):
    path = str(tmp_path / "fleet.db")
    _fleet(path)
    with Store(path) as st:
        (a_label, a_answers, a_runs), (b_label, b_answers, b_runs) = F.model_sides(st, "model a", "Model B")
        fleet = documents.fleet_with_runs(st)
        ref_a = documents.group_side(st, "Model A", fleet)
    assert a_label == ref_a[0] == "Model A (2 machines)" and b_label == "Model B (1 machine)"
    assert a_answers == ref_a[1]
    assert [d["points"] for d in a_runs] == [d["points"] for d in ref_a[2]]
    pooled = [p for d in a_runs for p in d["points"] if "replicas" in p and len(p["replicas"]) == 2]
    assert pooled, "two hosts of Model A: their points are pooled"
    with Store(path) as st, pytest.raises(Exception, match="ambiguous"):
        F.model_sides(st, "Model", "Model B")


# ---- the per-model summary --------------------------------------------------------

def test_summary_cell_names_the_far_outlier_and_only_it():
    answers = [({"value": v, "verdict": "detected"}, f"m-{i}", f"host{i}")
               for i, v in enumerate([1.0, 1.1, 0.9, 1.05, 0.95, 10.0])]
    cell = F.summary_cell(answers)
    assert cell["n_hosts"] == 6 and cell["value"] == pytest.approx(1.025)
    assert cell["spread_low"] == 0.9 and cell["spread_high"] == 10.0
    assert cell["q1"] < cell["value"] < cell["q3"]
    assert cell["n_outliers"] == 1 and cell["outliers"] == [
        {"machine_id": "m-5", "host": "host5", "value": 10.0}]
    # too few hosts to judge a spread: nobody is called an outlier
    assert "outliers" not in F.summary_cell(answers[3:])
    assert F.summary_cell([])["n_hosts"] == 0


def _synthetic_fleet(n_machines, n_models=24, n_questions=12, group_by="machine"):
    """A fleet document as fleet_document makes it, without a store."""
    machines = [{"machine_id": f"m-{i:016x}", "label": f"CPU {i % n_models}",
                 "cpu_model": f"Vendor CPU model number {i % n_models} with a long name",
                 "hosts": [f"host{i:05d}"]} for i in range(n_machines)]
    models = {}
    for m in machines:
        models.setdefault(m["cpu_model"], []).append(m)
    model_columns = [{"key": k, "label": k, "machines": [m["machine_id"] for m in ms],
                      "hosts": [h for m in ms for h in m["hosts"]], "sources": []}
                     for k, ms in sorted(models.items())]
    questions = []
    for q in range(n_questions):
        found = {}
        cells = {}
        for i, m in enumerate(machines):
            value = (1 + q) * (1 + (i % n_models) / 10) * (1 + (i % 7) / 100) * (50 if i == 3 else 1)
            a = {"value": value, "verdict": "detected", "ci_low": value * 0.9, "ci_high": value * 1.1}
            found.setdefault(m["cpu_model"], []).append((a, m["machine_id"], m["hosts"][0]))
            cells[m["machine_id"]] = dict(a, n_hosts=1)
        summary = {k: F.summary_cell(v) for k, v in found.items()}
        row = {"question": f"latency.q{q}", "asks": "How long does a load take?", "unit": "ns",
               "better": "lower", "seed": "001"}
        questions.append(dict(row, cells=cells, models=summary) if group_by == "machine"
                         else dict(row, cells=summary))
    columns = ([{"key": m["machine_id"], "label": m["label"], "hosts": m["hosts"],
                 "cpu_model": m["cpu_model"], "machines": [m["machine_id"]], "sources": []}
                for m in machines] if group_by == "machine" else model_columns)
    doc = {"fleet_schema_version": 1, "kind": "fleet", "group_by": group_by, "store": "x",
           "columns": columns, "questions": questions}
    if group_by == "machine":
        doc["models"] = model_columns
    return doc


def test_the_report_summarises_per_model_beyond_a_screen_of_machines():
    few = fleet_html(_synthetic_fleet(SCREEN_COLUMNS, n_models=2))
    assert 'class="models"' not in few and "host00000" in few      # a column per machine
    many = fleet_html(_synthetic_fleet(200))
    assert many.count('class="models"') == 12                      # a table per question
    assert "host00199" not in many                                 # no column per machine
    assert many.count('<div class="dist">') == 12 * 24             # a row per model and question
    assert "host00003 (" in many                                   # the outlier named
    by_model = fleet_html(_synthetic_fleet(200, group_by="cpu-model"))
    assert by_model.count('<div class="dist">') == 12 * 24 and "median of 9 host(s)" in by_model


def test_the_report_of_a_thousand_machines_stays_small():
    html = fleet_html(_synthetic_fleet(1000, n_questions=80))
    assert len(html.encode()) < 3 << 20


# ---- schema 8: old stores get the index and the answers column ----------------------

@pytest.mark.measuring
def test_a_schema_7_sqlite_store_is_migrated_and_its_stored_documents_still_read(tmp_path):
    path = tmp_path / "old.db"
    doc = json.loads(EXPORT.read_text())
    with Store(path) as st:
        run_id = st.import_run(doc)
        answers = documents.run_document(st, run_id)["answers"]       # stored (schema 8)
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("DROP INDEX runs_by_machine")
    con.execute("ALTER TABLE analyses DROP COLUMN answers")           # as schema 7 stored it
    con.execute("ALTER TABLE analyses DROP COLUMN points")
    con.execute("PRAGMA user_version = 7")
    con.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    con.close()
    with Store(path) as st:
        from memfx.analysis.answer_cache import analysis_key
        parts = st.stored_answers([run_id], analysis_key())
        from memfx.store.sql import ANSWER_FIELDS
        # from the whole document: the fields the fleet reads of each answer
        assert parts[run_id]["answers"] == [{k: a[k] for k in ANSWER_FIELDS if k in a} for a in answers]
        assert parts[run_id]["answers"][0]["value"] == answers[0]["value"]
        points = st.stored_points([run_id], analysis_key())[run_id]["points"]
        assert points and all("values" not in p and "median" in p for p in points)
        assert F.fleet_document(st)["questions"]
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 8
    assert con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'runs_by_machine'"
                       ).fetchone()[0] == 1
    assert {"answers", "points"} <= {r[1] for r in con.execute("PRAGMA table_info(analyses)")}
    assert con.execute("SELECT count(*) FROM analyses").fetchone()[0] == 1   # nothing lost
    con.close()


@pytest.mark.measuring
def test_a_schema_7_postgresql_store_is_migrated(pg_url):
    import psycopg
    with open_store(pg_url) as st:
        run_id = st.import_run(json.loads(EXPORT.read_text()))
        documents.run_document(st, run_id)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP INDEX runs_by_machine")
        conn.execute("ALTER TABLE analyses DROP COLUMN answers")
        conn.execute("ALTER TABLE analyses DROP COLUMN points")
        conn.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    with open_store(pg_url) as st:
        assert st.machines()[0]["n_runs"] == 1
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "8"
        assert conn.execute("SELECT count(*) FROM pg_indexes WHERE indexname = 'runs_by_machine'"
                            ).fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM analyses").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM information_schema.columns WHERE table_name = 'analyses'"
                            " AND column_name IN ('answers', 'points')").fetchone()[0] == 2


@pytest.mark.measuring
def test_postgres_machines_equal_the_shared_query(pg_url):
    _fleet(pg_url)
    from memfx.store.sql import StoredAnalyses
    from memfx.store.sqlite import Store as SQLiteStore
    with open_store(pg_url) as st:
        # the server's set-based queries give what the shared ones give
        assert st.machines() == SQLiteStore.machines(st)
        assert st.newest_runs_per_machine() == StoredAnalyses.newest_runs_per_machine(st)


class _Without:
    """A store without the reads ``hidden`` (as a store that has none), that
    refuses those ``refused`` (AssertionError when called) and counts the
    calls of every other read of its own."""

    def __init__(self, store, hidden=(), refused=()):
        self._store, self._hidden, self._refused, self.calls = store, hidden, refused, {}

    def __getattr__(self, name):
        if name in self._hidden:
            raise AttributeError(name)
        found = getattr(self._store, name)
        if name in self._refused:
            def refuse(*args, **kwargs):
                raise AssertionError(f"{name} was called")
            return refuse
        if not callable(found):
            return found

        def counted(*args, **kwargs):
            self.calls.setdefault(name, []).append(args)
            return found(*args, **kwargs)
        return counted


def test_the_machine_list_reads_only_each_fingerprints_cpu_as_the_whole_one_gives_it(
        pg_url, monkeypatch):
    from test_postgres import MACHINE
    cpus = [dict(MACHINE["cpu"], model_name=f"CPU {i}", logical_cpus=2 + i) for i in range(5)]
    fingerprints = [dict(MACHINE, cpu=cpu) for cpu in cpus] + [{"caches": MACHINE["caches"]}]
    with open_store(pg_url) as st:
        for i, fp in enumerate(fingerprints):
            rid = st.begin_run("latency", {"max_size": 4096}, "quick", fp)
            st.finish_run(rid, "complete")
    # damage as an older memfx or a hand edit could leave it: text that is
    # no JSON, JSON that is no object, a CPU member that fails its check
    # (dropped), another member that fails (the CPU kept)
    damaged = {1: "{not json", 2: "[1, 2]",
               3: json.dumps(dict(MACHINE, cpu=dict(cpus[2], model_name="bell\u0007"))),
               4: json.dumps(dict(MACHINE, cpu=cpus[3], caches="not a list"))}
    import psycopg
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for row, text in damaged.items():
            conn.execute("UPDATE machines SET fingerprint = %s WHERE id = %s", (text, row))
    with open_store(pg_url) as st:
        whole = st.machines()
        assert [m["fingerprint"].get("cpu") for m in whole] == [
            None, None, None, cpus[3], cpus[4], None]
        for on_server in (True, False):         # PostgreSQL 16's IS JSON, or taken apart here
            monkeypatch.setattr(st, "_takes_json_apart", lambda: on_server)
            light = st.machine_summaries()
            assert [dict(m, fingerprint=None) for m in light] == \
                [dict(m, fingerprint=None) for m in whole]
            assert [m["fingerprint"] for m in light] == [
                {"cpu": m["fingerprint"]["cpu"]} if "cpu" in m["fingerprint"] else {} for m in whole]
            assert st.machine_models() == [(m["machine_id"], m["fingerprint"]) for m in light]
        # the list is what the whole fingerprints give, without reading them
        listed = documents.machines_document(_Without(st, refused=["machines"]))
        assert listed == documents.machines_document(_Without(st, hidden=["machine_summaries"]))
        assert [m["cpu_model"] for m in listed["machines"]] == [
            "unknown CPU", "unknown CPU", "unknown CPU", "CPU 3", "CPU 4", "unknown CPU"]
        assert listed["machines"][3]["label"] == "CPU 3 (family 25 model 17), 5 CPUs"


@pytest.mark.measuring
def test_model_sides_on_postgresql_read_the_models_hosts_only_and_their_points_together(pg_url):
    _fleet(pg_url)
    doc = json.loads(EXPORT.read_text())        # a third host of Model A
    doc["machine"] = dict(doc["machine"], cpu=dict(doc["machine"]["cpu"], model_name="Model A"),
                          memory=dict(doc["machine"].get("memory") or {}, total_bytes=2 ** 34))
    doc["run"] = dict(doc["run"], id=doc["run"]["id"] + "-3", host="host3")
    with open_store(pg_url) as st:
        st.import_run(doc)
    with open_store(pg_url) as st:
        reference = F.model_sides(_Without(st, hidden=["newest_runs_of", "machine_models",
                                                       "machine_hosts"]), "Model A", "Model B")
        ids = {m["machine_id"] for m in documents.machines_document(st)["machines"]
               if m["cpu_model"] == "Model B"}
        assert st.newest_runs_of(ids) == [r for r in st.newest_runs_per_machine()
                                          if r["machine_id"] in ids]
        assert st.newest_runs_of(()) == []
        assert st.machine_hosts(ids | {"m-none"}) == {
            m["machine_id"]: m["hosts"] for m in st.machines() if m["machine_id"] in ids}
        assert [(mid, fp) for mid, fp in st.machine_models()] == [
            (m["machine_id"], m["fingerprint"]) for m in st.machine_summaries()]
        # neither every machine's runs nor whole fingerprints are read, nor
        # the machine list (which groups every machine's runs)
        counting = _Without(st, refused=["newest_runs_per_machine", "machines", "machine_summaries"])
        sides = F.model_sides(counting, "Model A", "Model B")
    assert sides == reference
    assert sides[0][0] == "Model A (3 machines)"
    # Model A's first host is read whole, its two others' points in one read
    points = counting.calls["stored_points"]
    assert len(points) == 1 and len(points[0][0]) == 2 * len(reference[0][2])


# ---- push -----------------------------------------------------------------------------

def test_push_looks_up_only_the_runs_it_pushes(tmp_path):
    doc = json.loads(EXPORT.read_text())
    with Store(tmp_path / "local.db") as local:
        run_id = local.import_run(doc)
    with Store(tmp_path / "local.db") as local, Store(tmp_path / "shared.db") as shared:
        shared.import_run(dict(copy.deepcopy(doc), run=dict(doc["run"], id="another-run")))

        class NoListing:
            """The shared store, refusing to list every run."""
            def __getattr__(self, name):
                if name == "runs":
                    raise AssertionError("push listed every run of the target")
                return getattr(shared, name)
        summary = F.push(local, NoListing(), [run_id])
        assert summary["counts"]["added"] == 1
        assert F.push(local, NoListing(), [run_id])["counts"]["unchanged"] == 1


# ---- many hosts pushing at once -----------------------------------------------------

def _local_survey(path, tag):
    """An SQLite store holding one survey (one run) of a host of its own."""
    doc = json.loads(EXPORT.read_text())
    sid = f"s-20261201-000000-{tag}"
    doc["run"] = dict(doc["run"], id=f"{doc['run']['id']}-{tag}", survey_id=sid, host=f"h-{tag}")
    doc["survey"] = {"id": sid, "started": doc["run"]["started"], "status": "complete",
                     "preset": "quick", "host": f"h-{tag}"}
    doc["machine"] = dict(doc["machine"] or {}, memory={"total_bytes": (len(tag) + 7) * 2 ** 30})
    doc["machine"]["cpu"] = dict(doc["machine"].get("cpu") or {}, model_name=f"CPU {tag}")
    with Store(path) as st:
        st.import_run(doc)
    return sid, doc["run"]["id"]


@pytest.mark.measuring
def test_pushes_at_once_store_each_run_once_without_deadlock(pg_url, tmp_path):
    import os
    env = dict(os.environ, PYTHONPATH=SRC, MEMFX_CACHE_DIR="off")
    different = [(tmp_path / f"d{i}.db", *_local_survey(tmp_path / f"d{i}.db", f"d{i}")) for i in range(8)]
    same_path = tmp_path / "same.db"
    same = _local_survey(same_path, "same")
    jobs = [(path, sid) for path, sid, _ in different] + [(same_path, same[0])] * 2
    procs = [subprocess.Popen([sys.executable, "-m", "memfx", "push", "--db", str(path), "--to", pg_url,
                               sid], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for path, sid in jobs]
    done = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    for rc, err in done:
        assert rc == 0 or (rc in (1, 2) and len(err.strip().splitlines()) == 1), err
    assert all(rc == 0 for rc, _ in done), [err for _, err in done]
    import psycopg
    with psycopg.connect(pg_url) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM runs")]
        surveys = [r[0] for r in conn.execute("SELECT id FROM surveys")]
        n_samples = dict(conn.execute("SELECT run_id, count(*) FROM samples GROUP BY run_id").fetchall())
    expected = {run for _, _, run in different} | {same[1]}
    assert sorted(ids) == sorted(expected)                # each run once, none lost
    assert len(surveys) == len(set(surveys)) == 9
    n = len(json.loads(EXPORT.read_text())["samples"])
    assert set(n_samples.values()) == {n}                  # each run whole, not twice


@pytest.mark.measuring
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_machine_surveys_by_one_query_equal_those_found_run_by_run(backend, request, tmp_path):
    from memfx.lab.machine import machine_id
    target = str(tmp_path / "fleet.db") if backend == "sqlite" else request.getfixturevalue("pg_url")
    for tag in ("a", "b", "c"):
        path = tmp_path / f"{tag}.db"
        _local_survey(path, tag)
        with Store(path) as local, open_store(target) as shared:
            F.push(local, shared, F.push_selection(local, []))
    with open_store(target) as st:
        for m in st.machines():
            found = [s for s in st.surveys()
                     if machine_id(st.run(st.runs(survey_id=s["id"])[0]["id"])["machine"]) == m["machine_id"]]
            assert st.machine_surveys(m["machine_id"]) == found and len(found) == 1
        assert st.machine_surveys("m-0000000000000000") == []
