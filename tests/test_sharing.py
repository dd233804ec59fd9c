"""The sharing experiment (seed 004): the kernels run each thread on the CPU
they were given and put the counters exactly d bytes apart, touching no
other byte; every counter ends at the count; the analysis reads synthetic
points right (penalty, line size, padding, non-overlapping threads, one
CPU); bad CPUs and distances are refused before anything is stored."""
import mmap
import os
import sqlite3

import numpy as np
import pytest

from conftest import run_cli
from memfx.analysis.results import RunData
from memfx.experiments import get_experiment
from memfx.experiments import sharing as S
from memfx.experiments.base import Region
from memfx.lab import _core
from memfx.model.errors import MemfxError, ParamError

KERNELS = {r["name"]: i for i, r in enumerate(_core.kernels())}


def _cpuset():
    return S._cpuset_cpus() or sorted(os.sched_getaffinity(0))


@pytest.fixture(autouse=True)
def _unpinned():
    """Other tests' Labs pin this process to one CPU; these tests need the
    process's full CPU set back (and leave the mask as they found it)."""
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, set(_cpuset()))
    except OSError:
        pass
    yield
    os.sched_setaffinity(0, before)


def two_cpus():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs this process may run on")
    return cpus[:2]


def area(cpus, span=64, fill=None):
    buf = mmap.mmap(-1, S.COUNTERS + span + 64 + 4096)
    words = np.frombuffer(buf, dtype=np.uint64)
    if fill is not None:
        np.frombuffer(buf, dtype=np.uint8)[S.COUNTERS:] = fill
    words[S.CPUS // 8:S.CPUS // 8 + len(cpus)] = cpus
    del words
    return buf


def call(kernel, buf, threads, count, aux=0):
    out = _core.run(KERNELS[kernel], buf, 0, None, 0, threads, 0, count, aux, [], None)
    region = Region(buf, 0, len(buf), _core.address(buf))
    header, slots = S.read_area(region, threads)
    return out, header, slots, region


# ---- kernels ---------------------------------------------------------------

@pytest.mark.measuring
@pytest.mark.parametrize("kernel", ["fs_plain", "fs_atomic", "pingpong", "at_fetch_add",
                                    "at_cas", "at_xchg", "at_plain", "at_remote"])
@pytest.mark.parametrize("caller_is_thread0", [True, False])
def test_every_thread_runs_on_the_cpu_it_was_given(kernel, caller_is_thread0):
    a, b = two_cpus()
    # thread 0 is the caller when the caller runs on cpus[0]; else all are pool threads
    os.sched_setaffinity(0, {a} if caller_is_thread0 else {b})
    buf = area([a, b], span=64)
    _, header, slots, _ = call(kernel, buf, 2, 2000, aux=64)
    assert header["status"] == 0
    for want, s in zip([a, b], slots):
        assert s["ran"] == 1
        assert s["cpu_asked"] == want
        assert (s["cpu_start"], s["cpu_end"]) == (want, want)
    S.check_call(kernel, header, slots)     # raises on any wrong CPU or lost atomic update


@pytest.mark.measuring
def test_check_call_refuses_a_thread_off_its_cpu():
    header = {"status": 0, "final": 20, "expected": 20, "tsc_entry": 0, "tsc_exit": 10,
              "threads": 2}
    slot = {"cpu_asked": 0, "cpu_start": 0, "cpu_end": 0, "tsc_start": 1, "tsc_end": 9,
            "switches": 0, "address": 0, "final": 10, "ops": 10, "checksum": 0, "retries": 0,
            "done": 1, "ran": 1}
    S.check_call("fs_atomic", header, [dict(slot), dict(slot, cpu_asked=1, address=8,
                                                         cpu_start=1, cpu_end=1)])
    with pytest.raises(MemfxError, match="not on CPU 1"):
        S.check_call("fs_atomic", header, [dict(slot), dict(slot, cpu_asked=1, cpu_start=1)])
    with pytest.raises(MemfxError, match="lost an update|expected"):
        S.check_call("at_fetch_add", dict(header, final=19), [slot, dict(slot, cpu_asked=0)])


@pytest.mark.measuring
@pytest.mark.parametrize("d", [8, 16, 32, 56, 64, 128, 4096])
@pytest.mark.parametrize("kernel", ["fs_plain", "fs_atomic"])
def test_counters_sit_exactly_d_bytes_apart_and_nothing_else_is_written(kernel, d):
    a, b = two_cpus()
    os.sched_setaffinity(0, {a})
    threads, count = 2, 3000
    buf = area([a, b], span=d, fill=0xA5)
    out, header, slots, region = call(kernel, buf, threads, count, aux=d)
    assert [s["address"] - region.address - S.COUNTERS for s in slots] == [0, d]
    assert [s["final"] for s in slots] == [count, count]
    assert out[3] == header["final"] == threads * count
    # byte-exact: the two counters hold the count, every other byte its fill
    got = np.frombuffer(buf, dtype=np.uint8)[S.COUNTERS:].copy()
    want = np.full_like(got, 0xA5)
    for i in range(threads):
        want[i * d:i * d + 8] = np.frombuffer(np.uint64(count).tobytes(), dtype=np.uint8)
    assert np.array_equal(got, want)


@pytest.mark.measuring
def test_one_thread_needs_no_second_cpu_and_loses_nothing():
    cpu = sorted(os.sched_getaffinity(0))[0]
    os.sched_setaffinity(0, {cpu})
    buf = area([cpu])
    _, header, slots, _ = call("fs_plain", buf, 1, 5000, aux=8)
    assert header["final"] == 5000 and slots[0]["cpu_start"] == cpu
    report = S.check_call("fs_plain", header, slots)
    assert report["overlap"] == 1.0 and report["threads"] == 1


@pytest.mark.measuring
def test_pingpong_flag_ends_at_two_transfers_per_round_trip():
    a, b = two_cpus()
    os.sched_setaffinity(0, {a})
    buf = area([a, b])
    out, header, slots, _ = call("pingpong", buf, 2, 500)
    assert out[3] == header["final"] == 1000
    assert [s["ops"] for s in slots] == [500, 500]


@pytest.mark.measuring
@pytest.mark.parametrize("threads,aux,kernel,status", [
    (0, 8, "fs_plain", 1), (65, 8, "fs_plain", 1), (3, 0, "pingpong", 4), (2, 12, "fs_plain", 5),
    (2, 0, "fs_plain", 5)])
def test_the_kernel_refuses_bad_arguments_with_a_status(threads, aux, kernel, status):
    buf = mmap.mmap(-1, S.COUNTERS + 65 * 4096)
    words = np.frombuffer(buf, dtype=np.uint64)
    words[S.CPUS // 8:S.CPUS // 8 + 64] = sorted(os.sched_getaffinity(0))[0]
    del words
    _core.run(KERNELS[kernel], buf, 0, None, 0, threads, 0, 10, aux, [], None)
    status_word = int(np.frombuffer(buf, dtype=np.uint64)[0])
    assert status_word & 0xFF == status
    with pytest.raises(MemfxError):
        S.check_call(kernel, {"status": status_word, "final": 0, "expected": 0, "tsc_entry": 0,
                              "tsc_exit": 0, "threads": threads}, [])


@pytest.mark.measuring
def test_footprint_covers_header_slots_and_every_counter():
    idx = KERNELS["fs_plain"]
    assert _core.footprint(idx, 2, 1, 4096)[0] == S.COUNTERS + 4096 + 64
    assert _core.footprint(idx, 4, 1, 64)[0] == S.COUNTERS + 3 * 64 + 64
    assert _core.footprint(KERNELS["at_cas"], 8, 1, 0)[0] == S.COUNTERS + 64
    small = mmap.mmap(-1, S.COUNTERS + 4096)
    with pytest.raises(ValueError, match="past the end"):
        _core.run(idx, small, 0, None, 0, 2, 0, 1, 8192, [], None)


def test_overlap_of_shorter_thread():
    def s(a, b):
        return {"tsc_start": a, "tsc_end": b}
    assert S.overlap_of_shorter([s(0, 100), s(0, 100)]) == 1.0
    # one thread finished early but ran entirely while the other ran: overlapped
    assert S.overlap_of_shorter([s(0, 100), s(10, 40)]) == 1.0
    assert S.overlap_of_shorter([s(0, 100), s(100, 200)]) == 0.0
    assert S.overlap_of_shorter([s(0, 100), s(50, 150)]) == pytest.approx(0.5)


# ---- CPUs and plan ---------------------------------------------------------

def test_resolve_cpus_puts_the_measuring_cpu_first_and_refuses_unknown_cpus(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    params = {"cpus": "auto", "cpu": -1}
    assert S.resolve_cpus(params) == (3, [3, 0, 1, 2])
    assert params["cpus"] == [3, 0, 1, 2] and params["cpu"] == 3     # the run records them
    assert S.resolve_cpus({"cpus": [1, 2], "cpu": 2}) == (2, [2, 1])
    with pytest.raises(ParamError, match="CPU 7 is not available"):
        S.resolve_cpus({"cpus": [0, 7], "cpu": -1})
    with pytest.raises(ParamError, match="cpu: CPU 9"):
        S.resolve_cpus({"cpus": "auto", "cpu": 9})


def test_plan_with_one_allowed_cpu_measures_one_thread_only(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    exp = get_experiment("sharing")
    params = exp.resolve("quick")
    pts = exp.plan(params, {})
    assert pts and all(p.params["part"] == "solo" for p in pts)


def test_plan_refuses_distances_not_a_multiple_of_8():
    exp = get_experiment("sharing")
    with pytest.raises(ParamError, match="multiple of 8"):
        exp.plan(exp.resolve("quick", {"distances": "8,12"}), {})


def test_plan_covers_every_distance_and_cpu_pair(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    exp = get_experiment("sharing")
    pts = exp.plan(exp.resolve("quick"), {})
    fs = {(p.arm, p.params["distance_bytes"]) for p in pts
          if p.params["part"] == "false_sharing"}
    assert fs == {(a, d) for a in S.ARMS for d in S.DISTANCES}
    pairs = {(p.params["cpu_a"], p.params["cpu_b"]) for p in pts
             if p.params["part"] == "core_to_core"}
    assert pairs == {(0, 1), (0, 2), (1, 2)}
    # thread 0 of every pair containing the measuring CPU (2) is that CPU
    for p in pts:
        if p.params["part"] == "core_to_core" and 2 in (p.params["cpu_a"], p.params["cpu_b"]):
            assert p.params["cpus"].startswith("2,")


# ---- analysis on synthetic data --------------------------------------------

def _point(arm, params, median, n=9, spread=0.02, seed=0, counters=None):
    rng = np.random.default_rng(seed)
    values = (median * (1 + spread * rng.standard_normal(n))).tolist()
    lo, hi = np.percentile(values, [5, 95])
    return {"arm": arm, "params": params, "metric": "ns_per_increment", "unit": "ns", "n": n,
            "rejected": 0, "median": float(np.median(values)), "ci_low": float(lo),
            "ci_high": float(hi), "values": values, "counters": counters or {},
            "method": "per-sample"}


def _samples(point, overlap=1.0, switches=0):
    return [{"arm": point["arm"], "point": point["params"], "value": v,
             "counters": {"overlap": overlap, "thread_switches": switches}}
            for v in point["values"]]


def _fs_data(penalty_below=64, ratio=4.0, overlap=1.0, line=64, pairs=((0, 1),),
             plain_ratio=None):
    pts, samples = [], []
    k = 0
    for arm, base in (("plain", 0.4), ("atomic", 2.5)):
        r = plain_ratio if arm == "plain" and plain_ratio is not None else ratio
        for d in S.DISTANCES:
            k += 1
            p = _point(arm, {"part": "false_sharing", "distance_bytes": d, "threads": 2,
                             "cpus": "1,0"}, base * (r if d < penalty_below else 1.0),
                       seed=k)
            pts.append(p)
            samples += _samples(p, overlap)
        p = _point(arm, {"part": "solo", "threads": 1, "cpus": "1"}, base, seed=100 + k)
        pts.append(p)
        samples += _samples(p)
    for a, b in pairs:
        p = _point("pingpong", {"part": "core_to_core", "cpu_a": a, "cpu_b": b,
                                "cpus": f"{b},{a}"}, 60.0 + 10 * (a + b), seed=a * 7 + b)
        pts.append(p)
        samples += _samples(p, overlap)
    machine = {"caches": [{"level": 1, "type": "Data", "line_bytes": line,
                           "size_bytes": 48 << 10}]}
    return RunData("sharing", {"cpus": [1, 0]}, machine, pts, samples)


def _answers(data):
    exp = get_experiment("sharing")
    return {a.question: a for a in exp.analyze(data)}


def test_false_sharing_ratio_line_size_and_padding_from_synthetic_points():
    got = _answers(_fs_data(penalty_below=64, ratio=4.0))
    fs = got["sharing.false_sharing"]
    assert fs.verdict == "detected"
    assert fs.value == pytest.approx(4.0, rel=0.1)
    assert fs.ci_low < fs.value < fs.ci_high
    assert "costs 4.0x" in fs.because
    labels = {d["label"] for d in fs.details}
    assert {"plain d=8", "atomic d=8", "plain d=4096", "plain one thread"} <= labels
    ls = got["sharing.line_size"]
    assert ls.verdict == "measured" and ls.value == 64
    assert "agrees" in ls.because
    pad = got["sharing.padding"]
    assert pad.value == 64 and "pad per-thread counters to 64 bytes" in pad.because


def test_the_headline_pools_every_distance_inside_one_line():
    """The median over the one-line cells (issue 22): its evidence names all
    of them, and a penalty at one distance alone does not decide it."""
    data = _fs_data(penalty_below=64, ratio=1.3)
    fs = _answers(data)["sharing.false_sharing"]
    assert "8-56 B apart (one line, pooled)" in fs.because
    assert sorted(k.split("distance_bytes=")[1].split("|")[0] for k in fs.evidence
                  if k.startswith("atomic")) == ["128", "16", "256", "32", "4096", "56", "8"]
    assert fs.value == pytest.approx(1.3, rel=0.05)
    # only d = 8 slow: the pooled one-line median is not it
    for p in data.points:
        if p["arm"] == "atomic" and p["params"].get("distance_bytes") in (16, 32, 56):
            p["values"] = [v / 1.3 for v in p["values"]]
            p["median"] /= 1.3
    for smp in data.samples:
        if smp["arm"] == "atomic" and smp["point"].get("distance_bytes") in (16, 32, 56):
            smp["value"] /= 1.3
    assert _answers(data)["sharing.false_sharing"].value < 1.15


def test_the_headline_decides_on_locked_increments_and_says_what_plain_ones_cost():
    """On a 2-vCPU guest plain increments of one line read 1.2-1.8x from
    replica to replica (the store buffer batches their commits) against
    the 1.5x bar, locked ones 5.9-8.8x: the verdict rests on the locked
    ones, and the sentence gives the plain ratio beside it."""
    fs = _answers(_fs_data(penalty_below=64, ratio=7.0, plain_ratio=1.45))[
        "sharing.false_sharing"]
    assert fs.verdict == "detected"
    assert fs.value == pytest.approx(7.0, rel=0.1)
    assert "atomic increments (lock addq)" in fs.because
    assert "plain increments (addq, not locked) take 1.4" in fs.because
    assert all(k.startswith("atomic") for k in fs.evidence)
    # the other way round: no penalty for locked increments is no penalty,
    # whatever plain ones read
    fs = _answers(_fs_data(penalty_below=64, ratio=1.0, plain_ratio=3.0))[
        "sharing.false_sharing"]
    assert fs.verdict == "not_detected" and "take 3.0" in fs.because


def test_a_128_byte_penalty_gives_line_size_128_against_sysfs_64():
    got = _answers(_fs_data(penalty_below=128, ratio=3.0))
    # d = 64 penalised too: the far-apart baseline starts at 128
    ls = got["sharing.line_size"]
    assert ls.value == 128 and "differs" in ls.because
    assert got["sharing.padding"].value == 128


def test_no_penalty_anywhere_is_not_a_line_size():
    got = _answers(_fs_data(ratio=1.0))
    assert got["sharing.false_sharing"].verdict == "not_detected"
    assert got["sharing.line_size"].verdict == "inconclusive"
    assert got["sharing.line_size"].value is None


def test_threads_that_did_not_overlap_are_inconclusive_not_a_ratio():
    got = _answers(_fs_data(ratio=4.0, overlap=0.2))
    fs = got["sharing.false_sharing"]
    assert fs.verdict == "inconclusive"
    assert "threads did not overlap: inconclusive" in fs.because
    assert got["sharing.line_size"].verdict == "inconclusive"
    assert got["sharing.core_to_core"].verdict == "inconclusive"


def test_core_to_core_matrix_is_the_median_over_pairs_with_every_cell():
    got = _answers(_fs_data(pairs=((0, 1), (0, 2), (1, 2))))
    c = got["sharing.core_to_core"]
    assert c.verdict == "measured"
    assert c.value == pytest.approx(80.0, rel=0.05)         # pairs at 70, 80 and 90 ns
    assert len(c.details) == 3
    assert {(d["cpu_a"], d["cpu_b"]) for d in c.details} == {(0, 1), (0, 2), (1, 2)}


def test_one_cpu_run_is_not_measured_with_the_reason():
    data = _fs_data()
    data.points = [p for p in data.points if p["params"]["part"] == "solo"]
    data.params = {"cpus": [0]}
    got = _answers(data)
    for q in ("false_sharing", "line_size", "padding", "core_to_core"):
        a = got[f"sharing.{q}"]
        assert a.verdict == "not_measured"
        assert "only one CPU" in a.because


# ---- CLI -------------------------------------------------------------------

@pytest.mark.measuring
@pytest.mark.parametrize("setting,message", [
    ("cpus=0,4095", "CPU 4095 is not available"),
    ("distances=8,12", "not a multiple of 8"),
    ("cpu=4095", "CPU 4095"),
])
def test_cli_bad_input_is_one_line_exit_2_nothing_stored(db_path, setting, message):
    r = run_cli("run", "sharing", "--quick", "--set", setting, db=db_path)
    assert r.returncode == 2
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and message in lines[0]
    if os.path.exists(db_path):
        assert sqlite3.connect(db_path).execute("select count(*) from runs").fetchone()[0] == 0


@pytest.mark.measuring
def test_a_run_on_one_cpu_answers_not_measured_with_the_reason(db_path):
    cpu = sorted(os.sched_getaffinity(0))[0]
    r = run_cli("run", "sharing", "--quick", "--json", "--set", f"cpus={cpu}", "--set",
                "samples=3", "--set", "min_sample_ms=0.1", db=db_path)
    assert r.returncode == 0, r.stderr
    import json
    doc = json.loads(r.stdout)
    assert doc["params"]["cpus"] == [cpu]               # the run records the CPUs it used
    assert {p["params"]["part"] for p in doc["points"]} == {"solo"}
    for a in doc["answers"]:
        assert a["verdict"] == "not_measured"
        assert "only one CPU" in a["because"]


def test_ratios_use_only_samples_whose_threads_ran_side_by_side():
    data = _fs_data(ratio=4.0)
    near = next(p for p in data.points if p["arm"] == "plain"
                and p["params"].get("distance_bytes") == 8)
    # as many samples again, ten times slower, from a thread switched out
    data.samples += [{"arm": "plain", "point": near["params"], "value": 40 * v,
                      "counters": {"overlap": 1.0, "thread_switches": 3}} for v in near["values"]]
    fs = _answers(data)["sharing.false_sharing"]
    assert fs.value == pytest.approx(4.0, rel=0.1)
