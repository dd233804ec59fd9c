"""Runs an experiment: resolves parameters, starts the measuring worker,
streams every sample into the store as it arrives, and marks the run
complete, interrupted (Ctrl-C) or failed (the worker crashed or refused)."""
from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from ..experiments import get_experiment
from ..model.errors import MeasurementFailed, MemfxError, ParamError
from ..store.store import Store

# The CPUs this process may use as it starts: the worker host gets them all
# even when it is (re)started while this process keeps off the measuring CPU.
_START_CPUS = frozenset(os.sched_getaffinity(0))


def measuring_cpu(cpu):
    """The CPU a worker measures on: `cpu`, or (None / negative) the last
    one this process may use -- the Lab's own rule (Lab._pin)."""
    return max(_START_CPUS) if cpu is None or cpu < 0 else cpu


class off_the_measuring_cpu:
    """Every thread of this process (the store's writes, the progress
    display's refresh) kept off the worker's CPU while it measures, where
    another CPU is allowed.  Floating, this process is woken where the
    scheduler finds room -- the measuring CPU whenever the others are busy
    (a build, a bandwidth hog) -- and each of its wake-ups there preempts
    the worker or takes part of its caches."""

    def __init__(self, cpu):
        self.cpu, self.saved = cpu, {}

    def __enter__(self):
        rest = _START_CPUS - {self.cpu}
        if not rest or self.cpu not in _START_CPUS:
            return self
        for tid in _threads():
            try:
                self.saved[tid] = os.sched_getaffinity(tid)
                os.sched_setaffinity(tid, rest)
            except OSError:       # a thread that ended meanwhile
                self.saved.pop(tid, None)
        return self

    def __exit__(self, *exc):
        for tid, mask in self.saved.items():
            try:
                os.sched_setaffinity(tid, mask)
            except OSError:
                pass
        self.saved = {}
        return False


def _threads():
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


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
                     "import runpy; runpy.run_module('memfx.running.worker', run_name='__main__', "
                     "alter_sys=True)")


def worker_command():
    """argv of an isolated Python running memfx.running.worker from the memfx this
    process imported."""
    src_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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
        self.measured_s = 0.0      # seconds the replicas took, whatever ran between them
        self.finished = False

    def measure_replica(self, replica, on_progress=None, on_info=None):
        """Measure one replica in its own worker process, streaming its
        samples into the store.  Ctrl-C marks the run interrupted (keeping
        every sample) and raises RunInterrupted; a failed worker marks it
        failed and raises MeasurementFailed."""
        store, run_id = self.store, self.run_id
        job = {"experiment": self.name, "params": self.params, "machine": self.machine,
               "replica": replica}
        state = {"cells": len(self.points), "done": 0, "error": None, "finished": False,
                 "replica": replica, "replicas": self.replicas}
        host = worker_host()
        started = time.monotonic()
        try:
            with off_the_measuring_cpu(measuring_cpu(self.params.get("cpu"))):
                for line in host.submit(job):
                    _handle(line, store, run_id, state, on_progress, on_info)
        except KeyboardInterrupt:
            self.measured_s += time.monotonic() - started
            host.stop()
            for line in host.remaining():       # keep what was already measured
                _handle(line, store, run_id, state, None, None)
            self.finish("interrupted", error="interrupted by the user (Ctrl-C)")
            raise RunInterrupted(run_id) from None
        except BaseException:
            host.stop()
            self.measured_s += time.monotonic() - started
            self.finish("failed", error="the runner stopped unexpectedly")
            raise
        self.measured_s += time.monotonic() - started
        code = host.returncode
        if state["finished"] and code == 0:
            self.measured += 1
            return
        tail = host.stderr_tail()
        if state["error"]:
            reason = state["error"]
        elif code and code < 0:
            reason = f"the worker was killed by {_signal_name(-code)} (signal {-code})"
        else:
            reason = f"the measuring worker exited with status {code}"
        if tail and not state["error"]:
            reason += ": " + tail.splitlines()[-1]
        if self.replicas > 1:
            reason = f"replica {replica + 1} of {self.replicas}: {reason}"
        self.finish("failed", error=reason)
        # the run is stored (failed): not bad input, whatever the worker said
        raise MeasurementFailed(f"run {run_id} failed: {reason} (samples measured so far are "
                                f"kept)")

    def finish(self, status="complete", error=None):
        self.store.finish_run(self.run_id, status, error=error,
                              measured_s=self.measured_s or None)
        self.finished = True


def _signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:                  # a real-time signal has no name of its own
        return f"SIGRTMIN+{number - signal.SIGRTMIN}"


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


class WorkerHost:
    """The process that measures: one isolated Python (worker_command)
    serving jobs (_worker.serve), which forks a fresh child per replica.  A
    replica is its own process with its own buffers, as before, but the
    interpreter's start and the imports (~0.3 s) are paid once per memfx
    process instead of once per replica (~45 in a quick survey).  Started on
    the first job, started again if it died or was stopped; it ends with
    memfx (its stdin closes, and it asked for SIGKILL at its parent's death),
    and each child with it."""

    def __init__(self):
        self.proc = None
        self.errfile = None
        self.returncode = None
        self._err_from = 0

    def _start(self):
        self.close()
        self.errfile = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(worker_command() + ["serve", str(os.getpid())],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.errfile, text=True)
        try:
            # started while this process keeps off the measuring CPU: the
            # host (and every child it forks) may still use every CPU
            os.sched_setaffinity(self.proc.pid, _START_CPUS)
        except OSError:
            pass

    def submit(self, job):
        """Send one job; yield its messages (lines) until its child exits.
        returncode is then the child's exit status (negative: a signal)."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.errfile.seek(0, os.SEEK_END)
        self._err_from = self.errfile.tell()
        self.returncode = None
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass                      # the host died: its stdout ends, and says how
        yield from self.remaining()

    def remaining(self):
        """The current job's messages not yet read (after stop(): up to EOF)."""
        for line in self.proc.stdout:
            if line.startswith('{"type": "exit"'):
                self.returncode = json.loads(line)["code"]
                return
            yield line
        self.returncode = self.proc.wait()      # the host itself ended
        if self.returncode == 0:
            self.returncode = 1

    def stderr_tail(self):
        """What the current job's processes wrote to stderr (the last 2000 characters)."""
        self.errfile.seek(self._err_from)
        return self.errfile.read()[-2000:].strip()

    def stop(self):
        """End the host and, with it, the child measuring (Ctrl-C, an error)."""
        if self.proc is not None:
            _stop(self.proc)

    def close(self):
        if self.proc is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            _stop(self.proc, grace=5)
            self.proc.stdout.close()
            self.proc = None
        if self.errfile is not None:
            self.errfile.close()
            self.errfile = None


_HOST = None


def worker_host():
    """This process's WorkerHost (one for every run it measures)."""
    global _HOST
    if _HOST is None:
        _HOST = WorkerHost()
        atexit.register(_HOST.close)
    return _HOST


def _stop(proc, grace=0):
    """End proc: after `grace` seconds to end by itself, SIGTERM, then SIGKILL."""
    if grace:
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
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
