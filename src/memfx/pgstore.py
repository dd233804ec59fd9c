"""The PostgreSQL backend of the results store: one database shared by a
fleet of hosts (`--db postgresql://...` or MEMFX_DB; docs/fleet.md).

It is memfx.store.Store with another connection underneath: the schema is
the SQLite schema translated (_translate_schema), the queries are the same
text ("?" placeholders become "%s" here), and only what SQLite does with
pragmas and file locks is done differently:

- the schema version and the application marker live in the `meta` table
  (SQLite keeps them in its header: user_version, application_id); a
  database with tables but without our marker is refused untouched;
- every write transaction first takes one advisory lock, so the writers of
  all hosts queue as SQLite's writers do on its file lock, and two hosts
  creating or migrating the schema at once cannot both do it: one wins, the
  other waits, then finds the work done;
- read transactions run at REPEATABLE READ: one snapshot, as in SQLite.

When the connection drops while this process is measuring, the runs it began
are finished in the local SQLite store (memfx.store.default_db_path) and the
user is told to `memfx push` them later (_fail_over).
"""
from __future__ import annotations

import logging
import re
import sys
import urllib.parse

from .errors import StoreError, StoreUnavailable
from .store_sql import (_SCHEMA_V1, BUSY_TIMEOUT_MS, SCHEMA_VERSION, _survey_dict,
                        default_db_path, utcnow_iso)
from .store_sqlite import Store

URL_SCHEMES = ("postgresql://", "postgres://")

# psycopg logs "error ignored in rollback ..." when a connection is lost
# inside a transaction; with no logging configured Python prints that on
# stderr before memfx's own one-line message.  memfx reports the error
# itself, so psycopg's log records go nowhere.
logging.getLogger("psycopg").addHandler(logging.NullHandler())
logging.getLogger("psycopg").propagate = False
APPLICATION = "memfx"            # the marker in meta: this database is ours
# The advisory lock every write transaction holds (any fixed 64-bit key;
# these are the bytes of "MEMF", as APPLICATION_ID in store.py).
WRITE_LOCK_KEY = 0x4D454D46
CONNECT_TIMEOUT_S = 10


def is_url(target) -> bool:
    return isinstance(target, str) and target.startswith(URL_SCHEMES)


# What a store target looks like when it is meant as a URL: a scheme with
# "//" ("postgresq://..."), a word and ":/" ("postgresql:/user:pw@/db"), or
# credentials ("user:pw@host").  Such a target is never taken as a file path.
_SCHEME_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/")


def looks_like_url(target: str) -> bool:
    return "://" in target or bool(_SCHEME_LIKE.match(target)) or \
        ("@" in target and ":" in target)


def mask_secrets(text: str) -> str:
    """`text` with anything that may be a password replaced by ***: the part
    after the first ':' of the user information (before the last '@' of the
    authority) and password=... parameters.  Works on text that is not a
    valid URL, which is when it is needed most (a message about a typo)."""
    text = re.sub(r"(?i)(password\s*=\s*)('[^']*'|[^&\s]*)", r"\1***", text)
    at = text.rfind("@")
    if at < 0:
        return text
    start = text.find("://")
    start = start + 3 if start >= 0 else (m.end() if (m := _SCHEME_LIKE.match(text)) else 0)
    userinfo = text[start:at]
    colon = userinfo.find(":")
    if colon < 0:
        return text
    return text[:start] + userinfo[:colon + 1] + "***" + text[at:]


def classify_target(target: str, what: str) -> str:
    """"url" for a PostgreSQL URL, "path" for a file path; anything else that
    looks like a URL is refused (StoreError: one line, secret masked)."""
    if is_url(target):
        try:
            parts = urllib.parse.urlsplit(target)
            parts.port                      # noqa: B018 (raises on a bad port)
        except ValueError as e:
            raise StoreError(f"{what}: not a valid PostgreSQL URL ({e}): "
                             f"{mask_secrets(target)}") from None
        return "url"
    if looks_like_url(target):
        raise StoreError(f"{what}: {mask_secrets(target)} looks like a URL but is not a "
                         f"postgresql:// or postgres:// one")
    if _CONNINFO.match(target):
        raise StoreError(f"{what}: {mask_secrets(target)} looks like a libpq connection string; "
                         f"give a postgresql:// URL (or a file path without '=')")
    return "path"


