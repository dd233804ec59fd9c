"""The results store: one SQLite file (store_sqlite.Store) or one shared
PostgreSQL database (pgstore.PostgresStore) holding every run, sample and
machine.  `open_store` picks one by its target; every name of the store
(the Store class, the schema, the constants and helpers of store_sql, the
run statuses) is importable from here, where it has always been."""

from __future__ import annotations

from .schema import (EXPORT_FORMAT, EXPORT_FORMAT_VERSION,  # noqa: F401 (re-exported)
                     MACHINE, POINT, SchemaError, readable, readable_params, validate_export)
from .status import (COMPLETE, FAILED, FINAL_STATUSES, INTERRUPTED,  # noqa: F401 (re-exported)
                     RUNNING, STATUSES)
from .store_sql import (  # noqa: F401 (re-exported)
    _SCHEMA_V1, APPLICATION_ID, BUSY_TIMEOUT_MS, LABEL_VALUE_MAX, LATEST_SURVEY, MIGRATIONS,
    REQUIRED_SAMPLE_KEYS, SAMPLE_DEFAULTS, SCHEMA_VERSION, Migration, _survey_dict, check_labels,
    default_db_path, utcnow_iso)
from .store_sqlite import Store


def open_store(target=None, memfx_version: str = "0") -> Store:
    """The store at `target`: a postgresql:// URL (memfx.pgstore, the shared
    fleet store) or an SQLite file path (None: the default path)."""
    from .pgstore import PostgresStore, is_url
    if is_url(target):
        return PostgresStore(target, memfx_version=memfx_version)
    return Store(target, memfx_version=memfx_version)
