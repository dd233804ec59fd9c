"""The answers of stored runs do not change unless we mean them to (issue
24: a refactoring leaves a survey's documents as they were).

Two stored runs are imported and analysed again, and every answer is
compared with the one recorded in tests/data/stored_answers.json: its
verdict, value, CI, evidence and CI scope.  A change of analysis that is
meant (a fix) regenerates that file, and the diff shows what moved:

    python tests/test_stored_answers.py      # rewrites tests/data/stored_answers.json

- export_latency_small.json: one replica of a small latency sweep;
- export_matmul_quick.json: a quick matmul run of three replicas on a KVM
  guest (replica-level CIs, effect bands, the guest's drift in the CIs).
"""
import json
import math
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
RUNS = ("export_latency_small.json", "export_matmul_quick.json")
GOLDEN = DATA / "stored_answers.json"
KEYS = ("verdict", "value", "ci_low", "ci_high", "evidence", "ci_scope", "unit")


def _answers(tmp_dir):
    from memfx.documents import run_document
    from memfx.store import Store
    out = {}
    for name in RUNS:
        with Store(Path(tmp_dir) / f"{name}.db") as st:
            run_id = st.import_run(json.loads((DATA / name).read_text()))
            doc = run_document(st, run_id)
        out[name] = {a["question"]: {k: a.get(k) for k in KEYS} for a in doc["answers"]}
    return out


def _same(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def test_stored_runs_give_the_answers_recorded(tmp_path):
    want = json.loads(GOLDEN.read_text())
    got = _answers(tmp_path)
    assert sorted(got) == sorted(want)
    moved = []
    for name, answers in want.items():
        assert sorted(got[name]) == sorted(answers), name
        for q, fields in answers.items():
            for k, v in fields.items():
                if not _same(got[name][q].get(k), v):
                    moved.append(f"{name} {q}.{k}: {v!r} -> {got[name][q].get(k)!r}")
    assert not moved, "answers moved (regenerate on purpose only):\n" + "\n".join(moved)


def test_the_recorded_matmul_run_is_the_multi_replica_case_it_claims():
    want = json.loads(GOLDEN.read_text())["export_matmul_quick.json"]
    scopes = {a["ci_scope"] for a in want.values() if a.get("ci_scope")}
    assert any(s.startswith("3 replicas") for s in scopes)
    assert any("drift" in s for s in scopes)          # measured in a guest
    assert any(a["verdict"] == "detected" for a in want.values())


if __name__ == "__main__":
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        GOLDEN.write_text(json.dumps(_answers(tmp), indent=1, sort_keys=True) + "\n")
    sys.exit(0)
