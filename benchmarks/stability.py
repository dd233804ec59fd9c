#!/usr/bin/env python3
"""Do memfx's answers hold from run to run? (issue 22)

A/A: K quick surveys of the unchanged machine, one after another, into one
database; then, per question:

    verdicts     the verdict of each survey, and whether all K agree
    evidence     whether every survey's answer rests on the same points
    between-CV   the coefficient of variation of its value over the K surveys
    coverage     the share of the other surveys' values that fall inside each
                 survey's CI (over every survey that has a CI)

and `memfx compare` over every pair of surveys (default threshold): its exit
status and the questions it flagged.  A CI that the next run falls outside
of, or a `compare` that flags an unchanged machine, is a bug.

A/B: K surveys as they are (A), then K with a real change (B):

    --change glibc   GLIBC_TUNABLES hides the wide-vector and string features
                     from glibc (glibc.cpu.hwcaps=-AVX2,...), so that libc's
                     memcpy and memset really change: copy.libc_* should move
    --change hog     a memory-bandwidth hog (numpy copies of two 256 MiB arrays)
                     runs on another CPU during the B surveys: bandwidth and
                     latency in memory should move -- if the hog moves them on
                     this machine at all: before each half the harness
                     measures a one-thread DRAM read for half a minute (a
                     bandwidth run of one size per level, again and again)
                     and prints the change, then measures one warm-up
                     survey that it does not compare (the host takes a
                     whole survey to follow the hog), so that an A/B whose
                     compare finds nothing can tell a missed change from one
                     that did not happen (on 2-vCPU guests of large hosts
                     one vCPU loads the host's memory little: the probe read
                     -24 % on a Zen 4 guest, -11 % to +4 % on a Xeon one)

and `memfx compare A_i B_j` over every pair: which questions it flags, and
in how many of the pairs.

--history K first measures K more surveys (not compared, not tabled) into
the database: `compare` then bands each question by the machine's own
run-to-run spread in them (three or more earlier surveys, the threshold
history_min_surveys), as it does for a user whose store keeps a machine's
surveys.  Without a history, a question resting on what a VM's host shares
keeps the guest's drift band (25 %): on a 2-vCPU guest one-thread DRAM reads
went 10-15 GB/s from one hour to the next with nothing changed.
docs/stability.md keeps what each round measured.

This is a benchmark, not a test: it measures for minutes, and its figures
depend on the machine and on how busy it is.  Run it with nothing else
running.  It uses the memfx installed in this Python (`pip install .`).

    python benchmarks/stability.py aa --runs 5
    python benchmarks/stability.py aa --runs 5 --only latency,copy,misaligned
    python benchmarks/stability.py aa --db aa.db --surveys s-1,s-2,s-3   # analyse again
    python benchmarks/stability.py ab --change glibc --runs 3 --only copy
    python benchmarks/stability.py ab --change hog --runs 3 --only latency,bandwidth --history 3
    python benchmarks/stability.py busy --runs 3 --neighbours cpu
    python benchmarks/stability.py busy --runs 3 --neighbours memory

busy: K quiet quick surveys, then K with neighbours on the machine (`cpu`: a
spinning process on every CPU; `memory`: a streaming copy on one): surveys
that failed or left a run incomplete, each busy survey's time against the
quiet median, headline verdicts opposite to a quiet survey's, and what
`compare quiet busy` flags and whether it marks the busy side.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# what the glibc change hides (glibc's cpu features names, glibc 2.26 and newer)
HIDDEN_FEATURES = ("AVX2", "AVX512F", "AVX512VL", "AVX512BW", "ERMS", "FSRM",
                   "AVX_Fast_Unaligned_Load", "Fast_Unaligned_Copy")
HOG = """
import os, sys, numpy as np
os.sched_setaffinity(0, {int(sys.argv[1])})
a = np.ones(32 << 20); b = np.empty_like(a)
for _ in range(4):
    np.copyto(b, a); np.copyto(a, b)
