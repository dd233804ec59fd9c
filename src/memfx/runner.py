"""Runs an experiment: resolves parameters, starts the measuring worker,
streams every sample into the store as it arrives, and marks the run
complete, interrupted (Ctrl-C) or failed (the worker crashed or refused)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from .errors import MemfxError, ParamError
from .experiments import get_experiment
from .store import Store


class RunInterrupted(Exception):
    """Ctrl-C during a run; the run is stored as interrupted."""

    def __init__(self, run_id):
        super().__init__(run_id)
        self.run_id = run_id


def prepare(name, preset="quick", overrides=None, machine=None):
    """Resolve and validate parameters before anything is stored."""
    exp = get_experiment(name)
    params = exp.resolve(preset, overrides)
    _check_cpu(params.get("cpu"))
    points = exp.plan(params, machine or {})
    if not points:
        raise MemfxError(f"{name}: the parameters select no points to measure")
    return exp, params, points


def _check_cpu(cpu):
    # The worker pins itself to this CPU; checked here as well so that a CPU
    # it cannot use is bad input before a run exists, not a failed run.
    if not isinstance(cpu, int) or cpu < 0:
        return
    allowed = sorted(os.sched_getaffinity(0))
    if cpu not in allowed:
        raise ParamError(f"cpu: CPU {cpu} is not available to this process (allowed: {allowed})")


# The worker starts isolated (-I: no current directory or script directory on
# sys.path, no PYTHON* variables, no user site), so a json.py or numpy.py
# where the user stands cannot run inside it; it is handed the directories
# this process imports from instead, memfx's own first.
_WORKER_BOOTSTRAP = ("import sys, json; sys.path[:0] = json.loads(sys.argv.pop(1)); "
                     "import runpy; runpy.run_module('memfx._worker', run_name='__main__', "
                     "alter_sys=True)")


def worker_command():
    """argv of an isolated Python running memfx._worker from the memfx this
    process imported."""
    src_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [sys.executable, "-I", "-c", _WORKER_BOOTSTRAP, json.dumps(import_path(src_root))]


def import_path(package_root):
    """`package_root` then this process's sys.path as absolute directories,
    without the current directory (what -I is there to keep out)."""
    cwd = os.path.realpath(os.getcwd())
    path = [package_root]
    for entry in sys.path:
        absolute = os.path.abspath(entry or os.curdir)
        if os.path.realpath(absolute) == cwd and absolute != package_root:
            continue
        if absolute not in path:
            path.append(absolute)
    return path


class Measurement:
    """One run: begun in the store, measured by ``replicas`` worker processes
    (each a replica: fresh buffers, permutations and offsets; see
    _worker.measure), and finished.  A survey measures the replicas of its
    runs in rounds, so that each run's replicas are spread over time
    (survey.py); ``run_experiment`` measures them one after another."""

    def __init__(self, name, store: Store, machine: dict, preset="quick", overrides=None,
                 survey_id=None, labels=None):
        self.name, self.store, self.machine = name, store, machine
        self.exp, self.params, self.points = prepare(name, preset, overrides, machine)
        self.replicas = int(self.params.get("replicas") or 1)
        self.run_id = store.begin_run(name, self.params, preset, machine, survey_id=survey_id,
                                      labels=labels)
        self.measured = 0          # replicas measured so far
        self.finished = False

    def measure_replica(self, replica, on_progress=None, on_info=None):
        """Measure one replica in its own worker process, streaming its
        samples into the store.  Ctrl-C marks the run interrupted (keeping
        every sample) and raises RunInterrupted; a failed worker marks it
        failed and raises MemfxError."""
        store, run_id = self.store, self.run_id
        job = {"experiment": self.name, "params": self.params, "machine": self.machine,
               "replica": replica, "parent_pid": os.getpid()}
        with tempfile.TemporaryFile(mode="w+") as errfile:
            proc = subprocess.Popen(worker_command(), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=errfile, text=True)
            state = {"cells": len(self.points), "done": 0, "error": None, "finished": False,
                     "replica": replica, "replicas": self.replicas}
            try:
                proc.stdin.write(json.dumps(job))
                proc.stdin.close()
                for line in proc.stdout:
                    _handle(line, store, run_id, state, on_progress, on_info)
                proc.wait()
            except KeyboardInterrupt:
                _stop(proc)
                for line in proc.stdout:        # keep what was already measured
                    _handle(line, store, run_id, state, None, None)
                self.finish("interrupted", error="interrupted by the user (Ctrl-C)")
                raise RunInterrupted(run_id) from None
            except BaseException:
                _stop(proc)
                self.finish("failed", error="the runner stopped unexpectedly")
                raise
            finally:
                proc.stdout.close()     # the pipe's file object; left to the GC it warns later
            if state["finished"] and proc.returncode == 0:
                self.measured += 1
                return
            errfile.seek(0)
            tail = errfile.read()[-2000:].strip()
        if state["error"]:
            reason = state["error"]
        elif proc.returncode and proc.returncode < 0:
            reason = f"the measuring worker died with {signal.Signals(-proc.returncode).name}"
        else:
            reason = f"the measuring worker exited with status {proc.returncode}"
        if tail and not state["error"]:
            reason += ": " + tail.splitlines()[-1]
        if self.replicas > 1:
            reason = f"replica {replica + 1} of {self.replicas}: {reason}"
        self.finish("failed", error=reason)
        raise MemfxError(f"run {run_id} failed: {reason} (samples measured so far are kept)")

    def finish(self, status="complete", error=None):
        self.store.finish_run(self.run_id, status, error=error)
        self.finished = True


def run_experiment(name, store: Store, machine: dict, preset="quick", overrides=None,
                   survey_id=None, on_progress=None, on_info=None, labels=None):
    """Measure and store one run (every replica, one after another); returns
    its run id.  KeyboardInterrupt is turned into RunInterrupted after the
    run has been marked interrupted."""
    m = Measurement(name, store, machine, preset, overrides, survey_id=survey_id, labels=labels)
    for replica in range(m.replicas):
        m.measure_replica(replica, on_progress, on_info)
    m.finish("complete")
    return m.run_id


def _handle(line, store, run_id, state, on_progress, on_info):
    try:
        msg = json.loads(line)
    except json.JSONDecodeError:
        return
    kind = msg.get("type")
    # progress counts the cells of every replica: this one's, after the
    # replicas before it (assumed to have had as many cells)
    before = state["replica"] * state["cells"]
    total = state["replicas"] * state["cells"]
    if kind == "samples":
        store.add_samples(run_id, msg["samples"])
        state["done"] += 1
        if on_progress:
            on_progress(before + state["done"], total, msg.get("label", ""))
    elif kind == "plan":
        state["cells"] = msg["cells"]
        if on_progress:
            on_progress(state["replica"] * msg["cells"] + state["done"],
                        state["replicas"] * msg["cells"], "")
    elif kind == "info":
        if state["replica"] == 0:       # one worker's setup speaks for the run
            store.set_artifact(run_id, "worker", msg)
        if on_info:
            on_info(msg)
    elif kind == "error":
        state["error"] = msg["message"]
    elif kind == "done":
        state["finished"] = True


def _stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def estimate_seconds(name, preset="quick", overrides=None, machine=None):
    exp, params, _ = prepare(name, preset, overrides, machine)
    return exp.estimate_seconds(params, machine or {})


def timed(fn, *a, **kw):
    t0 = time.monotonic()
    r = fn(*a, **kw)
    return r, time.monotonic() - t0
