"""Nothing a user types or imports can destroy results or run foreign code
(issue 14, items 1 and 4-7), and the CLI conventions of issue 9 item 8:
each reproducer of the audit is a test here."""
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import memfx
from conftest import run_cli
from memfx.advice.advise import run_libc_child
from memfx.cli import main as cli
from memfx.lab.machine import fingerprint
from memfx.model.errors import MemfxError
from memfx.model.outputs import atomic_output, check_output_path, safe_name_part
from memfx.report.render import clean, findings_table, machine_table, points_table
from memfx.running.runner import import_path, run_experiment, worker_command
from memfx.store.store import Store

TINY = ["--set", "max_size=64K", "--set", "samples=3", "--set", "min_sample_ms=0.05",
        "--set", "per_octave=1", "--set", "refine=false"]
SRC = os.path.dirname(os.path.dirname(os.path.abspath(memfx.__file__)))


def dump(db):
    """What the store holds of what was measured: every row but the stored
    analyses (derived documents a reader may add, issue 42)."""
    con = sqlite3.connect(db)
    try:
        return "\n".join(line for line in con.iterdump()
                         if not line.startswith('INSERT INTO "analyses"'))
    finally:
        con.close()


def one_line_exit_2(p, fragment=""):
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], p.stderr
    assert "Traceback" not in p.stderr


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A database holding one complete tiny latency run, and its raw export."""
    base = tmp_path_factory.mktemp("safety")
    db = str(base / "t.db")
    p = run_cli("run", "latency", *TINY, "--json", "--label", "host=a", db=db)
    assert p.returncode == 0, p.stderr
    run_id = json.loads(p.stdout)["run_id"]
    raw = base / "raw.json"
    assert run_cli("export", run_id, "--format", "raw", "-o", str(raw), db=db).returncode == 0
    return db, run_id, json.loads(raw.read_text())


# ---- 1. outputs never go over the database --------------------------------------

@pytest.mark.measuring
@pytest.mark.parametrize("args", [
    ["export", "latest", "--format", "raw", "-o", "{db}"],
    ["export", "latest", "-o", "{db}"],
    ["report", "-o", "{db}"],
    ["report", "-o", "{db}-wal"],
    ["plot", "latest", "-o", "{link}"],
    ["survey", "--only", "latency", "-q", "-o", "{db}"],     # refused before measuring
])
def test_an_output_path_that_is_the_database_is_refused(tiny, tmp_path, args):
    db, _, _ = tiny
    link = tmp_path / "link.png"
    link.symlink_to(db)
    before = dump(db)
    size = os.path.getsize(db)
    p = run_cli(*[a.format(db=db, link=link) for a in args], db=db, timeout=60)
    one_line_exit_2(p, "results database")
    assert os.path.getsize(db) == size and dump(db) == before


@pytest.mark.measuring
def test_a_hard_link_to_the_database_is_the_database(tiny, tmp_path):
    db, _, _ = tiny
    hard = tmp_path / "hard.json"
    os.link(db, hard)
    before = dump(db)
    one_line_exit_2(run_cli("export", "latest", "-o", str(hard), db=db), "results database")
    assert dump(db) == before


@pytest.mark.measuring
def test_a_failing_export_leaves_the_old_file_whole(tiny, tmp_path):
    db, _, _ = tiny
    target = tmp_path / "keep.json"
    target.write_text("precious\n")
    p = run_cli("export", "no-such-run", "-o", str(target), db=db)
    one_line_exit_2(p, "no run")
    assert target.read_text() == "precious\n"


def test_atomic_output_replaces_whole_or_not_at_all(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_output(target) as tmp:
            with open(tmp, "w") as f:
                f.write("half")
            raise RuntimeError("writer failed")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.json"]              # no temporary left behind
    with atomic_output(target) as tmp:
        assert os.path.dirname(tmp) == str(tmp_path) and tmp.endswith(".json")
        with open(tmp, "w") as f:
            f.write("new")
        assert target.read_text() == "old"                   # not before it is complete
    assert target.read_text() == "new" and os.listdir(tmp_path) == ["out.json"]


# ---- 6. output paths ------------------------------------------------------------

@pytest.mark.measuring
@pytest.mark.parametrize("args, fragment", [
    (["export", "latest", "-o", "{dir}"], "is a directory"),
    (["export", "latest", "-o", "{dir}/missing/dir/x.json"], "does not exist"),
    (["plot", "latest", "-o", "{dir}/missing/dir/x.png"], "does not exist"),
    (["plot", "latest", "-o", "{dir}"], ".png"),
    (["plot", "latest", "-o", "{dir}/d.png"], "is a directory"),
    (["report", "-o", "{dir}"], "is a directory"),
    (["survey", "-q", "--only", "latency", "-o", "{dir}/missing/r.html"], "does not exist"),
])
def test_bad_output_paths_are_one_line_exit_2(tiny, tmp_path, args, fragment):
    db, _, _ = tiny
    (tmp_path / "d.png").mkdir()
    before = dump(db)
    p = run_cli(*[a.format(dir=tmp_path) for a in args], db=db, timeout=60)
    one_line_exit_2(p, fragment)
    assert dump(db) == before


@pytest.mark.measuring
def test_default_file_names_are_sanitised(tiny, tmp_path):
    db, run_id, raw = tiny
    for evil in ("../../escape/" + "x" * 10_000, "a/b"):
        assert "/" not in safe_name_part(evil) and len(safe_name_part(evil)) <= 80
        assert not safe_name_part(evil).startswith(".")
    # A run id with slashes, 10 kB long, as an older memfx's import let in.
    other = str(tmp_path / "o.db")
    shutil.copy(db, other)
    evil = "../evil/" + "y" * 10_000
    con = sqlite3.connect(other)
    for table, column in (("runs", "id"), ("samples", "run_id"), ("artifacts", "run_id")):
        con.execute(f"UPDATE {table} SET {column} = ? WHERE {column} = ?", (evil, run_id))
    con.commit()
    con.close()
    work = tmp_path / "work"
    work.mkdir()
    p = subprocess.run([sys.executable, "-m", "memfx", "plot", "latest", "--db", other],
                       capture_output=True, text=True, cwd=work, timeout=120,
                       env=dict(os.environ, PYTHONPATH=SRC))
    assert p.returncode == 0, p.stderr
    (made,) = os.listdir(work)
    assert made.startswith("memfx-") and made.endswith(".png") and len(made) < 100
    assert not (tmp_path / "evil").exists()


# ---- 4. the measuring children do not run code from the current directory -------

SHADOWS = ("json", "numpy", "random", "runpy")


def plant_shadows(directory, marker):
    for name in SHADOWS:
        (directory / f"{name}.py").write_text(
            f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\n")


@pytest.mark.measuring
def test_the_worker_does_not_import_from_the_current_directory(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    plant_shadows(tmp_path, marker)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))      # as `python -m memfx` from here would
    with Store(tmp_path / "r.db") as store:
        run_id = run_experiment("latency", store, fingerprint(), "quick",
                                {"max_size": "16K", "samples": "3", "min_sample_ms": "0.05",
                                 "per_octave": "1", "refine": "false"})
        assert store.run(run_id)["status"] == "complete"
    assert not marker.exists(), marker.read_text()


@pytest.mark.measuring
def test_the_worker_imports_memfx_from_where_the_parent_did(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cmd = worker_command()
    assert cmd[:3] == [sys.executable, "-I", "-c"]
    path = json.loads(cmd[4])
    assert path[0] == SRC and str(tmp_path) not in path and "" not in path
    probe = subprocess.run([sys.executable, "-I", "-c", "import sys, json; sys.path[:0] = "
                            "json.loads(sys.argv[1]); import memfx; print(memfx.__file__)",
                            json.dumps(import_path(SRC))], capture_output=True, text=True)
    assert probe.stdout.strip() == os.path.join(SRC, "memfx", "__init__.py"), probe.stderr


@pytest.mark.measuring
def test_the_libc_check_child_does_not_import_from_the_current_directory(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    plant_shadows(tmp_path, marker)
    monkeypatch.chdir(tmp_path)
    from memfx.lab import _core
    if not {k["name"]: k for k in _core.kernels()}.get("copy_libc", {}).get("supported"):
        pytest.skip("no copy_libc kernel row on this build")
    out = run_libc_child("copy_libc", [64], None, samples=1, min_ms=0.05)
    assert len(out[64]) == 1
    assert not marker.exists(), marker.read_text()


# ---- 5. stored strings are text, never markup or escape sequences ---------------

EVIL = "AMD [/] EPYC [link=https://example.invalid]click[/link] \x1b]0;title\x07\x1b[2J\x9b31m"


def rendered(renderable):
    from rich.console import Console
    con = Console(width=400, record=True, force_terminal=False, color_system=None)
    con.print(renderable)
    return con.export_text()


def test_clean_strips_every_control_character():
    out = clean("a\x1b[31mb\x07c\x9bd\ne\x7f")
    assert all(ch.isprintable() for ch in out) and "a" in out and "e" in out


@pytest.mark.measuring
def test_hostile_strings_render_as_typed(tiny):
    _, _, raw = tiny
    fp = dict(raw["machine"], cpu=dict(raw["machine"]["cpu"], model_name=EVIL))
    text = rendered(machine_table(fp, [], {}))
    assert "AMD [/] EPYC [link=https://example.invalid]click[/link]" in text
    assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text
    doc = {"experiment": "latency", "run_id": "r[/]1", "status": "complete", "points": [
        {"params": {"size_bytes": 1024, "note": "[bold]x"}, "arm": "[/]", "metric": "ns",
         "unit": "ns", "median": 1.0, "ci_low": 1.0, "ci_high": 1.0, "min": 1.0,
         "cycles_est": 4.0, "cv": 0.5, "n": 3, "rejected": 0}]}
    text = rendered(points_table(doc))
    assert "r[/]1" in text and "[/]" in text
    text = rendered(findings_table([{"verdict": "detected", "claim": "[red]x[/] \x1b[2J",
                                     "value": 1.0, "unit": "ns"}]))
    assert "[red]x[/]" in text and "\x1b" not in text


@pytest.mark.measuring
def test_runs_and_show_survive_a_hostile_import(tiny, tmp_path):
    _, _, raw = tiny
    doc = json.loads(json.dumps(raw))
    doc["run"]["error"] = "[bold]boom[/] [link=file:///etc/passwd]x[/link]"
    doc["samples"][0]["arm"] = "[/]"
    src = tmp_path / "evil.json"
    src.write_text(json.dumps(doc))
    db = str(tmp_path / "e.db")
    assert run_cli("import", str(src), db=db).returncode == 0
    # Import refuses control characters (schema.py); a database written by an
    # older memfx, or a CPU name as the kernel reports it, may still hold them.
    import sqlite3
    con = sqlite3.connect(db)
    with con:
        fp = json.loads(con.execute("SELECT machine_state FROM runs").fetchone()[0])
        # (the readers drop a fingerprint string with control characters, so
        # the CPU name carries only markup; the error and arm carry escapes)
        fp["cpu"]["model_name"] = "AMD [/] EPYC [link=https://example.invalid]click[/link]"
        con.execute("UPDATE machines SET fingerprint = ?", (json.dumps(fp),))
        con.execute("UPDATE runs SET machine_state = ?", (json.dumps(fp),))   # the run's own copy
        con.execute("UPDATE runs SET error = error || ?", ("\x1b[31m\x07",))
        con.execute("UPDATE samples SET arm = ? WHERE seq = 0", ("[/]\x1b[5m",))
    con.close()
    for args in (["runs"], ["show", "latest"]):
        p = run_cli(*args, db=db)
        assert p.returncode == 0, p.stderr
        assert "\x1b" not in p.stdout and "\x07" not in p.stdout
    assert "AMD [/] EPYC" in run_cli("runs", db=db).stdout


# ---- 7. bad input before anything is stored, odd environments -------------------

@pytest.mark.measuring
def test_an_unavailable_cpu_stores_no_run(tmp_path):
    db = str(tmp_path / "c.db")
    p = run_cli("run", "latency", *TINY, "--set", f"cpu={os.cpu_count() + 97}", db=db)
    one_line_exit_2(p, "cpu")
    assert not os.path.exists(db) or Store(db).runs() == []


@pytest.mark.measuring
def test_db_on_a_fifo_or_empty_is_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    one_line_exit_2(run_cli("runs", db=str(fifo), timeout=20), "not a regular file")
    p = run_cli("runs", "--db", "", timeout=20)
    one_line_exit_2(p, "empty")


@pytest.mark.measuring
def test_a_failed_import_into_a_new_path_leaves_nothing(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "memfx-run", "format_version": 1, "run": {}}))
    db = tmp_path / "new.db"
    one_line_exit_2(run_cli("import", str(bad), db=str(db)))
    assert [n for n in os.listdir(tmp_path) if n.startswith("new.db")] == []


@pytest.mark.measuring
def test_an_import_that_is_too_deep_or_a_fifo_is_one_line(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    one_line_exit_2(run_cli("import", str(deep), db=str(tmp_path / "x.db")), "nested too deeply")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    one_line_exit_2(run_cli("import", str(fifo), db=str(tmp_path / "x.db"), timeout=20),
                    "cannot read")
    assert not (tmp_path / "x.db").exists()


@pytest.mark.measuring
def test_survey_only_empty_runs_nothing(tmp_path):
    db = str(tmp_path / "s.db")
    one_line_exit_2(run_cli("survey", "--only", "", db=db), "--only")
    one_line_exit_2(run_cli("survey", "--only", " , ", db=db), "--only")
    assert not os.path.exists(db)


def test_ctrl_c_before_the_command_runs_is_one_line(monkeypatch, capsys):
    def interrupted():
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "build_parser", interrupted)
    handler = signal.getsignal(signal.SIGINT)
    assert cli.main(["runs"]) == cli.EXIT_INTERRUPTED
    assert capsys.readouterr().err == "memfx: interrupted\n"
    # main() is callable in-process: it leaves the caller's Ctrl-C handling
    # (and so what its children inherit) alone.
    assert signal.getsignal(signal.SIGINT) is handler


@pytest.mark.measuring
def test_an_ascii_terminal_gets_no_traceback(tiny):
    db, _, _ = tiny
    for args in (["runs"], ["show", "latest"], ["list"], ["machine"], ["run", "latency", "--help"]):
        p = run_cli(*args, db=db if args[0] in ("runs", "show") else None,
                    env={"PYTHONIOENCODING": "ascii"})
        assert p.returncode == 0 and "Traceback" not in p.stderr, (args, p.stderr)


@pytest.mark.measuring
def test_a_dead_running_run_is_not_shown_as_running(tiny, tmp_path):
    _, _, raw = tiny
    db = str(tmp_path / "dead.db")
    with Store(db) as st:
        run_id = st.begin_run("latency", raw["run"]["params"], "quick", raw["machine"])
        st.add_samples(run_id, [{k: v for k, v in s.items() if k != "seq"} for s in raw["samples"]])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    con = sqlite3.connect(db)
    con.execute("UPDATE runs SET pid = ? WHERE id = ?", (dead.pid, run_id))
    con.commit()
    con.close()
    before = dump(db)
    shown = json.loads(run_cli("show", run_id, "--json", db=db).stdout)
    assert shown["status"] == "interrupted"
    exported = json.loads(run_cli("export", run_id, "--format", "raw", db=db).stdout)
    assert exported["run"]["status"] == "interrupted"
    assert "interrupted" in run_cli("runs", db=db).stdout
    assert [r["status"] for r in json.loads(run_cli("runs", "--json", db=db).stdout)] == ["interrupted"]
    assert dump(db) == before                   # reading does not write
    for pid in ("abc", -1, 0, 2 ** 70):         # what an import may carry
        con = sqlite3.connect(db)
        con.execute("UPDATE runs SET pid = ? WHERE id = ?", (str(pid) if pid == 2 ** 70 else pid, run_id))
        con.commit()
        con.close()
        p = run_cli("runs", "--json", db=db)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)[0]["status"] == "interrupted"


# ---- issue 9 item 8: CLI conventions --------------------------------------------

@pytest.mark.measuring
def test_python_dash_m_memfx(tmp_path):
    p = subprocess.run([sys.executable, "-m", "memfx", "list", "--json"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "latency" in [e["name"] for e in json.loads(p.stdout)]


@pytest.mark.measuring
def test_run_exp_help_lists_that_experiments_parameters_with_preset_values():
    from memfx.experiments import REGISTRY
    from memfx.model.units import param_value_text
    fill, latency = REGISTRY["fill"], REGISTRY["latency"]
    p = run_cli("run", "fill", "--help")
    assert p.returncode == 0, p.stderr
    only_latency = {q.name for q in latency.params} - {q.name for q in fill.all_params()}
    assert only_latency and not any(f"  {n} (" in p.stdout for n in only_latency)
    quick, full = fill.resolve("quick"), fill.resolve("full")
    for param in fill.all_params():
        assert f"  {param.name} ({param.kind}): {param.help}" in p.stdout
    differing = [q for q in fill.all_params() if quick[q.name] != full[q.name]]
    assert differing, "fill's presets differ in some parameter"
    q = differing[0]
    line = p.stdout.split(f"  {q.name} ({q.kind})")[1].splitlines()[1]
    # the preset each run uses, the default one named (issue 42: "default 11;
    # quick 5" read as if 11 were what a plain `memfx run` does)
    assert f"quick (the default) {param_value_text(q.name, quick[q.name], q.kind)}" in line
    assert f"full {param_value_text(q.name, full[q.name], q.kind)}" in line
    assert "--set " in p.stdout


@pytest.mark.measuring
def test_list_json_has_structured_parameters():
    from memfx.experiments import REGISTRY
    p = run_cli("list", "--json")
    for exp in json.loads(p.stdout):
        params = {r["name"]: r for r in exp["params"]}
        spec = REGISTRY[exp["name"]]
        assert set(params) == {q.name for q in spec.all_params()}
        for q in spec.all_params():
            rec = params[q.name]
            assert rec["kind"] == q.kind and rec["help"] == q.help
            assert set(rec["presets"]) == set(spec.presets)
            assert rec["min"] == q.minimum and rec["max"] == q.maximum
            assert rec["presets"]["quick"] == json.loads(json.dumps(spec.resolve("quick")[q.name]))
    assert params["cpu"]["min"] == -1


@pytest.mark.measuring
def test_latest_is_the_latest_complete_run_and_latest_exp(tiny, tmp_path):
    db, run_id, _ = tiny
    copy = str(tmp_path / "l.db")
    with Store(db) as st, Store(copy) as other:
        other.import_run(st.export_run(run_id))
        failed = other.begin_run("fill", {}, "quick", None)
        other.finish_run(failed, "failed", error="x")
    p = run_cli("show", "latest", "--json", db=copy)
    assert json.loads(p.stdout)["run_id"] == run_id
    p = run_cli("export", "latest:latency", "--format", "raw", db=copy)
    assert json.loads(p.stdout)["run"]["id"] == run_id
    one_line_exit_2(run_cli("show", "latest:fill", db=copy), "no complete fill run")


@pytest.mark.measuring
def test_labels_are_stored_shown_and_filtered(tiny):
    db, run_id, _ = tiny
    runs = json.loads(run_cli("runs", "--json", "--label", "host=a", db=db).stdout)
    assert [r["id"] for r in runs] == [run_id] and runs[0]["labels"] == {"host": "a"}
    assert json.loads(run_cli("runs", "--json", "--label", "host=b", db=db).stdout) == []
    assert "host=a" in run_cli("runs", db=db).stdout
    before = dump(db)
    one_line_exit_2(run_cli("run", "latency", *TINY, "--label", "novalue", db=db), "KEY=VALUE")
    one_line_exit_2(run_cli("run", "latency", *TINY, "--label", "bad key=1", db=db), "label")
    assert dump(db) == before


@pytest.mark.measuring
def test_rm_and_prune(tiny, tmp_path):
    db, run_id, _ = tiny
    copy = str(tmp_path / "rm.db")
    with Store(db) as st, Store(copy) as other:
        other.import_run(st.export_run(run_id))
        sid = other.begin_survey("quick", [])
        other.finish_run(other.begin_run("fill", {}, "quick", None, survey_id=sid), "complete")
        other.finish_survey(sid, "complete")
    before = dump(copy)
    one_line_exit_2(run_cli("rm", run_id, "no-such-id", db=copy), "no run or survey")
    assert dump(copy) == before
    p = run_cli("rm", run_id, db=copy)
    assert p.returncode == 0 and p.stdout.startswith(f"removed run {run_id} (latency, ")
    p = run_cli("prune", "--older-than", "30d", db=copy)
    assert p.returncode == 0 and "nothing" in p.stdout
    one_line_exit_2(run_cli("prune", "--older-than", "30 parsecs", db=copy), "30d")
    p = run_cli("prune", "--older-than", "0h", db=copy)
    assert p.returncode == 0 and f"removed survey {sid}" in p.stdout and "(fill, 0 samples)" in p.stdout
    assert json.loads(run_cli("runs", "--json", db=copy).stdout) == []


def test_check_output_path_unit(tmp_path):
    db = tmp_path / "r.db"
    Store(db).close()
    for bad in ("", str(tmp_path), str(tmp_path / "nope" / "x"), str(db), str(db) + "-shm"):
        with pytest.raises(MemfxError):
            check_output_path(bad, protect=[str(db)])
    assert check_output_path(str(tmp_path / "ok.json"), protect=[str(db)])


@pytest.mark.measuring
def test_labels_survive_export_and_import(tiny, tmp_path):
    db, run_id, raw = tiny
    assert raw["run"]["labels"] == {"host": "a"}
    with Store(tmp_path / "copy.db") as other:
        other.import_run(raw)
        assert other.run(run_id)["labels"] == {"host": "a"}


@pytest.mark.measuring
def test_survey_labels_go_to_the_survey_and_its_runs(tmp_path):
    db, out = str(tmp_path / "s.db"), str(tmp_path / "r.html")
    p = run_cli("survey", "--quick", "--only", "fill_alloc", "-q", "-o", out,
                "--label", "batch=7", db=db)
    assert p.returncode == 0, p.stderr
    with Store(db) as st:
        (survey,) = st.surveys()
        assert survey["labels"] == {"batch": "7"}
        assert [r["labels"] for r in st.runs(labels={"batch": "7"})] == [{"batch": "7"}]
    assert Path(out).read_text().lstrip().lower().startswith("<!doctype html>")
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".r.html")]


def test_atomic_output_keeps_the_extension_writers_infer_the_format_from(tmp_path):
    for name in (".png", "plot.svg", "a.b.pdf"):
        with atomic_output(tmp_path / name) as tmp:
            assert tmp.endswith(name[name.rfind("."):])
            open(tmp, "w").close()
        assert (tmp_path / name).exists()
    with pytest.raises(MemfxError, match="too long"):
        with atomic_output(tmp_path / ("x" * 300 + ".json")):
            pass


@pytest.mark.measuring
def test_latest_colon_needs_an_experiment(tiny):
    db, _, _ = tiny
    one_line_exit_2(run_cli("show", "latest:", db=db), "experiment name")
    one_line_exit_2(run_cli("show", "latest:nosuch", db=db), "no complete nosuch run")
