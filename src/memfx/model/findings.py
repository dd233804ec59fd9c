"""Verdicts, cautions and the named thresholds behind them.

The verdict words of every answer (the :class:`Verdict` enum, used by
answers.py), the effect rule (effect_verdict), and the *cautions*: warnings
about the measurement itself (noise, drift, rejected samples), each with the
threshold it crossed and what to do about it, plain data in the result
document's "warnings".  Every warning id is in the catalogue
(:data:`WARNINGS`: id, text, hint) and built by :func:`caution`.
(Round 1's Finding, with its effect_finding and measured_finding, gave way
to declared questions and answers; documents of schema version 3 no longer
carry "findings".)

Every threshold is named in :data:`THRESHOLDS`, with its unit and meaning,
so a verdict can always say which rule produced it.

Imports only numpy, the standard library and the pure-Python parts of
memfx, so it loads without the C core.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import numpy as np

from .errors import ParamError

__all__ = [
    "Verdict", "DETECTED", "NOT_DETECTED", "INCONCLUSIVE", "MEASURED", "NOT_MEASURED", "VERDICTS",
    "Threshold", "THRESHOLDS", "threshold",
    "Caution", "WarningKind", "WARNINGS", "caution", "run_status_caution", "hint_of",
    "effect_verdict",
    "noise_cautions", "point_label", "jsonable",
]



class Verdict(str, Enum):
    """The verdict of an answer (and of a detail).  A str, equal to and
    hashed as its word, so documents, the store and code comparing with the
    word see the same values as before the enum; printed as the word."""

    DETECTED = "detected"
    NOT_DETECTED = "not_detected"
    INCONCLUSIVE = "inconclusive"
    MEASURED = "measured"
    NOT_MEASURED = "not_measured"

    # the word, not "Verdict.DETECTED", wherever a verdict is printed
    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


DETECTED = Verdict.DETECTED
NOT_DETECTED = Verdict.NOT_DETECTED
INCONCLUSIVE = Verdict.INCONCLUSIVE
MEASURED = Verdict.MEASURED
NOT_MEASURED = Verdict.NOT_MEASURED
# The verdicts a measurement can reach (an answer may also be NOT_MEASURED).
VERDICTS = (DETECTED, NOT_DETECTED, INCONCLUSIVE, MEASURED)


# --------------------------------------------------------------------------
# thresholds


@dataclass(frozen=True)
class Threshold:
    """A named threshold: ``value`` in ``unit``, and what crossing it means."""

    name: str
    value: float
    unit: str
    meaning: str


def _thresholds(*items: Threshold) -> Dict[str, Threshold]:
    """By name; a name declared twice is a mistake (the later one would
    silently win), so it is refused at import."""
    out: Dict[str, Threshold] = {}
    for t in items:
        if t.name in out:
            raise ValueError(f"threshold {t.name!r} is declared twice")
        out[t.name] = t
    return out


THRESHOLDS: Dict[str, Threshold] = _thresholds(
    Threshold("noisy_cv", 0.10, "ratio",
              "CV (sample std / mean) of a point's samples at or above which the point is noisy"),
    Threshold("calibration_drift", 0.05, "ratio",
              "relative change of the cycle-estimate calibration before/after a block that counts as drift"),
    Threshold("effect_min", 0.03, "ratio",
              "smallest relative effect (|ratio - 1|) that is called detected"),
    Threshold("effect_band", 0.05, "ratio",
              "half-width of the no-effect band of an effect question (a ratio within 1 +- this "
              "is no effect) unless the question declares its own band: detected when the "
              "replica-level CI lies wholly outside the band, not detected when wholly inside"),
    Threshold("crossover_max_span", 2.0, "x",
              "widest CI (ci_high / ci_low) of a crossover that `memfx advise` sets a threshold "
              "from: a crossover located no better than this drives no advice (a tunable resting "
              "on copy.rep_movsb_crossover's 896 B-6.7 MB CI had been advised)"),
    Threshold("advice_history_runs", 4, "runs",
              "earlier complete copy runs of the same machine id and preset that vote on "
              "`memfx advise` beside the run's replicas: a strategy or tunable they do not give "
              "alike (beyond the band) is not advised, unstable (nine quick surveys of one "
              "unchanged machine had given six different fastest-strategy lists)"),
    Threshold("history_min_surveys", 3, "surveys",
              "earlier surveys of the same machine id from which `compare` widens a question's "
              "band by its run-to-run spread"),
    Threshold("history_sigmas", 2.0, "sigmas",
              "how many run-to-run standard deviations (of the log value over the history's "
              "surveys, x sqrt(2) for two runs) the widened band of `compare` spans"),
    Threshold("guest_drift_cv", 0.08, "CV",
              "run-to-run spread assumed for a value that rests on what a VM's host shares "
              "(Question.host_shared: the LLC, memory, the cores its vCPUs run on) when measured "
              "in a guest: such values move between surveys minutes apart several times more "
              "than a survey's replicas agree (docs/machine-notes.md, \"Drift in a guest\"). "
              "It widens such an answer's CI (in quadrature, z x CV on the log "
              "scale) and is `compare`'s band for it where the store has too few earlier "
              "surveys of the machine (history_sigmas x sqrt(2) x CV: 25 %)"),
    Threshold("guest_clock_cv", 0.03, "CV",
              "the same for any other value in absolute units (ns, GB/s) measured in a guest: "
              "they move with the clock the host gives the vCPU, beyond what a survey's "
              "replicas show (docs/machine-notes.md); ratios of two arms of one run cancel it "
              "(compare's band: 9 %)"),
    Threshold("core_speed_moved", 0.10, "ratio",
              "how far apart two runs' core speeds (an L1d read timed after every cell) must "
              "be before `compare` reads an absolute figure's move against them: within it, "
              "the medians of quiet surveys minutes apart moved (docs/stability.md); a "
              "flagged value that moved the same way and no further than the core did is then "
              "a host state"),
    Threshold("noisy_margin", 2.0, "x band",
              "a regression between runs whose cautions say they were noisy is called one only "
              "when its CI clears this multiple of the band; else it reads `noisy`"),
    # issue 39: a glibc setting moved libc memcpy 1.6-1.8x at 4-24 KiB while
    # the one answer over 84 sizes read "unchanged"; points are compared one
    # by one, and these keep an A/A of thousands of points quiet
    Threshold("curve_reference_arms", 3, "arms",
              "other arms measured at a point's parameters against whose median move `compare` "
              "judges the point (a host drift moves them all alike); a curve with fewer is "
              "reported as moved, never as regressed"),
    Threshold("curve_min_points", 3, "points",
              "`compare` calls a range of neighbouring points of one curve (the same experiment, "
              "arm and parameters but the swept one) that moved beyond the band the same way a "
              "change when at least this many of its points in a row have a ratio CI wholly "
              "beyond the band: at a 95 % CI one point in 40 clears it by chance in an A/A "
              "(one side), three neighbours in a row at one place in 64,000"),
    Threshold("curve_far_band", 2.0, "x band",
              "... or when one of its points clears this multiple of the band with a CI widened "
              "for the number of points compared (Bonferroni: level 1 - (1 - ci_level) / points)"),
    Threshold("noisy_run", 0.20, "ratio",
              "share of a run's samples rejected (preempted, migrated) above which the run is "
              "noisy for `compare`"),
    Threshold("state_separation", 0.25, "ratio",
              "replicas of a run fall into two host states when the widest gap between their "
              "sorted values is at least this (relative) ..."),
    Threshold("state_gap_spreads", 3.0, "x spread",
              "... at least this many times the wider group's own range (log scale) ..."),
    Threshold("state_gap_sigmas", 3.0, "sigmas",
              "... and at least this many standard errors of the replicas beside it "
              "(stats.replica_states); each state is then reported with its share"),
    Threshold("busy_cpus", 0.5, "CPUs",
              "CPU-equivalents other processes kept busy, on average over a run, at or above "
              "which the run is marked busy (its data-quality line and `compare` say so)"),
    Threshold("busy_steal", 0.05, "ratio",
              "share of the CPUs' time a guest's vCPUs waited for the host (steal) at or above "
              "which the run is marked busy"),
    Threshold("ci_level", 0.95, "probability",
              "confidence level of every confidence interval"),
    Threshold("min_samples", 5, "samples",
              "fewer samples than this in an arm makes a comparison inconclusive"),
    Threshold("min_ci_samples", 3, "samples",
              "no confidence interval is reported from fewer samples than this"),
    Threshold("rejected_share", 0.20, "ratio",
              "share of a point's samples rejected as contaminated above which we warn"),
    Threshold("bimodal_separation", 0.10, "ratio",
              "a point is bimodal when its samples split into two groups whose medians differ by "
              "at least this (relative to the lower) ..."),
    Threshold("bimodal_gap", 4.0, "sigmas",
              "... and the gap between the groups is at least this many robust sigmas (MAD x "
              "1.4826) of the wider group (stats.bimodal_split)"),
    Threshold("bimodal_share", 0.20, "ratio",
              "each group of a bimodal split holds at least this share of the samples (and >= 2)"),
    # issue 13: the quick survey (every experiment, the checked advice and the
    # report) stays within 2 minutes on a small machine, the full one within
    # 15; raise only with a measured reason (docs/stability.md)
    Threshold("survey_budget_quick", 120.0, "s",
              "wall time of `memfx survey --quick` (experiments, advice, report) above which the "
              "survey warns that it is over its budget"),
    Threshold("survey_budget_full", 900.0, "s",
              "wall time of `memfx survey --full` above which the survey warns"),
    # issue 25: whole-program wall times on a shared machine move by a
    # percent or two between runs even when nothing changed
    Threshold("tune_noise_band", 0.02, "ratio",
              "`memfx tune` recommends a setting only when the CI of its paired speedup lies "
              "wholly above 1 + this"),
)


def threshold(name: str) -> float:
    """Value of the named threshold (see :data:`THRESHOLDS`)."""
    try:
        return THRESHOLDS[name].value
    except KeyError:
        known = ", ".join(sorted(THRESHOLDS))
        raise ParamError(f"unknown threshold {name!r} (known: {known})") from None


def _or_default(value: Optional[float], name: str) -> float:
    return threshold(name) if value is None else value


# --------------------------------------------------------------------------
# JSON-safe values


def jsonable(value: Any) -> Any:
    """``value`` with numpy scalars/arrays turned into Python ones, tuples
    into lists, and non-finite floats (NaN, inf) into None, so that
    ``json.dumps`` gives a valid document."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, Enum):
        # a document holds a verdict's word, a plain str
        return jsonable(value.value)
    if isinstance(value, (list, tuple, np.ndarray)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# --------------------------------------------------------------------------
# findings and cautions


# What a caution's value and threshold may be: a figure, or a setting of the
# machine (a governor's name, a flag).
CautionValue = Union[float, int, str, bool, None]


@dataclass(frozen=True)
class Caution:
    """A warning about the measurement, as data: ``value`` crossed
    ``threshold`` (same unit); ``advice`` says what to do about it.

    Built with :func:`caution` from the catalogue (:data:`WARNINGS`), which
    gives the advice.  A ``note`` (the analysis failed, the run stopped
    early) crossed no threshold: its document form is its id and message."""

    id: str
    message: str
    value: CautionValue = None
    threshold: CautionValue = None
    advice: str = ""
    note: bool = False

    def as_dict(self) -> Dict[str, Any]:
        if self.note:
            return {"id": self.id, "message": self.message}
        return {"id": self.id, "message": self.message, "value": jsonable(self.value),
                "threshold": jsonable(self.threshold), "advice": self.advice}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Caution":
        if "id" not in d or "message" not in d:
            raise ValueError("caution lacks id or message")
        note = not ({"value", "threshold", "advice"} & set(d))
        # a note's advice is written nowhere: it is its kind's hint
        advice = hint_of(d["id"]) if note else d.get("advice") or ""
        return cls(id=d["id"], message=d["message"], value=d.get("value"),
                   threshold=d.get("threshold"), advice=advice, note=note)


# --------------------------------------------------------------------------
# the warning catalogue


@dataclass(frozen=True)
class WarningKind:
    """A kind of warning memfx gives: its stable ``id`` (the caution's),
    what it means in general (``text``) and what to do about it (``hint``,
    the caution's advice; ``{name}`` fields are filled by the caller).
    ``note``: crossed no threshold, written as id and message only."""

    id: str
    text: str
    hint: str = ""
    note: bool = False


def _catalogue(*items: WarningKind) -> Dict[str, WarningKind]:
    """By id; an id declared twice is refused at import, as a threshold is."""
    out: Dict[str, WarningKind] = {}
    for w in items:
        if w.id in out:
            raise ValueError(f"warning {w.id!r} is declared twice")
        out[w.id] = w
    return out


_NOISE_ADVICE = ("Stop other work on the machine, set the CPU governor to "
                 "'performance', pin to an isolated CPU, or raise the "
                 "number of samples.")
_REJECT_ADVICE = ("Samples were contaminated by context switches, migrations "
                  "or page faults: run on an idle, isolated CPU (isolcpus / "
                  "nohz_full) and pre-fault buffers.")

# Every warning id memfx writes, one owner for its meaning and its advice:
# a document's "warnings", the machine's cautions and the advice's notes.
WARNINGS: Dict[str, WarningKind] = _catalogue(
    # the samples of a run
    WarningKind("noisy_points", "points whose samples vary by the noisy_cv threshold or more",
                _NOISE_ADVICE),
    WarningKind("rejected_samples", "points with more than rejected_share of their samples "
                "rejected as contaminated", _REJECT_ADVICE),
    WarningKind("bimodal_points", "points whose samples fall in two groups: their median lies "
                "between the groups, not at a level",
                "read each group (the point's `modes`) and the best sustained figure; rerun "
                "on a quiet machine"),
    WarningKind("calibration_drift", "points whose core-cycle calibration moved by more than "
                "calibration_drift across their block: est. cycles are approximate",
                "fix the CPU frequency (governor 'performance', turbo off) or trust ns over "
                "est. cycles"),
    WarningKind("busy_machine", "other processes or the host kept the machine busy while the "
                "run measured",
                "its figures are what a shared machine gives; compare it with a run on a quiet "
                "machine before calling a change"),
    # the run itself
    WarningKind("analysis", "the analysis of the run failed; the data are shown as measured",
                "the data are shown as measured; re-run the experiment for a complete analysis",
                note=True),
    WarningKind("run_running", "the run is still measuring: results cover the points measured "
                "so far", note=True),
    WarningKind("run_interrupted", "the run was interrupted: results cover the points measured "
                "before it stopped", note=True),
    WarningKind("run_failed", "the run failed: results cover the points measured before it "
                "stopped", note=True),
    WarningKind("survey_over_budget", "the survey took longer than its time budget",
                "a busy machine retakes preempted samples (check `uptime`); on a quiet one, "
                "trim the slowest experiment's {preset} preset"),
    # the advice
    WarningKind("other_machine", "the run advised from was measured on another CPU than the "
                "one the advice is checked on", note=True),
    # the machine (lab/machine.py's cautions): what makes its results noisy
    WarningKind("hypervisor", "a hypervisor's timer and cache behaviour leak into the figures",
                "treat small differences as noise; confirm fine-grained conclusions on bare "
                "metal"),
    WarningKind("governor", "the cpufreq governor changes the clock under load",
                "cpupower frequency-set -g performance (or echo performance > "
                "/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor)"),
    WarningKind("turbo", "turbo boost makes the core clock depend on temperature and load",
                "disable it for stable numbers (echo 1 > "
                "/sys/devices/system/cpu/intel_pstate/no_turbo or echo 0 > "
                "/sys/devices/system/cpu/cpufreq/boost)"),
    WarningKind("smt", "a sibling hyperthread shares the core's caches and ports",
                "keep the sibling of the measuring CPU idle, or echo off > "
                "/sys/devices/system/cpu/smt/control"),
    WarningKind("thp_always", "transparent huge pages 'always': TLB behaviour varies from run "
                "to run",
                "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled; memfx asks for huge "
                "pages explicitly when a parameter says so"),
    WarningKind("no_pmu", "no hardware performance counters: verdicts come from timing only",
                "fine for verdicts; for cycle and event counts run on bare metal or enable "
                "vPMU in the hypervisor"),
    WarningKind("no_invariant_tsc", "rdtsc ticks may not be proportional to time",
                "use a machine with an invariant TSC, or do not trust ns figures from rdtsc"),
    WarningKind("perf_event_paranoid", "software events (page faults, context switches) that "
                "reject contaminated samples cannot be read",
                "sysctl kernel.perf_event_paranoid=2 (or run with CAP_PERFMON)"),
    WarningKind("glibc_llc_mismatch", "glibc sizes its memcpy thresholds from another "
                "last-level cache size than sysfs reports",
                "measure (memfx run copy) and set "
                "GLIBC_TUNABLES=glibc.cpu.x86_non_temporal_threshold from the measured "
                "crossover (memfx advise)"),
    WarningKind("low_memory", "little memory available: large buffers may be swapped or "
                "reclaimed during the run",
                "free memory or keep buffer sizes well below the available amount"),
)


def caution(id: str, message: str, value: CautionValue = None,
            threshold: CautionValue = None, **hint_fields: Any) -> Caution:
    """The one constructor of a caution: the catalogue's kind ``id`` (a
    KeyError names the known ones), with this occurrence's ``message`` and
    figures; the advice is the kind's hint, ``hint_fields`` filled in."""
    try:
        kind = WARNINGS[id]
    except KeyError:
        raise KeyError(f"warning {id!r} is not in the catalogue (findings.WARNINGS: "
                       f"{', '.join(sorted(WARNINGS))})") from None
    return Caution(id=id, message=message, value=value, threshold=threshold,
                   advice=kind.hint.format(**hint_fields) if hint_fields else kind.hint,
                   note=kind.note)


def run_status_caution(status: Any) -> Caution:
    """The note on a run that did not complete.  A status the catalogue
    does not list (a hand-made document's) keeps its id ``run_<status>``,
    as a note without advice."""
    message = f"run is {status}: results cover only the points measured before it stopped"
    if f"run_{status}" in WARNINGS:
        return caution(f"run_{status}", message)
    return Caution(id=f"run_{status}", message=message, note=True)


def hint_of(id: Any) -> str:
    """The catalogue's hint for a warning id ("" for an unknown one)."""
    kind = WARNINGS.get(str(id))
    return kind.hint if kind else ""


# --------------------------------------------------------------------------
# verdicts


def _finite(*xs: Optional[float]) -> bool:
    return all(x is not None and math.isfinite(x) for x in xs)


def band_verdict(band: Tuple[float, float], ci_low: Optional[float],
                 ci_high: Optional[float]) -> Verdict:
    """The one verdict rule: detected when the CI lies wholly outside the
    no-effect ``band`` (low, high), not detected when wholly inside it,
    inconclusive otherwise or without a finite CI."""
    if ci_low is None or ci_high is None or not _finite(ci_low, ci_high):
        return INCONCLUSIVE
    low, high = band
    if ci_low > high or ci_high < low:
        return DETECTED
    if ci_low >= low and ci_high <= high:
        return NOT_DETECTED
    return INCONCLUSIVE


def effect_verdict(ratio: float, ci_low: float, ci_high: float, n_a: int, n_b: int,
                   effect_min: Optional[float] = None,
                   min_samples: Optional[int] = None,
                   band: Optional[Tuple[float, float]] = None) -> Verdict:
    """Verdict on a ratio of medians a/b (1.0 = no effect) and its CI, by
    band_verdict: ``band`` (low, high) is the question's no-effect band
    (Question.no_effect_band); without one, 1 ± ``effect_min``.  Fewer than
    ``min_samples`` samples in either arm, or a missing/NaN ratio or bound,
    is INCONCLUSIVE.  Defaults come from the thresholds ``effect_min`` and
    ``min_samples``.
    """
    need = _or_default(min_samples, "min_samples")
    if min(n_a, n_b) < need or not _finite(ratio, ci_low, ci_high):
        return INCONCLUSIVE
    if band is None:
        e = _or_default(effect_min, "effect_min")
        band = (1.0 - e, 1.0 + e)
    return band_verdict(band, ci_low, ci_high)


# --------------------------------------------------------------------------
# cautions about noise


def point_label(point: Mapping[str, Any]) -> str:
    """Short label of a data point: its arm and swept parameters."""
    params = point.get("params") or {}
    parts = [str(point.get("arm", "?"))] + [f"{k}={v}" for k, v in params.items()]
    return " ".join(parts)


def _worst(points: List[Mapping[str, Any]], key: Callable[[Mapping[str, Any]], float],
           fmt: Callable[[float], str], limit: int = 3) -> str:
    ranked = sorted(points, key=key, reverse=True)[:limit]
    return ", ".join(f"{point_label(p)} ({fmt(key(p))})" for p in ranked)


def _rejected_share(p: Mapping[str, Any]) -> float:
    kept, rejected = int(p.get("n") or 0), int(p.get("rejected") or 0)
    total = kept + rejected
    return rejected / total if total else 0.0


def noise_cautions(point_summaries: Iterable[Mapping[str, Any]],
                   noisy_cv: Optional[float] = None,
                   rejected_share: Optional[float] = None) -> List[Caution]:
    """Cautions from per-point summaries (mappings with keys ``arm``,
    ``params``, ``cv``, ``n`` = kept samples, ``rejected`` = rejected
    samples).

    - "noisy_points": points whose CV >= ``noisy_cv`` (one caution for all,
      naming the worst three; value = worst CV);
    - "rejected_samples": points whose rejected share (rejected / (n +
      rejected)) > ``rejected_share`` (value = worst share).

    Defaults come from the thresholds of the same names.
    """
    cv_max = _or_default(noisy_cv, "noisy_cv")
    rej_max = _or_default(rejected_share, "rejected_share")
    points = list(point_summaries)
    total = len(points)
    out: List[Caution] = []

    def cv(p: Mapping[str, Any]) -> float:
        return float(p["cv"])

    noisy = [p for p in points if _finite(p.get("cv")) and cv(p) >= cv_max]
    if noisy:
        out.append(caution(
            "noisy_points",
            (f"{len(noisy)} of {total} points have CV >= {cv_max:.0%}; "
             f"worst: {_worst(noisy, cv, '{:.1%}'.format)}"),
            value=max(cv(p) for p in noisy), threshold=cv_max))
    rejected = [p for p in points if _rejected_share(p) > rej_max]
    if rejected:
        out.append(caution(
            "rejected_samples",
            (f"{len(rejected)} of {total} points had more than {rej_max:.0%} "
             f"of their samples rejected; worst: "
             f"{_worst(rejected, _rejected_share, '{:.0%}'.format)}"),
            value=max(_rejected_share(p) for p in rejected), threshold=rej_max))
    return out
