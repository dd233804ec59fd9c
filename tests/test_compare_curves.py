"""memfx compare compares curves, not only answers (issue 39): every point of
both sides with the answers' ratio CI and band, ranges of neighbouring
points that moved, the guard against many comparisons (an A/A of hundreds
of points names no range), the answers' detail lists by content, and exit
status 1 on a regression range."""
import contextlib
import io
import json
import math

import numpy as np
import pytest
from rich.cells import cell_len

from memfx.analysis import answer_cache, documents
from memfx.analysis import compare as cmp
from memfx.analysis import compare_curves as cc
from memfx.cli import main as cli
from memfx.model.units import format_size
from memfx.report import screen
from memfx.store.store import Store

SIZES = [1024, 2048, 3072, 4096, 8192, 12288, 16384, 20480, 24576, 28672, 32768, 49152, 65536,
         98304, 131072, 196608, 262144, 393216, 524288]
ARMS = ("libc", "avx2", "sse", "rep_movsb")
MODES = ("throughput", "latency", "chained")
CHANGE = (4096, 24576)           # six neighbouring sizes: 4, 8, 12, 16, 20, 24 KiB


def _point(arm, mode, size, reps, unit="ns"):
    """A point as results.build_points gives it: its replicas' medians, the
    median of them all and a CI (t(2) over the replicas, at least +-0.5 %)."""
    med = float(np.median(reps))
    half = max(4.3 * float(np.std(np.log(reps), ddof=1)) / math.sqrt(len(reps)), 0.005)
    return {"arm": arm, "params": {"op": "copy", "mode": mode, "size_bytes": size},
            "metric": "ns_per_call" if unit == "ns" else "gb_per_s", "unit": unit,
            "best_quantile": "p10" if unit == "ns" else "p90", "n": 15, "rejected": 0,
            "median": med, "ci_low": med * math.exp(-half), "ci_high": med * math.exp(half),
            "replicas": [float(x) for x in reps]}


def _doc(rng, sigma, scale=None, sizes=SIZES, arms=ARMS, modes=MODES, machine=None):
    """A copy run's document: three replicas a point, each replica's value
    log-normal around the curve with the point's own sigma(arm, mode, size)."""
    pts = []
    for i, arm in enumerate(arms):
        for mode in modes:
            for s in sizes:
                true = (1 + s / 64) * (1 + 0.1 * i) * (scale(arm, mode, s) if scale else 1.0)
                pts.append(_point(arm, mode, s, true * np.exp(rng.normal(0, sigma(arm, mode, s),
                                                                            3))))
    return {"experiment": "copy", "run_id": f"r{rng.integers(1 << 30)}", "points": pts,
            "answers": [], "machine": machine or {}}


def _faster_at(lo, hi, factor):
    return lambda arm, mode, s: factor if (arm, mode) == ("libc", "throughput") and \
        lo <= s <= hi else 1.0


def _changes(doc):
    return [r for r in doc["curves"] if r["verdict"] != cmp.INCONCLUSIVE]


def test_a_change_over_six_neighbouring_sizes_is_one_range_with_its_bounds_and_ratio():
    rng = np.random.default_rng(1)
    quiet = lambda *_: 0.01             # noqa: E731
    a = _doc(rng, quiet)
    b = _doc(rng, quiet, _faster_at(*CHANGE, 0.6))
    doc = cc.compare_all([], [], 0.05, a_runs=[a], b_runs=[b])
    assert doc["curve_points"] == len(SIZES) * len(ARMS) * len(MODES)
    (r,) = _changes(doc)
    assert r["verdict"] == cmp.IMPROVED and r["move"] == "faster"
    assert (r["arm"], r["param"], r["low"], r["high"], r["points"]) == \
        ("libc", "size_bytes", 4096, 24576, 6)
    assert r["params"] == {"mode": "throughput", "op": "copy"}
    assert r["ratio"] == pytest.approx(0.6, rel=0.02)
    assert r["ratio_ci_low"] < r["ratio"] < r["ratio_ci_high"] < 1 / 1.05
    assert "4 KiB–24 KiB: 0.60x [" in r["text"] and "faster (the other arms there: 1.00x)" in r["text"]
    assert not doc["regressed_curves"]
    # the same curve 2x slower at 28-256 KiB: a regression range
    c = _doc(rng, quiet, _faster_at(28672, 262144, 2.0))
    doc = cc.compare_all([], [], 0.05, a_runs=[a], b_runs=[c])
    (r,) = _changes(doc)
    assert r["verdict"] == cmp.REGRESSED and r["move"] == "slower"
    assert (r["low"], r["high"], r["points"]) == (28672, 262144, 8)
    assert doc["regressed_curves"] == [r["label"]] and "28 KiB–256 KiB" in r["label"]