print("streaming", flush=True)
while True:
    np.copyto(b, a); np.copyto(a, b)
"""


def memfx(*args, env=None, check=True):
    cmd = [sys.executable, "-m", "memfx", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if check and r.returncode not in (0, 1):
        sys.exit(f"stability: {' '.join(cmd[2:])} failed ({r.returncode}): "
                 f"{(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return r


def quick_survey(db, only, env=None, check=True):
    """`memfx survey --quick` into db (its report thrown away): the process result."""
    with tempfile.TemporaryDirectory() as tmp:
        args = ["survey", "--quick", "-q", "--no-advise", "--json", "--db", db,
                "-o", str(Path(tmp) / "report.html")]
        if only:
            args += ["--only", only]
        return memfx(*args, env=env, check=check)


def survey(db, only, env=None, label=""):
    """One quick survey; returns its id."""
    r = quick_survey(db, only, env=env)
    doc = json.loads(r.stdout)
    print(f"  survey {doc['survey_id']} {label} {doc['timing']['total_s']:.0f} s", file=sys.stderr)
    return doc["survey_id"]


# Seconds each half of the hog A/B first spends probing, for the hog's own
# effect on record (the probes alone do not settle the host: see
# WARMUP_SURVEYS).
SETTLE_S = 30

# Surveys each half of the hog A/B measures first and does not compare (the
# A half only without a --history, whose surveys come first anyway).  After
# the hog starts, the first survey's first bandwidth replica read like the A
# half in every hog A/B so far (bandwidth.read_dram 13.7 GB/s against
# 9.6-11.1 in the rest of B, 14.4-15.3 in A) though a minute of probes had
# run beside the hog, and so did the first replica of a bandwidth run of
# three after lighter runs beside the hog (13.7 then 9.2, 9.7; 12.9 then
# 9.5, 11.9): the host follows the guest's whole workload, not the probe's,
# and takes a full replica to do so, for reasons a guest cannot see.
WARMUP_SURVEYS = 1


def settle(db):
    """One-thread DRAM reads for SETTLE_S seconds (at least three): the
    values, the last three of which say where the host settled."""
    values, t0 = [], time.monotonic()
    while len(values) < 3 or time.monotonic() - t0 < SETTLE_S:
        values.append(dram_read(db))
    return values


def dram_read(db):
    """GB/s of one bandwidth run that reads one size per level (read_dram:
    twice the LLC, 4 KiB pages), one replica: the hog's own effect."""
    r = memfx("run", "bandwidth", "--quick", "-q", "--json", "--db", db,
              "--set", "kinds=read", "--set", "widths=auto", "--set", "pages=4k",
              "--set", "sweep=levels", "--set", "scaling=none", "--set", "latency_levels=none",
              "--set", "replicas=1")
    got = {a["question"]: a for a in json.loads(r.stdout)["answers"]}
    return got["bandwidth.read_dram"]["value"]


def answers(db, survey_id):
    r = memfx("show", survey_id, "--json", "--db", db)
    return {a["question"]: a for a in json.loads(r.stdout)["answers"]}


def compare(db, a, b):
    r = memfx("compare", a, b, "--json", "--db", db, check=False)
    if r.returncode not in (0, 1):
        sys.exit(f"stability: compare {a} {b} failed: {r.stderr.strip()}")
    doc = json.loads(r.stdout)
    flagged = [row["question"] for row in doc["rows"]
               if row["verdict"] in ("regressed", "improved", "changed", "changed-answer")]
    return r.returncode, flagged, doc


def advice_of(db):
    """What `memfx advise --no-check` derives from the newest copy run: each
    GCC string and each glibc tunable's proposal, or why none is advised."""
    r = memfx("advise", "--json", "--no-check", "--db", db, check=False)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["?"])[-1]}
    doc = json.loads(r.stdout)
    adv = doc.get("advice") or doc
    def withheld(why):
        return "not advised: unstable" if "unstable" in (why or "") else "not advised"

    out = {}
    for fn, g in (adv.get("gcc") or {}).items():
        out[f"-m{fn}-strategy"] = (withheld(g.get("not_advised")) if g.get("not_advised")
                                   or not g.get("string") else g["string"])
    for t in (adv.get("glibc") or {}).get("tunables") or []:
        out[t.get("tunable") or t.get("name")] = (
            withheld(t.get("not_advised")) if t.get("not_advised")
            else "keep" if t.get("proposed") is None else t["proposed"])
    return out


