#!/usr/bin/env python3
"""The fleet store at scale, by simulation (issue 43).

Fills a real PostgreSQL server (pgserver, as the tests use) with a simulated
fleet built from real stored surveys, then times the fleet commands against
it, each as its own process (what a user waits for, imports included) and
each the median of --reps runs, with its peak memory (the child's maximum
resident set, from wait4):

    memfx push (one quick survey of a new host into the full store)
    memfx machines
    memfx report --fleet --group-by cpu-model   (time, and the file's size)
    memfx compare --group-by cpu-model MODEL_A MODEL_B
    memfx compare MACHINE_A MACHINE_B

The fleet: --machines N hosts, each of one of the CPU models below (a
fingerprint per host: the base survey's, with the model's CPU, a kernel of
its own, labels rack/kernel/role), each with --surveys surveys of every
experiment of the base survey (tests/data/survey_quick.json.gz, or
--survey-db: the newest complete survey of an SQLite store).  What is kept:

- the newest survey of the first host of every CPU model: whole (its
  samples, perturbed by the host's factor, analysed by memfx and the
  document stored, as a survey that ends does);
- every other run: its row and its stored result document (answers and
  points), no samples -- the schema allows it: readers take a run's stored
  document while it is current (the analyses table, schema 7), so a fleet
  of answers reads as one of samples would after its first read.  Its
  machine_state is NULL (the schema's "as the machine's fingerprint");
- over --points-up-to machines, the older surveys keep their answers only
  (points emptied), to stay well inside the disk.

Perturbation: every host has a CPU model factor (models differ) and, per
answer, a value drawn within the spread of the answer's own replicas (the
variation the measurement itself shows), and per experiment a factor within
its points' relative CI half-width for the points; later surveys of a host
move within the same spread.

Concurrency (--concurrency): 8 processes push 8 different surveys at once,
then 2 push the same survey at once; every push must exit 0 (or 1 with one
line), the store must hold each run once.

Usage:
    python benchmarks/fleet_scale.py --machines 100 1000 10000
    python benchmarks/fleet_scale.py --machines 100 --reps 1 --out fleet.json --keep /tmp/fleet
"""
from __future__ import annotations

import argparse
import copy
import gzip
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE_SURVEY = ROOT / "tests" / "data" / "survey_quick.json.gz"

TARGETS = {"push": 3.0, "machines": 1.0, "report": 10.0, "compare models": 2.0}
TARGET_REPORT_BYTES = 3 << 20
TARGET_RSS_MB = 500
TARGET_AT = 1000        # the machine count the targets are set for

# (vendor, family, model, model_name, logical CPUs, performance factor):
# the factor scales every measured value of the model's hosts
CPU_MODELS = [
    ("GenuineIntel", 6, 143, "Intel(R) Xeon(R) Platinum 8480+", 8, 0.85),
    ("GenuineIntel", 6, 143, "Intel(R) Xeon(R) Gold 6438N", 4, 0.95),
    ("GenuineIntel", 6, 106, "Intel(R) Xeon(R) Platinum 8375C", 8, 1.00),
    ("GenuineIntel", 6, 106, "Intel(R) Xeon(R) Gold 6348", 4, 1.05),
    ("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Platinum 8259CL", 4, 1.20),
    ("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Gold 6248R", 4, 1.15),
    ("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Silver 4214", 2, 1.30),
    ("GenuineIntel", 6, 79, "Intel(R) Xeon(R) CPU E5-2686 v4", 2, 1.40),
    ("GenuineIntel", 6, 173, "Intel(R) Xeon(R) 6747P", 8, 0.80),
    ("GenuineIntel", 6, 167, "Intel(R) Xeon(R) Processor", 2, 1.00),
    ("GenuineIntel", 6, 183, "Intel(R) Core(TM) i9-14900K", 8, 0.75),
    ("GenuineIntel", 6, 151, "12th Gen Intel(R) Core(TM) i7-12700", 4, 0.90),
    ("AuthenticAMD", 25, 17, "AMD EPYC 9654 96-Core Processor", 8, 0.82),
    ("AuthenticAMD", 25, 17, "AMD EPYC 9354 32-Core Processor", 4, 0.88),
    ("AuthenticAMD", 25, 1, "AMD EPYC 7763 64-Core Processor", 8, 0.95),
    ("AuthenticAMD", 25, 1, "AMD EPYC 7R13 Processor", 4, 0.97),
    ("AuthenticAMD", 23, 49, "AMD EPYC 7742 64-Core Processor", 8, 1.10),
    ("AuthenticAMD", 23, 49, "AMD EPYC 7R32", 4, 1.12),
    ("AuthenticAMD", 23, 1, "AMD EPYC 7601 32-Core Processor", 4, 1.35),
    ("AuthenticAMD", 26, 2, "AMD EPYC 9755 128-Core Processor", 8, 0.78),
    ("AuthenticAMD", 25, 97, "AMD Ryzen 9 7950X 16-Core Processor", 8, 0.72),
    ("AuthenticAMD", 25, 33, "AMD Ryzen 7 5800X 8-Core Processor", 4, 0.86),
    ("ARM", 0, 3340, "Neoverse-V2", 8, 0.90),
    ("ARM", 0, 3337, "Neoverse-N1", 4, 1.25),
]
KERNELS = ["5.15.0-105-generic", "6.1.0-18-amd64", "6.5.0-35-generic", "6.8.0-41-generic",
           "6.10.14-200.fc40.x86_64", "5.14.0-427.el9.x86_64"]
