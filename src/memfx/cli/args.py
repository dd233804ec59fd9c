"""The command line's shared argument readers (the face layer): the
results database a command opens (--db, $MEMFX_DB, the default path) and
--label pairs, and the console a screen is printed on.  main.py and show.py both use them; neither imports the
other's internals."""
from __future__ import annotations

import os

from ..model.errors import MemfxError
from ..store.sqlite import SQLITE_SIBLING_SUFFIXES  # noqa: F401 (cli.py takes it from here)


def _db_path(args) -> str:
    """The --db path or postgresql:// URL, else $MEMFX_DB, else the default
    path; checked by the store's own store_target (the API's path too)."""
    from ..store.store import store_target
    given = getattr(args, "db", None)
    if given is None:
        given = os.environ.get("MEMFX_DB") or None
    return str(store_target(given, "--db" if getattr(args, "db", None) is not None
                            else "MEMFX_DB"))


def _sqlite_path(given: str) -> str:
    """`given` as the path of an SQLite results database (store.sqlite_path),
    or StoreError."""
    from ..store.store import sqlite_path
    return str(sqlite_path(given, "--db"))


# The commands that only read the store: on read-only media they open an
# existing SQLite file read-only (reading needs no write).
READING_COMMANDS = frozenset({"show", "runs", "export", "compare", "report", "plot", "machines"})


def _open_store(args, must_exist=False):
    """The store (must_exist: refuse to create one).  A "running" run whose
    process is gone reads as interrupted (Store._as_displayed)."""
    from ..store.postgres import is_url
    from ..store.store import open_store, shown
    path = _db_path(args)
    if must_exist and not is_url(path) and not os.path.exists(path):
        raise MemfxError(f"no results database at {shown(path)} (run `memfx run latency` "
                         "first, or pass --db)")
    from ..model.version import __version__
    return open_store(path, memfx_version=__version__,
                      for_reading=getattr(args, "command", None) in READING_COMMANDS)


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
    from ..store.store import check_labels
    return check_labels(_pairs(pairs, "--label", "KEY=VALUE"))


def _console():
    from ..report.screen import console
    return console()          # COLUMNS, the tty's width, or 100 when piped
