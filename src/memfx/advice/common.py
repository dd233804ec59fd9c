"""What the advice modules share: the statistics of a check (paired
variants, interleaved rounds, keep-or-advise), the pinned child process,
the newest complete run of an experiment, and printing to a console."""
from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys

import numpy as np

from ..model import findings as fnd
from ..model import stats
from ..model.errors import MemfxError
from ..model.units import format_change, format_size, signed_percent

# ---- statistics of a check -------------------------------------------------------

# A check's size classes: sizes within a factor of 2**SIZE_CLASS_BITS of each
# other (1-7 B, 8-63 B, 64-511 B, ...).  A setting is advised only when it is
# faster in every class it changes: a mean over all of them hid a loss at
# 384 KiB (-47.7 %) behind gains below.
SIZE_CLASS_BITS = 3


def size_class(size):
    """(first, last) byte count of the size class holding `size`."""
    k = (max(int(size), 1).bit_length() - 1) // SIZE_CLASS_BITS
    return 1 << (SIZE_CLASS_BITS * k), (1 << (SIZE_CLASS_BITS * (k + 1))) - 1


def log_gain(advised, current, n_boot=2000, seed=0, confidence=None):
    """Ratio advised/current and gain (current/advised - 1) over sizes, with
    their CIs: the mean over sizes of log(median advised / median current)
    and its bootstrap (stats.boot_mean_log_ratio), exponentiated -- a gain
    is never below -100 %.  advised/current: one list of values per size."""
    conf = fnd.threshold("ci_level") if confidence is None else confidence
    k = len(advised)
    point = sum(math.log(np.median(a) / np.median(c)) for a, c in zip(advised, current)) / k
    logs = stats.boot_mean_log_ratio(advised, current, n_boot, np.random.default_rng(seed))
    lo, hi = stats.percentile_interval(logs, conf)
    return {"ratio": math.exp(point), "ci_low": math.exp(lo), "ci_high": math.exp(hi),
            "gain": math.expm1(-point), "gain_ci_low": math.expm1(-hi),
            "gain_ci_high": math.expm1(-lo),
            "n_current": min(len(c) for c in current), "n_advised": min(len(a) for a in advised)}


def compare_variants(current, advised, affected=None, n_boot=2000, seed=0):
    """Per size: ratio advised/current of medians and the gain, with CIs
    (log_gain; the samples are per-process medians); per size class and
    overall: the same over the affected sizes (a joint bootstrap), overall
    with the effect verdict.  current/advised: {size: [ns, ...]}."""
    sizes = sorted(set(current) & set(advised))
    affected = sizes if affected is None else [s for s in sizes if s in set(affected)]
    per_size = []
    for s in sizes:
        g = log_gain([advised[s]], [current[s]], n_boot, seed)
        per_size.append({"size": s, "current_ns": float(np.median(current[s])),
                         "advised_ns": float(np.median(advised[s])), **g,
                         "affected": s in affected})
    classes = []
    for s in affected:
        lo, hi = size_class(s)
        if not classes or classes[-1]["min_size"] != lo:
            classes.append({"min_size": lo, "max_size": hi, "sizes": []})
        classes[-1]["sizes"].append(s)
    for c in classes:
        c.update(log_gain([advised[s] for s in c["sizes"]], [current[s] for s in c["sizes"]],
                          n_boot, seed))
    overall = {"sizes": affected, "ratio": None, "ci_low": None, "ci_high": None,
               "gain": None, "gain_ci_low": None, "gain_ci_high": None,
               "verdict": fnd.INCONCLUSIVE}
    if affected:
        g = log_gain([advised[s] for s in affected], [current[s] for s in affected], n_boot, seed)
        overall.update(g, verdict=fnd.effect_verdict(g["ratio"], g["ci_low"], g["ci_high"],
                                                      g["n_advised"], g["n_current"]))
    return {"per_size": per_size, "classes": classes, "overall": overall}


def gain_text(r):
    """'+8.7% [+5.3%, +12.4%]': the gain of a check row (per size, class or
    overall) with its CI."""
    return format_change(r.get("gain"), r.get("gain_ci_low"), r.get("gain_ci_high"))


