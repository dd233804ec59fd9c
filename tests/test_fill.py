"""The fill experiment (seed 000, hardware store elimination): kernels are
byte-exact, the value is a runtime argument, the ratio/CI/verdict logic,
the plan, parameters, PMU event selection, fill_alloc, and a tiny run."""
import json
import mmap

import numpy as np
import pytest

from conftest import run_cli
from memfx.analysis.results import RunData, build_points
from memfx.experiments import fill as F
from memfx.experiments import fill_alloc as FA
from memfx.experiments import get_experiment
from memfx.experiments.base import Point, Trial
from memfx.lab import _core
from memfx.lab.core import kernel_table
from memfx.lab.lab import Lab
from memfx.model.errors import ParamError
from memfx.model.findings import DETECTED, INCONCLUSIVE, NOT_DETECTED
from memfx.model.machine_view import Fingerprint

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


@pytest.mark.measuring
@pytest.mark.parametrize("name", FILL_ROWS)
def test_kernel_byte_exact_all_sizes_and_offsets(name):
    """Sizes 0..4096 x dst offsets 0..63, 64 guard bytes each side, in C."""
    r = _row(name)
    values = (0x00, 0x5C) if name in NT else (0x00, 0x01, 0xFF, 0x5C)
    for v in values:
        assert F.check_kernel(r.index, v, 0, 0, count=1) is None, (name, v)


@pytest.mark.measuring
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


@pytest.mark.measuring
@pytest.mark.parametrize("name", FILL_ROWS)
def test_rotating_mode_sweeps_the_region_chunk_by_chunk(name):
    """Chunks through a region, wrapping, cursor kept past the region; every
    value arm, including alternation per sweep and the volatile value."""
    r = _row(name)
    lab = Lab(hardware_counters=False)
    try:
        for arm in F.VALUES:
            v, aux, word = F.arm_setup(arm, 3)
            for region, chunk, calls in ((4000, 1000, 3), (4000, 1000, 9), (3001, 700, 10),
                                         (100, 37, 12), (5000, 5000, 3), (777, 2000, 2)):
                assert F.check_rotating(lab, r.name, v, aux, word, region, chunk, calls) is None, \
                    (arm, region, chunk, calls)
    finally:
        lab.perf.close()


@pytest.mark.measuring
def test_rotating_mode_returns_the_cursor():
    r = _row("fill_avx2")
    region, chunk = 10_000, 3_000
    buf = bytearray(region + 256)
    rot = F.FILL_ROTATE | (region << 16)
    cursors = [_core.run(r.index, buf, 0, None, 0, chunk, 1, 1, rot)[3] for _ in range(5)]
    assert cursors == [3000, 6000, 9000, 2000, 5000]


@pytest.mark.measuring
def test_checker_reports_a_wrong_byte():
    r = _row("fill_scalar8")
    bad = _core.fill_check(r.index, 0x01, 0, 1, 0, 0x02, 64, 4)   # expects 0x02, kernel writes 0x01
    assert bad is not None
    size, off, idx, want, got = bad
    assert (size, off, idx, want, got) == (1, 0, 0, 0x02, 0x01)


@pytest.mark.measuring
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


@pytest.mark.measuring
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
    fp = Fingerprint.of(MACHINE)
    assert F.fill_levels(fp) == ["L1d", "L2", "L3", "DRAM"]
    assert F.fill_level(fp, 100) == "L1d"
    assert F.fill_level(fp, 32 << 10) == "L1d"
    assert F.fill_level(fp, (32 << 10) + 1) == "L2"
    assert F.fill_level(fp, 1 << 20) == "L3"
    assert F.fill_level(fp, 7 << 20) == "DRAM"
    # no cache reported: every size in one level
    bare = Fingerprint.of({})
    assert F.fill_level(bare, 7 << 20) == "all" and F.fill_levels(bare) == ["all"]


