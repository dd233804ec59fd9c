"""memfx tune (issue 25): the interposer's counts, the candidates, the check,
the record in the store, and the command's refusals.  Programs are compiled
here with cc; nothing asserts a speed."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from memfx.advice import tune as T
from memfx.model import findings as fnd
from memfx.store.store import Store

DATA = os.path.join(os.path.dirname(__file__), "data")
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
CC = shutil.which("cc") or shutil.which("gcc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler")

K = 1024
# glibc as this fake machine reports it: a 1 MiB last-level cache from CPUID
# where the OS reports 256 KiB, and a non-temporal threshold of 768 KiB
THRESHOLDS = {"rep_movsb_threshold": 2112, "rep_stosb_threshold": 2048,
              "non_temporal_threshold": 768 * K, "rep_movsb_stop_threshold": 768 * K}
GLIBC = {"available": True, "version": "2.36", "thresholds": THRESHOLDS, "preferred": {}}
MACHINE = {"cpu": {"model_name": "test CPU"}, "flags": {"erms": True, "avx2": True},
           "llc": {"sysfs_bytes": 256 * K, "glibc_bytes": 1024 * K},
           "glibc": {"diagnostics": GLIBC}}
LLC_NT = 192 * K      # 256 KiB x 768/1024, the candidate the OS's cache size gives


def store_copy_run(store):
    """A complete copy run whose samples reproduce the points of a captured
    `memfx run copy --quick` (tests/data/advise_copy_quick_points.json)."""
    with open(os.path.join(DATA, "advise_copy_quick_points.json")) as f:
        doc = json.load(f)
    run_id = store.begin_run("copy", {}, "quick", doc.get("machine") or MACHINE)
    samples = []
    for p in doc["points"]:
        if p.get("median") is None:
            continue
        lo, mid, hi = p.get("ci_low") or p["median"], p["median"], p.get("ci_high") or p["median"]
        for v in (lo, mid, mid, mid, hi):
            samples.append({"arm": p["arm"], "point": p["params"], "metric": p["metric"],
                            "unit": "ns", "value": v, "length": 1000, "ns": v * 1000})
    store.add_samples(run_id, samples)
    store.finish_run(run_id, "complete")
    return run_id


def compile_c(tmp_path, name, source, *flags):
    src = tmp_path / f"{name}.c"
    src.write_text(source)
    exe = tmp_path / name
    subprocess.run([CC, "-O2", *flags, "-o", str(exe), str(src)], check=True)
    return str(exe)


MEMCPY_PROGRAM = r"""
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    long r = atol(argv[1]);
    size_t n = (size_t)atol(argv[2]);
    char *a = malloc(n + 1), *b = malloc(n + 1);
    a[0] = 1;
    for (long i = 0; i < r; i++)
        memcpy(i & 1 ? a : b, i & 1 ? b : a, n);
    return a[0] == 7;
}
"""

NOTHING_PROGRAM = r"""
int main(void) { volatile int x = 0; for (int i = 0; i < 1000; i++) x += i; return 0; }
"""


def run_main(argv, capsys):
    from memfx.cli.main import main
    try:
        code = main(argv)
    except SystemExit as e:          # argparse's own refusals
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def fake_machine(monkeypatch):
    """The CLI sees MACHINE, and glibc takes every candidate value."""
    import memfx.advice.advise as A
    import memfx.cli.main as cli
    monkeypatch.setattr(cli, "_machine", lambda: MACHINE)
    monkeypatch.setattr(A, "effective_thresholds", lambda env, ld_so=None: None)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.delenv("LD_PRELOAD", raising=False)


# ---- the interposer -----------------------------------------------------------------

@pytest.mark.measuring
@needs_cc
@pytest.mark.parametrize("n", [0, 1, 3000, 4096, 70000])
def test_profile_counts_r_calls_of_n_bytes_in_their_bucket(tmp_path, n):
    exe = compile_c(tmp_path, "copies", MEMCPY_PROGRAM, "-fno-builtin")
    r = 37
    edges = [100, 3000, 5000]
    raw = T.profile(T.Runner([exe, str(r), str(n)]), edges)
    assert raw["processes"] == 1
    k = 0 if n == 0 else n.bit_length()
    assert raw["pow2"] == {"memcpy": {k: [r, r * n]}}
    lo, hi = T.pow2_range(k)
    assert lo <= n <= hi
    j = sum(1 for e in edges if e <= n)          # glibc: s >= threshold takes the upper path
    assert raw["edge"] == {"memcpy": {j: [r, r * n]}}
    summary = T.summarize_profile(raw, {})
    assert summary["functions"]["memcpy"]["calls"] == r
    assert summary["functions"]["memcpy"]["bytes"] == r * n
    assert summary["total_calls"] == r


@pytest.mark.measuring
@needs_cc
def test_profile_counts_threads_forks_and_chk_forms(tmp_path):
    src = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
static char a[8192], b[8192];
static void *work(void *arg) {
    (void)arg;
    for (int i = 0; i < 10000; i++) memmove(a + 1, a, 1000);
    return NULL;
}
int main(void) {
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, work, NULL);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    __memset_chk(b, 1, 64, sizeof b);
    __memcpy_chk(a, b, 5000, sizeof a);
    pid_t p = fork();
    if (p == 0) { memset(b, 2, 300); exit(0); }
    waitpid(p, NULL, 0);
    return 0;
}
"""
    exe = compile_c(tmp_path, "threads", src, "-fno-builtin", "-pthread")
    raw = T.profile(T.Runner([exe]), [])
    assert raw["processes"] == 2                 # the parent and its forked child
    assert raw["pow2"]["memmove"] == {10: [40000, 40000 * 1000]}   # no update lost
    assert raw["pow2"]["__memset_chk"] == {7: [1, 64]}
    assert raw["pow2"]["__memcpy_chk"] == {13: [1, 5000]}
    assert raw["pow2"]["memset"] == {9: [1, 300]}   # the child's call, counted once


