"""memfx advise: strategy strings, ranges, tunables, the keep-or-advise
decision, the GCC check's compile path and the CLI, on synthetic curves
(timing thresholds are never asserted)."""
import hashlib
import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from memfx.advice import advise as A
from memfx.model import findings as fnd
from memfx.store.store import Store

DATA = os.path.join(os.path.dirname(__file__), "data")

# Synthetic cost models, ns per call of `s` bytes: a small-size step for rep
# movsb at 128 B (as on FSRM parts), GPR loop best when tiny, libc in the
# middle, rep movsb from ~6 KB, NT from ~30 KB.
MODEL = {
    "rep_movsb": lambda s: (5 + s / 64) if s <= 128 else (30 + s / 64),
    "rep_movsq": lambda s: 25 + s / 32,
    "gpr_unrolled": lambda s: 2 + s / 16,
    "sse": lambda s: 3 + s / 24,
    "avx2": lambda s: 3 + s / 40,
    "avx512": lambda s: 4 + s / 48,
    "libc": lambda s: 4 + s / 50,
    "nt": lambda s: 200 + s / 100,
}
SET_NAME = {"rep_movsb": "rep_stosb", "rep_movsq": "rep_stosq"}


def sizes():
    out = list(range(1, 257))
    s = 256
    while s < 64 << 20:
        s = int(s * 1.5)
        out.append(s)
    return out


def synthetic_doc(model=MODEL, modes=("throughput", "latency"), ci=0.02, flags=None):
    pts = []
    for op in ("copy", "set"):
        for mode in modes:
            for arm, f in model.items():
                name = SET_NAME.get(arm, arm) if op == "set" else arm
                for s in sizes():
                    m = f(s) * (1.0 if mode == "throughput" else 1.5)
                    pts.append({"arm": name, "params": {"op": op, "size_bytes": s, "mode": mode},
                                "metric": "ns_per_call", "median": m,
                                "ci_low": m * (1 - ci), "ci_high": m * (1 + ci)})
    return {"run_id": "synthetic", "points": pts,
            "machine": {"flags": flags or {"erms": True, "fsrm": True, "avx2": True,
                                           "avx512f": True, "avx512vl": True}}}


GLIBC = {"available": True, "version": "2.36",
         "thresholds": {"rep_movsb_threshold": 2112, "rep_stosb_threshold": 2048,
                        "non_temporal_threshold": 0x28e0000, "rep_movsb_stop_threshold": 0x28e0000},
         "preferred": {"AVX_Fast_Unaligned_Load": True, "Prefer_No_AVX512": False}}


def check_string_rules(s):
    parsed = A.validate_strategy(s)
    assert 1 <= len(parsed) <= 4
    assert parsed[-1][1] == -1
    maxes = [m for _, m, _ in parsed[:-1]]
    assert maxes == sorted(maxes) and len(set(maxes)) == len(maxes)
    assert all(alg in A.GCC_ALGORITHMS for alg, _, _ in parsed)
    return parsed


# ---- strategy strings --------------------------------------------------------

def test_strategy_string_maps_strategies_and_ends_with_minus_one():
    s = A.strategy_string([("gpr_unrolled", 256), ("libc", 999)])
    assert s == "unrolled_loop:256:noalign,libcall:-1:noalign"
    s = A.strategy_string([{"strategy": "rep_movsq", "max_size": 64, "dest_align": "align"},
                           {"alg": "vector_loop", "max_size": 4096}, ("nt", -1)])
    assert s == "rep_8byte:64:align,vector_loop:4096:noalign,libcall:-1:noalign"
    check_string_rules(s)


@pytest.mark.parametrize("good", [
    "libcall:-1:noalign",
    "unrolled_loop:256:noalign,libcall:-1:noalign",           # the seed's kernel flag
    "rep_byte:8192:align,libcall:-1:noalign",
    "byte_loop:8:noalign,loop:64:align,rep_4byte:1024:noalign,rep_8byte:-1:align",
])
def test_validate_accepts_what_gcc_accepts(good):
    assert A.validate_strategy(good)[-1][1] == -1


