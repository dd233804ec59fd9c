"""glibc advice: the string-function tunables (thresholds) proposed from a
copy run's curves, and the check that measures them in child processes
(advise.py gathers, advises and re-exports every name)."""
from __future__ import annotations

import math
import os
import subprocess

from ..experiments import copy as copy_analysis
from ..model import findings as fnd
from ..model import stats
from ..model.units import format_number, format_size
from .common import (
    _child_cpu,
    _interleave,
    compare_variants,
    decide,
    disagreement_text,
    replica_disagreement,
    run_child,
)

# ---- glibc tunables ------------------------------------------------------------
#
# Bounds, from glibc's sysdeps/x86/dl-cacheinfo.h (dl_init_cacheinfo):
# - x86_rep_movsb_threshold: "The REP MOVSB threshold must be greater than
#   VEC_SIZE * 8": a value <= VEC_SIZE * 8 (128 SSE2, 256 AVX, 512 AVX-512) is
#   ignored and the default kept.  rep movsb is used for sizes > threshold.
# - x86_rep_stosb_threshold: bounds 1 .. SIZE_MAX; rep stosb for sizes > it.
# - x86_non_temporal_threshold: 2.36 upstream took 0 .. SIZE_MAX; later
#   releases (and distribution 2.36 builds that carry the backport, e.g.
#   Debian's 2.36-9+deb12u*) bound it to (0x4040, SIZE_MAX >> 4] and derive
#   rep_movsb_stop_threshold from it.
# Versions differ, so every proposal is also run through `ld.so
# --list-diagnostics` with the proposed GLIBC_TUNABLES, and the value glibc
# really uses is what counts.
TUNABLES = {
    "rep_movsb_threshold": "glibc.cpu.x86_rep_movsb_threshold",
    "rep_stosb_threshold": "glibc.cpu.x86_rep_stosb_threshold",
    "non_temporal_threshold": "glibc.cpu.x86_non_temporal_threshold",
}
NT_MINIMUM = 0x4040


def glibc_vector(flags, preferred):
    """The vector strategy glibc's memcpy/memset use below the rep threshold:
    AVX-512 when usable and not Prefer_No_AVX512, else AVX2 when
    AVX_Fast_Unaligned_Load, else SSE2 (sysdeps/x86_64/multiarch/ifunc-memmove.h)."""
    flags, preferred = flags or {}, preferred or {}
    if flags.get("avx512f") and flags.get("avx512vl") is not False \
            and not preferred.get("Prefer_No_AVX512"):
        return "avx512", 64
    if preferred.get("AVX_Fast_Unaligned_Load") or flags.get("avx2"):
        return "avx2", 32
    return "sse", 16


def _as_stat(v):
    """(median, lo, hi) from a stat tuple or a bare number (no uncertainty)."""
    if isinstance(v, (tuple, list)):
        return float(v[0]), float(v[1]), float(v[2])
    return float(v), float(v), float(v)


def _clear_log_ratio(b, a):
    """log(median b / median a) where the copy analysis calls one of them
    clearly faster (disjoint CIs, more than CLEAR_WIN apart), else 0: the
    same tie rule as copy's ranges and crossovers."""
    b, a = _as_stat(b), _as_stat(a)
    return math.log(b[0] / a[0]) if copy_analysis.clear_winner(b, a) else 0.0


def best_threshold(sizes, below, above, prefer=None, candidates=None):
    """The threshold T (sizes <= T take `below`, sizes > T take `above`) that
    minimises the summed log cost ratio to the faster path over the sizes
    where copy's tie rule calls one clearly faster (ties cost nothing).  Among equally
    good T the one nearest `prefer` (the current value) wins, so noise never
    moves a threshold.  below/above: {size: (median, lo, hi) or ns}.
    `candidates` limits T to those sizes (plus both ends and `prefer`).
    Returns (T, loss); T = sizes[0] - 1 means "above everywhere"."""
    sizes = [s for s in sorted(sizes) if s in below and s in above]
    if not sizes:
        return None, None
    d = {s: _clear_log_ratio(below[s], above[s]) for s in sizes}
    cands = {sizes[0] - 1, sizes[-1]} | (set(sizes) if candidates is None else
                                         {c for c in candidates if sizes[0] <= c <= sizes[-1]})
    if prefer is not None and sizes[0] - 1 <= prefer <= sizes[-1]:
        cands.add(prefer)

    def loss(t):
        return sum(max(0.0, d[s]) if s <= t else max(0.0, -d[s]) for s in sizes)

    def distance(t):
        return 0.0 if prefer is None else abs(math.log(max(t, 1)) - math.log(max(prefer, 1)))
    scored = sorted((round(loss(t), 9), distance(t), t) for t in cands)
    return scored[0][2], scored[0][0]


