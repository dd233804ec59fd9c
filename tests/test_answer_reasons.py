"""Every inconclusive answer says why in its sentence (issue 23): which CI
reaches across which no-effect band, or what else kept it from a verdict.
A sentence that only says "inconclusive" (or "within the noise") gets the
reason from results.py; these runs are synthetic, nothing is measured."""
import math

from memfx.analysis.results import analyze
from memfx.experiments import get_experiment

MACHINE = {"caches": [{"level": 1, "type": "Data", "size_bytes": 32 << 10},
                      {"level": 2, "type": "Unified", "size_bytes": 1 << 20},
                      {"level": 3, "type": "Unified", "size_bytes": 8 << 20}]}
# words of a reason: a CI against a band, replicas, samples, threads, a control
REASONS = ("reaches across", "across replicas", "lies inside", "lies beyond", "no ci",
           "disagree", "did not overlap", "min_samples", "control")


def _samples(arm, point, ns, spread):
    """Nine samples of one point, spread by ``spread`` around ``ns``."""
    return [{"arm": arm, "point": point, "metric": "ns_per_call", "unit": "ns",
             "value": ns * (1 + spread * math.sin(1.7 * i)), "length": 1, "ns": ns,
             "cycles_est": None, "counters": {"page_faults": 1}, "rejected": False,
             "reason": None} for i in range(9)]


def _inconclusive(answers):
    return {a["question"]: a["because"] for a in answers if a["verdict"] == "inconclusive"}


def test_an_inconclusive_allocation_answer_names_its_ci_and_the_band():
    samples = []
    for size in (1 << 20, 4 << 20):
        for memory in ("fresh", "recycled"):
            point = {"size_bytes": size, "memory": memory}
            samples += _samples("calloc", point, 100.0 * size / 4096, 0.3)
            samples += _samples("malloc_memset", point, 101.0 * size / 4096, 0.3)
    exp = get_experiment("fill_alloc")
    run = {"id": "t", "experiment": "fill_alloc", "status": "complete",
           "params": exp.resolve("quick"), "machine": MACHINE}
    _, answers, _, _ = analyze(run, samples)
    why = _inconclusive(answers)
    assert "fill_alloc.calloc_vs_memset_recycled" in why, answers
    text = why["fill_alloc.calloc_vs_memset_recycled"]
    assert "reaches across the edge of the no-effect band 0.95–1.05" in text
    assert ", inconclusive (" not in text          # the old sentence: a verdict, no reason
    for question, text in why.items():
        assert any(r in text.lower() for r in REASONS), (question, text)


def test_a_capacity_lost_to_tlb_steps_says_why_without_the_no_ci_reason():
    # latency.l3_capacity when every step after the L3 plateau is a TLB step:
    # its own sentence is the reason (a KVM guest whose 8 MiB STLB reach
    # lies where the host leaves it ~8 MiB of L3)
    from memfx.model.answers import explain_inconclusive
    because = ("every step after the L3 plateau is one that huge pages lack (TLB reach): with "
               "no step left for a cache, this curve cannot tell the L3's capacity")
    out = explain_inconclusive({"verdict": "inconclusive", "because": because,
                                "ci_low": None, "ci_high": None})
    assert out["because"] == because
