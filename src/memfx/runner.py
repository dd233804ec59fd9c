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


def run_experiment(name, store: Store, machine: dict, preset="quick", overrides=None,
                   survey_id=None, on_progress=None, on_info=None, labels=None):
    """Measure and store one run; returns its run id.  KeyboardInterrupt is
    turned into RunInterrupted after the run has been marked interrupted."""
    exp, params, points = prepare(name, preset, overrides, machine)
    run_id = store.begin_run(name, params, preset, machine, survey_id=survey_id, labels=labels)
    job = {"experiment": name, "params": params, "machine": machine, "parent_pid": os.getpid()}
    with tempfile.TemporaryFile(mode="w+") as errfile:
        proc = subprocess.Popen(worker_command(), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=errfile, text=True)
        state = {"cells": len(points), "done": 0, "error": None, "finished": False}
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
            store.finish_run(run_id, "interrupted", error="interrupted by the user (Ctrl-C)")
            raise RunInterrupted(run_id) from None
        except BaseException:
            _stop(proc)
            store.finish_run(run_id, "failed", error="the runner stopped unexpectedly")
            raise
        finally:
            proc.stdout.close()     # the pipe's file object; left to the GC it warns later
        if state["finished"] and proc.returncode == 0:
            store.finish_run(run_id, "complete")
            return run_id
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
        store.finish_run(run_id, "failed", error=reason)
        raise MemfxError(f"run {run_id} failed: {reason} (samples measured so far are kept)")


def _handle(line, store, run_id, state, on_progress, on_info):
    try:
        msg = json.loads(line)
    except json.JSONDecodeError:
        return
    kind = msg.get("type")
    if kind == "samples":
        store.add_samples(run_id, msg["samples"])
        state["done"] += 1
        if on_progress:
            on_progress(state["done"], state["cells"], msg.get("label", ""))
    elif kind == "plan":
        state["cells"] = msg["cells"]
        if on_progress:
            on_progress(state["done"], state["cells"], "")
    elif kind == "info":
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
