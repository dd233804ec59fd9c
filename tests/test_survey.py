"""`memfx survey`: selection, a complete survey with its report, and Ctrl-C
keeping the finished runs and writing an incomplete report."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run_cli
from memfx.cli.survey import select
from memfx.model.errors import MemfxError
from memfx.store.store import Store


def test_select_orders_and_filters():
    names = select()
    assert names[0] == "latency" and len(names) == len(set(names))
    assert select(only=["fill_alloc", "latency"]) == ["fill_alloc", "latency"]   # as given
    assert "latency" not in select(skip=["latency"])
    with pytest.raises(MemfxError, match="unknown experiment"):
        select(only=["nosuch"])
    with pytest.raises(MemfxError, match="no experiment"):
        select(only=["latency"], skip=["latency"])


@pytest.mark.measuring
def test_survey_stores_runs_and_writes_report(tmp_path):
    db, out = str(tmp_path / "s.db"), str(tmp_path / "r.html")
    p = run_cli("survey", "--quick", "--only", "fill_alloc", "-q", "-o", out, db=db)
    assert p.returncode == 0, p.stderr
    with Store(db) as st:
        (survey,) = st.surveys()
        assert survey["status"] == "complete" and survey["preset"] == "quick"
        runs = st.survey(survey["id"])["runs"]
        assert [r["experiment"] for r in runs] == ["fill_alloc"]
        assert runs[0]["status"] == "complete"
    html = Path(out).read_text()
    assert "fill_alloc" in html and html.lstrip().lower().startswith("<!doctype html>")
    # it ends with the screen of `memfx show SURVEY`: one data-quality line, the way to the rest
    assert p.stdout.count("data quality:") == 1
    assert f"more answers: memfx show {survey['id']} --all" in p.stdout


@pytest.mark.measuring
def test_survey_ctrl_c_keeps_runs_and_reports_incomplete(tmp_path):
    db, out = str(tmp_path / "s.db"), str(tmp_path / "r.html")
    proc = subprocess.Popen([sys.executable, "-m", "memfx", "survey", "--quick", "-q",
                             "--only", "fill_alloc,latency", "-o", out, "--db", db],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, ready = time.time() + 120, False
    while time.time() < deadline and not ready:
        time.sleep(0.3)
        if os.path.exists(db):
            try:
                with Store(db) as st:
                    ready = any(r["experiment"] == "latency" and r["n_samples"] > 0 for r in st.runs())
            except Exception:
                pass
    assert ready, "latency never started"
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    with Store(db) as st:
        (survey,) = st.surveys()
        assert survey["status"] == "interrupted"
        runs = {r["experiment"]: r for r in st.survey(survey["id"])["runs"]}
        fill_alloc = st.run(runs["fill_alloc"]["id"])
    # the survey runs in rounds of replicas: fill_alloc's first replica was
    # measured before latency's began, its second never -- interrupted, and
    # its samples kept
    assert {e: r["status"] for e, r in runs.items()} == {"fill_alloc": "interrupted",
                                                        "latency": "interrupted"}
    assert fill_alloc["n_samples"] > 0 and "1 of 3 replicas" in fill_alloc["error"]
    html = Path(out).read_text()
    assert "incomplete" in html.lower() and "interrupted" in html.lower()


def test_budget_caution_names_the_threshold_and_the_slowest_steps():
    from memfx.cli.survey import budget_caution, timing, timing_line
    from memfx.model.findings import THRESHOLDS
    budget = THRESHOLDS["survey_budget_quick"].value
    steps = {"latency": 30.0, "fill": 20.0, "copy": 10.0, "report": 5.0}
    assert budget_caution("quick", budget, steps) is None            # at the budget: fine
    over = budget_caution("quick", budget + 1, steps)
    assert over["id"] == "survey_over_budget"
    assert over["threshold"] == budget and over["value"] == budget + 1
    assert "survey_budget_quick" in over["message"] and "latency 30 s" in over["message"]
    assert "report" not in over["message"]                           # the three slowest only
    t = timing("quick", 66.04, steps)
    assert t["total_s"] == 66.0 and t["budget_s"] == budget and t["steps_s"]["fill"] == 20.0
    line = timing_line("quick", 66, steps)
    assert line.index("latency") < line.index("fill") < line.index("copy")
    assert f"of a {budget:.0f} s budget" in line
    # the full survey has its own budget
    full = budget_caution("full", THRESHOLDS["survey_budget_full"].value + 1, steps)
    assert full["threshold"] == THRESHOLDS["survey_budget_full"].value
    assert "full preset" in full["advice"] and "quick" not in full["advice"]


@pytest.mark.measuring
def test_survey_json_carries_timing_and_analyses_each_run_once(tmp_path, monkeypatch):
    """The report and the survey document share one analysis per run."""
    import json
    db, out = str(tmp_path / "s.db"), str(tmp_path / "r.html")
    p = run_cli("survey", "--quick", "--only", "fill_alloc", "-q", "--json", "-o", out, db=db)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert set(doc["timing"]["steps_s"]) == {"fill_alloc", "analysis", "report"}
    assert doc["timing"]["budget_threshold"] == "survey_budget_quick"
    assert doc["timing"]["total_s"] >= doc["timing"]["steps_s"]["fill_alloc"]
    assert all(w["id"] == "survey_over_budget" for w in doc["warnings"])
    # the shared documents: the report of a survey made from them is the
    # report made by analysing again
    from memfx.analysis import documents as docs_mod
    from memfx.report.report import build_report
    calls = []
    real = docs_mod.document
    monkeypatch.setattr(docs_mod, "document",
                        lambda *a, **k: calls.append(a[0]["id"]) or real(*a, **k))
    with Store(db) as st:
        # in this process (jobs=1), where the calls can be counted; the
        # forked analysis gives the same documents
        shared = docs_mod.survey_run_documents(st, doc["survey_id"], jobs=1)
        assert len(calls) == 0            # the survey stored its analysis (issue 42)
        docs_mod.reanalyse()
        try:
            assert docs_mod.survey_run_documents(st, doc["survey_id"], jobs=1) == shared
        finally:
            docs_mod.reanalyse(False)
        assert len(calls) == 1            # asked to, it analyses each run once
        assert docs_mod.survey_run_documents(st, doc["survey_id"], jobs=2) == shared
        calls.clear()
        again = docs_mod.survey_document(st, doc["survey_id"], documents=shared)
        assert not calls                                            # not analysed again
        assert again["answers"] == docs_mod.survey_document(st, doc["survey_id"])["answers"]
        assert all("values" not in pt for d in again["documents"] for pt in d["points"])

        def strip(html):
            return "\n".join(line for line in html.splitlines() if "UTC" not in line)
        assert strip(build_report(st, [doc["survey_id"]], shared)) == \
            strip(build_report(st, [doc["survey_id"]]))


def test_estimate_ignores_survey_runs_and_counts_replicas():
    """A survey's run spans the rounds between its replicas (minutes of other
    experiments), so only runs measured alone, with as many replicas, say
    how long one takes; else the experiment's guess for one replica x R."""
    from memfx.cli.survey import estimate

    class Exp:
        @staticmethod
        def estimate_seconds(params, machine):
            return 10.0

    class FakeStore:
        def __init__(self, runs):
            self._runs = runs

        def runs(self, experiment=None, status=None):
            return self._runs

    in_survey = {"preset": "quick", "duration_s": 300.0, "survey_id": "s-1",
                 "params": {"replicas": 3}}
    alone_r2 = {"preset": "quick", "duration_s": 20.0, "survey_id": None,
                "params": {"replicas": 2}}
    alone_r3 = {"preset": "quick", "duration_s": 33.0, "survey_id": None,
                "params": {"replicas": 3}}
    params = {"replicas": 3}
    assert estimate(FakeStore([in_survey, alone_r2]), "x", "quick", Exp, params, {}) == \
        (30.0, "rough guess")
    assert estimate(FakeStore([in_survey, alone_r3]), "x", "quick", Exp, params, {}) == \
        (33.0, "from earlier runs")