@pytest.mark.parametrize("bad", [
    "", " libcall:-1:noalign", "libcall:-1:noalign ", "libcall:-1",          # syntax
    "libcall:-1:noalign,",                                                     # empty range
    "memcpy:-1:noalign",                                                       # unknown alg
    "libcall:-1:aligned",                                                      # bad dest_align
    "unrolled_loop:256:noalign",                                               # last not -1
    "unrolled_loop:256:noalign,vector_loop:128:noalign,libcall:-1:noalign",  # decreasing
    "unrolled_loop:256:noalign,vector_loop:256:noalign,libcall:-1:noalign",  # not increasing
    "loop:16:noalign,loop:32:noalign,loop:64:noalign,loop:128:noalign,libcall:-1:noalign",  # 5
    "libcall:-1:noalign,loop:64:noalign",                                      # after -1
    "loop:0:noalign,libcall:-1:noalign", "loop:-5:noalign,libcall:-1:noalign",
    "loop:2147483648:noalign,libcall:-1:noalign",                             # > INT_MAX
    "loop:0x40:noalign,libcall:-1:noalign",
])
def test_validate_rejects_bad_strings(bad):
    with pytest.raises(A.StrategyError):
        A.validate_strategy(bad)


def test_strategy_string_refuses_decreasing_sizes():
    with pytest.raises(A.StrategyError):
        A.strategy_string([("gpr_unrolled", 256), ("sse", 128), ("libc", -1)])


# ---- ranges from curves ------------------------------------------------------

def test_gcc_ranges_follow_the_synthetic_crossovers():
    curves = A.point_curves(synthetic_doc()["points"], "copy", "throughput")
    g = A.gcc_ranges(curves)
    parsed = check_string_rules(g["string"])
    assert [r["alg"] for r in g["ranges"]] == [p[0] for p in parsed]
    # gpr loop first (fastest below the 48-byte crossover with the SSE loop,
    # and tied within copy's 10 % until libc, the simpler one, is fastest at
    # ~60 B), libc in the middle, rep movsb around 6..30 KB, NT (libcall) at the end.
    assert parsed[0][0] == "unrolled_loop" and 48 <= parsed[0][1] <= 64
    assert parsed[-1][0] == "libcall"
    assert "rep_byte" in [p[0] for p in parsed]
    rep = next(r for r in g["ranges"] if r["alg"] == "rep_byte")
    assert 5000 < rep["min_size"] and rep["last_measured_size"] < 40000
    # the first range's gain is measured against its runner-up
    assert g["ranges"][0]["runner_up"] == "vector_loop"
    assert g["ranges"][0]["speedup_vs_runner_up"] > 1.0


def test_avx_curves_do_not_argue_for_gcc_vector_loop():
    # AVX-512 fastest at every size; baseline GCC can only emit SSE loops.
    model = {"gpr_unrolled": lambda s: 2 + s / 16, "sse": lambda s: 50 + s / 8,
             "avx512": lambda s: 1 + s / 100, "libc": lambda s: 10 + s / 50}
    curves = A.point_curves(synthetic_doc(model)["points"], "copy", "throughput")
    algs = [r["alg"] for r in A.gcc_ranges(curves)["ranges"]]
    assert "vector_loop" not in algs
    assert algs == ["unrolled_loop", "libcall"]


def test_noisy_alternation_collapses_to_at_most_four_ranges():
    rng = np.random.default_rng(3)
    pts = []
    for s in range(1, 257):
        for arm in ("gpr_unrolled", "sse", "rep_movsb", "libc", "rep_movsq"):
            m = 10 * (1 + 0.05 * rng.standard_normal())
            pts.append({"arm": arm, "params": {"op": "copy", "size_bytes": s, "mode": "throughput"},
                        "metric": "ns_per_call", "median": m, "ci_low": m * 0.999, "ci_high": m * 1.001})
    g = A.gcc_ranges(A.point_curves(pts, "copy", "throughput"))
    check_string_rules(g["string"])
    assert len(g["ranges"]) <= 4
    covered = sum(r["n_sizes"] for r in g["ranges"])
    assert covered == 256


def test_sizes_refined_for_one_pair_do_not_make_ranges():
    doc = synthetic_doc(modes=("throughput",))
    # a refinement measured only rep_movsb (slow there) between 1000 and 1001
    doc["points"].append({"arm": "rep_movsb", "params": {"op": "copy", "size_bytes": 100000001,
                                                         "mode": "throughput"},
                          "metric": "ns_per_call", "median": 1.0, "ci_low": 0.9, "ci_high": 1.1})
    curves = A.point_curves(doc["points"], "copy", "throughput")
    assert 100000001 not in A.complete_sizes(A.alg_table(curves))
    g = A.gcc_ranges(curves)
    assert g["ranges"][-1]["last_measured_size"] != 100000001
    best = A.build_advice(doc, GLIBC)["best"]["copy"]["throughput"]
    assert best and all(r["max_size"] != 100000001 for r in best)


