"""Page-fault rows of fill_alloc (issue 13, item 5; kernels in layout.c):
fresh memory is zero, MAP_POPULATE takes no faults on the touches, huge
pages take fewer faults than base pages where THP is on; the analysis
reports a time per page for each way of obtaining memory."""
import mmap

import pytest

from memfx import _core
from memfx._lab import Lab
from memfx.experiments import get_experiment
from memfx.experiments.base import Trial
from memfx.experiments.fill import ALLOC_ARMS, ALLOC_CHECK
from memfx.findings import MEASURED
from memfx.results import document

KERNELS = {r["name"]: i for i, r in enumerate(_core.kernels())}


@pytest.mark.parametrize("name", ["fault_mmap_thp", "fault_map_populate"])
def test_fresh_memory_is_zero(name):
    for size in (1, 4096, 12345, 3 << 20):
        assert _core.run(KERNELS[name], None, 0, None, 0, size, 0, 2, ALLOC_CHECK,
                         [], None)[3] == 0


def _faults(lab, kernel, size):
    rec = lab.sample(Trial(kernel, size=size, metric="time", difference=False,
                           reject_page_faults=False), 2, 1.0)
    return rec["counters"]["page_faults"]


def _thp_on():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[never]" not in f.read()
    except OSError:
        return False


def test_populate_and_huge_pages_take_fewer_faults_than_touching_base_pages():
    lab = Lab(hardware_counters=False)
    try:
        if not any("page_faults" in names for _, names in lab.perf.groups):
            pytest.skip("software events not available")
        size = 8 << 20
        touched = _faults(lab, "alloc_mmap", size)
        assert touched >= 2 * size // (2 << 20)       # at least one per huge page per call
        populated = _faults(lab, "fault_map_populate", size)
        assert populated < touched / 4
        if not _thp_on():
            pytest.skip("transparent huge pages are off on this machine")
        huge = _faults(lab, "fault_mmap_thp", size)
        base = 2 * size // mmap.PAGESIZE
        # one fault per 2 MiB where the kernel found huge pages; never more than per base page
        assert huge <= base + 64
    finally:
        lab.perf.close()


def test_fill_alloc_plans_the_fault_arms_on_fresh_memory_only():
    exp = get_experiment("fill_alloc")
    pts = exp.plan(exp.resolve("quick"), {})
    arms = {(p.arm, p.params["memory"]) for p in pts}
    assert {("mmap_thp", "fresh"), ("mmap_populate", "fresh")} <= arms
    assert not any(p.arm.startswith("mmap") and p.params["memory"] == "recycled" for p in pts)
    assert ALLOC_ARMS["mmap_populate"] == "fault_map_populate"


def test_time_per_page_from_synthetic_points():
    def add(arm, size, ns):
        return [{"arm": arm, "point": {"size_bytes": size, "memory": "fresh"},
                 "metric": "ns_per_call", "unit": "ns", "value": ns * (1 + 0.001 * i),
                 "length": 1, "ns": ns, "cycles_est": None, "counters": {"page_faults": 1},
                 "rejected": False} for i in range(6)]
    size = 4 << 20
    s = add("mmap", size, 2000.0 * 1024) + add("mmap_thp", size, 200.0 * 1024) \
        + add("mmap_populate", size, 1500.0 * 1024) + add("calloc", size, 2000.0 * 1024)
    run = {"id": "r", "experiment": "fill_alloc", "status": "complete", "params": {},
           "machine": {}}
    a = {x["question"]: x for x in document(run, s)["answers"]}
    per_page = a["fill_alloc.ns_per_page"]
    assert per_page["value"] == pytest.approx(2000.0, rel=0.01) and per_page["verdict"] == MEASURED
    thp = next(d for d in per_page["details"] if d["arm"] == "mmap_thp")
    assert thp["value"] == pytest.approx(200.0, rel=0.01)
    assert a["fill_alloc.populate_vs_touch"]["value"] == pytest.approx(2000 / 1500, rel=0.01)
