"""Sharing's analysis: the false-sharing penalty by distance and arm and
the core-to-core round trip, as methods of SharingAnswers, which Sharing
inherits (a mixin: `self` is the registered experiment), and the pure
helpers they rest on (one line's pooled samples, one-sided effects).  The
protocol (__init__.py) re-exports every name."""
from __future__ import annotations

import numpy as np

from ...model import answers as ans
from ...model.details import detail
from ...model.findings import DETECTED, INCONCLUSIVE, NOT_DETECTED
from ...model.machine_view import Fingerprint
from .._kit import (
    CONCURRENT_SHARE_MIN,
    concurrent_share,
    concurrent_values,
    cpu_text,
    samples_of,
)

# Counters this far apart are on different lines of any x86 CPU (64-byte
# lines; Intel's L2 spatial prefetcher pairs lines into 128-byte blocks,
# Intel optimisation manual 3.7.3): the baseline of the penalty.
FAR_MIN = 128


ARMS = ("plain", "atomic")


ARM_WORDS = {"plain": "addq, not locked", "atomic": "lock addq"}


# The arm sharing.false_sharing decides on (why: _false_sharing_answers).
HEADLINE_ARM = "atomic"


# False sharing is a multiple, not a few per cent (Drepper's figure: the
# same-line case several times the separate-line one): a distance has a
# penalty when its ratio to far-apart counters is surely (CI low end) above
# 1 + PENALTY_MIN, none when surely (CI high end) below it.  A wide band,
# because two threads' sub-nanosecond plain increments on a shared host
# give ratio CIs of +-40 % (the line size reads both arms).
PENALTY_MIN = 0.5


# Far-apart counters slower than this multiple of one thread alone: the
# threads did not run at full speed in parallel (time-shared vCPUs).
PARALLEL_SLOWDOWN_MAX = 1.5


def _line_bytes(machine):
    l1 = Fingerprint.of(machine).cache(1)
    return l1.line_bytes if l1 else None


def _one_line(data, fs, arm, line):
    """(points inside one line, far-apart points, the concurrent values of
    each side pooled) of one arm; a side not measured is empty / None."""
    near = [x for x in fs if x["arm"] == arm
            and x["params"]["distance_bytes"] < min(line or 64, FAR_MIN)]
    far = [x for x in fs if x["arm"] == arm and x["params"]["distance_bytes"] >= FAR_MIN]

    def pooled(pts):
        return np.concatenate([concurrent_values(data, x) for x in pts]) if pts else None
    return near, far, pooled(near), pooled(far)


def _one_sided(e):
    """Penalty verdict of a ratio answer: detected when its CI is surely
    above 1 + PENALTY_MIN, not_detected when surely below, else
    inconclusive (also without a CI)."""
    if e.ci_low is None or e.ci_high is None:
        return INCONCLUSIVE
    if e.ci_low > 1 + PENALTY_MIN:
        return DETECTED
    if e.ci_high < 1 + PENALTY_MIN:
        return NOT_DETECTED
    return INCONCLUSIVE


