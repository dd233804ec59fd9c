"""The answers of a machine's history, kept between memfx processes
(answer_cache): the same answers as analysing the samples again, read back
only while the survey's runs and memfx's analysis are unchanged."""
import json
from pathlib import Path

import pytest

from memfx.analysis import answer_cache, documents
from memfx.store.store import open_store

EXPORT = json.loads((Path(__file__).parent / "data" / "export_latency_small.json").read_text())


def _survey(store):
    """A complete survey of one latency run, from the stored export's samples."""
    run = EXPORT["run"]
    sid = store.begin_survey("quick", ["survey", "--quick"])
    rid = store.begin_run(run["experiment"], run["params"], "quick", EXPORT["machine"],
                          survey_id=sid)
    store.add_samples(rid, [{k: v for k, v in s.items() if k != "seq"} for s in EXPORT["samples"]])
    store.finish_run(rid, "complete")
    store.finish_survey(sid, "complete")
    return sid


@pytest.fixture
def store(tmp_path):
    with open_store(str(tmp_path / "h.db")) as st:
        yield st


def _no_analysis(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("analysed again")
    monkeypatch.setattr(documents, "survey_run_documents", refuse)


def test_history_answers_are_analysed_once_then_read_back(store, monkeypatch):
    sid = _survey(store)
    fresh = documents.survey_document(store, sid)["answers"]
    assert fresh, "the export yields answers"
    first = documents.history_answers(store, sid)
    assert json.loads(json.dumps(first)) == json.loads(json.dumps(fresh))
    files = list(answer_cache.cache_dir().glob("answers/*.json"))
    assert len(files) == 1 and answer_cache.analysis_key() in files[0].name
    _no_analysis(monkeypatch)
    assert documents.history_answers(store, sid) == json.loads(json.dumps(fresh))


def test_a_changed_survey_or_analysis_or_a_broken_file_is_a_miss(store, monkeypatch):
    sid = _survey(store)
    documents.history_answers(store, sid)
    path = next(answer_cache.cache_dir().glob("answers/*.json"))
    runs = store.survey(sid)["runs"]
    assert answer_cache.load(store.path, sid, runs) is not None
    # a run more in the survey (or one fewer, or one finished since)
    assert answer_cache.load(store.path, sid, runs + [dict(runs[0], id="other")]) is None
    assert answer_cache.load(store.path, sid, [dict(runs[0], status="interrupted")]) is None
    # another store, another survey
    assert answer_cache.load(str(store.path) + "x", sid, runs) is None
    # another analysis (memfx's sources or numpy changed)
    real = answer_cache.analysis_key()
    monkeypatch.setattr(answer_cache, "_ANALYSIS_KEY", "0" * 20)
    assert answer_cache.load(store.path, sid, runs) is None
    monkeypatch.setattr(answer_cache, "_ANALYSIS_KEY", real)
    assert answer_cache.load(store.path, sid, runs) is not None
    for broken in ("{not json", json.dumps({"survey_id": sid, "runs": "x", "answers": []}), "[]"):
        path.write_text(broken)
        assert answer_cache.load(store.path, sid, runs) is None
    assert documents.history_answers(store, sid)          # derived again, and kept
    assert answer_cache.load(store.path, sid, runs) is not None


def test_a_newer_analysis_replaces_the_older_file(store, monkeypatch):
    sid = _survey(store)
    documents.history_answers(store, sid)
    monkeypatch.setattr(answer_cache, "_ANALYSIS_KEY", "1" * 20)
    documents._SURVEY_ANSWERS.clear()
    documents.history_answers(store, sid)
    names = [p.name for p in answer_cache.cache_dir().glob("answers/*.json")]
    assert len(names) == 1 and names[0].endswith("-" + "1" * 20 + ".json")


def test_the_cache_can_be_turned_off_or_be_unwritable(store, monkeypatch, tmp_path):
    sid = _survey(store)
    monkeypatch.setenv("MEMFX_CACHE_DIR", "off")
    assert answer_cache.cache_dir() is None
    assert documents.history_answers(store, sid)
    assert not list((tmp_path / "xdg-cache").glob("**/*.json"))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("MEMFX_CACHE_DIR", str(blocker / "below"))   # cannot be made
    assert documents.history_answers(store, sid)          # still answers, nothing kept
    assert answer_cache.load(store.path, sid, store.survey(sid)["runs"]) is None


def test_machine_history_reads_the_cached_answers(store, monkeypatch):
    sids = [_survey(store) for _ in range(3)]
    mid = documents.survey_document(store, sids[0])["machine_id"]
    values, n = documents.machine_history(store, mid)
    assert n == 3 and values and all(len(v) == 3 for v in values.values())
    documents._SURVEY_ANSWERS.clear()      # a new memfx process
    _no_analysis(monkeypatch)
    again, n_again = documents.machine_history(store, mid)
    assert n_again == 3 and again == values
