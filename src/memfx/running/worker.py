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
import time
import traceback
from collections import OrderedDict

from ..model.errors import MemfxError


def group_cells(points):
    """Points that differ only by arm form one cell; arms are interleaved inside it."""
    cells = OrderedDict()
    for p in points:
        cells.setdefault(json.dumps(p.params, sort_keys=True), []).append(p)
    return list(cells.values())


# Steady state before every timed sample (issue 16).  Interleaving arms
# sample by sample left the working set of one arm cold at every switch: a
# 1 GiB random chase after the sequential arm (which sweeps the whole L3)
# needs ~100 ms of loads before its page-table lines are back in the caches
# (docs/machine-notes.md, "The first visit of a stream"), so 1 ms samples
# taken right after a switch reported ~1.5x the steady latency.
# Now every visit of an arm (the first, and every one after another arm or
# point ran) starts with a re-warm, and the samples of one visit run back to
# back, so each sample is taken in the state the previous one left.
#
# The re-warm (settle) runs timed blocks that double in length, from a
# quarter of a sample up to SETTLE_MAX_BLOCK samples, until
#   - at least one pass over the working set was made (Trial.warmup
#     iterations: a chase over every element -- the latency experiment caps it
#     at 2^20 loads, twice the lines of a 32 MiB L3 --, one fill or copy of
#     the region), and
#   - the last block was not faster than the one before by more than
#     SETTLE_TOLERANCE: warming only ever makes a kernel faster, so a block
#     that is no faster than its predecessor means the transient has died
#     out (or is below the noise).  A rejected (preempted) block restarts
#     the comparison.
# The time it may take is bounded by a budget: SETTLE_BUDGET_SAMPLES sample
# lengths or 3 passes, whichever is longer, and never more than
# SETTLE_MAX_SECONDS (less after a rejected sample, see below).  A transient cannot outlast refilling what the pass
# touches many times over; a busy machine that keeps preempting the blocks
# just ends the settle early (recorded as settled = 0 in every sample).
SETTLE_TOLERANCE = 0.02
SETTLE_MAX_SECONDS = 0.5
SETTLE_BUDGET_SAMPLES = 8
# The re-warm after a rejected sample is lighter: on a busy machine half the
# samples can be preempted, and three passes over a 64 MiB random chain
# (~0.5 s) after each would triple a run.  A preempting task rarely evicts
# more than what it touched in its time slice.
SETTLE_AFTER_PREEMPTION_SAMPLES = 2
SETTLE_AFTER_PREEMPTION_MAX_SECONDS = 0.05
SETTLE_FIRST_BLOCK = 0.25      # of a calibrated sample
# A chunked stream's first visit (its region fresh to it) is steady only when
# its newest pass is no faster than either of the two before, within up to
# this many passes (and SETTLE_MAX_SECONDS): a host's last-level cache can
# take a fresh set in over several passes, and a settle that compared one
# pass with the last ended inside that ramp, and so did the samples.  Only
# a stream some cache could take in ramps so: one spanning DRAM_FROM
# (levels.py: 2x) times the last-level cache or more settles its first visit
# like any other (docs/machine-notes.md, "The first visit of a stream").
SETTLE_FRESH_STREAM_PASSES = 16
SETTLE_FRESH_STREAM_LAG = 2
SETTLE_MAX_BLOCK = 2           # samples: longer blocks are mostly preempted on a busy machine
# The warm-up pass of a chunked stream that visits first, when nothing ran
# between them (a cell of one arm: most bandwidth cells), is the settle's
# first pass: its time per iteration is the first one compared, and it
# counts against the budget.  Run again as a block of its own, it was one
# more pass per cell, and a DRAM cell's settle then ended on its budget
# (docs/machine-notes.md, "The first visit of a stream").
# Streams only: their blocks are whole passes, compared pass with pass.  A
# block of a quarter sample right after a whole warm-up pass looks faster
# than the pass's average, and the next one, as short, not, while a slow
# transient is still well above steady: a sample 11 % above it in
# tests/test_protocol.py's cold start.
# Arms of a cell that differ only in their data (fill's value arms) share a
# calibration when one call of the first lasted this many samples: one call
# is then a sample for each of them, even one several times faster, and the
# warm-up call is skipped (the first visit's settle makes a whole pass): a
# DRAM fill's call is a tenth of a second or more, and warming each arm's
# only to learn this cost seconds a replica.
SHARED_CALIBRATION_SAMPLES = 10
# A visit after the first has the arm's own steady time per iteration from
# its last visit's samples: a block made after the pass that lies within
# SETTLE_TOLERANCE of it, either way, is steady (a cold block is slower, a
# block still warming is faster).  Compared only with the block before, a
# re-warm of a DRAM fill took two whole fills per visit (0.24 s at 960 MiB).
# Arms are visited in an A B B A order (shuffled arms, then reversed): a
# linear drift hits every arm alike, and an arm is switched (and re-warmed)
# at most 2 * arms - 1 times per cell instead of at every sample.
VISITS_PER_ARM = 2
# Rejected samples are retaken (up to twice the planned samples) for at most
# RETAKE_SHARE of the time the planned visits took, or RETAKE_MIN_SECONDS: on a machine
# whose CPUs are all busy a cell's retakes are preempted as often as its
# samples, and without a time bound a cell could retake its whole plan
# twice over.  A cell that stops short ends with what it has; its points
# read noisy (rejected share) and their CIs widen with fewer samples.
RETAKE_SHARE = 0.5
RETAKE_MIN_SECONDS = 0.5


