"""The matmul experiment (seed 004): every form computes numpy's product
exactly, tile by tile from its cursor; the table's ratios come
out of synthetic points; bad input."""
import json

import numpy as np
import pytest

from conftest import run_cli
from memfx.analysis.results import document
from memfx.experiments import get_experiment
from memfx.experiments.matmul import (
    CURSOR,
    DREPPER,
    DREPPER_INIT_S,
    FORMS,
    INIT_ARMS,
    INIT_BAND,
    INIT_VALUE,
    SM,
    TILE,
    auto_n,
    check_init,
    init_auto_n,
    init_bands,
    init_reference,
    matrices,
    tiles,
)
from memfx.lab import _core
from memfx.lab.lab import Lab
from memfx.model.answers import NOT_MEASURED
from memfx.model.findings import DETECTED

KERNELS = {r["name"]: i for i, r in enumerate(_core.kernels())}


def _run(form, src, dst, n, count):
    return _core.run(KERNELS[f"mm_{form}"], dst, 0, src, 0, n, 0, count, 0, [], None)[3]


@pytest.mark.measuring
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("n", [8, 24, 64])
def test_every_form_computes_the_exact_product(form, n):
    m = matrices(n, 3)
    dst = np.full(2 * n * n + 1, 7.0)
    dst[-1] = 0                                      # the cursor
    assert _run(form, m, dst, n, tiles(n)) == 0      # one whole product: back at tile 0
    assert np.array_equal(dst[:n * n].reshape(n, n), m[0] @ m[1])


def _tile_mask(form, n, first, count):
    """Which results of res tiles first .. first + count - 1 are: 64 in row
    order for the row-order forms, 8 x 8 blocks by bands for the blocked."""
    mask = np.zeros((n, n), bool)
    for t in range(first, first + count):
        if form in ("naive", "transposed"):
            mask.flat[t * TILE:(t + 1) * TILE] = True
        else:
            i0, j0 = t // (n // SM) * SM, t % (n // SM) * SM
            mask[i0:i0 + SM, j0:j0 + SM] = True
    return mask


@pytest.mark.measuring
@pytest.mark.parametrize("form", FORMS)
def test_tiles_go_on_from_the_cursor(form):
    n = 24                                           # 9 tiles; a row-order tile crosses rows
    m = matrices(n, 5)
    want = m[0] @ m[1]
    dst = np.zeros(2 * n * n + 1)
    assert _run(form, m, dst, n, 1) == 1
    got = dst[:n * n].reshape(n, n)
    done = _tile_mask(form, n, 0, 1)
    assert np.array_equal(got[done], want[done]) and not got[~done].any()
    assert _run(form, m, dst, n, 2) == 3
    done = _tile_mask(form, n, 0, 3)
    assert np.array_equal(got[done], want[done]) and not got[~done].any()
    # wrapping past the end starts the product over (the transposed form
    # transposes again) and overwrites, never adds to, earlier results
    dst[:n * n] = 99.0
    assert _run(form, m, dst, n, tiles(n) + 2) == 5
    assert np.array_equal(got, want)


@pytest.mark.measuring
def test_a_size_not_a_multiple_of_the_tile_is_left_alone():
    n = 12
    dst = np.full(2 * n * n + 1, 5.0)
    assert _run("blocked", matrices(n, 1), dst, n, 1) == 0 and (dst == 5.0).all()


@pytest.mark.measuring
def test_footprint_refuses_small_buffers():
    n = 16
    with pytest.raises(ValueError):
        _run("naive", matrices(n, 1), np.zeros(2 * n * n), n, 1)     # no room for the cursor


def test_auto_n_fits_one_matrix_in_the_l2():
    n = auto_n({"caches": [{"level": 2, "type": "Unified", "size_bytes": 1 << 20}]})
    assert n % SM == 0 and n * n * 8 <= 1 << 20 < (n + SM) ** 2 * 8


