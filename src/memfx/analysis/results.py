"""From stored samples to the result document (shared/DESIGN.md, "The result
document"): group samples into points, summarise them, let the experiment
draw its findings, add noise cautions.  Pure analysis: nothing is measured."""
from __future__ import annotations

import json
import math
import statistics
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..model import findings as fnd
from ..model import stats

if TYPE_CHECKING:
    from ..experiments.base import Experiment
    from ..model.answers import Answer, Question

# 1: findings (round 1).  2: answers, one per declared question (findings
# kept as a flat view of the answers for readers of version 1).  3: answers
# only (no "findings"); each answer says whether its value rests on what a
# VM's host shares (host_shared).  Readers keep reading 1 and 2 (the report's
# findings view of documents without answers).  4: what presentation draws
# and shows besides the answers, so that it reads documents only: the
# experiment's ``plots`` (plotspec.PlotSpec.to_dict), ``experiment_info``
# (title, question, seeds, parameters, the full preset), the machine's
# ``capabilities``, and ``source: "machine"`` on the machine's warnings.
# Readers of 1 to 3 find these in the analysis layer (documents.plots_of,
# documents.experiment_about, documents.machine_facts).
RESULT_SCHEMA_VERSION = 4


@dataclass
class RunData:
    """What an experiment's analyze() sees."""
    experiment: str
    params: Dict[str, Any]
    machine: Dict[str, Any]
    points: List[Dict[str, Any]]                 # point dicts (see build_points)
    samples: List[Dict[str, Any]] = field(default_factory=list)   # accepted samples

    def select(self, arm: Optional[str] = None, **match: Any) -> List[Dict[str, Any]]:
        """Points of one arm whose params contain every key=value given."""
        return [p for p in self.points
                if (arm is None or p["arm"] == arm)
                and all(p["params"].get(k) == v for k, v in match.items())]

    def values(self, arm: Optional[str], **match: Any) -> np.ndarray:
        """Per-sample values of the first matching point (for bootstraps)."""
        pts = self.select(arm, **match)
        return np.asarray(pts[0]["values"], float) if pts else np.array([])


def _key(sample: Dict[str, Any]) -> Tuple[str, str, str]:
    return sample["arm"], json.dumps(sample["point"], sort_keys=True), sample["metric"]


# One estimator for every point of every metric (issue 16): the median of the
# per-sample values of the longest run length, with min, p10, p90 and max from
# the same samples, so min <= p10 <= median <= p90 <= max always holds.  The
# N/2N difference of medians used to replace the median of some time points
# and not others (where its CI reached zero), and being the difference of two
# noisy medians it fell outside [min, max] in 23 of 158 points of one survey.
# With samples of >= min_sample_ms the fixed cost of a call (fences, counter
# reads: well under a microsecond) is < 0.1 % of a sample, so the per-sample
# value is not biased by it; the N/2N fit is kept as `call_overhead_ns` to
# show that, with its standard error `call_overhead_se_ns` (from the spread of
# the two lengths' samples): an intercept within two of them of zero -- or
# below zero, which no call costs -- is noise, not a fixed cost.
ESTIMATOR = "per-sample median"
# counters that say how busy the machine was over a cell (lab/busy.py: busy_between):
# on one record per cell, added up over a run, never a point's median
BUSY_PREFIX = "busy_"
# Which quantile is the "best sustained" figure: the fast tail, i.e. the low
# quantile of a time and the high quantile of a bandwidth.
BEST_LOW, BEST_HIGH = 0.10, 0.90


# A replica analysed alone gets its points' CIs from order statistics
# (stats.median_ci_ranks), not a bootstrap: they only floor the
# replica-level CI (stats.combine_replicas) and split ties, and three
# replicas analysed alone were three quarters of a survey's analysis.
REPLICA_CI = "ranks"


