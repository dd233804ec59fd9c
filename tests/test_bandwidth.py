"""The bandwidth experiment (seed 004): its kernels compute what they claim
(checksums against numpy, byte-exact writes with guards), its checkers catch
a wrong kernel, the analysis reads synthetic curves right (plateaus per
level, knees, NT crossover, random vs sequential, not_measured where the
sweep did not reach), and bad input is one line with exit status 2."""
import json
import os

import numpy as np
import pytest

from memfx import _core
from memfx.answers import NOT_MEASURED
from memfx.experiments import get_experiment
from memfx.experiments.bandwidth import (KERNELS, LEVEL_KINDS, LEVELS, THREADED_REASON,
                                         check_random_kernel, check_read_kernel,
                                         check_rmw_kernel, check_write_read_kernel,
                                         rmw_reference, sizes_for)
from memfx.findings import DETECTED, NOT_DETECTED
from memfx.results import document
from conftest import run_cli

ROWS = {r["name"]: r for r in _core.kernels()}
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
    assert {r["name"] for r in own} == {n for k in ("read", "rmw", "random", "write_readback",
                                                    "nt_write_readback")
                                        for n in KERNELS[k].values()}
    for r in own:
        assert r["op"] == "pass" and r["ops_per_iter"] == 1


@pytest.mark.parametrize("width", list(WIDTH_ISA))
def test_read_checksum_matches_numpy(width):
    idx = _index(f"bw_read_{width}")
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, 100_003, dtype=np.uint8).tobytes()
    for off, n in ((0, 100_000), (3, 99_997), (13, 4099), (1, 0)):
        got = _core.run(idx, None, 0, bytearray(data), off, n, 0, 3, 0)[3]
        assert got == _numpy_checksum(data[off:off + n]) * 3 % (1 << 64)


@pytest.mark.parametrize("width", list(WIDTH_ISA))
def test_read_kernels_pass_their_checker_and_it_catches_a_wrong_size(width):
    idx = _index(f"bw_read_{width}")
    assert check_read_kernel(idx) is None
    bad = check_read_kernel(idx, max_size=300, size_skew=1)
    assert bad and "checksum" in bad


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


def test_sizes_straddle_every_cache():
    sizes = sizes_for(4096, 128 << 20, 1, [("l1d", 32 << 10), ("l2", 1 << 20), ("l3", 32 << 20)])
    for cap in (32 << 10, 1 << 20, 32 << 20):
        assert any(s < cap for s in sizes) and any(s > cap for s in sizes)
    assert sizes == sorted(set(sizes))
    assert min(sizes) >= 4096 and max(sizes) <= 128 << 20
    # min_size = max_size measures exactly that size (issue 16)
    assert sizes_for(1 << 30, 1 << 30, 4, [("l3", 32 << 20)]) == [1 << 30]


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


def test_threaded_questions_are_declared_and_not_measured():
    a = _answers(_curve("read", "bw_read_avx2"))
    for q in ("bandwidth.thread_scaling", "bandwidth.loaded_latency"):
        assert a[q]["verdict"] == NOT_MEASURED and a[q]["because"] == THREADED_REASON
    exp = get_experiment("bandwidth")
    assert list(a) == [q.id for q in exp.questions]
    assert all(exp.declared(f"{k}_{lv}").better == "higher" for k in LEVEL_KINDS for lv in LEVELS)


def test_declared_plots_draw_one_line_per_kind_with_cache_bands():
    from plot_checks import figure_summary
    from memfx.plots import figure_for
    s = _curve("read", "bw_read_avx2") + _curve("write", "fill_avx2", 0.5) + \
        _curve("random", "bw_random_avx2", 0.3) + _curve("nt_write", "fill_nt_sse", 0.2)
    run = {"id": "r", "experiment": "bandwidth", "status": "complete", "params": {},
           "machine": MACHINE}
    fig = figure_for(document(run, s, include_values=True))
    panels = {p["title"]: p for p in figure_summary(fig)}
    kinds = next(p for t, p in panels.items() if "one line per kind" in t)
    assert len(kinds["curves"]) == 3                          # read, write, nt_write
    assert len(kinds["bands"]) >= 3 and kinds["xscale"] == "log"
    rnd = next(p for t, p in panels.items() if "random" in t)
    assert len(rnd["curves"]) == 2


# ---- CLI ------------------------------------------------------------------------------

def test_bad_input_is_one_line_exit_2_and_leaves_no_database(tmp_path):
    db = str(tmp_path / "r.db")
    for args in (["--set", "kinds=bogus"], ["--set", "min_size=1M", "--set", "max_size=64K"],
                 ["--set", "kinds=read", "--set", "widths=rep"], ["--set", "per_octave=0"]):
        p = run_cli("run", "bandwidth", "--quick", *args, db=db)
        assert p.returncode == 2, (args, p.stderr)
        assert p.stderr.count("\n") == 1, p.stderr
    assert not os.path.exists(db)


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