def test_quick_plans_one_declared_size_per_level():
    exp = get_experiment("fill")
    params = exp.resolve("quick")
    assert params["sweep"] == "levels"
    sizes = sorted({p.params["size_bytes"] for p in exp.plan(params, MACHINE)})
    caches = Fingerprint.of(MACHINE).caches
    # one size in each level, well inside it, and DRAM at 2x the LLC
    assert [Fingerprint.of(MACHINE).level_of(s) for s in sizes] == ["L1d", "L2", "L3", "DRAM"]
    assert sizes[-1] == 12 << 20
    for s, cache in zip(sizes, caches):
        assert s <= 0.75 * cache.size_bytes
    # the same cells for the same machine, whatever the seed or replica
    again = exp.plan(exp.resolve("quick", {"seed": 9}), MACHINE)
    assert sorted({p.params["size_bytes"] for p in again}) == sizes


@pytest.mark.parametrize("preset", ["full"])
def test_plan_sizes_bracket_every_cache_size(preset):
    exp = get_experiment("fill")
    params = exp.resolve(preset)
    pts = exp.plan(params, MACHINE)
    sizes = sorted({p.params["size_bytes"] for p in pts})
    assert sizes[0] == 100 and sizes[-1] == 12 << 20       # 2 x LLC
    for cap in (c.size_bytes for c in Fingerprint.of(MACHINE).caches):
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
    # the primary kernel measures every value; the others zero and one only
    # (the zero / non-zero table), which is all the analysis reads of them
    primary = F.primary_kernel({p.params["kernel"] for p in pts})
    for key, arms in cells.items():
        want = params["values"] if json.loads(key)["kernel"] == primary else ["zero", "one"]
        assert sorted(arms) == sorted(want), key
    if preset == "quick":
        # the quick preset stays small: its points plus the cache anchors
        assert len(sizes) <= params["points"] + 8 and len({p.params["kernel"] for p in pts}) <= 5


def test_full_preset_has_every_kernel_and_value():
    exp = get_experiment("fill")
    params = exp.resolve("full")
    assert set(params["kernels"]) == set(F.KERNELS) and set(params["values"]) == set(F.VALUES)


def test_past_sparse_from_the_grid_keeps_only_the_cache_anchors_and_the_top():
    anchors = [48 << 10, 2 << 20, 480 << 20]
    sparse = F.size_grid(4096, 960 << 20, 16, anchors, sparse_from=64 << 20)
    past = sorted(s >> 20 for s in sparse if s > 64 << 20)
    assert past == [240, 960]                    # 0.5x the LLC, and max_size
    dense = F.size_grid(4096, 960 << 20, 16, anchors)
    assert [s for s in dense if s <= 64 << 20] == [s for s in sparse if s <= 64 << 20]
    assert len([s for s in dense if s > 64 << 20]) > len(past)
    exp = get_experiment("fill")
    assert exp.resolve("full")["sparse_from"] == 64 << 20


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


@pytest.mark.measuring
def test_prepare_fills_a_large_region_in_one_call():
    """A program's memset is one call over the region; libc and rep stosb
    choose their strategy from that length (issue 16)."""
    exp = F.Fill()
    params = exp.resolve("quick")
    lab = Lab(hardware_counters=False)
    try:
        for size in (1 << 20, 24 << 20):
            t = exp.prepare(Point("one", {"size_bytes": size, "kernel": "memset"}), params, lab)
            assert t.size == size and not t.aux & F.FILL_ROTATE and t.warmup >= 1
            assert "chunk_bytes" not in t.extra
    finally:
        lab.perf.close()


@pytest.mark.measuring
def test_prepare_uses_rotating_chunks_when_asked():
    exp = F.Fill()
    params = exp.resolve("quick", {"chunk": "1M"})
    lab = Lab(hardware_counters=False)
    try:
        small = exp.prepare(Point("one", {"size_bytes": 1 << 20, "kernel": "scalar8"}), params, lab)
        assert small.size == 1 << 20 and not small.aux & F.FILL_ROTATE
        big = exp.prepare(Point("one_zero", {"size_bytes": 24 << 20, "kernel": "scalar8"}), params, lab)
        assert big.size == 1 << 20 and big.aux & F.FILL_ROTATE and big.aux >> 16 == 24 << 20
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


