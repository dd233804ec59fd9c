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
from memfx.machine import fingerprint
from memfx.runner import prepare, worker_command
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
    from memfx.runner import worker_command
    p = subprocess.run(worker_command(), input='{"experiment": "latency", "params": {}, '
                       '"machine": {}, "parent_pid": 1}', capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 1 and p.stdout == ""