def _mixed_sigmas(rng):
    """Each point's replica spread: from a quiet 0.3 % to a noisy 30 %."""
    table = {(arm, mode, s): float(rng.choice([0.003, 0.01, 0.03, 0.1, 0.3]))
             for arm in ARMS for mode in MODES for s in SIZES}
    return lambda arm, mode, s: table[(arm, mode, s)]


def test_an_a_a_of_hundreds_of_points_names_no_range():
    """Two documents drawn from one distribution: at a 95 % CI a point in 40
    clears the band by chance, so without the guard every seed would name
    ranges; with it (curve_min_points in a row, or one far beyond the band
    at a Bonferroni level) at most 2 of 50 seeds may."""
    false = []
    for seed in range(50):
        rng = np.random.default_rng(seed)
        sigma = _mixed_sigmas(rng)
        doc = cc.compare_all([], [], 0.05, a_runs=[_doc(rng, sigma)], b_runs=[_doc(rng, sigma)])
        assert doc["curve_points"] == len(SIZES) * len(ARMS) * len(MODES)
        if _changes(doc):
            false.append((seed, [r["text"] for r in _changes(doc)]))
    assert len(false) <= 2, false


def test_the_guard_itself_one_point_clear_two_in_a_row_or_one_far():
    sizes = [1024 * k for k in range(1, 13)]
    rng = np.random.default_rng(3)
    quiet = lambda *_: 0.005            # noqa: E731
    arms = ("libc", "sse", "avx2", "avx512")      # the other arms are the reference (unmoved)
    a = _doc(rng, quiet, sizes=sizes, arms=arms, modes=("throughput",))

    def moved(at, factor):
        return _doc(np.random.default_rng(4), quiet,
                    lambda arm, mode, s: factor if s in at and arm == "libc" else 1.0,
                    sizes=sizes, arms=arms, modes=("throughput",))

    def libc(doc):
        return [r for r in doc["curves"] if r["arm"] == "libc"]
    # two neighbours 8 % slower, clear of the band (not of twice it): too few in a row
    (r,) = libc(cc.compare_all([], [], 0.05, a_runs=[a], b_runs=[moved({4096, 5120}, 1.08)]))
    assert r["verdict"] == cmp.INCONCLUSIVE and r["clear"] == 2 and "in a row" in r["reason"]
    # three in a row: a regression
    (r,) = libc(cc.compare_all([], [], 0.05, a_runs=[a],
                               b_runs=[moved({4096, 5120, 6144}, 1.08)]))
    assert r["verdict"] == cmp.REGRESSED and r["clear_in_a_row"] == 3
    # one point 3x slower: far beyond twice the band even at the Bonferroni level
    (r,) = libc(cc.compare_all([], [], 0.05, a_runs=[a], b_runs=[moved({8192}, 3.0)]))
    assert r["verdict"] == cmp.REGRESSED and r["far"] and r["points"] == 1
    assert r["label"].endswith(" 8 KiB")