def curve_alarms(doc):
    """'experiment arm (mode) low-high: verdict' of each curve range a
    compare document names (compare's `curves`), or []."""
    out = []
    for r in doc.get("curves") or []:
        if r.get("verdict") in ("regressed", "improved", "changed"):
            out.append(f"{r.get('label') or r.get('key') or r}: {r['verdict']}")
    return out


def aa_table(db, ids):
    """Per-question verdict agreement, between-run CV and CI coverage."""
    per = [answers(db, s) for s in ids]
    rows, hits, tries = [], 0, 0
    for q in per[0]:
        runs = [p.get(q) for p in per if p.get(q)]
        verdicts = [a["verdict"] for a in runs]
        values = [a.get("value") for a in runs if isinstance(a.get("value"), (int, float))]
        cv = None
        if len(values) >= 2 and all(v > 0 for v in values):
            mean = sum(values) / len(values)
            cv = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) / mean
        q_hits = q_tries = 0
        for i, a in enumerate(runs):
            lo, hi = a.get("ci_low"), a.get("ci_high")
            if lo is None or hi is None:
                continue
            for j, b in enumerate(runs):
                if i != j and isinstance(b.get("value"), (int, float)):
                    q_tries += 1
                    q_hits += lo <= b["value"] <= hi
        hits, tries = hits + q_hits, tries + q_tries
        evidence = {tuple(sorted(a.get("evidence") or [])) for a in runs}   # a set of points
        rows.append({"question": q, "headline": bool(runs[0].get("headline")),
                     "verdicts": verdicts, "agree": len(set(verdicts)) == 1, "cv": cv,
                     "same_evidence": len(evidence) == 1,
                     "coverage": q_hits / q_tries if q_tries else None})
    return rows, (hits / tries if tries else None), tries


