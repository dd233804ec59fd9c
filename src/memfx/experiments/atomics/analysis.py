"""Atomics' analysis: the single-thread cost of each operation, the
contended cost, the CAS ratio against Drepper's, the remote cost and the
lost updates, as methods of AtomicsAnswers, which Atomics inherits (a mixin:
`self` is the registered experiment), with the kernel map and Drepper's
figures they compare with.  The protocol (__init__.py) re-exports every name."""
from __future__ import annotations

from ...model import answers as ans
from ...model.details import detail
from ...model.findings import DETECTED, NOT_DETECTED
from .._kit import (
    CONCURRENT_SHARE_MIN,
    concurrent_share,
    concurrent_values,
    samples_of,
)

KERNELS = {"fetch_add": "at_fetch_add", "add_fetch": "at_add_fetch", "cas": "at_cas",
           "xchg": "at_xchg", "plain": "at_plain", "remote": "at_remote"}


OPS = tuple(KERNELS)


# Drepper's table (seed 004, "Atomic Increment in a Loop"): 4 threads x 1e6
# increments of one variable, seconds.
DREPPER_SECONDS = {"fetch_add": 0.23, "add_fetch": 0.21, "cas": 0.73}


DREPPER_CAS_RATIO = DREPPER_SECONDS["cas"] / DREPPER_SECONDS["fetch_add"]


# "Still about 3x": the CAS/xadd ratio's CI lies above this (2x is where a
# ratio stops being closer to 1 than to Drepper's 3.2).
CAS_FAR_DEARER = 2.0


def _point_answer(q, p, details):
    """A measured answer whose value and CI are the point's (its estimator,
    e.g. the N/2N difference, is the one the table shows)."""
    a = ans.measured(q, p["values"], "", evidence=[ans.point_key(p)], details=details,
                     estimator=f"the point's median ({p.get('method', 'per-sample')})")
    a.value, a.ci_low, a.ci_high = p["median"], p["ci_low"], p["ci_high"]
    if a.ci_low is not None and a.ci_high is not None and not a.ci_low <= a.value <= a.ci_high:
        a.ci_low = a.ci_high = None
    return a