def settle(lab, trial, count, cycles_per_tick, pass_iters=0, tolerance=SETTLE_TOLERANCE,
           max_seconds=SETTLE_MAX_SECONDS, first_block=SETTLE_FIRST_BLOCK,
           budget_samples=SETTLE_BUDGET_SAMPLES, whole_pass=False, fresh=False,
           warmed_ns_per_iter=None, steady_ns_per_iter=None):
    """Run `trial` in timed blocks (not recorded) until it is in steady state
    (see above).  Returns {settle_blocks, settle_ms, settled} (settled 0/1:
    0 = the time budget ended it).  whole_pass: the budget is never shorter
    than one pass (a visit's re-warm: arms that share a region, as fill's
    value arms do, rely on it to give the region their value).  fresh: the
    trial's first visit; a chunked stream then waits for a pass no faster
    than the two before it (SETTLE_FRESH_STREAM_*).  warmed_ns_per_iter:
    the trial's warm-up pass ran just before, nothing in between, at this
    many ns per iteration; a chunked stream's first pass (see above).
    steady_ns_per_iter: the arm's time per iteration in its last visit."""
    block = max(1, int(count * first_block))
    clean = []                # ns per iteration of the clean blocks since the last rejection
    done, spent_ns, blocks = 0, 0.0, 0
    if warmed_ns_per_iter and pass_iters and trial.chunks > 1:
        clean.append(warmed_ns_per_iter)
        done, spent_ns = pass_iters, warmed_ns_per_iter * pass_iters
    lag, passes_budget = 1, 3
    if trial.chunks > 1 and fresh:
        lag, passes_budget = SETTLE_FRESH_STREAM_LAG, SETTLE_FRESH_STREAM_PASSES
    if trial.chunks > 1:
        # a stream in chunks (Trial.chunks) is compared pass by pass: blocks
        # of a few chunks each look steady inside a ramp that lasts tens of
        # passes (docs/machine-notes.md, "The first visit of a stream")
        block = max(block, pass_iters)
    budget_ns = max_seconds * 1e9

    def budget_for(per_iter):
        b = min(max_seconds * 1e9,
                max(budget_samples * count, passes_budget * pass_iters) * per_iter)
        return max(b, 1.2 * pass_iters * per_iter) if whole_pass else b

    per_iter = None
    if clean:                 # the warm-up pass just before
        per_iter = clean[-1]
        budget_ns = budget_for(per_iter)
    while True:
        ends_ns = spent_ns + block * per_iter if per_iter is not None else 0.0
        if per_iter is not None and done >= pass_iters and (
                ends_ns > max_seconds * 1e9
                or (len(clean) < lag and not steady_ns_per_iter and ends_ns > budget_ns)):
            # Once a pass is made, no block is started that would end past
            # the cap (max_seconds: only the first pass may outlast it), nor
            # one that would end past the budget and cannot be found steady
            # (too few clean blocks before it to compare): it could only end
            # the settle unsettled, later.  A 960 MiB random read's warm-up
            # pass (0.5 s) alone was the cap, and one more pass was 1 s of
            # every bandwidth replica, for samples of 20 ms.
            return {"settle_blocks": blocks, "settle_ms": round(spent_ns / 1e6, 3),
                    "settled": 0, "ns_per_iter": per_iter}
        rec = lab.sample(trial, block, cycles_per_tick)
        blocks += 1
        spent_ns += rec["ns"]
        done += block
        if rec["rejected"]:
            # another task ran here and may have evicted some of the working
            # set: the comparison starts again (`lag` clean blocks after this
            # one) while the pass and the budget go on.  A preempting task
            # rarely evicts more than it touched in its slice (so the re-warm
            # after a rejected sample is light too: SETTLE_AFTER_PREEMPTION_*).
            # Restarting the pass, a loaded chase (1.3 ms blocks, 5 % of them
            # switched out beside the loader) finished its 2^18-load pass in
            # 3 % of visits: each ran to its budget, 0.24 s, 3 times a replica.
            per_iter = None
            clean = []
        else:
            per_iter = rec["ns"] / block
            budget_ns = budget_for(per_iter)
        passed = done >= pass_iters
        # no faster than each of the `lag` blocks before it (a block is a
        # whole pass or more once done >= pass_iters)
        steady = (per_iter is not None and len(clean) >= lag
                  and per_iter >= max(clean[-lag:]) * (1 - tolerance))
        if per_iter is not None and steady_ns_per_iter:
            steady = steady or abs(per_iter / steady_ns_per_iter - 1) <= tolerance
        if (passed and steady) or spent_ns >= budget_ns:
            return {"settle_blocks": blocks, "settle_ms": round(spent_ns / 1e6, 3),
                    "settled": int(passed and steady),
                    "ns_per_iter": per_iter if per_iter is not None else
                    (clean[-1] if clean else None)}
        # a rejected (preempted) block is repeated, not grown, and starts the
        # comparison afresh: what ran meanwhile may have evicted the working set
        if per_iter is not None:
            clean.append(per_iter)
        # a block of a whole pass or more is long enough: one more like it
        # tells whether the pass left the kernel in steady state (a DRAM
        # fill of one call per pass took 1 + 2 passes per visit)
        if per_iter is not None and block < SETTLE_MAX_BLOCK * count and block < pass_iters:
            block *= 2