def path_gain(sizes, below, above, current, proposed):
    """Geometric-mean speedup (median cost under current / under proposed)
    over the measured sizes whose path changes, and those sizes."""
    if current is None or proposed is None:
        return None, []
    lo, hi = min(current, proposed), max(current, proposed)
    changed = [s for s in sorted(sizes) if lo < s <= hi and s in below and s in above]
    if not changed:
        return 1.0, []

    def cost(s, t):
        return _as_stat(below[s] if s <= t else above[s])[0]
    logs = [math.log(cost(s, current) / cost(s, proposed)) for s in changed]
    return math.exp(sum(logs) / len(logs)), changed


def propose_tunable(name, sizes, below, above, current, minimum=None, maximum=None,
                    min_gain=None, below_name="", above_name=""):
    """Proposal for one threshold tunable from two curves.  Returns a dict:
    name, tunable, current, proposed (None = keep), expected_gain (from the
    curves), changed_sizes, reason."""
    min_gain = fnd.threshold("effect_min") if min_gain is None else min_gain
    out = {"name": name, "tunable": TUNABLES[name], "current": current, "proposed": None,
           "optimum": None, "expected_speedup": None, "changed_sizes": [],
           "below": below_name, "above": above_name, "reason": ""}
    window = [s for s in sorted(sizes) if s in below and s in above
              and (minimum is None or s > minimum) and (maximum is None or s <= maximum)]
    if len(window) < 2:
        out["reason"] = "too few measured sizes in the range this tunable governs"
        return out
    # The threshold sits where the copy analysis's rule (copy.clear_wins,
    # copy.find_crossovers: disjoint CIs, more than CLEAR_WIN apart, runs of
    # MIN_RUN sizes) says the faster path changes, over every size both were
    # measured at: between the end of a run where `below` clearly wins and
    # the start of the next run where `above` does (or the end of the
    # window), or before the first `above` run; within such a bracket, where
    # the summed cost is least.
    both = [s for s in sorted(sizes) if s in below and s in above]
    cb = {s: _as_stat(below[s]) for s in both}
    ca = {s: _as_stat(above[s]) for s in both}
    crossings = [c for c in copy_analysis.find_crossovers(cb, ca, below_name or "below",
                                                          above_name or "above")
                 if c.high >= window[0] and c.low <= window[-1]]
    runs = copy_analysis.clear_wins(cb, ca)
    clear = {s for s in window if copy_analysis.clear_winner(cb[s], ca[s]) == "a"}
    cands = set()
    for i, r in enumerate(runs):
        nxt = runs[i + 1]["min_size"] if i + 1 < len(runs) else window[-1]
        if r["faster"] == "a":
            # from the last size of the run where `below` clearly wins (ties
            # inside a run do not end it) to where `above` starts to win
            wins = [s for s in clear if r["min_size"] <= s <= r["max_size"]]
            start = max(wins) if wins else min(r["max_size"], window[0] - 1)
            cands |= {s for s in window if start <= s <= nxt}
            if start < window[0]:
                cands.add(window[0] - 1)
        elif i == 0:
            cands |= {s for s in window if s <= r["min_size"]} | {window[0] - 1}
    t, _ = best_threshold(window, below, above, prefer=current, candidates=cands)
    out["optimum"] = t
    if minimum is not None and (t <= minimum or t < window[0]):
        # "above everywhere measured": the lowest value glibc accepts
        t = minimum + 1            # glibc ignores values at or below its minimum
    if maximum is not None and t > maximum:
        t = maximum
    out["crossovers"] = [copy_analysis.crossing_dict(c) for c in crossings]
    out["evidence"] = _threshold_evidence(window, below, above, current, t)
    if current is None:
        out.update(proposed=t, reason="current value unknown; proposing the measured optimum")
        return out
    speedup, changed = path_gain(window, below, above, current, t)
    out.update(expected_speedup=speedup, changed_sizes=changed)
    if t == current or speedup is None or speedup < 1.0 + min_gain:
        out["reason"] = (f"the measured curves gain less than {min_gain:.0%} from moving it "
                         f"(optimum {t})" if t != current else "already at the measured optimum")
        return out
    out["proposed"] = t
    out["reason"] = (f"{below_name} is faster up to {t} B, {above_name} above"
                     if below_name else "measured optimum")
    return out


