"""`memfx show`, `runs`, `export` and `compare` on a stored survey, end to
end: an 80-column screen with the headline answers first, glob filters,
latest-survey, the answers as CSV, and m- machine ids."""
import csv
import io
import json

import pytest

from conftest import run_cli
from memfx.store.store import Store

pytestmark = pytest.mark.measuring      # a tiny latency run behind every test

TINY = ["--set", "max_size=64K", "--set", "samples=5", "--set", "min_sample_ms=0.05",
        "--set", "per_octave=2", "--set", "refine=false"]
SURVEY = "s-20260101-000000-abcd"


@pytest.fixture(scope="module")
def survey_db(tmp_path_factory):
    """A database with a tiny latency run and a complete survey made of a
    copy of it (imported with its survey)."""
    db = str(tmp_path_factory.mktemp("show") / "s.db")
    p = run_cli("run", "latency", *TINY, "--json", db=db)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    with Store(db) as st:
        raw = st.export_run(doc["run_id"])
        raw["run"]["id"] = doc["run_id"] + "-s"
        raw["run"]["survey_id"] = SURVEY
        raw["survey"] = {"id": SURVEY, "started": raw["run"]["started"],
                         "finished": raw["run"]["finished"], "status": "complete",
                         "preset": "quick", "argv": ["survey"], "note": None, "pid": 1,
                         "host": raw["run"]["host"]}
        st.import_run(raw)
    return db, doc


def _show(db, *args, columns="80"):
    return run_cli("show", *args, db=db, env={"COLUMNS": columns})


def test_show_survey_fits_80_columns_with_the_headline_answers_first(survey_db):
    db, _ = survey_db
    p = _show(db, SURVEY)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines and max(len(line) for line in lines) <= 80
    shown = json.loads(_show(db, SURVEY, "--json").stdout)
    heads = [a["question"] for a in shown["answers"] if a.get("headline")]
    assert heads == ["latency.memory", "latency.l3_capacity"]
    first = [line.split()[0] for line in lines[:40] if line.startswith("  ")]
    assert first[:len(heads)] == heads                          # headlines lead, ids whole
    assert lines[1].startswith("004 ")                          # under their seed story
    assert sum(line.startswith("data quality:") for line in lines) == 1
    rest = len(shown["answers"]) - len(heads)
    assert lines[-1] == f"{rest} more answers: memfx show {SURVEY} --all"
    # latest-survey is the same survey; --all lists every answer
    assert _show(db, "latest-survey").stdout == p.stdout
    every = _show(db, "latest-survey", "--all").stdout
    assert all(f" {a['question']} " in f" {every} " or a["question"] in every
               for a in shown["answers"])
    # a wider terminal gets wider lines
    wide = _show(db, SURVEY, columns="160").stdout.splitlines()
    assert max(len(line) for line in wide) > 80


def test_show_filters_by_glob_and_refuses_a_glob_that_matches_nothing(survey_db):
    db, doc = survey_db
    p = _show(db, SURVEY, "latency.l*")
    ids = [line.split()[0] for line in p.stdout.splitlines()[1:] if not line.startswith("    ")]
    assert p.returncode == 0 and ids and all(i.startswith("latency.l") for i in ids)
    assert "latency.memory" not in ids
    j = json.loads(_show(db, doc["run_id"], "latency.l1*", "--json").stdout)
    assert {a["question"] for a in j["answers"]} == {"latency.l1d", "latency.l1d_capacity"}
    p = _show(db, SURVEY, "nosuch.*")
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and "nosuch.*" in p.stderr


def test_export_survey_answers_as_csv_and_json(survey_db):
    db, doc = survey_db
    p = run_cli("export", "latest-survey", "--format", "csv", db=db)
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    assert list(rows[0])[:10] == ["question", "verdict", "value", "unit", "ci_low", "ci_high",
                                  "run_id", "survey_id", "machine_id", "because"]
    shown = json.loads(_show(db, SURVEY, "--json").stdout)
    assert [r["question"] for r in rows] == [a["question"] for a in shown["answers"]]
    assert {r["survey_id"] for r in rows} == {SURVEY}
    assert {r["run_id"] for r in rows} == {doc["run_id"] + "-s"}
    assert {r["machine_id"] for r in rows} == {doc["machine_id"]}
    assert doc["machine_id"].startswith("m-")
    l1 = next(r for r in rows if r["question"] == "latency.l1d")
    assert float(l1["value"]) > 0 and l1["because"]
    p = run_cli("export", SURVEY, "--format", "json", db=db)
    assert json.loads(p.stdout)["kind"] == "survey"
    p = run_cli("export", SURVEY, "--format", "raw", db=db)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1


def test_runs_show_survey_ids_full_run_ids_and_m_machine_ids(survey_db):
    db, doc = survey_db
    runs = json.loads(run_cli("runs", "--json", db=db).stdout)
    assert {r["machine_id"] for r in runs} == {doc["machine_id"]}
    assert all(isinstance(r["machine_row"], int) for r in runs)
    p = run_cli("runs", db=db, env={"COLUMNS": "80"})
    text = p.stdout
    assert f"survey {SURVEY}" in text and "runs outside surveys" in text
    assert doc["run_id"] in text and doc["run_id"] + "-s" in text     # never cut
    assert f"machine {doc['machine_id']}: " in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_compare_summary_changed_rows_glob_and_markdown(survey_db):
    db, doc = survey_db
    p = run_cli("compare", doc["run_id"], "latest-survey", db=db, env={"COLUMNS": "80"})
    assert p.returncode == 0, p.stderr
    # a line that does not fit the 80 columns wraps: its continuation is indented
    lines = [x for x in p.stdout.splitlines() if not x.startswith("    ")]
    assert "unchanged" in lines[0] and lines[1].startswith("A = run ")
    assert all(len(x) <= 80 for x in p.stdout.splitlines()) and "…" not in p.stdout
    full = json.loads(run_cli("compare", doc["run_id"], "latest-survey", "--json", db=db).stdout)
    quiet = {"unchanged", "not judged", "not comparable"}
    changed = [r["question"] for r in full["rows"] if r["verdict"] not in quiet]
    listed = [line.split()[0] for line in lines[2:] if line.startswith("  ")]
    assert sorted(listed) == sorted(changed)                   # a copy: nothing changed
    every = run_cli("compare", doc["run_id"], "latest-survey", "--all", db=db).stdout
    assert all(r["question"] in every for r in full["rows"])
    g = json.loads(run_cli("compare", doc["run_id"], SURVEY, "latency.l?d*", "--json",
                           db=db).stdout)
    assert {r["question"] for r in g["rows"]} == {"latency.l1d", "latency.l1d_capacity"}
    md = run_cli("compare", doc["run_id"], SURVEY, "--format", "markdown", db=db).stdout
    assert len(md.splitlines()) <= 40 and md.startswith("**memfx compare: ")
    p = run_cli("compare", doc["run_id"], SURVEY, "nosuch.*", db=db)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1


def test_every_inconclusive_answer_of_a_run_says_why(survey_db):
    _, doc = survey_db
    reasons = ("inconclusive", "not conclusive", "disagree", "within the noise", "across",
               "too few", "no ci", "noisy", "cannot tell")
    for a in doc["answers"]:
        if a["verdict"] == "inconclusive":
            assert any(r in a["because"].lower() for r in reasons), a
