"""What the advice modules share: the statistics of a check (paired
variants, interleaved rounds, keep-or-advise), the pinned child process,
the newest complete run of an experiment, and printing to a console."""
from __future__ import annotations

import math
import os
import random

import numpy as np

from . import findings as fnd
from . import stats
from .units import format_change, format_size, signed_percent


# ---- statistics of a check -------------------------------------------------------

def compare_variants(current, advised, affected=None, n_boot=2000, seed=0):
    """Per size: ratio advised/current of medians with a bootstrap CI (the
    samples are per-process medians); overall: geometric mean of the ratios
    over the affected sizes with a joint bootstrap CI and the effect verdict.
    current/advised: {size: [ns, ...]}."""
    sizes = sorted(set(current) & set(advised))
    affected = sizes if affected is None else [s for s in sizes if s in set(affected)]
    conf = fnd.threshold("ci_level")
    per_size = []
    for s in sizes:
        r = stats.ratio_of_medians(advised[s], current[s], confidence=conf, n_boot=n_boot, seed=seed)
        per_size.append({"size": s, "current_ns": float(np.median(current[s])),
                         "advised_ns": float(np.median(advised[s])),
                         "ratio": r["ratio"], "ci_low": r["ci_low"], "ci_high": r["ci_high"],
                         "gain": 1.0 - r["ratio"], "affected": s in affected,
                         "n_current": r["n_b"], "n_advised": r["n_a"]})
    overall = {"sizes": affected, "ratio": None, "ci_low": None, "ci_high": None,
               "gain": None, "verdict": fnd.INCONCLUSIVE}
    if affected:
        k = len(affected)
        point = sum(math.log(np.median(advised[s]) / np.median(current[s])) for s in affected)
        logs = stats.boot_mean_log_ratio([advised[s] for s in affected],
                                         [current[s] for s in affected],
                                         n_boot, np.random.default_rng(seed))
        lo, hi = stats.percentile_interval(logs, conf)
        ratio = math.exp(point / k)
        n_a = min(len(advised[s]) for s in affected)
        n_b = min(len(current[s]) for s in affected)
        overall.update(ratio=ratio, ci_low=math.exp(lo), ci_high=math.exp(hi), gain=1.0 - ratio,
                       n_current=n_b, n_advised=n_a,
                       verdict=fnd.effect_verdict(ratio, math.exp(lo), math.exp(hi), n_a, n_b))
    return {"per_size": per_size, "overall": overall}


def decide(overall):
    """("advise" | "keep", reason) from a check's overall comparison: only a
    detected speedup is advised; slower, no difference, or too uncertain
    keeps the default."""
    ratio, verdict = overall.get("ratio"), overall.get("verdict")
    if ratio is None:
        return "keep", "nothing was measured where the advice changes anything"
    ci = format_change(1 - ratio, 1 - overall['ci_high'], 1 - overall['ci_low'])
    if verdict == fnd.DETECTED and ratio < 1.0:
        return "advise", f"measured faster: gain {ci}"
    if verdict == fnd.DETECTED:
        return "keep", f"measured slower: gain {ci}"
    if verdict == fnd.NOT_DETECTED:
        return "keep", f"no measurable difference: gain {ci}"
    return "keep", f"inconclusive (CI too wide to call): gain {ci}"


def slower_sizes(per_size):
    """Affected sizes where the advice measured slower beyond its CI."""
    return [{"size": r["size"], "gain": r["gain"]} for r in per_size
            if r.get("affected", True) and r["ci_low"] is not None and r["ci_low"] > 1.0]


def _with_losses(reason, per_size):
    worse = slower_sizes(per_size)
    if not worse:
        return reason
    return reason + "; slower at " + ", ".join(f"{format_size(w['size'])} ({signed_percent(w['gain'])})" for w in worse)


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


# ---- shared by the advice modules -----------------------------------------------

def newest_complete(store, experiment):
    for r in store.runs(experiment=experiment):
        if r["status"] == "complete":
            return r
    return None


def _print(console, *objects, **kw):
    # emoji=False: rich would turn the ":-1:" of a strategy string into an emoji.
    console.print(*objects, emoji=False, **kw)