ROLES = ["web", "db", "batch", "cache", "build"]


# ---- the base survey --------------------------------------------------------

def load_base(survey_db: str | None) -> list[dict]:
    """The raw exports (one per run) of the survey the fleet is built from."""
    if survey_db is None:
        with gzip.open(BASE_SURVEY) as f:
            return json.load(f)["runs"]
    from memfx.store.sqlite import Store
    with Store(survey_db) as st:
        done = [s for s in st.surveys() if s["status"] == "complete"]
        if not done:
            sys.exit(f"fleet_scale: no complete survey in {survey_db}")
        return [st.export_run(r["id"]) for r in reversed(st.runs(survey_id=done[0]["id"]))]


def analysed(exports: list[dict]) -> dict[str, dict]:
    """{experiment: the result document with values of its base run}."""
    from memfx.analysis.results import document
    return {e["run"]["experiment"]: document(dict(e["run"]), e["samples"], include_values=True)
            for e in exports}


def _scaled(x, f):
    return x * f if isinstance(x, (int, float)) and not isinstance(x, bool) else x


def points_spread(doc: dict) -> float:
    """The median relative CI half-width of an experiment's points: how far
    its points move from one measurement to the next."""
    widths = [(p["ci_high"] - p["ci_low"]) / (2 * p["median"]) for p in doc.get("points") or []
              if all(isinstance(p.get(k), (int, float)) for k in ("ci_low", "ci_high", "median"))
              and p["median"] > 0]
    return min(statistics.median(widths), 0.5) if widths else 0.02


def perturbed_points(points: list[dict], f: float) -> list[dict]:
    out = []
    for p in points:
        q = dict(p)
        for k in ("min", "median", "max", "mad", "ci_low", "ci_high", "p10", "p90", "best"):
            q[k] = _scaled(p.get(k), f)
        for k in ("replicas", "values"):
            if isinstance(p.get(k), list):
                q[k] = [_scaled(v, f) for v in p[k]]
        out.append(q)
    return out


def perturbed_answers(answers: list[dict], rng: random.Random, f: float) -> list[dict]:
    """Each answer's value drawn within its replicas' spread (else its CI),
    times the model factor for answers in time units (ratios keep theirs)."""
    out = []
    for a in answers:
        a = dict(a)
        value = a.get("value")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            reps = [r.get("value") for r in a.get("replicas") or []
                    if isinstance(r.get("value"), (int, float))]
            lo, hi = (min(reps), max(reps)) if len(reps) > 1 else (a.get("ci_low"), a.get("ci_high"))
            if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo <= hi:
                drawn = rng.uniform(lo, hi)
                shift = drawn - value
                a["value"] = drawn
                a["ci_low"] = _scaled(a.get("ci_low"), 1) + shift if a.get("ci_low") is not None else None
                a["ci_high"] = _scaled(a.get("ci_high"), 1) + shift if a.get("ci_high") is not None else None
            scale = f if a.get("unit") in ("ns", "cycles", "ms", "us", "s") else 1.0
            for k in ("value", "ci_low", "ci_high"):
                a[k] = _scaled(a.get(k), scale)
            a.pop("replicas", None)
        out.append(a)
    return out


