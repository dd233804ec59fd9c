"""Advice that holds (issue 39): a GCC string or glibc tunable is advised
only where every replica of the copy run gives it (or their disagreement
costs less than the no-effect band on the pooled data), only when its check
is faster in every size class it changes, with gains from a log-scale
bootstrap, and never from a crossover located no better than a factor of
two.  All on synthetic curves and samples: nothing is measured."""
import math
import time

import numpy as np
import pytest

from memfx.advice import advise as A
from memfx.experiments.copy import BASELINE
from memfx.experiments.copy import strategy_ranges as copy_ranges
from memfx.model import findings as fnd
from memfx.model.units import format_size
from memfx.store.store import Store

BAND = fnd.threshold("effect_band")

# ns per call of `s` bytes; baseline x86-64 strategies only matter to GCC
MODEL = {
    "rep_movsb": lambda s: 30 + s / 64, "rep_movsq": lambda s: 40 + s / 40,
    "gpr_unrolled": lambda s: 2 + s / 16, "sse": lambda s: 3 + s / 24,
    "libc": lambda s: 6 + s / 40, "nt": lambda s: 400 + s / 80,
}
SET_NAME = {"rep_movsb": "rep_stosb", "rep_movsq": "rep_stosq"}
FLAGS = {"erms": True, "avx2": True}
GLIBC = {"available": False, "version": "2.36",
         "thresholds": {"rep_movsb_threshold": 2112, "rep_stosb_threshold": 2048,
                        "non_temporal_threshold": 0x28e0000,
                        "rep_movsb_stop_threshold": 0x28e0000},
         "preferred": {"AVX_Fast_Unaligned_Load": True, "Prefer_No_AVX512": False}}


def grid():
    out = list(range(1, 17)) + list(range(24, 257, 8))
    s = 256.0
    while s < (1 << 22):
        s *= 2 ** 0.25
        out.append(int(round(s)))
    return sorted(set(out))


def doc(model=MODEL, noise=0.0, seed=0, ci=0.02, answers=None, sizes=None):
    """A copy document's points: each median the model's times (1 + noise x
    a normal draw), its CI +-ci."""
    rng = np.random.default_rng(seed)
    pts = []
    for op in ("copy", "set"):
        for arm, f in model.items():
            name = SET_NAME.get(arm, arm) if op == "set" else arm
            for s in sizes or grid():
                m = f(s) * (1 + noise * rng.standard_normal())
                pts.append({"arm": name, "params": {"op": op, "size_bytes": s,
                                                    "mode": "throughput"},
                            "metric": "ns_per_call", "median": m, "ci_low": m * (1 - ci),
                            "ci_high": m * (1 + ci)})
    out = {"run_id": "synthetic", "points": pts, "machine": {"flags": FLAGS}}
    if answers is not None:
        out["answers"] = answers
    return out


def pooled_table(d, op="copy"):
    return A.alg_table(A.point_curves(d["points"], op, "throughput"))


def costly_sizes(pooled, strings, op="copy"):
    """Sizes where some string picks another algorithm than the pooled
    string and the picks' pooled costs are beyond the band (worked out here,
    not by the code under test)."""
    table = pooled_table(pooled, op)
    out = []
    for s in A.complete_sizes(table):
        algs = {A.alg_at(x, s) for x in strings}
        costs = [table[s][a][0] for a in algs if a in table[s]]
        if len(algs) > 1 and (len(costs) < len(algs) or max(costs) > min(costs) * (1 + BAND)):
            out.append(s)
    return out


# ---- 1. the same advice from every replica --------------------------------------------

def test_replicas_that_agree_give_the_string():
    replicas = [doc(noise=0.002, seed=i) for i in range(3)]
    adv = A.build_advice(doc(), GLIBC, replica_docs=replicas)
    for fn, g in adv["gcc"].items():
        assert g["string"] and g["not_advised"] is None
        assert g["stability"]["agree"] and g["stability"]["stable"]
        assert g["stability"]["replica_strings"] == [g["string"]] * 3
        assert "every one of the 3 replicas" in g["stability"]["reason"]