def test_a_bandwidth_is_better_higher_and_the_direction_comes_from_the_document():
    rng = np.random.default_rng(5)
    a = {"experiment": "fill", "run_id": "a", "answers": [], "machine": {},
         "points": [_point(arm, "throughput", s, 100 * np.exp(rng.normal(0, 0.005, 3)),
                           unit="GB/s") for arm in ("avx2", "sse", "nt", "scalar") for s in SIZES]}
    b = json.loads(json.dumps(a))
    for p in b["points"][5:10]:
        for k in ("median", "ci_low", "ci_high"):
            p[k] *= 0.7
        p["replicas"] = [v * 0.7 for v in p["replicas"]]
    (r,) = _changes(cc.compare_all([], [], 0.05, a_runs=[a], b_runs=[b]))
    assert r["verdict"] == cmp.REGRESSED and r["move"] == "slower" and r["points"] == 5
    assert cc.better_of({"best_quantile": "p90"}) == "higher"
    assert cc.better_of({"unit": "ns"}) == "lower" and cc.better_of({"unit": "x"}) == ""


def test_points_are_banded_as_answers_are_guest_host_shared_and_history():
    machine = {"caches": [
        {"level": 1, "type": "Data", "size_bytes": 49152, "shared_cpu_list": "0"},
        {"level": 2, "type": "Unified", "size_bytes": 2 << 20, "shared_cpu_list": "0"},
        {"level": 3, "type": "Unified", "size_bytes": 32 << 20, "shared_cpu_list": "0-1"}]}
    assert cc.private_cache_bytes(machine) == 2 << 20
    rng = np.random.default_rng(6)
    sizes = [1 << 20, 64 << 20]
    a = _doc(rng, lambda *_: 0.005, sizes=sizes, arms=("libc",), modes=("throughput",),
             machine=machine)
    pts = cc.side_points([a])
    rows = {r["params"]["size_bytes"]: r for r in cc.compare_points(pts, pts, 0.05, guest=True)}
    # in a guest every point is banded as host-shared (curves drift more than
    # answers between surveys there): 25 %
    assert rows[1 << 20]["band"] == pytest.approx(cmp.history_band(0.08))
    assert rows[64 << 20]["band"] == pytest.approx(cmp.history_band(0.08))
    assert cc.compare_points(pts, pts, 0.05)[0]["band"] == 0.05                # bare metal
    # a point's own history widens its band, as a question's does
    key = next(k for k in pts if "size_bytes=1048576" in k)
    hist = {key: [10.0, 11.0, 12.0]}
    row = next(r for r in cc.compare_points(pts, pts, 0.05, hist, 3) if r["key"] == key)
    assert row["band"] == pytest.approx(cmp.history_band(cmp.history_spread([10, 11, 12])))
    assert row["band_source"].startswith("history (3")


# ---- details ----------------------------------------------------------------------

def _libc_ans(spans, crossing=(1024, 2048)):
    return {"question": "copy.libc_vs_best", "unit": "ratio", "better": "lower",
            "verdict": "measured", "value": 1.2, "ci_low": None, "ci_high": None,
            "details": [{"label": f"libc slower {format_size(lo)}–{format_size(hi)} (throughput)",
                         "kind": "range",
                         "mode": "throughput", "value": 1.3, "unit": "ratio",
                         "min_size": lo, "max_size": hi} for lo, hi in spans]
            + [{"label": "avx2 vs libc (copy, throughput)", "kind": "crossover", "op": "copy",
                "mode": "throughput", "a": "avx2", "b": "libc", "value": 1500.0,
                "unit": "bytes", "verdict": "detected",
                "crossings": [{"size": 1500, "low": crossing[0], "high": crossing[1],
                               "faster_below": "avx2", "faster_above": "libc"}]},
               {"label": "avx2 L1d", "verdict": "detected", "value": 1.2, "unit": "ratio"}]}


