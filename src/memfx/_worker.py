"""The measuring child process (as pyperf does): a crash in native code or a
Ctrl-C cannot take the CLI or the store down with it.

Protocol: one JSON job on stdin; JSON lines on stdout:
  {"type": "info", ...}            once, after setup
  {"type": "plan", "cells": n}     cells to measure (may grow after refinement)
  {"type": "samples", "samples": [...], "cell": i, "label": "..."}
  {"type": "error", "message": "...", "kind": "..."}
  {"type": "done"}
"""
from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from collections import OrderedDict

from .errors import MemfxError


def group_cells(points):
    """Points that differ only by arm form one cell; arms are interleaved inside it."""
    cells = OrderedDict()
    for p in points:
        cells.setdefault(json.dumps(p.params, sort_keys=True), []).append(p)
    return list(cells.values())


def measure_cell(exp, cell, params, lab, rng):
    """Samples of every arm of one cell, arms interleaved in shuffled order
    (A B B A ...) so that drift hits them alike."""
    trials = []
    for point in cell:
        trial = exp.prepare(point, params, lab)
        if trial.warmup:
            lab.warm(trial, trial.warmup)
        trials.append((point, trial, lab.calibrate(trial)))
    cpt_before, spread_before = lab.cycles_per_tick()
    records = []
    want = params["samples"]
    accepted = {id(t): 0 for _, t, _ in trials}
    for attempt in range(want * 2):
        pending = [x for x in trials if accepted[id(x[1])] < want]
        if not pending:   # rejected samples are retaken, up to twice the planned rounds
            break
        rng.shuffle(pending)
        for point, trial, count in pending:
            lengths = [count, 2 * count] if trial.difference and trial.metric == "time" else [count]
            rng.shuffle(lengths)
            ok = True
            for length in lengths:
                rec = lab.sample(trial, length, cpt_before)
                rec.update(arm=point.arm, point=point.params)
                records.append(rec)
                ok = ok and not rec["rejected"]
            if ok:
                accepted[id(trial)] += 1
    cpt_after, spread_after = lab.cycles_per_tick()
    drift = abs(cpt_after - cpt_before) / cpt_before
    for rec in records:
        rec["counters"].update(cycles_per_tick=cpt_before, calibration_drift=drift,
                               calibration_spread=max(spread_before, spread_after))
    lab.release()
    return records


def _label(cell):
    return ", ".join(f"{k}={v}" for k, v in cell[0].params.items())


def measure(job, emit):
    import random

    from ._lab import Lab
    from .experiments import get_experiment
    from .results import RunData, build_points

    exp = get_experiment(job["experiment"])
    params, machine = job["params"], job["machine"]
    lab = Lab(cpu=params["cpu"], seed=params["seed"], min_sample_ms=params["min_sample_ms"])
    emit({"type": "info", "pid": os.getpid(), "cpu": lab.cpu, "tsc_hz": lab.tsc_hz,
          "counters": [n for _, names in lab.perf.groups for n in names],
          "perf_notes": lab.perf.notes})
    exp.verify(lab, params)
    rng = random.Random(params["seed"])
    cells = group_cells(exp.plan(params, machine))
    emit({"type": "plan", "cells": len(cells)})
    measured = []
    i = 0
    while i < len(cells):
        recs = measure_cell(exp, cells[i], params, lab, rng)
        measured.extend(recs)
        emit({"type": "samples", "samples": recs, "cell": i, "label": _label(cells[i])})
        i += 1
        if i == len(cells) and hasattr(exp, "refine") and not job.get("refined"):
            job["refined"] = True
            data = RunData(exp.name, params, machine,
                           build_points([r for r in measured]), measured)
            extra = group_cells(exp.refine(data, params, machine))
            if extra:
                cells.extend(extra)
                emit({"type": "plan", "cells": len(cells)})
    lab.perf.close()


def main():
    # Ctrl-C reaches the whole process group; the parent decides what to keep.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = sys.stdout

    def emit(msg):
        out.write(json.dumps(msg) + "\n")
        out.flush()

    try:
        job = json.loads(sys.stdin.read())
        measure(job, emit)
    except MemfxError as e:
        emit({"type": "error", "kind": type(e).__name__, "message": str(e)})
        return 1
    except Exception as e:  # report, don't hide: the run is marked failed
        emit({"type": "error", "kind": type(e).__name__, "message": f"{type(e).__name__}: {e}",
              "traceback": traceback.format_exc()})
        return 1
    emit({"type": "done"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