def test_merge_gives_away_the_range_that_loses_least():
    # loop | rep(1 size, barely better) | loop | libcall | rep | vector
    table = {}
    def row(s, **c):
        table[s] = {a: (v, v, v, a) for a, v in c.items()}
    row(1, loop=1.0, rep_byte=2.0, libcall=3.0, vector_loop=3.0)
    row(2, loop=1.01, rep_byte=1.0, libcall=3.0, vector_loop=3.0)    # tiny win for rep
    row(3, loop=1.0, rep_byte=2.0, libcall=3.0, vector_loop=3.0)
    row(4, loop=3.0, rep_byte=3.0, libcall=1.0, vector_loop=3.0)
    row(5, loop=3.0, rep_byte=1.0, libcall=3.0, vector_loop=3.0)
    row(6, loop=3.0, rep_byte=3.0, libcall=3.0, vector_loop=1.0)
    ranges = [{"alg": a, "sizes": [s]} for s, a in
              [(1, "loop"), (2, "rep_byte"), (3, "loop"), (4, "libcall"), (5, "rep_byte"),
               (6, "vector_loop")]]
    merged = A.merge_ranges(ranges, table)
    assert [(r["alg"], r["sizes"]) for r in merged] == [
        ("loop", [1, 2, 3]), ("libcall", [4]), ("rep_byte", [5]), ("vector_loop", [6])]


def test_advice_ranges_are_the_copy_analysis_ranges():
    """advise had a second best-ranges algorithm that gave 32 ranges where the
    copy analysis gives 8 on the same points (captured quick run); the
    advice now shows copy's ranges, and its GCC ranges come from copy's
    baseline ranges (only merged down when there are more than four)."""
    from memfx.experiments import copy as C
    with open(os.path.join(DATA, "advise_copy_quick_points.json")) as f:
        doc = json.load(f)
    adv = A.build_advice(doc, _captured_glibc())
    assert not hasattr(A, "best_ranges")
    for op in ("copy", "set"):
        for mode, shown in adv["best"][op].items():
            copy_ranges = C.strategy_ranges(doc["points"], op, mode)
            assert [{k: r[k] for k in ("strategy", "min_size", "max_size")} for r in shown] \
                == copy_ranges
        base = C.strategy_ranges(doc["points"], op, "throughput", C.BASELINE)
        g = adv["gcc"]["memcpy" if op == "copy" else "memset"]
        if len(base) <= A.MAX_RANGES:
            assert [r["alg"] for r in g["ranges"]] == \
                [x["alg"] for x in A._collapse([{"alg": A.STRATEGY_ALG[r["strategy"]],
                                                  "sizes": [r["min_size"]]} for r in base])]
    assert len(adv["best"]["copy"]["throughput"]) == \
        len(C.strategy_ranges(doc["points"], "copy", "throughput")) <= 12
    # a copy document with answers: advise reads the answer, not the points
    answered = dict(doc, answers=[{"question": "copy.best_strategy", "details": [
        {"kind": "ranges", "mode": "throughput", "ranges": [
            {"strategy": "libc", "min_size": 1, "max_size": 1 << 30}],
         "baseline_ranges": [{"strategy": "libc", "min_size": 1, "max_size": 1 << 30}]}]}])
    adv = A.build_advice(answered, _captured_glibc())
    assert [r["strategy"] for r in adv["best"]["copy"]["throughput"]] == ["libc"]
    assert adv["gcc"]["memcpy"]["string"] == "libcall:-1:noalign"


# ---- glibc tunables --------------------------------------------------------------

def test_best_threshold_is_the_last_size_below_the_crossover():
    sz = [1000, 2000, 4000, 8000, 16000]
    below = {s: 1 + s / 100 for s in sz}
    above = {s: 40 + s / 200 for s in sz}          # equal at 7800
    t, loss = A.best_threshold(sz, below, above)
    assert t == 4000 and loss == 0.0               # every size takes its faster path
    # Reversed: `below` is now the slow path up to 4000 and wins only at 8000
    # and 16000 (80 vs 81, 120 vs 161). Taking it there would cost 4000 and
    # less (45/11, 50/21, 60/41) far more, so "above everywhere" (sizes[0] - 1)
    # wins, and its loss is what it gives up where `below` wins clearly: 16000
    # (161 vs 120); 81 vs 80 at 8000 is a tie by copy's clear-win rule.
    t, loss = A.best_threshold(sz, above, below)
    assert t == 999
    assert loss == pytest.approx(math.log(161 / 120))
    # a current value among equally good thresholds is kept: noise never moves it
    flat = {s: 10.0 for s in sz}
    assert A.best_threshold(sz, flat, dict(flat), prefer=2000) == (2000, 0.0)