def build_points(samples: Sequence[Dict[str, Any]], seed: int = 0, n_boot: int = 2000,
                 ci_method: Optional[str] = "bootstrap") -> List[Dict[str, Any]]:
    """One summary per (arm, point params, metric); see ESTIMATOR.

    Each point has the typical figure (`median`, with a bootstrap CI when it
    has at least `min_ci_samples` samples), the best sustained figure (`best`:
    `p10` for times, `p90` for bandwidths; `best_quantile` names it), and
    `flags`: "bimodal" when its samples form two groups (stats.bimodal_split;
    a shared last-level cache that a neighbour sometimes takes), with the two
    groups in `modes` -- the median of such a point is not a level."""
    groups: Dict[Tuple[str, str, str], List[Dict[str, Any]]] = OrderedDict()
    rejected: Dict[Tuple[str, str, str], int] = {}
    for s in samples:
        k = _key(s)
        groups.setdefault(k, [])
        rejected.setdefault(k, 0)
        if s.get("rejected"):
            rejected[k] += 1
        else:
            groups[k].append(s)
    min_ci = fnd.threshold("min_ci_samples")
    points: List[Dict[str, Any]] = []
    for k, accepted in groups.items():
        arm, params_json, metric = k
        params = json.loads(params_json)
        base = {"arm": arm, "params": params, "metric": metric, "n": len(accepted),
                "rejected": rejected[k], "method": ESTIMATOR, "flags": []}
        if not accepted:
            base.update(unit="", median=None, min=None, max=None, mad=None, ci_low=None,
                        ci_high=None, cv=None, p10=None, p90=None, best=None, best_quantile=None,
                        cycles_est=None, counters={}, values=[])
            points.append(base)
            continue
        unit = accepted[0]["unit"]
        # Each replica (worker process) calibrates its own run lengths: its
        # longest length's samples are its values, and the point's values
        # are every replica's.
        by_replica: Dict[int, List[Dict[str, Any]]] = OrderedDict()
        for s in accepted:
            by_replica.setdefault(s.get("replica") or 0, []).append(s)
        longest: List[Dict[str, Any]] = []
        replica_values: List[List[float]] = []
        overhead: Tuple[Optional[float], Optional[float]] = (None, None)
        for replica in sorted(by_replica):
            mine = by_replica[replica]
            lengths = sorted({s["length"] for s in mine})
            chosen = [s for s in mine if s["length"] == lengths[-1]]
            longest.extend(chosen)
            replica_values.append([s["value"] for s in chosen])
            if metric.startswith("ns_per_") and len(lengths) >= 2 and overhead[0] is None:
                overhead = _call_overhead(mine, lengths[0], lengths[-1])
        values = np.array([s["value"] for s in longest], float)
        # with two or more replicas the CI is the hierarchical one: no
        # bootstrap of the pooled samples (it was discarded)
        summ = stats.summarize(values, seed=seed, n_boot=n_boot,
                               ci=ci_method if len(replica_values) < 2 else None)
        ci = (summ.ci_low, summ.ci_high)
        if len(replica_values) >= 2:      # the CI holds the spread between replicas
            ci = stats.hierarchical_ci(replica_values, confidence=fnd.threshold("ci_level"), seed=seed,
                                       n_boot=min(n_boot, 1000))
        p10, p90 = (float(q) for q in np.quantile(values, [BEST_LOW, BEST_HIGH]))
        higher_is_better = not metric.startswith("ns_per_")
        point = dict(base, unit=unit, n=len(longest), min=summ.min, median=summ.median,
                     max=summ.max, mad=summ.mad, cv=summ.cv,
                     ci_low=ci[0] if summ.n >= min_ci else None,
                     ci_high=ci[1] if summ.n >= min_ci else None,
                     p10=p10, p90=p90, best=p90 if higher_is_better else p10,
                     best_quantile="p90" if higher_is_better else "p10")
        if len(replica_values) >= 2:
            point["replicas"] = [float(np.median(g)) for g in replica_values]
        if overhead[0] is not None:       # from the first replica with two run lengths
            point["call_overhead_ns"], point["call_overhead_se_ns"] = overhead
        split = stats.bimodal_split(values, min_separation=fnd.threshold("bimodal_separation"),
                                    gap_sigmas=fnd.threshold("bimodal_gap"),
                                    min_share=fnd.threshold("bimodal_share"))
        if split:
            point["flags"].append("bimodal")
            point["modes"] = split
        point["cycles_est"] = _cycles_estimate(metric, longest, point["median"], summ.median)
        point["counters"] = _median_counters(longest)
        point["values"] = values.tolist()
        points.append(point)
    return points