# ---- the fleet --------------------------------------------------------------

def fingerprint(base: dict, host: int) -> tuple[dict, int]:
    """(the fingerprint of simulated host `host`, its CPU model's index)."""
    i = host % len(CPU_MODELS)
    vendor, family, model, name, cpus, _ = CPU_MODELS[i]
    fp = copy.deepcopy(base)
    fp["cpu"] = dict(fp.get("cpu") or {}, vendor=vendor, family=family, model=model,
                     model_name=name, logical_cpus=cpus, cores=cpus, online_count=cpus,
                     online_cpus=f"0-{cpus - 1}", microcode=hex(0x100 + host % 7))
    # the kernel build carries the host number: hosts of one model and
    # kernel would otherwise share one stable machine id (lab.machine)
    fp["kernel"] = dict(fp.get("kernel") or {}, release=f"{KERNELS[host % len(KERNELS)]}+h{host}")
    return fp, i


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _id_stamp(t: float) -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(t))


class Copier:
    """Rows into one table by COPY, streamed as they are made: a connection
    of its own (one COPY at a time per connection), committed by close()."""

    def __init__(self, url: str, table: str, columns: tuple[str, ...]):
        import psycopg
        self.conn = psycopg.connect(url, autocommit=False)
        self.ctx = self.conn.cursor().copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN")
        self.copy = self.ctx.__enter__()

    def row(self, values) -> None:
        self.copy.write_row(values)

    def close(self) -> None:
        self.ctx.__exit__(None, None, None)
        self.conn.commit()
        self.conn.close()


RUN_COLUMNS = ("id", "survey_id", "experiment", "status", "started", "finished", "preset", "params",
               "machine_row", "memfx_version", "error", "duration_s", "pid", "host", "started_unix",
               "labels", "machine_state")
SURVEY_COLUMNS = ("id", "started", "finished", "status", "preset", "argv", "note", "pid", "host",
                  "labels")
SAMPLE_COLUMNS = ("run_id", "seq", "arm", "point", "metric", "unit", "value", "length", "ns", "ticks",
                  "cycles_est", "counters", "rejected", "reason", "replica")