def test_a_survey_estimate_comes_from_earlier_surveys_like_it():
    """The survey's opening line: the median wall time of earlier complete
    surveys with the same preset, as many runs and advice the same way;
    none of those -> None (the per-run guess is printed as a rough guess)."""
    from memfx.cli.survey import past_survey_seconds

    def survey(preset, n_runs, seconds, status="complete", argv=("survey", "--quick")):
        return {"status": status, "preset": preset, "n_runs": n_runs, "argv": list(argv),
                "started": "2026-11-26T04:00:00Z",
                "finished": f"2026-11-26T04:{seconds // 60:02d}:{seconds % 60:02d}Z"}

    class FakeStore:
        def __init__(self, surveys):
            self._surveys = surveys

        def surveys(self):
            return self._surveys

    names = ["a", "b"]
    alike = [survey("quick", 2, 130), survey("quick", 2, 150), survey("quick", 2, 140)]
    others = [survey("full", 2, 900), survey("quick", 1, 20), survey("quick", 2, 10, "interrupted"),
              survey("quick", 2, 60, argv=("survey", "--quick", "--no-advise"))]
    assert past_survey_seconds(FakeStore(others + alike), "quick", names, True) == 140.0
    assert past_survey_seconds(FakeStore(others), "quick", names, False) == 60.0
    assert past_survey_seconds(FakeStore(others[:3]), "quick", names, True) is None