def test_boundaries_sit_where_the_algorithms_cross_on_a_round_size():
    # gpr (2 + s/16) and libc (6 + s/40) cross at 107 B and are within the
    # band of each other from ~96 to ~119 B: the roundest size there
    g = A.build_advice(doc(), GLIBC)["gcc"]["memcpy"]
    parsed = A.validate_strategy(g["string"])
    assert parsed[0] == ("unrolled_loop", 96, "noalign")
    assert A.roundest(88, 120) == 96 and A.roundest(88, 128) == 128 and A.roundest(89, 95) == 92
    assert A.roundest(124, 127) == 124 and A.roundest(7, 7) == 7


def test_noise_within_the_replicas_cis_moves_copys_edges_not_the_string():
    """Replicas off the model by 1 %: the edges of copy's tie rule (where a
    strategy stops being within 10 % of the fastest) differ in every
    replica; the GCC boundaries, placed where two algorithms cross and
    snapped to the roundest size of their tie, mostly do not, and never
    where it costs more than the band."""
    raw_kinds = string_kinds = 0
    for seed in range(6):
        replicas = [doc(noise=0.01, seed=10 * seed + i) for i in range(3)]
        adv = A.build_advice(doc(), GLIBC, replica_docs=replicas)
        for fn, op in (("memcpy", "copy"), ("memset", "set")):
            g = adv["gcc"][fn]
            assert g["not_advised"] is None and g["stability"]["stable"]
            raw = {tuple((r["strategy"], r["max_size"]) for r in
                         copy_ranges(d["points"], op, "throughput", BASELINE)) for d in replicas}
            raw_kinds += len(raw)
            string_kinds += len(set(g["stability"]["replica_strings"]))
    assert raw_kinds >= 30 and string_kinds <= 18


@pytest.mark.parametrize("seed", range(6))
def test_replicas_that_differ_at_a_tie_give_the_same_string_or_unstable(seed):
    """Each replica's points off the model by 3 % (more than their own CIs
    say): where their strings differ at a size whose picks cost more than
    the band on the pooled data, the string is not advised ("unstable",
    naming the sizes); otherwise it is, with the sizes they differ at."""
    replicas = [doc(noise=0.03, seed=10 * seed + i) for i in range(3)]
    pooled = doc(noise=0.01, seed=1000 + seed)
    adv = A.build_advice(pooled, GLIBC, replica_docs=replicas)
    for fn, op in (("memcpy", "copy"), ("memset", "set")):
        g = adv["gcc"][fn]
        strings = g["stability"]["replica_strings"]
        assert len(strings) == 3
        costly = costly_sizes(pooled, strings + [g["string"]], op)
        if costly:
            assert g["not_advised"].startswith("not advised: unstable")
            spans = [sp for sp in g["stability"]["spans"] if sp["cost_ratio"] > 1 + BAND]
            for z in costly:            # each inside a span the reason names
                sp = next(sp for sp in spans if sp["min_size"] <= z <= sp["max_size"])
                assert format_size(sp["min_size"]) in g["not_advised"]
        else:
            assert g["not_advised"] is None and g["stability"]["stable"]


def test_a_replica_that_picks_a_dearer_algorithm_makes_the_string_unstable():
    # one replica of three measured the SSE loop twice as fast from 512 B to
    # 4 KiB; the pooled points (the model) say libc is faster there
    odd = dict(MODEL, sse=lambda s: (3 + s / 24) * (0.45 if 512 <= s <= 4096 else 1.0))
    replicas = [doc(), doc(seed=1), doc(odd)]
    adv = A.build_advice(doc(), GLIBC, replica_docs=replicas)
    g = adv["gcc"]["memcpy"]
    assert "vector_loop" in g["stability"]["replica_strings"][2]
    assert g["not_advised"].startswith("not advised: unstable")
    assert not g["stability"]["stable"]
    (sp,) = [sp for sp in g["stability"]["spans"] if sp["min_size"] <= 1024 <= sp["max_size"]]
    assert sp["cost_ratio"] > 1.3 and {"libcall", "vector_loop"} <= set(sp["picks"])
    assert f"{format_size(sp['min_size'])}–{format_size(sp['max_size'])}" in g["not_advised"]
    # the same string from every replica agrees
    assert A.gcc_stability(g, [{"string": g["string"]}] * 3,
                           A.point_curves(doc()["points"], "copy", "throughput"))["agree"]


