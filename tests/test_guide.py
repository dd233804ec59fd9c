"""docs/adding-an-effect.md works as written: its toy kernel file and toy
experiment package (its protocol and its analysis), taken from the guide's
own blocks (each marked `<!-- toy-kernel: PATH -->`, `<!-- toy-experiment:
PATH -->`, `<!-- toy-analysis: PATH -->`), are put at those paths in a copy
of the package, which is built and run through the CLI and the runner into
answers.  A bad kernel row is refused at import,
with the row named, not called.  And docs/architecture.md shows today's
document versions and names every module."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "adding-an-effect.md"
BLOCK = re.compile(r"<!-- (toy-[a-z]+): (\S+) -->\n```[a-z]*\n(.*?)```", re.S)


def guide_blocks():
    """{marker: (path in the package, text)} of the guide's marked blocks."""
    return {m[1]: (m[2], m[3]) for m in BLOCK.finditer(GUIDE.read_text())}


def test_the_guide_marks_one_kernel_file_and_one_experiment_package():
    blocks = guide_blocks()
    assert set(blocks) == {"toy-kernel", "toy-experiment", "toy-analysis"}
    kernel_path, kernel = blocks["toy-kernel"]
    module_path, module = blocks["toy-experiment"]
    analysis_path, analysis = blocks["toy-analysis"]
    assert re.fullmatch(r"src/memfx/lab/_core/kernels/\w+\.c", kernel_path)
    # an effect is a package: its protocol (__init__.py) and its analysis
    assert re.fullmatch(r"src/memfx/experiments/\w+/__init__\.py", module_path)
    assert analysis_path == module_path.replace("__init__.py", "analysis.py")
    assert "MFX_KERNEL_TABLE(" in kernel and ".footprint = " in kernel
    for attribute in ("questions = ", "plots = ", "params = ", "presets = "):
        assert attribute in module
    assert "def analyze(" in analysis and "from .analysis import" in module
    # what the guide names exists (gone names do not come back)
    text = GUIDE.read_text()
    assert "findings.effect_verdict" not in text and "kernel_table.c" not in text
    for name in re.findall(r"`experiments/([\w/]+\.py|\w+/)`", text):
        assert (ROOT / "src" / "memfx" / "experiments" / name).exists(), name


def test_architecture_shows_the_current_versions_and_every_module():
    from memfx.analysis import results
    from memfx.store import schema, store
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert re.findall(r'"schema_version": (\d+)', text) == [str(results.RESULT_SCHEMA_VERSION)]
    assert re.findall(r'"format_version": (\d+)', text) == [str(schema.EXPORT_FORMAT_VERSION)]
    assert f"(schema version {store.SCHEMA_VERSION}:" in text
    # every module of the layer packages, by its path in the package
    # (`model/units.py`); the experiments are the guide's and the table's:
    # every effect's package by its name (`tlb/`)
    src = ROOT / "src" / "memfx"
    modules = sorted(p.relative_to(src).as_posix() for p in src.rglob("*.py")
                     if p.name not in ("__init__.py", "__main__.py")
                     and p.relative_to(src).parts[0] != "experiments")
    assert len(modules) > 50 and "model/units.py" in modules and "api.py" in modules
    assert [m for m in modules if f"`{m}`" not in text] == []
    effects = sorted(p.parent.name for p in (src / "experiments").glob("*/__init__.py"))
    assert len(effects) > 10 and [e for e in effects if f"`{e}/`" not in text] == []


def _package_with(tmp_path, files):
    """A copy of the package source with `files` ({path: text}) added, built in place."""
    if not (ROOT / "setup.py").exists():
        pytest.skip("needs the source tree (setup.py) next to tests/")
    if not shutil.which(os.environ.get("CC", "cc")):
        pytest.skip("needs a C compiler")
    copy = tmp_path / "pkg"
    ignore = shutil.ignore_patterns("*.so", "__pycache__", "build", "*.egg-info")
    shutil.copytree(ROOT / "src", copy / "src", ignore=ignore)
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, copy / name)
    for path, text in files.items():
        assert not (copy / path).exists(), f"{path} already exists in the package"
        (copy / path).parent.mkdir(parents=True, exist_ok=True)
        (copy / path).write_text(text)
    build = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                           cwd=copy, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    return copy


def _python(copy, *args, timeout=120):
    env = dict(os.environ, PYTHONPATH=str(copy / "src"))
    return subprocess.run([sys.executable, *args], cwd=copy, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.measuring
def test_the_guides_toy_effect_builds_runs_and_answers(tmp_path):
    blocks = guide_blocks()
    copy = _package_with(tmp_path, dict(blocks.values()))
    db = str(tmp_path / "toy.db")
    p = _python(copy, "-m", "memfx", "run", "toy", "--set", "size=4K", "--set", "samples=3",
                "--set", "min_sample_ms=0.05", "--set", "replicas=1", "--json", "--db", db)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    # the copy's memfx ran it, not the installed one
    assert doc["experiment"] == "toy" and doc["status"] == "complete", doc.get("error")
    assert {pt["arm"] for pt in doc["points"]} == {"small", "large"}
    assert all(pt["metric"] == "ns_per_pass" for pt in doc["points"])
    answers = {a["question"]: a for a in doc["answers"]}
    assert list(answers) == ["toy.pass_ns", "toy.large_vs_small"]
    one = answers["toy.pass_ns"]
    assert one["verdict"] == "measured" and one["unit"] == "ns" and one["value"] > 0
    assert one["evidence"] == ["small|size_bytes=4096"]
    # four times the words per pass: the row's size and traffic reached the
    # kernel (a size lost on the way reads ~1x); the bound above is loose,
    # three samples of one replica on a busy host read 6.1x once
    ratio = answers["toy.large_vs_small"]
    assert ratio["unit"] == "ratio" and 2.5 < ratio["value"] < 16, ratio
    # its details, built with detail(): one per arm, the keys in the order given
    assert [d["label"] for d in ratio["details"]] == ["small 4096 B", "large 16384 B"]
    assert list(ratio["details"][0]) == ["label", "value", "unit", "ci_low", "ci_high",
                                         "size_bytes", "point"]


def _without_footprint(kernel):
    return "".join(line for line in kernel.splitlines(keepends=True)
                   if ".footprint = " not in line)


def _named_chase_ptr(kernel):
    return kernel.replace('.name = "toy_sum"', '.name = "chase_ptr"')


@pytest.mark.measuring
@pytest.mark.parametrize("change, error", [
    (_without_footprint, "kernel row toy_sum (table toy, src/memfx/lab/_core/kernels/toy.c) "
                         "has no .footprint"),
    (_named_chase_ptr, "kernel row chase_ptr is defined twice (tables chase and toy)"),
])
def test_a_bad_kernel_row_is_refused_at_import_by_name(tmp_path, change, error):
    path, kernel = guide_blocks()["toy-kernel"]
    changed = change(kernel)
    assert changed != kernel
    copy = _package_with(tmp_path, {path: changed})
    p = _python(copy, "-c", "import memfx.lab._core")
    assert p.returncode == 1, (p.returncode, p.stderr)      # an exception, not a signal
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: memfx.lab._core: " + error), last
