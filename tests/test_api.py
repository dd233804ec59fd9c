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
