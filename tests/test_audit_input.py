"""Issue 41, the adversarial audit: input parsing, exit statuses and import.

Numbers are read from ASCII digits only and sizes stop at the address space;
a closed or full standard output is one line and exit 3 (what was done is
kept), exit 2 only for bad input with nothing changed, exit 4 for a worker
killed by a signal; one-line errors stay one line; an import checks every
field a reader takes at face value and takes every document memfx exports;
the API and the core refuse wrong arguments with TypeError or MemfxError.
"""
import contextlib
import copy
import gc
import io
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import run_cli
from memfx.cli import main as cli
from memfx.model.errors import MemfxError, ParamError
from memfx.model.units import MAX_SIZE, parse_int, parse_number, parse_size
from memfx.store.schema import SchemaError, validate_export
from memfx.store.store import Store

DATA = Path(__file__).parent / "data"
EXPORT = DATA / "export_latency_small.json"


def valid_doc():
    return json.loads(EXPORT.read_text())


def _main(*args):
    """The CLI in this process: (status, stdout, stderr); an exception is a failure."""
    gc.collect()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main([str(a) for a in args])
    return status, out.getvalue(), err.getvalue()


def _one_line(stderr, fragment=""):
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memfx: error: "), stderr
    assert fragment in lines[0] and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.fixture
def db(tmp_path):
    """A database holding the small latency run of the fixture."""
    path = tmp_path / "results.db"
    with Store(path) as st:
        st.import_run(valid_doc())
    return str(path)


@pytest.fixture
def no_machine_probe(monkeypatch):
    """`memfx run` without fingerprinting this machine (which starts ld.so):
    the fixture's machine stands in."""
    machine = valid_doc()["machine"]
    monkeypatch.setattr(cli, "_machine", lambda: copy.deepcopy(machine))


# ---- 1. sizes past the address space ---------------------------------------------

@pytest.mark.parametrize("value", ["9" * 400, float("inf"), float("nan"), MAX_SIZE + 1,
                                   "129T", 10 ** 400])
def test_a_size_past_the_address_space_is_a_param_error(value):
    with pytest.raises(ParamError) as e:
        parse_size(value, "max_size")
    assert "\n" not in str(e.value) and len(str(e.value)) < 200
    assert parse_size(MAX_SIZE) == MAX_SIZE == parse_size("128T")


def test_four_hundred_nines_is_one_line_exit_2(tmp_path, no_machine_probe):
    db = tmp_path / "r.db"
    status, _, err = _main("run", "latency", "--set", "max_size=" + "9" * 400, "--db", db)
    assert status == 2
    _one_line(err, "max_size")
    assert not db.exists()


def test_the_api_refuses_an_infinite_size_before_measuring():
    from memfx.running.runner import prepare
    with pytest.raises(ParamError, match="max_size"):
        prepare("latency", "quick", {"max_size": float("inf")}, valid_doc()["machine"])


# ---- 2. ASCII digits only ----------------------------------------------------------

ARABIC_42, FULLWIDTH_42 = "\u0664\u0662", "\uff14\uff12"


@pytest.mark.parametrize("digits", [ARABIC_42, FULLWIDTH_42])
def test_unicode_digits_are_not_numbers(digits):
    from memfx.analysis.compare import parse_threshold
    from memfx.cli.show import parse_age
    from memfx.model.protocol import Param
    for parse, text in ((parse_size, digits + "K"), (parse_int, digits), (parse_number, digits),
                        (parse_number, digits + ".5")):
        with pytest.raises(ParamError):
            parse(text)
    with pytest.raises(MemfxError):
        parse_age(digits + "d")
    with pytest.raises(ValueError):
        parse_threshold(digits + "%")
    for kind in ("int", "float", "size", "list:int", "list:size"):
        with pytest.raises(ParamError):
            Param("x", kind, 1, "a test parameter").parse(digits)


@pytest.mark.parametrize("text", ["1_000", "inf", "nan", "1e999", "0x10", ""])
def test_what_int_and_float_also_take_is_refused(text):
    for parse in (parse_int, parse_number):
        with pytest.raises(ParamError):
            parse(text)
    assert (parse_int(" -12 "), parse_number("1.5e-3"), parse_number(".5")) == (-12, 0.0015, 0.5)


def test_set_max_size_in_arabic_digits_is_refused(tmp_path, no_machine_probe):
    db = tmp_path / "r.db"
    status, _, err = _main("run", "latency", "--set", f"max_size={ARABIC_42}K", "--db", db)
    assert status == 2
    _one_line(err, "max_size")
    assert not db.exists()


