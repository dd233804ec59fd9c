"""The README's Python examples run as written (in a child process, with its
default database in a temporary XDG_DATA_HOME), and the pandas extra they
ask for is declared."""
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def _has_pandas():
    try:
        import pandas  # noqa: F401
    except ImportError:
        return False
    return True


def test_the_readme_installs_the_pandas_extra_it_uses():
    text = README.read_text()
    blocks = python_blocks()
    assert len(blocks) >= 2 and any("memfx.answers(" in b for b in blocks)
    assert "pip install '.[pandas]'" in text and "memfx[pandas]" in text
    toml = (ROOT / "pyproject.toml").read_text()
    extras = toml.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    assert re.search(r'^pandas = \["pandas', extras, flags=re.M)


# Between the README's blocks: the first measures a run; the second reads a
# survey, so one is made here from that run (exported raw, imported as the
# one run of a complete survey).
MAKE_SURVEY = textwrap.dedent("""
    from memfx.store.store import open_store
    _st = open_store(None)
    _raw = _st.export_run(doc["run_id"])
    _raw["run"]["id"] = doc["run_id"] + "-s"
    _raw["run"]["survey_id"] = "s-20260101-000000-test"
    _raw["survey"] = {"id": "s-20260101-000000-test", "started": _raw["run"]["started"],
                      "finished": _raw["run"]["finished"], "status": "complete",
                      "preset": "quick", "argv": ["survey", "--quick"], "note": None,
                      "pid": 1, "host": _raw["run"]["host"]}
    _st.import_run(_raw)
    _st.close()
""")

CHECKS = textwrap.dedent("""
    import json as _json
    print("RESULT " + _json.dumps({
        "answers": list(answers.columns), "n_answers": len(answers),
        "questions": sorted(answers["question"]), "survey_kind": survey["kind"],
        "seed_rows": len(seeds), "seed_all_headline": bool(seeds["headline"].all()),
        "rows": [r["question"] for r in diff["rows"]], "machine": list(answers["machine_id"])}))
""")


@pytest.mark.measuring
@pytest.mark.skipif(not _has_pandas(), reason="pandas is not installed (pip install '.[pandas]')")
def test_the_readme_python_examples_run(tmp_path):
    first, second = python_blocks()[:2]
    script = first + MAKE_SURVEY + second + CHECKS
    env = {k: v for k, v in os.environ.items() if k != "MEMFX_DB"}
    env["XDG_DATA_HOME"] = str(tmp_path)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=600, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (tmp_path / "memfx" / "results.db").exists()       # the default store was used
    got = json.loads(next(line for line in p.stdout.splitlines()
                          if line.startswith("RESULT "))[len("RESULT "):])
    assert got["answers"][:10] == ["question", "verdict", "value", "unit", "ci_low", "ci_high",
                                   "run_id", "survey_id", "machine_id", "because"]
    assert "latency.l1d" in got["questions"] and got["n_answers"] == len(got["questions"])
    assert all(m and m.startswith("m-") for m in got["machine"])
    assert got["survey_kind"] == "survey"
    assert got["seed_rows"] >= 1 and got["seed_all_headline"]
    assert got["rows"] and all(q.startswith("latency.") for q in got["rows"])


def test_answers_without_pandas_names_the_extra(monkeypatch):
    import memfx
    monkeypatch.setitem(sys.modules, "pandas", None)      # as if it were not installed
    with pytest.raises(memfx.MemfxError, match=r"memfx\[pandas\]"):
        memfx.answers({"answers": []})


def test_the_readme_is_a_front_door():
    """Issue 42: at most 150 lines, the two quick-start commands, no round's
    figures or dates (they live in docs/stability.md and docs/peers.md), and
    every doc it links to exists."""
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    quick = text.split("## Quick start", 1)[1].split("```", 2)[1].strip().splitlines()
    assert quick == ["pip install . && memfx survey --quick",
                     "pip install '.[test]' && python -m pytest -q"]
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text)
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).exists(), link
    assert "EXAMPLE_SCREEN" not in text


def test_the_glossary_names_every_seed_and_term_the_screens_use():
    from memfx.model.answers import SEEDS
    glossary = (ROOT / "docs" / "glossary.md").read_text()
    for number, (title, question) in SEEDS.items():
        assert f"| {number} | {title} | {question} |" in glossary
    for term in ("answer", "arm", "band", "busy", "cell", "CI", "host state", "host-shared",
                 "replica", "seed", "survey"):
        assert f"**{term}**" in glossary, term


def test_the_glossary_page_is_written_from_the_one_glossary():
    """docs/glossary.md is glossary.markdown() (python -m
    memfx.report.glossary > docs/glossary.md): the report's fold and the
    page cannot drift apart."""
    from memfx.report import glossary
    assert (ROOT / "docs" / "glossary.md").read_text() == glossary.markdown()