def test_detail_lists_are_compared_by_content():
    a = _libc_ans([(64, 128), (224, 2048)])
    same = cc.detail_changes(a, _libc_ans([(64, 128), (224, 2048)], crossing=(1536, 3072)))
    assert same == []                       # crossing brackets that overlap: the same
    (c,) = cc.detail_changes(a, _libc_ans([(64, 128), (2048, 24576)]))
    assert c == {"detail": "libc slower (throughput)", "a": "224 B–2 KiB", "b": "2 KiB–24 KiB"}
    assert cmp.detail_text(c) == "libc slower (throughput): 224 B–2 KiB -> 2 KiB–24 KiB"
    moved = cc.detail_changes(a, _libc_ans([(64, 128), (224, 2048)], crossing=(4096, 8192)))
    assert moved == [{"detail": "avx2 vs libc (copy, throughput)", "a": "libc from 1 KiB–2 KiB",
                      "b": "libc from 4 KiB–8 KiB"}]
    flipped = _libc_ans([(64, 128), (224, 2048)])
    flipped["details"][-1]["verdict"] = "not_detected"
    assert cc.detail_changes(a, flipped) == [{"detail": "avx2 L1d", "a": "detected",
                                              "b": "not detected"}]
    gone = _libc_ans([(64, 128)])
    assert cc.detail_changes(a, gone)[0]["b"] == "none"
    # the document: on the row and in the list, and shown after the answers
    doc = cc.compare_all([a], [_libc_ans([(64, 128), (2048, 24576)])], 0.05)
    assert doc["rows"][0]["details_changed"] and doc["detail_changes"][0]["question"] == \
        "copy.libc_vs_best"
    lines = screen.compare_lines(doc, 100)
    assert lines[-2] == "details changed:" and "224 B–2 KiB -> 2 KiB–24 KiB" in lines[-1]
    assert "224 B–2 KiB -> 2 KiB–24 KiB" in cmp.markdown(doc)


def test_fastest_strategy_ranges_differ_only_where_they_reverse():
    def best(ranges, ties):
        return {"question": "copy.best_strategy", "unit": "ranges", "verdict": "measured",
                "value": float(len(ranges)),
                "details": [{"label": "copy ranges (throughput)", "kind": "ranges", "op": "copy",
                             "mode": "throughput", "ranges": [
                                 {"strategy": s, "min_size": lo, "max_size": hi}
                                 for s, lo, hi in ranges], "ties": ties}]}
    sizes = [32, 1024, 1 << 20]
    a = best([("avx512", 32, 1 << 20)], [[s, ["avx512", "rep_movsb"]] for s in sizes])
    b = best([("avx512", 32, 1024), ("rep_movsb", 1 << 20, 1 << 20)],
             [[s, ["avx512"] if s < 1 << 20 else ["rep_movsb"]] for s in sizes])
    assert cc.detail_changes(a, b) == []          # a tie fell the other way
    c = best([("avx512", 32, 1 << 20)], [[s, ["avx512"]] for s in sizes])
    (ch,) = cc.detail_changes(b, c)
    assert ch["a"] == "avx512 32 B–1 KiB; rep_movsb 1 MiB" and ch["b"] == "avx512 32 B–1 MiB"


# ---- the document, the screens, the history cache ---------------------------------

def test_rendering_shows_curves_after_the_answers_and_all_with_show_all():
    rng = np.random.default_rng(7)
    sigma = lambda *_: 0.01             # noqa: E731
    a, b = _doc(rng, sigma), _doc(rng, sigma, _faster_at(28672, 262144, 2.0))
    answers = [{"question": f"x.q{i}", "unit": "ns", "better": "lower", "verdict": "measured",
                "value": 10.0, "ci_low": 9.9, "ci_high": 10.1} for i in range(60)]
    doc = cc.compare_all(answers, answers, 0.05, "run A", "run B", a_runs=[a], b_runs=[b])
    assert doc["compare_schema_version"] == cmp.COMPARE_SCHEMA_VERSION == 3
    lines = screen.compare_lines(doc, 100)
    assert lines[0].startswith("60 unchanged") and "curves: 1 regressed range" in lines[0]
    head = next(i for i, x in enumerate(lines) if x.startswith("curves ("))
    assert lines[head - 1].startswith("60 rows unchanged")           # after the answers
    rows = [x for x in lines[head + 1:] if not x.startswith("    ")]   # the heading may wrap
    assert rows[0].split()[0] == "regressed" and "28 KiB–256 KiB" in rows[0]
    assert all(cell_len(x) <= 100 for x in lines) and not any("…" in x for x in lines)
    shown = screen.compare_lines(doc, 100, show_all=True)
    assert len(shown) >= len(lines) + len(doc["curves"]) - 1
    md = cmp.markdown(doc)
    assert len(md.splitlines()) <= cmp.MARKDOWN_LINES and "**Curves**" in md
    assert "- regressed: `copy libc" in md
    # a document of version 2 (no curves) still renders as before
    old = {k: v for k, v in doc.items() if k not in ("curves", "curve_points", "curve_rule",
                                                     "regressed_curves", "noisy_curves",
                                                     "detail_changes")}
    assert not any(x.startswith("curves") for x in screen.compare_lines(old, 100))
    assert "**Curves**" not in cmp.markdown(old) and "curves" not in cmp.summary(old)


