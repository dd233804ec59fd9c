"""Reading a stored survey back fast (issue 42, item 2) without changing
what is read: the runs' states without their parameters
(survey_run_states), the stored documents in one query, one survey read
twice decoded once (share_reads), and no numpy to print a stored survey's
document.

The survey is tests/data's small latency and matmul exports, imported into
one survey: no measuring."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from memfx.analysis import answer_cache, documents
from memfx.analysis.comparison import comparison
from memfx.cli.main import main
from memfx.store.store import Store

DATA = Path(__file__).parent / "data"
SURVEY = "s-20261123-125200-aaaa"


@pytest.fixture(autouse=True)
def _fresh_process_state(monkeypatch):
    monkeypatch.setenv("MEMFX_CACHE_DIR", "off")
    documents.reanalyse(False)
    documents.share_reads(False)
    yield
    documents.reanalyse(False)
    documents.share_reads(False)


@pytest.fixture
def survey_db(tmp_path):
    db = tmp_path / "s.db"
    survey = {"id": SURVEY, "started": "2026-11-23T12:52:00Z", "finished": "2026-11-23T12:59:00Z",
              "status": "complete", "preset": "quick", "argv": ["survey", "--quick"], "note": None,
              "pid": 1, "host": "vm", "labels": {"lab": "x"}}
    with Store(db) as st:
        for name in ("export_latency_small.json", "export_matmul_quick.json"):
            export = json.loads((DATA / name).read_text())
            export["run"]["survey_id"] = SURVEY
            export["survey"] = survey
            st.import_run(export)
        documents.analysed_survey(st, SURVEY)           # analysed once, stored
    return db


def test_run_states_are_the_surveys_runs_less_what_is_not_read(survey_db):
    with Store(survey_db) as st:
        whole, states = st.survey(SURVEY), st.survey_run_states(SURVEY)
    assert {k: v for k, v in states.items() if k != "runs"} == \
        {k: v for k, v in whole.items() if k != "runs"}
    assert [r["id"] for r in states["runs"]] == [r["id"] for r in whole["runs"]]
    for brief, run in zip(states["runs"], whole["runs"]):
        assert brief == {k: run[k] for k in brief}


def test_a_survey_read_from_stored_documents_is_the_survey_document(survey_db):
    with Store(survey_db) as st:
        read = documents.document_of(st, SURVEY)
        made = documents.survey_document(st, SURVEY)     # run by run, as before
    assert json.dumps(read, sort_keys=True, default=str) == \
        json.dumps(made, sort_keys=True, default=str)


def test_show_json_prints_the_document_as_json_dumps_did(survey_db, capsys):
    with Store(survey_db) as st:
        doc = documents.survey_document(st, SURVEY)
    assert main(["show", SURVEY, "--json", "--db", str(survey_db)]) == 0
    assert capsys.readouterr().out == json.dumps(doc, indent=2, default=str) + "\n"


def test_a_survey_compared_with_itself_is_decoded_once(survey_db, monkeypatch):
    with Store(survey_db) as st:
        plain = comparison(st, SURVEY, SURVEY)
    reads = []
    real = Store.stored_documents

    def counting(self, run_ids, analysis):
        reads.append(sorted(run_ids))
        return real(self, run_ids, analysis)
    monkeypatch.setattr(Store, "stored_documents", counting)
    documents.share_reads()
    with Store(survey_db) as st:
        shared = comparison(st, SURVEY, SURVEY)
    assert shared == plain
    assert len(reads) == 1


def test_share_reads_is_off_for_library_callers(survey_db):
    with Store(survey_db) as st:
        first = documents.document_of(st, SURVEY)
        second = documents.document_of(st, SURVEY)
    assert first == second
    assert first["documents"][0]["answers"] is not second["documents"][0]["answers"]


def test_the_analysis_key_reads_numpys_version_without_importing_it():
    import numpy
    assert answer_cache._numpy_version() == numpy.__version__


# another process (a fresh interpreter, to see its imports): marked with
# the tests that start processes (tests/test_markers.py)
@pytest.mark.measuring
def test_showing_a_stored_surveys_json_imports_no_numpy(survey_db):
    code = ("import sys, io, contextlib\n"
            "from memfx.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    assert main(['show', {SURVEY!r}, '--json', '--db', {str(survey_db)!r}]) == 0\n"
            "print('numpy' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**__import__("os").environ, "MEMFX_CACHE_DIR": "off"})
    assert out.stdout.strip() == "False", out.stderr
