"""benchmarks/peers.py can fail (issue 26 item 8): it runs the installed
memfx, says so when that memfx has no C core, and a table in which memfx
measured nothing is an error, not a comparison."""
import importlib.util
import os
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "peers.py"


@pytest.fixture
def peers(monkeypatch):
    spec = importlib.util.spec_from_file_location("peers_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)     # dataclasses look their module up
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "pin_to", lambda cpu: sorted(os.sched_getaffinity(0))[-1])
    return module


@pytest.mark.measuring
def test_memfx_jobs_never_put_the_repositorys_src_on_the_path(peers):
    env = peers.memfx_env()
    assert "src" not in env.get("PYTHONPATH", "")
    assert peers.memfx_problem(sys.executable) is None       # the memfx the tests run


@pytest.mark.measuring
def test_a_memfx_without_its_c_core_is_one_clear_error(peers, tmp_path, monkeypatch, capsys):
    # what the repository's src/ looks like before a build: memfx/lab/_core is
    # a directory without the extension, so it imports as an empty namespace
    (tmp_path / "memfx" / "lab" / "_core").mkdir(parents=True)
    (tmp_path / "memfx" / "__init__.py").write_text("")
    (tmp_path / "memfx" / "lab" / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    problem = peers.memfx_problem(sys.executable)
    assert problem and "kernels" in problem and "pip install" in problem
    first = peers.make_plan(0, True, {"latency"}, None).measures[0].label.lower()
    assert peers.main(["--quick", "--reps", "1", "--only", "latency", "--match", first]) == 2
    err = capsys.readouterr().err
    assert "kernels" in err and len(err.strip().splitlines()) == 1


@pytest.mark.measuring
def test_a_table_without_a_memfx_figure_exits_non_zero(peers, monkeypatch, capsys):
    def failing(job, cpu):
        raise peers.PeerError("exit status 1: AttributeError")
    monkeypatch.setattr(peers, "run_job", failing)
    monkeypatch.setattr(peers, "TOOLS", peers.TOOLS[:1])      # memfx alone: no peer runs
    first = peers.make_plan(0, True, {"latency"}, None).measures[0].label.lower()
    status = peers.main(["--quick", "--reps", "1", "--only", "latency", "--match", first])
    out = capsys.readouterr()
    assert status == 1, out.err
    assert "memfx produced no figure" in out.err


def test_the_cpu_share_note_skips_tools_that_idle_by_design(peers):
    likwid = next(t for t in peers.TOOLS if t.name == "likwid-bench")
    assert likwid.idles_by_design
    assert not next(t for t in peers.TOOLS if t.name == "multichase").idles_by_design
