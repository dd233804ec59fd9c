"""The raw-export document (`memfx export --format raw`, `memfx import`):
its schema, written down once as data, and the validator that walks it.

An import must never be the way bad data gets into a results database, so
every field of a document is checked for type and range here, by a pure
function, before a database is even opened: a document either passes whole
or is refused with one line naming the first bad field
(``samples[3].value: must be a finite number, not nan``).

The schema is declarative: each node says what a JSON value may be (a string
matching a pattern, an integer in a range, an object with these fields, a
list of those ...). `validate_export` walks the document against
`EXPORT_SCHEMA`, then applies the few rules that relate fields to each other
(unique sample sequence numbers, point keys consistent within an arm).
"""
from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypeGuard

from ..model.errors import MemfxError
from ..model.status import COMPLETE, FAILED, INTERRUPTED, RUNNING, STATUSES  # noqa: F401 (re-exported)

EXPORT_FORMAT = "memfx-run"
EXPORT_FORMAT_VERSION = 2

TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

# Limits. A real export is far inside every one of them; they exist so that a
# crafted file cannot exhaust memory or the stack, or smuggle numbers SQLite
# and numpy cannot hold.
MAX_DEPTH = 32                    # nesting of objects/lists anywhere in a document
MAX_INT = 2 ** 63 - 1             # SQLite INTEGER is a signed 64-bit value
MAX_NUMBER = 1e300                # beyond it, arithmetic on the value overflows
MAX_TEXT = 1 << 20                # one string, characters
MAX_NAME = 256                    # short names: arms, metrics, units, keys
MAX_ID = 128                      # run and survey ids
MAX_ITEMS = 10_000_000            # list lengths / object sizes
MAX_FILE_BYTES = 1 << 30          # an import file

# Run and survey ids end up in file names (`memfx-<run>.png`) and on command
# lines: no path separators, whitespace or control characters, no leading
# dash, and not the word `latest` (which always means the newest run).
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]{0,%d}" % (MAX_ID - 1))
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# Control characters (C0 except tab/newline/CR, DEL, C1): nothing memfx
# writes contains them, and they would reach terminals and reports.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_LINE_BREAK = re.compile(r"[\t\n\r]")
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", re.ASCII)   # not "٢٠٢٦-..."


