"""`memfx import` trusts nothing in its input (issue 14, item 3).

A bad document is refused whole, before the database is opened: one line on
stderr, exit status 2, the database byte-identical, and no database created
where none existed. What older versions let into a database is read without
a traceback by runs, show, export, plot and report.
"""
import contextlib
import copy
import gc
import hashlib
import io
import json
import math
import os
import shutil
import socket
import sqlite3
import tempfile
from pathlib import Path

import pytest

from conftest import run_cli
from memfx.cli import main as cli
from memfx.model.errors import StoreError
from memfx.store.schema import SchemaError, load_export, parse_json, validate_export
from memfx.store.store import Store

DATA = Path(__file__).parent / "data"
# A real raw export of a small latency run on a 2-vCPU Zen 4 KVM guest
# (memfx run latency --set min_size=4K --set max_size=64K --set per_octave=1
#  --set samples=3 --set refine=false; memfx export latest --format raw).
EXPORT = DATA / "export_latency_small.json"


def valid_doc():
    return json.loads(EXPORT.read_text())


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def one_error_line(stderr):
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("memfx: error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.fixture(scope="module")
def base_db(tmp_path_factory):
    """A database holding one valid run (under another id than the fixture's,
    so that a valid mutation of the fixture can still be imported)."""
    path = tmp_path_factory.mktemp("base") / "base.db"
    doc = valid_doc()
    doc["run"]["id"] += "-other"
    with Store(path) as st:
        st.import_run(doc)
    return path


@pytest.fixture
def db(base_db, tmp_path):
    path = tmp_path / "results.db"
    shutil.copyfile(base_db, path)
    return path


def write_doc(tmp_path, doc_or_text, name="doc.json"):
    path = tmp_path / name
    text = doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text)
    path.write_text(text)
    return path


def mutated(change):
    doc = valid_doc()
    change(doc)
    return doc


def _set(path, value):
    def change(doc):
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


def _main(*args):
    """Run the CLI in this process (a traceback is an exception here);
    returns (status, stderr)."""
    # Collect earlier tests' garbage first: an object they leaked (an open
    # file) would print its ResourceWarning into this command's stderr when
    # the collector happens to run inside it, and fail the one-line check.
    gc.collect()
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        status = cli.main(list(args))
    return status, err.getvalue()


# ---- the audit's reproducers ------------------------------------------------

OUR_HOST = socket.gethostname()