def test_tunable_proposals_from_synthetic_points():
    doc = synthetic_doc()
    curves_c = A.point_curves(doc["points"], "copy", "throughput")
    curves_s = A.point_curves(doc["points"], "set", "throughput")
    props = {p["name"]: p for p in A.tunable_proposals(curves_c, curves_s, GLIBC["thresholds"],
                                                        doc["machine"]["flags"], GLIBC["preferred"])}
    movsb = props["rep_movsb_threshold"]
    # avx512 (glibc's vector here) vs rep movsb: 4+s/48 = 30+s/64 at s = 4992
    assert movsb["vector"] == "avx512"
    assert movsb["proposed"] is not None and movsb["proposed"] < 4992
    # the threshold sits inside the bracket of copy's crossover of the two curves
    (c,) = movsb["crossovers"]
    assert c["low"] <= movsb["proposed"] <= c["high"] and c["faster_above"] == "copy_rep_movsb"
    # the last size where avx512 is clearly faster (copy's tie rule): the next
    # one is a tie or a win for rep movsb
    nxt = min(s for s in sizes() if s > movsb["proposed"])
    assert A._clear_log_ratio(curves_c["avx512"][nxt], curves_c["rep_movsb"][nxt]) >= 0
    assert A._clear_log_ratio(curves_c["avx512"][movsb["proposed"]],
                              curves_c["rep_movsb"][movsb["proposed"]]) < 0
    assert movsb["expected_speedup"] > 1.0 and movsb["changed_sizes"]
    assert all(2112 < s <= movsb["proposed"] for s in movsb["changed_sizes"])
    nt = props["non_temporal_threshold"]
    assert nt["proposed"] is not None and nt["proposed"] > A.NT_MINIMUM
    assert nt["below"] == "copy_rep_movsb"


def test_tunable_kept_when_current_is_already_right():
    sz = [1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288]
    below = {s: 1.0 + s / 100 for s in sz}
    above = {s: 30 + s / 400 for s in sz}       # crossover ~3870; 4096 within 10 %: a tie
    p = A.propose_tunable("rep_movsb_threshold", sz, below, above, current=3072 + 500)
    assert p["proposed"] is None                # 3572 and the optimum 3072 route the same sizes
    p = A.propose_tunable("rep_movsb_threshold", sz, below, above, current=12288)
    assert p["proposed"] == 4096                # the tie at 4096 stays nearest the current value
    assert [(c["low"], c["high"]) for c in p["crossovers"]] == [(3072, 6144)]


def test_threshold_ends_where_copy_says_the_vector_loop_stops_winning():
    # the vector loop clearly wins (copy's rule: > 10 %, disjoint CIs) up to
    # 16K, then the two tie up to the window's end: the threshold goes to the
    # last clear win, not to the end of the window
    sz = [2048 * 2 ** i for i in range(10)]
    below = {s: (s / 100, s / 100 * 0.99, s / 100 * 1.01) for s in sz}
    above = {s: (s / 100 * (1.3 if s <= 16384 else 1.02),) * 3 for s in sz}
    p = A.propose_tunable("rep_movsb_threshold", sz, below, above, current=2112, minimum=512)
    assert p["proposed"] == 16384 and p["crossovers"] == []


def test_threshold_ignores_ties_and_stays_put():
    sz = [1000, 2000, 4000, 8000]
    below = {s: (10.0, 9.0, 11.0) for s in sz}
    above = {s: (10.5, 9.5, 11.5) for s in sz}     # overlapping CIs everywhere
    t, loss = A.best_threshold(sz, below, above, prefer=3000)
    assert (t, loss) == (3000, 0)
    p = A.propose_tunable("rep_stosb_threshold", sz, below, above, current=3000)
    assert p["proposed"] is None
    # one significant win for `above` at the top: a current value below it
    # stays, one above it moves just below it (the tie at 4000 costs nothing)
    above[8000] = (5.0, 4.9, 5.1)
    assert A.best_threshold(sz, below, above, prefer=3000) == (3000, 0)
    assert A.best_threshold(sz, below, above, prefer=10000)[0] == 4000


def test_tunable_clamped_to_glibc_minimum():
    sz = [256, 512, 1024, 2048, 4096]
    below = {s: 100.0 for s in sz}              # rep always faster
    above = {s: 10.0 for s in sz}
    p = A.propose_tunable("rep_movsb_threshold", sz, below, above, current=2112, minimum=512)
    assert p["proposed"] == 513                 # glibc ignores values <= VEC_SIZE * 8


def test_no_proposal_without_curves():
    props = A.tunable_proposals({}, {}, {}, {}, {})
    assert all(p["proposed"] is None and p["reason"] for p in props)


