"""The measuring worker dies with memfx (issue 26 item 4): a kill -9 of the
parent must not leave a pinned worker spinning until it next writes."""
import os
import signal
import subprocess
import sys
import time

import pytest

# every test here starts a worker or a process, or times kernels
pytestmark = pytest.mark.measuring


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(predicate, seconds):
    # polls for a condition; a deadline, not a timing measurement
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


# A stand-in for memfx: starts a worker as the runner does, waits until it
# measures (its plan has arrived), says the worker's pid, and sleeps.  The
# cells are long (100 samples of >= 300 ms), so the worker does not write to
# its pipe -- and die of SIGPIPE -- for half a minute after the parent dies.
PARENT = """
import json, os, subprocess, sys, time
from memfx.lab.machine import fingerprint
from memfx.running.runner import prepare, worker_command
fp = fingerprint()
exp, params, points = prepare("latency", "quick", {"samples": "100", "min_sample_ms": "300",
                                                   "max_size": "64K"}, fp)
job = {"experiment": "latency", "params": params, "machine": fp, "parent_pid": os.getpid()}
proc = subprocess.Popen(worker_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
proc.stdin.write(json.dumps(job))
proc.stdin.close()
for line in proc.stdout:
    if json.loads(line)["type"] in ("plan", "error", "done"):
        break
print(proc.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_a_worker_dies_when_memfx_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    worker = None
    try:
        worker = int(parent.stdout.readline())
        assert alive(worker)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert wait_for(lambda: not alive(worker), 10), "the worker outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        parent.stdout.close()
        if worker and alive(worker):
            os.kill(worker, signal.SIGKILL)


def test_a_worker_whose_parent_is_already_gone_exits():
    # the race PR_SET_PDEATHSIG alone leaves open: the parent died before the
    # request was made, so the worker already has another parent
    from memfx.running.runner import worker_command
    p = subprocess.run(worker_command(), input='{"experiment": "latency", "params": {}, '
                       '"machine": {}, "parent_pid": 1}', capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 1 and p.stdout == ""


def _tiny_latency_job(replica, samples="3"):
    from memfx.lab.machine import fingerprint
    from memfx.running.runner import prepare
    machine = fingerprint()
    _, params, _ = prepare("latency", "quick", {"max_size": "16K", "samples": samples,
                                                "min_sample_ms": "0.05", "per_octave": "1",
                                                "refine": "false"}, machine)
    return {"experiment": "latency", "params": params, "machine": machine, "replica": replica}


def test_each_replica_is_its_own_process_forked_by_one_host():
    """The runner's host forks a fresh child per job: two replicas, two
    processes, neither of them the host, which serves both."""
    import json

    from memfx.running.runner import WorkerHost
    host = WorkerHost()
    try:
        pids, hosts = [], []
        for replica in (0, 1):
            msgs = [json.loads(line) for line in host.submit(_tiny_latency_job(replica))]
            assert host.returncode == 0 and msgs[-1]["type"] == "done"
            pids.append(next(m["pid"] for m in msgs if m["type"] == "info"))
            hosts.append(host.proc.pid)
        assert pids[0] != pids[1] and hosts[0] == hosts[1] and hosts[0] not in pids
        assert not alive(pids[0]) and not alive(pids[1])
    finally:
        host.close()


def test_stopping_the_host_ends_the_replica_it_measures():
    import json

    from memfx.running.runner import WorkerHost
    host = WorkerHost()
    try:
        job = _tiny_latency_job(0, samples="10000")
        job["params"]["min_sample_ms"] = 300.0          # cells of minutes: still measuring
        lines = host.submit(job)
        child = None
        for line in lines:
            msg = json.loads(line)
            child = msg.get("pid", child)
            if msg["type"] == "plan":
                break
        assert child and alive(child)
        host.stop()
        list(host.remaining())
        assert wait_for(lambda: not alive(child), 10), "the replica outlived its host"
    finally:
        host.close()


# The same stand-in, measuring through the runner's forking host: a kill -9
# of memfx ends the host, and the host's end ends the replica it forked.
PARENT_HOST = """
import json, time
from memfx.lab.machine import fingerprint
from memfx.running.runner import WorkerHost, prepare
fp = fingerprint()
exp, params, points = prepare("latency", "quick", {"samples": "100", "min_sample_ms": "300",
                                                   "max_size": "64K"}, fp)
child = None
for line in WorkerHost().submit({"experiment": "latency", "params": params, "machine": fp}):
    msg = json.loads(line)
    child = msg.get("pid", child)
    if msg["type"] in ("plan", "error", "done"):
        break
print(child, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_a_replica_forked_by_the_host_dies_when_memfx_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", PARENT_HOST], stdout=subprocess.PIPE,
                              text=True)
    child = None
    try:
        child = int(parent.stdout.readline())
        assert alive(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert wait_for(lambda: not alive(child), 10), "the replica outlived memfx"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        parent.stdout.close()
        if child and alive(child):
            os.kill(child, signal.SIGKILL)


def test_memfx_keeps_off_the_measuring_cpu_while_a_replica_measures():
    """Every thread of the parent (the store's writes, the progress display's
    refresh thread) leaves the worker's CPU while it measures and comes back
    after; a host started meanwhile, and the child it forks to measure, may
    still use every CPU, and the child measures on the CPU the parent kept
    off."""
    import json
    import threading

    from memfx.running import runner
    start = frozenset(os.sched_getaffinity(0))
    if len(start) < 2:
        pytest.skip("needs two CPUs")
    cpu = runner.measuring_cpu(None)
    assert cpu == max(start) and runner.measuring_cpu(min(start)) == min(start)
    stop = threading.Event()
    seen = {}

    def refresher():                    # a thread started before, as rich's is
        seen["tid"] = threading.get_native_id()
        stop.wait(30)
    t = threading.Thread(target=refresher)
    t.start()
    host = runner.WorkerHost()
    try:
        while "tid" not in seen:
            time.sleep(0.01)
        with runner.off_the_measuring_cpu(cpu):
            assert os.sched_getaffinity(0) == start - {cpu}
            assert os.sched_getaffinity(seen["tid"]) == start - {cpu}
            msgs = [json.loads(line) for line in host.submit(_tiny_latency_job(0))]
            assert os.sched_getaffinity(host.proc.pid) == start
        assert host.returncode == 0
        assert next(m["cpu"] for m in msgs if m["type"] == "info") == cpu
        assert os.sched_getaffinity(0) == start and os.sched_getaffinity(seen["tid"]) == start
    finally:
        stop.set()
        t.join()
        host.close()
    # one CPU allowed: nothing to keep off, nothing changes
    single = runner.off_the_measuring_cpu(cpu)
    saved_cpus, runner._START_CPUS = runner._START_CPUS, frozenset({cpu})
    try:
        with single:
            assert os.sched_getaffinity(0) == start and not single.saved
    finally:
        runner._START_CPUS = saved_cpus
