"""memfx compare end to end: two runs on one machine share a machine id and
compare unchanged; a copy whose latency samples are 3x slower regresses.  3x, not 1.5x: with
two replicas a side the ratio's CI is t(2) = 4.3 times the replicas' spread,
and the tiny runs here may disagree by 10 % -- a 1.5x change is then
honestly "inconclusive"; 3x clears a 20 % band unless they disagree by 30 %."""
import json

import pytest

from conftest import run_cli

# every test here starts a worker or a process, or times kernels
pytestmark = pytest.mark.measuring

SLOWER = 3.0
TINY = ["--set", "max_size=64K", "--set", "samples=5", "--set", "min_sample_ms=0.05",
        "--set", "per_octave=2", "--set", "refine=false"]


def _run(db):
    p = run_cli("run", "latency", *TINY, "--json", db=db)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_compare_runs_machine_id_and_a_regression(tmp_path):
    db = str(tmp_path / "c.db")
    a, b = _run(db), _run(db)
    assert a["machine_id"] == b["machine_id"] and a["machine_id"].startswith("m-")
    p = run_cli("compare", a["run_id"], b["run_id"], "--threshold", "60%", "--json", db=db)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    assert {r["question"] for r in doc["rows"]} >= {"latency.l1d", "latency.memory"}
    assert not doc["regressed"]

    # a copy of run A with every sample SLOWER times slower, imported as another run
    raw = tmp_path / "a.json"
    assert run_cli("export", a["run_id"], "--format", "raw", "-o", str(raw), db=db).returncode == 0
    slow = json.loads(raw.read_text())
    slow["run"]["id"] = a["run_id"] + "-slow"
    for s in slow["samples"]:
        for key in ("value", "ns", "ticks", "cycles_est"):
            if isinstance(s.get(key), (int, float)):
                s[key] = round(s[key] * SLOWER) if isinstance(s[key], int) else s[key] * SLOWER
    path = tmp_path / "slow.json"
    path.write_text(json.dumps(slow))
    assert run_cli("import", str(path), db=db).returncode == 0
    p = run_cli("compare", a["run_id"], slow["run"]["id"], "--threshold", "20%", db=db)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "regressed" in p.stderr and "latency.l1d" in p.stderr
    md = run_cli("compare", a["run_id"], slow["run"]["id"], "--format", "markdown", db=db)
    assert md.returncode == 1 and "| `latency.l1d` |" in md.stdout
    row = next(r for r in json.loads(run_cli("compare", a["run_id"], slow["run"]["id"],
                                              "--json", db=db).stdout)["rows"]
               if r["question"] == "latency.l1d")
    assert abs(row["ratio"] - SLOWER) < 0.01 and row["verdict"] == "regressed"
    assert row["ratio_ci_low"] > 1.05 and row["ratio_ci_high"] > SLOWER


def test_compare_bad_input_is_one_line(tmp_path):
    db = str(tmp_path / "c.db")
    _run(db)
    for args in (["compare", "latest", "nope"], ["compare", "latest", "latest", "--threshold", "x"],
                 ["compare", "m-0000000000000000", "latest"]):
        p = run_cli(*args, db=db)
        assert p.returncode == 2 and p.stderr.count("\n") == 1, (args, p.stderr)