def test_replicas_differing_where_it_costs_nothing_keep_the_string():
    strings = ["unrolled_loop:96:noalign,libcall:-1:noalign",
               "unrolled_loop:104:noalign,libcall:-1:noalign"]
    curves = A.point_curves(doc()["points"], "copy", "throughput")
    st = A.gcc_stability({"string": strings[0]}, [{"string": s} for s in strings + strings[:1]],
                         curves)
    assert not st["agree"] and st["stable"]                 # 104 B: gpr and libc within 1 %
    assert [(sp["min_size"], sp["max_size"]) for sp in st["spans"]] == [(104, 104)]
    assert "differ only where" in st["reason"]


def test_a_tunable_the_replicas_place_apart_is_unstable():
    sizes = [1024 * 2 ** (i / 4) for i in range(21)]
    sizes = sorted({int(s) for s in sizes})
    vec = {s: (s / 10, s / 10 * 0.99, s / 10 * 1.01) for s in sizes}
    rep = {s: ((s / 10) * (2.0 if s <= 4096 else (1.2 if s < 16384 else 0.5)),) * 3
           for s in sizes}
    curves = {"copy": {"avx2": vec, "rep_movsb": rep}}
    pooled = {"name": "rep_movsb_threshold", "current": 2112, "proposed": 16000,
              "below": "copy_avx2", "above": "copy_rep_movsb"}
    # two replicas put the threshold at 16000, one at 4096: between, rep movsb
    # is 20 % dearer on the pooled curves
    reps = [dict(pooled), dict(pooled), dict(pooled, proposed=4096)]
    st = A.tunable_stability(pooled, reps, curves)
    assert not st["stable"] and st["replica_values"] == [16000, 16000, 4096]
    assert "not advised: unstable" in st["reason"] and format_size(
        min(s for s in sizes if s > 4096)) in st["reason"]
    # a replica that keeps the current value disagrees from 2112 up
    st = A.tunable_stability(pooled, reps[:2] + [dict(pooled, proposed=None)], curves)
    assert not st["stable"] and st["spans"][0]["min_size"] == min(s for s in sizes if s > 2112)
    # the same spread where both paths cost the same is stable
    flat = {"copy": {"avx2": vec, "rep_movsb": {s: (v[0] * 1.01,) * 3 for s, v in vec.items()}}}
    st = A.tunable_stability(pooled, reps, flat)
    assert not st["agree"] and st["stable"]
    assert A.tunable_stability(pooled, [dict(pooled)] * 3, curves)["agree"]


# ---- 2. advised only where it is faster in every size class it changes -----------------

def _samples(center, n=9, spread=0.01, seed=0):
    rng = np.random.default_rng(seed)
    return list(center * (1 + spread * rng.standard_normal(n)))


def test_a_size_class_measured_slower_is_never_advised():
    # 30 % faster at 64 and 128 B, 40 % slower at 384 KiB: faster on the mean
    current = {64: _samples(10, seed=1), 128: _samples(10, seed=2), 393216: _samples(10, seed=3),
               96: _samples(10, seed=4)}
    advised = {64: _samples(5, seed=5), 128: _samples(5, seed=6), 393216: _samples(14, seed=7),
               96: _samples(5, seed=8)}
    cmp = A.compare_variants(current, advised)
    assert cmp["overall"]["ratio"] < 1 and cmp["overall"]["verdict"] == fnd.DETECTED
    assert [(c["min_size"], c["max_size"]) for c in cmp["classes"]] == [(64, 511),
                                                                          (262144, 2097151)]
    decision, reason = A.decide(cmp["overall"], cmp["per_size"], cmp["classes"])
    assert decision == "keep" and "slower at 384 KiB" in reason
    assert "measured slower" in reason


