"""The misaligned experiment (seed 004): the kernels store exactly their width
at every offset (against a reference), the latency kernels keep to their
one-element chain, the penalties come out of synthetic points, bad input."""
import json
import mmap

import pytest

from conftest import run_cli
from memfx.analysis.results import document
from memfx.experiments import get_experiment
from memfx.experiments.misaligned import (
    LINE,
    PAGE,
    PATTERN,
    WIDTHS,
    base_of,
    expected_store,
    splits,
)
from memfx.lab import _core
from memfx.model.answers import NOT_MEASURED
from memfx.model.findings import DETECTED, NOT_DETECTED

ROWS = {r["name"]: r for r in _core.kernels()}
KERNELS = {r["name"]: i for i, r in enumerate(_core.kernels())}
BEFORE = bytes((i * 37 + 11) & 0xFF for i in range(2 * PAGE))


def _supported(name):
    return _core.isa_supported(ROWS[name]["isa"] or "")


def _run(name, buf, aux, count=3, dst=True):
    args = (buf, 0, None, 0) if dst else (None, 0, buf, 0)
    return _core.run(KERNELS[name], *args, 0, PATTERN, count, aux, [], None)[3]


@pytest.mark.measuring
@pytest.mark.parametrize("width", WIDTHS)
def test_stores_write_exactly_their_width_at_every_offset(width):
    name = f"mis_store_{width}"
    if not _supported(name):
        pytest.skip(f"{name} needs {ROWS[name]['isa']}, which this CPU lacks")
    buf = mmap.mmap(-1, 2 * PAGE)
    for position in ("line", "page"):
        for o in range(LINE):
            aux = base_of(position) + o
            buf[:] = BEFORE
            _run(name, buf, aux)
            assert bytes(buf) == expected_store(BEFORE, aux, width), (position, o)


@pytest.mark.measuring
@pytest.mark.parametrize("width", WIDTHS)
def test_latency_kernels_walk_their_own_one_element_chain(width):
    name = f"mis_lat_{width}"
    if not _supported(name):
        pytest.skip(f"{name} needs {ROWS[name]['isa']}, which this CPU lacks")
    buf = mmap.mmap(-1, 2 * PAGE)
    for aux in (0, 1, 61, PAGE - 3, PAGE - LINE + 63):
        buf[:] = BEFORE
        assert _run(name, buf, aux, count=9) == aux
        want = bytearray(BEFORE)
        want[aux:aux + width] = aux.to_bytes(4, "little") + bytes(width - 4)
        assert bytes(buf) == bytes(want)


@pytest.mark.measuring
@pytest.mark.parametrize("width", WIDTHS)
def test_loads_leave_memory_alone_and_footprints_bound_the_offset(width):
    name = f"mis_load_{width}"
    if not _supported(name):
        pytest.skip(f"{name} needs {ROWS[name]['isa']}, which this CPU lacks")
    buf = mmap.mmap(-1, 2 * PAGE)
    buf[:] = BEFORE
    _run(name, buf, PAGE - 1, dst=False)
    assert bytes(buf) == BEFORE
    with pytest.raises(ValueError):
        _run(name, buf, 2 * PAGE - width + 1, dst=False)
    with pytest.raises(ValueError):
        _run(f"mis_store_{width}", buf, 2 * PAGE - width + 1)


def test_expected_store_repeats_the_pattern():
    out = expected_store(bytes(16), 2, 4)
    assert out[2:6] == PATTERN.to_bytes(8, "little")[:4] and out[:2] == bytes(2)
    assert expected_store(bytes(80), 0, 16)[8:16] == PATTERN.to_bytes(8, "little")
    assert splits(8, 57) and not splits(8, 56)


def _samples(mode, width, position, offset, ns, k=6):
    return [{"arm": mode, "point": {"width": width, "position": position, "offset": offset},
             "metric": f"ns_per_{mode}", "unit": "ns", "value": ns * (1 + 0.001 * i),
             "length": 1000, "ns": ns * 1000 * (1 + 0.001 * i), "cycles_est": None,
             "counters": {}, "rejected": False} for i in range(k)]


def _answers(samples):
    run = {"id": "r", "experiment": "misaligned", "status": "complete", "params": {},
           "machine": {}}
    return {a["question"]: a for a in document(run, samples)["answers"]}


