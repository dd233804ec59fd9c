"""The matmul experiment (seed 004): every form computes numpy's product
exactly, row block by row block from its cursor; the table's ratios come
out of synthetic points; bad input."""
import json

import numpy as np
import pytest

from memfx import _core
from memfx.answers import NOT_MEASURED
from memfx.experiments import get_experiment
from memfx.experiments.matmul import DREPPER, FORMS, SM, auto_n, matrices
from memfx.findings import DETECTED
from memfx.results import document
from conftest import run_cli

KERNELS = {r["name"]: i for i, r in enumerate(_core.kernels())}


def _run(form, src, dst, n, count):
    return _core.run(KERNELS[f"mm_{form}"], dst, 0, src, 0, n, 0, count, 0, [], None)[3]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("n", [8, 24, 64])
def test_every_form_computes_the_exact_product(form, n):
    m = matrices(n, 3)
    dst = np.full(2 * n * n + 1, 7.0)
    dst[-1] = 0                                      # the cursor
    assert _run(form, m, dst, n, n // SM) == 0       # one whole product: back at row 0
    assert np.array_equal(dst[:n * n].reshape(n, n), m[0] @ m[1])


@pytest.mark.parametrize("form", FORMS)
def test_row_blocks_go_on_from_the_cursor(form):
    n = 32
    m = matrices(n, 5)
    dst = np.zeros(2 * n * n + 1)
    assert _run(form, m, dst, n, 1) == 1
    got = dst[:n * n].reshape(n, n)
    want = m[0] @ m[1]
    assert np.array_equal(got[:SM], want[:SM]) and not got[SM:].any()
    assert _run(form, m, dst, n, 2) == 3
    assert np.array_equal(dst[:n * n].reshape(n, n)[:3 * SM], want[:3 * SM])


def test_a_size_not_a_multiple_of_the_tile_is_left_alone():
    n = 12
    dst = np.full(2 * n * n + 1, 5.0)
    assert _run("blocked", matrices(n, 1), dst, n, 1) == 0 and (dst == 5.0).all()


def test_footprint_refuses_small_buffers():
    n = 16
    with pytest.raises(ValueError):
        _run("naive", matrices(n, 1), np.zeros(2 * n * n), n, 1)     # no room for the cursor


def test_auto_n_fits_one_matrix_in_the_l2():
    n = auto_n({"caches": [{"level": 2, "type": "Unified", "size_bytes": 1 << 20}]})
    assert n % SM == 0 and n * n * 8 <= 1 << 20 < (n + SM) ** 2 * 8


def _samples(form, n, ns, k=6):
    return [{"arm": form, "point": {"n": n}, "metric": "ns_per_row_block", "unit": "ns",
             "value": ns * (1 + 0.001 * i), "length": 10, "ns": ns * 10 * (1 + 0.001 * i),
             "cycles_est": None, "counters": {}, "rejected": False} for i in range(k)]


def test_ratios_against_drepper_from_synthetic_points():
    s = sum((_samples(f, 1000, 1e6 * DREPPER[f]) for f in FORMS), [])
    s += sum((_samples(f, 360, 1e5 * (0.5 if f != "naive" else 1)) for f in FORMS), [])
    run = {"id": "r", "experiment": "matmul", "status": "complete", "params": {}, "machine": {}}
    a = {x["question"]: x for x in document(run, s)["answers"]}
    t = a["matmul.transposed"]
    assert t["verdict"] == DETECTED and t["value"] == pytest.approx(0.234, rel=0.01)
    assert "N=1000" in t["because"] and "23.4%" in t["because"] and "50.0% at N=360" \
        in t["because"]
    assert a["matmul.blocked_simd"]["value"] == pytest.approx(0.0947, rel=0.01)
    assert {d["form"] for d in t["details"]} == set(FORMS)
    b = {x["question"]: x for x in document(run, _samples("naive", 360, 1.0))["answers"]}
    assert all(v["verdict"] == NOT_MEASURED for v in b.values())
    assert list(b) == [q.id for q in get_experiment("matmul").questions]


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    db = str(tmp_path / "r.db")
    for bad in ("n=7", "n=big"):
        p = run_cli("run", "matmul", "--set", bad, db=db)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and "n:" in p.stderr


def test_small_run_answers_every_question(tmp_path):
    db = str(tmp_path / "r.db")
    p = run_cli("run", "matmul", "--quick", "--json", "--set", "n=64", "--set", "samples=3",
                "--set", "min_sample_ms=0.1", db=db)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [x["question"] for x in doc["answers"]] == [q.id for q in
                                                       get_experiment("matmul").questions]
    assert {pt["arm"] for pt in doc["points"]} == set(FORMS)


def test_declared_plot_draws_one_bar_per_form(tmp_path):
    import matplotlib
    from memfx.plots import figure_for
    s = sum((_samples(f, 360, 1e5 * DREPPER[f]) for f in FORMS), [])
    run = {"id": "r", "experiment": "matmul", "status": "complete", "params": {}, "machine": {}}
    fig = figure_for(document(run, s, include_values=True))
    ax = fig.get_axes()[0]
    assert "by form" in ax.get_title() and len(ax.patches) == len(FORMS)
    matplotlib.pyplot.close(fig)