# Fewer samples than `samples` for a point whose samples are long (the
# arm_seconds parameter), never fewer than this.
MIN_SAMPLES = 3


def samples_within(samples, arm_seconds, sample_ns):
    """How many samples a point takes: `samples`, or fewer when that many
    would last more than arm_seconds (sample_ns: one sample's expected
    duration, from its settle's last block; None/0 = unknown)."""
    if not arm_seconds or not sample_ns or samples <= MIN_SAMPLES:
        return samples
    return max(MIN_SAMPLES, min(samples, int(arm_seconds * 1e9 // sample_ns)))


def visit_order(arms, rng, visits=VISITS_PER_ARM):
    """Indices of the arms in visiting order: shuffled, then reversed, ... (A B B A)."""
    order = list(range(arms))
    rng.shuffle(order)
    out = []
    for v in range(visits):
        out.extend(order if v % 2 == 0 else order[::-1])
    return out


def stream_span(trial):
    """Bytes a chunked stream walks through per region (chunks x chunk);
    0 for a trial that is not one."""
    return trial.size * trial.chunks if trial.chunks > 1 else 0


def measure_cell(exp, cell, params, lab, rng, uncacheable_from=None):
    """Samples of every arm of one cell.  Arms are visited A B B A (shuffled)
    so that drift hits them alike; every visit that follows another arm is
    re-warmed to steady state first (settle), and a visit's samples run back
    to back.  uncacheable_from: bytes (DRAM_FROM x the last-level cache) from
    which a fresh stream cannot ramp (SETTLE_FRESH_STREAM_*); None = any may."""
    from ..lab.busy import busy_between, cpu_snapshot
    busy_before = cpu_snapshot()
    trials = []
    warmed = None              # the last trial's warm-up ns per iteration
    one_call = set()           # trials whose single call lasts SHARED_CALIBRATION_SAMPLES
    sample_ns = (getattr(lab, "min_sample_ms", 0) or 0) * 1e6
    for point in cell:
        trial = exp.prepare(point, params, lab)
        shape = (trial.kernel, trial.size, trial.chunks, trial.warmup, trial.count)
        if shape in one_call:
            # a sibling arm's call of the same shape lasted many samples: one
            # call is a sample here too, and the first visit's settle warms
            warmed = None
            trials.append((point, trial, 1))
            continue
        warmed = lab.warm(trial, trial.warmup) if trial.warmup else None
        count = lab.calibrate(trial)
        if count == 1 and warmed and sample_ns \
                and warmed >= SHARED_CALIBRATION_SAMPLES * sample_ns:
            one_call.add(shape)
        trials.append((point, trial, count))
    cpt_before, spread_before = lab.cycles_per_tick()
    records = []
    want = params["samples"]
    wanted = [want] * len(trials)     # per trial: fewer when its samples are long (arm_seconds)
    accepted = [0] * len(trials)
    attempts = [0] * len(trials)
    planned = [0] * len(trials)
    order = visit_order(len(trials), rng)
    visits = {i: order.count(i) for i in range(len(trials))}
    last = None                # the trial that ran last: no re-warm without a switch
    warm_state = {}
    steady_speed = {}          # per trial: ns per iteration of its last visit's samples

    def take(i, quota=None, visits_after=0, deadline=None):
        """Samples of trial i; quota None = its share of what is still
        planned, `visits_after` more visits of it to come."""
        nonlocal last
        point, trial, count = trials[i]
        if last != i:
            # the last-prepared trial visiting first: its warm-up just ran
            first = not warm_state and i == len(trials) - 1
            fresh = i not in warm_state and not (
                uncacheable_from and stream_span(trial) >= uncacheable_from)
            state = settle(lab, trial, count, cpt_before, trial.warmup or 0,
                           whole_pass=True, fresh=fresh,
                           warmed_ns_per_iter=warmed if first else None,
                           steady_ns_per_iter=steady_speed.get(i))
            ns_per_iter = state.pop("ns_per_iter", None)
            if i not in warm_state:
                wanted[i] = samples_within(want, params.get("arm_seconds", 0),
                                           ns_per_iter and ns_per_iter * count)
            warm_state[i] = state
            last = i
        if quota is None:
            quota = max(0, wanted[i] - planned[i]) // (visits_after + 1) if visits_after \
                else max(0, wanted[i] - planned[i])
            planned[i] += quota
        disturbed = False
        visit_ns, visit_iters = 0.0, 0
        for _ in range(quota):
            if deadline is not None and time.monotonic() > deadline:
                break
            if disturbed:
                # a rejected sample means another task ran here and may have
                # evicted this arm's lines and translations: settle again
                settle(lab, trial, count, cpt_before, trial.warmup or 0,
                       budget_samples=SETTLE_AFTER_PREEMPTION_SAMPLES,
                       max_seconds=SETTLE_AFTER_PREEMPTION_MAX_SECONDS)
                last = i
            attempts[i] += 1
            lengths = [count, 2 * count] if trial.difference and trial.metric == "time" else [count]
            rng.shuffle(lengths)
            ok = True
            for length in lengths:
                rec = lab.sample(trial, length, cpt_before)
                rec.update(arm=point.arm, point=point.params)
                rec["counters"].update(warm_state[i])
                records.append(rec)
                if rec["rejected"]:
                    ok = False     # the pair's other length would run cold: retake both
                    break
            if ok:
                accepted[i] += 1
                for rec in records[-len(lengths):]:
                    visit_ns += rec["ns"]
                    visit_iters += rec["length"]
            disturbed = not ok
            if disturbed:
                last = None        # whoever comes next (this arm too) re-warms
        if visit_iters:
            steady_speed[i] = visit_ns / visit_iters

    started = time.monotonic()
    for i in order:            # the planned visits: samples split evenly
        visits[i] -= 1
        take(i, visits_after=visits[i])
    retake_until = time.monotonic() + max(RETAKE_MIN_SECONDS,
                                          RETAKE_SHARE * (time.monotonic() - started))
    retakes_cut = False
    while True:                # rejected samples are retaken (each retake visit re-warmed),
        short = [i for i in range(len(trials))     # up to twice the planned samples
                 if accepted[i] < wanted[i] and attempts[i] < 2 * wanted[i]]
        if not short:
            break
        if time.monotonic() > retake_until:
            retakes_cut = True
            break
        rng.shuffle(short)
        for i in short:
            take(i, min(wanted[i] - accepted[i], 2 * wanted[i] - attempts[i]),
                 deadline=retake_until)
    cpt_after, spread_after = lab.cycles_per_tick()
    drift = abs(cpt_after - cpt_before) / cpt_before
    for rec in records:
        rec["counters"].update(cycles_per_tick=cpt_before, calibration_drift=drift,
                               calibration_spread=max(spread_before, spread_after))
    if records:
        # the cell's share of how busy the machine was: on its first record
        # only (results.busy_summary adds them up over a run)
        records[0]["counters"].update(busy_between(busy_before, cpu_snapshot()))
        # the core's speed right after the cell (Sampling.core_speed): what
        # compare reads a move of an absolute figure against
        speed = lab.core_speed()
        if speed > 0:
            records[0]["counters"]["core_read_gbps"] = round(speed, 2)
        if retakes_cut:
            records[0]["counters"]["retakes_cut"] = 1
    lab.release()
    return records


def _label(cell):
    return ", ".join(f"{k}={v}" for k, v in cell[0].params.items())


def measure(job, emit):
    import random

    from ..analysis.results import RunData, build_points
    from ..experiments import get_experiment
    from ..experiments.levels import DRAM_FROM
    from ..lab.lab import Lab
    from ..model.machine_view import Fingerprint

    exp = get_experiment(job["experiment"])
    params, machine = job["params"], job["machine"]
    # A replica is this whole process: its own seed gives it fresh chain
    # permutations, arm orders and buffer offsets, and its buffers are new
    # physical pages (issue 22).
    replica = int(job.get("replica", 0))
    seed = params["seed"] + replica
    params = dict(params, seed=seed)     # what prepare() draws its orders from
    lab = Lab(cpu=params["cpu"], seed=seed, min_sample_ms=params["min_sample_ms"])
    emit({"type": "info", "pid": os.getpid(), "cpu": lab.cpu, "tsc_hz": lab.tsc_hz,
          "counters": [n for _, names in lab.perf.groups for n in names],
          "perf_notes": lab.perf.notes})
    if replica == 0:
        # the byte-exact checks, once per run: the later replicas run the
        # same kernels of the same core on the same CPUs (they took ~3 s of
        # every quick replica: copy 1.1, fill 0.8, bandwidth 0.7)
        exp.verify(lab, params)
    rng = random.Random(seed)
    llc = Fingerprint.of(machine).llc      # none reported: any stream may ramp
    uncacheable_from = llc.size_bytes * DRAM_FROM if llc else None
    lab.llc_bytes = llc.size_bytes if llc else None
    cells = group_cells(exp.plan(params, machine))
    emit({"type": "plan", "cells": len(cells)})
    measured = []
    i = 0
    while i < len(cells):
        recs = measure_cell(exp, cells[i], params, lab, rng, uncacheable_from)
        for rec in recs:
            rec["replica"] = replica
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
    lab.close()


PR_SET_PDEATHSIG = 1      # prctl(2)


def die_with_parent(parent_pid):
    """Ask the kernel to SIGKILL this process when its parent ends (a kill -9
    of memfx must not leave a pinned worker spinning), then check the parent
    did not end before the request: a worker whose parent is already gone
    has been re-parented, and exits."""
    import ctypes
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass                 # no prctl: the parent still sees EOF and stops it
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


def run_job(job, emit):
    """Measure one job (a replica) in this process, reporting through emit;
    returns the exit status."""
    try:
        die_with_parent(job.get("parent_pid"))
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


def serve(parent_pid, emit):
    """The forking host (runner.WorkerHost): import the lab, numpy and every
    experiment once, then fork one child per job line read from stdin; the
    child measures the job as a worker started for it would, and exits;
    then {"type": "exit", "code"} follows its messages.  Each replica is
    still its own process with its own fresh buffers (they are mapped after
    the fork), without the interpreter's start and the imports: ~0.3 s per
    replica, some 45 of them in a quick survey."""
    die_with_parent(parent_pid)
    from .. import experiments  # noqa: F401
    from ..analysis import results  # noqa: F401
    from ..lab import lab as _lab  # noqa: F401  (once, for every child)
    host = os.getpid()
    for line in sys.stdin:                 # EOF: memfx closed the pipe (or ended)
        if not line.strip():
            continue
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = run_job(dict(json.loads(line), parent_pid=host), emit)
            finally:
                sys.stdout.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        emit({"type": "exit", "code": os.waitstatus_to_exitcode(status)})
    return 0


def main():
    # Ctrl-C reaches the whole process group; the parent decides what to keep.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = sys.stdout

    def emit(msg):
        out.write(json.dumps(msg) + "\n")
        out.flush()

    if sys.argv[1:2] == ["serve"]:
        return serve(int(sys.argv[2]), emit)
    try:
        job = json.loads(sys.stdin.read())    # a parent gone before writing it: EOF
    except ValueError as e:
        emit({"type": "error", "kind": "ValueError", "message": f"a bad job: {e}"})
        return 1
    return run_job(job, emit)


if __name__ == "__main__":
    sys.exit(main())
