"""The answers of stored runs do not change unless we mean them to (issue
24: a refactoring leaves a survey's documents as they were).

Two stored runs are imported and analysed again, and every answer is
compared with the one recorded in tests/data/stored_answers.json: its
verdict, value, CI, evidence and CI scope.  A change of analysis that is
meant (a fix) regenerates that file, and the diff shows what moved:

    python tests/test_stored_answers.py      # rewrites tests/data/stored_answers.json

- export_latency_small.json: one replica of a small latency sweep;
- export_matmul_quick.json: a quick matmul run of three replicas on a KVM
  guest (replica-level CIs, effect bands, the guest's drift in the CIs);
- survey_quick.json.gz: the runs of one quick survey (three replicas each,
  a KVM guest with a 480 MiB L3), so that a change anywhere in the
  analysis shows here (each run's export, gzipped): all but copy, aliasing
  and store-forward, whose 24 MB of samples have analysis tests of their own.
"""
import gzip
import json
import math
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data"
RUNS = ("export_latency_small.json", "export_matmul_quick.json")
SURVEY = "survey_quick.json.gz"
GOLDEN = DATA / "stored_answers.json"
KEYS = ("verdict", "value", "ci_low", "ci_high", "evidence", "ci_scope", "unit")


def _answers(tmp_dir):
    from memfx.analysis.documents import run_document
    from memfx.store.store import Store
    exports = [(name, json.loads((DATA / name).read_text())) for name in RUNS]
    with gzip.open(DATA / SURVEY, "rt") as f:
        exports += [(f"{SURVEY}:{run['run']['experiment']}", run) for run in json.load(f)["runs"]]
    out = {}
    with Store(Path(tmp_dir) / "stored.db") as st:
        for name, export in exports:
            doc = run_document(st, st.import_run(export))
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


def test_the_recorded_survey_is_a_whole_quick_survey():
    want = json.loads(GOLDEN.read_text())
    runs = {name.split(":", 1)[1] for name in want if name.startswith(SURVEY)}
    assert {"bandwidth", "latency", "fill", "matmul", "atomics", "tlb", "sharing", "prefetch",
            "assoc", "misaligned", "fill_alloc"} <= runs
    scopes = {a["ci_scope"] for name, answers in want.items() if name.startswith(SURVEY)
              for a in answers.values() if a.get("ci_scope")}
    assert any(s.startswith("3 replicas") for s in scopes)


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


def test_answer_sentences_print_sizes_once(tmp_path):
    """One formatter: a size is "960 MiB", never with a unit appended twice
    ("960 MiBB" came from code that added its own "B" after format_size)."""
    import re

    from memfx.analysis.documents import run_document
    from memfx.store.store import Store
    with gzip.open(DATA / SURVEY, "rt") as f:
        runs = json.load(f)["runs"]
    with Store(tmp_path / "s.db") as st:
        texts = [a.get("because") or "" for run in runs
                 for a in run_document(st, st.import_run(run))["answers"]]
    doubled = [t for t in texts if re.search(r"\d (?:KiB|MiB|GiB|B)B", t)]
    assert texts and not doubled, doubled[:3]
