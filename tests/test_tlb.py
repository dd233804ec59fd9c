"""The tlb experiment (seed 004): the chain layout, the TLB-reach analysis on
synthetic staircases, CPUID's TLB fields, and bad input."""
import pytest

from conftest import run_cli
from memfx.analysis.results import document
from memfx.experiments import get_experiment
from memfx.experiments import tlb as tlb_mod
from memfx.experiments.tlb import ELEMENT, PAGE, element_offsets, page_grid, tlb_knees
from memfx.lab import machine
from memfx.model.answers import NOT_MEASURED
from memfx.model.findings import MEASURED

# A machine with a 32 KiB L1d and a 1 MiB L2 (512 and 16384 lines).
MACHINE = {"caches": [{"level": 1, "type": "Data", "size_bytes": 32 << 10, "line_bytes": 64},
                      {"level": 2, "type": "Unified", "size_bytes": 1 << 20, "line_bytes": 64}],
           "tlb": [{"level": 1, "type": "Data", "page": "4K", "entries": 64, "ways": "full"},
                   {"level": 2, "type": "Data", "page": "4K", "entries": 2048, "ways": 8}]}


def staircase(n):
    """ns per load: L1 TLB reach 64, L1d 512 lines, L2 TLB reach 2048, L2 16384 lines."""
    ns = 1.0
    ns += 2.0 * (n > 64) + 3.0 * (n > 512) + 30.0 * (n > 2048) + 60.0 * (n > 16384)
    return ns


def _samples(arm, n, ns, k=5):
    return [{"arm": arm, "point": {"page_count": n}, "metric": "ns_per_load", "unit": "ns",
             "value": ns * (1 + 0.002 * i), "length": 1000, "ns": ns * 1000 * (1 + 0.002 * i),
             "cycles_est": ns * 3000 * (1 + 0.002 * i), "counters": {}, "rejected": False}
            for i in range(k)]


def _answers(samples, machine_fp=MACHINE):
    run = {"id": "r", "experiment": "tlb", "status": "complete", "params": {},
           "machine": machine_fp}
    return {a["question"]: a for a in document(run, samples)["answers"]}


def test_each_element_has_a_page_of_its_own_and_the_line_offsets_go_round():
    pages, offsets = element_offsets(1000)
    assert len(set(pages.tolist())) == 1000
    assert sorted(set(offsets.tolist())) == list(range(0, PAGE, 64))
    assert ELEMENT % 8 == 0 and ELEMENT > PAGE