def _threshold_evidence(sizes, below, above, current, proposed, limit=8):
    """The measured points a proposal rests on: the sizes whose path it
    changes plus the neighbours of the new threshold (median and CI of both)."""
    lo = min(x for x in (current, proposed) if x is not None)
    hi = max(x for x in (current, proposed) if x is not None)
    near = [s for s in sizes if lo < s <= hi]
    if len(near) > limit:
        near = [near[int(round(i * (len(near) - 1) / (limit - 1)))] for i in range(limit)]
    around = [s for s in sizes if s <= proposed][-1:] + [s for s in sizes if s > proposed][:1]
    out = []
    for s in sorted(set(near) | set(around)):
        b, a = _as_stat(below[s]), _as_stat(above[s])
        out.append({"size": s, "below_ns": b[0], "below_ci": [b[1], b[2]],
                    "above_ns": a[0], "above_ci": [a[1], a[2]]})
    return out


def tunable_proposals(curves_copy, curves_set, thresholds, flags, preferred):
    """Proposals for the three x86 tunables.  thresholds: current values from
    ld.so --list-diagnostics ({} if unknown)."""
    vec, vec_bytes = glibc_vector(flags, preferred)
    props = []
    movsb_min = 8 * vec_bytes
    c_vec = dict(curves_copy.get(vec, {}))
    c_rep = dict(curves_copy.get("rep_movsb", {}))
    stop = thresholds.get("rep_movsb_stop_threshold")
    p = propose_tunable("rep_movsb_threshold", sorted(set(c_vec) & set(c_rep)), c_vec, c_rep,
                        thresholds.get("rep_movsb_threshold"), minimum=movsb_min, maximum=stop,
                        below_name=f"copy_{vec}", above_name="copy_rep_movsb")
    p["vector"] = vec
    props.append(p)
    s_vec = dict(curves_set.get(vec, {}))
    s_rep = dict(curves_set.get("rep_stosb", {}))
    # memset only considers rep stosb above 2 * VEC_SIZE (memset-vec-unaligned-erms.S).
    p = propose_tunable("rep_stosb_threshold", sorted(set(s_vec) & set(s_rep)), s_vec, s_rep,
                        thresholds.get("rep_stosb_threshold"), minimum=2 * vec_bytes,
                        below_name=f"set_{vec}", above_name="set_rep_stosb")
    p["vector"] = vec
    props.append(p)
    # Large copies: below the NT threshold glibc copies with rep movsb where
    # the CPU has ERMS (up to rep_movsb_stop_threshold), else its vector loop.
    temporal = c_rep if (flags or {}).get("erms", True) and c_rep else c_vec
    c_nt = dict(curves_copy.get("nt", {}))
    p = propose_tunable("non_temporal_threshold", sorted(set(temporal) & set(c_nt)), temporal, c_nt,
                        thresholds.get("non_temporal_threshold"), minimum=NT_MINIMUM,
                        below_name="copy_rep_movsb" if temporal is c_rep else f"copy_{vec}",
                        above_name="copy_nt")
    props.append(p)
    return props


# ---- does a proposal hold? ------------------------------------------------------------

# The copy question whose crossover each tunable's threshold rests on.
CROSSOVER_QUESTION = {"rep_movsb_threshold": "copy.rep_movsb_crossover",
                      "rep_stosb_threshold": "copy.rep_stosb_crossover",
                      "non_temporal_threshold": "copy.nt_crossover"}


def _curve_named(curves, name):
    """{size: stat} of a path named as a proposal names it ("copy_rep_movsb")."""
    op, _, strategy = (name or "").partition("_")
    return (curves.get(op) or {}).get(strategy) or {}