def test_the_history_cache_keeps_the_point_medians(tmp_path, monkeypatch):
    with Store(str(tmp_path / "h.db")) as store:
        sid = store.begin_survey("quick", ["survey", "--quick"])
        rid = store.begin_run("copy", {}, "quick", {"flags": {"erms": True}}, survey_id=sid)
        store.add_samples(rid, _samples(np.random.default_rng(8), {}))
        store.finish_run(rid, "complete")
        store.finish_survey(sid, "complete")
        answers, medians = documents.history_survey(store, sid)
        assert answers and medians
        key = next(k for k in medians if k.startswith("copy|ns_per_call|libc|"))
        assert medians[key] > 0
        kept = answer_cache.load_survey(store.path, sid, store.survey(sid)["runs"])
        assert kept["points"] == medians

        def refuse(*a, **k):
            raise AssertionError("analysed again")
        monkeypatch.setattr(documents, "survey_run_documents", refuse)
        documents._SURVEY_ANSWERS.clear()
        assert documents.history_survey(store, sid)[1] == medians


# ---- stored runs, the command line ------------------------------------------------

LOOP = {"libc": lambda s: 3 + s / 24, "avx2": lambda s: 2 + s / 20,
        "rep_movsb": lambda s: 30 + s / 64, "sse": lambda s: 3 + s / 16}
LOOP_SIZES = sorted({int(round(2 ** (i / 2))) for i in range(6, 37)})


def _samples(rng, slower):
    """A copy run's samples, three replicas of five samples a point; libc's
    time multiplied by ``slower[size]`` where it names the size."""
    out = []
    for replica in range(3):
        for arm, f in LOOP.items():
            for s in LOOP_SIZES:
                for _ in range(5):
                    v = f(s) * (slower.get(s, 1.0) if arm == "libc" else 1.0) * (
                        1 + 0.005 * rng.standard_normal())
                    out.append({"arm": arm, "replica": replica,
                                "point": {"op": "copy", "size_bytes": s, "mode": "throughput"},
                                "metric": "ns_per_call", "unit": "ns", "value": v,
                                "length": 1000, "ns": v * 1000})
    return out


def _stored_runs(db):
    """Run A, and run B whose libc is 2x slower at 32 KiB-181 KiB (six sizes)."""
    moved = {s: 2.0 for s in LOOP_SIZES if 32768 <= s <= 185364}
    assert len(moved) == 6
    ids = []
    with Store(db) as store:
        for seed, slower in ((1, {}), (2, moved)):
            rid = store.begin_run("copy", {}, "quick", {"flags": {"erms": True, "avx2": True}})
            store.add_samples(rid, _samples(np.random.default_rng(seed), slower))
            store.finish_run(rid, "complete")
            ids.append(rid)
    return ids