BAD_DOCUMENTS = {
    # crashed the importer
    "int 10^30 as a sample value": mutated(_set(["samples", 0, "value"], 10 ** 30)),
    "int 10^30 as a sample seq": mutated(_set(["samples", 0, "seq"], 10 ** 30)),
    "int 10^30 as a sample length": mutated(_set(["samples", 0, "length"], 10 ** 30)),
    "artifacts as a list": mutated(_set(["artifacts"], [1, 2])),
    "survey as a string": mutated(_set(["survey"], "s-1")),
    # were accepted, then crashed runs/report/survey/show/export/plot
    "running run with pid 'abc'": mutated(lambda d: d["run"].update(
        status="running", pid="abc", host=OUR_HOST)),
    "machine as a list": mutated(_set(["machine"], [1, 2])),
    "params as a list": mutated(_set(["run", "params"], ["a", "b"])),
    "a list parameter stored as a number": mutated(_set(["run", "params", "pages"], 5)),
    "a parameter out of its declared range": mutated(_set(["run", "params", "npad"], -3)),
    "a parameter outside its choices": mutated(_set(["run", "params", "pages"], ["1g"])),
    "sample value 'abc'": mutated(_set(["samples", 0, "value"], "abc")),
    "machine.cpu as a string": mutated(_set(["machine", "cpu"], "AMD")),
    "machine.caches entry as a number": mutated(_set(["machine", "caches", 0], 32768)),
    "point as a list": mutated(_set(["samples", 0, "point"], [1, 2])),
    "point key of another type than its arm's": mutated(
        _set(["samples", 0, "point", "size_bytes"], "4K")),
    "duplicate seq": mutated(_set(["samples", 1, "seq"], 0)),
    "accepted sample without a value": mutated(_set(["samples", 0, "value"], None)),
    "accepted sample with ns 0": mutated(_set(["samples", 0, "ns"], 0)),
    "unknown sample field": mutated(_set(["samples", 0, "cycles"], 3)),
    "status not a status": mutated(_set(["run", "status"], "done")),
    "started not a timestamp": mutated(_set(["run", "started"], "yesterday")),
    "started an impossible date": mutated(_set(["run", "started"], "2026-02-30T25:00:00Z")),
    "negative duration": mutated(_set(["run", "duration_s"], -1.0)),
    "survey of another run": mutated(_set(["survey"], {
        "id": "s-x", "started": "2026-11-23T12:52:43Z", "status": "complete"})),
    "escape sequence in the experiment name": mutated(_set(["run", "experiment"], "lat\x1b[2J")),
    "control characters in machine model name": mutated(
        _set(["machine", "cpu", "model_name"], "AMD\x1b]8;;http://x\x07EPYC")),
    # run ids end up in file names and on command lines
    "run id with '/'": mutated(_set(["run", "id"], "../../etc/x")),
    "run id with a control character": mutated(_set(["run", "id"], "run\n2")),
    "run id of 10 kB": mutated(_set(["run", "id"], "r" * 10_000)),
    "run id 'latest'": mutated(_set(["run", "id"], "latest")),
    "run id starting with '-'": mutated(_set(["run", "id"], "-rf")),
    "empty run id": mutated(_set(["run", "id"], "")),
    # the envelope
    "not an object": [1, 2, 3],
    "other format": mutated(_set(["format"], "memfx-result")),
    "newer format_version": mutated(_set(["format_version"], 3)),
    "no run": mutated(lambda d: d.pop("run")),
}

# Non-finite numbers are not JSON; Python writes them as NaN/Infinity, and
# 1e999 parses as infinity.
BAD_TEXTS = {
    "sample value NaN": json.dumps(mutated(_set(["samples", 0, "value"], math.nan))),
    "sample value Infinity": json.dumps(mutated(_set(["samples", 0, "value"], math.inf))),
    "sample value 1e999": json.dumps(valid_doc()).replace(
        '"value": %r' % valid_doc()["samples"][0]["value"], '"value": 1e999', 1),
    "machine tsc.hz NaN": json.dumps(mutated(_set(["machine", "tsc", "hz"], math.nan))),
    "100 000-deep JSON": "[" * 100_000 + "]" * 100_000,
    "deep nesting inside a valid document": json.dumps(valid_doc())[:-1]
        + ', "extra": ' + "[" * 5000 + "]" * 5000 + "}",
    "an integer of 5000 digits": json.dumps(valid_doc()).replace(
        '"seq": 0', '"seq": ' + "9" * 5000, 1),
    "not JSON": '{"format": "memfx-run", ',
    "not UTF-8": "\udcff",
}


def test_the_fixture_is_valid():
    doc = valid_doc()
    assert validate_export(doc) is doc
    assert '"value": 1e999' in BAD_TEXTS["sample value 1e999"]


# The cases the audit reported, run exactly as a user would (a child process);
# the rest run the same CLI code in this process, which is faster.
AUDIT_CASES = {
    "int 10^30 as a sample value", "100 000-deep JSON", "artifacts as a list",
    "survey as a string", "running run with pid 'abc'", "machine as a list",
    "params as a list", "sample value NaN", "sample value 1e999", "sample value 'abc'",
    "run id with '/'", "run id of 10 kB",
}


def _import(path, db, in_child):
    if in_child:
        r = run_cli("import", str(path), db=str(db))
        return r.returncode, r.stderr
    return _main("import", str(path), "--db", str(db))