def test_tunables_env_replaces_only_its_item():
    base = "glibc.malloc.check=3:glibc.cpu.x86_rep_movsb_threshold=1"
    env = A.tunables_env(base, "glibc.cpu.x86_rep_movsb_threshold", 4096)
    assert env == "glibc.malloc.check=3:glibc.cpu.x86_rep_movsb_threshold=4096"
    assert A.tunables_env(None, "glibc.cpu.x86_non_temporal_threshold", 10**6) == \
        "glibc.cpu.x86_non_temporal_threshold=1000000"


@pytest.mark.skipif(A.effective_thresholds(None) is None, reason="no ld.so --list-diagnostics here")
def test_effective_thresholds_show_what_glibc_uses():
    eff = A.effective_thresholds("glibc.cpu.x86_rep_stosb_threshold=4097")
    assert eff["rep_stosb_threshold"] == 4097
    eff = A.effective_thresholds("glibc.cpu.x86_rep_movsb_threshold=1")   # below the minimum: ignored
    assert eff["rep_movsb_threshold"] == A.effective_thresholds(None)["rep_movsb_threshold"]


# ---- never advise slower -----------------------------------------------------------

def _samples(center, n=9, spread=0.01, seed=0):
    rng = np.random.default_rng(seed)
    return list(center * (1 + spread * rng.standard_normal(n)))


def test_decide_keeps_default_when_advice_measured_slower():
    current = {s: _samples(10.0, seed=s) for s in (64, 128, 256)}
    advised = {s: _samples(12.0, seed=100 + s) for s in (64, 128, 256)}
    cmp = A.compare_variants(current, advised)
    assert cmp["overall"]["ratio"] > 1.1 and cmp["overall"]["verdict"] == fnd.DETECTED
    decision, reason = A.decide(cmp["overall"])
    assert decision == "keep" and "slower" in reason


def test_decide_advises_a_measured_gain():
    current = {s: _samples(10.0, seed=s) for s in (64, 128)}
    advised = {s: _samples(7.0, seed=50 + s) for s in (64, 128)}
    cmp = A.compare_variants(current, advised)
    o = cmp["overall"]
    assert o["ci_low"] <= o["ratio"] <= o["ci_high"] < 1
    assert A.decide(o)[0] == "advise"
    assert all(r["gain"] > 0 for r in cmp["per_size"])


def test_decide_keeps_default_without_a_difference_or_with_too_few_runs():
    same = {s: _samples(10.0, spread=0.001, seed=s) for s in (64, 128)}
    same2 = {s: _samples(10.0, spread=0.001, seed=9 + s) for s in (64, 128)}
    assert A.decide(A.compare_variants(same, same2)["overall"])[0] == "keep"
    few_a = {64: [10.0, 10.1]}
    few_b = {64: [5.0, 5.1]}
    o = A.compare_variants(few_a, few_b)["overall"]
    assert o["verdict"] == fnd.INCONCLUSIVE and A.decide(o)[0] == "keep"


def test_overall_uses_only_affected_sizes():
    current = {64: _samples(10.0, seed=1), 4096: _samples(10.0, seed=2)}
    advised = {64: _samples(20.0, seed=3), 4096: _samples(5.0, seed=4)}
    o = A.compare_variants(current, advised, affected=[4096])["overall"]
    assert o["sizes"] == [4096] and o["ratio"] == pytest.approx(0.5, rel=0.05)
    assert A.decide(A.compare_variants(current, advised, affected=[])["overall"])[0] == "keep"


def test_overall_ci_with_unequal_process_counts():
    current = {64: _samples(10.0, n=9, seed=1), 128: _samples(10.0, n=8, seed=2)}
    advised = {64: _samples(8.0, n=9, seed=3), 128: _samples(8.0, n=9, seed=4)}
    o = A.compare_variants(current, advised)["overall"]
    assert o["ci_low"] <= o["ratio"] <= o["ci_high"] and math.isfinite(o["ci_low"])
    assert o["n_current"] == 8 and o["n_advised"] == 9


# ---- the GCC check ---------------------------------------------------------------------

# Hand-written bodies, one per kind the classifier knows (not any compiler's
# output, so the test holds whatever gcc is installed).
_ASM_KINDS = """\
mfx_copy_8:
\tmovq\t(%rsi), %rax
\tmovq\t%rax, (%rdi)
\tret
mfx_copy_32:
\tmovdqu\t(%rsi), %xmm0
\tmovups\t%xmm0, (%rdi)
\tmovdqu\t16(%rsi), %xmm1
\tmovups\t%xmm1, 16(%rdi)
\tret
mfx_copy_512:
\tmovl\t$64, %ecx
\trep movsq
\tret
mfx_set_512:
\tmovl\t$512, %ecx
\trep stosb
\tret
mfx_copy_4096:
\txorl\t%eax, %eax
.L7:
\tmovq\t(%rsi,%rax), %rdx
\tmovq\t%rdx, (%rdi,%rax)
\taddq\t$8, %rax
\tcmpq\t$4096, %rax
\tjb\t.L7
\tret
mfx_set_4096:
\txorl\t%eax, %eax
.L9:
\tmovups\t%xmm0, (%rdi,%rax)
\taddq\t$16, %rax
\tcmpq\t$4096, %rax
\tjne\t.L9
\tret
mfx_copy_100000:
\tmovl\t$100000, %edx
\tjmp\tmemcpy
mfx_set_100000:
\tmovl\t$100000, %edx
\tcall\tmemset
\tret
"""