def test_prune_older_than_arabic_days_removes_nothing(db):
    status, _, err = _main("prune", "--older-than", "\u0663d", "--db", db)
    assert status == 2
    _one_line(err, "--older-than")
    assert Store(db).runs()


@pytest.mark.parametrize("option", ["--runs", "--cpu", "--timeout"])
def test_tune_options_take_ascii_digits_only(option):
    parser = cli.build_parser()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as e:
        parser.parse_args(["tune", option, "\u0663", "--", "true"])
    assert e.value.code == 2
    _one_line(err.getvalue(), option)
    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit):
        parser.parse_args(["tune", "--timeout", "inf", "--", "true"])
    assert parser.parse_args(["tune", option, "3", "--", "true"])


def test_columns_in_other_digits_is_ignored(monkeypatch):
    from memfx.report.screen import PIPE_WIDTH, term_width
    for value in ("\u00b2", ARABIC_42):          # "²".isdigit() is True, int("²") fails
        monkeypatch.setenv("COLUMNS", value)
        assert term_width(io.StringIO()) == PIPE_WIDTH


def test_a_temporary_named_with_other_digits_is_left_alone(tmp_path):
    from memfx.model.outputs import _remove_stale_temporaries
    for name in (".memfx-x.\u00b2.tmp.png", ".memfx-x.99999999999999999999.tmp.png"):
        (tmp_path / name).write_text("")
    _remove_stale_temporaries(str(tmp_path), ".memfx-x.", ".png")
    assert len(list(tmp_path.iterdir())) == 2


def test_an_import_with_a_timestamp_in_other_digits_is_refused():
    doc = valid_doc()
    doc["run"]["started"] = "\u0662\u0660\u0662\u0666-11-23T12:52:43Z"
    with pytest.raises(SchemaError, match="run.started"):
        validate_export(doc)


# ---- 3, 4. standard output closed or full: exit 3, what was done is kept ------------

def _cli_child(args, stdout):
    return subprocess.run([sys.executable, "-m", "memfx", *args], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=120)


@pytest.mark.measuring
def test_a_closed_stdout_is_one_line_exit_3(db):
    for args in (["runs", "--db", db], ["--help"]):
        p = subprocess.run([sys.executable, "-m", "memfx", *args], stderr=subprocess.PIPE,
                           text=True, timeout=120, preexec_fn=lambda: os.close(1))
        assert p.returncode == 3, p.stderr
        _one_line(p.stderr, "standard output")


@pytest.mark.measuring
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_help_on_a_full_device_fails(tmp_path):
    with open("/dev/full", "w") as full:
        p = _cli_child(["--help"], full)
    assert p.returncode == 3, p.stderr
    _one_line(p.stderr, "standard output")


@pytest.mark.measuring
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_rm_and_import_that_changed_the_database_do_not_exit_2(db, tmp_path):
    run_id = Store(db).runs()[0]["id"]
    with open("/dev/full", "w") as full:
        p = _cli_child(["rm", run_id, "--db", db], full)
    assert p.returncode == 3, p.stderr
    _one_line(p.stderr, "standard output")
    assert not Store(db).runs()                     # removed
    with open("/dev/full", "w") as full:
        p = _cli_child(["import", str(EXPORT), "--db", db], full)
    assert p.returncode == 3, p.stderr
    assert [r["id"] for r in Store(db).runs()] == [run_id]       # imported
    p = run_cli("import", str(EXPORT), db=db)      # the retry changes nothing: bad input
    assert p.returncode == 2
    _one_line(p.stderr, "already in")


# ---- 5. a worker killed by a signal -------------------------------------------------

class _KilledHost:
    """A worker host whose replica was killed by SIGSEGV before it sent anything."""
    returncode = None

    def submit(self, job):
        self.returncode = -signal.SIGSEGV
        return iter(())

    def stderr_tail(self):
        return ""

    def stop(self):
        pass


def test_a_worker_killed_by_a_signal_is_exit_4_and_says_so(tmp_path, monkeypatch,
                                                           no_machine_probe):
    from memfx.running import runner
    monkeypatch.setattr(runner, "worker_host", lambda: _KilledHost())
    db = str(tmp_path / "r.db")
    status, _, err = _main("run", "latency", "--set", "max_size=64K", "--set", "replicas=1",
                           "--db", db)
    assert status == cli.EXIT_FAILED == 4
    line = _one_line(err, "the worker was killed by SIGSEGV (signal 11)")
    assert "chain" not in line
    (run,) = Store(db).runs()
    assert run["status"] == "failed"


