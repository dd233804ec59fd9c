"""The command line's shared argument readers (the face layer): the
results database a command opens (--db, $MEMFX_DB, the default path) and
--label pairs, and the console a screen is printed on.  cli.py and cli_show.py both use them; neither imports the
other's internals."""
from __future__ import annotations

import os
import stat

from .errors import MemfxError


def _db_path(args) -> str:
    """The --db path or postgresql:// URL, else $MEMFX_DB, else the default
    path; refuses an empty path, a directory and anything that is not a
    regular file (a FIFO would hang the open)."""
    from .pgstore import classify_target
    from .store import default_db_path
    given = getattr(args, "db", None)
    if given is None:
        given = os.environ.get("MEMFX_DB") or None
    if given is None:
        return str(default_db_path())
    if not given.strip():
        raise MemfxError("--db: empty path")
    if classify_target(given, "--db" if getattr(args, "db", None) else "MEMFX_DB") == "url":
        return given
    return _sqlite_path(given)


# The files SQLite keeps beside a database: a store opened at one of these
# names would be taken by SQLite as the journal of the database beside it,
# and deleted (with the runs in it) the next time that database is opened.
SQLITE_SIBLING_SUFFIXES = ("-wal", "-shm", "-journal")


def _sqlite_path(given: str) -> str:
    """`given` as the path of an SQLite results database, or MemfxError."""
    from .pgstore import mask_secrets
    if given.endswith(SQLITE_SIBLING_SUFFIXES):
        raise MemfxError(f"--db {mask_secrets(given)}: a name ending in "
                         f"{'/'.join(SQLITE_SIBLING_SUFFIXES)} is SQLite's own file beside a "
                         "database, not a results database")
    path = os.path.expanduser(given)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return path
    except OSError as e:
        raise MemfxError(f"--db {given}: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise MemfxError(f"--db {given} is a directory, not a results database")
    if not stat.S_ISREG(st.st_mode):
        raise MemfxError(f"--db {given} is not a regular file")
    return path


def _open_store(args, must_exist=False):
    """The store (must_exist: refuse to create one).  A "running" run whose
    process is gone reads as interrupted (Store._as_displayed)."""
    from .pgstore import is_url
    from .store import open_store
    path = _db_path(args)
    if must_exist and not is_url(path) and not os.path.exists(path):
        raise MemfxError(f"no results database at {path} (run `memfx run latency` first, or pass --db)")
    from .version import __version__
    return open_store(path, memfx_version=__version__)


def _pairs(pairs, option, shape):
    """NAME=VALUE options (--set, --label) -> {name: value}, stripped."""
    out = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise MemfxError(f"{option} expects {shape}, got {pair!r}")
        k, v = pair.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _labels(pairs):
    """--label KEY=VALUE pairs -> {key: value}, checked as the store will."""
    from .store import check_labels
    return check_labels(_pairs(pairs, "--label", "KEY=VALUE"))


def _console():
    from rich.console import Console

    from .screen import term_width
    return Console(width=term_width())     # COLUMNS, the tty's width, or 100 when piped