def test_parse_profile_sums_processes_and_refuses_garbage():
    block = "memfx-tune-profile 1\npid 1\nedges 10 20\npow2 memcpy 4 2 20\nedge memcpy 1 2 20\nend\n"
    raw = T.parse_profile(block + block.replace("pid 1", "pid 2"))
    assert raw["processes"] == 2 and raw["pow2"] == {"memcpy": {4: [4, 40]}}
    assert raw["edges"] == [10, 20] and T.calls_between(raw, ["memcpy"], 10, 20) == (4, 40)
    assert T.calls_between(raw, ["memcpy"], 20) == (0, 0)
    for bad in ("pow2 memcpy 4 2 20\n", block.replace("memcpy 4", "strcpy 4"), block[:-4]):
        with pytest.raises(ValueError):
            T.parse_profile(bad)


# ---- candidates and the check -------------------------------------------------------

def advice_props(**proposed):
    return [{"name": n, "tunable": f"glibc.cpu.x86_{n}", "proposed": v, "reason": "r",
             "run_id": "c1"} for n, v in proposed.items()]


def test_candidates_come_from_the_copy_advice_and_the_os_cache_size():
    props = advice_props(rep_movsb_threshold=4096, rep_stosb_threshold=None,
                         non_temporal_threshold=None)
    cands = T.propose(props, GLIBC, MACHINE)
    assert [(c["tunable"], c["value"]) for c in cands] == [
        ("glibc.cpu.x86_rep_movsb_threshold", 4096),
        ("glibc.cpu.x86_non_temporal_threshold", LLC_NT)]
    assert all(c["reason"] for c in cands)
    # the OS and glibc agree on the cache: no cache-size candidate
    agree = dict(MACHINE, llc={"sysfs_bytes": 1024 * K, "glibc_bytes": 1024 * K})
    assert [c["name"] for c in T.propose(props, GLIBC, agree)] == ["rep_movsb_threshold"]
    # a proposal equal to the current value is no candidate; nothing known, nothing proposed
    assert T.propose(advice_props(rep_movsb_threshold=2112), GLIBC, agree) == []
    # no proposal (the kernels' curves gain too little), but a measured crossover: the
    # program decides; an "above everywhere" optimum (below glibc's minimum) is none
    kept = [dict(p, optimum=1 << 20) for p in advice_props(non_temporal_threshold=None)]
    assert [(c["value"], c["source"]) for c in T.propose(kept, GLIBC, agree)] == [(1 << 20, "copy")]
    low = [dict(p, optimum=100) for p in advice_props(non_temporal_threshold=None)]
    assert T.propose(low, GLIBC, agree) == []
    assert T.propose([], {}, {}) == []