def threshold_in_use(prop):
    """The threshold a proposal leaves in force: proposed, else the current one."""
    return prop.get("proposed") if prop.get("proposed") is not None else prop.get("current")


def tunable_stability(pooled, replicas, curves, earlier=()):
    """Does the pooled proposal hold across the replicas (each analysed
    alone) and the machine's earlier runs (``earlier``: each one's pooled
    proposal for the same tunable)?  Their thresholds route the sizes
    between them differently; common.replica_disagreement costs each path
    there on the pooled curves ({"copy": {strategy: curve}, "set": ...}).
    None without a proposal or two voters."""
    t = threshold_in_use(pooled)
    values = [v for v in (threshold_in_use(r) for r in replicas if r) if v is not None]
    before = [v for v in (threshold_in_use(r) for r in earlier if r) if v is not None]
    if pooled.get("proposed") is None or t is None or len(values) + len(before) < 2:
        return None
    below = _curve_named(curves, pooled.get("below"))
    above = _curve_named(curves, pooled.get("above"))
    names = {"below": pooled.get("below") or "below", "above": pooled.get("above") or "above"}

    def pick(th):
        return lambda z: names["below"] if z <= th else names["above"]

    def cost(z, name):
        curve = below if name == names["below"] else above
        return _as_stat(curve[z])[0] if z in curve else None
    d = replica_disagreement(sorted(set(below) & set(above)), pick(t),
                             [pick(v) for v in values + before], cost)
    return {**d, "replica_values": values, "earlier_values": before,
            "reason": disagreement_text(d, len(values), "path", len(before))}


def crossover_check(prop, copy_doc, replica_props=()):
    """The crossovers a proposal rests on, with the span of each one's CI
    (ci_high / ci_low): the copy question's answer (its replica-level CI),
    and the proposal's own crossing nearest its threshold as the replicas,
    each analysed alone, place it (stats.combine_replicas over their
    crossings, each with its bracket as its CI).  A crossover located no
    better than crossover_max_span drives no advice.  Returns (crossovers,
    reason or None)."""
    t = prop.get("proposed")
    if t is None:
        return [], None
    found = []
    qid = CROSSOVER_QUESTION.get(prop.get("name"))
    for a in (copy_doc or {}).get("answers") or []:
        lo, hi = a.get("ci_low"), a.get("ci_high")
        if a.get("question") == qid and a.get("verdict") == fnd.DETECTED \
                and isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo > 0:
            found.append({"what": qid, "value": a.get("value"), "ci_low": lo, "ci_high": hi})

    def nearest(crossings, size):
        return min(crossings, key=lambda c: abs(math.log(max(c["size"], 1) / max(size, 1))),
                   default=None)
    own = nearest(prop.get("crossovers") or [], t)
    if own is not None:
        theirs = [nearest(r.get("crossovers") or [], own["size"]) for r in replica_props if r]
        theirs = [c for c in theirs if c is not None]
        if len(theirs) >= 2:
            c = stats.combine_replicas([c["size"] for c in theirs], [c["low"] for c in theirs],
                                       [c["high"] for c in theirs],
                                       confidence=fnd.threshold("ci_level"))
            found.append({"what": f"{prop.get('below')} vs {prop.get('above')} "
                                  f"({len(theirs)} replicas)",
                          "value": own["size"], "ci_low": min(c["ci_low"], own["size"]),
                          "ci_high": max(c["ci_high"], own["size"])})
    limit = fnd.threshold("crossover_max_span")
    for f in found:
        f["span"] = f["ci_high"] / f["ci_low"]
    wide = [f for f in found if f["span"] > limit]
    if not wide:
        return found, None
    # a crossover that cannot be placed is a location the next run moves:
    # the advice resting on it is unstable, as one the replicas disagree on
    return found, ("not advised: unstable: the crossover it rests on is located no better than "
                   f"x{limit:g} (crossover_max_span): " + "; ".join(
                       f"{f['what']} ~{format_size(f['value'])}, CI {format_size(f['ci_low'])}–"
                       f"{format_size(f['ci_high'])} (x{format_number(f['span'])})" for f in wide))