def _call_overhead(samples: Sequence[Dict[str, Any]], short_len: float, long_len: float
                   ) -> Tuple[Optional[float], Optional[float]]:
    """(a, standard error of a): the fixed ns per call from the medians of two
    run lengths (t = a + b * length, so a = (L*m_S - S*m_L) / (L - S)), each
    median's standard error taken as 1.2533 * sigma / sqrt(n) with sigma =
    1.4826 * MAD (a normal sample's median); (None, None) when a length has
    fewer than two samples."""
    short = np.array([s["ns"] for s in samples if s["length"] == short_len], float)
    long_ = np.array([s["ns"] for s in samples if s["length"] == long_len], float)
    if len(short) < 2 or len(long_) < 2:
        return None, None
    ms, ml = float(np.median(short)), float(np.median(long_))
    span = long_len - short_len

    def median_se(x: np.ndarray) -> float:
        return 1.2533 * 1.4826 * stats.mad_of(x) / math.sqrt(len(x))
    intercept = (long_len * ms - short_len * ml) / span
    se = math.hypot(long_len * median_se(short), short_len * median_se(long_)) / span
    return intercept, se


def flag_cautions(points: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One caution per flag (e.g. bimodal), listing the flagged points."""
    out: List[Dict[str, Any]] = []
    flagged = [p for p in points if "bimodal" in (p.get("flags") or [])]
    if flagged:
        names = [fnd.point_label(p) for p in flagged]
        out.append(fnd.caution(
            "bimodal_points",
            (f"{len(flagged)} of {len(points)} points have samples in two groups (a shared "
             f"cache taken by a neighbour, or a host that changed): "
             + "; ".join(names[:5]) + (" ..." if len(names) > 5 else "")
             + "; their median is between the groups, not a level"),
            value=float(len(flagged)), threshold=fnd.threshold("bimodal_separation"),
        ).as_dict())
    return out


def _cycles_estimate(metric: str, samples: Sequence[Dict[str, Any]], median: float,
                     naive_median: float) -> Optional[float]:
    """Est. core cycles per operation (time metrics) or bytes per cycle (bandwidth)."""
    good = [s for s in samples if s.get("cycles_est") and s["ns"]]
    if not good or not naive_median:
        return None
    if metric.startswith("ns_per_"):
        per_op = np.median([s["cycles_est"] * s["value"] / s["ns"] for s in good])
        return float(per_op * median / naive_median)
    return None


def _median_counters(samples: Sequence[Dict[str, Any]]) -> Dict[str, float]:
    """Median of each numeric counter, per operation-independent sample."""
    # statistics.median, not np.median: the same value, but a point has a
    # dozen counters of ~10 samples each and np.median's per-call overhead
    # made this loop most of a survey report's analysis time
    columns: Dict[str, List[float]] = {}
    for s in samples:
        for k, v in (s.get("counters") or {}).items():
            if isinstance(v, (int, float)) and not k.startswith(BUSY_PREFIX):
                columns.setdefault(k, []).append(v)
    return {n: float(statistics.median(columns[n])) for n in sorted(columns)}


def run_data(run: Dict[str, Any], samples: Sequence[Dict[str, Any]], n_boot: int = 2000,
             ci_method: Optional[str] = "bootstrap") -> RunData:
    accepted = [s for s in samples]
    return RunData(run["experiment"], run.get("params") or {}, run.get("machine") or {},
                   build_points(accepted, n_boot=n_boot, ci_method=ci_method),
                   [s for s in samples if not s.get("rejected")])


def analyze(run: Dict[str, Any], samples: Sequence[Dict[str, Any]],
            experiment: Optional[Experiment] = None
            ) -> Tuple[RunData, List[Dict[str, Any]], List[Dict[str, Any]], List[str]]:
    """(RunData, answers, cautions, errors) for a stored run.

    ``answers`` holds exactly one answer dict per question the experiment
    declares (see answers.py); an analysis that fails on partial data turns
    its questions into not_measured and says why in ``errors``."""
    from ..experiments import get_experiment
    from ..model.answers import complete_answers
    data = run_data(run, samples)
    exp = experiment or get_experiment(run["experiment"], missing_ok=True)
    answers: List[Dict[str, Any]] = []
    errors: List[str] = []
    if exp is not None and not exp.questions:
        errors.append(f"experiment {exp.name} declares no questions: nothing is answered")
        return data, [], point_cautions(data.points), errors
    if exp is not None:
        questions = exp.questions
        given: List[Answer] = []
        failure: Optional[str] = None
        if not data.points:
            failure = "no samples were measured"
        else:
            try:
                given = list(exp.analyze(data))
            except Exception as e:  # analysis of partial data must not hide the data
                failure = f"analysis failed: {type(e).__name__}: {e}"
                errors.append(failure)
        qmap = {q.id: q for q in questions}
        answers = [a.as_dict(qmap[a.question])
                   for a in complete_answers(questions, given, failure)]
        replicas = sorted({s.get("replica") or 0 for s in samples if not s.get("rejected")})
        if len(replicas) >= 2 and failure is None:
            answers = _replica_answers(exp, run, samples, replicas, answers, qmap)
        else:
            for a in answers:
                if a.get("ci_low") is not None:
                    a["ci_scope"] = "one process"
        from ..model.answers import explain_inconclusive
        answers = [explain_inconclusive(a) for a in answers]
    cautions = point_cautions(data.points)
    return data, answers, cautions, errors


def _replica_answers(exp: Experiment, run: Dict[str, Any], samples: Sequence[Dict[str, Any]],
                     replicas: Sequence[int], pooled: Sequence[Dict[str, Any]],
                     qmap: Dict[str, Question]) -> List[Dict[str, Any]]:
    """Each question's answer from every replica's samples (``pooled``), its
    CI and verdict from the answers of each replica analysed alone
    (answers.combine_replicas)."""
    from ..model.answers import combine_replicas
    per: List[Dict[str, Dict[str, Any]]] = []
    for r in replicas:
        mine = [s for s in samples if (s.get("replica") or 0) == r]
        data = run_data(run, mine, ci_method=REPLICA_CI)
        try:
            given = {a.question: a.as_dict(qmap[a.question]) for a in exp.analyze(data)
                     if a.question in qmap}
        except Exception:    # a replica's partial data; the pooled answer stands
            given = {}
        per.append(given)
    guest = ran_in_guest(run.get("machine"))
    return [combine_replicas(qmap[a["question"]], a, [p.get(a["question"]) for p in per],
                             guest=guest)
            for a in pooled]


def ran_in_guest(machine: Optional[Dict[str, Any]]) -> bool:
    """Whether a fingerprint was taken in a VM guest (its hypervisor entry,
    else the CPUID hypervisor flag)."""
    machine = machine or {}
    hv = machine.get("hypervisor")
    if isinstance(hv, dict) and "present" in hv:
        return bool(hv["present"])
    flags = machine.get("flags")
    return bool(isinstance(flags, dict) and flags.get("hypervisor"))


def point_cautions(points: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    summaries = [{"arm": p["arm"], "params": p["params"], "cv": p.get("cv") or 0.0,
                  "n": p["n"], "rejected": p["rejected"]} for p in points]
    out = [c.as_dict() for c in fnd.noise_cautions(summaries)]
    out.extend(flag_cautions(points))
    drift = calibration_caution(points)
    if drift:
        out.append(drift)
    return out


def busy_summary(samples: Sequence[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """How busy the machine was while a run measured, from its cells'
    busy_* counters and its samples: {wall_s, others_cpus (CPU-equivalents
    other processes used, on average), steal_share, load_1m (the highest
    seen), rejected_share (of every sample taken), busy (bool), and where
    the cells timed it the core's speed (core_read_gbps: the median over
    the cells of an L1d read timed after each, Sampling.core_speed;
    core_read_gbps_replicas: each replica's)}; None when no cell recorded
    it (older runs)."""
    sums = {"busy_wall_s": 0.0, "busy_others_s": 0.0, "busy_steal_s": 0.0, "busy_all_s": 0.0}
    load: Optional[float] = None
    cells, cut, corrected = 0, 0, 0
    speeds: Dict[int, List[float]] = {}       # replica -> the core's speed after each cell
    for s in samples:
        c = s.get("counters") or {}
        corrected += "wall_ns" in c and not s.get("rejected")
        if "busy_wall_s" not in c:
            continue
        cells += 1
        v = c.get("core_read_gbps")
        if isinstance(v, (int, float)) and math.isfinite(v) and v > 0:
            speeds.setdefault(int(s.get("replica") or 0), []).append(float(v))
        cut += bool(c.get("retakes_cut"))
        for k in sums:
            v = c.get(k)
            if isinstance(v, (int, float)) and math.isfinite(v):
                sums[k] += v
        v = c.get("busy_load_1m")
        if isinstance(v, (int, float)):
            load = v if load is None else max(load, v)
    if not cells or sums["busy_wall_s"] <= 0:
        return None
    taken = len(samples)
    rejected = sum(1 for s in samples if s.get("rejected"))
    others = max(0.0, sums["busy_others_s"] / sums["busy_wall_s"])   # cells' may be < 0
    steal = sums["busy_steal_s"] / sums["busy_all_s"] if sums["busy_all_s"] > 0 else 0.0
    core = {}
    if speeds:
        # the run's core speed: the median over its cells, and each replica's
        core = {"core_read_gbps": round(float(np.median([v for vs in speeds.values()
                                                          for v in vs])), 2),
                "core_read_gbps_replicas": [round(float(np.median(speeds[r])), 2)
                                            for r in sorted(speeds)]}
    return {**core, "wall_s": round(sums["busy_wall_s"], 3), "others_cpus": round(others, 3),
            "steal_share": round(steal, 4), "load_1m": load,
            "rejected_share": round(rejected / taken, 4) if taken else 0.0,
            "cells": cells, "cells_cut_short": cut, "samples_corrected": corrected,
            "busy": bool(others >= fnd.threshold("busy_cpus")
                         or steal >= fnd.threshold("busy_steal"))}


def busy_caution(busy: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The caution of a run that measured on a busy machine, or None."""
    if not busy or not busy.get("busy"):
        return None
    said = [f"other processes kept {busy['others_cpus']:.1f} CPUs busy on average"]
    if busy.get("steal_share"):
        said.append(f"the host took {busy['steal_share']:.0%} of the vCPUs' time (steal)")
    if busy.get("load_1m") is not None:
        said.append(f"load average up to {busy['load_1m']:.1f}")
    said.append(f"{busy['rejected_share']:.0%} of samples rejected")
    if busy.get("cells_cut_short"):
        said.append(f"{busy['cells_cut_short']} of {busy['cells']} cells ended their retakes "
                    "on the time budget")
    if busy.get("samples_corrected"):
        said.append(f"{busy['samples_corrected']} preempted DRAM samples kept with their "
                    "wait taken out")
    return fnd.caution(
        "busy_machine", "the machine was busy while this run measured: " + ", ".join(said),
        value=busy["others_cpus"], threshold=fnd.threshold("busy_cpus"),
    ).as_dict()


def calibration_caution(points: Sequence[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """Flag blocks whose cycle-estimate calibration moved between the
    dependent-add chains run before and after them (frequency changed)."""
    limit = fnd.threshold("calibration_drift")
    found = [(p.get("counters") or {}).get("calibration_drift") for p in points]
    drifts: List[float] = [d for d in found if d is not None]
    bad = [d for d in drifts if d > limit]
    if not bad:
        return None
    return fnd.caution(
        "calibration_drift",
        (f"{len(bad)} of {len(drifts)} points: the core-cycle calibration moved by more "
         f"than {limit:.0%} across the block (worst {max(bad):.0%}); est. cycles are approximate"),
        value=max(bad), threshold=limit,
    ).as_dict()


def _machine_id(machine: Optional[Dict[str, Any]]) -> Optional[str]:
    from ..lab.machine import machine_id
    return machine_id(machine) if machine else None


def plot_dicts(exp: Optional[Experiment]) -> List[Dict[str, Any]]:
    """The experiment's declared plots as plain data (none for an unknown one)."""
    return [spec.to_dict() for spec in getattr(exp, "plots", ()) or ()]


def experiment_info(exp: Optional[Experiment]) -> Optional[Dict[str, Any]]:
    """What a reader shows of the experiment besides its answers: title,
    question, seeds, its parameters (name, kind, help) and the values of its
    full preset (what a lighter preset traded away); None for an unknown one."""
    if exp is None:
        return None
    try:
        full = exp.resolve("full")
    except Exception:      # a preset that does not resolve is not shown
        full = None
    return {"title": exp.title, "question": exp.question, "seeds": list(exp.seeds),
            "params": [{"name": p.name, "kind": p.kind, "help": p.help}
                       for p in exp.all_params()],
            "full_preset": full}


def machine_warnings(machine: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The machine's noise cautions, each marked as the machine's (a
    reader lists them once per machine, not once per run)."""
    from ..lab.machine import cautions
    return [dict(c, source="machine") for c in cautions(machine)]


def machine_capabilities(machine: Dict[str, Any]) -> Dict[str, Any]:
    from ..lab.machine import capabilities
    return capabilities(machine)


def document(run: Dict[str, Any], samples: Sequence[Dict[str, Any]],
             experiment: Optional[Experiment] = None,
             include_values: bool = False) -> Dict[str, Any]:
    """The versioned result document of one run; include_values keeps each
    point's per-sample values (for plots)."""
    from ..experiments import get_experiment
    exp = experiment or get_experiment(run["experiment"], missing_ok=True)
    data, answers, cautions, errors = analyze(run, samples, exp)
    machine = run.get("machine") or {}
    warnings: List[Dict[str, Any]] = []
    try:
        warnings.extend(machine_warnings(machine))
    except Exception:
        pass
    capabilities: Optional[Dict[str, Any]]
    try:
        capabilities = machine_capabilities(machine)
    except Exception:
        capabilities = None     # the reader shows the fingerprint as stored
    warnings.extend(cautions)
    busy = busy_summary(samples)
    said_busy = busy_caution(busy)
    if said_busy:
        warnings.append(said_busy)
    warnings.extend(fnd.caution("analysis", e).as_dict() for e in errors)
    if run.get("status") != "complete":
        warnings.append(fnd.run_status_caution(run.get("status")).as_dict())
    return {
        "schema_version": RESULT_SCHEMA_VERSION,
        "run_id": run["id"],
        "experiment": run["experiment"],
        "status": run["status"],
        "preset": run.get("preset"),
        "started": run.get("started"),
        "finished": run.get("finished"),
        "duration_s": run.get("duration_s"),
        "error": run.get("error"),
        "machine_id": _machine_id(machine),
        "machine": machine,
        "params": run.get("params") or {},
        "points": [p if include_values else {k: v for k, v in p.items() if k != "values"}
                   for p in data.points],
        "labels": run.get("labels") or {},
        "answers": answers,
        "busy": busy,
        "warnings": warnings,
        "capabilities": capabilities,
        "plots": plot_dicts(exp),
        "experiment_info": experiment_info(exp),
    }