def test_hugetlb_only_where_the_latency_run_found_huge_pages_faster():
    latency = {"run_id": "l1", "answers": [{"question": "latency.huge_page_benefit",
                                            "verdict": fnd.DETECTED, "value": 1.4,
                                            "because": "1.40x slower with 4 KiB pages"}]}
    cands = T.propose([], GLIBC, {}, latency, hugepage=2 << 20)
    assert [(c["tunable"], c["value"], c["min_size"]) for c in cands] == [
        ("glibc.malloc.hugetlb", 1, 2 << 20)]
    assert "1.40x" in cands[0]["reason"]
    no = dict(latency, answers=[dict(latency["answers"][0], verdict=fnd.NOT_DETECTED)])
    assert T.propose([], GLIBC, {}, no) == []
    assert T.propose([], GLIBC, {}, latency, user_tunables="glibc.malloc.hugetlb=2") == []
    # it applies to a program only when it touches buffers of a huge page or more
    raw = {"edges": [2 << 20], "edge": {"memcpy": {0: [5, 50]}, "memset": {1: [2, 5 << 20]}}}
    assert T.affected(cands[0], raw) == (2, 5 << 20)


def test_affected_counts_the_sizes_between_the_current_and_new_threshold():
    cand = T.propose(advice_props(rep_movsb_threshold=4096), GLIBC, {})[0]
    edges = T.edges_for([cand], THRESHOLDS)
    assert edges == sorted({2048, 2112, 4096, 768 * K})
    # edge buckets: j holds edges[j-1] <= s < edges[j]
    raw = {"edges": edges, "edge": {"memcpy": {2: [7, 7 * 3000], 3: [1, 5000]},
                                    "memset": {2: [100, 100 * 3000]}}}
    assert T.affected(cand, raw) == (7, 21000)       # memset is not governed by it
    raw["edge"]["memcpy"] = {3: [1, 5000]}
    assert T.affected(cand, raw) == (0, 0)


def test_speedup_verdicts_use_the_noise_band_and_the_one_bootstrap(monkeypatch):
    band = fnd.threshold("tune_noise_band")
    assert 0 < band < 0.1
    base = [1.0] * 7
    fast = T.speedup(base, [0.8, 0.81, 0.79, 0.8, 0.82, 0.8, 0.8])
    assert fast["verdict"] == "faster" and fast["ci_low"] > 1 + band
    assert fast["speedup"] == pytest.approx(1.0 / 0.8)
    assert T.speedup(base, [1.0, 1.001, 0.999, 1.0, 1.0, 1.0, 1.0])["verdict"] == "no_difference"
    assert T.speedup(base, [1.3] * 7)["verdict"] == "slower"
    # faster, but by less than the band: not recommended
    small = T.speedup(base, [1 / 1.01] * 7)
    assert small["verdict"] == "no_difference"
    assert T.speedup(base[:2], [0.5, 0.5])["verdict"] == "inconclusive"   # too few rounds
    calls = []
    real = T.stats.bootstrap_ci
    monkeypatch.setattr(T.stats, "bootstrap_ci", lambda *a, **k: calls.append(a) or real(*a, **k))
    T.speedup(base, base)
    assert len(calls) == 1
    cands = [{"id": "a", "env": "x=1", "result": fast}, {"id": "b", "env": "y=1", "result": small}]
    rec = T.recommendation(cands)
    assert rec["line"] == "GLIBC_TUNABLES=x=1" and rec["speedup"] == fast["speedup"]
    assert T.recommendation(cands[1:]) is None


def test_check_warms_up_then_shuffles_each_round():
    seen = []

    class Fake:
        def run(self, env, what):
            seen.append(env["v"])
            return 1.0
    variants = {"baseline": {"v": "b"}, "c1": {"v": "1"}, "c2": {"v": "2"}}
    times, warm = T.check(Fake(), variants, 6)
    assert seen[0] == "b" and len(seen) == 1 + 18
    rounds = [seen[1 + 3 * r: 4 + 3 * r] for r in range(6)]
    assert all(sorted(r) == ["1", "2", "b"] for r in rounds)
    assert len({tuple(r) for r in rounds}) > 1       # the order changes between rounds
    assert {k: len(v) for k, v in times.items()} == {"baseline": 6, "c1": 6, "c2": 6}


def test_with_item_appends_to_the_users_value():
    from memfx.advice.advise import tunables_env
    assert T.with_item(None, ":", "/x.so") == "/x.so"
    assert T.with_item("/a.so", ":", "/x.so") == "/a.so:/x.so"
    assert tunables_env("glibc.malloc.check=1", "glibc.cpu.x86_rep_movsb_threshold", 4096) == \
        "glibc.malloc.check=1:glibc.cpu.x86_rep_movsb_threshold=4096"


# ---- the command ---------------------------------------------------------------------