def test_a_size_class_whose_ci_reaches_zero_is_not_advised():
    current = {64: _samples(10, seed=1), 128: _samples(10, seed=2),
               8192: _samples(10, spread=0.2, seed=3)}
    advised = {64: _samples(5, seed=5), 128: _samples(5, seed=6),
               8192: _samples(10, spread=0.2, seed=7)}
    cmp = A.compare_variants(current, advised)
    cls = {c["min_size"]: c for c in cmp["classes"]}
    assert cls[64]["gain_ci_low"] > 0 and cls[4096]["gain_ci_low"] <= 0 < cls[4096]["gain_ci_high"]
    assert not A.slower_sizes(cmp["per_size"])
    decision, reason = A.decide(cmp["overall"], cmp["per_size"], cmp["classes"])
    assert decision == "keep" and "not in every size class" in reason and "4 KiB" in reason
    # faster in both classes: advised
    advised[8192] = _samples(6, spread=0.02, seed=9)
    current[8192] = _samples(10, spread=0.02, seed=10)
    cmp = A.compare_variants(current, advised)
    decision, reason = A.decide(cmp["overall"], cmp["per_size"], cmp["classes"])
    assert decision == "advise" and "each of the 2 size classes" in reason


def test_advise_never_comes_with_a_slower_size():
    seen = set()
    for seed in range(20):
        rng = np.random.default_rng(seed)
        sizes = [64, 512, 4096, 32768, 262144]
        current = {s: _samples(10, spread=0.05, seed=seed * 10 + i) for i, s in enumerate(sizes)}
        advised = {s: _samples(10 * float(rng.uniform(0.6, 1.1)), spread=0.05,
                               seed=seed * 10 + 5 + i) for i, s in enumerate(sizes)}
        cmp = A.compare_variants(current, advised)
        decision, reason = A.decide(cmp["overall"], cmp["per_size"], cmp["classes"])
        slower = A.slower_sizes(cmp["per_size"])
        seen.add((decision, bool(slower)))
        if decision == "advise":
            assert not slower and "slower" not in reason
            assert all(c["gain_ci_low"] > 0 for c in cmp["classes"])
        elif slower:
            assert reason.startswith("measured slower at ")
    assert {("advise", False), ("keep", True)} <= seen


def test_a_stored_advise_with_a_slower_size_reads_keep_in_the_report():
    from memfx.report import advice as R
    row = {"size": 393216, "affected": True, "ratio": 1.9, "ci_low": 1.6, "ci_high": 2.2,
           "gain": -0.477}
    advice = {"kind": "memfx-advice", "gcc": {}, "glibc": {"version": "2.36", "tunables": [
        {"tunable": "glibc.cpu.x86_non_temporal_threshold", "current": 1 << 25,
         "proposed": 1 << 18, "decision": "advise",
         "check_reason": "measured faster: gain +12.0%; slower at 384 KiB (-47.7 %)",
         "check": {"overall": {"ratio": 0.89, "ci_low": 0.85, "ci_high": 0.93},
                   "per_size": [row]}}], "advised_env": "glibc.cpu.x86_non_temporal_threshold=262144"}}
    html = R.advice_summary_html(advice)
    assert "v-detected" not in html and ">keep<" in html
    assert "Advised environment" not in html
    assert not any(ok for ok, _ in R._advice_lines(advice))


# ---- 3. gains from a log-scale bootstrap --------------------------------------------------