def _main(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main([str(a) for a in args])
    return status, out.getvalue(), err.getvalue()


def test_a_regression_range_exits_1_as_a_regressed_answer_does(tmp_path):
    db = str(tmp_path / "c.db")
    a, b = _stored_runs(db)
    # only a discrete answer of copy (which never regresses): its curves still compared
    status, out, err = _main("compare", a, b, "copy.best_strategy", "--json", "--db", db)
    doc = json.loads(out)
    assert doc["regressed"] == [] and doc["curve_points"] == len(LOOP) * len(LOOP_SIZES)
    (r,) = [x for x in doc["curves"] if x["verdict"] == cmp.REGRESSED]
    assert (r["arm"], r["low"], r["high"], r["points"]) == ("libc", 32768, 185364, 6)
    assert r["ratio"] == pytest.approx(2.0, rel=0.02)
    assert status == 1 and doc["regressed_curves"] == [r["label"]]
    assert "regressed beyond 5%" in err and r["label"] in err
    status, out, _ = _main("compare", a, b, "copy.best_strategy", "--db", db)
    assert status == 1 and r["label"] in out
    status, md, _ = _main("compare", a, b, "copy.best_strategy", "--format", "markdown",
                          "--db", db)
    assert status == 1 and f"`{r['label']}`" in md and len(md.splitlines()) <= 40
    # A against itself: nothing moved, exit 0
    status, out, _ = _main("compare", a, a, "copy.best_strategy", "--json", "--db", db)
    assert status == 0 and not json.loads(out)["curves"]


@pytest.mark.measuring
def test_the_exit_status_of_the_command(tmp_path):
    from conftest import run_cli
    db = str(tmp_path / "c.db")
    a, b = _stored_runs(db)
    p = run_cli("compare", a, b, "copy.best_strategy", db=db)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "copy libc (throughput, copy) 32 KiB–181 KiB" in p.stderr
    assert run_cli("compare", b, b, "copy.best_strategy", db=db).returncode == 0


def test_the_fleet_compare_compares_the_cpu_models_curves(tmp_path):
    """--group-by cpu-model: a point is the median of the hosts' medians,
    each host a replica; model B's libc is 2x slower at 32-181 KiB."""
    db = str(tmp_path / "f.db")
    moved = {s: 2.0 for s in LOOP_SIZES if 32768 <= s <= 185364}
    with Store(db) as store:
        for i, (model, slower) in enumerate((("Model A", {}), ("Model A", {}), ("Model B", moved),
                                             ("Model B", moved))):
            machine = {"cpu": {"model_name": model, "microcode": str(i)},
                       "flags": {"erms": True, "avx2": True}}
            rid = store.begin_run("copy", {}, "quick", machine)
            store.add_samples(rid, _samples(np.random.default_rng(10 + i), slower))
            store.finish_run(rid, "complete")
    with Store(db) as store:
        label, answers, runs = documents.group_side(store, "Model B")
        assert label == "Model B (2 machines)" and answers
        (run,) = runs
        p = next(x for x in run["points"] if x["arm"] == "libc")
        assert len(p["replicas"]) == 2
    status, out, err = _main("compare", "--group-by", "cpu-model", "Model A", "Model B",
                             "copy.best_strategy", "--json", "--db", db)
    doc = json.loads(out)
    (r,) = [x for x in doc["curves"] if x["verdict"] == cmp.REGRESSED]
    assert (r["low"], r["high"]) == (32768, 185364) and status == 1, err


def test_a_move_of_every_arm_alike_is_the_host_and_a_lone_curve_only_moved():
    """A host that slows the vCPU moves every strategy at a size alike: no
    arm regressed.  A curve with no other arm at its sizes cannot be told
    from the host's drift: it reads changed (moved), and compare exits 0."""
    rng = np.random.default_rng(11)
    quiet = lambda *_: 0.005            # noqa: E731
    a = _doc(rng, quiet)
    b = _doc(np.random.default_rng(12), quiet,
             lambda arm, mode, s: 1.6 if 1024 <= s <= 16384 else 1.0)
    doc = cc.compare_all([], [], 0.05, a_runs=[a], b_runs=[b])
    assert not doc["regressed_curves"] and not _changes(doc)
    lone_a = _doc(rng, quiet, arms=("libc",), modes=("throughput",))
    lone_b = _doc(np.random.default_rng(13), quiet, lambda arm, mode, s: 1.6 if s <= 16384 else 1,
                  arms=("libc",), modes=("throughput",))
    doc = cc.compare_all([], [], 0.05, a_runs=[lone_a], b_runs=[lone_b])
    (r,) = _changes(doc)
    assert r["verdict"] == cmp.CHANGED and "no other arm" in r["reason"]
    assert not doc["regressed_curves"]


def test_an_arm_that_kept_its_speed_while_the_others_moved_has_not_regressed():
    """Half a core lent by the host slows vector loops and rep movs unlike:
    in an A/A every arm but rep_movsb got 1.4x faster at 4-24 KiB.  Against
    the others rep_movsb looks slower, but on its own it did not move: it
    reads changed, and compare exits 0.  The same arm 1.5x slower on its own
    as well is a regression."""
    rng = np.random.default_rng(21)
    quiet = lambda *_: 0.005            # noqa: E731
    lo, hi = CHANGE
    a = _doc(rng, quiet)
    others_faster = lambda arm, mode, s: 1 / 1.4 if arm != "rep_movsb" and lo <= s <= hi else 1.0  # noqa: E731
    doc = cc.compare_all([], [], 0.05, a_runs=[a],
                         b_runs=[_doc(np.random.default_rng(22), quiet, others_faster)])
    moved = [r for r in _changes(doc) if r["arm"] == "rep_movsb"]
    assert moved and all(r["verdict"] == cmp.CHANGED and "on its own" in r["reason"]
                         for r in moved)
    assert not doc["regressed_curves"]
    slower = lambda arm, mode, s: 1.5 if arm == "rep_movsb" and lo <= s <= hi else 1.0  # noqa: E731
    doc = cc.compare_all([], [], 0.05, a_runs=[a],
                         b_runs=[_doc(np.random.default_rng(23), quiet, slower)])
    assert any(label.startswith("copy rep_movsb") for label in doc["regressed_curves"])


def test_a_history_survey_reads_the_stored_parts_as_the_whole_documents_say(tmp_path,
                                                                           monkeypatch):
    """With no answer cache, a survey of the machine's history is read from
    its runs' stored answers and points parts (schema 8) and gives exactly
    what the whole documents give; nothing is analysed or read whole."""
    monkeypatch.setenv("MEMFX_CACHE_DIR", "off")
    with Store(str(tmp_path / "p.db")) as store:
        sid = store.begin_survey("quick", ["survey", "--quick"])
        rid = store.begin_run("copy", {}, "quick", {"flags": {"erms": True}}, survey_id=sid)
        store.add_samples(rid, _samples(np.random.default_rng(9), {}))
        store.finish_run(rid, "complete")
        store.finish_survey(sid, "complete")
        documents._SURVEY_ANSWERS.clear()
        whole_answers, whole_medians = documents.history_survey(store, sid)   # analyses, stores
        assert whole_answers and whole_medians

        def refuse(*a, **k):
            raise AssertionError("read or analysed whole")
        monkeypatch.setattr(documents, "survey_run_documents", refuse)
        monkeypatch.setattr(documents, "run_document", refuse)
        documents._SURVEY_ANSWERS.clear()
        answers, medians = documents.history_survey(store, sid, parts=True)
        assert medians == whole_medians
        assert [(a["question"], a.get("value"), a["run_id"]) for a in answers] == \
            [(a["question"], a.get("value"), a["run_id"]) for a in whole_answers]


def test_a_point_measured_in_one_replica_is_never_clear():
    """Sizes a run measured in one replica only (refinement adds them so)
    carry a CI from that one process's samples, which share its host state:
    a 2.4x move of four such neighbours with CIs of +-5 % is not a change;
    the same move measured in three replicas on each side is."""
    sizes = (16384, 20480, 24576, 28672)

    def doc(libc_reps):
        pts = [_point(arm, "throughput", s, [100.0 * (1 + 0.1 * i)] * 2 + [101.0 * (1 + 0.1 * i)])
               for i, arm in enumerate(ARMS[1:]) for s in sizes]
        for s in sizes:
            p = _point("libc", "throughput", s, libc_reps if len(libc_reps) > 1
                       else libc_reps * 2)
            if len(libc_reps) == 1:          # one replica: the CI of its samples
                p["replicas"] = list(libc_reps)
                p["ci_low"], p["ci_high"] = p["median"] * 0.95, p["median"] * 1.05
            pts.append(p)
        return {"experiment": "copy", "run_id": "r", "points": pts, "answers": [],
                "machine": {}}

    once = cc.compare_curves([doc([100.0])], [doc([240.0])], 0.05)
    assert not once["regressed_curves"]
    assert all(r["verdict"] == cmp.INCONCLUSIVE for r in once["curves"] if r["arm"] == "libc")
    thrice = cc.compare_curves([doc([98.0, 100.0, 102.0])], [doc([236.0, 240.0, 244.0])], 0.05)
    assert any("libc" in label for label in thrice["regressed_curves"])


def test_a_curve_that_moved_with_the_core_speed_is_never_clear_of_the_band():
    """libc alone 1.5x slower over six sizes while B's run read the core's
    L1d at 0.6x A's speed (busy summary's core_read_gbps): the move is no
    larger than the core's, so it is the host's, and no range regresses;
    the same with the core unchanged regresses."""
    rng = np.random.default_rng(5)
    quiet = lambda *_: 0.01             # noqa: E731
    a = _doc(rng, quiet)
    b = _doc(rng, quiet, _faster_at(*CHANGE, 1.5))
    a["busy"], b["busy"] = {"core_read_gbps": 350.0}, {"core_read_gbps": 350.0}
    doc = cc.compare_all([], [], 0.05, a_runs=[a], b_runs=[b])
    assert doc["regressed_curves"], doc["curves"][:1]
    b["busy"] = {"core_read_gbps": 210.0}
    doc = cc.compare_all([], [], 0.05, a_runs=[a], b_runs=[b])
    assert not doc["regressed_curves"]
    rows = cc.compare_points(cc.side_points([a]), cc.side_points([b]), 0.05)
    moved = [r for r in rows if r["move"]]
    assert moved and all("the core read L1d at 0.60x" in r["seen"] for r in moved)


def test_a_refined_size_few_arms_measured_does_not_unmake_a_range_the_others_make():
    """libc 1.8x slower over 4-24 KiB against three unmoved arms, and at
    one refined size inside the range only libc and one other arm measured
    (no reference there): the points with a reference make the range, so
    it regresses; with the refined size alone beyond the band, nothing
    regresses."""
    rng = np.random.default_rng(11)
    quiet = lambda *_: 0.01             # noqa: E731
    slower = _faster_at(*CHANGE, 1.8)
    a = _doc(rng, quiet, modes=("throughput",))
    b = _doc(rng, quiet, slower, modes=("throughput",))
    for doc, f in ((a, 1.0), (b, 1.8)):
        for arm, k in (("libc", f), ("avx2", 1.0)):
            doc["points"].append(_point(arm, "throughput", 5000, [80 * k, 81 * k, 80.5 * k]))
    rows = cc.compare_points(cc.side_points([a]), cc.side_points([b]), 0.05)
    refined = [r for r in rows if r["params"]["size_bytes"] == 5000 and r["arm"] == "libc"]
    assert refined and not refined[0]["reference"]
    doc = cc.compare_all([], [], 0.05, a_runs=[a], b_runs=[b])
    (r,) = [x for x in doc["curves"] if x["arm"] == "libc" and x["verdict"] != cmp.INCONCLUSIVE]
    assert r["verdict"] == cmp.REGRESSED and r["low"] <= 5000 <= r["high"], r
    # the refined size alone: nothing to tell the host's drift from a change
    b2 = _doc(np.random.default_rng(11), quiet, modes=("throughput",))
    b2["points"] = [dict(p) for p in a["points"]]
    for p in b2["points"]:
        if p["params"]["size_bytes"] == 5000 and p["arm"] == "libc":
            p.update(median=p["median"] * 3, ci_low=p["ci_low"] * 3, ci_high=p["ci_high"] * 3,
                     replicas=[v * 3 for v in p["replicas"]])
    doc = cc.compare_all([], [], 0.05, a_runs=[a], b_runs=[b2])
    assert not doc["regressed_curves"]
