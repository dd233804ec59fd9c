"""What the SQLite and the PostgreSQL store share: the schema (as created,
then migrated), the constants, and the conversions between rows and dicts
(runs, surveys, samples, labels, the raw export), and the stored analyses
(StoredAnalyses, a part of both stores' class).  No connection is opened
here; sqlite.Store and postgres.PostgresStore run the queries."""
from __future__ import annotations

import calendar
import json
import math
import os
import re
import sqlite3
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..model.errors import StoreError
from ..model.status import INTERRUPTED, RUNNING, STATUSES
from .schema import MACHINE, POINT, SchemaError, readable, readable_params, validate_export

SCHEMA_VERSION = 8
# The oldest schema a role that may not migrate a PostgreSQL store still
# reads: schema 6 only rewrote stored data (redacted command lines, which
# reading redacts too), schema 7 only added the analyses table, derived
# data a reader without it computes instead (StoredAnalyses), and schema 8
# only an index and a derived column (the answers apart), which readers do
# without.
SAME_TABLES_SINCE = 5
APPLICATION_ID = 0x4D454D46  # "MEMF": marks the file as a memfx results DB

BUSY_TIMEOUT_MS = 30_000

# Sample fields in column order; the value is the default for a missing key.
SAMPLE_DEFAULTS = {
    "arm": None, "point": None, "metric": None, "unit": None, "value": None,
    "length": None, "ns": None, "ticks": None, "cycles_est": None,
    "counters": None, "rejected": False, "reason": None, "replica": 0,
}
REQUIRED_SAMPLE_KEYS = ("metric",)

