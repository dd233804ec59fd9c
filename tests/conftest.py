import os
import signal
import sys

import pytest

# Several tests send Ctrl-C (SIGINT) to a memfx they started.  A test run
# started in the background by a non-interactive shell (`cmd &`) inherits
# SIGINT ignored, its children too (an ignored signal stays ignored across
# exec), and then no Python child raises KeyboardInterrupt: those tests hung
# or saw a clean exit.  A handled signal is reset to the default at exec, so
# every process the tests start gets Ctrl-C as a user's terminal would send it.
signal.signal(signal.SIGINT, signal.default_int_handler)


# Keep tests away from the user's real results database.
@pytest.fixture(autouse=True)
def _isolated_data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "results.db")


def run_cli(*args, db=None, timeout=300, env=None):
    """Run `python -m memfx ...` in a child; returns CompletedProcess."""
    import subprocess
    cmd = [sys.executable, "-m", "memfx", *args]
    if db:
        cmd += ["--db", db]
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)