def cmd_aa(args):
    db = args.db or str(Path(tempfile.mkdtemp(prefix="memfx-aa-")) / "aa.db")
    if args.surveys:      # analyse surveys already measured (stored samples are re-analysed)
        ids, advice = args.surveys.split(","), []
    else:
        print(f"A/A: {args.runs} quick surveys into {db}"
              + (f", after {args.history} for the history" if args.history else ""),
              file=sys.stderr)
        history(db, args)
        ids, advice = [], []
        for i in range(args.runs):
            ids.append(survey(db, args.only, label=f"({i + 1}/{args.runs})"))
            if not args.only or "copy" in args.only.split(","):
                advice.append(advice_of(db))       # from this survey's copy run
    rows, coverage, tries = aa_table(db, ids)
    pairs = []
    for a, b in itertools.combinations(ids, 2):
        status, flagged, doc = compare(db, a, b)
        pairs.append({"a": a, "b": b, "exit": status, "flagged": flagged,
                      "curves": curve_alarms(doc),
                      "history_surveys": doc.get("history_surveys", 0)})
    print(f"\n{'question':42} {'verdicts (all surveys)':34} {'agree':5} {'CV':>6} {'coverage':>8} "
          f"evidence")
    for r in rows:
        mark = "*" if r["headline"] else " "
        v = ",".join(x[:4] for x in r["verdicts"])
        cv = "-" if r["cv"] is None else f"{r['cv']:.1%}"
        cov = "-" if r["coverage"] is None else f"{r['coverage']:.0%}"
        print(f"{mark}{r['question']:41} {v:34} {'yes' if r['agree'] else 'NO':5} {cv:>6} {cov:>8} "
              f"{'same' if r['same_evidence'] else 'DIFFERS'}")
    head = [r for r in rows if r["headline"]]
    print(f"\nheadline verdicts the same in all {len(ids)} surveys: "
          f"{sum(r['agree'] for r in head)} of {len(head)}; all questions: "
          f"{sum(r['agree'] for r in rows)} of {len(rows)}")
    print(f"the same evidence (point keys) in every survey: "
          f"{sum(r['same_evidence'] for r in rows)} of {len(rows)} questions")
    if coverage is not None:
        print(f"CI coverage over the numeric answers: {coverage:.1%} of {tries} "
              f"(run i's CI, run j's value)")
    alarms = [p for p in pairs if p["exit"] != 0]
    print(f"compare: {len(pairs) - len(alarms)} of {len(pairs)} pairs exit 0"
          + banded_by_history(pairs))
    for p in alarms:
        print(f"  {p['a']} vs {p['b']}: exit {p['exit']}, flagged "
              f"{', '.join(p['flagged'] + p['curves'])}")
    if advice:
        keys = sorted({k for a in advice for k in a})
        same = [k for k in keys if len({json.dumps(a.get(k)) for a in advice}) == 1]
        # issue 39: identical in every survey, or marked unstable where it is not
        held = [k for k in keys if len({json.dumps(a.get(k)) for a in advice
                                        if a.get(k) != "not advised: unstable"}) <= 1]
        print(f"advice: {len(same)} of {len(keys)} items the same in all {len(advice)} surveys; "
              f"{len(held)} of {len(keys)} the same or marked unstable")
        for k in keys:
            if k not in same:
                print(f"  {k}: " + " | ".join(str(a.get(k)) for a in advice))
    curve_pairs = sum(1 for p in pairs if p["curves"])
    print(f"curves: {len(pairs) - curve_pairs} of {len(pairs)} pairs with no curve range flagged")
    if args.json:
        Path(args.json).write_text(json.dumps({"surveys": ids, "questions": rows,
                                               "coverage": coverage, "pairs": pairs,
                                               "advice": advice}, indent=1))
    return 0


def history(db, args):
    """--history K: K surveys before the compared ones (the machine's history)."""
    return [survey(db, args.only, label=f"history ({i + 1}/{args.history})")
            for i in range(args.history)]


def warm_up(db, only, half, env=None):
    """WARMUP_SURVEYS surveys of the hog A/B's `half`, not compared; their ids.
    They start before the half's compared surveys, so no compare's history
    (the surveys before its earlier side) holds a B warm-up."""
    return [survey(db, only, env=env, label=f"{half} warm-up ({i + 1}/{WARMUP_SURVEYS}, not compared)")
            for i in range(WARMUP_SURVEYS)]


def banded_by_history(pairs):
    with_history = sum(1 for p in pairs if p.get("history_surveys"))
    return (f" ({with_history} of them banded by the machine's history)"
            if with_history else " (no history: every band is the threshold or a guest's drift)")


