"""The atomics experiment (seed 004): each operation's kernel does exactly
what it claims (totals, returned values, xchg's last value, the plain
increment's lost updates counted, not failed), and the analysis reads
synthetic points right (Drepper's CAS ratio, lost updates, threads that did
not overlap, one CPU)."""
import mmap
import os
import sqlite3

import numpy as np
import pytest

from conftest import run_cli
from memfx.analysis.results import RunData
from memfx.experiments import atomics as A
from memfx.experiments import get_experiment
from memfx.experiments import sharing as S
from memfx.experiments.base import Region
from memfx.lab import _core

KERNELS = {r["name"]: i for i, r in enumerate(_core.kernels())}


@pytest.fixture(autouse=True)
def _unpinned():
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, set(S._cpuset_cpus() or before))
    except OSError:
        pass
    yield
    os.sched_setaffinity(0, before)


def run_kernel(kernel, cpus, count):
    os.sched_setaffinity(0, {cpus[0]})
    buf = mmap.mmap(-1, S.COUNTERS + 4096)
    words = np.frombuffer(buf, dtype=np.uint64)
    words[S.CPUS // 8:S.CPUS // 8 + len(cpus)] = cpus
    del words
    out = _core.run(KERNELS[kernel], buf, 0, None, 0, len(cpus), 0, count, 0, [], None)
    header, slots = S.read_area(Region(buf, 0, len(buf), _core.address(buf)), len(cpus))
    return out[3], header, slots


def cpu_lists():
    cpus = sorted(os.sched_getaffinity(0))
    lists = [cpus[:1]]
    if len(cpus) > 1:
        lists.append(cpus[:2])
    return lists


@pytest.mark.measuring
@pytest.mark.parametrize("op", ["fetch_add", "add_fetch", "cas"])
def test_locked_increments_end_at_threads_times_count(op):
    for cpus in cpu_lists():
        count = 20000
        result, header, slots = run_kernel(A.KERNELS[op], cpus, count)
        assert result == header["final"] == len(cpus) * count
        assert [s["ops"] for s in slots] == [count] * len(cpus)
        assert [(s["cpu_start"], s["cpu_end"]) for s in slots] == [(c, c) for c in cpus]
        S.check_call(A.KERNELS[op], header, slots)


@pytest.mark.measuring
def test_one_thread_returns_the_values_the_operation_defines():
    cpu = sorted(os.sched_getaffinity(0))[0]
    n = 1000
    _, _, slots = run_kernel("at_fetch_add", [cpu], n)
    assert slots[0]["checksum"] == n * (n - 1) // 2          # old values 0..n-1
    _, _, slots = run_kernel("at_add_fetch", [cpu], n)
    assert slots[0]["checksum"] == n * (n + 1) // 2          # new values 1..n
    _, _, slots = run_kernel("at_cas", [cpu], n)
    assert slots[0]["retries"] == 0                          # nobody to lose against
    final, header, slots = run_kernel("at_xchg", [cpu], n)
    assert final == (1 << A_TAG) | n                          # thread 0's last value
    # every exchange returned the value written before it
    assert slots[0]["checksum"] == sum(((1 << A_TAG) | k) for k in range(1, n))


A_TAG = S.XCHG_TAG_SHIFT


@pytest.mark.measuring
def test_xchg_ends_at_some_threads_last_value():
    for cpus in cpu_lists():
        final, header, slots = run_kernel("at_xchg", cpus, 5000)
        tag, seq = final >> A_TAG, final & ((1 << A_TAG) - 1)
        assert 1 <= tag <= len(cpus) and seq == 5000
        S.check_call("at_xchg", header, slots)


@pytest.mark.measuring
def test_plain_increment_loses_updates_counted_not_failed():
    for cpus in cpu_lists():
        count = 200000
        final, header, slots = run_kernel("at_plain", cpus, count)
        report = S.check_call("at_plain", header, slots)
        assert report["lost_updates"] == len(cpus) * count - final
        assert 0 <= report["lost_share"] < 1
        if len(cpus) == 1:
            assert report["lost_updates"] == 0


@pytest.mark.measuring
def test_remote_lock_add_counts_only_thread_0_and_writers_store():
    for cpus in cpu_lists():
        final, header, slots = run_kernel("at_remote", cpus, 30000)
        assert final == 30000
        report = S.check_call("at_remote", header, slots)
        if len(cpus) > 1:
            assert report["writer_stores"] > 0


# ---- plan ------------------------------------------------------------------

def test_plan_one_cell_per_thread_count_every_op(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    exp = get_experiment("atomics")
    pts = exp.plan(exp.resolve("quick"), {})
    assert {(p.arm, p.params["threads"]) for p in pts} == {(op, t) for op in A.OPS
                                                          for t in (1, 2, 3)}
    assert {p.params["cpus"] for p in pts if p.params["threads"] == 2} == {"2,0"}


def test_plan_with_one_cpu_is_single_thread_only(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {5})
    exp = get_experiment("atomics")
    pts = exp.plan(exp.resolve("quick"), {})
    assert {p.params["threads"] for p in pts} == {1}


# ---- analysis on synthetic data --------------------------------------------

def _point(arm, threads, median, seed, counters=None, n=9):
    rng = np.random.default_rng(seed)
    values = (median * (1 + 0.02 * rng.standard_normal(n))).tolist()
    lo, hi = np.percentile(values, [5, 95])
    return {"arm": arm, "params": {"threads": threads, "cpus": "1,0"[:2 * threads - 1]},
            "metric": "ns_per_op", "unit": "ns", "n": n, "rejected": 0,
            "median": float(np.median(values)), "ci_low": float(lo), "ci_high": float(hi),
            "values": values, "counters": counters or {}, "method": "per-sample"}


def _data(cas_contended=3.2, overlap=1.0, lost=0.4, threads=(1, 2)):
    base = {"fetch_add": 2.7, "add_fetch": 2.6, "cas": 3.1, "xchg": 2.8, "plain": 0.4,
            "remote": 2.5}
    contended = {"fetch_add": 10.0, "add_fetch": 9.5, "cas": 10.0 * cas_contended,
                 "xchg": 11.0, "plain": 1.5, "remote": 11.0}
    pts, samples = [], []
    k = 0
    for t in threads:
        for op in A.OPS:
            k += 1
            counters = {"lost_share": lost} if op == "plain" and t > 1 else {}
            p = _point(op, t, (base if t == 1 else contended)[op], k, counters)
            pts.append(p)
            for v in p["values"]:
                c = {"overlap": overlap if t > 1 else 1.0, "thread_switches": 0}
                if op == "plain":
                    c["lost_share"] = lost if t > 1 else 0.0
                samples.append({"arm": op, "point": p["params"], "value": v, "counters": c})
    return RunData("atomics", {"cpus": [1, 0]}, {}, pts, samples)


def _answers(data):
    return {a.question: a for a in get_experiment("atomics").analyze(data)}


def test_drepper_cas_ratio_detected_from_synthetic_points():
    got = _answers(_data(cas_contended=3.2))
    a = got["atomics.cas_ratio"]
    assert a.verdict == "detected"
    assert a.value == pytest.approx(3.2, rel=0.05)
    assert a.ci_low < a.value < a.ci_high
    assert a.because.startswith("yes")
    assert "ranking with 2 threads: plain" in a.because
    assert {r["threads"] for r in a.details if "cas / fetch_add" in r["label"]} == {1, 2}


def test_cas_close_to_xadd_says_not_drepper():
    a = _answers(_data(cas_contended=1.2))["atomics.cas_ratio"]
    assert a.value == pytest.approx(1.2, rel=0.05)
    assert a.verdict == "not_detected" and a.because.startswith("no")


def test_single_contended_remote_and_lost_updates():
    got = _answers(_data(lost=0.4))
    assert got["atomics.single_thread"].value == pytest.approx(2.7, rel=0.05)
    assert "one lock xadd costs 2.7" in got["atomics.single_thread"].because
    assert got["atomics.contended"].value == pytest.approx(10.0, rel=0.05)
    r = got["atomics.remote_line"]
    assert r.value == pytest.approx(11.0, rel=0.05)
    assert "a lock add of a line it owns" in r.because and "4.3x" in r.because
    lost = got["atomics.lost_updates"]
    assert lost.verdict == "detected" and lost.value == pytest.approx(0.4)


def test_no_lost_update_is_not_detected():
    assert _answers(_data(lost=0.0))["atomics.lost_updates"].verdict == "not_detected"


def test_contended_figures_from_threads_that_did_not_overlap_are_inconclusive():
    got = _answers(_data(overlap=0.1))
    for q in ("contended", "cas_ratio", "remote_line", "lost_updates"):
        a = got[f"atomics.{q}"]
        assert a.verdict == "inconclusive", q
        assert "threads did not overlap: inconclusive" in a.because
    assert got["atomics.single_thread"].verdict == "measured"


def test_one_cpu_answers_contention_not_measured():
    got = _answers(_data(threads=(1,)))
    assert got["atomics.single_thread"].verdict == "measured"
    for q in ("contended", "cas_ratio", "remote_line", "lost_updates"):
        assert got[f"atomics.{q}"].verdict == "not_measured"
        assert "only one CPU" in got[f"atomics.{q}"].because


# ---- CLI -------------------------------------------------------------------

@pytest.mark.measuring
def test_cli_unknown_cpu_is_one_line_exit_2_nothing_stored(db_path):
    r = run_cli("run", "atomics", "--quick", "--set", "cpus=4095", db=db_path)
    assert r.returncode == 2
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "CPU 4095 is not available" in lines[0]
    if os.path.exists(db_path):
        assert sqlite3.connect(db_path).execute("select count(*) from runs").fetchone()[0] == 0


@pytest.mark.measuring
def test_a_small_run_records_each_samples_threads(db_path):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs this process may run on")
    r = run_cli("run", "atomics", "--quick", "--json", "--set", "ops=fetch_add,plain", "--set",
                "samples=3", "--set", "min_sample_ms=0.1", db=db_path)
    assert r.returncode == 0, r.stderr
    import json
    doc = json.loads(r.stdout)
    assert len(doc["params"]["cpus"]) == len(cpus)
    contended = [p for p in doc["points"] if p["params"]["threads"] == 2]
    assert contended and all(p["params"]["cpus"].startswith(str(doc["params"]["cpu"]))
                             for p in contended)
    for p in contended:
        if p["n"]:
            assert {"overlap", "thread_switches", "window_ticks"} <= set(p["counters"])
    assert {a["question"] for a in doc["answers"]} == {q.id for q in A.Atomics.questions}


def test_cas_ratio_rests_on_seven_replicas_in_both_presets():
    """The headline cas_ratio sits near its 2x bar (2.2-3.0x on a 2-vCPU
    guest): the t interval over three replicas (t(2) = 4.3) left it
    inconclusive in 3 of 5 full surveys whose every replica detected it,
    and over five, one replica at 1.8x did in one A/A survey of five."""
    exp = get_experiment("atomics")
    for preset in ("quick", "full"):
        assert exp.resolve(preset)["replicas"] == 7
    assert exp.resolve("quick", {"replicas": "2"})["replicas"] == 2