class AtomicsAnswers:
    """The answers of the Atomics experiment (a mixin: `self` is the
    registered experiment, whose declared questions they answer)."""

    # -- analysis --
    def analyze(self, data):
        pts = [p for p in data.points if p["n"]]
        by = {(p["arm"], p["params"]["threads"]): p for p in pts}
        share = {k: concurrent_share(samples_of(data, p)) if k[1] > 1 else 1.0
                 for k, p in by.items()}
        most = max((t for _, t in by), default=0)
        details = []
        for (op, t), p in sorted(by.items(), key=lambda kv: (kv[0][1], OPS.index(kv[0][0]))):
            d = detail(f"{op} x{t}", op=op, threads=t, value=p["median"],
                       unit="ns", ci_low=p["ci_low"], ci_high=p["ci_high"],
                       ns_per_op_all_threads=p["median"] / t, concurrent_share=share[(op, t)],
                       point=ans.point_key(p))
            c = p.get("counters") or {}
            d = d.updated(**{key: c[key] for key in ("cas_retries_per_op", "lost_share",
                                                     "writer_stores") if key in c})
            if t > 1 and share[(op, t)] < CONCURRENT_SHARE_MIN:
                d = d.updated(verdict="inconclusive")
            details.append(d)
        out = [self._single(by, details)]
        if most < 2:
            reason = (f"only one CPU ({data.params.get('cpus')}) was available to the run: "
                      f"contention needs two threads on two CPUs")
            return out + [ans.not_measured(self.declared(n), reason)
                          for n in ("contended", "cas_ratio", "remote_line", "lost_updates")]
        out.append(self._contended(by, share, most, details))
        out.append(self._cas_ratio(data, by, share, most, details))
        out.append(self._remote(data, by, share, most, details))
        out.append(self._lost(data, by, share, most, details))
        return out

    def _single(self, by, details):
        q = self.declared("single_thread")
        p = by.get(("fetch_add", 1))
        if p is None:
            return ans.not_measured(q, "fetch_add with one thread was not measured")
        alone = [d for d in details if d["threads"] == 1]
        ranking = ", ".join(f"{d['op']} {d['value']:.2f}" for d in sorted(alone,
                                                                           key=lambda d: d["value"]))
        a = _point_answer(q, p, details=alone)
        a.because = (f"one lock xadd costs {p['median']:.2f} ns uncontended; all operations "
                     f"alone, ns: {ranking}")
        return a

    def _contended(self, by, share, most, details):
        q = self.declared("contended")
        p = by.get(("fetch_add", most))
        if p is None:
            return ans.not_measured(q, f"fetch_add with {most} threads was not measured")
        if share[("fetch_add", most)] < CONCURRENT_SHARE_MIN:
            return ans.Answer(q.id, "inconclusive", "threads did not overlap: inconclusive "
                              f"(fetch_add with {most} threads)", details=details)
        a = _point_answer(q, p, details=[d for d in details if d["threads"] > 1])
        alone = by.get(("fetch_add", 1))
        vs = f", {p['median'] / alone['median']:.0f}x the uncontended one" if alone else ""
        a.because = (f"with {most} threads on one variable a lock xadd costs {p['median']:.1f} ns "
                     f"per thread{vs} ({p['median'] / most:.1f} ns per increment of the "
                     f"variable)")
        return a

    def _cas_ratio(self, data, by, share, most, details):
        q = self.declared("cas_ratio")
        cas, xadd = by.get(("cas", most)), by.get(("fetch_add", most))
        if not (cas and xadd):
            return ans.not_measured(q, f"needs cas and fetch_add with {most} threads")
        e = ans.effect(q, concurrent_values(data, cas), concurrent_values(data, xadd),
                       "",
                       evidence=[ans.point_key(cas), ans.point_key(xadd)])
        rows = []
        for t in sorted({t for _, t in by}):
            c, x = by.get(("cas", t)), by.get(("fetch_add", t))
            if c and x:
                r = ans.effect(q, concurrent_values(data, c),
                               concurrent_values(data, x), "")
                rows.append(detail(f"cas / fetch_add x{t}", threads=t, value=r.value,
                                   unit="ratio", ci_low=r.ci_low, ci_high=r.ci_high,
                                   verdict=r.verdict,
                                   cas_retries_per_op=(c.get("counters") or {}).get(
                                       "cas_retries_per_op")))
        at_most = sorted((d for d in details if d["threads"] == most), key=lambda d: d["value"])
        e.details = rows + at_most
        if min(share[("cas", most)], share[("fetch_add", most)]) < CONCURRENT_SHARE_MIN:
            e.verdict = "inconclusive"
            e.because = ("threads did not overlap: inconclusive (cas or fetch_add with "
                         f"{most} threads)")
            return e
        retries = (cas.get("counters") or {}).get("cas_retries_per_op")
        retry_txt = f", {retries:.1%} of CAS attempts failed" if retries is not None else ""
        ranking = " < ".join(d["op"] for d in at_most)
        single = next((r for r in rows if r["threads"] == 1), None)
        single_txt = f"; alone {single['value']:.2f}x" if single and single["value"] else ""
        if e.ci_low is not None and e.ci_low > CAS_FAR_DEARER:
            e.verdict, verdict_txt = DETECTED, "yes, CAS is still far dearer"
        elif e.ci_high is not None and e.ci_high < CAS_FAR_DEARER:
            e.verdict = NOT_DETECTED
            verdict_txt = f"no: not the {DREPPER_CAS_RATIO:.1f}x Drepper measured"
        else:
            e.verdict, verdict_txt = "inconclusive", "not clear"
        e.because = (f"{verdict_txt}: a CAS loop costs {e.value:.2f}x a lock xadd with {most} "
                     f"threads{retry_txt}{single_txt} (Drepper, 4 threads: "
                     f"{DREPPER_CAS_RATIO:.1f}x); ranking with {most} threads: {ranking}")
        return e

    def _remote(self, data, by, share, most, details):
        q = self.declared("remote_line")
        p = by.get(("remote", most)) or by.get(("remote", 2))
        if p is None:
            return ans.not_measured(q, "the remote arm with other threads was not measured")
        t = p["params"]["threads"]
        if share[("remote", t)] < CONCURRENT_SHARE_MIN:
            return ans.Answer(q.id, "inconclusive", "threads did not overlap: inconclusive "
                              f"(remote with {t} threads)")
        local = by.get(("remote", 1))
        a = _point_answer(q, p, details=[d for d in details if d["op"] == "remote"])
        ratio = ""
        if local:
            r = ans.effect(q, concurrent_values(data, p), local["values"], "")
            ratio = (f", {r.value:.1f}x [{r.ci_low or float('nan'):.1f}, "
                     f"{r.ci_high or float('nan'):.1f}] a lock add of a line it owns "
                     f"({local['median']:.2f} ns)")
        a.because = (f"a lock add of a line {t - 1} other core(s) keep storing to costs "
                     f"{p['median']:.1f} ns{ratio}")
        return a

    def _lost(self, data, by, share, most, details):
        q = self.declared("lost_updates")
        p = by.get(("plain", most))
        if p is None:
            return ans.not_measured(q, f"plain with {most} threads was not measured")
        values = [s["counters"].get("lost_share") for s in samples_of(data, p)]
        values = [v for v in values if v is not None]
        if not values:
            return ans.not_measured(q, "no sample recorded its lost updates")
        a = ans.measured(q, values, "", evidence=[ans.point_key(p)],
                         details=[d for d in details if d["op"] == "plain"],
                         estimator="median over samples of the share of increments lost")
        if share[("plain", most)] < CONCURRENT_SHARE_MIN:
            a.verdict = "inconclusive"
            a.because = "threads did not overlap: inconclusive (plain increments)"
        elif a.value and a.value > 0:
            a.verdict = DETECTED
            a.because = (f"yes: {most} threads adding 1 without lock lost {a.value:.1%} of the "
                         f"increments (median over {len(values)} samples, every one of them "
                         f"checked); use a locked add or per-thread counters")
        elif max(values) == 0:
            a.verdict = NOT_DETECTED
            a.because = (f"no increment was lost in {len(values)} samples of {most} threads, "
                         f"although nothing prevents it")
        else:
            a.verdict = "inconclusive"
            a.because = (f"increments were lost in some of {len(values)} samples "
                         f"(up to {max(values):.1%}), median 0")
        return a
