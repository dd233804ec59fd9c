"""`memfx survey`: selection, a complete survey with its report, and Ctrl-C
keeping the finished runs and writing an incomplete report."""
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import run_cli
from memfx.errors import MemfxError
from memfx.store import Store
from memfx.survey import select


def test_select_orders_and_filters():
    names = select()
    assert names[0] == "latency" and len(names) == len(set(names))
    assert select(only=["fill_alloc", "latency"]) == ["fill_alloc", "latency"]   # as given
    assert "latency" not in select(skip=["latency"])
    with pytest.raises(MemfxError, match="unknown experiment"):
        select(only=["nosuch"])
    with pytest.raises(MemfxError, match="no experiment"):
        select(only=["latency"], skip=["latency"])


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
    html = open(out).read()
    assert "fill_alloc" in html and html.lstrip().lower().startswith("<!doctype html>")


def test_survey_ctrl_c_keeps_runs_and_reports_incomplete(tmp_path):
    db, out = str(tmp_path / "s.db"), str(tmp_path / "r.html")
    proc = subprocess.Popen([sys.executable, "-m", "memfx.cli", "survey", "--quick", "-q",
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
        status = {r["experiment"]: r["status"] for r in st.survey(survey["id"])["runs"]}
    assert status == {"fill_alloc": "complete", "latency": "interrupted"}
    html = open(out).read()
    assert "incomplete" in html.lower() and "interrupted" in html.lower()
