"""memfx tune against hostile programs (issue 41): the profile never lands in
a file the program opened, a program's failure is never bad input (exit 2),
no process the program started outlives the run or memfx, and its command,
arguments and output print as typed, on one line."""
import io
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from memfx.advice import tune as T
from memfx.store.store import Store
from test_tune import fake_machine, run_main, store_copy_run  # noqa: F401 (fake_machine: a fixture)


def unique_sleep(base):
    """A sleep duration no other process on the machine runs."""
    return f"{base}.{random.randrange(10 ** 6):06d}"


def alive(*args):
    """The pids of live (not zombie) processes whose command line is `args`."""
    want = "\0".join(args).encode() + b"\0"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if cmdline == want and state not in "ZX":
            found.append(int(entry))
    return found


def gone_within(seconds, *args):
    deadline = time.monotonic() + seconds
    while alive(*args):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def sleeps():
    """Durations handed out to a test; any sleep left running is killed after it."""
    given = []

    def make(base):
        given.append(unique_sleep(base))
        return given[-1]
    yield make
    for d in given:
        for pid in alive("sleep", d):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def copy_db(db_path):
    with Store(db_path) as store:
        store_copy_run(store)
    return db_path


# ---- the profile's channel -----------------------------------------------------------

@pytest.mark.measuring
@pytest.mark.usefixtures("fake_machine")
def test_the_profile_never_lands_in_a_file_the_program_opened(tmp_path, copy_db,
                                                              capsys):
    """`exec 6>>log.txt` took the descriptor number memfx's memfd had: the
    program's log got the profile block and the profile was empty.  Here
    every low descriptor becomes the log, whichever number memfx would use."""
    log = tmp_path / "log.txt"
    log.write_text("line1\n")
    script = f"for ((fd=3; fd<100; fd++)); do eval \"exec $fd>>{log}\"; done; echo line2 >&6"
    code, out, err = run_main(["tune", "--runs", "1", "--json", "--db", copy_db, "--",
                               "bash", "-c", script], capsys)
    assert code == 0, err
    assert log.read_text() == "line1\nline2\n"
    assert json.loads(out)["profile"]["processes"] >= 1     # bash's block reached memfx


@pytest.mark.measuring
@pytest.mark.usefixtures("fake_machine")
def test_a_program_writing_to_the_profile_is_its_failure_not_bad_input(copy_db,
                                                                       capsys):
    code, out, err = run_main(["tune", "--json", "--db", copy_db, "--", "sh", "-c",
                               'echo garbage >> "$MEMFX_TUNE_PROFILE"'], capsys)
    assert code == T.EXIT_PROGRAM_FAILED != 2 and out == ""
    assert err.count("\n") == 1 and "profile of the program cannot be read" in err
    with Store(copy_db) as store:
        assert store.runs(experiment="tune")[0]["status"] == "failed"


@pytest.mark.measuring
def test_a_fifo_in_place_of_the_profile_neither_hangs_nor_reads(tmp_path):
    runner = T.Runner(["sh", "-c", 'exec mkfifo "$MEMFX_TUNE_PROFILE"'], timeout_s=20)
    with pytest.raises(T.ProfileUnreadable, match="not the interposer's file"):
        T.profile(runner, [])


@pytest.mark.measuring
def test_a_program_that_cannot_start_any_more_is_its_failure(tmp_path):
    exe = tmp_path / "gone"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    runner = T.Runner([str(exe)])
    exe.unlink()                          # removed after check_command passed it
    with pytest.raises(T.ProgramFailed, match="cannot run .*round 2"):
        runner.run(dict(os.environ), "round 2")


# ---- no process outlives the run or memfx ----------------------------------------------

