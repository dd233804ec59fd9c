"""The fill experiment (seed 000, hardware store elimination): kernels are
byte-exact, the value is a runtime argument, the ratio/CI/verdict logic,
the plan, parameters, PMU event selection, fill_alloc, and a tiny run."""
import json
import math
import mmap

import numpy as np
import pytest

from memfx import _core
from memfx._lab import Lab, kernel_table
from memfx.errors import MemfxError, ParamError
from memfx.experiments import get_experiment
from memfx.experiments import fill as F
from memfx.experiments.base import Point, Trial
from memfx.findings import DETECTED, INCONCLUSIVE, NOT_DETECTED
from memfx.results import RunData, build_points

from conftest import run_cli

ROWS = kernel_table()
FILL_ROWS = [name for name, _ in F.KERNELS.values()]
NT = {"fill_nt_movnti", "fill_nt_sse"}


def _row(name):
    r = ROWS[name]
    if not r.supported:
        pytest.skip(f"{name} needs {r.isa}")
    return r


# ---- kernels ---------------------------------------------------------------------

def test_every_fill_kernel_has_one_row_and_declares_its_traffic():
    for name in FILL_ROWS:
        assert name in ROWS, name
        r = ROWS[name]
        assert r.group == "fill" and r.op == "pass"
        assert (r.write_per_byte, r.read_per_byte, r.write_fixed, r.read_fixed) == (1, 0, 0, 0)
    assert sum(1 for r in ROWS.values() if r.group == "fill") == len(FILL_ROWS)


@pytest.mark.parametrize("name", FILL_ROWS)
def test_kernel_byte_exact_all_sizes_and_offsets(name):
    """Sizes 0..4096 x dst offsets 0..63, 64 guard bytes each side, in C."""
    r = _row(name)
    values = (0x00, 0x5C) if name in NT else (0x00, 0x01, 0xFF, 0x5C)
    for v in values:
        assert F.check_kernel(r.index, v, 0, 0, count=1) is None, (name, v)


@pytest.mark.parametrize("name", FILL_ROWS)
def test_kernel_modes_volatile_value_and_alternating_passes(name):
    r = _row(name)
    big = 1024 if name in NT else 4096
    # value re-read through the volatile word; the argument is a decoy
    assert F.check_kernel(r.index, F.VOLATILE_DECOY, F.FILL_VALUE_FROM_SRC, 0x00, 1, big) is None
    assert F.check_kernel(r.index, 0x00, F.FILL_VALUE_FROM_SRC, 0x77, 1, 256) is None
    # alternating passes: the last pass decides (1 then 0, then 1 again)
    alt = F.FILL_ALTERNATE | (0x00 << 8)
    for count in (1, 2, 3, 4):
        assert F.check_kernel(r.index, 0x01, alt, 0, count, 256) is None, count


@pytest.mark.parametrize("name", FILL_ROWS)
def test_rotating_mode_sweeps_the_region_chunk_by_chunk(name):
    """Chunks through a region, wrapping, cursor kept past the region; every
    value arm, including alternation per sweep and the volatile value."""
    r = _row(name)
    for arm in F.VALUES:
        v, aux, word = F.arm_setup(arm, 3)
        for region, chunk, calls in ((4000, 1000, 3), (4000, 1000, 9), (3001, 700, 10),
                                     (100, 37, 12), (5000, 5000, 3), (777, 2000, 2)):
            assert F.check_rotating(r.index, v, aux, word, region, chunk, calls) is None, \
                (arm, region, chunk, calls)


def test_rotating_mode_returns_the_cursor():
    r = _row("fill_avx2")
    region, chunk = 10_000, 3_000
    buf = bytearray(region + 256)
    rot = F.FILL_ROTATE | (region << 16)
    cursors = [_core.run(r.index, buf, 0, None, 0, chunk, 1, 1, rot)[3] for _ in range(5)]
    assert cursors == [3000, 6000, 9000, 2000, 5000]