@pytest.mark.measuring
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
        lvl = Fingerprint.of(MACHINE).level_of(size)
        f = effect_beyond_l2 if p.arm in F.ZERO_ARMS and lvl in ("L3", "DRAM") else 1.0
        for v in rng.normal(base * f, base * 0.005, n):
            out.append({"arm": p.arm, "point": p.params, "metric": "gb_per_s", "unit": "GB/s",
                        "value": float(v), "length": 10, "ns": 1e6, "ticks": 1, "cycles_est": None,
                        "counters": {"page_faults": 0}, "rejected": False, "reason": None})
    return RunData("fill", params, MACHINE, build_points(out), out)


def _answers(data, exp="fill"):
    from memfx.model.answers import complete_answers
    e = get_experiment(exp)
    got = complete_answers(e.questions, e.analyze(data))
    for a in got:
        json.dumps(a.as_dict())
    return {a.question.split(".", 1)[1]: a for a in got}


def _cells(answer):
    return {(d["kernel"], d["level"]): d for d in answer.details}


def test_analyze_detects_a_planted_effect_beyond_l2_only():
    data = _samples(1.17)
    a = _answers(data)
    se = a["zero_store_elimination"]
    assert se.verdict == DETECTED and se.value == pytest.approx(1.17, abs=0.02)
    cells = _cells(se)
    for k in ("avx2", "memset"):
        assert cells[(k, "L3")]["verdict"] == DETECTED and cells[(k, "DRAM")]["verdict"] == DETECTED
        assert cells[(k, "L1d")]["verdict"] == NOT_DETECTED and cells[(k, "L2")]["verdict"] == NOT_DETECTED
    assert "L3" in se.because and "DRAM" in se.because and "L1d" not in se.because
    assert se.because.startswith("Zero bytes are stored faster than 0x01 bytes: ")
    assert se.evidence and all("kernel=" in k for k in se.evidence)
    assert a["zero_loaded_from_memory"].verdict == NOT_DETECTED
    assert {d["level"] for d in a["zero_loaded_from_memory"].details} == {"L1d", "L2", "L3", "DRAM"}
    mech = a["l2_evictions"]
    assert mech.verdict == "not_measured" and "no hardware PMU" in mech.because
    assert a["nonzero_values_alike"].verdict == "not_measured"   # quick preset: no ones/random
    assert a["bandwidth"].verdict == "measured" and a["bandwidth"].value == pytest.approx(10, rel=0.02)


def test_analyze_without_effect_is_not_detected():
    se = _answers(_samples(1.0))["zero_store_elimination"]
    assert se.verdict == NOT_DETECTED
    assert se.because.startswith("Filling with zero bytes runs at 1.00x the bandwidth of "
                                 "filling with 0x01 bytes in L1d..DRAM")
    assert all(d["verdict"] == NOT_DETECTED for d in se.details if d["level"] is not None)
    assert {d["kernel"] for d in se.details if d["verdict"] == "not_measured"} == \
        set(F.KERNELS) - {"avx2", "memset"}


def test_analyze_with_too_few_samples_is_inconclusive():
    se = _answers(_samples(1.17, n=3))["zero_store_elimination"]
    assert se.verdict == INCONCLUSIVE
    assert _cells(se)[("avx2", "DRAM")]["verdict"] == INCONCLUSIVE


def test_analyze_reads_l2_counters_when_present():
    data = _samples(1.17)
    for s in data.samples:
        lines = s["point"]["size_bytes"] * s["length"] / 64
        silent = 0.6 if s["arm"] == "zero" else 0.0
        s["counters"].update(l2_lines_out_silent=silent * lines,
                             l2_lines_out_non_silent=(1 - silent) * lines)
    a = _answers(data)["l2_evictions"]
    assert a.verdict == "measured" and a.value == pytest.approx(0.6)
    dram_one = next(d for d in a.details if d["label"] == "DRAM one")
    assert dram_one["value"] == 0