def _class_text(c):
    return f"{format_size(c['min_size'])}–{format_size(c['max_size'])}"


def decide(overall, per_size=None, classes=None):
    """("advise" | "keep", reason) from a check.  Advised only when the
    overall speedup is detected, no size it changes measured slower (the
    gain's CI wholly below zero), and the gain's CI clears zero in every
    size class it changes (compare_variants' classes); slower, no
    difference, or too uncertain keeps the default."""
    ratio, verdict = overall.get("ratio"), overall.get("verdict")
    if ratio is None:
        return "keep", "nothing was measured where the advice changes anything"
    ci = gain_text(overall)
    worse = slower_sizes(per_size or [])
    if worse:
        at = ", ".join(f"{format_size(w['size'])} ({signed_percent(w['gain'])})" for w in worse)
        return "keep", f"measured slower at {at}, where it changes the code (overall gain {ci})"
    if verdict == fnd.DETECTED and ratio > 1.0:
        return "keep", f"measured slower: gain {ci}"
    if verdict == fnd.NOT_DETECTED:
        return "keep", f"no measurable difference: gain {ci}"
    if verdict != fnd.DETECTED:
        return "keep", f"inconclusive (CI too wide to call): gain {ci}"
    unclear = [c for c in classes or [] if not (c.get("gain_ci_low") or 0) > 0]
    if unclear:
        return "keep", (f"faster overall (gain {ci}) but not in every size class it changes: "
                        + "; ".join(f"{_class_text(c)} {gain_text(c)}" for c in unclear))
    return "advise", f"measured faster: gain {ci}" + (
        f", its CI above zero in each of the {len(classes)} size classes it changes"
        if len(classes or []) > 1 else "")


def slower_sizes(per_size):
    """Affected sizes where the advice measured slower beyond its CI."""
    return [{"size": r["size"], "gain": r["gain"]} for r in per_size
            if r.get("affected", True) and r["ci_low"] is not None and r["ci_low"] > 1.0]


def _with_losses(reason, per_size):
    worse = slower_sizes(per_size)
    if not worse or "slower at" in reason:
        return reason
    return reason + "; slower at " + ", ".join(f"{format_size(w['size'])} ({signed_percent(w['gain'])})" for w in worse)


# ---- does the advice hold across replicas? -----------------------------------------

def replica_disagreement(sizes, pooled_pick, replica_picks, cost, band=None):
    """Where a run's replicas, each analysed alone, would advise differently
    from the pooled samples, and what that costs.  The advice holds when
    every replica picks the same at every size, or where they differ the
    picks' pooled costs are within the no-effect band of each other (either
    pick is as good); otherwise it is unstable.  pooled_pick(size) and each
    of replica_picks(size) -> a choice; cost(size, choice) -> its pooled
    median (None: not measured, never within the band).
    Returns {"agree", "stable", "band", "spans": [{"min_size", "max_size",
    "sizes", "picks", "cost_ratio"}]} (spans of consecutive differing sizes)."""
    band = fnd.threshold("effect_band") if band is None else band
    spans, last = [], None
    for i, s in enumerate(sorted(sizes)):
        picks = {pooled_pick(s)} | {f(s) for f in replica_picks}
        if len(picks) < 2:
            continue
        costs = [cost(s, p) for p in picks]
        ratio = (max(costs) / min(costs) if all(c is not None and c > 0 for c in costs)
                 else math.inf)
        if spans and last == i - 1:
            sp = spans[-1]
            sp.update(max_size=s, sizes=sp["sizes"] + 1, picks=sorted(set(sp["picks"]) | picks),
                      cost_ratio=max(sp["cost_ratio"], ratio))
        else:
            spans.append({"min_size": s, "max_size": s, "sizes": 1, "picks": sorted(picks),
                          "cost_ratio": ratio})
        last = i
    stable = all(sp["cost_ratio"] <= 1 + band for sp in spans)
    return {"agree": not spans, "stable": stable, "band": band, "spans": spans}