def fill(url: str, exports: list[dict], docs: dict[str, dict], n_machines: int, n_surveys: int,
         points_up_to: int, seed: int = 43) -> dict:
    """Fill the (empty) database at `url`; returns what was stored."""
    import psycopg

    from memfx.analysis.answer_cache import analysis_key
    from memfx.analysis.results import document
    from memfx.lab.machine import machine_id
    from memfx.store.postgres import PostgresStore
    from memfx.store.sql import answers_part, points_part
    PostgresStore(url).close()              # the schema, as memfx creates and migrates it
    key = analysis_key()
    rng = random.Random(seed)
    base_fp = exports[0]["machine"] or {}
    spreads = {exp: points_spread(doc) for exp, doc in docs.items()}
    # the JSON text of every document but its answers and points, once
    json_tail = {exp: {k: v for k, v in doc.items() if k not in ("answers", "points")}
                 for exp, doc in docs.items()}
    t_start = time.time() - n_surveys * 7 * 86400
    counts = {"machines": 0, "surveys": 0, "runs": 0, "samples": 0, "analyses": 0,
              "kept_whole": 0}
    kept: list[tuple[dict, list[dict]]] = []
    with psycopg.connect(url, autocommit=False) as conn:
        cur = conn.cursor()
        first_host_of_model = set()
        ids = []
        for host in range(n_machines):
            fp, model = fingerprint(base_fp, host)
            ids.append((machine_id(fp), fp, model))
        with cur.copy("COPY machines (id, machine_id, fingerprint) FROM STDIN") as cp:
            for row, (mid, fp, _) in enumerate(ids, start=1):
                cp.write_row((row, mid, json.dumps(fp, sort_keys=True, separators=(",", ":"))))
        cur.execute("SELECT setval(pg_get_serial_sequence('machines', 'id'), %s)", (len(ids),))
        counts["machines"] = len(ids)
        conn.commit()
        runs = Copier(url, "runs", RUN_COLUMNS)
        surveys = Copier(url, "surveys", SURVEY_COLUMNS)
        analyses = Copier(url, "analyses", ("run_id", "analysis", "made", "doc", "answers", "points"))
        samples = Copier(url, "samples", SAMPLE_COLUMNS)
        for host, (mid, fp, model) in enumerate(ids):
            factor = CPU_MODELS[model][5]
            whole_host = model not in first_host_of_model
            first_host_of_model.add(model)
            hostname = f"host{host:05d}"
            labels = {"rack": f"r{host // 40:03d}", "role": ROLES[host % len(ROLES)],
                      "kernel": fp["kernel"]["release"].split("+")[0]}
            labels_json = json.dumps(labels, sort_keys=True, separators=(",", ":"))
            host_f = {exp: factor * (1 + rng.uniform(-1, 1) * spreads[exp]) for exp in docs}
            for s in range(n_surveys):
                t0 = t_start + s * 7 * 86400 + host * 3.0
                sid = f"s-{_id_stamp(t0)}-{host:05d}{s}"
                t = t0
                run_ids = []
                whole = whole_host and s == n_surveys - 1
                with_points = n_machines <= points_up_to or s == n_surveys - 1
                for e in exports:
                    exp = e["run"]["experiment"]
                    duration = float(e["run"].get("duration_s") or 10.0)
                    rid = f"{_id_stamp(t)}-{exp}-{host:05d}{s}"
                    run = dict(e["run"], id=rid, survey_id=sid, started=_stamp(t),
                               finished=_stamp(t + duration), host=hostname, labels=labels,
                               status="complete", duration_s=duration)
                    f = host_f[exp] * (1 + rng.uniform(-0.5, 0.5) * spreads[exp])
                    runs.row((rid, sid, exp, "complete", run["started"], run["finished"],
                              run.get("preset"), json.dumps(run.get("params") or {}, sort_keys=True),
                              host + 1,
                              run.get("memfx_version"), None, duration, run.get("pid"), hostname,
                              float(t), labels_json,
                              json.dumps(fp, sort_keys=True, separators=(",", ":")) if whole else None))
                    if whole:
                        moved = []
                        for seq, smp in enumerate(e["samples"]):
                            v = _scaled(smp.get("value"), f)
                            samples.row((rid, seq, smp.get("arm"),
                                         json.dumps(smp.get("point") or {}, sort_keys=True),
                                         smp.get("metric"), smp.get("unit"), v, smp.get("length"),
                                         smp.get("ns"), smp.get("ticks"), smp.get("cycles_est"),
                                         json.dumps(smp.get("counters") or {}, sort_keys=True),
                                         1 if smp.get("rejected") else 0, smp.get("reason"),
                                         smp.get("replica") or 0))
                            moved.append(dict(smp, value=v))
                        counts["samples"] += len(moved)
                        kept.append((dict(run, machine_id=mid, machine=fp), moved))
                        counts["kept_whole"] += 1
                    else:
                        doc = dict(json_tail[exp], run_id=rid, started=run["started"],
                                   finished=run["finished"], status="complete", labels=labels,
                                   duration_s=duration, machine_id=mid, machine=fp,
                                   answers=perturbed_answers(docs[exp]["answers"], rng, f),
                                   points=perturbed_points(docs[exp]["points"], f) if with_points else [])
                        blob = zlib.compress(json.dumps(doc, separators=(",", ":"), default=str).encode(), 1)
                        parts = [zlib.compress(json.dumps(make(doc), separators=(",", ":"),
                                                          default=str).encode(), 1)
                                 for make in (answers_part, points_part)]
                        analyses.row((rid, key, run["finished"], blob, *parts))
                        counts["analyses"] += 1
                    run_ids.append(rid)
                    t += duration
                counts["runs"] += len(run_ids)
                surveys.row((sid, _stamp(t0), _stamp(t), "complete", "quick",
                             json.dumps(["memfx", "survey", "--quick"]), None, 1000 + host, hostname,
                             labels_json))
                counts["surveys"] += 1
            if host % 200 == 199:
                print(f"  ... {host + 1} machines", file=sys.stderr, flush=True)
        for c in (runs, surveys, analyses, samples):
            c.close()
    # the kept-whole runs analysed by memfx itself, their documents stored
    # as after a survey (readers would otherwise analyse them on first read)
    from memfx.model.forking import fork_map

    def analyse(item):
        run, moved = item
        return document(run, moved, include_values=True)
    made = fork_map(analyse, kept, cost=lambda item: len(item[1]))
    st = PostgresStore(url)
    try:
        for (run, _), doc in zip(kept, made):
            st.save_analysis(run["id"], key, doc)
            counts["analyses"] += 1
    finally:
        st.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        counts["bytes"] = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    return counts