_SCHEMA_V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE machines (
    id INTEGER PRIMARY KEY,
    fingerprint_hash TEXT NOT NULL UNIQUE,
    fingerprint TEXT NOT NULL
);
CREATE TABLE surveys (
    id TEXT PRIMARY KEY, started TEXT NOT NULL, finished TEXT,
    status TEXT NOT NULL, preset TEXT, argv TEXT, note TEXT,
    pid INTEGER, host TEXT
);
CREATE TABLE runs (
    id TEXT PRIMARY KEY, survey_id TEXT, experiment TEXT NOT NULL,
    status TEXT NOT NULL, started TEXT NOT NULL, finished TEXT,
    preset TEXT, params TEXT, machine_id INTEGER, memfx_version TEXT,
    error TEXT, duration_s REAL, pid INTEGER, host TEXT,
    started_unix REAL
);
CREATE INDEX runs_by_experiment ON runs(experiment);
CREATE INDEX runs_by_survey ON runs(survey_id);
CREATE INDEX runs_by_started ON runs(started);
CREATE TABLE samples (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, arm TEXT, point TEXT,
    metric TEXT, unit TEXT, value REAL, length INTEGER, ns REAL,
    ticks INTEGER, cycles_est REAL, counters TEXT,
    rejected INTEGER NOT NULL DEFAULT 0, reason TEXT,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE artifacts (
    run_id TEXT NOT NULL, name TEXT NOT NULL, data TEXT,
    PRIMARY KEY (run_id, name)
);
"""

# MIGRATIONS[v] turns a schema-v database into schema v+1. Each runs inside
# the opening transaction, so a failed migration leaves the file as it was.
Migration = Callable[[sqlite3.Connection], None]


def _add_labels(conn: sqlite3.Connection) -> None:
    # Schema 2: user labels (--label key=value) as a JSON object per run and
    # survey; NULL (older rows) reads as no labels.
    conn.execute("ALTER TABLE runs ADD COLUMN labels TEXT")
    conn.execute("ALTER TABLE surveys ADD COLUMN labels TEXT")


def _add_machine_state(conn: sqlite3.Connection) -> None:
    # Schema 3: machines are keyed by the stable machine id (machine.identity:
    # what does not change between runs); each run keeps its own full
    # fingerprint, volatile state included (free memory, TSC, governor).
    # NULL (older rows) reads as the machine row's fingerprint.
    conn.execute("ALTER TABLE runs ADD COLUMN machine_state TEXT")


def _add_replica(conn: sqlite3.Connection) -> None:
    # Schema 4: every sample names the replica (worker process) that took it;
    # older rows were all measured by one process, replica 0.
    conn.execute("ALTER TABLE samples ADD COLUMN replica INTEGER NOT NULL DEFAULT 0")


def _name_machine_columns(conn: sqlite3.Connection) -> None:
    # Schema 5: the columns say what they hold.  runs.machine_id held the
    # row of the machines table (now runs.machine_row); machines.
    # fingerprint_hash held the stable machine id "m-..." (now
    # machines.machine_id).  Rows written before schema 3 were keyed by a
    # hash of the whole fingerprint: each takes its machine id, and rows of
    # one machine become one (_merge_legacy_machine_row).
    conn.execute("ALTER TABLE runs RENAME COLUMN machine_id TO machine_row")
    conn.execute("ALTER TABLE machines RENAME COLUMN fingerprint_hash TO machine_id")
    from ..lab.machine import machine_id
    legacy = conn.execute("SELECT id, fingerprint FROM machines"
                          " WHERE substr(machine_id, 1, 2) != 'm-' ORDER BY id").fetchall()
    for row, text in legacy:
        # keyed as machines() has always grouped them: by the readable fingerprint
        stable = machine_id(readable(MACHINE, _loads(text, {})) or {})
        _merge_legacy_machine_row(conn, row, text, stable)


def _merge_legacy_machine_row(conn: sqlite3.Connection, row: int, fingerprint: str, stable: str) -> None:
    # Its runs (none has a machine_state: they predate schema 3) first take
    # the row's fingerprint as their own, so that no run reads another
    # row's fingerprint after the merge.
    conn.execute("UPDATE runs SET machine_state = ? WHERE machine_row = ? AND machine_state IS NULL",
                 (fingerprint, row))
    kept = conn.execute("SELECT id FROM machines WHERE machine_id = ?", (stable,)).fetchone()
    if kept is None:
        conn.execute("UPDATE machines SET machine_id = ? WHERE id = ?", (stable, row))
        return
    # the machine shows the fingerprint of its newest run, as machines() did
    newest = "SELECT max(started) FROM runs WHERE machine_row = ?"
    if (conn.execute(newest, (row,)).fetchone()[0] or "") > \
            (conn.execute(newest, (kept[0],)).fetchone()[0] or ""):
        conn.execute("UPDATE machines SET fingerprint = ? WHERE id = ?", (fingerprint, kept[0]))
    conn.execute("UPDATE runs SET machine_row = ? WHERE machine_row = ?", (kept[0], row))
    conn.execute("DELETE FROM machines WHERE id = ?", (row,))


def _redact_command_lines(conn: sqlite3.Connection) -> None:
    # Schema 6: command lines are stored without secrets (redact_argv): a
    # survey's argv, a run's params.command and an artifact's "command" (a
    # `--db postgresql://writer:PW@...` was stored, then printed in every
    # report and raw export).  Rows written before are redacted here.
    for survey_id, text in conn.execute("SELECT id, argv FROM surveys").fetchall():
        argv = _loads(text, [])
        if redact_argv(argv) != argv:
            conn.execute("UPDATE surveys SET argv = ? WHERE id = ?",
                         (_dumps(redact_argv(argv), "argv"), survey_id))
    for run_id, text in conn.execute("SELECT id, params FROM runs WHERE params LIKE ?",
                                     ('%"command"%',)).fetchall():
        params = _loads(text, {})
        if redact_commands(params) != params:
            conn.execute("UPDATE runs SET params = ? WHERE id = ?",
                         (_dumps(redact_commands(params), "params"), run_id))
    for run_id, name, text in conn.execute("SELECT run_id, name, data FROM artifacts"
                                           " WHERE data LIKE ?", ('%"command"%',)).fetchall():
        data = _loads(text, {})
        if redact_commands(data) != data:
            conn.execute("UPDATE artifacts SET data = ? WHERE run_id = ? AND name = ?",
                         (_dumps(redact_commands(data), "artifact"), run_id, name))


# The analyses table (schema 7); "BLOB" is PostgreSQL's bytea (pgstore).  IF
# NOT EXISTS: a store whose version was set back by hand keeps its table.
ANALYSES_TABLE = """CREATE TABLE IF NOT EXISTS analyses (
    run_id TEXT NOT NULL, analysis TEXT NOT NULL, made TEXT NOT NULL, doc BLOB NOT NULL,
    PRIMARY KEY (run_id, analysis)
)"""


def _add_analyses(conn: sqlite3.Connection) -> None:
    # Schema 7: each run's result document as the analysis of a given
    # version made it (zlib-compressed JSON), so that reading a run does not
    # analyse its samples again (StoredAnalyses).  A store of schema 6 has
    # none: its runs are analysed on their first read.
    translate = getattr(conn, "translate_schema", None)     # PostgreSQL's types
    conn.execute(translate(ANALYSES_TABLE) if translate else ANALYSES_TABLE)


def _columns(conn, table: str) -> set:
    # both drivers describe the columns of an empty result
    cursor = conn.execute(f"SELECT * FROM {table} LIMIT 0")
    return {d[0] for d in cursor.description or ()}


def _index_the_fleet(conn: sqlite3.Connection) -> None:
    # Schema 8: what the fleet views read, without reading every run.  A
    # machine's runs by experiment (its newest of each, its run count) come
    # from an index instead of a scan of every run; and a run's answers and
    # its points' summaries are kept apart from its whole document
    # (analyses.answers, analyses.points: zlib JSON of answers_part and
    # points_part), so the fleet's answers are read without its points, and
    # its hosts' curves without every sample value.  Rows stored before read
    # as having none: they come from the whole document.  IF NOT EXISTS and the
    # column check: a store whose version was set back by hand keeps them.
    conn.execute("CREATE INDEX IF NOT EXISTS runs_by_machine ON runs(machine_row, experiment)")
    have = _columns(conn, "analyses")
    for column in ("answers", "points"):
        if column not in have:
            translate = getattr(conn, "translate_schema", None)     # PostgreSQL's bytea
            sql = f"ALTER TABLE analyses ADD COLUMN {column} BLOB"
            conn.execute(translate(sql) if translate else sql)


MIGRATIONS: dict[int, Migration] = {1: _add_labels, 2: _add_machine_state, 3: _add_replica,
                                    4: _name_machine_columns, 5: _redact_command_lines,
                                    6: _add_analyses, 7: _index_the_fleet}

# What a run's stored answers carry besides the answers: the run state the
# document describes, so a reader can tell whether they are still current
# (documents._current) without the whole document.
ANSWERS_STATE = ("run_id", "experiment", "status", "finished", "labels", "machine_id")
# Runs per query when answers are read by run id: bounded parameter lists.
ANSWERS_BATCH = 500


class StoredAnalyses:
    """A run's result document as an analysis made it, kept in the store
    (the analyses table), one per run: derived data, which the raw export,
    import and push leave out, and which goes with its run.  The store does
    not judge whether a document is still current (documents.py does); it
    keeps the version (``analysis``) it was given and hands back only a
    document of the version asked for.  A store that cannot hold one (open
    read-only, a role that may not write, a PostgreSQL store a read-only
    role left at schema 6) reads as holding none and keeps none."""

    # what the store class this is mixed into provides (its connections)
    if TYPE_CHECKING:
        DATABASE_ERRORS: tuple

        def _read(self) -> Any: ...
        def _write(self) -> Any: ...
        def _as_displayed(self, item: dict) -> dict: ...

    def analysis(self, run_id: str, analysis: str) -> Optional[dict]:
        """The stored document of run ``run_id`` made by analysis version
        ``analysis``, or None (none stored, another version, unreadable)."""
        try:
            with self._read() as conn:
                row = conn.execute("SELECT doc FROM analyses WHERE run_id = ? AND analysis = ?",
                                   (run_id, analysis)).fetchone()
        except StoreError:
            return None               # no analyses table (a schema-6 store read as it is)
        if row is None:
            return None
        try:
            doc = json.loads(zlib.decompress(bytes(row[0])))
        except (zlib.error, ValueError, TypeError):
            return None               # damaged: analysed again, and replaced
        return doc if isinstance(doc, dict) else None

    def save_analysis(self, run_id: str, analysis: str, doc: dict) -> bool:
        """Keep ``doc`` as run ``run_id``'s document by analysis version
        ``analysis``, replacing the run's documents of any other version;
        False when this store cannot keep it (see the class) or the run is
        gone.  Its params and tune record are redacted here too (the one
        rule, redact_commands): what reaches the store is never a secret."""
        if getattr(self, "_read_only", None):
            return False
        doc = dict(doc, params=redact_commands(doc.get("params")))
        if isinstance(doc.get("tune"), dict):
            doc["tune"] = redact_commands(doc["tune"])
        try:
            blob = zlib.compress(json.dumps(doc, separators=(",", ":"), default=str).encode(), 6)
            answers = zlib.compress(json.dumps(answers_part(doc), separators=(",", ":"),
                                               default=str).encode(), 6)
            points = zlib.compress(json.dumps(points_part(doc), separators=(",", ":"),
                                              default=str).encode(), 6)
        except (TypeError, ValueError):
            return False
        try:
            with self._write() as conn:
                if not _exists(conn, "runs", run_id):
                    return False      # removed meanwhile: nothing to attach it to
                conn.execute("DELETE FROM analyses WHERE run_id = ?", (run_id,))
                conn.execute("INSERT INTO analyses(run_id, analysis, made, doc, answers, points)"
                             " VALUES (?, ?, ?, ?, ?, ?)",
                             (run_id, analysis, utcnow_iso(), blob, answers, points))
        except StoreError:
            return False
        return True

    def stored_answers(self, run_ids: list, analysis: str) -> dict:
        """{run id: its stored answers part (answers_part) by analysis
        version ``analysis``} for the runs of ``run_ids`` that have one; read
        in batches, the whole document only for rows stored without the
        part (before schema 8).  Whether each is still current is the
        reader's to judge (its run state is in it)."""
        return self._stored_parts(run_ids, analysis, "answers", answers_part)

    def stored_points(self, run_ids: list, analysis: str) -> dict:
        """As stored_answers, the points part (points_part)."""
        return self._stored_parts(run_ids, analysis, "points", points_part)

    def _stored_parts(self, run_ids: list, analysis: str, column: str, part_of) -> dict:
        out: dict = {}
        ids = list(dict.fromkeys(run_ids))
        for first in range(0, len(ids), ANSWERS_BATCH):
            batch = ids[first:first + ANSWERS_BATCH]
            marks = ", ".join("?" * len(batch))
            try:
                with self._read() as conn:
                    try:
                        rows = conn.execute(f"SELECT run_id, {column}, NULL FROM analyses"
                                            f" WHERE analysis = ? AND {column} IS NOT NULL"
                                            f" AND run_id IN ({marks})", (analysis, *batch)).fetchall()
                        found = {row[0] for row in rows}
                        missing = [r for r in batch if r not in found]
                    except self.DATABASE_ERRORS:
                        raise _NoAnswersColumn() from None
            except _NoAnswersColumn:
                rows, missing = [], batch           # a schema-7 store a reader could not migrate
            except StoreError:
                return out                          # no analyses table at all
            if missing:
                marks = ", ".join("?" * len(missing))
                try:
                    with self._read() as conn:
                        rows += conn.execute(f"SELECT run_id, NULL, doc FROM analyses WHERE analysis = ?"
                                             f" AND run_id IN ({marks})", (analysis, *missing)).fetchall()
                except StoreError:
                    pass
            for run_id, part, whole in rows:
                try:
                    value = json.loads(zlib.decompress(bytes(part if part is not None else whole)))
                except (zlib.error, ValueError, TypeError):
                    continue              # damaged: the reader analyses the run again
                if isinstance(value, dict):
                    out[run_id] = value if part is not None else part_of(value)
        return out

    def stored_documents(self, run_ids: list, analysis: str) -> dict:
        """{run id: its stored document by analysis version ``analysis``}
        for those of ``run_ids`` (a few: each document is whole) that have
        one, in one query; whether each is current is the reader's to judge."""
        ids = list(dict.fromkeys(run_ids))
        if not ids:
            return {}
        try:
            with self._read() as conn:
                rows = conn.execute(f"SELECT run_id, doc FROM analyses WHERE analysis = ?"
                                    f" AND run_id IN ({', '.join('?' * len(ids))})",
                                    (analysis, *ids)).fetchall()
        except StoreError:
            return {}                 # no analyses table (a schema-6 store read as it is)
        out = {}
        for run_id, blob in rows:
            try:
                doc = json.loads(zlib.decompress(bytes(blob)))
            except (zlib.error, ValueError, TypeError):
                continue              # damaged: the reader analyses the run again
            if isinstance(doc, dict):
                out[run_id] = doc
        return out

    def run_states(self, run_ids: list) -> dict:
        """{run id: {"status", "n_samples"}} of those of ``run_ids`` stored
        here (what push compares), without reading every run."""
        out: dict = {}
        ids = list(dict.fromkeys(run_ids))
        for first in range(0, len(ids), ANSWERS_BATCH):
            batch = ids[first:first + ANSWERS_BATCH]
            with self._read() as conn:
                for row in conn.execute(
                        "SELECT r.id, r.status, (SELECT count(*) FROM samples s WHERE s.run_id = r.id)"
                        f" FROM runs r WHERE r.id IN ({', '.join('?' * len(batch))})", batch):
                    out[row[0]] = {"status": row[1], "n_samples": row[2]}
        return out

    def machine_surveys(self, machine_id: str) -> list:
        """The surveys (newest first, as surveys() gives them) with runs
        measured on machine ``machine_id``: one indexed query, where reading
        each survey's runs to find its machine reads the whole fleet."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT s.*, (SELECT count(*) FROM runs r WHERE r.survey_id = s.id) AS n_runs"
                " FROM surveys s WHERE s.id IN (SELECT r.survey_id FROM runs r"
                " JOIN machines m ON m.id = r.machine_row WHERE m.machine_id = ?)"
                " ORDER BY s.started DESC, s.rowid DESC", (machine_id,)).fetchall()
        return [self._as_displayed(dict(_survey_dict(row), n_runs=row["n_runs"])) for row in rows]

    def newest_runs_per_machine(self) -> list:
        """Per machine and experiment, the newest complete run, else the
        newest of any status (what the fleet views show): dicts with the
        run's id, survey_id, experiment, status, started, finished, labels,
        host and machine_id, by machine row then start.  One pass over the
        runs in index order; no samples, no run parameters."""
        out: list = []
        last = None
        with self._read() as conn:
            cursor = conn.execute(
                "SELECT r.id, r.survey_id, r.experiment, r.status, r.started, r.finished,"
                " r.labels, r.host, r.pid, m.machine_id, r.machine_row"
                " FROM runs r JOIN machines m ON m.id = r.machine_row"
                " ORDER BY r.machine_row, r.experiment,"
                " CASE WHEN r.status = 'complete' THEN 0 ELSE 1 END, r.started DESC, r.rowid DESC")
            for row in cursor:
                key = (row[10], row[2])
                if key == last:
                    continue
                last = key
                out.append(self._as_displayed({
                    "id": row[0], "survey_id": row[1], "experiment": row[2], "status": row[3],
                    "started": row[4], "finished": row[5], "labels": _labels_of(row[6]),
                    "host": row[7], "pid": row[8], "machine_id": row[9], "machine_row": row[10]}))
        out.sort(key=lambda r: (r["machine_row"], r["started"], r["id"]))
        return out


    # A rendering derived from a run's stored document (the report's figure)
    # is a row of the same table under a name no analysis version takes
    # ("figure:..."): save_analysis and a run's removal delete every row of
    # the run, so it never outlives the document it was made from.

    def derived(self, run_id: str, name: str) -> Optional[dict]:
        """What ``save_derived`` kept for run ``run_id`` under ``name``, or None."""
        return self.analysis(run_id, name)

    def save_derived(self, run_id: str, name: str, data: dict) -> bool:
        """Keep ``data`` beside run ``run_id``'s stored document, replacing
        only the row of the same name (the document stays); False when the
        store cannot keep it or the run is gone."""
        if getattr(self, "_read_only", None):
            return False
        try:
            blob = zlib.compress(json.dumps(data, separators=(",", ":"), default=str).encode(), 6)
        except (TypeError, ValueError):
            return False
        try:
            with self._write() as conn:
                if not _exists(conn, "runs", run_id):
                    return False
                conn.execute("DELETE FROM analyses WHERE run_id = ? AND analysis = ?",
                             (run_id, name))
                conn.execute("INSERT INTO analyses(run_id, analysis, made, doc) VALUES (?, ?, ?, ?)",
                             (run_id, name, utcnow_iso(), blob))
        except StoreError:
            return False
        return True

class _NoAnswersColumn(Exception):
    """The analyses table predates schema 8 (read as it is)."""


# What of each point the fleet's pooled curves read (documents.group_points
# and compare_curves): its key, its summary and its replicas, without the
# values of every sample.
POINT_FIELDS = ("arm", "params", "metric", "unit", "median", "ci_low", "ci_high", "n", "rejected",
                "best_quantile", "replicas")


def points_part(doc: dict) -> dict:
    """What of a run's document the fleet's curves read: each point's
    POINT_FIELDS, with the run state they describe (ANSWERS_STATE)."""
    part = {k: doc.get(k) for k in ANSWERS_STATE}
    part["points"] = [{k: p[k] for k in POINT_FIELDS if k in p}
                      for p in doc.get("points") or [] if isinstance(p, dict)]
    return part


# What of each answer the fleet views read: the question and its finding,
# without the per-replica and per-point details the whole document keeps.
ANSWER_FIELDS = ("question", "asks", "seed", "unit", "better", "headline", "band", "host_shared",
                 "verdict", "value", "ci_low", "ci_high", "because")


def answers_part(doc: dict) -> dict:
    """What of a run's document the fleet views read: its answers
    (ANSWER_FIELDS of each), with the run state they describe
    (ANSWERS_STATE)."""
    part = {k: doc.get(k) for k in ANSWERS_STATE}
    part["answers"] = [{k: a[k] for k in ANSWER_FIELDS if k in a}
                       for a in doc.get("answers") or [] if isinstance(a, dict)]
    return part


# ---- secrets: the one rule for every message and every stored command line ----
#
# libpq takes a password in the user information of a URL (user:PW@host), as
# the query parameter password or sslpassword (keys are percent-decoded and
# any case is seen here), and as a keyword of a connection string
# ("password = 'PW with spaces'").  A message about a mistyped target, a
# driver's message and a stored command line are all masked by this rule,
# which needs no valid URL: the typo is when it is needed most.

def _spelled(word: str) -> str:
    # each letter as itself or percent-encoded (libpq decodes query keys)
    return "".join(f"(?:{c}|%{ord(c):02x})" for c in word)


# a key ending in "password" (sslpassword, PGPASSWORD), after any separator
# (? & ; # or a space), then its value: quoted (to the closing quote, or to
# the end when there is none) or up to a space, an & or a quote
_SECRET_PARAM = re.compile(r"(?i)(?<![A-Za-z0-9_%])[A-Za-z0-9_%]*" + _spelled("password")
                           + r"\s*=\s*('(?:\\.|[^'\\])*(?:'|$)|(?:\\.|[^\s&'\"\\])+)")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:/+")


def _secret_spans(text: str, whole: bool = False) -> list:
    """Where `text` holds a secret: (start, end) pairs.  `whole`: the text is
    one value (an argument), so a URL in it may hold spaces."""
    spans = [m.span(1) for m in _SECRET_PARAM.finditer(text)]
    tokens = [(0, len(text))] if whole and _SCHEME.search(text) else \
        [m.span() for m in re.finditer(r"\S+", text)]
    for first, end in tokens:
        token = text[first:end]
        at = token.rfind("@")          # the host follows the last '@': "u:p@ss@h"
        if at < 0:
            continue
        scheme = token.find("://", 0, at)
        start = scheme + 3 if scheme >= 0 else (m.end() if (m := _SCHEME.match(token)) else 0)
        colon = token.find(":", start, at)
        if 0 <= colon < at - 1:
            spans.append((first + colon + 1, first + at))
    return spans


def _masked(text: str, spans) -> str:
    out, last = [], 0
    for start, end in sorted(spans):
        if end <= last:
            continue
        out += [text[last:max(start, last)], "***"]
        last = end
    return "".join(out) + text[last:]


def mask_secrets(text: str, whole: bool = False) -> str:
    """`text` with every password libpq would take from it replaced by ***
    (see above); `whole`: `text` is one value, spaces included."""
    return _masked(text, _secret_spans(text, whole))


def secrets_in(text: str) -> set:
    """The secrets mask_secrets hides in `text`, as written (a driver's
    message may quote one: it is hidden there too)."""
    return {text[a:b].strip("'") for a, b in _secret_spans(text, whole=True)} - {""}


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def shown(value) -> str:
    """A --db value, path or URL as a message shows it: on one line (control
    characters escaped, as \\n, so the name stays recognisable; the
    presentation's render.clean is above this layer) and secrets masked."""
    text = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"),
                        os.fspath(value) if isinstance(value, os.PathLike) else str(value))
    return mask_secrets(text)


def redact_argv(argv):
    """A command line (list of arguments) as it is stored: each argument
    masked whole (a --db value, a --db=URL, MEMFX_DB=URL)."""
    if not isinstance(argv, list):
        return argv
    return [mask_secrets(a, whole=True) if isinstance(a, str) else a for a in argv]


def redact_commands(obj):
    """A dict (run params, an artifact) with its "command" redacted: an
    argument list, or one shell line (tune's params.command)."""
    if not isinstance(obj, dict) or "command" not in obj:
        return obj
    command = obj["command"]
    if isinstance(command, str):
        import shlex
        try:
            words = shlex.split(command)
        except ValueError:          # unbalanced quotes: masked as words
            command = mask_secrets(command)
        else:
            if redact_argv(words) != words:
                command = shlex.join(redact_argv(words))
    return {**obj, "command": redact_argv(command)}

# Label keys and values: short, printable, no "=" in keys.
_LABEL_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
LABEL_VALUE_MAX = 200

_RUN_COLUMNS = ("id", "survey_id", "experiment", "status", "started", "finished",
                "preset", "params", "machine_row", "memfx_version", "error",
                "duration_s", "pid", "host")
_SURVEY_COLUMNS = ("id", "started", "finished", "status", "preset", "argv",
                   "note", "pid", "host")


from ..model.outputs import default_db_path  # noqa: E402,F401 (the one place it is defined)


def utcnow_iso(t: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if t is None else t))