def test_page_grid_is_geometric_and_adds_the_anchors():
    g = page_grid(8, 64, 1, anchors=[72 // 2])
    assert g[0] == 8 and g[-1] == 64 and {16, 32, 27, 54} <= set(g)


def test_knees_from_a_synthetic_staircase_skip_the_cache_steps():
    xs = page_grid(8, 65536, 6)
    tlb, levels = tlb_knees((xs, [staircase(n) for n in xs]), cache_lines=[512, 16384])
    knees = [lv.knee_size for _, lv in tlb]
    assert len(knees) == 2
    assert 57 <= knees[0] <= 72 and 1800 <= knees[1] <= 2300
    assert len(levels) == 5          # the two cache steps are levels too


def test_answers_from_a_synthetic_staircase():
    xs = page_grid(8, 65536, 6)
    s = sum((_samples("4k", n, staircase(n)) for n in xs), [])
    # huge pages: only the cache steps
    s += sum((_samples("thp", n, 1.0 + 3.0 * (n > 512) + 60.0 * (n > 16384)) for n in xs), [])
    a = _answers(s)
    l1, l2, walk = a["tlb.l1_entries"], a["tlb.l2_entries"], a["tlb.walk_ns"]
    assert l1["verdict"] == MEASURED and 57 <= l1["value"] <= 72
    assert l1["ci_low"] <= l1["value"] <= l1["ci_high"]
    assert "CPUID reports 64" in l1["because"] and "does not take it" in l1["because"]
    assert l2["verdict"] == MEASURED and 1800 <= l2["value"] <= 2300
    assert walk["verdict"] == MEASURED and walk["value"] == pytest.approx(30.0, rel=0.05)
    assert walk["ci_low"] <= walk["value"] <= walk["ci_high"]


def test_a_flat_curve_answers_not_measured_with_the_reason():
    xs = page_grid(8, 1024, 2)
    a = _answers(sum((_samples("4k", n, 1.0) for n in xs), []))
    assert [a[q]["verdict"] for q in ("tlb.l1_entries", "tlb.l2_entries", "tlb.walk_ns")] \
        == [NOT_MEASURED] * 3
    assert "0 knee" in a["tlb.l1_entries"]["because"]
    assert list(a) == [q.id for q in get_experiment("tlb").questions]


class FakeCpuid:
    def __init__(self, regs):
        self.regs = regs

    def __call__(self, leaf, sub):
        return self.regs.get((leaf, sub), (0, 0, 0, 0))


def test_amd_cpuid_tlb_fields_decode():
    # Zen 4 values: 72-entry fully associative L1 DTLB, 3072-entry L2 DTLB
    cpuid = FakeCpuid({(0x80000000, 0): (0x80000021, 0, 0, 0),
                       (0x80000005, 0): (0xFF48FF40, 0xFF48FF40, 0, 0),
                       (0x80000006, 0): (0x5C002200, 0x6C004200, 0, 0)})
    t = machine.cpuid_tlb(cpuid, "AuthenticAMD")
    fp = {"tlb": t}
    assert machine.tlb_entries(fp, 1) == 72 and machine.tlb_entries(fp, 2) == 3072
    l2 = next(x for x in t if x["level"] == 2 and x["page"] == "4K")
    assert l2["ways"] == 8
    assert next(x for x in t if x["level"] == 2 and x["page"] == "2M")["ways"] == 6
    assert next(x for x in t if x["level"] == 1)["ways"] == "full"


def test_intel_leaf_18_and_leaf_2_decode():
    # leaf 18H: sub-leaf 1 = L1 load-only 4K TLB, 16 ways x 4 sets; sub-leaf 2 =
    # L2 unified 4K/2M, 8 ways x 256 sets
    cpuid = FakeCpuid({(0, 0): (0x20, 0, 0, 0), (0x18, 0): (2, 0, 0, 0),
                       (0x18, 1): (0, (16 << 16) | 1, 4, (1 << 5) | 4),
                       (0x18, 2): (0, (8 << 16) | 3, 256, (2 << 5) | 3)})
    fp = {"tlb": machine.cpuid_tlb(cpuid, "GenuineIntel")}
    assert machine.tlb_entries(fp, 1) == 64 and machine.tlb_entries(fp, 2) == 2048
    # leaf 2 only: descriptors 0x03 (DTLB 64) and 0xCA (STLB 512) in EBX
    cpuid = FakeCpuid({(0, 0): (0x0D, 0, 0, 0), (2, 0): (0x01, 0x0000CA03, 0, 0)})
    fp = {"tlb": machine.cpuid_tlb(cpuid, "GenuineIntel")}
    assert machine.tlb_entries(fp, 1) == 64 and machine.tlb_entries(fp, 2) == 512
    assert machine.cpuid_tlb(None, "GenuineIntel") == []


@pytest.mark.measuring
def test_bad_input_is_one_line_and_exit_2(tmp_path):
    db = str(tmp_path / "r.db")
    p = run_cli("run", "tlb", "--set", "min_pages=4096", "--set", "max_pages=64", db=db)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "min_pages" in p.stderr
    p = run_cli("run", "tlb", "--set", "pages=4m", db=db)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "pages" in p.stderr
    assert not (tmp_path / "r.db").exists() or "tlb" not in run_cli("list", db=db).stdout


@pytest.mark.measuring
def test_small_run_answers_every_question(tmp_path):
    import json
    db = str(tmp_path / "r.db")
    p = run_cli("run", "tlb", "--quick", "--json", "--set", "max_pages=256",
                "--set", "min_pages=8", "--set", "samples=3", "--set", "min_sample_ms=0.1",
                "--set", "pages=4k", db=db)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [a["question"] for a in doc["answers"]] == [q.id for q in
                                                       get_experiment("tlb").questions]
    counts = sorted({pt["params"]["page_count"] for pt in doc["points"]})
    assert counts[0] == 8 and counts[-1] == 256


def test_declared_plot_draws_both_arms(tmp_path):
    import matplotlib

    from memfx.report.plots import figure_for
    xs = page_grid(8, 1024, 2)
    s = sum((_samples(arm, n, staircase(n)) for n in xs for arm in ("4k", "thp")), [])
    run = {"id": "r", "experiment": "tlb", "status": "complete", "params": {}, "machine": MACHINE}
    fig = figure_for(document(run, s, include_values=True))
    ax = fig.get_axes()[0]
    assert "4 KiB vs huge pages" in ax.get_title()
    assert sorted(len(line.get_xdata()) for line in ax.get_lines())[-2:] == [len(xs), len(xs)]
    matplotlib.pyplot.close(fig)


# ---- 1 GiB pages (issue 13): where reserved, else not measured with the reason ----


def _sysfs(tmp_path, flags="fpu pse pdpe1gb", total=None, free=None):
    (tmp_path / "proc").mkdir(exist_ok=True)
    (tmp_path / "proc" / "cpuinfo").write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    d = tmp_path / tlb_mod.GIB_SYSFS.lstrip("/")
    if total is not None:
        d.mkdir(parents=True, exist_ok=True)
        (d / "nr_hugepages").write_text(f"{total}\n")
        (d / "free_hugepages").write_text(f"{free if free is not None else total}\n")
    return str(tmp_path)


def test_gib_pages_says_why_not(tmp_path):
    assert tlb_mod.gib_pages(_sysfs(tmp_path, flags="fpu pse")) == (0, 1)
    assert tlb_mod.gib_pages(_sysfs(tmp_path)) == (0, 2)
    assert tlb_mod.gib_pages(_sysfs(tmp_path, total=0)) == (0, 3)
    assert "nr_hugepages = 0" in tlb_mod.GIB_WHY[3] and "pdpe1gb" in tlb_mod.GIB_WHY[1]
    assert tlb_mod.gib_pages(_sysfs(tmp_path, total=2, free=0)) == (0, 4)
    assert tlb_mod.gib_pages(_sysfs(tmp_path, total=2, free=1)) == (1, 0)


def test_the_1g_arm_is_planned_only_where_pages_are_free(monkeypatch):
    exp = get_experiment("tlb")
    params = exp.resolve("quick")
    monkeypatch.setattr(tlb_mod, "gib_pages", lambda root="/": (0, 3))
    assert {p.arm for p in exp.plan(params, {})} == {"4k", "thp"}
    monkeypatch.setattr(tlb_mod, "gib_pages", lambda root="/": (1, 0))
    assert {p.arm for p in exp.plan(params, {})} == {"4k", "thp", "1g"}
    small = {**params, "max_pages": 1024}
    assert sum(p.arm == "1g" for p in exp.plan(small, {})) == \
        sum(p.arm == "4k" for p in exp.plan(small, {}))


def test_gib_answer_from_synthetic_points():
    xs = page_grid(8, 65536, 6)
    s = sum((_samples("4k", n, staircase(n)) for n in xs), [])
    s += sum((_samples("1g", n, 1.0 + 3.0 * (n > 512) + 60.0 * (n > 16384)) for n in xs), [])
    a = _answers(s)["tlb.gib_pages"]
    last = xs[-1]
    assert a["verdict"] == "detected"
    assert a["value"] == pytest.approx(staircase(last) / 64.0, rel=0.01)
    assert f"at {last} pages" in a["because"]
    assert [d["page_count"] for d in a["details"]] == xs


def test_gib_answer_not_measured_with_the_reason_recorded_in_the_samples():
    xs = page_grid(8, 1024, 2)
    s = sum((_samples("4k", n, staircase(n)) for n in xs), [])
    for rec in s:
        rec["counters"] = {"gib_pages_state": 3}
    a = _answers(s)["tlb.gib_pages"]
    assert a["verdict"] == NOT_MEASURED and "nr_hugepages = 0" in a["because"]
    for rec in s:
        rec["counters"] = {"gib_pages_state": 1}
    assert "pdpe1gb" in _answers(s)["tlb.gib_pages"]["because"]
    for rec in s:
        rec["counters"] = {}
    a = _answers(s)["tlb.gib_pages"]
    assert a["verdict"] == NOT_MEASURED and "measured none" in a["because"]


@pytest.mark.measuring
def test_hugetlb_buffer_fails_cleanly_or_maps_a_gib_page():
    from memfx.lab.lab import Lab
    from memfx.model.errors import MemfxError
    lab = Lab(hardware_counters=False)
    try:
        free, code = tlb_mod.gib_pages()
        if not free:
            with pytest.raises(MemfxError, match="hugetlb"):
                lab.hugetlb_buffer(4096, tlb_mod.GIB_PAGE)
            pytest.skip(tlb_mod.GIB_WHY[code])
        region = lab.hugetlb_buffer(4096, tlb_mod.GIB_PAGE)
        assert region.address % tlb_mod.GIB_PAGE == 0 and len(region.buffer) == tlb_mod.GIB_PAGE
    finally:
        lab.release()
        lab.perf.close()