def test_gain_ci_is_a_log_scale_bootstrap_never_below_minus_100_percent():
    rng = np.random.default_rng(4)
    current = {s: list(10 * np.exp(0.05 * rng.standard_normal(7))) for s in (64, 4096)}
    # an advised variant that is sometimes 30x slower: 1 - ratio read -223 %
    advised = {s: list(10 * np.exp(1.5 * rng.standard_normal(7))) for s in (64, 4096)}
    cmp = A.compare_variants(current, advised)
    rows = cmp["per_size"] + cmp["classes"] + [cmp["overall"]]
    for r in rows:
        assert -1 < r["gain_ci_low"] <= r["gain"] <= r["gain_ci_high"]
        assert r["gain"] == pytest.approx(1 / r["ratio"] - 1)
        assert r["gain_ci_low"] == pytest.approx(1 / r["ci_high"] - 1)
        assert r["gain_ci_high"] == pytest.approx(1 / r["ci_low"] - 1)
        low = float(A.gain_text(r).split("[")[1].split("%")[0])
        assert low > -100
    # the point: exp(mean over sizes of log(median current / median advised)) - 1
    logs = [math.log(np.median(current[s]) / np.median(advised[s])) for s in (64, 4096)]
    assert cmp["overall"]["gain"] == pytest.approx(math.exp(sum(logs) / 2) - 1)
    assert min(r["ci_high"] for r in rows) > 1          # the ratio's CI reaches far above 1 ...
    assert max(r["ci_high"] for r in rows) > 2          # ... beyond where 1 - ratio < -100 %


def test_reported_gains_read_the_ratio_on_the_log_scale():
    from memfx.report import advice as R
    from memfx.report import screen
    overall = {"ratio": 1.0, "ci_low": 0.966, "ci_high": 3.23, "gain": 0.0}
    text = R._gain_text({"overall": overall})
    assert text == "+0.0% [-69.0%, +3.5%]"              # 1 - ratio read [-223.0%, +3.4%]
    assert screen._gain_text(overall) == "measured " + text        # one formatter (units.gain_text)


# ---- 4. a crossover located no better than x2 drives no advice --------------------------

# glibc's vector here (AVX2) and rep movsb cross at ~5.8 KB
CROSSING = dict(MODEL, avx2=lambda s: 2 + s / 20, rep_movsb=lambda s: 200 + s / 64)


def _crossover_answer(lo, hi, value=27505.0):
    return [{"question": "copy.rep_movsb_crossover", "verdict": fnd.DETECTED, "value": value,
             "ci_low": lo, "ci_high": hi}]


def test_a_crossover_whose_ci_spans_more_than_two_drives_no_tunable():
    assert fnd.threshold("crossover_max_span") == 2.0
    wide = A.build_advice(doc(CROSSING, answers=_crossover_answer(896.0, 6.7e6)), GLIBC)
    p = next(t for t in wide["glibc"]["tunables"] if t["name"] == "rep_movsb_threshold")
    assert p["proposed"] is not None                   # proposed from the curves ...
    assert p["not_advised"].startswith("not advised: unstable: the crossover")   # ... but not advised
    assert "copy.rep_movsb_crossover" in p["not_advised"] and "crossover_max_span" in p["not_advised"]
    assert "896 B" in p["not_advised"] and p["crossover_cis"][0]["span"] > 7000
    narrow = A.build_advice(doc(CROSSING, answers=_crossover_answer(4096.0, 7168.0, 5800.0)),
                            GLIBC)
    q = next(t for t in narrow["glibc"]["tunables"] if t["name"] == "rep_movsb_threshold")
    assert q["proposed"] == p["proposed"] and q["not_advised"] is None
    assert q["crossover_cis"][0]["span"] == pytest.approx(1.75)