def test_checker_reports_a_wrong_byte():
    r = _row("fill_scalar8")
    bad = _core.fill_check(r.index, 0x01, 0, 1, 0, 0x02, 64, 4)   # expects 0x02, kernel writes 0x01
    assert bad is not None
    size, off, idx, want, got = bad
    assert (size, off, idx, want, got) == (1, 0, 0, 0x02, 0x01)


@pytest.mark.parametrize("name", FILL_ROWS)
def test_kernel_against_numpy_reference(name):
    """The same property checked outside the C checker, through run()."""
    r = _row(name)
    rng = np.random.default_rng(3)
    buf = bytearray(4096 + 256)
    for size, off in [(0, 0), (1, 63), (7, 1), (31, 33), (64, 0), (100, 5), (257, 17),
                      (1000, 63), (4096, 31)] + [(int(rng.integers(0, 4096)), int(rng.integers(0, 64)))
                                                 for _ in range(20)]:
        a = np.frombuffer(buf, dtype=np.uint8)
        a[:] = 0xA5
        _core.run(r.index, buf, 64 + off, None, 0, size, 0x3C, 1, 0)
        want = np.full(len(buf), 0xA5, np.uint8)
        want[64 + off:64 + off + size] = 0x3C
        assert np.array_equal(a, want), (name, size, off)
        del a


@pytest.mark.parametrize("name", FILL_ROWS)
def test_one_compiled_function_serves_every_value(name):
    """One table row = one function; the value only arrives at run time, and
    only its low byte counts (the shared value semantic)."""
    r = _row(name)
    buf = bytearray(1000)
    for value in (0, 1, 0xFF, 0x5A, 0x1234, 0xFFFFFFFFFFFFFF00, F.random_byte(7)):
        _core.run(r.index, buf, 3, None, 0, 900, value, 2, 0)
        assert bytes(buf[3:903]) == bytes([value & 0xFF]) * 900, (name, hex(value))


def test_arm_semantics_and_random_byte():
    assert F.arm_setup("zero", 1)[:2] == (0, 0)
    v, aux, word = F.arm_setup("zero_volatile", 1)
    assert aux & F.FILL_VALUE_FROM_SRC and word == 0 and v != 0
    assert F.final_byte(v, aux, word, 1) == 0
    v, aux, word = F.arm_setup("one_zero", 1)
    assert [F.final_byte(v, aux, word, c) for c in (1, 2, 3)] == [1, 0, 1]
    for seed in range(50):
        assert F.random_byte(seed) not in (0x00, 0x01, 0xFF)
    assert F.random_byte(4) == F.random_byte(4)
    with pytest.raises(ParamError):
        F.arm_setup("two", 1)


# ---- ratio, CI, verdict --------------------------------------------------------------

