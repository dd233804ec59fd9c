import os
import sys

import pytest

# Keep tests away from the user's real results database.
@pytest.fixture(autouse=True)
def _isolated_data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "results.db")


def run_cli(*args, db=None, timeout=300, env=None):
    """Run `python -m memfx.cli ...` in a child; returns CompletedProcess."""
    import subprocess
    cmd = [sys.executable, "-m", "memfx.cli", *args]
    if db:
        cmd += ["--db", db]
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)
