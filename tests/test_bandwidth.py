"""The bandwidth experiment (seed 004): its kernels compute what they claim
(checksums against numpy, byte-exact writes with guards), its checkers catch
a wrong kernel, the analysis reads synthetic curves right (plateaus per
level, knees, NT crossover, random vs sequential, not_measured where the
sweep did not reach), and bad input is one line with exit status 2."""
import json
import os

import numpy as np
import pytest

from conftest import run_cli
from memfx.analysis.results import document
from memfx.experiments import get_experiment
from memfx.experiments.bandwidth import (
    KERNELS,
    LEVEL_KINDS,
    LEVELS,
    check_random_kernel,
    check_read_kernel,
    check_rmw_kernel,
    check_write_read_kernel,
    level_sizes,
    level_windows,
    rmw_reference,
    sizes_for,
)
from memfx.experiments.bandwidth.kernels import check_load_kernel, read_twin, verify_kernel
from memfx.lab import _core
from memfx.model.answers import NOT_MEASURED
from memfx.model.findings import DETECTED, NOT_DETECTED

ROWS = {r["name"]: r for r in _core.kernels()}
# The CPUs this process may use, read at collection, before any Lab pins it.
ALLOWED = sorted(os.sched_getaffinity(0))
WIDTH_ISA = {"scalar": "", "sse2": "sse2", "avx2": "avx2", "avx512": "avx512f"}


def _index(name):
    row = ROWS[name]
    if not row["supported"]:
        pytest.skip(f"{name} needs {row['isa']}, which this CPU lacks")
    return row["index"]


def _numpy_checksum(data):
    q = len(data) // 8 * 8
    s = int(np.frombuffer(data[:q], "<u8").sum(dtype=np.uint64)) if q else 0
    return (s + sum(data[q:])) % (1 << 64)


# ---- kernels ---------------------------------------------------------------------

def test_every_named_kernel_is_a_row_of_the_core():
    for kind, by_width in KERNELS.items():
        for width, name in by_width.items():
            assert name in ROWS, f"{kind}/{width}: {name} is not in the kernel table"
    # the write-then-read rows call these fill rows by name (bandwidth.c)
    for name in ("fill_sse", "fill_avx2", "fill_avx512", "fill_nt_sse"):
        assert ROWS[name]["group"] == "fill"
    own = [r for r in ROWS.values() if r["group"] == "bandwidth"]
    # and each timed read row's summing twin (its check)
    assert {r["name"] for r in own} == {n for k in ("read", "rmw", "random", "write_readback",
                                                    "nt_write_readback")
                                        for n in KERNELS[k].values()} | {
        read_twin(n) for n in KERNELS["read"].values()}
    for r in own:
        assert r["op"] == "pass" and r["ops_per_iter"] == 1


@pytest.mark.measuring
@pytest.mark.parametrize("width", list(WIDTH_ISA))
def test_read_checksum_matches_numpy(width):
    idx = _index(f"bw_sum_{width}")
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, 100_003, dtype=np.uint8).tobytes()
    for off, n in ((0, 100_000), (3, 99_997), (13, 4099), (1, 0)):
        got = _core.run(idx, None, 0, bytearray(data), off, n, 0, 3, 0)[3]
        assert got == _numpy_checksum(data[off:off + n]) * 3 % (1 << 64)


@pytest.mark.measuring
@pytest.mark.parametrize("width", list(WIDTH_ISA))
def test_read_kernels_pass_their_checker_and_it_catches_a_wrong_size(width):
    idx = _index(f"bw_sum_{width}")
    assert check_read_kernel(idx) is None
    bad = check_read_kernel(idx, max_size=300, size_skew=1)
    assert bad and "checksum" in bad


@pytest.mark.measuring
@pytest.mark.parametrize("width", list(WIDTH_ISA))
def test_timed_read_rows_only_load_and_walk_each_byte_once(width):
    # the timed row walks size bytes a pass (its checker catches a wrong
    # size), and the verify hook checks its summing twin's checksum first
    idx = _index(f"bw_read_{width}")
    assert check_load_kernel(idx) is None
    bad = check_load_kernel(idx, max_size=300, size_skew=1)
    assert bad and "walked" in bad
    from memfx.lab.core import kernel_table
    assert verify_kernel(kernel_table()[f"bw_read_{width}"]) is None
    assert "sum" in ROWS[f"bw_sum_{width}"]["doc"] and "only" in ROWS[f"bw_read_{width}"]["doc"]


@pytest.mark.measuring
@pytest.mark.parametrize("width", list(WIDTH_ISA))
def test_random_order_reads_every_line_once(width):
    idx = _index(f"bw_random_{width}")
    assert check_random_kernel(idx) is None
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, 64 * 1000, dtype=np.uint8).tobytes()
    order = rng.permutation(1000).astype(np.uint32)
    got = _core.run(idx, order, 0, bytearray(data), 0, len(data), 0, 2, 0)[3]
    assert got == _numpy_checksum(data) * 2 % (1 << 64)
    # a repeated line is summed as often as it is listed: the order is what is read
    order[:] = 5
    got = _core.run(idx, order, 0, bytearray(data), 0, len(data), 0, 1, 0)[3]
    assert got == _numpy_checksum(data[5 * 64:6 * 64]) * 1000 % (1 << 64)


