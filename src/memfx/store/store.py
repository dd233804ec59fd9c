"""The results store: one SQLite file (sqlite.Store) or one shared
PostgreSQL database (postgres.PostgresStore) holding every run, sample and
machine.  `open_store` picks one by its target; every name of the store
(the Store class, the schema, the constants and helpers of sql.py, the
run statuses) is importable from here, where it has always been."""

from __future__ import annotations

import os

from ..model.status import COMPLETE, FAILED, FINAL_STATUSES, INTERRUPTED, RUNNING, STATUSES  # noqa: F401 (re-exported)
from .schema import (  # noqa: F401 (re-exported)
    EXPORT_FORMAT,
    EXPORT_FORMAT_VERSION,
    MACHINE,
    POINT,
    SchemaError,
    readable,
    readable_params,
    validate_export,
)
from .sql import (  # noqa: F401 (re-exported)
    _SCHEMA_V1,
    APPLICATION_ID,
    BUSY_TIMEOUT_MS,
    LABEL_VALUE_MAX,
    LATEST_SURVEY,
    MIGRATIONS,
    REQUIRED_SAMPLE_KEYS,
    SAMPLE_DEFAULTS,
    SCHEMA_VERSION,
    Migration,
    _survey_dict,
    check_labels,
    default_db_path,
    mask_secrets,
    redact_argv,
    shown,
    utcnow_iso,
)
from .sqlite import SQLITE_SIBLING_SUFFIXES, Store, sqlite_path  # noqa: F401 (re-exported)


def store_target(target=None, what: str = "db"):
    """What `target` names, checked before anything is opened or created: a
    postgresql:// URL (as given), else the Path of an SQLite file (None: the
    default path).  Refused in one line, secrets masked (StoreError): an
    empty name, a URL look-alike ("postgresq://u:PW@h/x" would otherwise
    become directories named after it), a libpq connection string, and what
    sqlite_path refuses (SQLite's -wal/-shm/-journal files, a directory, a
    FIFO).  The command line and the API both come through here."""
    from ..model.errors import StoreError
    from .postgres import classify_target
    if target is None:
        return default_db_path()
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if isinstance(target, bytes):
        target = os.fsdecode(target)
    if not isinstance(target, str):
        raise StoreError(f"{what}: expected a file path or a postgresql:// URL, "
                         f"not {type(target).__name__}")
    if not target.strip():
        raise StoreError(f"{what}: empty path")
    if classify_target(target, what) == "url":
        return target
    return sqlite_path(target, what)


def open_store(target=None, memfx_version: str = "0", what: str = "db",
               for_reading: bool = False) -> Store:
    """The store at `target` (store_target): a postgresql:// URL (memfx.store.postgres,
    the shared fleet store) or an SQLite file path (None: the default path).
    `for_reading`: the caller only reads (an SQLite file that cannot be
    written is then opened read-only); `what` names the target in messages."""
    from .postgres import PostgresStore, is_url
    target = store_target(target, what)
    if is_url(target):
        return PostgresStore(target, memfx_version=memfx_version)
    return Store(target, memfx_version=memfx_version, for_reading=for_reading)