def test_declared_plots_draw_every_family_panel(tmp_path):
    from memfx.report.plots import figure_for
    data = _family_samples({"scalar8": 1.0, "avx2": 1.1, "memset": 1.0, "nt_sse": 2.0})
    doc = {"experiment": "fill", "run_id": "x", "machine": MACHINE, "params": data.params,
           "points": data.points}
    fig = figure_for(doc)
    panels = {ax.get_title(): ax for ax in fig.axes}
    assert len(panels) == 4
    fig.savefig(tmp_path / "fill.png")
    labels = {t: sorted(x.get_label() for x in ax.get_lines() if not x.get_label().startswith("_"))
              for t, ax in panels.items()}
    assert labels["AVX2 fill bandwidth by stored value"] == ["one", "zero"]
    assert labels["non-temporal fills by stored value"] == ["nt_sse one", "nt_sse zero"]
    for ax in panels.values():
        assert [t.get_text() for t in ax.texts if t.get_text().endswith("(sysfs)")] == \
            ["L1d 32 KiB (sysfs)", "L2 256 KiB (sysfs)", "L3 6 MiB (sysfs)"]


# ---- fill_alloc -------------------------------------------------------------------------------------

@pytest.mark.measuring
def test_alloc_kernels_hand_out_zeroed_memory_after_the_heap_was_dirtied():
    for name in ("alloc_calloc", "alloc_malloc_memset", "alloc_mmap"):
        row = ROWS[name]
        for aux in (FA.ALLOC_CHECK, FA.ALLOC_CHECK | FA.ALLOC_RECYCLED):
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


@pytest.mark.measuring
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