def _iso_to_unix(stamp: str) -> float:
    try:
        return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))
    except (TypeError, ValueError):
        raise StoreError(f"bad timestamp {stamp!r} (want e.g. 2026-11-21T23:25:01Z)") from None


def _dumps(obj, what: str) -> str:
    # sort_keys makes equal dicts equal strings, so SQL can group and dedupe.
    try:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise StoreError(f"{what} cannot be stored as JSON: {e}") from None


_UNREADABLE = object()


def _loads(text, empty=None):
    """Stored JSON text -> value. Readers must cope with what older versions
    (or a hand-edited file) stored: unparsable text, or a value of another
    type than `empty` (a list where a dict belongs), reads as `empty`."""
    if not isinstance(text, str):
        return empty
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return empty
    if isinstance(empty, (dict, list)) and not isinstance(value, type(empty)):
        return empty
    return value


def _pid_alive(pid) -> bool:
    # Anything but a positive int (an import may carry "abc" or -1) names no
    # process of ours: kill(0) or kill(-1) would even address a group.
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    # A killed child its parent has not reaped yet still answers kill(pid, 0).
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def _is_busy(error: sqlite3.Error) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == sqlite3.SQLITE_BUSY


def _check_status(status: str, allowed=STATUSES) -> None:
    if status not in allowed:
        raise StoreError(f"bad status {status!r}; expected one of {', '.join(allowed)}")