def _pairs(effect, n, sd, sizes=4, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(sizes):
        base = 10.0 * (i + 1)
        out.append((rng.normal(base * effect, base * sd, n), rng.normal(base, base * sd, n)))
    return out


def test_planted_17_percent_effect_is_detected():
    r = F.level_ratio(_pairs(1.17, 11, 0.01))
    assert r["ratio"] == pytest.approx(1.17, abs=0.01)
    assert r["ci_low"] > 1.1 and r["ci_high"] < 1.25
    assert F.ratio_verdict(r) == DETECTED


def test_planted_slowdown_is_detected_too():
    assert F.ratio_verdict(F.level_ratio(_pairs(0.8, 11, 0.01))) == DETECTED


def test_no_effect_is_not_detected():
    r = F.level_ratio(_pairs(1.0, 11, 0.005))
    assert abs(r["ratio"] - 1) < 0.01
    assert F.ratio_verdict(r) == NOT_DETECTED


def test_too_few_samples_is_inconclusive():
    r = F.level_ratio(_pairs(1.17, 3, 0.01))
    assert r["n_a"] == 3
    assert F.ratio_verdict(r) == INCONCLUSIVE


def test_noisy_samples_are_inconclusive():
    r = F.level_ratio(_pairs(1.0, 6, 0.3, sizes=2))
    assert r["ci_high"] - r["ci_low"] > 0.06
    assert F.ratio_verdict(r) == INCONCLUSIVE


def test_level_ratio_is_stratified_and_handles_empty():
    assert F.level_ratio([]) is None
    assert F.level_ratio([([], [1.0])]) is None
    assert F.ratio_verdict(None) == INCONCLUSIVE
    # very different bandwidths per size do not widen the CI (stratified)
    pairs = [(np.full(8, 100.0) * 1.2 + np.arange(8) * 0.01, np.full(8, 100.0) + np.arange(8) * 0.01),
             (np.full(8, 1.0) * 1.2 + np.arange(8) * 1e-4, np.full(8, 1.0) + np.arange(8) * 1e-4)]
    r = F.level_ratio(pairs)
    assert r["ci_high"] - r["ci_low"] < 0.01 and r["sizes"] == 2


# ---- levels, plan, params ---------------------------------------------------------------

MACHINE = {
    "caches": [
        {"level": 1, "type": "Data", "size_bytes": 32 << 10},
        {"level": 1, "type": "Instruction", "size_bytes": 32 << 10},
        {"level": 2, "type": "Unified", "size_bytes": 256 << 10},
        {"level": 3, "type": "Unified", "size_bytes": 6 << 20},
    ],
    "memory": {"available_bytes": 8 << 30},
    "flags": {"sse2": True, "avx2": True, "avx512f": False},
    "cpu": {"vendor": "GenuineIntel", "family": 6, "model": 0x5E},
    "pmu": {"available": False, "reason": "no hardware PMU exposed (test)", "event_sources": []},
    "line_bytes": 64,
}


def test_level_assignment_uses_reported_caches():
    caches = F.data_caches(MACHINE)
    assert caches == [("L1d", 32 << 10), ("L2", 256 << 10), ("L3", 6 << 20)]
    assert F.level_of(100, caches) == "L1d"
    assert F.level_of(32 << 10, caches) == "L1d"
    assert F.level_of((32 << 10) + 1, caches) == "L2"
    assert F.level_of(1 << 20, caches) == "L3"
    assert F.level_of(7 << 20, caches) == "DRAM"
    assert F.level_of(7 << 20, []) == "all"


@pytest.mark.parametrize("preset", ["quick", "full"])
def test_plan_sizes_bracket_every_cache_size(preset):
    exp = get_experiment("fill")
    params = exp.resolve(preset)
    pts = exp.plan(params, MACHINE)
    sizes = sorted({p.params["size_bytes"] for p in pts})
    assert sizes[0] == 100 and sizes[-1] == 12 << 20       # 2 x LLC
    for _, cap in F.data_caches(MACHINE):
        below = [s for s in sizes if cap / 2 <= s < cap]
        above = [s for s in sizes if cap < s <= 2 * cap]
        assert below and above, cap
    # avx512 is skipped where the CPU lacks it; every point's arm is a value
    assert all(p.params["kernel"] != "avx512" for p in pts)
    assert {p.arm for p in pts} == set(params["values"])
    # arms of one cell share their params: the worker interleaves them
    cells = {}
    for p in pts:
        cells.setdefault(json.dumps(p.params, sort_keys=True), []).append(p.arm)
    assert all(sorted(a) == sorted(params["values"]) for a in cells.values())
    if preset == "quick":
        # the quick preset stays small: its points plus the cache anchors
        assert len(sizes) <= params["points"] + 8 and len({p.params["kernel"] for p in pts}) <= 4


def test_full_preset_has_every_kernel_and_value():
    exp = get_experiment("fill")
    params = exp.resolve("full")
    assert set(params["kernels"]) == set(F.KERNELS) and set(params["values"]) == set(F.VALUES)


@pytest.mark.parametrize("overrides", [
    {"kernels": "avx3"}, {"values": "zero,two"}, {"min_size": "8"}, {"points": "1"},
    {"max_size": "64", "min_size": "1K"}, {"max_size": "16G"}, {"nonsense": "1"},
    {"kernels": "avx512"},           # the fake machine has no AVX-512
])
def test_bad_params_raise_param_error(overrides):
    exp = get_experiment("fill")
    with pytest.raises(ParamError):
        exp.plan(exp.resolve("quick", overrides), MACHINE)


def test_max_size_auto_is_bounded_by_free_memory():
    exp = get_experiment("fill")
    small = dict(MACHINE, memory={"available_bytes": 64 << 20})
    params = exp.resolve("quick")
    hi = exp.max_bytes(params, small)
    assert hi * (len(params["values"]) + 1) <= (64 << 20) * 0.8


def test_prepare_uses_rotating_chunks_for_large_regions():
    exp = F.Fill()
    params = exp.resolve("quick")
    lab = Lab(hardware_counters=False)
    try:
        small = exp.prepare(Point("one", {"size_bytes": 1 << 20, "kernel": "scalar8"}), params, lab)
        assert small.size == 1 << 20 and not small.aux & F.FILL_ROTATE
        big = exp.prepare(Point("one_zero", {"size_bytes": 24 << 20, "kernel": "scalar8"}), params, lab)
        assert big.size == F.ROTATE_CHUNK and big.aux & F.FILL_ROTATE and big.aux >> 16 == 24 << 20
        assert big.aux & F.FILL_ALTERNATE and big.warmup == 25
        assert len(big.dst.buffer) >= (24 << 20) + F.SLOT_BYTES
        vol = exp.prepare(Point("zero_volatile", {"size_bytes": 24 << 20, "kernel": "scalar8"}), params, lab)
        assert vol.src is not None and vol.aux & F.FILL_VALUE_FROM_SRC
        lab.warm(big, big.warmup)
        rec = lab.sample(big, 3, 1.0)
        assert rec["metric"] == "gb_per_s" and rec["value"] > 0
    finally:
        lab.perf.close()


# ---- PMU event selection --------------------------------------------------------------------

def test_l2_events_chosen_by_model_and_never_guessed():
    ev, note = F.l2_eviction_events("GenuineIntel", 6, 0x5E)
    assert ev == {"l2_lines_out_silent": 0x01F2, "l2_lines_out_non_silent": 0x02F2}
    assert "skylake_core.json" in note
    for model in (0x4E, 0x8E, 0x9E, 0xA5, 0xA6):
        assert F.l2_eviction_events("GenuineIntel", 6, model)[0] == ev
    for key in [("GenuineIntel", 6, 0x8F), ("GenuineIntel", 6, 0xA7), ("AuthenticAMD", 25, 0x21)]:
        ev, note = F.l2_eviction_events(*key)
        assert ev is None and "not guessing" in note


def test_cpu_identity_decodes_cpuid():
    regs = {0: (0x16, 0x756E6547, 0x6C65746E, 0x49656E69),     # "GenuineIntel"
            1: (0x000506E3, 0, 0, 0)}                          # Skylake-S: family 6, model 0x5E
    assert F.cpu_identity(lambda leaf, sub=0: regs[leaf]) == ("GenuineIntel", 6, 0x5E)
    regs[1] = (0x00A20F12, 0, 0, 0)                            # Zen 3: family 0x19, model 0x21
    assert F.cpu_identity(lambda leaf, sub=0: regs[leaf])[1:] == (0x19, 0x21)


def test_attach_l2_events_without_pmu_reports_why():
    lab = Lab(hardware_counters=False)
    try:
        got = F.attach_l2_events(lab, ("GenuineIntel", 6, 0x5E))
        assert got["status"] == "no_pmu"
        assert F.attach_l2_events(lab, ("GenuineIntel", 6, 0x8F))["status"] == "unknown_model"
    finally:
        lab.perf.close()


def test_attach_l2_events_with_a_pmu_adds_the_model_encodings():
    class FakePerf:
        has_hardware, notes = True, {}

        def __init__(self):
            self.added = []

        def add_raw_event(self, name, config, ptype=4):
            self.added.append((name, config, ptype))
            return f"{name} raw 0x{config:x}"

    class FakeLab:
        perf = FakePerf()

    lab = FakeLab()
    got = F.attach_l2_events(lab, ("GenuineIntel", 6, 0x8E))
    assert got["status"] == "counting" and "skylake_core.json" in got["note"]
    assert lab.perf.added == [("l2_lines_out_silent", 0x01F2, 4), ("l2_lines_out_non_silent", 0x02F2, 4)]
    lab = FakeLab()
    lab.perf = FakePerf()
    assert F.attach_l2_events(lab, ("GenuineIntel", 6, 0xA7))["status"] == "unknown_model"
    assert lab.perf.added == []


# ---- analysis end to end on synthetic samples -----------------------------------------------------

def _samples(effect_beyond_l2, n=7, kernels=("avx2", "memset"), seed=1):
    rng = np.random.default_rng(seed)
    exp = get_experiment("fill")
    params = exp.resolve("quick", {"kernels": ",".join(kernels)})
    out = []
    for p in exp.plan(params, MACHINE):
        size = p.params["size_bytes"]
        base = 50.0 if size < (1 << 20) else 10.0
        lvl = F.level_of(size, F.data_caches(MACHINE))
        f = effect_beyond_l2 if p.arm in F.ZERO_ARMS and lvl in ("L3", "DRAM") else 1.0
        for v in rng.normal(base * f, base * 0.005, n):
            out.append({"arm": p.arm, "point": p.params, "metric": "gb_per_s", "unit": "GB/s",
                        "value": float(v), "length": 10, "ns": 1e6, "ticks": 1, "cycles_est": None,
                        "counters": {"page_faults": 0}, "rejected": False, "reason": None})
    return RunData("fill", params, MACHINE, build_points(out), out)


def test_analyze_detects_a_planted_effect_beyond_l2_only():
    data = _samples(1.17)
    fs = {f.id: f for f in get_experiment("fill").analyze(data)}
    assert fs["store_elimination"].verdict == DETECTED
    assert fs["zero_vs_one_l3"].verdict == DETECTED and fs["zero_vs_one_dram"].verdict == DETECTED
    assert fs["zero_vs_one_l3"].value == pytest.approx(1.17, abs=0.02)
    assert fs["zero_vs_one_l1d"].verdict == NOT_DETECTED and fs["zero_vs_one_l2"].verdict == NOT_DETECTED
    assert fs["zero_vs_one_memset"].verdict == DETECTED
    assert fs["volatile_zero_vs_zero"].verdict == NOT_DETECTED
    ev = fs["zero_vs_one_l3"].evidence
    assert ev["kernel"] == "avx2" and "memset" in ev["kernels"] and ev["level"] == "L3"
    mech = fs["l2_silent_evictions"]
    assert mech.verdict == INCONCLUSIVE and "cannot be observed" in mech.claim
    assert "no hardware PMU" in mech.evidence["reason"]
    for f in fs.values():
        json.dumps(f.as_dict())


def test_analyze_without_effect_is_not_detected():
    fs = {f.id: f for f in get_experiment("fill").analyze(_samples(1.0))}
    assert fs["store_elimination"].verdict == NOT_DETECTED
    assert all(fs[f"zero_vs_one_{lv}"].verdict == NOT_DETECTED for lv in ("l1d", "l2", "l3", "dram"))


def test_analyze_with_too_few_samples_is_inconclusive():
    fs = {f.id: f for f in get_experiment("fill").analyze(_samples(1.17, n=3))}
    assert fs["store_elimination"].verdict == INCONCLUSIVE
    assert fs["zero_vs_one_dram"].verdict == INCONCLUSIVE


def test_analyze_reads_l2_counters_when_present():
    data = _samples(1.17)
    for s in data.samples:
        lines = s["point"]["size_bytes"] * s["length"] / 64
        silent = 0.6 if s["arm"] == "zero" else 0.0
        s["counters"].update(l2_lines_out_silent=silent * lines,
                             l2_lines_out_non_silent=(1 - silent) * lines)
    f = {f.id: f for f in get_experiment("fill").analyze(data)}["l2_silent_evictions"]
    assert f.verdict == "measured" and f.value == pytest.approx(0.6)
    assert f.evidence["per_level"]["DRAM one"]["silent_per_line"] == 0


def test_plot_draws_both_panels(tmp_path):
    from memfx.plots import figure_for
    data = _samples(1.17)
    doc = {"experiment": "fill", "run_id": "x", "machine": MACHINE, "params": data.params,
           "points": data.points, "findings": [f.as_dict() for f in get_experiment("fill").analyze(data)]}
    fig = figure_for(doc)
    assert len(fig.axes) == 2
    fig.savefig(tmp_path / "fill.png")
    from plot_checks import figure_summary
    curves, ratio = figure_summary(fig)
    # top: one line per fill value for the widest kernel, every sample a dot
    kernel = curves["title"].rsplit(" — ", 1)[-1]
    shown = [p for p in data.points if p["params"]["kernel"] == kernel]
    assert shown and sorted(curves["curve_labels"]) == sorted({p["arm"] for p in shown})
    assert curves["scatter_points"] == sum(len(p["values"]) for p in shown)
    # cache bands from sysfs on both panels: L1d, L2, L3 (not the L1i)
    cache_labels = ["L1d 32KB (sysfs)", "L2 256KB (sysfs)", "L3 6MB (sysfs)"]
    for ax in (curves, ratio):
        assert [t for t in ax["texts"] if t.endswith("(sysfs)")] == cache_labels
    assert len(curves["bands"]) == 3
    # bottom: the zero/one ratio with its +-effect_min band and one verdict per level
    assert ratio["ylabel"] == "bandwidth ratio zero/one" and ratio["xlabel"] == "region size (bytes)"
    assert len(ratio["bands"]) == 3 + 1
    assert sorted(t.split()[0] for t in ratio["texts"] if not t.endswith("(sysfs)")) == \
        ["DRAM", "L1d", "L2", "L3"]


# ---- fill_alloc -------------------------------------------------------------------------------------

def test_alloc_kernels_hand_out_zeroed_memory_after_the_heap_was_dirtied():
    for name in ("alloc_calloc", "alloc_malloc_memset", "alloc_mmap"):
        row = ROWS[name]
        for aux in (F.ALLOC_CHECK, F.ALLOC_CHECK | F.ALLOC_RECYCLED):
            for size in (4096, 12345, 1 << 20):
                assert _core.run(row.index, None, 0, None, 0, size, 0, 3, aux)[3] == 0, (name, aux, size)


def _thp_size():
    """This kernel's transparent huge page size in bytes, or None where THP
    is off or unknown."""
    thp = "/sys/kernel/mm/transparent_hugepage/"
    try:
        with open(thp + "enabled") as f:
            if "[never]" in f.read():
                return None
        with open(thp + "hpage_pmd_size") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def test_alloc_first_touch_counts_page_faults():
    lab = Lab(hardware_counters=False)
    try:
        if not any("page_faults" in names for _, names in lab.perf.groups):
            pytest.skip("software events not available")
        size = 4 << 20
        trial = Trial("alloc_mmap", size=size, metric="time", difference=False, reject_page_faults=False)
        rec = lab.sample(trial, 2, 1.0)
        assert rec["reason"] != "page_fault"         # first-touch trials keep their faults
        # two calls, each first-touching `size` bytes of a fresh mapping: one
        # fault per base page, or per huge page where THP backs the mapping
        # (sizes from this machine, not assumed)
        faults = rec["counters"]["page_faults"]
        base_pages = 2 * size // mmap.PAGESIZE
        fewest = 2 * size // (_thp_size() or mmap.PAGESIZE)
        assert 0.9 * fewest <= faults <= base_pages + 64
    finally:
        lab.perf.close()


def test_fill_alloc_plan_and_params():
    exp = get_experiment("fill_alloc")
    pts = exp.plan(exp.resolve("quick"), MACHINE)
    assert {(p.arm, p.params["memory"]) for p in pts} >= {("calloc", "fresh"), ("calloc", "recycled"),
                                                          ("malloc_memset", "recycled"), ("mmap", "fresh")}
    assert not any(p.arm == "mmap" and p.params["memory"] == "recycled" for p in pts)
    with pytest.raises(ParamError):
        exp.plan(exp.resolve("quick", {"memory": "stale"}), MACHINE)
    with pytest.raises(ParamError):
        exp.plan(exp.resolve("quick", {"sizes": "1K"}), MACHINE)


# ---- a tiny real run through the CLI ------------------------------------------------------------------

def test_tiny_fill_run_end_to_end(db_path):
    r = run_cli("run", "fill", "--quick", "--json", "-q",
                "--set", "kernels=scalar8,memset", "--set", "values=zero,one",
                "--set", "max_size=64K", "--set", "points=3", "--set", "samples=5",
                "--set", "min_sample_ms=0.1", db=db_path, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["status"] == "complete"
    ids = {f["id"] for f in doc["findings"]}
    assert {"store_elimination", "zero_vs_one_l1d", "l2_silent_evictions"} <= ids
    assert all(p["unit"] == "GB/s" and p["median"] > 0 for p in doc["points"])


def test_tiny_fill_alloc_run_end_to_end(db_path):
    r = run_cli("run", "fill_alloc", "--quick", "--json", "-q", "--set", "sizes=256K",
                "--set", "samples=3", "--set", "min_sample_ms=0.2", db=db_path, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    ids = {f["id"] for f in doc["findings"]}
    assert "calloc_vs_malloc_memset_fresh" in ids and "page_faults_mmap_fresh" in ids


def test_sizes_with_too_few_samples_are_dropped_while_others_remain():
    pairs = _pairs(1.17, 11, 0.01, sizes=3) + [(np.array([1.0]), np.array([5.0]))]
    r = F.level_ratio(pairs, min_samples=5)
    assert r["sizes"] == 3 and r["dropped"] == 1 and r["n_a"] == 11
    assert F.ratio_verdict(r) == DETECTED
    only_few = F.level_ratio(_pairs(1.17, 3, 0.01), min_samples=5)
    assert only_few["dropped"] == 0 and F.ratio_verdict(only_few) == INCONCLUSIVE


def test_headline_says_when_a_seed_sized_effect_is_excluded():
    fs = {f.id: f for f in get_experiment("fill").analyze(_samples(1.0))}
    assert fs["store_elimination"].evidence["seed_effect_excluded_beyond_l2"] is True
    assert "excluded" in fs["store_elimination"].claim
    fs = {f.id: f for f in get_experiment("fill").analyze(_samples(1.17))}
    assert fs["store_elimination"].evidence["seed_effect_excluded_beyond_l2"] is False


def test_one_disturbed_size_does_not_move_the_level_estimate():
    pairs = _pairs(1.0, 11, 0.01, sizes=4)
    a, b = pairs[0]
    pairs[0] = (a * 0.45, b)            # a host-slowed buffer in one arm at one size
    r = F.level_ratio(pairs, min_samples=5)
    assert abs(r["ratio"] - 1) < 0.02
    assert r["ci_low"] < 0.9            # ...but the CI shows the scatter