@pytest.mark.measuring
@pytest.mark.parametrize("name", sorted(BAD_DOCUMENTS) + sorted(BAD_TEXTS))
def test_bad_import_is_one_line_exit_2_and_changes_nothing(name, db, tmp_path):
    if name in BAD_DOCUMENTS:
        path = write_doc(tmp_path, BAD_DOCUMENTS[name])
    else:
        path = tmp_path / "doc.json"
        path.write_bytes(BAD_TEXTS[name].encode("utf-8", "surrogateescape"))
    in_child = name in AUDIT_CASES
    before = sha256(db)
    status, stderr = _import(path, db, in_child)
    assert status == 2, stderr
    line = one_error_line(stderr)
    assert str(path) in line
    assert sha256(db) == before
    # ... and nothing was created where no database existed
    fresh = tmp_path / "new" / "fresh.db"
    status, stderr = _import(path, fresh, in_child)
    assert status == 2
    one_error_line(stderr)
    assert not fresh.parent.exists()


@pytest.mark.measuring
def test_error_names_the_field(tmp_path, db):
    path = write_doc(tmp_path, BAD_DOCUMENTS["sample value 'abc'"])
    line = one_error_line(run_cli("import", str(path), db=str(db)).stderr)
    assert "samples[0].value" in line and "'abc'" in line
    path = write_doc(tmp_path, BAD_DOCUMENTS["running run with pid 'abc'"])
    line = one_error_line(run_cli("import", str(path), db=str(db)).stderr)
    assert "run.pid" in line


@pytest.mark.measuring
def test_valid_import_then_every_reader(db, tmp_path):
    path = write_doc(tmp_path, valid_doc())
    r = run_cli("import", str(path), db=str(db))
    assert r.returncode == 0, r.stderr
    run_id = valid_doc()["run"]["id"]
    assert r.stdout.strip() == run_id
    out = tmp_path / "again.json"
    assert run_cli("export", run_id, "--format", "raw", "-o", str(out), db=str(db)).returncode == 0
    expected = valid_doc()
    expected["run"].setdefault("labels", {})              # exports carry the run's labels
    # a format-1 document is exported as format 2: each sample names its
    # replica, 0 for the one process a format-1 run had
    expected["format_version"] = 2
    for s in expected["samples"]:
        s.setdefault("replica", 0)
    assert json.loads(out.read_text()) == expected        # nothing lost or changed on the way


def test_a_document_with_only_the_required_fields_imports_and_reads(db, tmp_path):
    """What an older or a hand-written export may look like: every optional
    key missing (no machine, survey, artifacts, counters, points, params)."""
    full = valid_doc()
    doc = {"format": "memfx-run", "format_version": 1,
           "run": {k: full["run"][k] for k in ("id", "experiment", "status", "started")},
           "samples": [{k: s[k] for k in ("seq", "metric", "value", "length", "ns")}
                       for s in full["samples"]]}
    path = write_doc(tmp_path, doc)
    assert _main("import", str(path), "--db", str(db))[0] == 0
    run_id = doc["run"]["id"]
    for args in (["runs"], ["show", run_id], ["show", run_id, "--json"],
                 ["export", run_id, "--format", "csv", "-o", str(tmp_path / "s.csv")],
                 ["plot", run_id, "-o", str(tmp_path / "p.png")],
                 ["report", run_id, "-o", str(tmp_path / "r.html")]):
        status, stderr = _main(*args, "--db", str(db))
        assert status == 0, (args, stderr)
    with Store(db) as st:
        run = st.run(run_id)
        samples = st.samples(run_id)
    assert run["machine"] is None and run["params"] == {} and run["pid"] is None
    assert len(samples) == len(full["samples"]) and not any(s["rejected"] for s in samples)


def test_python_api_refuses_before_writing(db):
    before = sha256(db)
    with Store(db) as st:
        with pytest.raises(StoreError, match=r"samples\[0\]\.value"):
            st.import_run(BAD_DOCUMENTS["sample value 'abc'"])
        with pytest.raises(StoreError, match="duplicate sample seq"):
            st.import_run(BAD_DOCUMENTS["duplicate seq"])
        assert [r["id"] for r in st.runs()] == [valid_doc()["run"]["id"] + "-other"]
    assert sha256(db) == before