LATEST_SURVEY = "latest-survey"
PREVIOUS_SURVEY = "previous"
_SURVEYS_BACK = re.compile(r"latest-survey~([0-9]{1,6})")


def surveys_back(key: str) -> Optional[int]:
    """How many complete surveys before the latest one ``key`` names:
    "latest-survey" 0, "previous" 1, "latest-survey~N" N; None for any
    other key.  (The one rule for relative survey ids.)"""
    if key == LATEST_SURVEY:
        return 0
    if key == PREVIOUS_SURVEY:
        return 1
    m = _SURVEYS_BACK.fullmatch(str(key))
    return int(m.group(1)) if m else None

_INSERT_SAMPLE = ("INSERT INTO samples(run_id, seq, " + ", ".join(SAMPLE_DEFAULTS) + ")"
                  " VALUES (" + ", ".join("?" * (len(SAMPLE_DEFAULTS) + 2)) + ")")

# A run names its machine by the stable id ("m-..."); machine_row is the
# machines-table row, local to one database.
_SELECT_RUNS = ("SELECT r.*, (SELECT count(*) FROM samples s WHERE s.run_id = r.id) AS n_samples,"
                " (SELECT m.machine_id FROM machines m WHERE m.id = r.machine_row) AS machine_id"
                " FROM runs r")
