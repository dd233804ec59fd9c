"""The results store in one SQLite file (store.py opens it): WAL mode and
one short write transaction per call, so a process killed at any moment
leaves a readable database holding every sample committed so far, and
several processes may write to one file at once.

A file is only ever opened read-write after a read-only look has shown that it
is ours (or empty): a foreign or newer file is refused without being touched.
"""
from __future__ import annotations

import contextlib
import csv
import os
import secrets
import socket
import sqlite3
import time
from typing import Iterator

from ..model.errors import StoreError
from ..model.status import COMPLETE, FINAL_STATUSES, INTERRUPTED, RUNNING
from . import sql as _sql
from .files import (  # noqa: F401
    SQLITE_SIBLING_SUFFIXES,
    NotWritable,
    check_writable,
    file_uri,
    lacks_write,
    open_error,
    read_only_connection,
    sqlite_path,
)
from .schema import EXPORT_FORMAT, EXPORT_FORMAT_VERSION, MACHINE, readable
from .sql import (
    _INSERT_SAMPLE,
    _NEWEST_FIRST,
    _RUN_COLUMNS,
    _SCHEMA_V1,
    _SELECT_RUNS,
    _UNREADABLE,
    APPLICATION_ID,
    BUSY_TIMEOUT_MS,
    MIGRATIONS,
    StoredAnalyses,
    _check_export_doc,
    _check_status,
    _csv_cell,
    _dumps,
    _exists,
    _imported_as_settled,
    _insert_survey,
    _is_busy,
    _iso_to_unix,
    _labels_of,
    _loads,
    _pid_alive,
    _run_dict,
    _sample_dict,
    _sample_row,
    _slug,
    _stamp,
    _survey_dict,
    check_labels,
    default_db_path,
    redact_argv,
    redact_commands,
    shown,
    surveys_back,
    utcnow_iso,
)