CHASE_UNDER_A_SIGNAL = textwrap.dedent("""
    import os, signal, sys, threading, time
    import numpy as np
    from memfx.lab import _core
    from memfx.lab.core import kernel_table
    n, elem = 1 << 16, 64
    buf = bytearray(n * elem)
    chain = _core.link_chain(buf, 0, elem, n, np.random.default_rng(0).permutation(n))
    def kill():                      # another process's SIGSEGV, mid-walk
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGSEGV)
    threading.Thread(target=kill, daemon=True).start()
    try:
        _core.run(kernel_table()["chase_ptr"].index, None, 0, chain, 0, 0, 0, 1 << 40, 0)
    except ValueError as e:
        print(e)
        sys.exit(3)
""")


@pytest.mark.measuring
def test_a_sigsegv_sent_to_a_chase_is_not_the_chain_left():
    p = subprocess.run([sys.executable, "-c", CHASE_UNDER_A_SIGNAL], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == -signal.SIGSEGV, (p.returncode, p.stdout, p.stderr)
    assert "written since link_chain" not in p.stdout


@pytest.mark.measuring
def test_a_walk_that_really_leaves_its_chain_is_still_a_value_error():
    import numpy as np

    from memfx.lab import _core
    from memfx.lab.core import kernel_table
    buf = bytearray(64 * 64)
    chain = _core.link_chain(buf, 0, 64, 64, np.arange(64))
    buf[0:8] = (8).to_bytes(8, "little")            # element 0 now points at address 8
    with pytest.raises(ValueError, match="left its chain"):
        _core.run(kernel_table()["chase_ptr"].index, None, 0, chain, 0, 0, 0, 5, 0)


# ---- 6. one-line errors stay one line -----------------------------------------------

def test_a_newline_in_an_output_path_is_escaped(db, tmp_path):
    status, _, err = _main("plot", "latest", "-o", str(tmp_path / "a\nb.txt"), "--db", db)
    assert status == 2
    assert "a\\nb.txt" in _one_line(err)
    status, _, err = _main("export", "latest", "-o", str(tmp_path / "no\ndir" / "x.json"),
                           "--db", db)
    assert status == 2
    assert "no\\ndir" in _one_line(err)


def test_an_argparse_error_with_a_newline_is_one_line():
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit):
        cli.main(["show", "latest", "--no-such\noption\x1b[2J"])
    assert "\\n" in _one_line(err.getvalue()) and "\x1b" not in err.getvalue()


# ---- 7. import checks what readers read, and takes what memfx exports ---------------

def _tune_doc(run_id, command):
    return {"schema_version": 1, "kind": "tune", "run_id": run_id, "command": command,
            "executable": "/bin/prog", "created": "2026-11-23T12:52:43Z", "rounds": 3,
            "timeout_s": 300.0, "cpu": 1, "noise_band": 0.02,
            "sources": {"copy": "r-copy", "latency": None},
            "glibc": {"available": True, "version": "2.36", "thresholds": {},
                      "user_tunables": None},
            "llc": {}, "profile": {
                "processes": 1, "edges": [], "total_calls": 3,
                "functions": {"memcpy": {"calls": 3, "bytes": 96, "buckets": [
                    {"min": 16, "max": 31, "calls": 3, "bytes": 96}]}},
                "regions": [{"group": "copy", "min": 0, "max": None, "from_threshold": None,
                             "calls": 3, "bytes": 96}]},
            "candidates": [{"id": "x=1", "tunable": "glibc.mem.x", "reason": "a test",
                            "affected_calls": 3, "result": {
                                "speedup": 1.1, "ci_low": 1.05, "ci_high": 1.2, "n": 3,
                                "verdict": "faster"}}],
            "dropped": [], "recommendation": None, "status": "complete", "error": None,
            "left_running": []}


def _tune_export(tmp_path, command, argv=None):
    """A tune record as memfx stores and exports it (params: the command
    line as text; the artifact: the arguments, `argv` when given)."""
    machine = valid_doc()["machine"]
    with Store(tmp_path / "tune-src.db") as st:
        run_id = st.begin_run("tune", {"command": " ".join(command), "rounds": 3}, None, machine)
        st.set_artifact(run_id, "tune", _tune_doc(run_id, argv or command))
        st.finish_run(run_id, "complete", None)
        return st.export_run(run_id)