def test_codegen_classification_of_each_kind():
    kinds = {name: kind for name, (kind, _) in A.parse_codegen(_ASM_KINDS).items()}
    assert kinds == {
        "mfx_copy_8": "straight-line moves", "mfx_copy_32": "straight-line moves (xmm)",
        "mfx_copy_512": "rep movsq", "mfx_set_512": "rep stosb",
        "mfx_copy_4096": "gpr loop", "mfx_set_4096": "vector loop",
        "mfx_copy_100000": "call memcpy", "mfx_set_100000": "call memset"}
    # bodies are compared with label numbers removed
    renumbered = A.parse_codegen(_ASM_KINDS.replace(".L7", ".L123"))
    assert renumbered["mfx_copy_4096"][1] == A.parse_codegen(_ASM_KINDS)["mfx_copy_4096"][1]
    changed = A.parse_codegen(_ASM_KINDS.replace("$8, %rax", "$16, %rax"))
    assert changed["mfx_copy_4096"][1] != A.parse_codegen(_ASM_KINDS)["mfx_copy_4096"][1]


def test_codegen_classification_on_captured_gcc_output():
    """A regression sample of a real compiler's output (captured once from
    GCC 12.2 -O2 for x86-64; read as text, so no compiler is needed)."""
    with open(os.path.join(DATA, "advise_gcc12_default.s")) as f:
        default = A.parse_codegen(f.read())
    with open(os.path.join(DATA, "advise_gcc12_advised.s")) as f:
        advised = A.parse_codegen(f.read())
    assert default["mfx_copy_1024"][0] == "rep movsq"
    assert default["mfx_set_1024"][0] == "rep stosq"
    assert default["mfx_copy_100000"][0] == "call memcpy"
    assert advised["mfx_copy_1024"][0] == "gpr loop"          # unrolled_loop:2048
    assert advised["mfx_set_100000"][0] == "rep stosb"         # rep_byte:-1
    assert default["mfx_copy_64"][0].startswith("straight-line")
    # identical code compares equal despite different label numbers
    assert default["mfx_copy_168"][1] == advised["mfx_copy_168"][1]
    assert default["mfx_copy_1024"][1] != advised["mfx_copy_1024"][1]


def test_check_sizes_include_the_boundaries():
    s = A.check_sizes([{"max_size": 300}, {"max_size": -1, "last_measured_size": 10 ** 9}])
    assert 300 in s and 301 in s and max(s) <= A.CHECK_MAX_SIZE
    assert s == sorted(s)


@pytest.mark.measuring
@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
def test_gcc_check_compiles_and_measures_a_tiny_case():
    strings = {"memcpy": "unrolled_loop:2048:noalign,libcall:-1:noalign",
               "memset": "rep_byte:-1:noalign"}
    # What gcc emits by default differs between versions and tunings; what
    # an explicit strategy asks for does not (GCC manual, -mmemcpy-strategy:
    # unrolled_loop = unrolled loop of GPR moves, rep_byte = rep movsb/stosb).
    with A.GccCheck() as chk:
        built = chk.build([64, 1024], strings)
        default, advised = built["default"]["codegen"], built["advised"]["codegen"]
        assert set(default) == set(advised) >= {"mfx_copy_64", "mfx_copy_1024", "mfx_set_1024"}
        assert advised["mfx_copy_1024"] == "gpr loop"
        assert advised["mfx_set_1024"] == "rep stosb"
        vals = A.GccCheck.run_library(built["advised"]["library"], "copy", [64, 1024], 2, 0.02,
                                      A._child_cpu())
        assert sorted(vals) == [64, 1024] and all(len(v) == 2 and min(v) > 0 for v in vals.values())
    res = A.gcc_check(strings, {"memcpy": [64, 1024], "memset": [1024]}, rounds=2, samples=2, min_ms=0.02)
    cp = res["memcpy"]
    rows = {r["size"]: r for r in cp["per_size"]}
    for size, row in rows.items():
        assert row["default"] == default[f"mfx_copy_{size}"]
        assert row["advised"] == advised[f"mfx_copy_{size}"]
        if row["default"] != row["advised"]:
            assert row["differs"]          # another kind of code is another body
    assert cp["overall"]["sizes"] == [s for s in (64, 1024) if rows[s]["differs"]]
    assert cp["overall"]["verdict"] == fnd.INCONCLUSIVE       # 2 runs < min_samples: never advised
    assert cp["decision"] == "keep"
    assert res["memset"]["per_size"][0]["advised"] == "rep stosb"