@pytest.mark.measuring
@needs_cc
def test_tune_the_ring_example_end_to_end(tmp_path, db_path, fake_machine, capsys):
    exe = compile_c(tmp_path, "ring_copy", open(os.path.join(EXAMPLES, "ring_copy.c")).read())
    with Store(db_path) as store:
        copy_id = store_copy_run(store)
    size, count, passes = 512 * K, 3, 2
    code, out, err = run_main(["tune", "--runs", "2", "--json", "--db", db_path, "--",
                               exe, "512K", str(count), str(passes)], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema_version"] == T.SCHEMA_VERSION and doc["kind"] == "memfx-tune"
    assert doc["sources"]["copy"] == copy_id
    prof = doc["profile"]["functions"]
    k = size.bit_length()
    assert prof["memcpy"] == {"calls": count * passes, "bytes": count * passes * size,
                              "buckets": [{"min": 1 << (k - 1), "max": (1 << k) - 1,
                                           "calls": count * passes,
                                           "bytes": count * passes * size}]}
    assert prof["memset"]["calls"] == count and prof["memset"]["bytes"] == count * size
    # re-bucketed at glibc's thresholds: every copy below the 768 KiB NT threshold
    regions = {(r["group"], r["from_threshold"]): r["calls"] for r in doc["profile"]["regions"]}
    assert regions[("copy", "rep_movsb_threshold")] == count * passes
    assert regions[("copy", "non_temporal_threshold")] == 0
    ids = [c["id"] for c in doc["candidates"]]
    assert f"x86_non_temporal_threshold={LLC_NT}" in ids
    for c in doc["candidates"]:                       # a result for each candidate
        assert c["affected_calls"] > 0 and c["reason"]
        assert c["result"]["n"] == 2 and len(c["result"]["times_s"]) == 2
        assert c["result"]["verdict"] == "inconclusive"   # 2 rounds cannot make a CI
        assert c["env"].endswith(f"{c['tunable']}={c['value']}")
    for c in doc["dropped"]:
        assert c["why"]
    assert doc["recommendation"] is None
    # the record: `memfx runs` lists it, `memfx show` prints it, --json gives the document
    code, out, _ = run_main(["runs", "--json", "--db", db_path], capsys)
    runs = {r["id"]: r for r in json.loads(out)}
    rec = runs[doc["run_id"]]
    assert rec["experiment"] == "tune" and rec["status"] == "complete"
    assert rec["n_samples"] == 1 + 1 + 2 * (1 + len(ids))    # profile, warm-up, rounds
    code, out, _ = run_main(["show", doc["run_id"], "--json", "--db", db_path], capsys)
    assert json.loads(out) == doc
    code, out, _ = run_main(["show", doc["run_id"], "--db", db_path], capsys)
    assert code == 0 and "no change recommended" in out and f"x86_non_temporal_threshold={LLC_NT}" in out
    from memfx.analysis.documents import run_document
    with Store(db_path) as store:
        rd = run_document(store, doc["run_id"])
    assert [a["question"] for a in rd["answers"]] == [f"tune.{c['tunable']}" for c in doc["candidates"]]


@pytest.mark.measuring
@needs_cc
def test_a_program_without_string_calls_gets_no_change(tmp_path, db_path, fake_machine, capsys):
    exe = compile_c(tmp_path, "nothing", NOTHING_PROGRAM)
    with Store(db_path) as store:
        store_copy_run(store)
    code, out, err = run_main(["tune", "--runs", "2", "--db", db_path, "--", exe], capsys)
    assert code == 0, err
    assert "no change recommended" in out
    code, out, err = run_main(["tune", "--runs", "2", "--json", "--db", db_path, "--", exe], capsys)
    doc = json.loads(out)
    assert doc["profile"]["total_calls"] == 0 and doc["candidates"] == []
    assert doc["recommendation"] is None
    assert all(c["why"].startswith("the program made no call") for c in doc["dropped"])


@pytest.mark.measuring
@needs_cc
def test_a_static_executable_is_refused_in_one_line(tmp_path, db_path, fake_machine, capsys):
    try:
        exe = compile_c(tmp_path, "static", NOTHING_PROGRAM, "-static")
    except subprocess.CalledProcessError:
        pytest.skip("no static libc to link with")
    code, out, err = run_main(["tune", "--db", db_path, "--", exe], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "statically linked" in err
    assert not os.path.exists(db_path)                # refused before the DB is touched


def test_a_setuid_executable_is_refused(tmp_path):
    exe = tmp_path / "suid"
    shutil.copy(sys.executable, exe)
    os.chmod(exe, 0o4755)
    with pytest.raises(T.MemfxError, match="set-user/group-ID"):
        T.check_command([str(exe)])


@pytest.mark.measuring
@needs_cc
def test_a_failing_program_stops_tuning_with_one_line(tmp_path, db_path, fake_machine, capsys):
    exe = compile_c(tmp_path, "fails", "int main(void) { return 3; }")
    with Store(db_path) as store:
        store_copy_run(store)
    code, out, err = run_main(["tune", "--json", "--db", db_path, "--", exe], capsys)
    assert code == T.EXIT_PROGRAM_FAILED and out == ""
    assert err.count("\n") == 1 and "the program failed" in err and "status 3" in err
    code, out, err = run_main(["tune", "--db", db_path, "--", exe], capsys)   # with progress
    assert code == T.EXIT_PROGRAM_FAILED
    assert err.splitlines()[-1].startswith("memfx: error: the program failed")
    with Store(db_path) as store:
        run = store.runs(experiment="tune")[0]
    assert run["status"] == "failed" and "status 3" in run["error"]


@pytest.mark.measuring
def test_a_timeout_kills_the_whole_process_group(tmp_path):
    marker = tmp_path / "late"
    script = tmp_path / "slow.sh"
    script.write_text(f"#!/bin/sh\n(sleep 3; touch {marker}) &\nsleep 30\n")
    script.chmod(0o755)
    runner = T.Runner([str(script)], timeout_s=0.5)
    with pytest.raises(T.ProgramFailed, match="did not finish within 0.5 s"):
        runner.run(dict(os.environ), "round 1")
    import time
    time.sleep(3.5)
    assert not marker.exists()                        # the background child died too


@pytest.mark.measuring
@pytest.mark.parametrize("args, message", [
    (["--"], "needs a command"),
    (["--", "/no/such/program"], "command not found"),
    (["--runs", "0", "--", "true"], "--runs"),
    (["--timeout", "0", "--", "true"], "--timeout"),
    (["--cpu", "100000", "--", "true"], "--cpu 100000"),
    (["--runs", "x", "--", "true"], "invalid int"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, db_path, capsys):
    code, out, err = run_main(["tune", "--db", db_path, *args], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err
    assert not os.path.exists(db_path)


@pytest.mark.measuring
def test_no_copy_run_is_one_line_and_exit_2(db_path, capsys):
    with Store(db_path):
        pass
    code, out, err = run_main(["tune", "--db", db_path, "--", "true"], capsys)
    assert code == 2 and err.count("\n") == 1 and "no copy results" in err


@pytest.mark.measuring
def test_ctrl_c_while_the_program_starts_still_kills_its_group(tmp_path):
    """A Ctrl-C that lands inside Popen (the program already running and
    writing its child's pid, memfx not yet waiting on it) is held back until
    memfx can kill the group: the program's child must not survive."""
    import signal
    import time
    pid_file = tmp_path / "child.pid"
    script = tmp_path / "hangs.sh"
    script.write_text(f"#!/bin/sh\nsleep 60 &\necho $! > {pid_file}\nwait\n")
    script.chmod(0o755)
    driver = ("import os, signal, subprocess, sys, time\nfrom memfx.advice import tune as T\n"
              "real = subprocess.Popen\n"
              "def popen(*a, **k):\n"
              "    p = real(*a, **k)\n"
              "    os.kill(os.getpid(), signal.SIGINT)   # Ctrl-C before Popen returns\n"
              "    time.sleep(0.5)\n"
              "    return p\n"
              "subprocess.Popen = popen\n"
              f"T.Runner([{str(script)!r}]).run(dict(os.environ), 'round 1')\n")
    proc = subprocess.run([sys.executable, "-c", driver], stderr=subprocess.PIPE, timeout=60)
    assert proc.returncode != 0 and b"KeyboardInterrupt" in proc.stderr
    child = int(pid_file.read_text())
    for _ in range(100):
        try:
            state = open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state == "Z":
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail(f"the program's child {child} survived a Ctrl-C during its start")


@pytest.mark.measuring
def test_ctrl_c_kills_the_programs_whole_process_group(tmp_path):
    """SIGINT to memfx while the program runs: memfx stops and the program's
    background child (same process group) is gone too."""
    import signal
    import time
    pid_file = tmp_path / "child.pid"
    script = tmp_path / "hangs.sh"
    script.write_text(f"#!/bin/sh\nsleep 60 &\necho $! > {pid_file}\nwait\n")
    script.chmod(0o755)
    driver = ("import os, sys\nfrom memfx.advice import tune as T\n"
              f"T.Runner([{str(script)!r}]).run(dict(os.environ), 'round 1')\n")
    proc = subprocess.Popen([sys.executable, "-c", driver], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0 and b"KeyboardInterrupt" in err
    for _ in range(100):                 # the killed child is reaped by init soon after
        try:
            state = open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state == "Z":                 # dead, not yet reaped by its new parent
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the program's child {child} survived Ctrl-C")