def test_the_replicas_crossings_are_a_crossover_ci_too():
    prop = {"name": "non_temporal_threshold", "proposed": 1 << 20, "below": "copy_rep_movsb",
            "above": "copy_nt", "crossovers": [{"size": 1 << 20, "low": 786432, "high": 1 << 21}]}

    def rep(size):
        return {"crossovers": [{"size": size, "low": int(size * 0.8), "high": int(size * 1.2)}]}
    found, why = A.crossover_check(prop, {}, [rep(1 << 20), rep(1 << 20), rep(int(1.05 * (1 << 20)))])
    assert why is None and found[0]["span"] < 2
    found, why = A.crossover_check(prop, {}, [rep(1 << 18), rep(1 << 20), rep(1 << 22)])
    assert why and "3 replicas" in why and found[0]["span"] > 2
    assert A.crossover_check(dict(prop, proposed=None), {}, []) == ([], None)


# ---- 5. the loop: advise, apply, measure again ---------------------------------------------

LOOP = {"rep_movsb": lambda s: 200 + s / 64, "avx2": lambda s: 2 + s / 20,
        "gpr_unrolled": lambda s: 2 + s / 12, "sse": lambda s: 3 + s / 16,
        "nt": lambda s: 300 + s / 50}
LOOP_SIZES = sorted({int(round(2 ** (i / 2))) for i in range(0, 41)})


def _libc(threshold):
    """glibc's memcpy: its vector loop up to the rep movsb threshold, rep movsb above."""
    return lambda s: 1 + (LOOP["avx2"](s) if s <= threshold else LOOP["rep_movsb"](s))


def _store_copy_run(store, threshold, seed, odd=None, odd_replicas=(2,), preset="quick"):
    """A complete copy run of three replicas whose libc follows `threshold`
    (the strategies of the replicas in `odd_replicas` from `odd` where it
    names them)."""
    run_id = store.begin_run("copy", {}, preset, {
        "flags": FLAGS, "glibc": {"version": "2.36", "diagnostics": {
            "thresholds": {"rep_movsb_threshold": threshold}}}})
    rng = np.random.default_rng(seed)
    model = dict(LOOP, libc=_libc(threshold))
    samples = []
    for replica in range(3):
        for arm, f in dict(model, **((odd or {}) if replica in odd_replicas else {})).items():
            for s in LOOP_SIZES:
                if arm == "nt" and s < 4096:
                    continue
                for _ in range(5):
                    v = f(s) * (1 + 0.005 * rng.standard_normal())
                    samples.append({"arm": arm, "replica": replica,
                                    "point": {"op": "copy", "size_bytes": s, "mode": "throughput"},
                                    "metric": "ns_per_call", "unit": "ns", "value": v,
                                    "length": 1000, "ns": v * 1000})
    store.add_samples(run_id, samples)
    store.finish_run(run_id, "complete")
    return run_id


def test_the_advise_apply_measure_again_loop_is_consistent(db_path):
    """README's loop: `memfx advise` on A proposes a rep movsb threshold;
    B is measured with it applied (libc takes its vector loop up to the new
    threshold); advise on B keeps it and gives the same GCC string, and
    libc's curve moved exactly at the sizes the tunable said it changes."""
    glibc_a = dict(GLIBC, thresholds=dict(GLIBC["thresholds"]))
    with Store(db_path) as store:
        run_a = _store_copy_run(store, glibc_a["thresholds"]["rep_movsb_threshold"], seed=1)
        adv_a = A.advise(store, check=False, glibc=glibc_a)
        prop_a = next(p for p in adv_a["glibc"]["tunables"] if p["name"] == "rep_movsb_threshold")
        assert prop_a["proposed"] and prop_a["proposed"] > 2112 and prop_a["not_advised"] is None
        assert prop_a["stability"]["stable"] and prop_a["decision"] == "unchecked"
        assert adv_a["gcc"]["memcpy"]["stability"]["agree"]
        new = prop_a["proposed"]
        glibc_b = dict(GLIBC, thresholds=dict(GLIBC["thresholds"], rep_movsb_threshold=new))
        run_b = _store_copy_run(store, new, seed=2)
        adv_b = A.advise(store, check=False, glibc=glibc_b)
        assert adv_b["sources"]["copy"]["run_id"] == run_b != run_a
        prop_b = next(p for p in adv_b["glibc"]["tunables"] if p["name"] == "rep_movsb_threshold")
        assert prop_b["proposed"] is None and prop_b["current"] == new
        assert "already at the measured optimum" in prop_b["reason"]
        # where libc moved between A and B: the sizes the tunable changes
        moved = [s for s in LOOP_SIZES if _libc(2112)(s) != _libc(new)(s)]
        assert moved and set(prop_a["changed_sizes"]) <= set(moved)
        assert all(2112 < s <= new for s in moved)
        # GCC's libcall follows libc: the strings differ only where libc
        # moved, or where the two picks cost the same (within the band)
        cost = {"libcall": _libc(new), "rep_byte": LOOP["rep_movsb"], "vector_loop": LOOP["sse"],
                "unrolled_loop": LOOP["gpr_unrolled"]}
        sa, sb = adv_a["gcc"]["memcpy"]["string"], adv_b["gcc"]["memcpy"]["string"]
        for s in LOOP_SIZES:
            a, b = A.alg_at(sa, s), A.alg_at(sb, s)
            if a != b and s not in moved:
                ca, cb = cost[a](s), cost[b](s)
                assert max(ca, cb) <= min(ca, cb) * (1 + BAND), (s, a, b)
        assert adv_b["gcc"]["memcpy"]["stability"]["agree"]