def test_penalties_from_synthetic_points():
    s = []
    for w in (8, 16):
        s += _samples("load", w, "line", 0, 0.1) + _samples("load", w, "line", 1, 0.1)
        s += _samples("load", w, "line", 60, 0.2) + _samples("load", w, "page", 60, 0.3)
        s += _samples("store", w, "line", 0, 0.2) + _samples("store", w, "page", 60, 12.0)
    a = _answers(s)
    ls = a["misaligned.line_split_load"]
    assert ls["verdict"] == DETECTED and ls["value"] == pytest.approx(2.0, rel=0.01)
    assert "an 8-byte load splitting a line" in ls["because"] and "16 B 2.00x" in ls["because"]
    assert {d["width"] for d in ls["details"] if "width" in d and d["unit"] == "ratio"} == {8, 16}
    assert any(d.get("offset") == 60 for d in ls["details"])         # the offset table
    assert a["misaligned.page_split_load"]["value"] == pytest.approx(3.0, rel=0.01)
    assert a["misaligned.page_split_store"]["value"] == pytest.approx(60.0, rel=0.01)
    assert a["misaligned.unaligned_in_line"]["verdict"] == NOT_DETECTED
    assert a["misaligned.line_split_store"]["verdict"] == NOT_MEASURED
    assert a["misaligned.line_split_latency"]["verdict"] == NOT_MEASURED
    assert list(a) == [q.id for q in get_experiment("misaligned").questions]


def test_plan_skips_page_points_that_do_not_split():
    exp = get_experiment("misaligned")
    params = exp.resolve("quick", {"widths": "8", "modes": "load"})
    pts = exp.plan(params, {})
    assert sorted((p.params["position"], p.params["offset"]) for p in pts) == [
        ("line", 0), ("line", 1), ("line", 62), ("page", 62)]


@pytest.mark.measuring
def test_bad_input_is_one_line_and_exit_2(tmp_path):
    db = str(tmp_path / "r.db")
    p = run_cli("run", "misaligned", "--set", "widths=12", db=db)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "widths" in p.stderr
    p = run_cli("run", "misaligned", "--set", "offsets=64", db=db)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "offsets" in p.stderr


@pytest.mark.measuring
def test_small_run_answers_every_question(tmp_path):
    db = str(tmp_path / "r.db")
    p = run_cli("run", "misaligned", "--quick", "--json", "--set", "widths=8",
                "--set", "samples=3", "--set", "min_sample_ms=0.1", db=db)
    assert p.returncode == 0, p.stderr
    a = {x["question"]: x for x in json.loads(p.stdout)["answers"]}
    assert a["misaligned.line_split_load"]["verdict"] != NOT_MEASURED
    assert a["misaligned.page_split_store"]["verdict"] != NOT_MEASURED


def test_declared_plots_draw_one_panel_per_mode(tmp_path):
    import matplotlib

    from memfx.report.plots import figure_for
    s = sum((_samples(m, 8, "line", o, 0.1 + o / 100) for m in ("load", "store", "latency")
             for o in (0, 1, 62)), [])
    run = {"id": "r", "experiment": "misaligned", "status": "complete", "params": {},
           "machine": {}}
    fig = figure_for(document(run, s, include_values=True))
    titles = [ax.get_title() for ax in fig.get_axes()]
    assert any("load throughput" in t for t in titles) and any("latency" in t for t in titles)
    ax = next(ax for ax in fig.get_axes() if "store throughput" in ax.get_title())
    assert any(len(line.get_xdata()) == 3 for line in ax.get_lines())
    matplotlib.pyplot.close(fig)


def test_plan_leaves_out_the_avx_widths_where_the_cpu_lacks_avx():
    exp = get_experiment("misaligned")
    params = exp.resolve("quick")
    widths = {p.params["width"] for p in exp.plan(params, {"flags": {"avx": False}})}
    assert widths == {4, 8, 16}
    assert {p.params["width"] for p in exp.plan(params, {"flags": {"avx": True}})} == set(WIDTHS)


def test_the_reference_pools_every_aligned_offset():
    s = _samples("load", 8, "line", 0, 0.1, k=1) + _samples("load", 8, "line", 8, 0.1) \
        + _samples("load", 8, "line", 16, 0.1) + _samples("load", 8, "line", 60, 0.3)
    a = _answers(s)["misaligned.line_split_load"]
    assert a["value"] == pytest.approx(3.0, rel=0.01) and a["ci_low"] is not None
    d = next(x for x in a["details"] if x.get("width") == 8 and x["unit"] == "ratio")
    assert d["offsets"] == [60]