@pytest.mark.measuring
def test_kill_9_of_memfx_kills_the_program(tmp_path, copy_db, sleeps):
    d = sleeps(1299)
    env = dict(os.environ, TMPDIR=str(tmp_path))
    memfx = subprocess.Popen([sys.executable, "-m", "memfx", "tune", "--db", copy_db, "--",
                              "sleep", d], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not alive("sleep", d):
            assert memfx.poll() is None and time.monotonic() < deadline, "sleep never started"
            time.sleep(0.05)
        memfx.kill()
        memfx.wait()
        assert gone_within(5, "sleep", d), "the program outlived a kill -9 of memfx"
    finally:
        if memfx.poll() is None:
            memfx.kill()
            memfx.wait()


@pytest.mark.measuring
@pytest.mark.usefixtures("fake_machine")
def test_a_timeout_kills_processes_that_left_the_group(copy_db, capsys, sleeps):
    """`setsid sleep &` survived "its process group was killed"; so did a
    double-forked one (its parent gone, re-parented away from the program)."""
    a, b, c = sleeps(1298), sleeps(1296), sleeps(1297)
    code, out, err = run_main(["tune", "--timeout", "1", "--db", copy_db, "--", "sh", "-c",
                               f"(setsid sleep {a} &); setsid sleep {b} & sleep {c}"], capsys)
    assert code == T.EXIT_PROGRAM_FAILED
    last = err.splitlines()[-1]
    assert "did not finish within 1 s" in last and "could not end" not in last
    assert "its 4 process(es) were killed" in last          # sh and its three sleeps
    for d in (a, b, c):
        assert gone_within(2, "sleep", d), f"sleep {d} survived the timeout"


@pytest.mark.measuring
def test_processes_a_successful_run_left_are_ended(sleeps):
    d = sleeps(1295)
    runner = T.Runner(["sh", "-c", f"(setsid sleep {d} &); sleep 0.2"], timeout_s=20)
    runner.run(dict(os.environ), "round 1")
    assert gone_within(2, "sleep", d) and runner.left_running == []


# ---- what is printed -------------------------------------------------------------------

@pytest.mark.measuring
@pytest.mark.usefixtures("fake_machine")
def test_markup_and_emoji_in_the_command_print_as_typed(copy_db, capsys):
    code, out, err = run_main(["tune", "--runs", "1", "--db", copy_db, "--",
                               "/bin/echo", "[/dim]", ":-1:"], capsys)
    assert code == 0, err
    shown = "`/bin/echo '[/dim]' :-1:`"
    assert shown in err and shown in out          # the progress line, the header
    assert "\N{THUMBS DOWN SIGN}" not in out + err
    with Store(copy_db) as store:
        assert store.runs(experiment="tune")[0]["status"] == "complete"


def test_a_stored_document_prints_as_data():
    from rich.console import Console
    doc = {"command": ["[bold]x", ":-1:", "a\nb"], "sources": {"copy": "[red]c"},
           "glibc": {"version": "[/]"}, "profile": None, "dropped": [], "candidates": [],
           "noise_band": 0.02, "recommendation": None, "status": "failed",
           "error": "the program failed: [/dim] :-1:",
           "left_running": [{"pid": 7, "name": "[/x]"}]}
    buf = io.StringIO()
    T.render(doc, Console(file=buf, width=200))
    text = buf.getvalue()
    assert "`'[bold]x' :-1: $'a\\nb'`" in text and "copy run [red]c" in text
    assert "failed: the program failed: [/dim] :-1:" in text and "7 ('[/x]')" in text
    assert "\N{THUMBS DOWN SIGN}" not in text


@pytest.mark.measuring
@pytest.mark.usefixtures("fake_machine")
def test_one_line_messages_escape_newlines_in_arguments(copy_db, capsys):
    code, out, err = run_main(["tune", "--json", "--db", copy_db, "--",
                               "sh", "-c", "exit 3", "x\ny"], capsys)
    assert code == T.EXIT_PROGRAM_FAILED and err.count("\n") == 1
    assert "`sh -c 'exit 3' $'x\\ny'` exited with status 3" in err
    code, out, err = run_main(["tune", "--db", copy_db, "--", "no\nsuch"], capsys)
    assert code == 2 and err.count("\n") == 1 and "$'no\\nsuch': command not found" in err


@pytest.mark.measuring
@pytest.mark.skipif(not os.path.exists("/bin/bash"), reason="no bash")
def test_quoted_words_read_back_as_typed():
    words = ["plain", "a b", "it's", "x\ny", "\x1b[31m\\'", "tab\there", "\x9b"]
    got = subprocess.run(["/bin/bash", "-c", "printf '%s\\0' " + T.shown(words)],
                         capture_output=True, check=True).stdout.decode()
    assert got.split("\0")[:-1] == words
    assert all("\n" not in T.quoted(w) for w in words)