def test_advise_neither_checks_nor_advises_what_does_not_hold(db_path):
    # the last replica measured rep movsb 3x faster from 1 KiB: its string
    # and threshold are not the others'
    odd = {"rep_movsb": lambda s: LOOP["rep_movsb"](s) / (3 if s >= 1024 else 1)}
    with Store(db_path) as store:
        _store_copy_run(store, 2112, seed=3, odd=odd)
        adv = A.advise(store, check=False, glibc=GLIBC)
    g = adv["gcc"]["memcpy"]
    assert g["not_advised"].startswith("not advised: unstable")
    assert g["decision"] == "keep" and g["checked"] is False
    assert g["check_reason"] == g["not_advised"]
    assert adv["glibc"]["advised_env"] is None


def test_keeping_the_current_value_is_unstable_when_a_replica_would_change_it():
    """The pooled curves propose no change, one replica analysed alone
    proposes one: "keep" holds no better than a change would, and says so."""
    from memfx.advice.advise import hold
    pooled = {"name": "x86_non_temporal_threshold", "current": 3 << 20, "proposed": None}
    replica = {"glibc": {"tunables": [dict(pooled, proposed=1310720)]}, "gcc": {}}
    keeper = {"glibc": {"tunables": [dict(pooled)]}, "gcc": {}}
    adv = {"gcc": {}, "glibc": {"tunables": [dict(pooled)]}}
    hold(adv, {}, {"copy": {}, "set": {}}, [replica, keeper, keeper])
    why = adv["glibc"]["tunables"][0]["not_advised"]
    assert why.startswith("not advised: unstable: 1 of the 3 replicas") and "1.25 MiB" in why
    adv = {"gcc": {}, "glibc": {"tunables": [dict(pooled)]}}
    hold(adv, {}, {"copy": {}, "set": {}}, [keeper, keeper, keeper])
    assert adv["glibc"]["tunables"][0]["not_advised"] is None


# ---- the machine's earlier runs vote too -------------------------------------------------

# a host state that lasts longer than a run: rep movsb 3x faster from 1 KiB
# in every replica of one run
REP_FAST = {"rep_movsb": lambda s: LOOP["rep_movsb"](s) / (3 if s >= 1024 else 1)}