# libpq's keyword/value form ("host=/run/pg dbname=memfx password=..."): a
# path that begins with one of its keywords and '=' is almost surely one
_CONNINFO = re.compile(r"^\s*(host|hostaddr|port|dbname|user|password|passfile|service|"
                       r"sslmode|options|application_name|connect_timeout)\s*=", re.I)


def redact(url: str) -> str:
    """The URL without its password (what messages and reports show)."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port                          # noqa: B018 (raises on a bad port)
    except ValueError:
        return mask_secrets(url)
    query = urllib.parse.urlencode(
        [(k, "***" if k == "password" else v)
         for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)], safe="/:")
    if parts.password is not None:
        netloc = (parts.username or "") + ":***@" + parts.netloc.rsplit("@", 1)[-1]
        parts = parts._replace(netloc=netloc)
    return urllib.parse.urlunsplit(parts._replace(query=query))


def _translate_schema(sqlite_schema: str) -> str:
    """The SQLite schema in PostgreSQL's types: 64-bit integers, double
    precision reals, an identity column where SQLite has its rowid alias,
    and an explicit rowid on runs and surveys (the queries order rows started
    in the same second by it, as SQLite's implicit rowid)."""
    sql = re.sub(r"\bINTEGER PRIMARY KEY\b", "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
                 sqlite_schema)
    sql = re.sub(r"\bINTEGER\b(?! GENERATED)", "BIGINT", sql)
    sql = re.sub(r"\bREAL\b", "DOUBLE PRECISION", sql)
    for table in ("surveys", "runs"):
        sql = sql.replace(f"CREATE TABLE {table} (", f"CREATE TABLE {table} (rowid BIGSERIAL,")
    return sql


def _without_secret(text: str, url: str) -> str:
    """`text` (a driver's message) with the URL's password, as written in
    the URL or decoded, replaced by ***: libpq quotes the token it could not
    parse ("invalid percent-encoded token: ...")."""
    try:
        raw = urllib.parse.urlsplit(url).netloc.rpartition("@")[0].partition(":")[2]
    except ValueError:
        raw = ""
    for secret in {raw, urllib.parse.unquote(raw)} - {""}:
        text = text.replace(secret, "***")
    return mask_secrets(text)


def _first_line(error: Exception) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


_PLACEHOLDERS: dict[str, str] = {}


def _pg_sql(sql: str) -> str:
    # The shared queries hold no "%" and no "?" but placeholders.
    out = _PLACEHOLDERS.get(sql)
    if out is None:
        out = _PLACEHOLDERS[sql] = sql.replace("%", "%%").replace("?", "%s")
    return out


class _Row(tuple):
    """A result row readable by index and by column name, as sqlite3.Row."""

    def __new__(cls, values, names, index):
        row = super().__new__(cls, values)
        row._names, row._index = names, index
        return row

    def __getitem__(self, key):
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self):
        return list(self._names)


def _row_factory(cursor):
    names = tuple(d.name for d in cursor.description or ())
    index = {}
    for i, name in enumerate(names):
        index.setdefault(name, i)
    return lambda values: _Row(values, names, index)


class _Connection:
    """A psycopg connection with the sqlite3 calls the shared query code makes."""

    def __init__(self, raw):
        self.raw = raw

    def execute(self, sql: str, params=()):
        cursor = self.raw.cursor(row_factory=_row_factory)
        cursor.execute(_pg_sql(sql), tuple(params))
        return cursor

    def executemany(self, sql: str, rows) -> None:
        rows = [tuple(r) for r in rows]
        if rows:
            self.raw.cursor().executemany(_pg_sql(sql), rows)

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus
        return self.raw.info.transaction_status != TransactionStatus.IDLE

    def close(self) -> None:
        self.raw.close()