def _samples(form, n, ns, k=6):
    return [{"arm": form, "point": {"n": n}, "metric": "ns_per_tile", "unit": "ns",
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


@pytest.mark.measuring
def test_bad_input_is_one_line_and_exit_2(tmp_path):
    db = str(tmp_path / "r.db")
    for bad in ("n=7", "n=big"):
        p = run_cli("run", "matmul", "--set", bad, db=db)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and "n:" in p.stderr


@pytest.mark.measuring
def test_small_run_answers_every_question(tmp_path):
    db = str(tmp_path / "r.db")
    p = run_cli("run", "matmul", "--quick", "--json", "--set", "n=64", "--set", "samples=3",
                "--set", "min_sample_ms=0.1", "--set", "init_n=128", db=db)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [x["question"] for x in doc["answers"]] == [q.id for q in
                                                       get_experiment("matmul").questions]
    assert {pt["arm"] for pt in doc["points"]} == set(FORMS) | {"init_row", "init_column",
                                                                "init_row_nt", "init_column_nt"}


def test_declared_plot_draws_one_bar_per_form(tmp_path):
    import matplotlib

    from memfx.report.plots import figure_for
    s = sum((_samples(f, 360, 1e5 * DREPPER[f]) for f in FORMS), [])
    run = {"id": "r", "experiment": "matmul", "status": "complete", "params": {}, "machine": {}}
    fig = figure_for(document(run, s, include_values=True))
    ax = fig.get_axes()[0]
    assert "by form" in ax.get_title() and len(ax.patches) == len(FORMS)
    matplotlib.pyplot.close(fig)


# ---- Drepper's matrix initialisation (table 6.1) ----------------------------


def _init(kernel, n, passes_of_bands, offset=0, value=INIT_VALUE, cursor=0, size=None):
    buf = np.full(offset + 4 * n * n + CURSOR + 64, 0x5A, dtype=np.uint8)
    buf[offset + 4 * n * n:offset + 4 * n * n + CURSOR] = np.frombuffer(
        int(cursor).to_bytes(8, "little"), np.uint8)
    got = _core.run(KERNELS[kernel], buf, offset, None, 0, 64 * n if size is None else size,
                    value, passes_of_bands, n, [], None)[3]
    return buf, got


@pytest.mark.measuring
@pytest.mark.parametrize("kernel", INIT_ARMS)
@pytest.mark.parametrize("n", [1, 5, 16, 17, 33, 64])
@pytest.mark.parametrize("offset", [0, 1, 3, 4, 63])
def test_init_kernels_write_every_element_once_and_nothing_else(kernel, n, offset):
    buf, cursor = _init(kernel, n, init_bands(n), offset=offset, value=7)
    m = 4 * n * n
    assert np.array_equal(buf[offset:offset + m], init_reference(n, 7))
    assert cursor == 0                               # one whole pass: back at band 0
    assert (buf[:offset] == 0x5A).all() and (buf[offset + m + CURSOR:] == 0x5A).all()


@pytest.mark.measuring
@pytest.mark.parametrize("kernel", INIT_ARMS)
def test_init_bands_go_on_from_the_cursor(kernel):
    n = 48                                            # three bands
    buf, cursor = _init(kernel, n, 1, cursor=1)
    assert cursor == 2
    m = buf[:4 * n * n].view("<u4").reshape(n, n)
    want = init_reference(n).view("<u4").reshape(n, n)
    band = slice(INIT_BAND, 2 * INIT_BAND)
    written = np.zeros((n, n), bool)
    if "column" in kernel:
        written[:, band] = True
    else:
        written[band, :] = True
    assert np.array_equal(m[written], want[written])
    assert (buf[:4 * n * n].reshape(n, 4 * n)[~np.repeat(written, 4, axis=1)] == 0x5A).all()


@pytest.mark.measuring
@pytest.mark.parametrize("kernel", INIT_ARMS)
def test_init_refuses_a_size_that_is_not_one_band(kernel):
    for size in (0, 64 * 8 + 4, 64 * 7):
        buf, got = _init(kernel, 8, 1, size=size, cursor=0x5A5A5A5A5A5A5A5A)
        assert got == 0 and (buf == 0x5A).all()
    with pytest.raises(ValueError):                   # no room for the cursor
        _core.run(KERNELS[kernel], np.zeros(4 * 8 * 8, np.uint8), 0, None, 0, 64 * 8, 0, 1, 8,
                  [], None)


@pytest.mark.measuring
def test_check_init_passes_every_kernel_and_catches_a_wrong_reference(monkeypatch):
    lab = Lab(hardware_counters=False)
    try:
        for kernel in INIT_ARMS:
            assert check_init(lab, kernel, offsets=tuple(range(8)) + (61,)) is None
        import memfx.experiments.matmul as mm
        real = mm.init_reference
        monkeypatch.setattr(mm, "init_reference", lambda n, value=INIT_VALUE: real(n, value + 1))
        assert "byte 0" in check_init(lab, "init_row", max_n=4)
    finally:
        lab.release()
        lab.perf.close()


def test_init_auto_n_puts_the_matrix_beyond_the_largest_cache():
    n = init_auto_n({"caches": [{"level": 2, "type": "Unified", "size_bytes": 1 << 20},
                                {"level": 3, "type": "Unified", "size_bytes": 32 << 20}]})
    assert n % 64 == 0 and 4 * n * n >= 64 << 20 and 4 * (n - 64) ** 2 < 64 << 20


def test_init_plan_and_bad_input():
    exp = get_experiment("matmul")
    pts = exp.plan(exp.resolve("quick"), {})
    assert {p.arm for p in pts if "init_n" in p.params} == set(INIT_ARMS)
    assert not any("init_n" in p.params for p in pts if p.arm in FORMS)
    none = exp.plan({**exp.resolve("quick"), "init_n": []}, {})
    assert {p.arm for p in none} == set(FORMS)
    # what --help says turns them off, from the command line: `--set init_n=none`
    spelled = next(p for p in exp.params if p.name == "init_n").parse("none")
    assert {p.arm for p in exp.plan({**exp.resolve("quick"), "init_n": spelled}, {})} == set(FORMS)


@pytest.mark.measuring
def test_init_bad_input_is_one_line_and_exit_2(tmp_path):
    db = str(tmp_path / "r.db")
    for bad in ("init_n=100", "init_n=huge", "init_n=32768"):
        p = run_cli("run", "matmul", "--set", bad, db=db)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and "init_n:" in p.stderr


def _init_samples(arm, n, ns, k=6):
    return [{"arm": arm, "point": {"init_n": n}, "metric": "ns_per_band", "unit": "ns",
             "value": ns * (1 + 0.001 * i), "length": 10, "ns": ns * 10 * (1 + 0.001 * i),
             "cycles_est": None, "counters": {}, "rejected": False} for i in range(k)]


def test_init_table_beside_drepper_from_synthetic_points():
    n = 1024
    s = sum((_init_samples(a, n, 1e4 * DREPPER_INIT_S[a] / 0.048) for a in INIT_ARMS), [])
    s += sum((_init_samples(a, 256, 1e3 * (3 if "column" in a else 1)) for a in INIT_ARMS), [])
    run = {"id": "r", "experiment": "matmul", "status": "complete", "params": {}, "machine": {}}
    a = {x["question"]: x for x in document(run, s)["answers"]}
    col = a["matmul.init_column_vs_row"]
    assert col["verdict"] == DETECTED and col["value"] == pytest.approx(0.127 / 0.048, rel=0.01)
    assert "1024 x 1024" in col["because"] and "2.65x" in col["because"] \
        and "3.00x at n=256" in col["because"]
    assert a["matmul.init_nt_vs_normal"]["value"] == pytest.approx(1.0, rel=0.01)
    assert a["matmul.init_nt_column"]["value"] == pytest.approx(0.160 / 0.127, rel=0.01)
    table = {(d["arm"], d["init_n"]): d for d in col["details"]}
    assert set(table) == {(x, m) for x in INIT_ARMS for m in (256, n)}
    d = table[("init_column_nt", n)]
    assert d["drepper_s"] == 0.160 and d["value"] == pytest.approx(0.160 / 0.048, rel=0.01)
    assert d["ms_per_matrix"] == pytest.approx(1e4 * 0.160 / 0.048 * n / INIT_BAND / 1e6,
                                               rel=0.01)
    # the multiplication answers are not disturbed by the init points, and vice versa
    b = {x["question"]: x for x in document(run, _init_samples("init_row", n, 1.0))["answers"]}
    assert all(v["verdict"] == NOT_MEASURED for v in b.values())
    assert "init_column" in b["matmul.init_column_vs_row"]["because"]


def test_declared_init_plot_draws_one_bar_per_arm():
    import matplotlib

    from memfx.report.plots import figure_for
    s = sum((_init_samples(a, 512, 1e4 * DREPPER_INIT_S[a]) for a in INIT_ARMS), [])
    s += sum((_samples(f, 360, 1e5 * DREPPER[f]) for f in FORMS), [])
    run = {"id": "r", "experiment": "matmul", "status": "complete", "params": {}, "machine": {}}
    fig = figure_for(document(run, s, include_values=True))
    axes = {ax.get_title(): ax for ax in fig.get_axes()}
    init = next(ax for t, ax in axes.items() if "matrix init" in t)
    times = next(ax for t, ax in axes.items() if "by form" in t)
    assert len(init.patches) == len(INIT_ARMS) and len(times.patches) == len(FORMS)
    matplotlib.pyplot.close(fig)


def test_warm_ups_cover_a_cache_sized_matrix_whole_and_a_dram_one_in_part():
    """A form re-warms in a band of tiles (the naive loop's 8 rows, the
    blocked loop's band of 8 x 8 blocks: each reads all of the second
    matrix), a small part of a product; an init arm writes its whole matrix when it may be cached, and
    64 MiB of a DRAM-sized one (init_n=auto, 2x the LLC: 4 s per pass)."""
    from memfx.experiments.matmul import INIT_WARM_BYTES, init_bands, init_warm_bands, warm_tiles
    assert init_warm_bands(1024) == init_bands(1024) == 64          # 4 MiB, whole
    assert init_warm_bands(16384) * 16 * 4 * 16384 == INIT_WARM_BYTES   # 1 GiB, 1/16 of it
    assert init_warm_bands(16384) < init_bands(16384)
    exp = get_experiment("matmul")

    class Buffers:
        def buffer(self, n, **k):
            import mmap

            from memfx.model.protocol import Region
            m = mmap.mmap(-1, max(n, 1))
            return Region(m, 0, n, 0)

    params = exp.resolve("quick", {"seed": "1"})
    from memfx.model.protocol import Point
    trial = exp.prepare(Point("naive", {"n": 512}), params, Buffers())
    assert trial.warmup == warm_tiles(512) and trial.warmup * TILE >= 512   # a whole row
    assert trial.warmup >= 512 // SM and trial.warmup * 16 <= tiles(512)    # a band; 1/16