class SchemaError(MemfxError):
    """A document that does not follow the schema (one line, exit 2)."""


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _kind(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


# Paths are built as nested tuples (parent, key) and turned into text only
# when a check fails: a large document is walked without formatting a string
# per field.
_KEY = object()         # marks "the key of this object" in a path


def _path_text(path) -> str:
    parts = []
    while isinstance(path, tuple):
        path, key = path
        parts.append(key)
    text = path or ""
    for key in reversed(parts):
        if key is _KEY:
            text += " key"
        elif isinstance(key, int):
            text += f"[{key}]"
        else:
            text = f"{text}.{key}" if text else str(key)
    return text


def _fail(path, problem: str):
    path = _path_text(path)
    if len(path) > 120:
        path = path[:60] + "..." + path[-57:]
    raise SchemaError(f"{path or 'document'}: {problem}")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ---- schema nodes ---------------------------------------------------------
# Each node checks one JSON value at `path` and raises SchemaError.

class Node:
    def check(self, value, path: str) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class Text(Node):
    """A string: bounded length, no control characters (tab and newline
    allowed in free text), optionally a full-match pattern or a fixed set."""
    max_len: int = MAX_TEXT
    pattern: re.Pattern | None = None
    choices: tuple = ()
    multiline: bool = True
    forbidden: tuple = ()
    controls: bool = False      # control characters allowed (readers quote the text)

    def check(self, value, path):
        if not isinstance(value, str):
            _fail(path, f"must be a string, not {_kind(value)}")
        if self.choices:
            if value not in self.choices:
                _fail(path, f"must be one of {', '.join(map(str, self.choices))}, not {_show(value)}")
            return
        if len(value) > self.max_len:
            _fail(path, f"longer than {self.max_len} characters")
        if not self.controls and (_CONTROL.search(value) or
                                  (not self.multiline and _LINE_BREAK.search(value))):
            _fail(path, f"contains control characters: {_show(value)}")
        if self.pattern is not None and not self.pattern.fullmatch(value):
            _fail(path, f"{_show(value)} is not a valid value (want {self.pattern.pattern})")
        if value in self.forbidden:
            _fail(path, f"{_show(value)} is reserved")


@dataclass(frozen=True)
class Timestamp(Node):
    """UTC time as memfx writes it: 2026-11-21T23:25:01Z."""

    def check(self, value, path):
        if not isinstance(value, str) or not _TIMESTAMP.fullmatch(value):
            _fail(path, f"must be a UTC timestamp like 2026-11-21T23:25:01Z, not {_show(value)}")
        try:
            time.strptime(value, TIMESTAMP_FORMAT)
        except ValueError:
            _fail(path, f"{_show(value)} is not a valid date and time")


@dataclass(frozen=True)
class Integer(Node):
    lo: int = -MAX_INT
    hi: int = MAX_INT

    def check(self, value, path):
        if not _is_int(value):
            _fail(path, f"must be an integer, not {_kind(value)} {_show(value)}")
        if not self.lo <= value <= self.hi:
            _fail(path, f"{_show(value)} is out of range [{self.lo}, {self.hi}]")


@dataclass(frozen=True)
class Number(Node):
    """A finite number (an integer is fine) in [lo, hi]."""
    lo: float = -MAX_NUMBER
    hi: float = MAX_NUMBER

    def check(self, value, path):
        if not _is_number(value):
            _fail(path, f"must be a number, not {_kind(value)} {_show(value)}")
        if _is_int(value) and abs(value) > MAX_INT:
            _fail(path, f"{_show(value)} is too large")
        if not math.isfinite(value):
            _fail(path, f"must be a finite number, not {value}")
        if not self.lo <= value <= self.hi:
            _fail(path, f"{_show(value)} is out of range [{self.lo:g}, {self.hi:g}]")


@dataclass(frozen=True)
class Boolean(Node):
    def check(self, value, path):
        if not isinstance(value, bool):
            _fail(path, f"must be true or false, not {_kind(value)} {_show(value)}")


@dataclass(frozen=True)
class Null(Node):
    def check(self, value, path):
        if value is not None:
            _fail(path, f"must be null, not {_kind(value)}")


@dataclass(frozen=True)
class OneOf(Node):
    """The first alternative whose type fits decides (so its message is the
    one shown); `Nullable(x)` is `OneOf(Null(), x)`."""
    options: tuple

    def __post_init__(self):
        # The option for each exact JSON type, found once: a document has
        # many values and few types.
        by_type = {}
        for example in (None, True, 0, 0.0, "", [], {}):
            for option in self.options:
                if _accepts_type(option, example):
                    by_type[type(example)] = option
                    break
        object.__setattr__(self, "_by_type", by_type)

    def check(self, value, path):
        option = self._by_type.get(type(value))
        if option is not None:
            option.check(value, path)
            return
        for option in self.options:
            if _accepts_type(option, value):
                option.check(value, path)
                return
        kinds = " or ".join(_describe(o) for o in self.options)
        _fail(path, f"must be {kinds}, not {_kind(value)} {_show(value)}")


def Nullable(node: Node) -> Node:
    return OneOf((Null(), node))


@dataclass(frozen=True)
class ListOf(Node):
    item: Node
    max_len: int = MAX_ITEMS

    def check(self, value, path):
        if not isinstance(value, list):
            _fail(path, f"must be a list, not {_kind(value)}")
        if len(value) > self.max_len:
            _fail(path, f"has more than {self.max_len} items")
        for i, item in enumerate(value):
            self.item.check(item, (path, i))


_DEFAULT_KEY = Text(MAX_NAME, multiline=False)
_GOOD_KEYS: set = set()         # keys that passed _DEFAULT_KEY (names repeat in every sample)


@dataclass(frozen=True)
class Field:
    node: Node
    required: bool = False


@dataclass(frozen=True)
class Object(Node):
    """An object with declared fields; other keys are checked against
    `others` (None: refused; the default: any JSON value)."""
    fields: dict = field(default_factory=dict)
    others: Node | None = None
    key: Node = _DEFAULT_KEY

    def check(self, value, path):
        if not isinstance(value, dict):
            _fail(path, f"must be an object, not {_kind(value)}")
        if len(value) > MAX_ITEMS:
            _fail(path, f"has more than {MAX_ITEMS} keys")
        for name, spec in self.fields.items():
            if spec.required and name not in value:
                _fail((path, name), "is missing")
        for name, item in value.items():
            if not (self.key is _DEFAULT_KEY and name in _GOOD_KEYS):
                self.key.check(name, (path, _KEY))
                if self.key is _DEFAULT_KEY and len(_GOOD_KEYS) < 10_000:
                    _GOOD_KEYS.add(name)
            spec = self.fields.get(name)
            if spec is not None:
                spec.node.check(item, (path, name))
            elif self.others is None:
                _fail((path, name), "is not a known field")
            else:
                self.others.check(item, (path, name))


@dataclass(frozen=True)
class AnyJSON(Node):
    """Any JSON value, walked without recursion: finite numbers within the
    64-bit range, strings without control characters, depth bounded."""
    max_depth: int = MAX_DEPTH

    def check(self, value, path):
        stack = [(value, path, 0)]
        while stack:
            item, where, depth = stack.pop()
            if depth > self.max_depth:
                _fail(where, f"nested deeper than {self.max_depth} levels")
            if isinstance(item, dict):
                for k, v in item.items():
                    _TEXT_KEY.check(k, (where, _KEY))
                    stack.append((v, (where, k), depth + 1))
            elif isinstance(item, list):
                stack.extend((v, (where, i), depth + 1) for i, v in enumerate(item))
            elif isinstance(item, str):
                _FREE_TEXT.check(item, where)
            elif _is_number(item):
                Number().check(item, where)
            elif item is not None and not isinstance(item, bool):
                _fail(where, f"{_kind(item)} is not a JSON value")


def Scalar(max_len: int = MAX_TEXT) -> Node:
    """A string, number, boolean or null (no nesting)."""
    return OneOf((Null(), Boolean(), Number(), Text(max_len)))


_TEXT_KEY = Text(MAX_NAME)
_FREE_TEXT = Text(MAX_TEXT)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else str(name)


def _accepts_type(node: Node, value) -> bool:
    if isinstance(node, Null):
        return value is None
    if isinstance(node, Boolean):
        return isinstance(value, bool)
    if isinstance(node, Integer):
        return _is_int(value)
    if isinstance(node, Number):
        return _is_number(value)
    if isinstance(node, (Text, Timestamp)):
        return isinstance(value, str)
    if isinstance(node, ListOf):
        return isinstance(value, list)
    if isinstance(node, Object):
        return isinstance(value, dict)
    if isinstance(node, OneOf):
        return any(_accepts_type(o, value) for o in node.options)
    return True


def _describe(node: Node) -> str:
    return {Null: "null", Boolean: "a boolean", Integer: "an integer", Number: "a number",
            Text: "a string", Timestamp: "a timestamp", ListOf: "a list",
            Object: "an object"}.get(type(node), "a JSON value")


# ---- the raw-export document, format_version 1 ----------------------------

RUN_ID = Text(MAX_ID, pattern=ID_PATTERN, forbidden=("latest", "latest-survey"))
NAME = Text(MAX_NAME, multiline=False)
SHORT = Nullable(Text(MAX_NAME))
COUNT = Integer(0, MAX_INT)
SIZE = Nullable(Integer(0, MAX_INT))

# Fingerprint sections that readers (tables, plots, the report, the noise
# cautions) look into. Each is optional and may hold keys not listed here;
# the keys listed must have the type readers expect. Source: lab/machine.py
# fingerprint(), fingerprint_version 1.
_CACHE = Object({
    "level": Field(Nullable(Integer(0, 9))), "type": Field(SHORT),
    "size_bytes": Field(Nullable(Integer(1, MAX_INT))), "line_bytes": Field(SIZE),
    "ways": Field(SIZE), "sets": Field(SIZE), "shared_cpu_list": Field(SHORT),
}, others=AnyJSON())
MACHINE = Object({
    "fingerprint_version": Field(Nullable(Integer(0, 1000))),
    "cpu": Field(Nullable(Object({
        "vendor": Field(SHORT), "model_name": Field(SHORT), "microcode": Field(SHORT),
        "family": Field(SIZE), "model": Field(SIZE), "stepping": Field(SIZE),
        "cores": Field(SIZE), "logical_cpus": Field(SIZE), "sockets": Field(SIZE),
        "numa_nodes": Field(SIZE), "online_count": Field(SIZE), "smt": Field(SIZE),
        "smt_active": Field(Nullable(Boolean())), "online_cpus": Field(SHORT),
    }, others=AnyJSON()))),
    "caches": Field(Nullable(ListOf(_CACHE, 64))),
    "cache_sizes": Field(Nullable(Object(others=Integer(1, MAX_INT)))),
    "line_bytes": Field(SIZE),
    "flags": Field(Nullable(Object(others=Nullable(Boolean())))),
    "flags_cpuid": Field(Nullable(Object(others=Nullable(Boolean())))),
    "flags_source": Field(Nullable(Object(others=SHORT))),
    "tsc": Field(Nullable(Object({
        "hz": Field(Nullable(Number(0, 1e12))), "invariant": Field(Nullable(Boolean())),
        "known_freq": Field(Nullable(Boolean())), "source": Field(SHORT),
        "clocksource": Field(SHORT),
    }, others=AnyJSON()))),
    "memory": Field(Nullable(Object({
        "total_bytes": Field(SIZE), "available_bytes": Field(SIZE), "page_size": Field(SIZE),
        "hugepage_size": Field(SIZE), "hugepages_total": Field(SIZE),
        "hugepages_free": Field(SIZE), "thp_enabled": Field(SHORT), "thp_defrag": Field(SHORT),
    }, others=AnyJSON()))),
    "hypervisor": Field(Nullable(Object({"present": Field(Nullable(Boolean())),
                                         "vendor": Field(SHORT)}, others=AnyJSON()))),
    "power": Field(Nullable(Object({"governor": Field(SHORT), "turbo": Field(Nullable(Boolean()))},
                                   others=AnyJSON()))),
    "kernel": Field(Nullable(Object({"perf_event_paranoid": Field(Nullable(Integer(-10, 10))),
                                     "release": Field(SHORT), "isolated_cpus": Field(SHORT)},
                                    others=AnyJSON()))),
    "pmu": Field(Nullable(Object({"available": Field(Nullable(Boolean())),
                                  "software_events": Field(Nullable(Boolean())),
                                  "reason": Field(Nullable(Text())),
                                  "software_reason": Field(Nullable(Text()))},
                                 others=AnyJSON()))),
    "glibc": Field(Nullable(Object({
        "version": Field(SHORT),
        "diagnostics": Field(Nullable(Object({
            "thresholds": Field(Nullable(Object(others=Nullable(Integer(0, MAX_INT))))),
            "tunables_set": Field(Nullable(Object(others=Scalar()))),
            "reason": Field(Nullable(Text())),
        }, others=AnyJSON()))),
    }, others=AnyJSON()))),
    "compiler": Field(Nullable(Object(others=AnyJSON()))),
    "memfx": Field(Nullable(Object({"version": Field(SHORT)}, others=AnyJSON()))),
    "python": Field(Nullable(Object({"version": Field(SHORT)}, others=AnyJSON()))),
}, others=AnyJSON())

# Experiment parameters as resolved for the run: scalars or flat lists.  A
# string may be long: a tune run's command line (an export dropped one of
# over 256 characters, then the import refused it).
PARAMS = Object(others=OneOf((Null(), Boolean(), Number(), Text(MAX_TEXT),
                              ListOf(Scalar(MAX_NAME), 100_000))))

# Point keys readers take as numbers (sizes on a log axis, counts, offsets,
# CPUs): a size_bytes stored as a string passed the checks and failed plot.
NUMERIC_POINT_KEYS = (
    "size_bytes", "stride_bytes", "total_bytes", "loader_bytes", "region_bytes",
    "distance_bytes", "entry_bytes", "store_bytes", "load_bytes", "load_offset",
    "second_store_offset", "offset", "threads", "lines", "n", "ld", "width", "distance",
    "nodes", "page_count", "init_n", "npad", "cpu_a", "cpu_b")

# A point (the swept parameter values of one sample): flat scalars.
POINT = Object({key: Field(Nullable(Number())) for key in NUMERIC_POINT_KEYS},
               others=OneOf((Null(), Boolean(), Number(), Text(MAX_NAME))))

SAMPLE = Object({
    "seq": Field(Integer(0, MAX_INT), required=True),
    "arm": Field(Nullable(NAME)),
    "point": Field(Nullable(POINT)),
    "metric": Field(NAME, required=True),
    "unit": Field(Nullable(Text(MAX_NAME, multiline=False))),
    # Per-operation times in ns or bandwidths in GB/s: positive and far from
    # overflow. Limits: a sample is at most hours long (ns < 1e16).
    "value": Field(Nullable(Number(0, 1e15))),
    "length": Field(Nullable(Integer(1, MAX_INT))),
    "ns": Field(Nullable(Number(0, 1e16))),
    "ticks": Field(Nullable(Integer(0, MAX_INT))),
    "cycles_est": Field(Nullable(Number(0, 1e18))),
    "counters": Field(Nullable(Object(others=Scalar(MAX_NAME)))),
    "rejected": Field(Boolean()),
    "reason": Field(Nullable(Text(MAX_TEXT))),
    # export format 2: the worker process (replica) that took the sample;
    # format 1 documents have none (one process: replica 0)
    "replica": Field(Integer(0, 1000)),
}, others=None)

# --label key=value pairs of a run or survey (the store keeps them as text).
LABELS = Object(others=Text(200), key=Text(64, pattern=re.compile(r"[A-Za-z0-9_.:-]{1,64}")))

RUN = Object({
    "id": Field(RUN_ID, required=True),
    "survey_id": Field(Nullable(RUN_ID)),
    "experiment": Field(Text(64, pattern=NAME_PATTERN), required=True),
    "status": Field(Text(choices=STATUSES), required=True),
    "started": Field(Timestamp(), required=True),
    "finished": Field(Nullable(Timestamp())),
    "preset": Field(SHORT),
    "params": Field(Nullable(PARAMS)),
    "memfx_version": Field(SHORT),
    "error": Field(Nullable(Text())),
    "duration_s": Field(Nullable(Number(0, 1e9))),
    "pid": Field(Nullable(Integer(0, 2 ** 31 - 1))),   # Linux pid_t
    "host": Field(SHORT),
    "labels": Field(Nullable(LABELS)),
    # Database-local values an older export may carry; not imported.
    "machine_id": Field(Nullable(Integer())), "n_samples": Field(Nullable(Integer())),
}, others=AnyJSON())

SURVEY = Object({
    "id": Field(RUN_ID, required=True),
    "started": Field(Timestamp(), required=True),
    "finished": Field(Nullable(Timestamp())),
    "status": Field(Text(choices=STATUSES), required=True),
    "preset": Field(SHORT),
    "argv": Field(Nullable(ListOf(Text(), 10_000))),
    "note": Field(Nullable(Text())),
    "pid": Field(Nullable(Integer(0, 2 ** 31 - 1))),
    "host": Field(SHORT),
    "labels": Field(Nullable(LABELS)),
}, others=AnyJSON())

# A `memfx tune` record's document (its "tune" artifact): the fields that
# `memfx show`, `memfx compare` and the JSON readers take at face value
# (tune.render, documents.tune_answers); a run imported without `sources`
# passed the checks and `memfx show` raised KeyError.  The rest is free.
_TUNE_RESULT = Object({
    "speedup": Field(Nullable(Number())), "ci_low": Field(Nullable(Number())),
    "ci_high": Field(Nullable(Number())), "n": Field(Nullable(Integer(0, MAX_INT))),
    "verdict": Field(Nullable(Text(MAX_NAME, multiline=False))),
}, others=AnyJSON())
_SIZE_T = Integer(0, 2 ** 64 - 1)         # the last power-of-two bucket ends at 2**64 - 1
_TUNE_RANGE = {"min": Field(_SIZE_T, required=True), "max": Field(Nullable(_SIZE_T), required=True),
               "calls": Field(Integer(0, MAX_INT), required=True)}
TUNE = Object({
    "run_id": Field(Text(MAX_ID, multiline=False), required=True),
    # the program's arguments as given: tune.render quotes them ($'\e'), so
    # control characters are data here (memfx exports them; import takes them)
    "command": Field(Nullable(OneOf((ListOf(Text(controls=True), 1_000_000),
                                     Text(controls=True))))),
    "sources": Field(Object(others=AnyJSON()), required=True),
    "glibc": Field(Object({"version": Field(SHORT)}, others=AnyJSON()), required=True),
    "noise_band": Field(Nullable(Number(0, 100))),
    "profile": Field(Nullable(Object({
        "processes": Field(Integer(0, MAX_INT), required=True),
        "functions": Field(Object(others=Object({
            "calls": Field(Integer(0, MAX_INT), required=True),
            "bytes": Field(Number(0), required=True),
            "buckets": Field(ListOf(Object(_TUNE_RANGE, others=AnyJSON())), required=True)},
            others=AnyJSON())), required=True),
        "regions": Field(ListOf(Object(dict(_TUNE_RANGE, group=Field(Text(MAX_NAME), required=True)),
                                       others=AnyJSON())), required=True),
    }, others=AnyJSON()))),
    "dropped": Field(Nullable(ListOf(Object({
        "id": Field(Text(MAX_NAME), required=True), "why": Field(Text(), required=True)},
        others=AnyJSON())))),
    "candidates": Field(Nullable(ListOf(Object({
        "id": Field(Text(MAX_NAME), required=True),
        "tunable": Field(Text(MAX_NAME), required=True),
        "reason": Field(Text(), required=True),
        "affected_calls": Field(Nullable(Integer(0, MAX_INT))),
        "result": Field(Nullable(_TUNE_RESULT))}, others=AnyJSON())))),
    "left_running": Field(Nullable(ListOf(Object(others=AnyJSON())))),
    "recommendation": Field(Nullable(Object({
        "line": Field(Text(), required=True), "speedup": Field(Number(), required=True),
        "ci_low": Field(Number(), required=True), "ci_high": Field(Number(), required=True),
        "n": Field(Integer(0, MAX_INT), required=True)}, others=AnyJSON()))),
    "status": Field(Nullable(Text(MAX_NAME, multiline=False))),
    "error": Field(Nullable(Text())),
}, others=AnyJSON())

# Artifacts are per-run JSON documents; the ones memfx writes are objects.
ARTIFACTS = Object({"advice": Field(Object(others=AnyJSON())),
                    "worker": Field(Object(others=AnyJSON())),
                    "tune": Field(TUNE)},
                   others=AnyJSON(), key=Text(MAX_NAME, pattern=NAME_PATTERN))

EXPORT_SCHEMA = Object({
    "format": Field(Text(choices=(EXPORT_FORMAT,)), required=True),
    "format_version": Field(Integer(1, EXPORT_FORMAT_VERSION), required=True),
    "run": Field(RUN, required=True),
    "machine": Field(Nullable(MACHINE)),
    "survey": Field(Nullable(SURVEY)),
    "samples": Field(ListOf(SAMPLE)),
    "artifacts": Field(Nullable(ARTIFACTS)),
}, others=AnyJSON())


# ---- entry points -----------------------------------------------------------

def parse_json(text: str | bytes, what: str = "document"):
    """JSON text -> value; any failure (syntax, nesting too deep for the
    parser, a number too long to convert) is one SchemaError line."""
    if len(text) > MAX_FILE_BYTES:
        raise SchemaError(f"{what} is larger than {MAX_FILE_BYTES >> 20} MiB")
    try:
        return json.loads(text)
    except RecursionError:
        raise SchemaError(f"{what} is nested too deeply to be a memfx document") from None
    except UnicodeDecodeError as e:
        raise SchemaError(f"{what} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except ValueError as e:     # JSONDecodeError, and int digits over the limit
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SchemaError(f"{what} is not valid JSON: {message}") from None


def validate_export(doc) -> dict:
    """Check a raw-export document against the schema; returns it unchanged.
    Pure: reads nothing but `doc`, writes nothing."""
    _check_envelope(doc)
    # The typed part of the schema is only a few levels deep and the free
    # parts (AnyJSON) are walked without recursion, so no input can exhaust
    # the stack here.
    EXPORT_SCHEMA.check(doc, "")
    _check_relations(doc)
    return doc


def load_export(text: str | bytes, what: str = "document") -> dict:
    """Parse and validate a raw export; SchemaError says what is wrong."""
    return validate_export(parse_json(text, what))


def readable(node: Object, value):
    """What readers can use of a stored object that should follow `node`
    (e.g. a fingerprint an older version stored without checking it): the
    object itself when it is valid, else a copy without the members that
    are not; None when it is not an object at all."""
    if not isinstance(value, dict):
        return None
    try:
        node.check(value, "")
        return value
    except SchemaError:
        pass
    kept = {}
    for name, item in value.items():
        spec = node.fields.get(name)
        member = spec.node if spec is not None else node.others
        if member is None or not isinstance(name, str):
            continue
        try:
            member.check(item, name)
        except SchemaError:
            continue
        kept[name] = item
    return kept


def _check_envelope(doc) -> None:
    # These come first, with their own words, so that a file from another
    # program or a newer memfx is named as such rather than by its first
    # unexpected field.
    if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
        raise SchemaError(f"not a {EXPORT_FORMAT} document")
    version = doc.get("format_version")
    if not _is_int(version):
        raise SchemaError(f"{EXPORT_FORMAT} document has no valid format_version")
    if version > EXPORT_FORMAT_VERSION:
        raise SchemaError(f"{EXPORT_FORMAT} document was written by a newer memfx "
                          f"(format_version {version} > {EXPORT_FORMAT_VERSION})")
    if version < 1:
        raise SchemaError(f"unknown {EXPORT_FORMAT} format_version {version}")
    if version < 2 and any(isinstance(s, dict) and "replica" in s
                           for s in doc.get("samples") or []):
        raise SchemaError(f"{EXPORT_FORMAT} format_version {version} documents have no "
                          f"sample replicas (format 2 does)")


# The store knows no experiment: the package (memfx/__init__.py) hands in
# the function that finds an experiment's parameter declarations.
_param_declarations = None


def declare_params(lookup) -> None:
    """Set how to find what an experiment declares: ``lookup(name)`` gives
    {name: Param}, {} for an experiment it does not know."""
    global _param_declarations
    _param_declarations = lookup


def _declared_params(experiment: str) -> dict:
    """{name: Param} the experiment declares now; {} for an experiment this
    version does not know, or with no lookup handed in (its parameters are
    then only checked as data)."""
    return _param_declarations(experiment) if _param_declarations is not None else {}


def check_params(experiment: str, params: dict, path: str = "run.params") -> None:
    """Each stored parameter the experiment declares must be a value its
    declaration accepts (type, list or not, choices, range): readers (plots,
    the analysis) take them at face value. Unknown names are left alone."""
    from ..model.errors import ParamError
    for name, param in _declared_params(experiment).items():
        if name not in params or params[name] is None:
            continue
        value = params[name]
        is_list = isinstance(value, list)
        if is_list != param.kind.startswith("list:") or \
                (param.kind in ("int", "size") and not (_is_int(value) or value == "auto")) or \
                (param.kind == "bool" and not isinstance(value, bool)):
            _fail(_join(path, name), f"{_show(value)} does not fit the parameter's type "
                                     f"{param.kind}")
        try:
            param.parse(value)
        except ParamError as e:
            _fail(_join(path, name), str(e))


def readable_params(experiment, params):
    """The stored parameters readers can use: those that pass check_params
    (an older version may have stored anything)."""
    params = readable(PARAMS, params) or {}
    try:
        check_params(experiment, params)
        return params
    except SchemaError:
        pass
    kept = {}
    for name, value in params.items():
        try:
            check_params(experiment, {name: value})
        except SchemaError:
            continue
        kept[name] = value
    return kept


def _check_tune(tune: dict, path: str = "artifacts.tune") -> None:
    """What the tune readers take together: a measured speedup has its CI,
    round count and verdict; candidates have the noise band they are judged by."""
    candidates = tune.get("candidates") or []
    if candidates and not _is_number(tune.get("noise_band")):
        _fail(f"{path}.noise_band", "candidates are judged against it: must be a number")
    for i, c in enumerate(candidates):
        result = c.get("result") or {}
        if result.get("speedup") is None:
            continue
        for key, ok in (("ci_low", _is_number), ("ci_high", _is_number), ("n", _is_int),
                        ("verdict", lambda v: isinstance(v, str))):
            if not ok(result.get(key)):
                _fail(f"{path}.candidates[{i}].result.{key}",
                      f"a measured speedup needs it, not {_show(result.get(key))}")


def _check_relations(doc: dict) -> None:
    run, survey = doc["run"], doc.get("survey")
    check_params(run["experiment"], run.get("params") or {})
    if isinstance((doc.get("artifacts") or {}).get("tune"), dict):
        _check_tune(doc["artifacts"]["tune"])
    if survey is not None and run.get("survey_id") != survey["id"]:
        _fail("survey.id", f"{_show(survey['id'])} is not the run's survey_id "
                           f"{_show(run.get('survey_id'))}")
    seen: dict[int, int] = {}
    shapes: dict[tuple[str, str], dict] = {}          # (arm, metric) -> {point key: (first sample, kind)}
    for i, sample in enumerate(doc.get("samples") or []):
        seq = sample["seq"]
        if seq in seen:
            _fail(f"samples[{i}].seq", f"duplicate sample seq {seq} (also samples[{seen[seq]}])")
        seen[seq] = i
        if not sample.get("rejected"):
            # Analysis takes accepted samples at face value (N/2N divides
            # by ns and value): they must carry a real measurement.  A tune
            # sample times one whole run of a program: it has no length.
            measured = ("value", "ns") if run["experiment"] == "tune" else ("value", "length", "ns")
            for key in measured:
                if not sample.get(key):
                    _fail(f"samples[{i}].{key}", "an accepted sample needs a value > 0 here")
        # Readers group samples by arm and read a point key the same way
        # from every point of an arm, so a key has one type within an arm.
        # Keys may come and go: an experiment of several parts measures each
        # part with points of its own keys (assoc, sharing), and a point may
        # carry an extra key (prefetch's DRAM target adds region_bytes).
        point = sample.get("point") or {}
        arm = (sample.get("arm"), sample["metric"])
        kinds = shapes.setdefault(arm, {})
        for key, value in point.items():
            if value is None:
                continue
            kind = _kind(value)
            first = kinds.setdefault(key, (i, kind))
            if first[1] != kind:
                _fail(f"samples[{i}].point.{key}",
                      f"is {kind}, but {first[1]} in samples[{first[0]}] of the same arm")