@pytest.mark.measuring
def test_random_footprint_covers_lines_and_order():
    idx = ROWS["bw_random_scalar"]["index"]
    assert _core.footprint(idx, 64 * 10 + 5, 3, 0) == (40, 640, 0)
    with pytest.raises(ValueError):      # an order shorter than the lines is refused
        _core.run(idx, np.zeros(9, np.uint32), 0, bytearray(640), 0, 640, 0, 1, 0)


@pytest.mark.parametrize("width", list(WIDTH_ISA))
def test_increment_is_byte_exact_and_the_checker_catches_overruns(width):
    idx = _index(f"bw_rmw_{width}")
    assert check_rmw_kernel(idx) is None
    bad = check_rmw_kernel(idx, max_size=200, size_skew=1)
    assert bad and ("outside" in bad or "wrong byte" in bad)


def test_rmw_reference_adds_per_word_and_per_trailing_byte():
    orig = bytes(range(1, 12))                       # one word and 3 trailing bytes
    out = rmw_reference(orig, 11, 0x0101, 2)
    assert int.from_bytes(out[:8], "little") == int.from_bytes(orig[:8], "little") + 0x0202
    assert list(out[8:]) == [(b + 2) % 256 for b in orig[8:]]


@pytest.mark.measuring
@pytest.mark.parametrize("kernel", ["bw_write_read_sse2", "bw_ntwrite_read_sse2",
                                    "bw_write_read_avx2", "bw_ntwrite_read_avx2",
                                    "bw_write_read_avx512", "bw_ntwrite_read_avx512"])
def test_write_then_read_is_byte_exact_and_sums_what_it_wrote(kernel):
    idx = _index(kernel)
    assert check_write_read_kernel(idx) is None
    assert check_write_read_kernel(idx, max_size=200, size_skew=1) is not None


def test_bandwidth_rows_declare_their_traffic():
    r = ROWS
    assert (r["bw_read_avx2"]["read_per_byte"], r["bw_read_avx2"]["write_per_byte"]) == (1, 0)
    assert (r["bw_rmw_avx2"]["read_per_byte"], r["bw_rmw_avx2"]["write_per_byte"]) == (1, 1)
    assert (r["bw_random_avx2"]["read_per_byte"], r["bw_random_avx2"]["write_per_byte"]) == (1, 0)
    assert (r["bw_ntwrite_read_avx2"]["read_per_byte"],
            r["bw_ntwrite_read_avx2"]["write_per_byte"]) == (1, 1)


# ---- plan ---------------------------------------------------------------------------

MACHINE = {"caches": [{"level": 1, "type": "Data", "size_bytes": 32 << 10},
                      {"level": 1, "type": "Instruction", "size_bytes": 32 << 10},
                      {"level": 2, "type": "Unified", "size_bytes": 1 << 20},
                      {"level": 3, "type": "Unified", "size_bytes": 32 << 20}],
           "flags": {"sse2": True, "avx2": True, "avx512f": False},
           "memory": {"available_bytes": 16 << 30}}


def test_plan_uses_the_widest_vector_and_one_nt_kernel():
    exp = get_experiment("bandwidth")
    params = exp.resolve("quick", {"max_size": "8M"})
    pts = exp.plan(params, MACHINE)
    kernels = {(p.arm, p.params["kernel"]) for p in pts}
    assert ("read", "bw_read_avx2") in kernels and ("write", "fill_avx2") in kernels
    assert ("nt_write", "fill_nt_sse") in kernels
    assert not any(k.endswith("avx512") for _, k in kernels)
    assert all(p.params["size_bytes"] % 128 == 0 for p in pts)
    params = exp.resolve("quick", {"widths": "avx2,rep", "kinds": "write,copy,read"})
    kernels = {p.params["kernel"] for p in exp.plan(params, MACHINE)}
    assert {"fill_rep_stosb", "copy_rep_movsb", "bw_read_avx2"} <= kernels
    assert not any("read_rep" in k for k in kernels)