# ---- measuring ----------------------------------------------------------------

TIME = "/usr/bin/time"


def run_measured(argv: list[str], env: dict) -> dict:
    """One command as its own process: wall seconds, peak RSS (MB) of that
    process, exit status, last line of stderr, stdout size.  The peak comes
    from /usr/bin/time (a child keeps the resident peak of the process it
    was forked from, so wait4's figure here would be this script's own
    size), else from wait4."""
    rss_file = None
    if os.access(TIME, os.X_OK):
        fd, rss_file = tempfile.mkstemp(prefix="memfx-rss-")
        os.close(fd)
        argv = [TIME, "-f", "%M", "-o", rss_file, *argv]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out_chunks = []
    err = b""
    # read both pipes without a deadlock, then reap the child ourselves
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    sel.register(p.stderr, selectors.EVENT_READ)
    open_pipes = 2
    while open_pipes:
        for k, _ in sel.select():
            data = os.read(k.fileobj.fileno(), 1 << 16)
            if not data:
                sel.unregister(k.fileobj)
                open_pipes -= 1
            elif k.fileobj is p.stdout:
                out_chunks.append(data)
            else:
                err += data
    _, status, usage = os.wait4(p.pid, 0)
    seconds = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    lines = err.decode(errors="replace").strip().splitlines()
    rss_kib = usage.ru_maxrss
    if rss_file is not None:
        try:
            rss_kib = int(Path(rss_file).read_text().split()[-1])
        except (OSError, ValueError, IndexError):
            pass
        os.unlink(rss_file)
    return {"s": seconds, "rss_mb": rss_kib / 1024, "rc": p.returncode,
            "stderr": lines[-1] if lines else "", "stderr_lines": len(lines),
            "stdout_bytes": sum(map(len, out_chunks))}


def memfx(*args: str) -> list[str]:
    return [sys.executable, "-m", "memfx", *args]


def local_surveys(exports: list[dict], directory: Path, n: int, tag: str) -> list[tuple[str, str]]:
    """n SQLite stores, each with one survey of a new host (fresh ids): the
    (path, survey id) pairs push takes."""
    from memfx.store.sqlite import Store
    out = []
    for i in range(n):
        path = directory / f"local-{tag}-{i}.db"
        sid = f"s-{_id_stamp(time.time())}-{tag}{i}"
        fp, _ = fingerprint(exports[0]["machine"] or {}, 900_000 + i + sum(map(ord, tag)) * 100)
        with Store(path) as st:
            for e in exports:
                rid = f"{e['run']['id']}-{tag}{i}"
                survey = dict(e.get("survey") or {"id": sid, "started": e["run"]["started"],
                                                  "status": "complete"}, id=sid)
                st.import_run(dict(e, run=dict(e["run"], id=rid, survey_id=sid, host=f"new-{tag}{i}"),
                                   survey=survey, machine=fp))
        out.append((str(path), sid))
    return out


def measure(url: str, exports: list[dict], reps: int, work: Path, n: int) -> dict:
    env = dict(os.environ, MEMFX_DB=url, MEMFX_CACHE_DIR="off")
    models = [CPU_MODELS[0][3], CPU_MODELS[12][3]]
    import psycopg
    with psycopg.connect(url) as conn:
        machines = [r[0] for r in conn.execute("SELECT machine_id FROM machines ORDER BY id LIMIT 2")]
    report = str(work / "fleet.html")
    cases = {
        "machines": memfx("machines", "--db", url),
        "report": memfx("report", "--fleet", "--group-by", "cpu-model", "--db", url, "-o", report),
        "compare models": memfx("compare", "--group-by", "cpu-model", models[0], models[1], "--db", url),
        "compare machines": memfx("compare", machines[0], machines[1], "--db", url),
    }
    results: dict[str, dict] = {}
    # new run ids on every call: measuring a kept store again must push runs
    # it does not hold yet (one it holds is "already there", and quick)
    pushes = local_surveys(exports, work, reps, f"p{n}t{int(time.time()) % 10**6}")
    tries = {"push": [run_measured(memfx("push", "--db", path, "--to", url, sid), env)
                      for path, sid in pushes]}
    for name, argv in cases.items():
        tries[name] = [run_measured(argv, env) for _ in range(reps)]
    for name, got in tries.items():
        results[name] = {"s": statistics.median(g["s"] for g in got),
                         "rss_mb": statistics.median(g["rss_mb"] for g in got),
                         "rc": max(g["rc"] for g in got),
                         "stderr": next((g["stderr"] for g in got if g["rc"]), ""),
                         "runs": [round(g["s"], 3) for g in got]}
    results["report"]["bytes"] = os.path.getsize(report) if os.path.exists(report) else None
    return results