def test_gcc_check_source_has_every_size():
    src = A.gcc_test_source([1024, 16, 16])
    assert "X(16) X(1024)" in src and "__builtin_memcpy(d, s, n)" in src


# ---- end to end on a store ------------------------------------------------------------

def _store_synthetic_copy_run(store, model=MODEL):
    """A complete 'copy' run whose samples give the synthetic medians."""
    run_id = store.begin_run("copy", {}, "quick", {"flags": {"erms": True, "avx512f": True}})
    samples = []
    rng = np.random.default_rng(0)
    for op in ("copy", "set"):
        for arm, f in model.items():
            name = SET_NAME.get(arm, arm) if op == "set" else arm
            for s in (64, 256, 1024, 4096, 16384, 65536, 1 << 20):
                for _ in range(5):
                    v = f(s) * (1 + 0.01 * rng.standard_normal())
                    samples.append({"arm": name, "point": {"op": op, "size_bytes": s, "mode": "throughput"},
                                    "metric": "ns_per_call", "unit": "ns", "value": v, "length": 1000,
                                    "ns": v * 1000})
    store.add_samples(run_id, samples)
    store.finish_run(run_id, "complete")
    return run_id


def test_advise_unchecked_stores_an_artifact(db_path):
    with Store(db_path) as store:
        run_id = _store_synthetic_copy_run(store)
        doc = A.advise(store, check=False, glibc=GLIBC)
        assert doc["schema_version"] == A.SCHEMA_VERSION and doc["kind"] == "memfx-advice"
        assert doc["sources"]["copy"]["run_id"] == run_id
        for fn in ("memcpy", "memset"):
            g = doc["gcc"][fn]
            check_string_rules(g["string"])
            assert g["decision"] == "unchecked" and g["checked"] is False
        assert all(p["decision"] in ("keep", "unchecked") for p in doc["glibc"]["tunables"])
        assert doc["glibc"]["advised_env"] is None            # nothing checked, nothing advised
        assert store.artifacts(run_id)["advice"] == doc
        json.dumps(doc, allow_nan=False)


def test_advise_without_copy_run_raises(db_path):
    with Store(db_path) as store:
        with pytest.raises(A.NoCopyResults):
            A.advise(store, check=False, glibc=GLIBC)