def cmd_ab(args):
    if args.surveys:
        if not args.db or "/" not in args.surveys:
            sys.exit("stability: --surveys needs --db and A ids / B ids (a1,a2/b1,b2)")
        a_text, b_text = args.surveys.split("/", 1)
        return ab_table(args, args.db, a_text.split(","), b_text.split(","))
    db = args.db or str(Path(tempfile.mkdtemp(prefix="memfx-ab-")) / "ab.db")
    print(f"A/B ({args.change}): {args.runs} + {args.runs} quick surveys into {db}",
          file=sys.stderr)
    env, hog, effect = dict(os.environ), None, None
    if args.change == "hog":
        # Each half starts with the probe: one-thread DRAM reads for SETTLE_S
        # seconds, the hog's own effect on record, then the half's warm-up
        # survey (WARMUP_SURVEYS): without them the first replica of each
        # half's first survey read between the two states (read_dram 11.3
        # GB/s against 14.7-15.9 in the rest of A; 14.3 against 8.4-10.6 in B).
        probe_db = str(Path(tempfile.mkdtemp(prefix="memfx-hog-")) / "probe.db")
        effect = {"without": settle(probe_db)}
    history(db, args)
    if args.change == "hog" and not args.history:
        effect["warm_up_a"] = warm_up(db, args.only, "A")
    a_ids = [survey(db, args.only, label=f"A {i + 1}") for i in range(args.runs)]
    if args.change in ("glibc", "tunable"):
        if args.change == "glibc":
            tun = "glibc.cpu.hwcaps=" + ",".join("-" + f for f in HIDDEN_FEATURES)
        else:
            tun = args.tunable
        env["GLIBC_TUNABLES"] = f"{env['GLIBC_TUNABLES']}:{tun}" if env.get("GLIBC_TUNABLES") else tun
    else:
        cpus = sorted(os.sched_getaffinity(0))
        # the B half starts once the hog streams (its arrays faulted in):
        # B's first replica must not run beside a hog still starting
        hog = subprocess.Popen([sys.executable, "-c", HOG, str(cpus[0])],
                               stdout=subprocess.PIPE, text=True)
        if hog.stdout.readline().strip() != "streaming":
            sys.exit("stability: the bandwidth hog did not start")
        effect["with"] = settle(probe_db)
        before, during = (sorted(effect[k][-3:])[1] for k in ("without", "with"))
        effect["change"] = during / before - 1
        print(f"the hog's own effect on a one-thread DRAM read (bandwidth.read_dram, "
              f"median of the last 3 of each {SETTLE_S} s of probes): {before:.1f} -> "
              f"{during:.1f} GB/s "
              f"({effect['change']:+.0%})", file=sys.stderr)
    try:
        if args.change == "hog":
            effect["warm_up_b"] = warm_up(db, args.only, "B", env=env)
        b_ids = [survey(db, args.only, env=env, label=f"B {i + 1}") for i in range(args.runs)]
    finally:
        if hog:
            hog.kill()
            hog.wait()
    return ab_table(args, db, a_ids, b_ids, effect)


def ab_table(args, db, a_ids, b_ids, effect=None):
    """compare A_i B_j over every pair, and A/A within A."""
    counts, beyond, exits, pairs, curves = {}, {}, [], [], {}
    for a, b in itertools.product(a_ids, b_ids):
        status, flagged, doc = compare(db, a, b)
        exits.append(status)
        pairs.append({"a": a, "b": b, "exit": status, "flagged": flagged,
                      "history_surveys": doc.get("history_surveys", 0)})
        for q in flagged:
            counts[q] = counts.get(q, 0) + 1
        for name in curve_alarms(doc):
            curves[name] = curves.get(name, 0) + 1
        # what compare saw move but could not call: the ratio beyond its
        # band, the CI reaching back into it (a change too small for the
        # replicas' spread, or none)
        for row in doc["rows"]:
            if row["verdict"] == "inconclusive" and "beyond the band" in str(row.get("reason")):
                beyond.setdefault(row["question"], []).append(row["ratio"])
    n = len(a_ids) * len(b_ids)
    print(f"\ncompare A_i B_j: {exits.count(1)} of {n} pairs exit 1" + banded_by_history(pairs))
    for q, c in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"  {q:44} flagged in {c} of {n} pairs")
    for q, ratios in sorted(beyond.items(), key=lambda kv: -len(kv[1])):
        print(f"  {q:44} moved beyond its band but inconclusive in {len(ratios)} of {n} "
              f"pairs (B/A {min(ratios):.2f}-{max(ratios):.2f})")
    for name, c in sorted(curves.items(), key=lambda kv: -kv[1]):
        print(f"  curve {name:38} in {c} of {n} pairs")
    # and the A/A pairs within A, for the false alarms beside it
    aa = [compare(db, a, b)[0] for a, b in itertools.combinations(a_ids, 2)]
    print(f"A/A within A: {aa.count(0)} of {len(aa)} pairs exit 0")
    if args.json:
        Path(args.json).write_text(json.dumps({"a": a_ids, "b": b_ids, "flagged": counts,
                                               "beyond_band_inconclusive": beyond,
                                               "exits": exits, "pairs": pairs,
                                               "hog_effect": effect}, indent=1))
    return 0