def test_parse_json_errors_are_one_line():
    for text in ("[" * 100_000, "[" * 100_000 + "]" * 100_000, "{", "1" * 5000, b"\xff\xfe"):
        with pytest.raises(SchemaError) as info:
            parse_json(text, "x.json")
        assert "\n" not in str(info.value)
    with pytest.raises(SchemaError, match="finite"):
        load_export(json.dumps(valid_doc()).replace('"hz": ', '"hz": NaN, "was": ', 1))


# ---- readers cope with what older versions stored -----------------------------

def _spoil(db, sql, *args):
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(sql, args)
    conn.close()


SPOILED = {
    "params stored as a list": ("UPDATE runs SET params = ?", '["a", "b"]'),
    "params not JSON": ("UPDATE runs SET params = ?", "{not json"),
    "machine stored as a list": ("UPDATE runs SET machine_state = ?", "[1, 2]"),
    "machine sections of the wrong type": (
        "UPDATE runs SET machine_state = ?",
        '{"cpu": "AMD", "caches": [32768, "L2"], "cache_sizes": 5, "tsc": {"hz": "fast"}}'),
    "a list parameter stored as a number": ("UPDATE runs SET params = ?", '{"pages": 5}'),
    "point values nested": ("UPDATE samples SET point = ? WHERE seq = 4",
                            '{"size_bytes": {"a": 1}, "pages": [1]}'),
    "running with pid 'abc' on this host": (
        "UPDATE runs SET status = 'running', pid = 'abc', host = ?", OUR_HOST),
    "duration as text": ("UPDATE runs SET duration_s = ?", "long"),
    "sample value 'abc'": ("UPDATE samples SET value = ? WHERE seq = 0", "abc"),
    "sample value NULL (NaN)": ("UPDATE samples SET value = ? WHERE seq < 5", None),
    "sample value 0 with a length": ("UPDATE samples SET value = ? WHERE seq = 3", 0.0),
    "sample ns as text": ("UPDATE samples SET ns = ? WHERE seq = 2", "x"),
    "sample length as text": ("UPDATE samples SET length = ? WHERE seq = 1", "x"),
    "point stored as a list": ("UPDATE samples SET point = ? WHERE seq = 4", "[1]"),
    "counters not JSON": ("UPDATE samples SET counters = ? WHERE seq = 4", "{"),
    "artifact not JSON": ("UPDATE artifacts SET data = ?", "{"),
}


# Not a measurement, but a plot and a report per case (seconds each): marked
# measuring to keep it out of the quick pure run.
@pytest.mark.measuring
@pytest.mark.parametrize("name", sorted(SPOILED))
def test_readers_survive_old_or_damaged_rows(name, db, tmp_path):
    _spoil(db, *SPOILED[name])
    # the run by id: `latest` means the latest complete run, and a damaged
    # status (running with a dead pid) reads as interrupted
    rid = valid_doc()["run"]["id"]
    for args in (["runs"], ["runs", "--json"], ["show", rid], ["show", rid, "--json"],
                 ["export", rid, "--format", "raw"], ["export", rid, "--format", "csv"],
                 ["plot", rid, "-o", str(tmp_path / "p.png")],
                 ["report", "-o", str(tmp_path / "r.html")]):
        status, stderr = _main(*args, "--db", str(db))
        assert status == 0, (args, stderr)


def test_readers_keep_the_valid_part_of_a_damaged_fingerprint(db):
    _spoil(db, "UPDATE runs SET machine_state = ?",
           json.dumps({"cpu": "AMD", "memory": {"total_bytes": 1 << 30}, "extra": [1]}))
    _spoil(db, "UPDATE runs SET params = ?", json.dumps({"pages": 5, "npad": 7, "other": "x"}))
    with Store(db) as st:
        run = st.run("latest")
    assert run["machine"] == {"memory": {"total_bytes": 1 << 30}, "extra": [1]}
    assert run["params"] == {"npad": 7, "other": "x"}


def test_unusable_stored_samples_are_set_aside_not_analysed(db):
    _spoil(db, "UPDATE samples SET value = 'abc' WHERE seq = 0")
    with Store(db) as st:
        run_id = st.runs()[0]["id"]
        samples = st.samples(run_id)
        params = st.run(run_id)["params"]
    assert samples[0]["rejected"] is True and samples[0]["value"] is None
    assert samples[0]["reason"].startswith("unusable stored sample")
    assert all(isinstance(s["value"], float) for s in samples[1:])
    assert params == valid_doc()["run"]["params"]


