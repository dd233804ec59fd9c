"""Page-fault rows of fill_alloc (issue 13, item 5; kernels in layout.c):
fresh memory is zero, MAP_POPULATE takes no faults on the touches, huge
pages take fewer faults than base pages where THP is on; the analysis
reports a time per page for each way of obtaining memory."""
import mmap

import pytest

import memfx.experiments.fill_alloc as fill_mod
from memfx.analysis.results import document
from memfx.experiments import get_experiment
from memfx.experiments.base import Trial
from memfx.experiments.fill_alloc import (
    ALLOC_ARMS,
    ALLOC_CHECK,
    MUNMAP_ARMS,
    POPULATE_WRITE_ARMS,
    THP_BYTES,
    THP_ONLY,
)
from memfx.lab import _core
from memfx.lab.lab import Lab
from memfx.model.answers import NOT_MEASURED
from memfx.model.errors import MemfxError
from memfx.model.findings import MEASURED

KERNELS = {r["name"]: i for i, r in enumerate(_core.kernels())}


@pytest.mark.measuring
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


@pytest.mark.measuring
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


# ---- MADV_POPULATE_WRITE and munmap (issue 13) -----------------------------------


def _refused():
    return fill_mod.populate_write_refusal()


@pytest.mark.measuring
@pytest.mark.parametrize("name", ["fault_populate_write", "fault_thp_populate_write",
                                  "fault_munmap", "fault_thp_munmap"])
def test_new_fault_rows_hand_out_zeroed_memory(name):
    if "populate_write" in name and _refused():
        pytest.skip(_refused())
    for size in (1, 4096, 12345, 3 << 20):
        assert _core.run(KERNELS[name], None, 0, None, 0, size, 0, 2, ALLOC_CHECK,
                         [], None)[3] == 0


@pytest.mark.measuring
@pytest.mark.parametrize("name", ["fault_munmap", "fault_thp_munmap"])
def test_munmap_rows_return_the_ticks_of_the_munmap_alone(name):
    ticks, _, _, part, _ = _core.run(KERNELS[name], None, 0, None, 0, 1 << 20, 0, 3, 0, [], None)
    assert 0 < part < ticks          # a part of the call, never the whole of it


@pytest.mark.measuring
def test_a_kernel_ticks_row_that_cannot_map_is_an_error():
    lab = Lab(hardware_counters=False)
    try:
        with pytest.raises(MemfxError, match="could not time"):
            lab.sample(Trial("fault_munmap", size=1 << 62, kernel_ticks=True,
                             reject_page_faults=False), 1, 1.0)
    finally:
        lab.perf.close()


@pytest.mark.measuring
def test_populate_write_takes_fewer_faults_than_touching():
    if _refused():
        pytest.skip(_refused())
    lab = Lab(hardware_counters=False)
    try:
        if not any("page_faults" in names for _, names in lab.perf.groups):
            pytest.skip("software events not available")
        size = 8 << 20
        assert _faults(lab, "fault_populate_write", size) < _faults(lab, "alloc_mmap", size) / 4
    finally:
        lab.perf.close()


def test_populate_write_refusal_is_none_or_says_why():
    why = _refused()
    assert why is None or "MADV_POPULATE_WRITE" in why


def test_plan_new_arms(monkeypatch):
    exp = get_experiment("fill_alloc")
    params = {**exp.resolve("quick"), "sizes": [256 << 10, 4 << 20]}
    monkeypatch.setattr(fill_mod, "populate_write_refusal", lambda: None)
    pts = exp.plan(params, {})
    got = {(p.arm, p.params["size_bytes"], p.params["memory"]) for p in pts}
    for arm in MUNMAP_ARMS + POPULATE_WRITE_ARMS:
        assert (arm, 4 << 20, "fresh") in got and (arm, 4 << 20, "recycled") not in got
    for arm in THP_ONLY:
        assert (arm, 256 << 10, "fresh") not in got      # below one huge page
    assert ("munmap", 256 << 10, "fresh") in got
    monkeypatch.setattr(fill_mod, "populate_write_refusal", lambda: "EINVAL")
    assert not any(p.arm in POPULATE_WRITE_ARMS for p in exp.plan(params, {}))


def test_prepare_times_the_munmap_alone():
    exp = get_experiment("fill_alloc")
    params = exp.resolve("quick")
    from memfx.experiments.base import Point
    t = exp.prepare(Point("munmap", {"size_bytes": 1 << 20, "memory": "fresh"}), params, None)
    assert t.kernel == "fault_munmap" and t.kernel_ticks
    t = exp.prepare(Point("mmap_populate_write", {"size_bytes": 1 << 20, "memory": "fresh"}),
                    params, None)
    assert t.kernel == "fault_populate_write" and not t.kernel_ticks
    t = exp.prepare(Point("mmap", {"size_bytes": 1 << 20, "memory": "fresh"}), params, None)
    assert t.extra["populate_write_refused"] == int(_refused() is not None)