@pytest.mark.measuring
def test_cli_without_copy_results_exits_2_and_leaves_db_unchanged(db_path):
    with Store(db_path) as store:
        rid = store.begin_run("latency", {}, "quick", None)
        store.finish_run(rid, "complete")
    digest = hashlib.sha256(Path(db_path).read_bytes()).hexdigest()
    p = run_cli("advise", db=db_path, timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip() == ("memfx: error: no copy results in DB; run `memfx run copy` "
                                "or pass --run-missing")
    assert p.stdout == ""
    assert hashlib.sha256(Path(db_path).read_bytes()).hexdigest() == digest
    with Store(db_path) as store:
        assert [r["id"] for r in store.runs()] == [rid]
        assert store.artifacts(rid) == {}


@pytest.mark.measuring
def test_cli_without_db_does_not_create_it(tmp_path):
    path = str(tmp_path / "none.db")
    p = run_cli("advise", "--json", db=path, timeout=120)
    assert p.returncode == 2 and "no copy results in DB" in p.stderr
    assert not os.path.exists(path)


@pytest.mark.measuring
def test_cli_json_no_check(db_path):
    with Store(db_path) as store:
        run_id = _store_synthetic_copy_run(store)
    p = run_cli("advise", "--json", "--no-check", db=db_path, timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["schema_version"] == 1 and doc["sources"]["copy"]["run_id"] == run_id
    check_string_rules(doc["gcc"]["memcpy"]["string"])
    p = run_cli("advise", "--no-check", db=db_path, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "-mmemcpy-strategy=" in p.stdout and "x86_rep_movsb_threshold" in p.stdout


# ---- real data captured here ---------------------------------------------------------

def _captured_glibc():
    from memfx.lab.machine import parse_ld_diagnostics
    with open(os.path.join(DATA, "ld_diagnostics_glibc236.txt")) as f:
        return {"available": True, **parse_ld_diagnostics(f.read())}


def test_advice_from_a_captured_quick_copy_run():
    # points of `memfx run copy --quick` on this 2-vCPU KVM guest (noisy, as
    # quick runs on a shared machine are), with the ld.so diagnostics captured here
    with open(os.path.join(DATA, "advise_copy_quick_points.json")) as f:
        doc = json.load(f)
    adv = A.build_advice(doc, _captured_glibc())
    for fn in ("memcpy", "memset"):
        g = adv["gcc"][fn]
        check_string_rules(g["string"])
        assert g["ranges"][0]["min_size"] == 1 and g["ranges"][-1]["max_size"] == -1
        table = A.alg_table(A.point_curves(doc["points"], g["op"], "throughput"))
        sizes = A.complete_sizes(table)
        assert len(sizes) > 50
        assert sum(r["n_sizes"] for r in g["ranges"]) == len(sizes)   # every compared size once
    best = adv["best"]["copy"]["throughput"]
    assert best[0]["min_size"] == 1 and all(a["max_size"] < b["min_size"] for a, b in zip(best, best[1:]))
    props = {p["name"]: p for p in adv["glibc"]["tunables"]}
    assert props["rep_movsb_threshold"]["current"] == 0x840
    assert props["rep_movsb_threshold"]["vector"] == "avx512"
    for p in props.values():
        assert p["reason"]
        if p["proposed"] is not None:
            assert p["proposed"] != p["current"] and p["evidence"]
    # on these curves moving the non-temporal threshold gains less than the
    # smallest effect memfx reports, so the current value stays
    nt = props["non_temporal_threshold"]
    assert nt["proposed"] is None and "gain less than" in nt["reason"]
    assert props["rep_stosb_threshold"]["proposed"] is None
    assert props["rep_movsb_threshold"]["proposed"] == 4096


def test_run_missing_uses_the_runner_with_consent(db_path):
    calls = []
    with Store(db_path) as store:
        def runner(name):
            calls.append(name)
            if name == "copy":
                return _store_synthetic_copy_run(store)
            rid = store.begin_run(name, {}, "quick", None)   # the others: an empty complete run
            store.finish_run(rid, "complete")
            return rid
        with pytest.raises(A.NoCopyResults):
            A.copy_sources(store, run_missing=False, runner=runner)
        assert calls == []
        doc = A.advise(store, check=False, run_missing=True, runner=runner, glibc=GLIBC)
        assert calls[0] == "copy" and doc["sources"]["copy"]["run_id"]
        calls.clear()
        A.advise(store, check=False, run_missing=True, runner=runner, glibc=GLIBC)
        assert calls == []                                    # nothing missing any more


# ---- the libc check in child processes ---------------------------------------------------

def _has_kernel(name):
    from memfx.lab import _core
    return any(k["name"] == name and k["supported"] for k in _core.kernels())


@pytest.mark.measuring
@pytest.mark.skipif(not _has_kernel("copy_libc"), reason="core lacks copy_libc")
def test_libc_child_and_check_structure():
    vals = A.run_libc_child("copy_libc", [64, 4096], None, samples=2, min_ms=0.05)
    assert sorted(vals) == [64, 4096] and all(len(v) == 2 and min(v) > 0 for v in vals.values())
    prop = {"name": "rep_movsb_threshold", "tunable": "glibc.cpu.x86_rep_movsb_threshold",
            "current": 2112, "proposed": 4096}
    res = A.glibc_check(prop, [2048, 3000, 4096, 8192], rounds=2, samples=2, min_ms=0.05)
    assert res["env"]["advised"].endswith("glibc.cpu.x86_rep_movsb_threshold=4096")
    assert [r["size"] for r in res["per_size"] if r["affected"]] == [3000, 4096]
    assert res["overall"]["verdict"] == fnd.INCONCLUSIVE and res["decision"] == "keep"
    with pytest.raises(Exception):
        A.run_libc_child("no_such_kernel", [64], None, samples=1, min_ms=0.05)


def test_libc_check_controls_can_be_capped_without_touching_the_changed_range():
    from memfx.advice.advise import libc_check_sizes
    prop = {"current": 240 << 20, "proposed": 10 << 20}
    measured = [8 << 20, 12 << 20, 16 << 20, 32 << 20]
    inside, controls = libc_check_sizes(prop, measured)
    assert controls == [int((10 << 20) * 0.75), int((240 << 20) * 1.5)]
    capped_inside, capped = libc_check_sizes(prop, measured, control_max=64 << 20)
    assert capped_inside == inside == [12 << 20, 16 << 20, 32 << 20]
    assert capped == [int((10 << 20) * 0.75)]          # the 360 MiB control is left out