def test_an_earlier_run_in_another_host_state_makes_the_advice_unstable():
    """Every replica of this run agrees; an earlier run of the machine, in
    another state, picks rep movsb from 1 KiB: the string is not advised,
    and the reason names the earlier run as a voter."""
    replicas = [doc(noise=0.002, seed=i) for i in range(3)]
    fast = {**LOOP, **REP_FAST}
    earlier = [doc(model={**MODEL, **{k: v for k, v in fast.items() if k in MODEL}}, seed=9)]
    alone = A.build_advice(doc(), GLIBC, replica_docs=replicas)
    assert alone["gcc"]["memcpy"]["not_advised"] is None
    adv = A.build_advice(doc(), GLIBC, replica_docs=replicas, earlier_docs=earlier)
    g = adv["gcc"]["memcpy"]
    assert g["string"] == alone["gcc"]["memcpy"]["string"]      # the pooled pick is this run's
    assert g["not_advised"].startswith("not advised: unstable: the 3 replicas and 1 earlier run "
                                       "on this machine disagree at ")
    assert g["stability"]["earlier_strings"] and not g["stability"]["stable"]


def test_earlier_runs_that_agree_keep_the_advice():
    replicas = [doc(noise=0.002, seed=i) for i in range(3)]
    earlier = [doc(noise=0.002, seed=10 + i) for i in range(2)]
    adv = A.build_advice(doc(), GLIBC, replica_docs=replicas, earlier_docs=earlier)
    for g in adv["gcc"].values():
        assert g["not_advised"] is None and g["stability"]["agree"]
        assert "every one of the 3 replicas and 2 earlier runs on this machine" \
            in g["stability"]["reason"]


def test_an_earlier_run_that_would_change_a_kept_tunable_makes_keep_unstable():
    from memfx.advice.advise import hold
    pooled = {"name": "x86_non_temporal_threshold", "current": 3 << 20, "proposed": None}
    keeper = {"glibc": {"tunables": [dict(pooled)]}, "gcc": {}}
    changer = {"glibc": {"tunables": [dict(pooled, proposed=1310720)]}, "gcc": {}}
    adv = {"gcc": {}, "glibc": {"tunables": [dict(pooled)]}}
    hold(adv, {}, {"copy": {}, "set": {}}, [keeper, keeper, keeper], [changer])
    why = adv["glibc"]["tunables"][0]["not_advised"]
    assert why.startswith("not advised: unstable: 1 of the 3 replicas and 1 earlier run")


def test_advise_reads_the_machines_earlier_runs_of_the_same_libc(db_path):
    """advise() takes the earlier complete copy runs of the same machine,
    preset and libc configuration as voters: a run in another host state
    makes the next run's string unstable; a run measured under other glibc
    tunables (or another preset) does not vote."""
    with Store(db_path) as store:
        first = _store_copy_run(store, 2112, seed=1)
        adv1 = A.advise(store, check=False, glibc=GLIBC)
        assert adv1["earlier_runs"] == [] and adv1["gcc"]["memcpy"]["not_advised"] is None
        time.sleep(1.1)          # runs are ordered by their start (whole seconds)
        _store_copy_run(store, 2112, seed=2, odd=REP_FAST, odd_replicas=(0, 1, 2))
        adv2 = A.advise(store, check=False, glibc=GLIBC)
        assert adv2["earlier_runs"] == [first]
        assert "1 earlier run on this machine disagree" in adv2["gcc"]["memcpy"]["not_advised"]
        time.sleep(1.1)
        # another libc configuration and another preset: neither earlier run votes
        _store_copy_run(store, 8192, seed=3)
        _store_copy_run(store, 2112, seed=4, preset="full")
        adv3 = A.advise(store, check=False, glibc=GLIBC)
        assert adv3["earlier_runs"] == []
        assert adv3["gcc"]["memcpy"]["not_advised"] is None


def test_earlier_copy_documents_takes_at_most_the_history_limit(db_path):
    with Store(db_path) as store:
        ids = []
        for i in range(3):
            ids.append(_store_copy_run(store, 2112, seed=i))
            time.sleep(1.1)
        newest = store.run(_store_copy_run(store, 2112, seed=5))
        got = A.earlier_copy_documents(store, newest, limit=2)
        assert [d["run_id"] for d in got] == [ids[2], ids[1]]
        assert A.earlier_copy_documents(store, newest, limit=0) == []
        assert A.earlier_copy_documents(store, store.run(ids[0])) == []