class SharingAnswers:
    """The answers of the Sharing experiment (a mixin: `self` is the
    registered experiment, whose declared questions they answer)."""

    # -- analysis --
    def analyze(self, data):
        pts = [p for p in data.points if p["n"]]
        solo = {p["arm"]: p for p in pts if p["params"].get("part") == "solo"}
        fs = [p for p in pts if p["params"].get("part") == "false_sharing"]
        c2c = [p for p in pts if p["params"].get("part") == "core_to_core"]
        one_cpu = self._one_cpu_reason(data)
        out = self._false_sharing_answers(data, fs, solo, one_cpu)
        out.append(self._core_to_core_answer(data, c2c, one_cpu))
        return out

    def _one_cpu_reason(self, data):
        """Why nothing multi-threaded was measured (None when something was)."""
        if any(p["params"].get("threads", 2) != 1 for p in data.points):
            return None
        cpus = data.params.get("cpus")
        cpus = cpu_text(cpus) if isinstance(cpus, list) else (cpus or "?")
        return (f"only one CPU ({cpus}) was available to the run: sharing needs two threads "
                f"on two CPUs")

    def _penalties(self, data, fs):
        """{(arm, d): (effect answer, point, concurrent share)} vs far-apart counters."""
        q = self.declared("false_sharing")
        out = {}
        for arm in ARMS:
            arm_pts = [p for p in fs if p["arm"] == arm]
            far = [p for p in arm_pts if p["params"]["distance_bytes"] >= FAR_MIN]
            if not far:
                continue
            far_values = np.concatenate([concurrent_values(data, p) for p in far])
            far_share = min(concurrent_share(samples_of(data, p)) for p in far)
            for p in arm_pts:
                e = ans.effect(q, concurrent_values(data, p), far_values, "",
                               effect_min=PENALTY_MIN,
                               evidence=[ans.point_key(p)] + ans.evidence_keys(far))
                share = min(concurrent_share(samples_of(data, p)), far_share)
                out[(arm, p["params"]["distance_bytes"])] = (e, p, share)
        return out

    def _false_sharing_answers(self, data, fs, solo, one_cpu):
        qf, ql, qp = (self.declared(n) for n in ("false_sharing", "line_size", "padding"))
        if one_cpu:
            return [ans.not_measured(q, one_cpu) for q in (qf, ql, qp)]
        if not fs:
            reason = "the false_sharing part was not measured"
            return [ans.not_measured(q, reason) for q in (qf, ql, qp)]
        pen = self._penalties(data, fs)
        if not pen:
            reason = f"needs counters at least {FAR_MIN} B apart as the baseline"
            return [ans.not_measured(q, reason) for q in (qf, ql, qp)]
        details = []
        for (arm, d), (e, p, share) in sorted(pen.items()):
            details.append(detail(f"{arm} d={d}", arm=arm, distance_bytes=d,
                                  value=e.value, unit="ratio", ci_low=e.ci_low,
                                  ci_high=e.ci_high,
                                  verdict=_one_sided(e) if share >= CONCURRENT_SHARE_MIN
                                  else "inconclusive",
                                  ns_per_increment=p["median"], concurrent_share=share,
                                  point=ans.point_key(p)))
        for arm, p in sorted(solo.items()):
            details.append(detail(f"{arm} one thread", arm=arm, distance_bytes=None,
                                  value=p["median"], unit="ns", ci_low=p["ci_low"],
                                  ci_high=p["ci_high"], point=ans.point_key(p)))
        line = _line_bytes(data.machine)
        measured_d = sorted({d for _, d in pen})
        near = [d for d in measured_d if d < FAR_MIN]
        overlapped = all(share >= CONCURRENT_SHARE_MIN for _, _, share in pen.values())
        # -- the headline: locked increments at every distance inside one
        # line, pooled (the median over those cells, issue 22), plain ones
        # beside it.  A lock add must own the line for every increment, so
        # its ratio is the line's trips between the cores, far above the bar
        # in every replica.  A plain addq runs on while its store waits in
        # the store buffer (the next load reads it from there), and how many
        # stores commit per visit of the line is the host's timing, on both
        # sides of the bar from survey to survey (docs/machine-notes.md).
        arm = HEADLINE_ARM if any(k[0] == HEADLINE_ARM for k in pen) else min(pen)[0]
        key = min(k for k in pen if k[0] == arm)
        e, p, share = pen[key]
        pooled = {a_: _one_line(data, fs, a_, line) for a_ in ARMS}
        one_line, far_pts, near_values, far_values = pooled[arm]
        far_ns = float(np.median(far_values))
        span = f"{key[1]} B apart"
        if len(one_line) > 1:
            e = ans.effect(qf, near_values, far_values, "", effect_min=PENALTY_MIN,
                           evidence=ans.evidence_keys(one_line) + ans.evidence_keys(far_pts))
            share = min([share] + [pen[(arm, x["params"]["distance_bytes"])][2]
                                   for x in one_line])
            ds = sorted(x["params"]["distance_bytes"] for x in one_line)
            span = f"{ds[0]}-{ds[-1]} B apart (one line, pooled)"
            p = {"median": float(np.median(near_values))}
        other = next((a_ for a_ in ARMS if a_ != arm and pooled[a_][2] is not None
                      and pooled[a_][3] is not None and pooled[a_][2].size
                      and pooled[a_][3].size), None)
        a = ans.Answer(qf.id, _one_sided(e), "", value=e.value, ci_low=e.ci_low,
                       ci_high=e.ci_high,
                       evidence=e.evidence, details=details,
                       estimator=f"ratio of medians (ns per increment, concurrent samples) of "
                                 f"{arm} increments at every distance inside one line vs "
                                 f"counters >= {FAR_MIN} B apart, each side pooled")
        parallel = ""
        if arm in solo and solo[arm]["median"]:
            slow = far_ns / solo[arm]["median"]
            if slow > PARALLEL_SLOWDOWN_MAX:
                parallel = (f"; caution: far-apart counters ran {slow:.1f}x slower than one thread "
                            f"alone, so the threads did not run at full speed side by side "
                            f"(time-shared vCPUs?)")
        if not overlapped or share < CONCURRENT_SHARE_MIN:
            a.verdict = "inconclusive"
            a.because = ("threads did not overlap: inconclusive (fewer than "
                         f"{CONCURRENT_SHARE_MIN:.0%} of the samples had every thread running "
                         f"at the same time without a context switch)")
        elif key[1] >= FAR_MIN:
            a.verdict = "not_measured"
            a.because = f"no distance below {FAR_MIN} B was measured"
        else:
            other_txt = ""
            if other:
                o_near, o_far = pooled[other][2], pooled[other][3]
                o_ratio = float(np.median(o_near) / np.median(o_far))
                other_txt = (f"; {other} increments ({ARM_WORDS[other]}) take {o_ratio:.2f}x "
                             f"(not what this answer decides on"
                             + (": a plain store waits in the store buffer while the line is "
                                "away, so the line moves once for a batch of increments)"
                                if other == "plain" and o_ratio < (e.value or 0) else ")"))
            what = f"{arm} increments ({ARM_WORDS[arm]})"
            if a.verdict == DETECTED:
                a.because = (f"false sharing costs {e.value:.1f}x here: {what} of counters "
                             f"{span} take {p['median']:.2f} ns vs {far_ns:.2f} ns {FAR_MIN} B+ "
                             f"apart{other_txt}{parallel}")
            elif a.verdict == NOT_DETECTED:
                a.because = (f"No false-sharing penalty of {1 + PENALTY_MIN:g}x or more: {what} "
                             f"{span} take {e.value:.2f}x the time of far-apart ones"
                             f"{other_txt}{parallel}")
            else:
                a.because = (f"Inconclusive: {what} {span} take "
                             f"{e.value:.2f}x [{e.ci_low or float('nan'):.2f}, "
                             f"{e.ci_high or float('nan'):.2f}] the time of far-apart ones, "
                             f"undecided against the {1 + PENALTY_MIN:g}x bar"
                             f"{other_txt}{parallel}")
        out = [a]
        # -- the line size it implies, and the padding
        sysfs = f"sysfs coherency_line_size = {line} B" if line else "sysfs gives no line size"
        if not overlapped:
            reason = "threads did not overlap: inconclusive"
            out.append(ans.Answer(ql.id, "inconclusive", reason, details=details))
            out.append(ans.Answer(qp.id, "inconclusive", reason))
            return out
        if not near:
            return out + [ans.not_measured(ql, f"no distance below {FAR_MIN} B was measured"),
                          ans.not_measured(qp, f"no distance below {FAR_MIN} B was measured")]

        # One-sided: a penalty is a ratio surely above 1 + PENALTY_MIN; a
        # distance is free when every arm is surely below it.
        def penalised(d):
            return any(_one_sided(pen[(arm, d)][0]) == DETECTED for arm in ARMS if (arm, d) in pen)

        def free(d):
            return all(_one_sided(pen[(arm, d)][0]) == NOT_DETECTED
                       for arm in ARMS if (arm, d) in pen)

        if not any(penalised(d) for d in near):
            text = (f"no distance measured ({', '.join(map(str, near))} B) is surely "
                    f"{1 + PENALTY_MIN:.2f}x the far-apart counters: false sharing does not "
                    f"show, so it places no line ({sysfs})")
            out.append(ans.Answer(ql.id, "inconclusive", text, details=details))
            out.append(ans.Answer(qp.id, "inconclusive", text))
            return out
        last_bad = max(d for d in measured_d if penalised(d))
        after = [d for d in measured_d if d > last_bad and free(d)]
        size = after[0] if after else None
        if size is None:
            text = (f"a penalty up to {last_bad} B and no distance after it surely free of one "
                    f"({sysfs})")
            out.append(ans.Answer(ql.id, "inconclusive", text, details=details))
            out.append(ans.Answer(qp.id, "inconclusive", text))
            return out
        doubtful = [d for d in measured_d if last_bad < d < size]
        worst = max((pen[(arm, last_bad)][0].value or 0) for arm in ARMS if (arm, last_bad) in pen)
        agree = ("agrees" if line == size else
                 f"differs (the penalty stops at {size} B)") if line else ""
        text = (f"no penalty from {size} B apart on; penalty up to {last_bad} B "
                f"(up to {worst:.1f}x); {sysfs}{': ' + agree if agree else ''}")
        if doubtful:
            text += (f"; {', '.join(map(str, doubtful))} B not clear either way, so the line "
                     f"may be as short as {doubtful[0]} B")
        out.append(ans.measured(ql, [float(size)], text, value=float(size), details=[
            d for d in details if d.get("distance_bytes") in (last_bad, size)],
            estimator="smallest distance after the last one with a penalty",
            evidence=[ans.point_key(pen[k][1]) for k in pen if k[1] in (last_bad, size)]))
        pad = 1 << (max(size, 8) - 1).bit_length()
        checks = [pen[(arm, pad)] for arm in ARMS if (arm, pad) in pen]
        check_txt = "; ".join(f"{arm} {c[0].value:.2f}x [{c[0].ci_low or float('nan'):.2f}, "
                              f"{c[0].ci_high or float('nan'):.2f}]"
                              for arm, c in zip([a for a in ARMS if (a, pad) in pen], checks))
        because = (f"pad per-thread counters to {pad} bytes (alignas({pad}), one counter per "
                   f"{pad}-byte block): counters {pad} B apart measured "
                   f"{check_txt or 'not re-measured'} of far-apart counters")
        out.append(ans.measured(qp, [float(pad)], because, value=float(pad),
                                details=[d for d in details if d.get("distance_bytes") == pad],
                                estimator="measured line size, next power of two",
                                evidence=[ans.point_key(c[1]) for c in checks]))
        return out

    def _core_to_core_answer(self, data, c2c, one_cpu):
        q = self.declared("core_to_core")
        if one_cpu:
            return ans.not_measured(q, one_cpu)
        if not c2c:
            return ans.not_measured(q, "the core_to_core part was not measured")
        details, good = [], []
        for p in sorted(c2c, key=lambda p: (p["params"]["cpu_a"], p["params"]["cpu_b"])):
            share = concurrent_share(samples_of(data, p))
            ok = share >= CONCURRENT_SHARE_MIN
            details.append(detail(f"CPU {p['params']['cpu_a']} <-> {p['params']['cpu_b']}",
                                  cpu_a=p["params"]["cpu_a"], cpu_b=p["params"]["cpu_b"],
                                  value=p["median"], unit="ns", ci_low=p["ci_low"],
                                  ci_high=p["ci_high"], concurrent_share=share,
                                  verdict="measured" if ok else "inconclusive",
                                  point=ans.point_key(p)))
            if ok:
                good.append(p)
        if not good:
            return ans.Answer(q.id, "inconclusive", "threads did not overlap: inconclusive "
                              "(the two threads were switched out or did not run at the same "
                              "time in most samples)", details=details)
        if len(good) == 1:
            p = good[0]
            a = ans.measured(q, p["values"], "", evidence=[ans.point_key(p)], details=details)
            a.value = p["median"]
            a.ci_low, a.ci_high = p["ci_low"], p["ci_high"]
            a.because = (f"a line takes {p['median']:.0f} ns from CPU {p['params']['cpu_a']} to "
                         f"CPU {p['params']['cpu_b']} (one way, ping-pong on one flag)")
            a.estimator = f"the point's median ({p.get('method', 'per-sample')})"
            return a
        meds = [p["median"] for p in good]
        lo, hi = min(good, key=lambda p: p["median"]), max(good, key=lambda p: p["median"])
        a = ans.measured(q, meds, "", evidence=ans.evidence_keys(good), details=details,
                         estimator="median over CPU pairs of each pair's median")
        a.because = (f"median {a.value:.0f} ns one way over {len(good)} CPU pairs: from "
                     f"{lo['median']:.0f} ns (CPUs {lo['params']['cpu_a']}, "
                     f"{lo['params']['cpu_b']}) to {hi['median']:.0f} ns (CPUs "
                     f"{hi['params']['cpu_a']}, {hi['params']['cpu_b']})")
        return a