def _add(arm, size, ns, k=6):
    return [{"arm": arm, "point": {"size_bytes": size, "memory": "fresh"},
             "metric": "ns_per_call", "unit": "ns", "value": ns * (1 + 0.001 * i),
             "length": 1, "ns": ns, "cycles_est": None, "counters": {},
             "rejected": False} for i in range(k)]


def _doc(samples):
    run = {"id": "r", "experiment": "fill_alloc", "status": "complete", "params": {},
           "machine": {}}
    return document(run, samples, include_values=True)


def test_populate_write_and_munmap_answers_from_synthetic_points():
    small, big = 1 << 20, 8 << 20
    s = []
    for size in (small, big):
        pages, huge = size // 4096, size // THP_BYTES
        s += _add("mmap", size, 2000.0 * pages) + _add("mmap_populate_write", size, 1000.0 * pages)
        s += _add("munmap", size, 250.0 * pages * (2 if size == small else 1))
        if size >= THP_BYTES:
            s += _add("mmap_thp", size, 60000.0 * huge)
            s += _add("mmap_thp_populate_write", size, 40000.0 * huge)
            s += _add("munmap_thp", size, 9000.0 * huge)
    a = {x["question"]: x for x in _doc(s)["answers"]}
    pw = a["fill_alloc.populate_write_vs_touch"]
    assert pw["value"] == pytest.approx(2.0, rel=0.01) and pw["verdict"] == "detected"
    assert pw["details"][0]["ns_per_page_mmap_populate_write"] == pytest.approx(1000.0, rel=0.01)
    thp = a["fill_alloc.thp_populate_vs_touch"]
    assert thp["value"] == pytest.approx(1.5, rel=0.01)
    assert thp["details"][0]["ns_per_page_mmap_thp"] == pytest.approx(60000.0, rel=0.01)
    mu = a["fill_alloc.munmap_per_page"]
    assert mu["value"] == pytest.approx(250.0, rel=0.01) and mu["ci_low"] is not None
    assert [d["size_bytes"] for d in mu["details"]] == [small, big]
    assert mu["details"][0]["value"] == pytest.approx(500.0, rel=0.01)
    assert "8 MiB" in mu["because"]
    assert a["fill_alloc.munmap_per_thp"]["value"] == pytest.approx(9000.0, rel=0.01)
    per_page = {d["arm"]: d for d in a["fill_alloc.ns_per_page"]["details"]}
    assert per_page["mmap_populate_write"]["value"] == pytest.approx(1000.0, rel=0.01)


def test_missing_arms_are_not_measured_with_the_reason():
    a = {x["question"]: x for x in _doc(_add("mmap", 1 << 20, 1e5))["answers"]}
    pw = a["fill_alloc.populate_write_vs_touch"]
    assert pw["verdict"] == NOT_MEASURED and "5.14" in pw["because"]
    refused = _add("mmap", 1 << 20, 1e5)
    for rec in refused:
        rec["counters"] = {"populate_write_refused": 1}
    b = {x["question"]: x for x in _doc(refused)["answers"]}
    for q in ("fill_alloc.populate_write_vs_touch", "fill_alloc.thp_populate_vs_touch"):
        assert b[q]["verdict"] == NOT_MEASURED and "was refused" in b[q]["because"]
    assert "was refused" not in pw["because"]
    for q in ("fill_alloc.munmap_per_page", "fill_alloc.munmap_per_thp",
              "fill_alloc.thp_populate_vs_touch"):
        assert a[q]["verdict"] == NOT_MEASURED and a[q]["because"]


def test_munmap_has_its_own_panel():
    import matplotlib

    from memfx.report.plots import figure_for
    s = _add("mmap", 4 << 20, 1e6) + _add("munmap", 4 << 20, 2e5) + _add("munmap_thp", 4 << 20, 2e4)
    fig = figure_for(_doc(s))
    axes = {ax.get_title(): ax for ax in fig.get_axes()}
    mu = next(ax for t, ax in axes.items() if "munmap" in t)
    alloc = next(ax for t, ax in axes.items() if "zeroed memory" in t)
    assert len([ln for ln in mu.get_lines() if len(ln.get_xdata())]) >= 2
    labels = [t.get_text() for t in (alloc.get_legend().get_texts() if alloc.get_legend() else [])]
    assert not any("munmap" in x for x in labels)
    matplotlib.pyplot.close(fig)


def test_munmap_rows_declare_no_traffic_in_their_timed_part():
    rows = {r["name"]: r for r in _core.kernels()}
    for name in ("fault_munmap", "fault_thp_munmap"):
        assert rows[name]["write_per_byte"] == 0 and rows[name]["read_per_byte"] == 0
    assert rows["fault_populate_write"]["write_per_byte"] == 1