_NEWEST_FIRST = " ORDER BY r.started DESC, r.rowid DESC"


def _stamp(t: float) -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(t))


def _slug(name: str) -> str:
    # Keeps ids safe to type and to use as file names.
    return re.sub(r"[^A-Za-z0-9_.]+", "_", name) or "run"


def _exists(conn: sqlite3.Connection, table: str, item_id: str) -> bool:
    return conn.execute(f"SELECT 1 FROM {table} WHERE id = ?", (item_id,)).fetchone() is not None


def _sample_row(sample: dict) -> tuple:
    if not isinstance(sample, dict):
        raise StoreError(f"a sample must be a dict, not {type(sample).__name__}")
    unknown = set(sample) - set(SAMPLE_DEFAULTS)
    if unknown:
        raise StoreError(f"unknown sample field(s): {', '.join(sorted(unknown))}")
    missing = [k for k in REQUIRED_SAMPLE_KEYS if sample.get(k) is None]
    if missing:
        raise StoreError(f"sample lacks {', '.join(missing)}")
    values = {**SAMPLE_DEFAULTS, **sample}
    for key in ("point", "counters"):
        if values[key] is None:
            values[key] = {}
        if not isinstance(values[key], dict):
            raise StoreError(f"sample {key} must be a dict")
        values[key] = _dumps(values[key], f"sample {key}")
    values["rejected"] = 1 if values["rejected"] else 0
    return tuple(values.values())