# ---- the glibc check ------------------------------------------------------------------

def run_libc_child(kernel, sizes, tunables_value, samples=3, min_ms=1.0, cpu=None, timeout=300):
    """{size: [ns per call]} of `kernel` (copy_libc / set_libc) in a child
    process started with GLIBC_TUNABLES=tunables_value (None = unset):
    glibc reads its tunables once, at process start."""
    env = dict(os.environ)
    env.pop("GLIBC_TUNABLES", None)
    if tunables_value:
        env["GLIBC_TUNABLES"] = tunables_value
    return run_child({"what": "kernel", "kernel": kernel, "sizes": [int(s) for s in sizes],
                      "samples": samples, "min_ms": min_ms},
                     env=env, cpu=_child_cpu() if cpu is None else cpu, timeout=timeout,
                     what="libc check")


def tunables_env(base, name, value):
    """GLIBC_TUNABLES text: `base` (may be None) with `name` set to `value`."""
    items = [i for i in (base or "").split(":") if i and not i.startswith(name + "=")]
    if value is not None:
        items.append(f"{name}={int(value)}")
    return ":".join(items) or None


def effective_thresholds(env_value, ld_so=None):
    """Thresholds glibc uses with GLIBC_TUNABLES=env_value, from `ld.so
    --list-diagnostics` parsed by memfx.lab.machine; None if unavailable."""
    from ..lab.machine import find_ld_so, parse_ld_diagnostics
    path = ld_so or find_ld_so()
    if not path:
        return None
    env = {"GLIBC_TUNABLES": env_value} if env_value else {}
    try:
        proc = subprocess.run([path, "--list-diagnostics"], capture_output=True, timeout=10,
                              env=env, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    parsed = parse_ld_diagnostics(proc.stdout.decode("utf-8", "replace"))
    return parsed["thresholds"] if parsed["version"] else None


def libc_check_sizes(prop, measured_sizes, limit=6, control_max=None):
    """Sizes whose path the proposal changes (up to `limit`, spread out) plus
    one control size on each side (none above `control_max` bytes, when
    given: above a DRAM-sized non-temporal threshold the upper control is
    half as large again, and faulting in two such buffers made each check
    process take six times as long; docs/machine-notes.md)."""
    cur, new = prop.get("current"), prop.get("proposed")
    if cur is None:                 # current value unknown: look around the proposal
        cur = new * 2
    lo, hi = min(cur, new), max(cur, new)
    inside = [s for s in sorted(measured_sizes) if lo < s <= hi]
    if not inside:
        inside = sorted({int(round(lo + (hi - lo) * f)) for f in (0.25, 0.5, 1.0)} - {lo})
    if len(inside) > limit:
        step = (len(inside) - 1) / (limit - 1)
        inside = sorted({inside[int(round(i * step))] for i in range(limit)})
    controls = [max(1, int(lo * 0.75)), int(hi * 1.5)]
    if control_max is not None:
        controls = [c for c in controls if c <= control_max]
    return sorted(set(inside)), controls


def glibc_check(prop, measured_sizes, rounds=7, samples=3, min_ms=1.0, seed=0, on_round=None,
                control_max=None):
    """Measure libc with the current vs the proposed value of one tunable."""
    kernel = "set_libc" if prop["name"] == "rep_stosb_threshold" else "copy_libc"
    base = os.environ.get("GLIBC_TUNABLES")
    advised_env = tunables_env(base, prop["tunable"], prop["proposed"])
    inside, controls = libc_check_sizes(prop, measured_sizes, control_max=control_max)
    sizes = sorted(set(inside) | set(controls))
    cpu = _child_cpu()
    envs = {"current": base, "advised": advised_env}
    data = _interleave(("current", "advised"), rounds, seed,
                       lambda v: run_libc_child(kernel, sizes, envs[v], samples, min_ms, cpu), on_round)
    cmp = compare_variants(data["current"], data["advised"], inside, seed=seed)
    decision, reason = decide(cmp["overall"], cmp["per_size"], cmp["classes"])
    return {**cmp, "decision": decision, "reason": reason, "kernel": kernel,
            "env": {"current": base, "advised": advised_env}, "rounds": rounds,
            "samples_per_process": samples, "cpu": cpu}