def test_full_sweeps_the_widest_width_and_puts_the_others_at_the_level_cells():
    """curves=widest (the full preset): the widest vector width, rep and the
    nt kinds on the first page size get the whole octave sweep and THP at one
    declared size per level; every other width that size per level on 4 KiB
    pages only -- every kernel has the level cells."""
    exp = get_experiment("bandwidth")
    params = exp.resolve("full")
    assert params["curves"] == "widest" and params["pages"] == ["4k", "thp"]
    one_thread = [p for p in exp.plan(params, MACHINE) if "part" not in p.params]
    cells = {s for _, s in level_sizes(MACHINE, 1, params["min_size"],
                                      exp.max_bytes(params, MACHINE))}
    sizes = {}
    for p in one_thread:
        sizes.setdefault((p.params["kernel"], p.params["pages"]), set()).add(p.params["size_bytes"])
    assert len(sizes[("bw_read_avx2", "4k")]) > 3 * len(cells)        # a curve
    assert sizes[("bw_read_sse2", "4k")] == cells                      # the level cells
    assert sizes[("bw_read_avx2", "thp")] == cells
    assert ("bw_read_sse2", "thp") not in sizes and ("bw_read_scalar", "thp") not in sizes
    assert sizes[("fill_rep_stosb", "thp")] == cells
    dram = max(cells)
    readbacks = {k for k in sizes if k[0] in ("bw_write_read_avx2", "bw_ntwrite_read_avx2")}
    assert len(readbacks) == 4                   # both readbacks, both page sizes
    assert all(cells <= got for k, got in sizes.items() if k not in readbacks)
    # the readbacks answer in the last cache level: their curves stop short
    # of the DRAM cell (whole 2x-LLC passes written and read back)
    assert all(max(sizes[k]) < dram and cells - {dram} <= sizes[k] for k in readbacks)
    assert len(sizes[("fill_rep_stosb", "4k")]) > 3 * len(cells)
    every = exp.plan(exp.resolve("full", {"curves": "all"}), MACHINE)
    assert len([p for p in every if "part" not in p.params]) > 2 * len(one_thread)


def test_quick_measures_one_declared_working_set_per_level():
    exp = get_experiment("bandwidth")
    params = exp.resolve("quick")
    assert params["sweep"] == "levels"
    one_thread = [p for p in exp.plan(params, MACHINE) if "part" not in p.params]
    sizes = sorted({p.params["size_bytes"] for p in one_thread})
    windows = level_windows([("l1d", 32 << 10), ("l2", 1 << 20), ("l3", 32 << 20)])
    inside = [[lid for lid, (lo, hi) in windows.items() if lo < s <= hi] for s in sizes]
    assert inside == [["l1d"], ["l2"], ["l3"], ["dram"]]
    assert sizes[-1] == 64 << 20                  # DRAM at 2x the LLC
    # every kind at every size (4 cells per kind), but the readbacks, whose
    # answer is the last cache level's, only in the caches; the same whatever
    # the seed
    cells = {}
    for p in one_thread:
        cells.setdefault(p.arm, set()).add(p.params["size_bytes"])
    assert all(len(v) == 4 for k, v in cells.items() if "readback" not in k)
    assert cells["write_readback"] == cells["nt_write_readback"] == set(sizes[:3])
    again = exp.plan(exp.resolve("quick", {"seed": 5}), MACHINE)
    assert sorted({p.params["size_bytes"] for p in again if "part" not in p.params}) == sizes
    # the octave sweep is still there for the curves and their knees
    full = exp.plan(exp.resolve("quick", {"sweep": "octaves"}), MACHINE)
    assert len({p.params["size_bytes"] for p in full}) > 10


def test_sizes_straddle_every_cache():
    sizes = sizes_for(4096, 128 << 20, 1, [("l1d", 32 << 10), ("l2", 1 << 20), ("l3", 32 << 20)])
    for cap in (32 << 10, 1 << 20, 32 << 20):
        assert any(s < cap for s in sizes) and any(s > cap for s in sizes)
    assert sizes == sorted(set(sizes))
    assert min(sizes) >= 4096 and max(sizes) <= 128 << 20
    # min_size = max_size measures exactly that size (issue 16)
    assert sizes_for(1 << 30, 1 << 30, 4, [("l3", 32 << 20)]) == [1 << 30]


def test_a_cache_past_sparse_from_is_straddled_by_the_doublings_alone():
    caches = [("l1d", 48 << 10), ("l2", 2 << 20), ("l3", 480 << 20)]
    sizes = sizes_for(4096, 960 << 20, 2, caches, sparse_from=64 << 20)
    past = [s >> 20 for s in sizes if s > 64 << 20]
    assert past == [128, 256, 512, 960]          # no 360 / 720 around the LLC
    assert any(s < 480 << 20 for s in sizes) and any(s > 480 << 20 for s in sizes)
    # below sparse_from both sides of a cache are still measured
    assert (48 << 10) * 3 // 4 // 128 * 128 in sizes and (2 << 20) * 3 // 2 in sizes
    # without a sparse part every cache keeps its sides
    dense = sizes_for(4096, 960 << 20, 2, caches)
    assert (480 << 20) * 3 // 4 in dense and (480 << 20) * 3 // 2 in dense


# ---- analysis on synthetic points -------------------------------------------------

PLATEAU = {"l1d": 160.0, "l2": 80.0, "l3": 40.0, "dram": 16.0}


def _level(size):
    for lid, cap in (("l1d", 32 << 10), ("l2", 1 << 20), ("l3", 32 << 20)):
        if size <= cap:
            return lid
    return "dram"