class PostgresStore(Store):
    """The results store in a PostgreSQL database (see the module docstring)."""

    backend = "postgresql"

    def __init__(self, url: str, memfx_version: str = "0", fallback_path=None, notify=None):
        try:
            import psycopg
        except ImportError:
            raise StoreError("a postgresql:// database needs psycopg 3: "
                             "pip install 'memfx[postgres]'") from None
        import socket
        self._psycopg = psycopg
        self.DATABASE_ERRORS = (psycopg.Error,)
        self.url = url
        self.path = redact(url)
        self.memfx_version = memfx_version
        self._host = socket.gethostname()
        self._conn = None
        self._fallback: Store | None = None
        self._fallback_path = fallback_path
        self._notify = notify or (lambda line: sys.stderr.write(f"memfx: {line}\n"))
        self._journal_surveys: dict[str, dict] = {}
        self._journal_runs: dict[str, dict] = {}
        try:
            raw = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        except (psycopg.Error, ValueError) as e:
            raise StoreError(f"cannot connect to {self.path}: "
                             f"{_without_secret(_first_line(e), url)}") from None
        self._conn = _Connection(raw)
        try:
            # As SQLite's busy timeout: a writer waits this long for the lock,
            # then says so; and a session that stalls inside a transaction
            # (a host frozen mid-write) is ended by the server after it, so
            # it cannot hold every other host's writes.
            for setting in ("lock_timeout", "idle_in_transaction_session_timeout"):
                raw.execute(f"SET {setting} = {int(BUSY_TIMEOUT_MS)}")
            with self._read() as conn:
                version = self._schema_version_of(conn)
            if version != SCHEMA_VERSION:      # a read-only role can use an up-to-date store
                self._initialise_or_migrate()
        except BaseException:
            self.close()
            raise

    # ---- backend hooks -------------------------------------------------

    def _begin(self, conn, begin: str) -> None:
        if begin == "BEGIN IMMEDIATE":       # a write: queue behind every other writer
            conn.execute("BEGIN")
            conn.execute("SELECT pg_advisory_xact_lock(?)", (WRITE_LOCK_KEY,))
        else:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def _rollback_quietly(self, conn) -> None:
        try:
            if not conn.raw.closed and conn.in_transaction:
                conn.execute("ROLLBACK")
        except self._psycopg.Error:
            pass          # a dropped connection has nothing left to roll back

    def _store_error(self, error: Exception) -> StoreError:
        errors = self._psycopg.errors
        if isinstance(error, errors.InsufficientPrivilege):
            user = self._conn.raw.info.user if self._conn else "?"
            return StoreError(f"{self.path}: role {user} may not write here "
                              f"({_first_line(error)}); a read-only role can only read")
        if isinstance(error, self._psycopg.OperationalError) and (
                self._conn is None or self._conn.raw.closed or self._conn.raw.broken):
            return StoreUnavailable(f"lost the connection to {self.path}: {_first_line(error)}")
        return StoreError(f"{self.path}: {_first_line(error)}")

    def _schema_version_of(self, conn) -> int:
        """Schema version of our database, 0 for one without tables;
        StoreError for a foreign or newer one."""
        n_tables = conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f')"
        ).fetchone()[0]
        if n_tables == 0:
            return 0
        try:
            meta = dict(tuple(row) for row in conn.execute(
                "SELECT key, value FROM meta WHERE key IN ('application', 'schema_version')"))
        except self._psycopg.Error:
            meta = {}
        if meta.get("application") != APPLICATION:
            raise StoreError(f"{self.path} is a PostgreSQL database of another program "
                             f"({n_tables} tables, no memfx marker in a meta table)")
        try:
            version = int(meta.get("schema_version"))
        except (TypeError, ValueError):
            raise StoreError(f"{self.path} is a damaged memfx database (schema "
                             f"{meta.get('schema_version')!r})") from None
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path} was written by a newer memfx "
                             f"(schema {version} > {SCHEMA_VERSION})")
        if version < 1:
            raise StoreError(f"{self.path} is a damaged memfx database (schema {version})")
        return version

    def _create_schema(self, conn) -> None:
        for statement in _translate_schema(_SCHEMA_V1).split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", [
            ("application", APPLICATION),
            ("schema_version", "1"),
            ("created_by", self.memfx_version),
            ("created", utcnow_iso()),
        ])

    def _set_version(self, conn, version: int) -> None:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._fallback is not None:
            self._fallback.close()

    # ---- when the connection drops -------------------------------------
    #
    # What this process is writing is also kept in memory (the journal): the
    # surveys and runs it began, and the samples and artifacts of each run
    # until it is finished in PostgreSQL.  When the connection drops, the
    # journal is written into the local SQLite store, the user is told to
    # push later, and from then on this store reads and writes that file.

    def _journaled(self, write, *args, repeat=True):
        """write(self, *args) here, or on the fallback once the connection
        is gone (again there if it failed here, unless `repeat` is False:
        the journal already holds its effect)."""
        if self._fallback is None:
            try:
                return write(self, *args)
            except StoreUnavailable as e:
                if not (self._journal_runs or self._journal_surveys):
                    raise          # nothing of ours to save: a plain error
                self._fail_over(e)
                if not repeat:
                    return None
        return getattr(self._fallback, write.__name__)(*args)

    def _fail_over(self, error: StoreUnavailable) -> None:
        from .schema import EXPORT_FORMAT, EXPORT_FORMAT_VERSION
        path = self._fallback_path or default_db_path()
        fallback = Store(path, memfx_version=self.memfx_version)
        for survey in self._journal_surveys.values():
            fallback.adopt_survey(survey)
        for entry in self._journal_runs.values():
            survey_id = entry["run"].get("survey_id")
            fallback.adopt_run({"format": EXPORT_FORMAT, "format_version": EXPORT_FORMAT_VERSION,
                                "run": entry["run"], "machine": entry["machine"],
                                "survey": self._journal_surveys.get(survey_id),
                                "samples": entry["samples"], "artifacts": entry["artifacts"]})
        shared = self.path
        self._fallback, self.path = fallback, str(fallback.path)
        try:
            self._conn.close()
        except Exception:
            pass
        what = ", ".join(self._journal_runs) or ", ".join(self._journal_surveys)
        self._notify(f"{error}; {what} continues in {fallback.path}: "
                     f"run `memfx push --to {shared}` when the database is back")

    def begin_survey(self, preset, argv, note=None, labels=None):
        def begin_survey(store, *args):
            survey_id = Store.begin_survey(store, *args)
            with store._read() as conn:
                row = conn.execute("SELECT * FROM surveys WHERE id = ?", (survey_id,)).fetchone()
            store._journal_surveys[survey_id] = _survey_dict(row)
            return survey_id
        return self._journaled(begin_survey, preset, argv, note, labels)

    def finish_survey(self, survey_id, status):
        def finish_survey(store, survey_id, status):
            Store.finish_survey(store, survey_id, status)
            store._journal_surveys.pop(survey_id, None)
        return self._journaled(finish_survey, survey_id, status)

    def begin_run(self, experiment, params, preset, machine, survey_id=None, labels=None):
        def begin_run(store, *args):
            run_id = Store.begin_run(store, *args)
            run = Store.run(store, run_id)
            for derived in ("machine", "machine_id", "machine_row", "n_samples"):
                run.pop(derived)
            store._journal_runs[run_id] = {"run": run, "machine": args[3], "samples": [],
                                           "artifacts": {}}
            return run_id
        return self._journaled(begin_run, experiment, params, preset, machine, survey_id, labels)

    def add_samples(self, run_id, samples):
        def add_samples(store, run_id, samples):
            entry = store._journal_runs.get(run_id)
            if entry is not None:        # kept first: the commit may land or not
                first = len(entry["samples"])
                entry["samples"] += [dict(s, seq=first + i) for i, s in enumerate(samples)]
            try:
                Store.add_samples(store, run_id, samples)
            except StoreUnavailable:
                raise
            except BaseException:
                if entry is not None:
                    del entry["samples"][first:]
                raise
        # A batch that failed with the connection is in the journal, so the
        # fallback has it already.
        return self._journaled(add_samples, run_id, samples, repeat=False)

    def set_artifact(self, run_id, name, data):
        def set_artifact(store, run_id, name, data):
            Store.set_artifact(store, run_id, name, data)
            if run_id in store._journal_runs:
                store._journal_runs[run_id]["artifacts"][name] = data
        return self._journaled(set_artifact, run_id, name, data)

    def finish_run(self, run_id, status, error=None):
        def finish_run(store, run_id, status, error):
            Store.finish_run(store, run_id, status, error)
            store._journal_runs.pop(run_id, None)     # safe in PostgreSQL now
        return self._journaled(finish_run, run_id, status, error)


def _read_from_fallback(name):
    shared = getattr(Store, name)

    def method(self, *args, **kwargs):
        if self._fallback is not None:
            return getattr(self._fallback, name)(*args, **kwargs)
        return shared(self, *args, **kwargs)
    method.__name__, method.__doc__ = name, shared.__doc__
    return method


for _name in ("runs", "run", "samples", "survey", "surveys", "artifacts", "export_run",
              "samples_csv", "machines", "remove", "prune", "mark_stale_running", "import_run",
              "push_run", "settle_survey", "adopt_run", "adopt_survey"):
    setattr(PostgresStore, _name, _read_from_fallback(_name))