def concurrency(url: str, exports: list[dict], work: Path) -> dict:
    """8 pushes of different surveys at once, then 2 of the same one."""
    env = dict(os.environ, MEMFX_CACHE_DIR="off")
    import psycopg
    different = local_surveys(exports, work, 8, "c")
    same = local_surveys(exports, work, 1, "d")
    out = {}
    for name, jobs in (("8 different", different), ("2 same", same * 2)):
        t0 = time.monotonic()
        procs = [subprocess.Popen(memfx("push", "--db", path, "--to", url, sid), env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for path, sid in jobs]
        got = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
        seconds = time.monotonic() - t0
        with psycopg.connect(url) as conn:
            stored = {sid: conn.execute("SELECT count(*), count(DISTINCT id) FROM runs WHERE survey_id = %s",
                                        (sid,)).fetchone() for _, sid in jobs}
        out[name] = {"s": seconds, "exit": [rc for rc, _ in got],
                     "stderr_lines": [len(e.strip().splitlines()) for rc, e in got if rc],
                     "runs_each": sorted({v[0] for v in stored.values()}),
                     "ok": all(rc == 0 or (rc == 1 and len(e.strip().splitlines()) <= 1) for rc, e in got)
                     and all(v[0] == v[1] == len(exports) for v in stored.values())}
    return out


# ---- the server and the table ---------------------------------------------------

def start_server(root: str):
    import pgserver
    import psycopg
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pgserver.get_server(root, cleanup_mode="stop")
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        # the settings of a server the fleet owns: a throwaway server's
        # durability is not under test, its memory is sized for the store
        conn.execute("ALTER SYSTEM SET fsync = off")
        conn.execute("ALTER SYSTEM SET synchronous_commit = off")
        conn.execute("ALTER SYSTEM SET max_wal_size = '4GB'")
        conn.execute("SELECT pg_reload_conf()")
    return server


def table(rows: list[dict]) -> str:
    head = ("| machines | surveys | runs | DB size | fill | push | machines | report (size) "
            "| compare models | compare machines | peak RSS max |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        m = r["measured"]

        def cell(name):
            x = m[name]
            # compare exits 1 when it finds a difference: not a failure
            mark = "" if x["rc"] == 0 or (x["rc"] == 1 and name.startswith("compare")) \
                else f" (exit {x['rc']})"
            return f"{x['s']:.2f} s{mark}"
        rss = max(x["rss_mb"] for x in m.values())
        size = m["report"].get("bytes")
        lines.append(f"| {r['machines']:,} | {r['stored']['surveys']:,} | {r['stored']['runs']:,} "
                     f"| {r['stored']['bytes'] / 2**30:.1f} GiB | {r['fill_s']:.0f} s | {cell('push')} "
                     f"| {cell('machines')} | {cell('report')} ({(size or 0) / 2**20:.1f} MiB) "
                     f"| {cell('compare models')} | {cell('compare machines')} | {rss:.0f} MB |")
    return "\n".join(lines)


def verdicts(row: dict) -> list[str]:
    """Target misses at the scale the targets are set for."""
    if row["machines"] != TARGET_AT:
        return []
    m, out = row["measured"], []
    for name, limit in TARGETS.items():
        if m[name]["s"] > limit:
            out.append(f"{name} {m[name]['s']:.2f} s > {limit} s")
    if (m["report"].get("bytes") or 0) > TARGET_REPORT_BYTES:
        out.append(f"report {m['report']['bytes'] / 2**20:.1f} MiB > 3 MiB")
    for name, x in m.items():
        if x["rss_mb"] > TARGET_RSS_MB:
            out.append(f"{name} peak {x['rss_mb']:.0f} MB > {TARGET_RSS_MB} MB")
    return out


def snapshot(keep: str | None) -> None:
    """Run this benchmark on a copy of memfx's sources taken now: a stored
    document is current only for the sources that made it (answer_cache.
    analysis_key hashes them), so an edit elsewhere during a long run would
    make every reader analyse the fleet again.  With --keep the copy is
    kept too (KEEP/src: PYTHONPATH for reading the kept store later)."""
    if os.environ.get("MEMFX_FLEET_SNAPSHOT"):
        return
    where = Path(keep) / "src" if keep else Path(tempfile.mkdtemp(prefix="memfx-fleet-src-"))
    shutil.rmtree(where / "memfx", ignore_errors=True)
    shutil.copytree(ROOT / "src" / "memfx", where / "memfx",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, MEMFX_FLEET_SNAPSHOT=str(where),
               PYTHONPATH=os.pathsep.join([str(where), *filter(None, [os.environ.get("PYTHONPATH")])]))
    try:
        rc = subprocess.call([sys.executable, *sys.argv], env=env)
    finally:
        if not keep:
            shutil.rmtree(where, ignore_errors=True)
    sys.exit(rc)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # bad input is one line and exit status 2, as memfx's own commands
        self.exit(2, f"fleet_scale: {message}\n")


def main(argv=None) -> int:
    ap = _Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--machines", type=int, nargs="+", action="extend",
                    help="fleet sizes (repeatable or a list; default 100 1000)")
    ap.add_argument("--surveys", type=int, default=5, help="surveys per machine (default 5)")
    ap.add_argument("--reps", type=int, default=3, help="runs of each command; the median is shown")
    ap.add_argument("--points-up-to", type=int, default=1000,
                    help="over this many machines, older surveys keep answers only (default 1000)")
    ap.add_argument("--survey-db", help="an SQLite store whose newest complete survey is the base")
    ap.add_argument("--concurrency", action="store_true", help="also the concurrent pushes")
    ap.add_argument("--out", help="write every figure here as JSON")
    ap.add_argument("--keep", help="keep the server's data (and the reports) in this directory")
    args = ap.parse_args(argv)
    sizes = args.machines or [100, 1000]
    if any(n < 2 for n in sizes) or args.surveys < 1 or args.reps < 1:
        print("fleet_scale: --machines takes counts of at least 2, --surveys and --reps at least 1",
              file=sys.stderr)
        return 2
    snapshot(args.keep)
    exports = load_base(args.survey_db)
    print(f"fleet_scale: base survey of {len(exports)} runs, "
          f"{sum(len(e['samples']) for e in exports)} samples; analysing it", file=sys.stderr)
    docs = analysed(exports)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="memfx-fleet-", dir="/tmp"))
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    server = start_server(str(root / "pg"))
    try:
        import psycopg
        for n in sizes:
            name = f"fleet_{n}"
            with psycopg.connect(server.get_uri(), autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name}")
                conn.execute(f"CREATE DATABASE {name}")
            url = server.get_uri(name)
            print(f"fleet_scale: filling {n} machines x {args.surveys} surveys", file=sys.stderr)
            t0 = time.monotonic()
            stored = fill(url, exports, docs, n, args.surveys, args.points_up_to)
            fill_s = time.monotonic() - t0
            print(f"fleet_scale: filled in {fill_s:.0f} s ({stored}); measuring", file=sys.stderr)
            work = root / f"work_{n}"
            work.mkdir(exist_ok=True)
            row = {"machines": n, "surveys_each": args.surveys, "stored": stored, "fill_s": fill_s,
                   "measured": measure(url, exports, args.reps, work, n)}
            if args.concurrency:
                row["concurrency"] = concurrency(url, exports, work)
            rows.append(row)
            print(table([row]), file=sys.stderr)
            if not args.keep:
                with psycopg.connect(server.get_uri(), autocommit=True) as conn:
                    conn.execute(f"DROP DATABASE {name}")
    finally:
        server.cleanup()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(table(rows))
    for r in rows:
        for miss in verdicts(r):
            print(f"missed at {r['machines']} machines: {miss}")
        if "concurrency" in r:
            print(f"concurrency at {r['machines']} machines: {json.dumps(r['concurrency'])}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
