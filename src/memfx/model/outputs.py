"""Every file memfx writes for the user (export, report, plot, survey report)
goes through here: the path is checked before any work is done, the content
is written to a temporary file in the same directory and renamed into place
only when complete, so a failure leaves the old file as it was and nothing
can be written over the results database."""
from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from typing import TYPE_CHECKING, Callable, Iterator, Sequence, TextIO, Union

from .errors import MemfxError

if TYPE_CHECKING:
    from pathlib import Path

StrPath = Union[str, "os.PathLike[str]"]

# Files SQLite keeps beside a database in WAL mode (and rollback mode).
_DB_COMPANIONS = ("", "-wal", "-shm", "-journal")

_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")
MAX_NAME_PART = 80


def default_db_path() -> Path:
    """Where the results database lives unless --db / $MEMFX_DB says
    otherwise: $XDG_DATA_HOME/memfx/results.db (~/.local/share by default).
    In the base layer: the store opens it, the report names it."""
    from pathlib import Path
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "memfx" / "results.db"


def safe_name_part(text: str) -> str:
    """A run or survey id made fit for a default file name: no path
    separators, no leading dot, bounded length."""
    name = _UNSAFE_NAME_CHARS.sub("_", str(text)).lstrip(".")
    return name[:MAX_NAME_PART] or "run"


def check_output_path(path: StrPath, protect: Sequence[StrPath | None] = ()) -> str:
    """`path` as given if it can take a new file; MemfxError (one line)
    when it is empty, a directory, not a regular file, in a directory that
    does not exist, or one of the `protect`ed databases (or their WAL/SHM)."""
    path = os.fspath(path)
    if not path:
        raise MemfxError("output path is empty")
    if path.endswith(os.sep) or os.path.isdir(path):
        raise MemfxError(f"output {path} is a directory; name a file")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise MemfxError(f"cannot write {path}: directory {parent} does not exist")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise MemfxError(f"cannot write {path}: {e.strerror or e}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise MemfxError(f"output {path} is not a regular file")
    real = os.path.realpath(path)
    for db in protect:
        if not db:
            continue
        for suffix in _DB_COMPANIONS:
            companion = os.fspath(db) + suffix
            same_name = real == os.path.realpath(companion)
            try:
                other = os.stat(companion)
                same_file = st is not None and (st.st_dev, st.st_ino) == (other.st_dev, other.st_ino)
            except OSError:
                same_file = False
            if same_name or same_file:
                raise MemfxError(f"output {path} is the results database{suffix and ' ' + suffix[1:].upper()}"
                                 f" ({os.fspath(db)}); choose another file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise MemfxError(f"cannot write {path}: directory {parent} is not writable")
    return path


@contextlib.contextmanager
def atomic_output(path: StrPath, protect: Sequence[StrPath | None] = ()) -> Iterator[str]:
    """Yields a temporary path beside `path` (same extension, so writers that
    infer the format from it still work); on success it replaces `path`
    whole, on any failure it is removed and `path` is untouched."""
    path = check_output_path(path, protect)
    directory, name = os.path.split(os.path.abspath(path))
    ext = name[name.rfind("."):] if "." in name else ""     # ".png" is a name with an extension
    prefix, suffix = f".{name[:MAX_NAME_PART]}.", f".tmp{ext[:16]}"
    _remove_stale_temporaries(directory, prefix, suffix)
    try:
        # the writer's pid is in the name, so that a later writer can tell a
        # temporary left by a killed process (SIGKILL runs no cleanup) from
        # one still being written
        fd, tmp = tempfile.mkstemp(prefix=f"{prefix}{os.getpid()}.", suffix=suffix, dir=directory)
    except OSError as e:
        raise MemfxError(f"cannot write {path}: {e.strerror or e}") from None
    os.close(fd)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)      # as open() would have made it
        # Checked again just before the rename: the database may have been
        # created at that path while we were writing.
        check_output_path(path, protect)
        os.replace(tmp, path)
    except OSError as e:
        raise MemfxError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _remove_stale_temporaries(directory: str, prefix: str, suffix: str) -> None:
    """Remove the temporaries of atomic_output(`prefix`...`suffix`) in
    `directory` whose writing process no longer exists."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for entry in names:
        if not (entry.startswith(prefix) and entry.endswith(suffix)):
            continue
        pid = entry[len(prefix):].split(".", 1)[0]
        # ASCII digits of a pid_t only: isdigit() took "²", which int() refuses,
        # and os.kill() overflows past 2**31
        if not (pid.isascii() and pid.isdigit() and len(pid) <= 9) or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue                     # still running (or not ours to signal)
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError, ValueError):
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, entry))


def write_text_output(path: StrPath, write: Callable[[TextIO], object],
                      protect: Sequence[StrPath | None] = (),
                      newline: str | None = None) -> StrPath:
    """Open a temporary text file, call write(fileobj), rename into place."""
    with atomic_output(path, protect) as tmp:
        with open(tmp, "w", encoding="utf-8", newline=newline) as f:
            write(f)
    return path