# ---- mutations of a valid export ----------------------------------------------

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _paths(doc):
    """Every path into the document, but only the first two samples (the
    rest have the same shape)."""
    out, stack = [], [((), doc)]
    while stack:
        path, value = stack.pop()
        out.append(path)
        if isinstance(value, dict):
            stack.extend((path + (k,), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((path + (i,), v) for i, v in enumerate(value[:2]))
    return sorted(out[1:], key=repr)


PATHS = _paths(valid_doc())
REPLACEMENTS = [None, True, False, 0, -1, 1, 2.5, 10 ** 30, -(10 ** 19), 1e308, math.nan,
                math.inf, -math.inf, "", "abc", "a/b", "\x1b[31mred", "x" * 10_000, [], {},
                [1, "a"], {"k": 1}, "2026-11-23T12:52:43Z"]


def _deep(n):
    value = 1
    for _ in range(n):
        value = [value]
    return value


@st.composite
def mutations(draw):
    doc = valid_doc()
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]]
        except (KeyError, IndexError, TypeError):
            continue                    # an earlier mutation removed it
        kind = draw(st.sampled_from(["drop", "replace", "deep"]))
        if kind == "drop" and isinstance(parent, dict):
            del parent[path[-1]]
        elif kind == "deep":
            parent[path[-1]] = _deep(draw(st.integers(30, 600)))
        else:
            parent[path[-1]] = copy.deepcopy(draw(st.sampled_from(REPLACEMENTS)))
    return doc


# Random mutations find new reader bugs on a developer's machine; CI replays a
# fixed set (derandomize) so a landing does not hinge on one draw.  Every bug
# found this way becomes a named case (e.g. the cache without a level below).
# Not a measurement, but 40 documents each imported and read by every reader,
# a plot among them: marked measuring to keep it out of the quick pure run.
@pytest.mark.measuring
@settings(max_examples=40, deadline=None, database=None, derandomize=bool(os.environ.get("CI")),
          suppress_health_check=list(HealthCheck))
@given(doc=mutations())
def test_mutated_export_is_refused_cleanly_or_usable(doc, base_db):
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "results.db")
        shutil.copyfile(base_db, db)
        before = sha256(db)
        path = os.path.join(tmp, "doc.json")
        with open(path, "w") as f:
            json.dump(doc, f)           # NaN/Infinity written as Python does
        status, err = _main("import", path, "--db", db)
        if status != 0:
            assert status == 2
            one_error_line(err)
            assert sha256(db) == before
            return
        run_id = doc["run"]["id"]
        for args in (["runs"], ["show", run_id], ["show", run_id, "--json"],
                     ["export", run_id, "--format", "raw", "-o", os.path.join(tmp, "raw.json")],
                     ["export", run_id, "--format", "csv", "-o", os.path.join(tmp, "s.csv")],
                     ["export", run_id, "-o", os.path.join(tmp, "doc.json")],
                     ["plot", run_id, "-o", os.path.join(tmp, "p.png")]):
            status, err = _main(*args, "--db", db)
            assert status == 0, (args, err)


@pytest.mark.measuring
def test_a_cache_without_a_level_still_plots_and_shows(base_db, tmp_path):
    # found by the mutation test: a fingerprint cache entry may lack "level"
    doc = valid_doc()
    del doc["machine"]["caches"][0]["level"]
    doc["run"]["id"] = "r-nolevel"
    path = write_doc(tmp_path, doc)
    db = str(tmp_path / "n.db")
    assert run_cli("import", str(path), db=db).returncode == 0
    for args in (["plot", "r-nolevel", "-o", str(tmp_path / "p.png")], ["show", "r-nolevel"],
                 ["report", "r-nolevel", "-o", str(tmp_path / "r.html")]):
        status, err = _main(*args, "--db", db)
        assert status == 0, (args, err)