def _sample_dict(row: sqlite3.Row, points: Optional[dict] = None) -> dict:
    """One stored sample as a dict; ``points`` caches decoded point texts
    (each sample still gets its own copy)."""
    sample = {"seq": row["seq"]}
    for key in SAMPLE_DEFAULTS:
        sample[key] = row[key]
    text = row["point"]
    if points is not None and isinstance(text, str):
        if text not in points:
            points[text] = readable(POINT, _loads(text, {})) or {}
        sample["point"] = dict(points[text])
    else:
        sample["point"] = readable(POINT, _loads(text, {})) or {}
    sample["counters"] = _loads(row["counters"], {})
    sample["rejected"] = bool(row["rejected"])
    for key in ("value", "ns", "cycles_est"):
        if not _finite_number(sample[key]):
            sample[key] = None          # SQLite turns NaN into NULL; text is unusable
    garbled = []
    for key in ("length", "ticks"):
        if sample[key] is not None and not (isinstance(sample[key], int) and sample[key] >= 0):
            sample[key] = None
            garbled.append(key)
    if not (isinstance(sample["replica"], int) and sample["replica"] >= 0):
        sample["replica"] = 0
    for key in ("arm", "metric", "unit", "reason"):
        if sample[key] is not None and not isinstance(sample[key], str):
            sample[key] = str(sample[key])
    problem = None if sample["rejected"] else (
        f"{', '.join(garbled)} not an integer" if garbled else _unusable(sample))
    if problem:
        # Analysis takes accepted samples at face value; one that older
        # versions let in without a usable measurement is set aside.
        sample.update(rejected=True, reason=f"unusable stored sample: {problem}")
    return sample