def _samples(kind, kernel, size, gbps, n=7, rejected=False):
    out = []
    for i in range(n):
        v = gbps * (1 + 0.004 * (i - n // 2))
        ns = 1e6
        out.append({"arm": kind, "point": {"size_bytes": size, "pages": "4k", "kernel": kernel},
                    "metric": "gb_per_s", "unit": "GB/s", "value": v, "length": 10, "ns": ns,
                    "ticks": 2.6e6, "cycles_est": 3e6, "counters": {}, "rejected": rejected,
                    "reason": "context_switch" if rejected else None})
    return out


SIZES = sizes_for(4096, 128 << 20, 2, [("l1d", 32 << 10), ("l2", 1 << 20), ("l3", 32 << 20)])


def _curve(kind, kernel, scale=1.0, sizes=SIZES, by_size=None):
    s = []
    for size in sizes:
        v = by_size(size) if by_size else PLATEAU[_level(size)] * scale
        s += _samples(kind, kernel, size, v)
    return s


def _answers(samples):
    run = {"id": "r", "experiment": "bandwidth", "status": "complete", "params": {},
           "machine": MACHINE}
    return {a["question"]: a for a in document(run, samples)["answers"]}


def test_plateaus_per_level_and_kernel_named():
    a = _answers(_curve("read", "bw_read_avx2") + _curve("write", "fill_avx2", 0.5))
    for lid, gbps in PLATEAU.items():
        r = a[f"bandwidth.read_{lid}"]
        assert r["verdict"] == "measured" and r["value"] == pytest.approx(gbps, rel=0.02)
        assert r["ci_low"] <= r["value"] <= r["ci_high"]
        assert "bw_read_avx2" in r["because"]
        d = r["details"][0]
        # bytes per estimated cycle: GB/s * ns / cycles
        assert d["bytes_per_cycle"] == pytest.approx(gbps * 1e6 / 3e6, rel=0.03)
        w = a[f"bandwidth.write_{lid}"]
        assert w["value"] == pytest.approx(gbps / 2, rel=0.02)
    for kind in ("copy", "rmw", "nt_write"):
        for lid in LEVELS:
            assert a[f"bandwidth.{kind}_{lid}"]["verdict"] == NOT_MEASURED
    knees = a["bandwidth.knees"]
    assert knees["value"] == 3
    matched = sorted(d["cache"] for d in knees["details"] if d.get("verdict") == DETECTED)
    assert matched == ["L1d", "L2", "L3"]


def test_best_kernel_per_level_wins_and_is_named():
    s = _curve("write", "fill_avx2") + _curve("write", "fill_rep_stosb", 1.3)
    a = _answers(s)
    assert a["bandwidth.write_l2"]["value"] == pytest.approx(80 * 1.3, rel=0.02)
    assert "fill_rep_stosb" in a["bandwidth.write_l2"]["because"]
    assert {d["kernel"] for d in a["bandwidth.write_l2"]["details"]} == {"fill_avx2",
                                                                         "fill_rep_stosb"}


def test_dram_not_measured_when_the_sweep_stops_short_or_every_sample_was_rejected():
    short = [s for s in SIZES if s <= 16 << 20]
    a = _answers(_curve("read", "bw_read_avx2", sizes=short))
    assert a["bandwidth.read_dram"]["verdict"] == NOT_MEASURED
    assert "max_size" in a["bandwidth.read_dram"]["because"]
    assert a["bandwidth.read_l2"]["verdict"] == "measured"
    rejected = _curve("read", "bw_read_avx2", sizes=short) + \
        _samples("read", "bw_read_avx2", 128 << 20, 16.0, rejected=True)
    a = _answers(rejected)
    assert "rejected" in a["bandwidth.read_dram"]["because"]


def test_nt_crossover_is_the_size_from_which_nt_always_wins():
    def normal(size):
        return PLATEAU[_level(size)]

    def nt(size):
        return 30.0 if size >= 48 << 20 else min(25.0, PLATEAU[_level(size)] * 0.8)
    a = _answers(_curve("write", "fill_avx2", by_size=normal)
                 + _curve("nt_write", "fill_nt_sse", by_size=nt))
    c = a["bandwidth.nt_write_crossover"]
    assert c["verdict"] == DETECTED and c["value"] == min(s for s in SIZES if s >= 48 << 20)
    # never wins: not detected, no value
    a = _answers(_curve("write", "fill_avx2") + _curve("nt_write", "fill_nt_sse", 0.5))
    assert a["bandwidth.nt_write_crossover"]["verdict"] == NOT_DETECTED
    assert a["bandwidth.nt_write_crossover"]["value"] is None


def test_random_vs_sequential_per_level_and_readback():
    s = _curve("read", "bw_read_avx2") + _curve("random", "bw_random_avx2",
                                                by_size=lambda z: PLATEAU[_level(z)] / 4
                                                if _level(z) == "dram" else PLATEAU[_level(z)])
    s += _curve("write_readback", "bw_write_read_avx2") + \
        _curve("nt_write_readback", "bw_ntwrite_read_avx2", by_size=lambda z: 16.0)
    a = _answers(s)
    r = a["bandwidth.random_vs_sequential"]
    assert r["verdict"] == DETECTED and r["value"] == pytest.approx(4.0, rel=0.02)
    per = {d["level"]: d for d in r["details"]}
    assert per["l2"]["value"] == pytest.approx(1.0, rel=0.02)
    rb = a["bandwidth.nt_readback"]
    assert rb["value"] == pytest.approx(16.0 / 40.0, rel=0.02)    # L3, the last cache level
    assert {d["level"] for d in rb["details"]} == {"l1d", "l2", "l3", "dram"}


def _team_samples(arm, params, values, counters=None, metric="gb_per_s", unit="GB/s"):
    return [{"arm": arm, "point": dict(params), "metric": metric, "unit": unit, "value": v,
             "length": 10, "ns": 1e6, "ticks": 2.6e6, "cycles_est": 3e6,
             "counters": dict(counters or {}), "rejected": False, "reason": None}
            for v in values]


def _scaling(kind, level, size, one, two, jitter=0.004):
    out = []
    for n, g in ((1, one), (2, two)):
        pr = {"part": "scaling", "level": level, "size_bytes": size, "threads": n,
              "total_bytes": n * size, "cpus": "1,0"[:2 * n - 1], "pages": "4k",
              "kernel": KERNELS[kind]["avx2" if kind != "nt_write" else "sse2"]}
        out += _team_samples(f"threads_{kind}", pr, [g * (1 + jitter * (i - 3)) for i in range(7)])
    return out


def _loaded(level, size, idle, loaded, loader_gbps=30.0):
    pr = {"part": "loaded", "level": level, "size_bytes": size, "threads": 2, "cpus": "1,0",
          "pages": "4k", "kernel": "chase_ptr", "loader": "bw_read_avx2",
          "loader_bytes": 64 << 20}
    vals = lambda x: [x * (1 + 0.004 * (i - 3)) for i in range(7)]   # noqa: E731
    return (_team_samples("idle_latency", pr, vals(idle), metric="ns_per_load", unit="ns")
            + _team_samples("loaded_latency", pr, vals(loaded), {"team_loader_gb_per_s":
                                                                 loader_gbps, "team_overlap": 1.0},
                            metric="ns_per_load", unit="ns"))


def _team_answers(samples, cpus=(1, 0)):
    run = {"id": "r", "experiment": "bandwidth", "status": "complete",
           "params": {"cpus": list(cpus), "threads": 0}, "machine": MACHINE}
    return {a["question"]: a for a in document(run, samples)["answers"]}


def test_thread_scaling_is_the_speed_up_per_level_and_kind_with_dram_read_first():
    s = (_scaling("read", "l1d", 12 << 10, 160, 320) + _scaling("read", "l2", 384 << 10, 80, 156)
         + _scaling("read", "dram", 64 << 20, 20, 30) + _scaling("copy", "dram", 64 << 20, 16, 16))
    s += _curve("read", "bw_read_avx2")
    a = _team_answers(s)["bandwidth.thread_scaling"]
    assert a["verdict"] == "measured"
    assert a["value"] == pytest.approx(1.5, rel=0.02)              # DRAM read, 20 -> 30 GB/s
    assert a["ci_low"] <= a["value"] <= a["ci_high"]
    assert "DRAM" in a["because"] and "own buffer" in a["because"] and "L1d 2.00x" in a["because"]
    per = {(d["level"], d["kind"]): d for d in a["details"]}
    assert set(per) == {("l1d", "read"), ("l2", "read"), ("dram", "read"), ("dram", "copy")}
    assert per[("l2", "read")]["value"] == pytest.approx(1.95, rel=0.02)
    assert per[("dram", "copy")]["value"] == pytest.approx(1.0, rel=0.02)
    d = per[("dram", "read")]
    assert d["aggregate_gb_per_s"] == pytest.approx(30, rel=0.02)
    assert d["single_gb_per_s"] == pytest.approx(20, rel=0.02)
    assert d["per_thread_gb_per_s"] == pytest.approx(15, rel=0.02) and d["threads"] == 2
    assert all(x["unit"] == "ratio" and x["evidence"] for x in a["details"])
    # the single-thread answers are not disturbed by the team points
    assert _team_answers(s)["bandwidth.read_dram"]["value"] == pytest.approx(16.0, rel=0.02)


def test_thread_scaling_answers_from_its_declared_cell_only():
    """Issue 22: the same evidence every run -- a run whose DRAM read cell is
    missing says so, instead of answering from L3 (1.98 -> 1.30 'regressed')."""
    s = (_scaling("read", "l1d", 12 << 10, 160, 320) + _scaling("read", "l2", 384 << 10, 80, 156)
         + _scaling("copy", "dram", 64 << 20, 16, 16) + _curve("read", "bw_read_avx2"))
    a = _team_answers(s)["bandwidth.thread_scaling"]
    assert a["verdict"] == NOT_MEASURED and a["value"] is None
    assert "read in DRAM with 2 threads" in a["because"]
    assert {(d["level"], d["kind"]) for d in a["details"]} == {("l1d", "read"), ("l2", "read"),
                                                               ("dram", "copy")}


def test_loaded_latency_is_loaded_over_idle_per_size():
    s = _loaded("l2", 384 << 10, 4.0, 4.4) + _loaded("dram", 64 << 20, 100.0, 180.0)
    a = _team_answers(s)["bandwidth.loaded_latency"]
    assert a["verdict"] == "measured" and a["value"] == pytest.approx(1.8, rel=0.02)
    assert a["ci_low"] <= a["value"] <= a["ci_high"]
    assert "DRAM" in a["because"] and "100 -> 180 ns" in a["because"]
    per = {d["level"]: d for d in a["details"]}
    assert per["l2"]["value"] == pytest.approx(1.1, rel=0.02)
    assert per["dram"]["loader_gb_per_s"] == pytest.approx(30.0)
    assert per["dram"]["idle_ns"] == pytest.approx(100, rel=0.02) and per["dram"]["loaders"] == 1


def test_threaded_questions_not_measured_with_one_cpu_or_nothing_measured():
    a = _team_answers(_curve("read", "bw_read_avx2"), cpus=(0,))
    for q in ("bandwidth.thread_scaling", "bandwidth.loaded_latency"):
        assert a[q]["verdict"] == NOT_MEASURED and "only one CPU" in a[q]["because"]
    a = _team_answers(_curve("read", "bw_read_avx2"))
    assert a["bandwidth.thread_scaling"]["verdict"] == NOT_MEASURED
    assert "scaling=none" in a["bandwidth.thread_scaling"]["because"]
    assert "latency_levels=none" in a["bandwidth.loaded_latency"]["because"]
    exp = get_experiment("bandwidth")
    assert list(a) == [q.id for q in exp.questions]
    assert all(exp.declared(f"{k}_{lv}").better == "higher" for k in LEVEL_KINDS for lv in LEVELS)


@pytest.mark.measuring
def test_one_allowed_cpu_plans_no_team_and_answers_not_measured(tmp_path):
    """In a child whose affinity is one CPU: the plan has no threaded point
    and both threaded questions are not_measured, with the reason."""
    import subprocess
    import sys
    code = f"""
import json, os
os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})
from memfx.experiments import get_experiment
from memfx.analysis.results import document
exp = get_experiment("bandwidth")
params = exp.resolve("quick", {{"max_size": "64K"}})
machine = {MACHINE!r}
pts = exp.plan(params, machine)
parts = sorted({{p.params.get("part", "") for p in pts}})
print(json.dumps({{"parts": parts, "params": params}}))
"""
    import memfx
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(memfx.__file__)), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["parts"] == [""] and len(out["params"]["cpus"]) == 1
    run = {"id": "r", "experiment": "bandwidth", "status": "complete", "params": out["params"],
           "machine": MACHINE}
    a = {x["question"]: x for x in document(run, _curve("read", "bw_read_avx2"))["answers"]}
    for q in ("bandwidth.thread_scaling", "bandwidth.loaded_latency"):
        assert a[q]["verdict"] == NOT_MEASURED and "only one CPU" in a[q]["because"]


def test_thread_counts_double_up_to_the_cpus():
    from memfx.experiments.bandwidth import thread_counts
    assert thread_counts(1) == [1] and thread_counts(2) == [1, 2]
    assert thread_counts(6) == [1, 2, 4, 6] and thread_counts(8) == [1, 2, 4, 8]


def test_level_sizes_fit_each_level_and_a_shared_level_holds_the_whole_team():
    machine = dict(MACHINE, caches=[dict(c, shared_cpu_list="0-1" if c["level"] == 3 else "0")
                                    for c in MACHINE["caches"]])
    one = dict(level_sizes(machine, 1, 0, 1 << 40))
    two = dict(level_sizes(machine, 2, 0, 1 << 40))
    assert set(two) == {"l1d", "l2", "l3", "dram"}
    assert two["l1d"] <= 0.75 * (32 << 10) and two["l2"] > 1.5 * (32 << 10)
    assert two["l2"] == one["l2"]                         # private: per thread as alone
    assert 2 * two["l3"] <= 0.75 * (32 << 20) and two["l3"] > 1.5 * (1 << 20)
    assert two["l3"] < one["l3"]
    assert two["dram"] == 64 << 20
    assert all(s % 4096 == 0 for s in two.values())
    # bounded by min_size / max_size
    assert set(dict(level_sizes(machine, 2, 0, 1 << 20))) == {"l1d", "l2"}


@pytest.fixture
def unpinned():
    """Other tests' Labs pin this process to one CPU; give it its CPUs back."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(ALLOWED))
    yield
    os.sched_setaffinity(0, before)


def test_plan_has_scaling_and_loaded_points_on_two_cpus(unpinned):
    if len(ALLOWED) < 2:
        pytest.skip("needs two CPUs this process may run on")
    exp = get_experiment("bandwidth")
    params = exp.resolve("quick", {"kinds": "read", "latency_levels": "l2,dram",
                                   "scaling": "read,write,copy,nt_write"})
    pts = exp.plan(params, MACHINE)
    team = [p for p in pts if p.params.get("part")]
    scaling = [p for p in team if p.params["part"] == "scaling"]
    assert {p.arm for p in scaling} == {"threads_read", "threads_write", "threads_copy",
                                        "threads_nt_write"}
    assert min(p.params["threads"] for p in scaling) == 1
    assert max(p.params["threads"] for p in scaling) == len(params["cpus"])
    for p in scaling:
        cpus = [int(c) for c in p.params["cpus"].split(",")]
        assert len(cpus) == p.params["threads"] and cpus[0] == params["cpu"]
    # DRAM: one 2x-LLC set for the whole team, split among its threads (as
    # STREAM); a cache level: the same set per thread at every count
    llc = MACHINE["caches"][-1]["size_bytes"]
    for p in scaling:
        pr = p.params
        assert pr["total_bytes"] == pr["size_bytes"] * pr["threads"]
        if pr["level"] == "dram":
            assert 2 * llc - 4096 * pr["threads"] < pr["total_bytes"] <= 2 * llc, pr
    for level in {p.params["level"] for p in scaling} - {"dram"}:
        assert len({p.params["size_bytes"] for p in scaling if p.params["level"] == level}) == 1
    loaded = [p for p in team if p.params["part"] == "loaded"]
    assert {p.arm for p in loaded} == {"idle_latency", "loaded_latency"}
    # planned first: the loaders' 2x-LLC buffers are faulted before the
    # scaling part's smaller sets reuse them
    assert max(i for i, p in enumerate(team) if p.params["part"] == "loaded") < \
        min(i for i, p in enumerate(team) if p.params["part"] == "scaling")
    assert {p.params["level"] for p in loaded} == {"l2", "dram"}
    # idle and loaded of one size share their params: one cell, interleaved
    for size in {p.params["size_bytes"] for p in loaded}:
        same = [p.params for p in loaded if p.params["size_bytes"] == size]
        assert len(same) == 2 and same[0] == same[1]
    none = exp.resolve("quick", {"kinds": "read", "scaling": "none", "latency_levels": "none"})
    assert not [p for p in exp.plan(none, MACHINE) if p.params.get("part")]


def test_declared_plots_draw_one_panel_per_kind_with_cache_bands():
    from memfx.report.plots import figure_for
    from plot_checks import figure_summary
    s = _curve("read", "bw_read_avx2") + _curve("write", "fill_avx2", 0.5) + \
        _curve("random", "bw_random_avx2", 0.3) + _curve("nt_write", "fill_nt_sse", 0.2)
    run = {"id": "r", "experiment": "bandwidth", "status": "complete", "params": {},
           "machine": MACHINE}
    fig = figure_for(document(run, s, include_values=True))
    panels = {p["title"]: p for p in figure_summary(fig)}
    # one panel per kind, in the declared order, each with its cache bands
    kinds = [t.split(":")[0] for t in panels if t.endswith("GB/s vs working set")]
    assert kinds == ["read", "write", "nt_write"]             # random has its own plot
    for kind in kinds:
        panel = panels[f"{kind}: GB/s vs working set"]
        assert len(panel["curves"]) == 1
        assert len(panel["bands"]) >= 3 and panel["xscale"] == "log"
    rnd = next(p for t, p in panels.items() if "random" in t)
    assert len(rnd["curves"]) == 2


def test_scaling_plot_draws_one_line_per_kind_and_level_over_threads():
    from memfx.report.plots import figure_for
    from plot_checks import figure_summary
    s = (_scaling("read", "l2", 384 << 10, 80, 156) + _scaling("read", "dram", 64 << 20, 20, 30)
         + _scaling("copy", "dram", 64 << 20, 16, 16) + _loaded("dram", 64 << 20, 100.0, 180.0)
         + _curve("read", "bw_read_avx2"))
    run = {"id": "r", "experiment": "bandwidth", "status": "complete",
           "params": {"cpus": [1, 0]}, "machine": MACHINE}
    fig = figure_for(document(run, s, include_values=True))
    panels = {p["title"]: p for p in figure_summary(fig)}
    # one panel per kind, one line per level; x = 1 and 2 threads, ticked as counts
    axes = {a.get_title().split(":")[0]: a for a in fig.axes if "vs threads" in a.get_title()}
    assert sorted(axes) == ["threads_copy", "threads_read"]
    labels = {k: sorted(ln.get_label() for ln in a.get_lines() if not ln.get_label().startswith("_"))
              for k, a in axes.items()}
    assert labels == {"threads_copy": ["dram"], "threads_read": ["dram", "l2"]}
    for a in axes.values():
        assert all(list(ln.get_xdata()) == [1, 2] for ln in a.get_lines()
                   if not ln.get_label().startswith("_"))
        assert list(a.get_xticks()) == [1, 2]
    kinds = [t for t in panels if t.endswith("GB/s vs working set")]
    assert kinds == ["read: GB/s vs working set"]             # team points stay out of it
    assert len(panels[kinds[0]]["curves"]) == 1
    assert any("idle vs" in t for t in panels)


# ---- CLI ------------------------------------------------------------------------------

@pytest.mark.measuring
def test_bad_input_is_one_line_exit_2_and_leaves_no_database(tmp_path):
    db = str(tmp_path / "r.db")
    for args in (["--set", "kinds=bogus"], ["--set", "min_size=1M", "--set", "max_size=64K"],
                 ["--set", "kinds=read", "--set", "widths=rep"], ["--set", "per_octave=0"]):
        p = run_cli("run", "bandwidth", "--quick", *args, db=db)
        assert p.returncode == 2, (args, p.stderr)
        assert p.stderr.count("\n") == 1, p.stderr
    assert not os.path.exists(db)


@pytest.mark.measuring
def test_small_real_run_answers_every_question(tmp_path):
    db = str(tmp_path / "r.db")
    p = run_cli("run", "bandwidth", "--quick", "--json", "--set", "kinds=read,rmw",
                "--set", "max_size=64K", "--set", "samples=3", "--set", "min_sample_ms=0.2",
                db=db)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    a = {x["question"]: x for x in doc["answers"]}
    assert a["bandwidth.read_l1d"]["verdict"] == "measured"
    assert a["bandwidth.read_l1d"]["value"] > 0
    assert a["bandwidth.read_dram"]["verdict"] == NOT_MEASURED
    assert a["bandwidth.write_l1d"]["verdict"] == NOT_MEASURED


def test_loaded_latency_bars_name_their_sizes():
    from memfx.report.plots import figure_for
    s = _loaded("dram", 64 << 20, 100.0, 180.0) + _curve("read", "bw_read_avx2")
    run = {"id": "r", "experiment": "bandwidth", "status": "complete",
           "params": {"cpus": [1, 0]}, "machine": MACHINE}
    fig = figure_for(document(run, s, include_values=True))
    ax = next(a for a in fig.axes if "idle vs" in a.get_title())
    assert [t.get_text() for t in ax.get_xticklabels()] == ["64 MiB"]     # not 67108864


def test_level_answers_rest_on_the_same_cells_whatever_the_noise():
    """Issue 22: on one machine, two runs' evidence is the same.  The quick
    plan's declared cells, measured twice with different noise (10 % spread,
    a different level each time looking like a plateau or a ramp), give every
    level answer the same evidence keys."""
    exp = get_experiment("bandwidth")
    params = exp.resolve("quick", {"kinds": "read,write,copy,rmw,nt_write,random",
                                   "scaling": "none", "latency_levels": "none"})
    cells = [p for p in exp.plan(params, MACHINE)]
    evidence = []
    for seed in (1, 2):
        rng = np.random.default_rng(seed)
        samples = []
        for p in cells:
            base = PLATEAU[_level(p.params["size_bytes"])] * (0.3 if p.arm == "random" else 1)
            for s in _samples(p.arm, p.params["kernel"], p.params["size_bytes"], base, n=5):
                s["value"] *= float(np.exp(rng.normal(0, 0.1)))
                samples.append(s)
        run = {"id": f"r{seed}", "experiment": "bandwidth", "status": "complete",
               "params": params, "machine": MACHINE}
        answers = document(run, samples)["answers"]
        evidence.append({a["question"]: a.get("evidence") for a in answers})
    assert evidence[0] == evidence[1]
    level_answers = [q for q in evidence[0] if q.split(".")[1].split("_")[-1] in LEVELS]
    assert len(level_answers) == 5 * len(LEVELS)
    assert all(len(evidence[0][q]) == 1 for q in level_answers)     # one declared cell each


@pytest.mark.measuring
def test_a_copys_halves_never_share_a_4k_offset_and_fit_the_pooled_mapping():
    from memfx.experiments.bandwidth import COPY_DST_SKEW, copy_halves, pooled_set
    from memfx.lab.lab import Lab
    lab = Lab(min_sample_ms=0.1, hardware_counters=False)
    size = 1 << 20
    read = pooled_set(lab, "main", size, False)
    src, dst, half = copy_halves(lab, "main", size, False)
    assert half == size // 2 and src.address % 4096 == 0
    assert dst.address % 4096 == COPY_DST_SKEW % 4096 != 0
    assert dst.address >= src.address + half                 # the halves do not overlap
    assert src.buffer is read.buffer                          # no second mapping of the size


@pytest.mark.measuring
def test_a_random_read_no_cache_holds_warms_two_chunks_not_a_pass():
    """Past DRAM_FROM x the LLC the random read's warm-up (the settle's pass)
    is RANDOM_DRAM_WARM_CHUNKS chunks (2^18 lines: translations are all
    that is left to warm); a set a cache could hold, or a machine with no
    LLC reported, keeps the whole pass."""
    from memfx.experiments.bandwidth import CHUNKED_FROM, RANDOM_DRAM_WARM_CHUNKS
    from memfx.experiments.base import Point
    from memfx.lab.lab import Lab
    exp = get_experiment("bandwidth")
    params = exp.resolve("quick", {})
    size = CHUNKED_FROM                      # 8 chunks
    point = Point("random", {"size_bytes": size, "pages": "4k",
                             "kernel": KERNELS["random"]["sse2"]})
    lab = Lab(min_sample_ms=0.1, hardware_counters=False)
    try:
        for llc, warm in ((size // 2, RANDOM_DRAM_WARM_CHUNKS), (size // 2 + 4096, 8), (None, 8)):
            lab.llc_bytes = llc
            trial = exp.prepare(point, params, lab)
            assert trial.chunks == 8 and trial.warmup == warm, llc
        lab.llc_bytes = size // 2
        point = Point("read", {"size_bytes": size, "pages": "4k",
                               "kernel": KERNELS["read"]["sse2"]})
        assert exp.prepare(point, params, lab).warmup == 8       # streams: a whole pass
    finally:
        lab.close()