class Store(StoredAnalyses):
    """The results database; also a context manager that closes it.
    `for_reading`: the caller only reads, so an existing file that cannot be
    written (read-only media, no write permission) is opened read-only."""

    _read_only: str | None = None       # why writes are refused, when they are

    def __init__(self, path: str | os.PathLike | None = None, memfx_version: str = "0",
                 for_reading: bool = False):
        self.path = sqlite_path(path) if path is not None else default_db_path()
        self.memfx_version = memfx_version
        self._host = socket.gethostname()
        self._conn: sqlite3.Connection | None = None
        try:
            check_writable(self.path)
            if self.path.exists():
                self._probe_read_only()
            self._conn = self._open_read_write()
        except NotWritable as e:
            # Reading needs no write: the same file, opened read-only.
            if not (for_reading and self.path.is_file()):
                raise
            self._conn = self._open_read_only(str(e))

    # ---- opening -------------------------------------------------------

    def _probe_read_only(self) -> None:
        try:
            conn = sqlite3.connect(file_uri(self.path, "mode=ro"), uri=True,
                                   timeout=BUSY_TIMEOUT_MS / 1000)
        except sqlite3.Error as e:
            raise open_error(f"cannot open {shown(self.path)}", e) from None
        try:
            self._schema_version_of(conn)
        except sqlite3.Error as e:
            raise open_error(f"cannot open {shown(self.path)}", e) from None
        finally:
            conn.close()

    def _open_read_only(self, why: str) -> sqlite3.Connection:
        """The file read-only (files.py); an older schema is migrated in
        a copy in memory, the file left untouched.  Writes are refused."""
        conn = read_only_connection(self.path, why)
        try:
            if self._schema_version_of(conn) != _sql.SCHEMA_VERSION:
                memory = sqlite3.connect(":memory:", isolation_level=None)
                conn.backup(memory)
                conn.close()
                conn = self._conn = memory
                conn.row_factory = sqlite3.Row
                self._initialise_or_migrate()
        except BaseException:
            conn.close()
            self._conn = None
            raise
        self._read_only = why
        return conn

    def _schema_version_of(self, conn: sqlite3.Connection) -> int:
        """Schema version of an existing memfx DB, 0 for an empty file;
        StoreError for anything else."""
        # One statement, so one snapshot: a process creating the file at the
        # same moment cannot make us see its tables but not its app id.
        try:
            app_id, version, n_tables = conn.execute(
                "SELECT (SELECT application_id FROM pragma_application_id),"
                " (SELECT user_version FROM pragma_user_version),"
                " (SELECT count(*) FROM sqlite_master)").fetchone()
        except sqlite3.DatabaseError as e:
            if lacks_write(e):
                raise         # cannot open it (its -shm on read-only media): not a verdict
            raise StoreError(f"{shown(self.path)} is not a memfx results database "
                             f"({shown(e)})") from None
        if app_id == APPLICATION_ID:
            if version > _sql.SCHEMA_VERSION:
                raise StoreError(f"{shown(self.path)} was written by a newer memfx "
                                 f"(schema {version} > {_sql.SCHEMA_VERSION})")
            if version < 1:
                raise StoreError(f"{shown(self.path)} is a damaged memfx database "
                                 f"(schema {version})")
            return version
        if app_id != 0 or n_tables:
            raise StoreError(f"{shown(self.path)} is an SQLite database of another program "
                             f"(application_id {app_id:#x}, {n_tables} schema objects)")
        return 0

    def _open_read_write(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None,
                                   timeout=BUSY_TIMEOUT_MS / 1000)
        except sqlite3.Error as e:
            raise open_error(f"cannot open {shown(self.path)}", e) from None
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._enable_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")
            self._conn = conn
            self._initialise_or_migrate()
        except BaseException as e:
            conn.close()
            self._conn = None
            if isinstance(e, sqlite3.Error):
                raise open_error(f"cannot use {shown(self.path)}", e) from None
            raise
        return conn

    def _enable_wal(self, conn: sqlite3.Connection) -> None:
        # Switching journal mode needs an exclusive lock and SQLite answers
        # SQLITE_BUSY at once instead of calling the busy handler, so
        # processes creating the same new file together must retry here.
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                break
            except sqlite3.OperationalError as e:
                if not _is_busy(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)
        if mode.lower() != "wal":
            raise StoreError(f"{shown(self.path)}: cannot switch to WAL journal mode (got {mode})")

    def _initialise_or_migrate(self) -> None:
        # Re-checked under the write lock: another process may have created
        # or upgraded the file since the read-only look.
        with self._write() as conn:
            version = self._schema_version_of(conn)
            if version == 0:
                self._create_schema(conn)
                version = 1
            self._migrate(conn, version)

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        for statement in _SCHEMA_V1.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("PRAGMA user_version = 1")
        conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", [
            ("schema_version", "1"),
            ("created_by", self.memfx_version),
            ("created", utcnow_iso()),
        ])

    def _migrate(self, conn: sqlite3.Connection, version: int) -> None:
        while version < _sql.SCHEMA_VERSION:
            step = MIGRATIONS.get(version)
            if step is None:
                raise StoreError(f"{shown(self.path)}: no migration from schema {version}")
            try:
                step(conn)
            except self.DATABASE_ERRORS as e:       # of the kind _store_error says (no access...)
                raise type(self._store_error(e))(f"{shown(self.path)}: migration from schema "
                                                 f"{version} failed: {shown(e)}") from None
            version += 1
            self._set_version(conn, version)

    def _set_version(self, conn, version: int) -> None:
        conn.execute(f"PRAGMA user_version = {version}")
        conn.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)"
                     " ON CONFLICT (key) DO UPDATE SET value = excluded.value", (str(version),))

    # ---- transactions --------------------------------------------------

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        # IMMEDIATE takes the write lock up front, so concurrent writers queue
        # on busy_timeout instead of failing when a read turns into a write.
        if self._read_only:
            raise StoreError(f"{shown(self.path)} is open read-only ({self._read_only}): "
                             "this command would write to it")
        yield from self._transaction("BEGIN IMMEDIATE")

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        # One snapshot for multi-query reads, so a concurrent writer cannot
        # make a run and its samples disagree.
        yield from self._transaction("BEGIN")

    def _transaction(self, begin: str) -> Iterator[sqlite3.Connection]:
        conn = self._connection()
        try:
            self._begin(conn, begin)
        except self.DATABASE_ERRORS as e:
            raise self._store_error(e) from None
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException as e:
            if isinstance(e, self.DATABASE_ERRORS):
                self._rollback_quietly(conn)
                raise self._store_error(e) from None
            self._rollback_quietly(conn)
            raise

    # Backend hooks (memfx.store.postgres overrides them): the query code above and
    # below is shared, with "?" placeholders and SQL both backends accept.
    DATABASE_ERRORS: tuple = (sqlite3.Error,)

    def _begin(self, conn, begin: str) -> None:
        conn.execute(begin)

    def _rollback_quietly(self, conn) -> None:
        if conn.in_transaction:
            conn.execute("ROLLBACK")

    def _store_error(self, error: Exception) -> StoreError:
        return open_error(shown(self.path), error)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"store {shown(self.path)} is closed")
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- surveys -------------------------------------------------------

    def begin_survey(self, preset: str, argv: list[str], note: str | None = None,
                     labels: dict | None = None) -> str:
        now = time.time()
        labels_json = _dumps(check_labels(labels), "labels")
        with self._write() as conn:
            survey_id = self._unused_id(conn, "surveys", "s-" + _stamp(now) + "-{}")
            conn.execute(
                "INSERT INTO surveys(id, started, status, preset, argv, note, pid, host, labels)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                # stored without secrets (a --db URL's password): reports print it
                (survey_id, utcnow_iso(now), RUNNING, preset,
                 _dumps(redact_argv(list(argv)), "argv"),
                 note, os.getpid(), self._host, labels_json))
        return survey_id

    def finish_survey(self, survey_id: str, status: str) -> None:
        _check_status(status, FINAL_STATUSES)
        with self._write() as conn:
            cur = conn.execute("UPDATE surveys SET status = ?, finished = ? WHERE id = ?",
                               (status, utcnow_iso(), survey_id))
            if cur.rowcount == 0:
                raise StoreError(f"no survey {survey_id!r} in {shown(self.path)}")

    def surveys(self) -> list[dict]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT s.*, (SELECT count(*) FROM runs r WHERE r.survey_id = s.id) AS n_runs"
                " FROM surveys s ORDER BY s.started DESC, s.rowid DESC").fetchall()
        return [self._as_displayed(dict(_survey_dict(row), n_runs=row["n_runs"])) for row in rows]

    def survey(self, survey_id_or_prefix: str) -> dict:
        with self._read() as conn:
            survey_id = self._resolve(conn, "surveys", "survey", survey_id_or_prefix)
            row = conn.execute("SELECT * FROM surveys WHERE id = ?", (survey_id,)).fetchone()
        return self._as_displayed(dict(_survey_dict(row), runs=self.runs(survey_id=survey_id)))

    def survey_run_states(self, survey_id_or_prefix: str) -> dict:
        """survey(), each run as the state its stored documents are judged
        by (id, survey_id, experiment, status, started, finished, labels,
        error, pid, host) without its parameters, sample count or machine:
        runs() checks every run's parameters against its experiment's
        declarations, which imports every experiment, and reading a
        survey's stored documents needs none of it."""
        with self._read() as conn:
            survey_id = self._resolve(conn, "surveys", "survey", survey_id_or_prefix)
            row = conn.execute("SELECT * FROM surveys WHERE id = ?", (survey_id,)).fetchone()
            rows = conn.execute(
                "SELECT r.id, r.survey_id, r.experiment, r.status, r.started, r.finished,"
                " r.labels, r.error, r.pid, r.host FROM runs r WHERE r.survey_id = ?"
                + _NEWEST_FIRST, (survey_id,)).fetchall()
        runs = []
        for r in rows:
            # as _run_dict reads these columns
            run = {k: (None if r[k] is None else r[k] if isinstance(r[k], str) else str(r[k]))
                   for k in ("id", "survey_id", "experiment", "status", "started", "finished",
                             "error", "host")}
            run["pid"] = r["pid"] if isinstance(r["pid"], int) else None
            run["labels"] = _labels_of(r["labels"])
            runs.append(self._as_displayed(run))
        return self._as_displayed(dict(_survey_dict(row), runs=runs))

    # ---- runs ----------------------------------------------------------

    def begin_run(self, experiment: str, params: dict, preset: str, machine: dict | None,
                  survey_id: str | None = None, labels: dict | None = None) -> str:
        """A new running run. A run of a survey carries the survey's labels
        under its own."""
        now = time.time()
        params_json = _dumps(redact_commands(params), "params")     # tune's command line
        labels = check_labels(labels)
        with self._write() as conn:
            if survey_id is not None:
                row = conn.execute("SELECT labels FROM surveys WHERE id = ?", (survey_id,)).fetchone()
                if row is None:
                    raise StoreError(f"no survey {survey_id!r} in {shown(self.path)}")
                labels = {**_labels_of(row["labels"]), **labels}
            machine_row = self._machine_row(conn, machine)
            run_id = self._unused_id(conn, "runs", f"{_stamp(now)}-{_slug(experiment)}-{{}}")
            conn.execute(
                "INSERT INTO runs(id, survey_id, experiment, status, started, preset, params,"
                " machine_row, memfx_version, pid, host, started_unix, labels, machine_state)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, survey_id, experiment, RUNNING, utcnow_iso(now), preset, params_json,
                 machine_row, self.memfx_version, os.getpid(), self._host, now,
                 _dumps(labels, "labels"),
                 None if machine is None else _dumps(machine, "machine fingerprint")))
        return run_id

    def add_samples(self, run_id: str, samples: list[dict]) -> None:
        rows = [_sample_row(s) for s in samples]
        with self._write() as conn:
            self._require_run(conn, run_id)
            first = conn.execute("SELECT coalesce(max(seq) + 1, 0) FROM samples WHERE run_id = ?",
                                 (run_id,)).fetchone()[0]
            conn.executemany(_INSERT_SAMPLE,
                             [(run_id, first + i, *row) for i, row in enumerate(rows)])

    def finish_run(self, run_id: str, status: str, error: str | None = None,
                   measured_s: float | None = None) -> None:
        """Mark a run ended.  Its duration is ``measured_s``, the seconds its
        replicas measured, when given (a survey measures a run's replicas in
        rounds minutes apart: its start-to-end span counts the other
        experiments' rounds too), else the span from its start."""
        _check_status(status, FINAL_STATUSES)
        now = time.time()
        with self._write() as conn:
            self._require_run(conn, run_id)
            if measured_s is None:
                conn.execute(
                    "UPDATE runs SET status = ?, error = ?, finished = ?,"
                    " duration_s = ? - started_unix WHERE id = ?",
                    (status, error, utcnow_iso(now), now, run_id))
            else:
                conn.execute("UPDATE runs SET status = ?, error = ?, finished = ?, duration_s = ?"
                             " WHERE id = ?", (status, error, utcnow_iso(now),
                                               float(measured_s), run_id))

    def runs(self, experiment: str | None = None, survey_id: str | None = None,
             status: str | None = None, labels: dict | None = None) -> list[dict]:
        """Runs, newest first; `labels` keeps the runs carrying every one of
        those key=value labels."""
        if status is not None:
            _check_status(status)
        where, args = [], []
        for column, value in (("experiment", experiment), ("survey_id", survey_id),
                              ("status", status)):
            if value is not None:
                where.append(f"r.{column} = ?")
                args.append(value)
        sql = _SELECT_RUNS + (" WHERE " + " AND ".join(where) if where else "") + _NEWEST_FIRST
        with self._read() as conn:
            runs = [self._as_displayed(_run_dict(row)) for row in conn.execute(sql, args)]
        wanted = (labels or {}).items()
        return [r for r in runs if all(r["labels"].get(k) == v for k, v in wanted)]

    def run(self, run_id_or_prefix: str) -> dict:
        """A run by id, unique id prefix, or "latest"; with its machine."""
        with self._read() as conn:
            run_id = self._resolve(conn, "runs", "run", run_id_or_prefix)
            run = self._as_displayed(
                _run_dict(conn.execute(_SELECT_RUNS + " WHERE r.id = ?", (run_id,)).fetchone()))
            state = conn.execute("SELECT machine_state FROM runs WHERE id = ?",
                                 (run_id,)).fetchone()[0]
            fingerprint = conn.execute("SELECT fingerprint FROM machines WHERE id = ?",
                                       (run["machine_row"],)).fetchone()
        # the run's own fingerprint (schema 3), else its machine's (older rows)
        text = state if state is not None else (fingerprint[0] if fingerprint else None)
        run["machine"] = readable(MACHINE, _loads(text)) if text is not None else None
        return run

    def samples(self, run_id: str) -> list[dict]:
        with self._read() as conn:
            self._require_run(conn, run_id)
            rows = conn.execute("SELECT * FROM samples WHERE run_id = ? ORDER BY seq",
                                (run_id,)).fetchall()
        points: dict[str, dict] = {}          # a run's samples share a few hundred point texts
        return [_sample_dict(row, points) for row in rows]

    # ---- removing ------------------------------------------------------

    def remove(self, ids: list[str]) -> list[dict]:
        """Remove runs and surveys (with their runs) by exact id, all or
        nothing; returns what was removed as [{"kind", "id", "experiment",
        "n_samples"}]. An unknown id, or a run whose process is still
        measuring, is a StoreError and nothing is removed."""
        with self._write() as conn:
            self._mark_stale(conn, "runs")
            self._mark_stale(conn, "surveys")
            run_ids, survey_ids = [], []
            for item in ids:
                if _exists(conn, "runs", item):
                    run_ids.append(item)
                elif _exists(conn, "surveys", item):
                    survey_ids.append(item)
                    run_ids += [row[0] for row in conn.execute(
                        "SELECT id FROM runs WHERE survey_id = ?", (item,))]
                else:
                    raise StoreError(f"no run or survey {item!r} in {shown(self.path)} "
                                     "(rm takes full ids: see memfx runs)")
            return self._remove(conn, list(dict.fromkeys(run_ids)), survey_ids)

    def prune(self, older_than_s: float) -> list[dict]:
        """Remove every run and survey started more than `older_than_s`
        seconds ago (a survey goes with all its runs); running ones stay."""
        cutoff = time.time() - older_than_s
        cutoff_iso = utcnow_iso(cutoff)
        with self._write() as conn:
            self._mark_stale(conn, "runs")
            self._mark_stale(conn, "surveys")
            # surveys keep whole seconds: one started in the cutoff's own
            # second counts as older (as its runs do, by their unix time) --
            # `prune --older-than 0h` removed a survey's runs and kept the
            # survey when both began in the same second as the prune
            survey_ids = [row[0] for row in conn.execute(
                "SELECT id FROM surveys WHERE started <= ? AND status != ?", (cutoff_iso, RUNNING))]
            # (PostgreSQL refuses an empty IN list)
            in_surveys = f" OR survey_id IN ({', '.join('?' * len(survey_ids))})" if survey_ids else ""
            run_ids = [row[0] for row in conn.execute(
                "SELECT id FROM runs WHERE status != ? AND (coalesce(started_unix, 0) < ?"
                + in_surveys + ")", (RUNNING, cutoff, *survey_ids))]
            return self._remove(conn, run_ids, survey_ids)

    def _remove(self, conn: sqlite3.Connection, run_ids: list[str],
                survey_ids: list[str]) -> list[dict]:
        removed = []
        for run_id in run_ids:
            row = conn.execute(_SELECT_RUNS + " WHERE r.id = ?", (run_id,)).fetchone()
            if row["status"] == RUNNING and row["host"] == self._host and row["pid"] is not None \
                    and _pid_alive(row["pid"]):
                raise StoreError(f"run {run_id} is still running (process {row['pid']}); "
                                 "stop it first")
            removed.append({"kind": "run", "id": run_id, "experiment": row["experiment"],
                            "n_samples": row["n_samples"]})
        for survey_id in survey_ids:
            removed.append({"kind": "survey", "id": survey_id})
        self._delete_runs(conn, run_ids)
        conn.executemany("DELETE FROM surveys WHERE id = ?", [(s,) for s in survey_ids])
        return removed

    def _as_displayed(self, item: dict) -> dict:
        """A run or survey as readers should see it: "running" whose process
        on this host is gone reads as interrupted (the same check as
        mark_stale_running, without writing, so reading never changes the
        database)."""
        if item.get("status") == RUNNING and item.get("host") == self._host \
                and not _pid_alive(item.get("pid")):
            item["status"] = INTERRUPTED
            if "experiment" in item and not item.get("error"):
                item["error"] = (f"process {item.get('pid')} on {self._host} ended before"
                                 " the run finished")
        return item

    def mark_stale_running(self) -> int:
        """Mark "running" runs and surveys whose process on this host is gone
        as interrupted; returns the number of runs marked. Runs from other
        hosts are left alone: their processes cannot be checked from here."""
        with self._write() as conn:
            n_runs = self._mark_stale(conn, "runs")
            self._mark_stale(conn, "surveys")
        return n_runs

    def _mark_stale(self, conn: sqlite3.Connection, table: str) -> int:
        rows = conn.execute(f"SELECT id, pid FROM {table} WHERE status = ? AND host = ?",
                            (RUNNING, self._host)).fetchall()
        # A pid that is not a positive integer (an older import stored
        # anything) cannot be a live process here.
        stale = [(row["id"], row["pid"]) for row in rows
                 if not (isinstance(row["pid"], int) and 0 < row["pid"] < 2 ** 31)
                 or not _pid_alive(row["pid"])]
        for item_id, pid in stale:
            if table == "runs":
                conn.execute("UPDATE runs SET status = ?, error = ? WHERE id = ?",
                             (INTERRUPTED, f"process {pid} on {self._host} ended before"
                              " the run finished", item_id))
            else:
                conn.execute("UPDATE surveys SET status = ? WHERE id = ?", (INTERRUPTED, item_id))
        return len(stale)

    # ---- artifacts -----------------------------------------------------

    def set_artifact(self, run_id: str, name: str, data) -> None:
        data_json = _dumps(redact_commands(data), f"artifact {name!r}")
        with self._write() as conn:
            self._require_run(conn, run_id)
            conn.execute("INSERT INTO artifacts(run_id, name, data) VALUES (?, ?, ?)"
                         " ON CONFLICT (run_id, name) DO UPDATE SET data = excluded.data",
                         (run_id, name, data_json))

    def artifacts(self, run_id: str) -> dict:
        with self._read() as conn:
            self._require_run(conn, run_id)
            rows = conn.execute("SELECT name, data FROM artifacts WHERE run_id = ? ORDER BY name",
                                (run_id,)).fetchall()
        out = {}
        for row in rows:
            data = _loads(row["data"], _UNREADABLE)
            if data is not _UNREADABLE:     # an artifact that does not parse is left out
                out[row["name"]] = redact_commands(data)
        return out

    # ---- export / import -----------------------------------------------

    def export_run(self, run_id_or_prefix: str) -> dict:
        run = self.run(run_id_or_prefix)
        machine = run.pop("machine")
        for derived in ("machine_id", "machine_row", "n_samples"):  # derived, or local to this DB
            run.pop(derived)
        survey = None
        if run["survey_id"] is not None:
            with self._read() as conn:
                row = conn.execute("SELECT * FROM surveys WHERE id = ?",
                                   (run["survey_id"],)).fetchone()
            survey = _survey_dict(row) if row else None
        return {
            "format": EXPORT_FORMAT, "format_version": EXPORT_FORMAT_VERSION,
            "run": run, "machine": machine, "survey": survey,
            "samples": self.samples(run["id"]), "artifacts": self.artifacts(run["id"]),
        }

    def import_run(self, doc: dict) -> str:
        """Store a raw-export document as a new run. The document is checked
        whole against the schema (memfx.store.schema) before anything is written."""
        run = _check_export_doc(doc)
        doc = _imported_as_settled(doc)
        run = doc["run"]
        prepared = self._prepare_import(doc, run)
        with self._write() as conn:
            if _exists(conn, "runs", run["id"]):
                raise StoreError(f"run {run['id']} already in {shown(self.path)}")
            self._check_joins_own_survey(conn, doc)
            self._insert_run(conn, doc, prepared)
        return run["id"]

    def _check_joins_own_survey(self, conn, doc: dict) -> None:
        # An imported run may only join a survey that is the one it was
        # exported with: the same row (started, argv, preset...) and no run of
        # the same experiment in it already.  Anything else would change a
        # survey measured here, or merge two surveys under one id.
        survey = doc.get("survey")
        if not survey:
            named = doc["run"].get("survey_id")
            # a run naming a survey without carrying it joins no survey here
            if named and _exists(conn, "surveys", named):
                raise StoreError(f"run {doc['run']['id']} names survey {named}, which is in "
                                 f"{shown(self.path)} but not in the document: import the "
                                 f"survey's own export")
            return
        row = conn.execute("SELECT * FROM surveys WHERE id = ?", (survey["id"],)).fetchone()
        if row is None:
            return
        stored = _survey_dict(row)
        if "argv" in survey:                      # stored redacted
            survey = dict(survey, argv=redact_argv(survey["argv"]))
        keys = [k for k in ("started", "preset", "argv", "labels") if k in survey]
        if any(stored.get(k) != survey.get(k) for k in keys) or conn.execute(
                "SELECT 1 FROM runs WHERE survey_id = ? AND experiment = ?",
                (survey["id"], doc["run"]["experiment"])).fetchone():
            raise StoreError(f"run {doc['run']['id']} names survey {survey['id']}, which is "
                             f"already in {shown(self.path)} and is not the survey it was "
                             "exported with")

    def push_run(self, doc: dict) -> str:
        """Store a raw-export document (export_run) under its own run id,
        idempotently; returns "added", "replaced" (the copy here was partial:
        still marked running, or fewer samples) or "unchanged".  Checked
        whole first; one transaction, so a failure changes nothing."""
        run = _check_export_doc(doc)
        prepared = self._prepare_import(doc, run)
        n_samples = len(prepared["samples"])
        with self._write() as conn:
            row = conn.execute("SELECT status, (SELECT count(*) FROM samples WHERE run_id = ?)"
                               " FROM runs WHERE id = ?", (run["id"], run["id"])).fetchone()
            if row is not None:
                partial = row[1] < n_samples or (row[0] == RUNNING and run["status"] != RUNNING)
                if not partial:
                    self._update_survey_status(conn, doc.get("survey"))
                    return "unchanged"
                self._delete_runs(conn, [run["id"]])
            self._insert_run(conn, doc, prepared)
            self._update_survey_status(conn, doc.get("survey"))
        return "added" if row is None else "replaced"

    def adopt_run(self, doc: dict) -> None:
        """Store a run this process measured (an export_run-shaped document
        built from its own records: memfx.store.postgres's journal) under its id,
        with its survey.  Not an import: the document comes from this
        process, so only the checks of the live path apply (_sample_row)."""
        prepared = self._prepare_import(doc, doc["run"])
        with self._write() as conn:
            if _exists(conn, "runs", doc["run"]["id"]):
                self._delete_runs(conn, [doc["run"]["id"]])
            self._insert_run(conn, doc, prepared)

    def adopt_survey(self, survey: dict) -> None:
        """A survey row this process began elsewhere (see adopt_run)."""
        with self._write() as conn:
            if not _exists(conn, "surveys", survey["id"]):
                _insert_survey(conn, survey)

    def _prepare_import(self, doc: dict, run: dict) -> dict:
        # Everything that can refuse the document, before the transaction.
        run_id = run["id"]
        return {
            "run": run,
            "samples": [(run_id, s["seq"], *_sample_row({k: v for k, v in s.items() if k != "seq"}))
                        for s in doc.get("samples") or []],
            "artifacts": [(run_id, name, _dumps(redact_commands(data), f"artifact {name!r}"))
                          for name, data in (doc.get("artifacts") or {}).items()],
        }

    def _insert_run(self, conn, doc: dict, prepared: dict) -> None:
        run = prepared["run"]
        survey = doc.get("survey")
        if survey and not _exists(conn, "surveys", survey["id"]):
            _insert_survey(conn, survey)
        values = {c: run.get(c) for c in _RUN_COLUMNS}
        values["params"] = _dumps(redact_commands(run.get("params") or {}), "params")
        values["labels"] = _dumps(check_labels(run.get("labels")), "labels")
        values["machine_row"] = self._machine_row(conn, doc.get("machine"))
        values["machine_state"] = None if doc.get("machine") is None else \
            _dumps(doc["machine"], "machine fingerprint")
        values["started_unix"] = _iso_to_unix(run["started"])
        columns = ", ".join(values)
        conn.execute(f"INSERT INTO runs({columns}) VALUES ({', '.join('?' * len(values))})",
                     list(values.values()))
        conn.executemany(_INSERT_SAMPLE, prepared["samples"])
        conn.executemany("INSERT INTO artifacts(run_id, name, data) VALUES (?, ?, ?)",
                         prepared["artifacts"])

    def settle_survey(self, survey: dict) -> None:
        """A survey here still marked running takes `survey`'s final state
        (it was pushed while it ran)."""
        with self._write() as conn:
            self._update_survey_status(conn, survey)

    def _update_survey_status(self, conn, survey: dict | None) -> None:
        # A survey first pushed while it was running takes its final state.
        if survey and survey.get("status") != RUNNING:
            conn.execute("UPDATE surveys SET status = ?, finished = ? WHERE id = ? AND status = ?",
                         (survey["status"], survey.get("finished"), survey["id"], RUNNING))

    def _delete_runs(self, conn, run_ids: list[str]) -> None:
        for table in ("samples", "artifacts", "analyses"):     # a run's analyses go with it
            conn.executemany(f"DELETE FROM {table} WHERE run_id = ?", [(r,) for r in run_ids])
        conn.executemany("DELETE FROM runs WHERE id = ?", [(r,) for r in run_ids])

    # ---- machines ------------------------------------------------------

    def machines(self) -> list[dict]:
        """Every machine that has runs here: its stable machine id, its
        fingerprint, its row in the machines table (``row_ids``: the runs'
        machine_row; one row per machine since schema 5), the hosts that ran
        on it, how many runs, and its latest survey."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT m.id, m.machine_id, m.fingerprint,"
                " (SELECT count(*) FROM runs r WHERE r.machine_row = m.id) AS n_runs,"
                " (SELECT max(r.started) FROM runs r WHERE r.machine_row = m.id) AS last_run"
                " FROM machines m ORDER BY m.id").fetchall()
            rows = [row for row in rows if row["n_runs"]]
            latest, hosts = {}, {}
            for row in rows:
                hosts[row[0]] = sorted(str(h[0]) for h in conn.execute(
                    "SELECT DISTINCT host FROM runs WHERE machine_row = ? AND host IS NOT NULL",
                    (row[0],)))
                latest[row[0]] = conn.execute(
                    "SELECT s.* FROM surveys s WHERE s.id IN"
                    " (SELECT survey_id FROM runs WHERE machine_row = ?)"
                    " ORDER BY s.started DESC, s.rowid DESC LIMIT 1", (row[0],)).fetchone()
        out = []
        for row in rows:
            survey = latest[row[0]]
            out.append({"machine_id": row["machine_id"],
                        "fingerprint": readable(MACHINE, _loads(row["fingerprint"], {})) or {},
                        "row_ids": [row[0]], "n_runs": row["n_runs"], "hosts": hosts[row[0]],
                        "last_run": row["last_run"],
                        "last_survey": self._as_displayed(_survey_dict(survey)) if survey else None})
        return out

    def samples_csv(self, run_id: str, fileobj) -> None:
        """One row per sample; each point key gets its own column. fileobj is
        a text file opened with newline=""."""
        samples = self.samples(run_id)
        point_keys = sorted({k for s in samples for k in s["point"]})
        fixed_before = ["run_id", "seq", "arm"]
        measured = ["metric", "unit", "value", "length", "ns", "ticks", "cycles_est"]
        fixed_after = measured + ["rejected", "reason", "counters"]
        taken = set(fixed_before + fixed_after)
        # A point key named like a fixed column would be ambiguous: prefix it.
        point_headers = [f"point.{k}" if k in taken else k for k in point_keys]
        writer = csv.writer(fileobj)
        writer.writerow(fixed_before + point_headers + fixed_after)
        for s in samples:
            point = [_csv_cell(s["point"].get(k)) for k in point_keys]
            writer.writerow([run_id, s["seq"], s["arm"], *point, *(s[k] for k in measured),
                             int(s["rejected"]),
                             s["reason"], _dumps(s["counters"], "counters")])

    # ---- helpers -------------------------------------------------------

    def _machine_row(self, conn: sqlite3.Connection, machine: dict | None) -> int | None:
        """The machines-table row of `machine` (added when new)."""
        if machine is None:
            return None
        # One row per machine: keyed by the stable machine id, so runs on one
        # unchanged machine share it (the run keeps its volatile state).
        from ..lab.machine import machine_id
        text = _dumps(machine, "machine fingerprint")
        stable = machine_id(machine)
        conn.execute("INSERT INTO machines(machine_id, fingerprint) VALUES (?, ?)"
                     " ON CONFLICT (machine_id) DO NOTHING", (stable, text))
        return conn.execute("SELECT id FROM machines WHERE machine_id = ?",
                            (stable,)).fetchone()[0]

    def _unused_id(self, conn: sqlite3.Connection, table: str, template: str) -> str:
        # Called under the write lock, so "unused now" stays true until INSERT.
        for _ in range(100):
            candidate = template.format(secrets.token_hex(2))
            if not _exists(conn, table, candidate):
                return candidate
        raise StoreError(f"{shown(self.path)}: could not find a free {table} id")

    def _require_run(self, conn: sqlite3.Connection, run_id: str) -> None:
        if not _exists(conn, "runs", run_id):
            raise StoreError(f"no run {run_id!r} in {shown(self.path)}")

    @staticmethod
    def _count_complete_surveys(conn) -> int:
        return conn.execute("SELECT count(*) FROM surveys WHERE status = ?",
                            (COMPLETE,)).fetchone()[0]

    def _resolve(self, conn: sqlite3.Connection, table: str, kind: str, key: str) -> str:
        """Full id, unique prefix, "latest" or (runs) "latest:EXPERIMENT" or
        (surveys) "latest-survey", "latest-survey~N" or "previous" -> full
        id.  For runs, latest means the latest complete run; latest-survey
        is the latest complete survey, ~N the Nth complete one before it,
        previous the one before it (surveys_back)."""
        if table == "runs" and (key == "latest" or key.startswith("latest:")):
            experiment = key[len("latest:"):] if ":" in key else None
            if experiment == "":
                raise StoreError("latest: needs an experiment name, e.g. latest:latency")
            row = conn.execute(
                "SELECT id FROM runs WHERE status = ?" + (" AND experiment = ?" if experiment else "")
                + " ORDER BY started DESC, rowid DESC LIMIT 1",
                (COMPLETE, experiment) if experiment else (COMPLETE,)).fetchone()
            if row is None:
                what = f"complete {experiment} run" if experiment else "complete run"
                raise StoreError(f"no {what} in {shown(self.path)}")
            return row[0]
        back = surveys_back(key)
        if back is not None:
            if table != "surveys":
                raise StoreError(f"no {kind} {key!r}: {key} names a survey")
            row = conn.execute("SELECT id FROM surveys WHERE status = ? ORDER BY started DESC,"
                               " rowid DESC LIMIT 1 OFFSET ?", (COMPLETE, back)).fetchone()
            if row is None:
                raise StoreError(
                    f"no complete survey {key!r} in {shown(self.path)}: it has "
                    f"{self._count_complete_surveys(conn)} complete surveys" if back
                    else f"no complete survey in {shown(self.path)}")
            return row[0]
        if key == "latest":
            row = conn.execute(f"SELECT id FROM {table} ORDER BY started DESC, rowid DESC"
                               " LIMIT 1").fetchone()
            if row is None:
                raise StoreError(f"no {kind}s in {shown(self.path)}")
            return row[0]
        if key and _exists(conn, table, key):
            return key
        matches = [] if not key else [row[0] for row in conn.execute(
            f"SELECT id FROM {table} WHERE substr(id, 1, length(CAST(? AS TEXT))) = ?",
            (key, key))]
        if not matches:
            raise StoreError(f"no {kind} {key!r} in {shown(self.path)}")
        if len(matches) > 1:
            raise StoreError(f"{kind} prefix {key!r} is ambiguous: it matches "
                             f"{len(matches)} {kind}s in {shown(self.path)}")
        return matches[0]


# ---- module-level row helpers -------------------------------------------

# The id that names the latest complete survey wherever an id is taken.