def _finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _unusable(sample: dict) -> str | None:
    if sample["metric"] is None:
        return "no metric"
    if sample["value"] is None or sample["value"] < 0:
        return "no valid value"
    if sample["length"] is not None and not (sample["ns"] and sample["value"] and sample["length"]):
        return "value, ns and length must be positive"
    return None


def _run_dict(row: sqlite3.Row) -> dict:
    run = {c: row[c] for c in _RUN_COLUMNS}
    for key in ("id", "survey_id", "experiment", "status", "started", "finished", "preset",
                "memfx_version", "error", "host"):
        if run[key] is not None and not isinstance(run[key], str):
            run[key] = str(run[key])
    if not _finite_number(run["duration_s"]):
        run["duration_s"] = None
    if not isinstance(run["pid"], int):
        run["pid"] = None
    # redacted on reading too: a store a read-only role could not migrate
    run["params"] = redact_commands(readable_params(run["experiment"], _loads(row["params"], {})))
    run["n_samples"] = row["n_samples"]
    run["machine_id"] = row["machine_id"]
    run["labels"] = _labels_of(row["labels"] if "labels" in row.keys() else None)
    return run


def check_labels(labels) -> dict:
    """Labels as a {key: value} dict of short printable strings, or StoreError."""
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise StoreError("labels must be key=value pairs")
    for key, value in labels.items():
        if not isinstance(key, str) or not _LABEL_KEY.fullmatch(key):
            raise StoreError(f"bad label key {key!r}: use 1-64 letters, digits, _ . : -")
        if not isinstance(value, str) or len(value) > LABEL_VALUE_MAX or not value.isprintable():
            raise StoreError(f"bad label value for {key}: up to {LABEL_VALUE_MAX} printable characters")
    return dict(labels)