@pytest.mark.measuring
def test_tiny_fill_run_end_to_end(db_path):
    r = run_cli("run", "fill", "--quick", "--json", "-q",
                "--set", "kernels=scalar8,memset", "--set", "values=zero,one",
                "--set", "max_size=64K", "--set", "points=3", "--set", "samples=5",
                "--set", "min_sample_ms=0.1", db=db_path, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["status"] == "complete"
    answers = {a["question"]: a for a in doc["answers"]}
    assert set(answers) == {q.id for q in get_experiment("fill").questions}
    se = answers["fill.zero_store_elimination"]
    assert se["verdict"] != "not_measured" and se["details"]
    # 64K is the largest region: L2 and beyond are not reached, and said so
    assert any(d["verdict"] == "not_measured" and "did not reach" in d["reason"]
               for d in se["details"])
    assert all(p["unit"] == "GB/s" and p["median"] > 0 for p in doc["points"])


@pytest.mark.measuring
def test_tiny_fill_alloc_run_end_to_end(db_path):
    r = run_cli("run", "fill_alloc", "--quick", "--json", "-q", "--set", "sizes=256K",
                "--set", "samples=3", "--set", "min_sample_ms=0.2", db=db_path, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    answers = {a["question"]: a for a in doc["answers"]}
    assert set(answers) == {q.id for q in get_experiment("fill_alloc").questions}
    assert answers["fill_alloc.calloc_vs_memset_fresh"]["value"] > 0
    assert answers["fill_alloc.ns_per_page"]["verdict"] == "measured"


def test_sizes_with_too_few_samples_are_dropped_while_others_remain():
    pairs = _pairs(1.17, 11, 0.01, sizes=3) + [(np.array([1.0]), np.array([5.0]))]
    r = F.level_ratio(pairs, min_samples=5)
    assert r["sizes"] == 3 and r["dropped"] == 1 and r["n_a"] == 11
    assert F.ratio_verdict(r) == DETECTED
    only_few = F.level_ratio(_pairs(1.17, 3, 0.01), min_samples=5)
    assert only_few["dropped"] == 0 and F.ratio_verdict(only_few) == INCONCLUSIVE


def test_headline_says_when_a_seed_sized_effect_is_excluded():
    assert "seed 000's 17% excluded beyond L2" in _answers(_samples(1.0))["zero_store_elimination"].because
    assert "excluded" not in _answers(_samples(1.17))["zero_store_elimination"].because


def test_one_disturbed_size_does_not_move_the_level_estimate():
    pairs = _pairs(1.0, 11, 0.01, sizes=4)
    a, b = pairs[0]
    pairs[0] = (a * 0.45, b)            # a host-slowed buffer in one arm at one size
    r = F.level_ratio(pairs, min_samples=5)
    assert abs(r["ratio"] - 1) < 0.02
    assert r["ci_low"] < 0.9            # ...but the CI shows the scatter


def _family_samples(effects, n=7, seed=3, levels=("L3", "DRAM"), overrides=None):
    """Synthetic fill samples: effects = {kernel: zero/one ratio in `levels`}."""
    rng = np.random.default_rng(seed)
    exp = get_experiment("fill")
    params = exp.resolve("quick", dict({"kernels": ",".join(effects), "values": "zero,one"},
                                       **(overrides or {})))
    out = []
    for p in exp.plan(params, MACHINE):
        size = p.params["size_bytes"]
        lvl = Fingerprint.of(MACHINE).level_of(size)
        f = effects.get(p.params["kernel"], 1.0) if p.arm == "zero" and lvl in levels else 1.0
        for v in rng.normal(20.0 * f, 0.1, n):
            out.append({"arm": p.arm, "point": p.params, "metric": "gb_per_s", "unit": "GB/s",
                        "value": float(v), "length": 1, "ns": 1e6, "ticks": 1, "cycles_est": None,
                        "counters": {}, "rejected": False, "reason": None})
    return RunData("fill", params, MACHINE, build_points(out), out)


def test_zero_ratio_table_per_kernel_family_and_level():
    effects = {"scalar4": 1.0, "avx2": 1.12, "nt_sse": 2.5, "memset": 1.0}
    data = _family_samples(effects)
    rows = F.zero_ratio_table(data)
    assert rows == F.zero_ratio_table(data)                  # pure: same data, same table
    got = {(r["kernel"], r["level"]): r for r in rows}
    assert {r["family"] for r in rows} == {"scalar", "AVX2", "NT", "memset"}
    for k, eff in effects.items():
        for lv in ("L1d", "L2", "L3", "DRAM"):
            r = got[(k, lv)]
            want = eff if lv in ("L3", "DRAM") else 1.0
            assert r["ratio"] == pytest.approx(want, rel=0.01)
            assert r["ci_low"] <= r["ratio"] <= r["ci_high"]
            assert r["n"] == 7 and r["nonzero_arm"] == "one"
    json.dumps(rows)
    se = _answers(data)["zero_store_elimination"]
    assert se.value == pytest.approx(2.5, rel=0.01) and se.verdict == DETECTED
    assert [(d["kernel"], d["level"], d["value"], d["ci_low"], d["ci_high"]) for d in se.details
            if d["verdict"] != "not_measured"] \
        == [(r["kernel"], r["level"], r["ratio"], r["ci_low"], r["ci_high"]) for r in rows]
    assert "NT (nt_sse) in L3 2.50x" in se.because


def test_zero_ratio_table_needs_zero_and_a_nonzero_arm():
    data = _family_samples({"avx2": 1.0})
    data.points = [p for p in data.points if p["arm"] != "one"]
    assert F.zero_ratio_table(data) == []


def test_answer_agrees_with_the_table_when_one_level_has_a_single_size():
    """Issue 9: memset at 64 MiB was 45.3 GB/s with zeros vs 33.1 with ones
    in the point table while the memset finding (pooled over L3 and DRAM
    sizes) said 0.99, inconclusive.  Here DRAM holds one size (the sweep
    ends at 2x the LLC) where memset zeros are 1.37x faster; the answer must
    say so, from the same rows the table shows."""
    data = _family_samples({"memset": 1.37, "avx2": 1.0}, levels=("DRAM",),
                           overrides={"kernels": "avx2,memset", "max_size": "12M",
                                                                  "sweep": "grid"})
    dram = sorted({p["params"]["size_bytes"] for p in data.points
                   if Fingerprint.of(MACHINE).level_of(p["params"]["size_bytes"]) == "DRAM"})
    l3 = {p["params"]["size_bytes"] for p in data.points
          if Fingerprint.of(MACHINE).level_of(p["params"]["size_bytes"]) == "L3"}
    assert len(dram) == 1 and len(l3) >= 2          # the shape of the run
    se = _answers(data)["zero_store_elimination"]
    cell = _cells(se)[("memset", "DRAM")]
    assert cell["value"] == pytest.approx(1.37, rel=0.01) and cell["verdict"] == DETECTED
    assert cell["gbps_zero"] / cell["gbps_nonzero"] == pytest.approx(1.37, rel=0.01)
    assert _cells(se)[("memset", "L3")]["verdict"] == NOT_DETECTED
    assert se.verdict == DETECTED and se.value == pytest.approx(1.37, rel=0.01)
    assert "memset in DRAM 1.37x" in se.because
    table = {(r["kernel"], r["level"]): r["ratio"] for r in F.zero_ratio_table(data)}
    assert all(d["value"] == table[(d["kernel"], d["level"])] for d in se.details
               if d["verdict"] != "not_measured")


def test_kernels_and_levels_not_reached_are_not_measured_with_the_reason():
    data = _family_samples({"avx2": 1.0, "avx512": 1.0}, overrides={"max_size": "256K"})
    se = _answers(data)["zero_store_elimination"]
    missing = {(d["kernel"], d["level"]): d for d in se.details if d["verdict"] == "not_measured"}
    assert "avx512f" in missing[("avx512", None)]["reason"]
    assert "not in this run's kernels" in missing[("nt_movnti", None)]["reason"]
    families = {d["family"] for d in se.details}
    assert families == {"scalar", "SSE", "AVX2", "AVX-512", "rep stosb", "memset", "NT"}
    assert "did not reach L3" in missing[("avx2", "L3")]["reason"]
    assert "did not reach DRAM" in missing[("avx2", "DRAM")]["reason"]
    assert se.verdict == NOT_DETECTED and "not measured" in se.because


def test_fill_alloc_answers_from_synthetic_points():
    def add(arm, size, ns, memory="fresh"):
        return [{"arm": arm, "point": {"size_bytes": size, "memory": memory},
                 "metric": "ns_per_call", "unit": "ns", "value": ns * (1 + 0.001 * i),
                 "length": 1, "ns": ns, "cycles_est": None, "counters": {"page_faults": 1},
                 "rejected": False, "reason": None} for i in range(7)]
    out = []
    for size in (1 << 20, 4 << 20):
        out += add("calloc", size, 100.0 * size / 4096) + add("malloc_memset", size, 150.0 * size / 4096)
        out += add("calloc", size, 120.0 * size / 4096, "recycled")
        out += add("malloc_memset", size, 120.0 * size / 4096, "recycled")
        out += add("mmap", size, 100.0 * size / 4096) + add("mmap_thp", size, 10.0 * size / 4096)
    exp = get_experiment("fill_alloc")
    params = exp.resolve("quick")
    a = _answers(RunData("fill_alloc", params, MACHINE, build_points(out), out), "fill_alloc")
    assert a["calloc_vs_memset_fresh"].verdict == DETECTED
    assert a["calloc_vs_memset_fresh"].value == pytest.approx(1.5, rel=0.01)
    assert len(a["calloc_vs_memset_fresh"].details) == 2
    assert a["calloc_vs_memset_recycled"].verdict == NOT_DETECTED
    assert a["thp_first_touch"].value == pytest.approx(10, rel=0.01)
    # 1 MiB regions cannot be backed by a 2 MiB page: in details, not in the value
    out += add("mmap", 256 << 10, 100.0 * 64) + add("mmap_thp", 256 << 10, 200.0 * 64)
    a = _answers(RunData("fill_alloc", params, MACHINE, build_points(out), out), "fill_alloc")
    assert a["thp_first_touch"].value == pytest.approx(10, rel=0.01)
    assert [d["in_value"] for d in a["thp_first_touch"].details] == [False, False, True]
    assert a["populate_vs_touch"].verdict == "not_measured"
    assert a["ns_per_page"].value == pytest.approx(100, rel=0.01)
    assert "mmap_thp 10 ns" in a["ns_per_page"].because
