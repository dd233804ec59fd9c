import os
import signal
import sys
import tempfile
import uuid
import warnings

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


# ---- PostgreSQL (tests/test_postgres.py, tests/test_audit_store.py) -----------------

@pytest.fixture(scope="session")
def pg_server():
    """One PostgreSQL server for the session (pgserver runs it as an
    unprivileged user of its own when we are root)."""
    try:
        import pgserver
        import psycopg
    except ImportError as e:
        pytest.skip(f"PostgreSQL tests need the test extra (pgserver, psycopg): {e}")
    # A short path of our own: the server's Unix socket lives in it (a socket
    # path is limited to 107 bytes) and pytest's tmp dirs are not open to the
    # server's own user.
    root = tempfile.mkdtemp(prefix="memfx-pg-", dir="/tmp")
    try:
        with warnings.catch_warnings():     # platformdirs: XDG_RUNTIME_DIR unset (CI)
            warnings.simplefilter("ignore")
            server = pgserver.get_server(root, cleanup_mode="delete")
    except Exception as e:          # any reason the server cannot run here
        pytest.skip(f"cannot start a PostgreSQL server with pgserver: {type(e).__name__}: {e}")
    import psycopg
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        # a throwaway server: durability across a power cut is not under test
        conn.execute("ALTER SYSTEM SET fsync = off")
        conn.execute("ALTER SYSTEM SET synchronous_commit = off")
        conn.execute("SELECT pg_reload_conf()")
    yield server, root
    server.cleanup()


def _admin(pg_server):
    import psycopg
    server, root = pg_server
    return psycopg.connect(server.get_uri(), autocommit=True)


def _url(root, dbname, user="postgres"):
    return f"postgresql://{user}:@/{dbname}?host={root}"


@pytest.fixture
def pg_url(pg_server):
    """A fresh, empty database on the session's server."""
    name = "t_" + uuid.uuid4().hex[:12]
    with _admin(pg_server) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return _url(pg_server[1], name)