def test_a_long_command_survives_export_and_import(tmp_path):
    command = ["./prog"] + [f"--option-{i}=value" for i in range(40)]
    argv = command + ["\x1b[2J"]            # the artifact keeps any argument (render quotes it)
    doc = _tune_export(tmp_path, command, argv)
    assert doc["run"]["params"]["command"] == " ".join(command)      # not dropped
    validate_export(doc)
    with Store(tmp_path / "dst.db") as st:
        run_id = st.import_run(json.loads(json.dumps(doc)))
        assert st.run(run_id)["params"]["command"] == " ".join(command)
        assert st.artifacts(run_id)["tune"]["command"] == argv
    status, out, err = _main("show", run_id, "--db", tmp_path / "dst.db")
    assert status == 0, err


@pytest.mark.parametrize("damage, where", [
    (lambda t: t.pop("sources"), "artifacts.tune.sources"),
    (lambda t: t.pop("glibc"), "artifacts.tune.glibc"),
    (lambda t: t["profile"]["functions"]["memcpy"]["buckets"][0].pop("min"), "min"),
    (lambda t: t["profile"]["regions"][0].update(calls="3"), "calls"),
    (lambda t: t["candidates"][0].pop("reason"), "reason"),
    (lambda t: t["candidates"][0]["result"].pop("ci_low"), "ci_low"),
    (lambda t: t["candidates"][0]["result"].update(verdict=None), "verdict"),
    (lambda t: t.update(noise_band=None), "noise_band"),
    (lambda t: t.update(recommendation={"line": "x"}), "recommendation"),
    (lambda t: t.update(dropped=[{"id": "x"}]), "why"),
])
def test_a_tune_record_missing_what_show_reads_is_refused(tmp_path, damage, where):
    doc = _tune_export(tmp_path, ["./prog"])
    damage(doc["artifacts"]["tune"])
    with pytest.raises(SchemaError, match=where):
        validate_export(doc)


def test_a_tune_record_without_sources_is_refused_by_import(tmp_path):
    doc = _tune_export(tmp_path, ["./prog"])
    del doc["artifacts"]["tune"]["sources"]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    status, _, err = _main("import", path, "--db", tmp_path / "new.db")
    assert status == 2
    _one_line(err, "sources")
    assert not (tmp_path / "new.db").exists()


@pytest.mark.parametrize("key, value", [("size_bytes", "4096"), ("size_bytes", [4096]),
                                        ("npad", "7")])
def test_a_point_number_stored_as_text_is_refused(key, value):
    doc = valid_doc()
    for s in doc["samples"]:
        if key in (s.get("point") or {}):
            s["point"][key] = copy.deepcopy(value)
    with pytest.raises(SchemaError, match=f"point.{key}"):
        validate_export(doc)


# ---- 8. the API's wrong arguments ---------------------------------------------------

@pytest.mark.parametrize("call, error", [
    (lambda m: m.samples(None), TypeError),
    (lambda m: m.load(3), TypeError),
    (lambda m: m.answers({"answers": "x"}), MemfxError),
    (lambda m: m.answers({"answers": [1]}), MemfxError),
    (lambda m: m.answers({"kind": "survey", "answers": [], "documents": [{}]}), MemfxError),
    (lambda m: m.answers(5), TypeError),
    (lambda m: m.points({}), MemfxError),
    (lambda m: m.points([]), TypeError),
    (lambda m: m.points({"points": [{"params": "x"}]}), MemfxError),
    (lambda m: m.points({"points": [{"params": {}, "modes": [1]}]}), MemfxError),
    (lambda m: m.compare(None, "latest"), TypeError),
    (lambda m: m.runs(experiment=3), TypeError),
])
def test_the_api_refuses_wrong_arguments_in_one_line(call, error):
    import memfx
    with pytest.raises(error) as e:
        call(memfx)
    assert type(e.value) is error or isinstance(e.value, MemfxError)
    assert str(e.value) and "\n" not in str(e.value)


# ---- 9. team_run with a list where a tuple goes -------------------------------------

@pytest.mark.measuring
def test_team_run_takes_a_list_member_and_refuses_a_number():
    from memfx.lab import _core
    cpu = sorted(os.sched_getaffinity(0))[0]
    read = {r["name"]: r for r in _core.kernels()}["bw_read_sse2"]["index"]
    buf = bytearray(4096)
    member = [cpu, read, None, 0, buf, 0, 64, 0, 1, 0, 0]
    release, rows = _core.team_run([member])
    assert len(rows) == 1 and len(rows[0]) == 8
    for bad in ([5], ["abcdefghijk"], [None]):
        with pytest.raises(TypeError, match="member 0"):
            _core.team_run(bad)
    assert math.isfinite(release)
