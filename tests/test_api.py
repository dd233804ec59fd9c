"""`import memfx`: run, load, and DataFrame-ready records."""
import pytest

import memfx

# every test here starts a worker or a process, or times kernels
pytestmark = pytest.mark.measuring


def test_public_api_runs_and_loads(tmp_path):
    db = str(tmp_path / "api.db")
    doc = memfx.run("latency", db=db, max_size="32K", samples=3, min_sample_ms=0.05,
                    per_octave=1, refine=False)
    assert doc["status"] == "complete" and doc["experiment"] == "latency"
    recs = memfx.points(doc)
    assert len(recs) == len(doc["points"])
    # flat records: every value a scalar, swept params as columns
    assert all(not isinstance(v, (dict, list)) for r in recs for v in r.values())
    assert {"arm", "median", "size_bytes", "run_id"} <= set(recs[0])
    again = memfx.load(doc["run_id"], db=db)
    assert again["points"] == doc["points"]
    raw = memfx.samples(doc["run_id"], db=db)
    assert len(raw) >= 3 * len(doc["points"])
    assert {"value", "ns", "size_bytes", "arm"} <= set(raw[0])
    assert memfx.runs(db=db)[0]["id"] == doc["run_id"]
    assert "latency" in memfx.list_experiments()
    assert memfx.fingerprint()["cpu"]["vendor"]


def test_api_errors_are_memfx_errors(tmp_path):
    import pytest
    with pytest.raises(memfx.ParamError):
        memfx.run("latency", db=str(tmp_path / "x.db"), samples="lots")
    with pytest.raises(memfx.MemfxError):
        memfx.run("nosuch", db=str(tmp_path / "x.db"))


def test_load_answers_and_compare_take_survey_ids(tmp_path):
    import pytest

    from memfx.store.store import Store
    db = str(tmp_path / "api.db")
    doc = memfx.run("latency", db=db, max_size="32K", samples=3, min_sample_ms=0.05,
                    per_octave=1, refine=False)
    sid = "s-20260101-000000-abcd"
    with Store(db) as st:
        raw = st.export_run(doc["run_id"])
        raw["run"].update(id=doc["run_id"] + "-s", survey_id=sid)
        raw["survey"] = {"id": sid, "started": raw["run"]["started"], "finished": None,
                         "status": "complete", "preset": "quick", "argv": [], "note": None,
                         "pid": 1, "host": "h"}
        st.import_run(raw)
    survey = memfx.load(sid, db=db)
    assert survey["kind"] == "survey" and memfx.load("latest-survey", db=db)["survey_id"] == sid
    assert [a["question"] for a in survey["answers"]] == [a["question"] for a in doc["answers"]]
    assert {r["machine_id"] for r in memfx.runs(db=db)} == {doc["machine_id"]}
    # points take a survey (its runs' points) or an id, as the CLI does (issue 42)
    by_survey = memfx.points(survey)
    assert by_survey and {r["run_id"] for r in by_survey} == {doc["run_id"] + "-s"}
    assert len(memfx.points("latest-survey", db=db)) == len(by_survey) == len(doc["points"])
    with pytest.raises(memfx.MemfxError):
        memfx.points("previous", db=db)                 # one survey only: no previous one
    diff = memfx.compare(doc["run_id"], sid, questions="latency.l1*", db=db)
    assert {r["question"] for r in diff["rows"]} == {"latency.l1d", "latency.l1d_capacity"}
    assert diff["compare_schema_version"] >= 2 and not diff["regressed"]
    with pytest.raises(memfx.MemfxError):
        memfx.compare(doc["run_id"], "s-nosuch", db=db)
    # the modules of the same names are in their packages
    from memfx.analysis import compare as cmp_module
    from memfx.model import answers as ans_module
    assert ans_module.Question and cmp_module.markdown
    pandas = pytest.importorskip("pandas")
    df = memfx.answers(sid, db=db)
    assert isinstance(df, pandas.DataFrame) and len(df) == len(doc["answers"])
    assert set(df["survey_id"]) == {sid} and set(df["run_id"]) == {doc["run_id"] + "-s"}
    assert list(memfx.answers(doc["run_id"], db=db)["question"]) == list(df["question"])


def test_the_public_fingerprint_is_not_shadowed_by_a_submodule():
    # importing every module of the package must leave memfx.fingerprint the
    # API's function (a module memfx/fingerprint.py once replaced it)
    import importlib
    import pkgutil
    for m in pkgutil.walk_packages(memfx.__path__, "memfx."):
        if m.name not in ("memfx.__main__", "memfx.advice._interpose"):   # a preload library
            importlib.import_module(m.name)
    assert callable(memfx.fingerprint) and memfx.fingerprint()["cpu"]["vendor"]
    # nor any other name of the API (memfx.run, memfx.compare, memfx.answers:
    # the packages are named otherwise, memfx.running and memfx.analysis.compare)
    from memfx import api
    for name in ("run", "load", "runs", "points", "samples", "answers", "compare",
                 "fingerprint", "list_experiments"):
        assert getattr(memfx, name) is getattr(api, name), name