def _labels_of(text) -> dict:
    # Robust to what was stored: anything but an object of strings reads as
    # no labels rather than breaking `memfx runs`.
    try:
        labels = json.loads(text) if text else {}
    except ValueError:
        return {}
    if not isinstance(labels, dict):
        return {}
    return {str(k): str(v) for k, v in labels.items()}


def _survey_dict(row: sqlite3.Row) -> dict:
    survey = {c: row[c] for c in _SURVEY_COLUMNS}
    survey["argv"] = redact_argv(_loads(row["argv"], []))   # as _run_dict's params
    if not isinstance(survey["pid"], int):
        survey["pid"] = None
    survey["labels"] = _labels_of(row["labels"] if "labels" in row.keys() else None)
    return survey


def _insert_survey(conn: sqlite3.Connection, survey: dict) -> None:
    if not isinstance(survey.get("id"), str) or not isinstance(survey.get("started"), str):
        raise StoreError("imported survey lacks id or started")
    values = [survey.get(c) for c in _SURVEY_COLUMNS]
    values[_SURVEY_COLUMNS.index("argv")] = _dumps(redact_argv(survey.get("argv") or []), "argv")
    values.append(_dumps(check_labels(survey.get("labels")), "labels"))
    conn.execute(f"INSERT INTO surveys({', '.join(_SURVEY_COLUMNS)}, labels)"
                 f" VALUES ({', '.join('?' * (len(_SURVEY_COLUMNS) + 1))})", values)


def _check_export_doc(doc) -> dict:
    """Validate a whole export document (memfx.store.schema); returns its run dict."""
    try:
        return validate_export(doc)["run"]
    except SchemaError as e:
        raise StoreError(str(e)) from None


def _csv_cell(value):
    # Nested point values (lists, dicts) stay readable and parseable.
    return _dumps(value, "point value") if isinstance(value, (list, dict)) else value


def _imported_as_settled(doc: dict) -> dict:
    """An imported run (and its survey) still marked running was cut off where
    it was exported: it is stored as interrupted, so that no process here
    seems to own it (rm and prune would never let it go)."""
    out = dict(doc)
    for key in ("run", "survey"):
        item = doc.get(key)
        if item and item.get("status") == RUNNING:
            out[key] = dict(item, status=INTERRUPTED)
    return out