# A CPU-bound neighbour: no memory traffic to speak of (issue 40's busy box).
SPIN = "while True: pass"


def neighbours(kind):
    """Start the busy mode's neighbours: `cpu` one spinning process per CPU
    memfx may use, `memory` the streaming copy (HOG) on one CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    if kind == "cpu":
        return [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in cpus]
    hog = subprocess.Popen([sys.executable, "-c", HOG, str(cpus[-1])],
                           stdout=subprocess.PIPE, text=True)
    if hog.stdout.readline().strip() != "streaming":
        sys.exit("stability: the memory neighbour did not start")
    return [hog]


def busy_survey(db, only, label):
    """One quick survey that may fail: (survey id or None, seconds, exit
    status, failed run ids, the busy share memfx measured)."""
    t0 = time.monotonic()
    r = quick_survey(db, only, check=False)
    took = time.monotonic() - t0
    try:
        doc = json.loads(r.stdout)
    except json.JSONDecodeError:
        print(f"  survey {label}: exit {r.returncode} after {took:.0f} s, no document: "
              f"{(r.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
        return None, took, r.returncode, ["(no survey document)"]
    failed = [x["run_id"] for x in doc.get("runs", []) if x.get("status") != "complete"]
    print(f"  survey {doc['survey_id']} {label} {took:.0f} s, exit {r.returncode}"
          + (f", {len(failed)} runs not complete" if failed else ""), file=sys.stderr)
    return doc["survey_id"], took, r.returncode, failed


def stored_survey(db, survey_id):
    """A quiet survey measured before (an A/A's, in the same database):
    (its id, the seconds it took by its stored start and end, 0, [])."""
    import sqlite3
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = con.execute("SELECT started, finished FROM surveys WHERE id = ?",
                          (survey_id,)).fetchone()
    finally:
        con.close()
    if not row or not row[1]:
        sys.exit(f"stability: no finished survey {survey_id} in {db}")
    from datetime import datetime
    took = (datetime.fromisoformat(row[1].replace("Z", "+00:00"))
            - datetime.fromisoformat(row[0].replace("Z", "+00:00"))).total_seconds()
    return survey_id, took, 0, []


OPPOSITE = {("detected", "not_detected"), ("not_detected", "detected")}


def cmd_busy(args):
    """K quiet quick surveys, then K beside neighbours (--neighbours cpu or
    memory): failed runs, the survey time ratio, headline verdicts that
    flipped (detected <-> not detected), and what `compare quiet busy`
    flags and whether it marks the busy side."""
    db = args.db or str(Path(tempfile.mkdtemp(prefix="memfx-busy-")) / "busy.db")
    print(f"busy ({args.neighbours}): {args.runs} quiet + {args.runs} busy quick surveys "
          f"into {db}", file=sys.stderr)
    if args.quiet:
        quiet = [stored_survey(db, sid) for sid in args.quiet.split(",")]
    else:
        quiet = [busy_survey(db, args.only, f"quiet {i + 1}") for i in range(args.runs)]
    procs = neighbours(args.neighbours)
    try:
        busy = [busy_survey(db, args.only, f"busy {i + 1}") for i in range(args.runs)]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    q_ids = [x[0] for x in quiet if x[0]]
    b_ids = [x[0] for x in busy if x[0]]
    q_s = statistics.median(x[1] for x in quiet)
    b_s = [x[1] for x in busy]
    flips, flagged, marked, exits = {}, {}, 0, []
    q_heads = [{k: a for k, a in answers(db, s).items() if a.get("headline")} for s in q_ids]
    for s in b_ids:
        for q, a in answers(db, s).items():
            if not a.get("headline"):
                continue
            for qa in q_heads:
                if q in qa and (qa[q]["verdict"], a["verdict"]) in OPPOSITE:
                    flips.setdefault(q, set()).add(s)
    for a, b in itertools.product(q_ids, b_ids):
        status, names, doc = compare(db, a, b)
        exits.append(status)
        for q in names:
            flagged[q] = flagged.get(q, 0) + 1
        marked += bool(doc.get("busy_sides") or any(r.get("busy") for r in doc["rows"]))
    n = len(q_ids) * len(b_ids)
    fails = [(x[0], x[2], x[3]) for x in quiet + busy if x[2] not in (0,) or x[3]]
    print(f"\nquiet surveys: median {q_s:.0f} s; busy: "
          + ", ".join(f"{t:.0f} s ({t / q_s:.1f}x)" for t in b_s))
    print(f"surveys that failed or left a run incomplete: {len(fails)} of {len(quiet) + len(busy)}")
    for sid, code, failed in fails:
        print(f"  {sid}: exit {code}, runs {', '.join(failed) or '-'}")
    print(f"headline verdicts opposite to a quiet survey's: {len(flips)}"
          + "".join(f"\n  {q}: in {len(v)} busy surveys" for q, v in sorted(flips.items())))
    print(f"compare quiet vs busy: {exits.count(1)} of {n} pairs exit 1; the busy side marked "
          f"in {marked} of {n}")
    for q, c in sorted(flagged.items(), key=lambda kv: -kv[1]):
        print(f"  {q:44} flagged in {c} of {n} pairs")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "quiet": quiet, "busy": busy, "quiet_median_s": q_s, "flips": {
                q: sorted(v) for q, v in flips.items()}, "flagged": flagged,
            "exits": exits, "marked": marked}, indent=1, default=list))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    for name in ("aa", "ab", "busy"):
        p = sub.add_parser(name)
        p.add_argument("--runs", type=int, default=5 if name == "aa" else 3,
                       help="surveys per side (default: %(default)s)")
        p.add_argument("--only", default=None,
                       help="experiments of each survey, comma-separated (default: every one)")
        p.add_argument("--db", default=None, help="database (default: a new temporary one)")
        p.add_argument("--json", default=None, help="write every figure to this file")
        p.add_argument("--history", type=int, default=0,
                       help="surveys measured first for the machine's history (not compared): "
                            "compare's bands then come from their spread (default: %(default)s)")
        if name == "aa":
            p.add_argument("--surveys", default=None,
                           help="analyse these surveys of --db (comma-separated ids) instead of "
                                "measuring new ones")
        if name == "busy":
            p.add_argument("--neighbours", choices=("cpu", "memory"), default="cpu",
                           help="cpu: one spinning process per CPU; memory: a streaming copy "
                                "on one CPU (default: %(default)s)")
            p.add_argument("--quiet", default=None,
                           help="the quiet side: these surveys of --db (comma-separated ids, "
                                "e.g. an A/A's) instead of measuring --runs new ones")
        if name == "ab":
            p.add_argument("--change", choices=("glibc", "tunable", "hog"), required=True,
                           help="glibc: hide glibc's vector and string features; tunable: B runs "
                                "with --tunable in GLIBC_TUNABLES; hog: a memory hog beside B "
                                "(a manual scenario for dedicated hosts)")
            p.add_argument("--tunable", default=None,
                           help="with --change tunable: NAME=VALUE, e.g. "
                                "glibc.cpu.x86_rep_movsb_threshold=24576")
            p.add_argument("--surveys", default=None,
                           help="analyse these surveys of --db instead of measuring new ones: "
                                "A ids, a slash, B ids (a1,a2,a3/b1,b2,b3)")
    args = ap.parse_args(argv)
    if args.runs < 2:
        ap.error("--runs must be at least 2")
    if args.history < 0:
        ap.error("--history must be 0 or more")
    if args.mode == "ab" and (args.change == "tunable") != bool(args.tunable):
        ap.error("--tunable NAME=VALUE goes with --change tunable, and only with it")
    return {"aa": cmd_aa, "ab": cmd_ab, "busy": cmd_busy}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
