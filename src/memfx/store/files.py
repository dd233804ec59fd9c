"""The SQLite store's file before a connection is made (sqlite.Store
opens it through here): which names may be a results database, whether it
can be written, and opening it read-only when it cannot (read-only media,
no write permission), since reading needs no write."""
from __future__ import annotations

import os
import sqlite3
import stat
import urllib.parse
from pathlib import Path

from ..model.errors import StoreError
from .sql import BUSY_TIMEOUT_MS, shown

# The files SQLite keeps beside a database: a store opened at one of these
# names would be taken by SQLite as the journal of the database beside it,
# and deleted (with the runs in it) the next time that database is opened.
SQLITE_SIBLING_SUFFIXES = ("-wal", "-shm", "-journal")


def sqlite_path(given, what: str | None = None) -> Path:
    """`given` (a str or path) as the path of an SQLite results database, or
    StoreError in one line: an empty name, SQLite's own files beside a
    database, a directory, anything but a regular file (a FIFO would hang
    the open).  Every Store is opened through it, whoever opens it."""
    text = os.fspath(given)
    if not isinstance(text, str):
        text = os.fsdecode(text)
    name = f"{what} {shown(text)}" if what else shown(text)
    if not text.strip():
        raise StoreError(f"{what or 'results database'}: empty path")
    if text.endswith(SQLITE_SIBLING_SUFFIXES):
        raise StoreError(f"{name}: a name ending in {'/'.join(SQLITE_SIBLING_SUFFIXES)} is "
                         "SQLite's own file beside a database, not a results database")
    path = Path(text).expanduser()
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):    # not there: the opener says more
        return path
    except (OSError, ValueError) as e:
        raise StoreError(f"{name}: {shown(getattr(e, 'strerror', None) or e)}") from None
    if stat.S_ISDIR(st.st_mode):
        raise StoreError(f"{name} is a directory, not a results database")
    if not stat.S_ISREG(st.st_mode):
        raise StoreError(f"{name} is not a regular file")
    return path


class NotWritable(StoreError):
    """Opening for writing failed for want of write access (a read-only
    directory, file or medium): a reader may still open the file read-only."""


# SQLite's answers when a file or its -wal/-shm cannot be written or created
_NOT_WRITABLE_CODES = (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM)


def lacks_write(error: Exception) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _NOT_WRITABLE_CODES


def open_error(prefix: str, error: Exception) -> StoreError:
    """A driver's error as a one-line StoreError (NotWritable when it is one)."""
    return (NotWritable if lacks_write(error) else StoreError)(f"{prefix}: {shown(error)}")


def check_writable(path: Path) -> None:
    """StoreError unless `path` can be created or opened for writing; the
    directory is made when missing."""
    if path.is_dir():
        raise StoreError(f"{shown(path)} is a directory, not a results database")
    if path.exists() and not path.is_file():   # a FIFO would block the open
        raise StoreError(f"{shown(path)} is not a regular file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot create directory for {shown(path)}: "
                         f"{shown(e.strerror or e)}") from None
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise NotWritable(f"{shown(path.parent)} is not writable (needed for {shown(path.name)})")
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise NotWritable(f"{shown(path)} is not readable and writable")


def file_uri(path: Path, query: str) -> str:
    return "file:" + urllib.parse.quote(str(path.resolve())) + "?" + query


def read_only_connection(path: Path, why: str) -> sqlite3.Connection:
    """The existing file opened for reading only (`why`: what refused the
    write).  mode=ro first; a WAL database on read-only media cannot open
    that way without its -shm, which it cannot create, so then immutable=1:
    safe only with no -wal beside the file (nothing committed left unread)."""
    wal = Path(f"{path}-wal")
    try:
        return _connect_read_only(path, "mode=ro")
    except sqlite3.Error as e:
        if wal.exists() and wal.stat().st_size:
            raise StoreError(f"cannot read {shown(path)}: {why}, and SQLite cannot read it "
                             f"without writing beside it ({shown(e)}): its write-ahead log "
                             f"{shown(wal.name)} holds commits; copy the database with its "
                             "-wal to a writable place") from None
    try:
        return _connect_read_only(path, "immutable=1")
    except sqlite3.Error as e:
        raise StoreError(f"cannot read {shown(path)}: {shown(e)} ({why})") from None


def _connect_read_only(path: Path, query: str) -> sqlite3.Connection:
    conn = sqlite3.connect(file_uri(path, query), uri=True, isolation_level=None,
                           timeout=BUSY_TIMEOUT_MS / 1000)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()   # opens it now
    except BaseException:
        conn.close()
        raise
    return conn