def voters_text(n_replicas, n_earlier=0):
    """Who voted on a piece of advice: "3 replicas", or "3 replicas and 2
    earlier runs on this machine" when the machine's history voted too."""
    who = f"{n_replicas} replica{'' if n_replicas == 1 else 's'}"
    if n_earlier:
        who += f" and {n_earlier} earlier run{'' if n_earlier == 1 else 's'} on this machine"
    return who


def disagreement_text(d, n_replicas, what="pick", n_earlier=0):
    """The sentence for replica_disagreement's result (``n_earlier`` of the
    voters are earlier runs of this machine, the rest this run's replicas)."""
    def span(sp):
        where = (format_size(sp["min_size"]) if sp["min_size"] == sp["max_size"] else
                 f"{format_size(sp['min_size'])}–{format_size(sp['max_size'])}")
        cost = "unmeasured" if math.isinf(sp["cost_ratio"]) else f"x{sp['cost_ratio']:.2f}"
        return f"{where} ({' vs '.join(map(str, sp['picks']))}: {cost})"
    who = voters_text(n_replicas, n_earlier)
    if d["agree"]:
        return f"every one of the {who} gives the same advice"
    band = f"the ±{d['band']:.0%} no-effect band"
    if d["stable"]:
        return (f"the {who} differ only where their {what}s cost within {band} "
                f"on the pooled data: " + "; ".join(span(sp) for sp in d["spans"]))
    costly = [sp for sp in d["spans"] if sp["cost_ratio"] > 1 + d["band"]]
    return (f"not advised: unstable: the {who} disagree at "
            + "; ".join(span(sp) for sp in costly) + f", beyond {band} on the pooled data")


def _interleave(variants, rounds, seed, run_one, on_round=None):
    """Run each variant once per round, in a shuffled order per round, so that
    drift hits all alike.  run_one(variant) -> {size: [ns]}; each process
    contributes the median of its samples.  Returns {variant: {size: [medians]}}."""
    rng = random.Random(seed)
    out = {v: {} for v in variants}
    for r in range(rounds):
        order = list(variants)
        rng.shuffle(order)
        for v in order:
            for size, vals in run_one(v).items():
                if vals:
                    out[v].setdefault(int(size), []).append(float(np.median(vals)))
        if on_round:
            on_round(r + 1, rounds)
    return out


def _child_cpu():
    allowed = sorted(os.sched_getaffinity(0))
    return allowed[-1]


def _pinned(cpu):
    def pin():
        os.sched_setaffinity(0, {cpu})
    return pin


def run_child(spec, env=None, cpu=None, timeout=300, what="check"):
    """{size: [ns per call]} from advice's child process (child.py: the
    lab's harness and the core's timed loop, in a fresh interpreter pinned
    to ``cpu``), for ``spec`` (child.py's fields; the core's and the
    harness's paths are added here).  A child that fails, or says why it
    could not measure, raises MemfxError."""
    from ..lab.core import core_file, harness_file
    from . import child
    spec = dict(spec, core=core_file(), harness=harness_file())
    cpu = _child_cpu() if cpu is None else cpu
    # -I: the current directory is not on the child's sys.path, so a json.py
    # there cannot run inside it; -S: no site-packages (standard library only)
    try:
        proc = subprocess.run([sys.executable, "-I", "-S", child.__file__, json.dumps(spec)],
                              capture_output=True, text=True, env=env, timeout=timeout,
                              preexec_fn=_pinned(cpu))
    except subprocess.TimeoutExpired:
        raise MemfxError(f"{what} child did not finish in {timeout:g} s") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise MemfxError(f"{what} child failed: {tail}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    if "error" in data:
        raise MemfxError(data["error"])
    return {int(k): v for k, v in data.items()}


# ---- shared by the advice modules -----------------------------------------------

def newest_complete(store, experiment):
    for r in store.runs(experiment=experiment):
        if r["status"] == "complete":
            return r
    return None


def _print(console, *objects, **kw):
    # emoji=False: rich would turn the ":-1:" of a strategy string into an emoji.
    console.print(*objects, emoji=False, **kw)
