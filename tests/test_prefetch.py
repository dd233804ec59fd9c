"""The prefetch experiment (seed 001): kernels prefetch the addresses they are
given (checked through their checksums and cursors), the lab's invalid
addresses are what they claim, and the analysis reads synthetic points right."""
import json
import mmap

import numpy as np
import pytest

from conftest import run_cli
from memfx.analysis.results import document
from memfx.experiments import get_experiment
from memfx.experiments.prefetch import (
    INVALID_TARGETS,
    KERNEL_TEXT,
    _order_cursor,
    expected_pages_check,
    expected_stride_check,
    five_level_paging,
    kernel_hole,
    kernel_text_span,
    mapping_at,
    page_order,
    target_addresses,
    target_problems,
    user_limit,
)
from memfx.lab import _core
from memfx.model.answers import NOT_MEASURED
from memfx.model.findings import DETECTED, INCONCLUSIVE, NOT_DETECTED
from memfx.model.protocol import Point

ROWS = {k["name"]: k for k in _core.kernels()}
KERNELS = {name: i for i, name in enumerate(r["name"] for r in _core.kernels())}


def _run(name, dst=None, src=None, size=0, value=0, count=1, aux=0):
    out = _core.run(KERNELS[name], dst, 0, src, 0, size, value, count, aux, [], None)
    return out[3]


def _lab():
    from memfx.lab.lab import Lab
    return Lab(cpu=-1, hardware_counters=False)


def _targets(addrs):
    buf = mmap.mmap(-1, 8 * (len(addrs) + 1))
    view = np.frombuffer(buf, dtype=np.uint64)
    view[:-1] = addrs
    view[-1] = 0
    del view
    return buf


def _cursor(buf, n):
    return int(np.frombuffer(buf, dtype=np.uint64)[n])


@pytest.mark.measuring
@pytest.mark.parametrize("kind", ["none", "t0", "t1", "t2", "nta", "w"])
def test_throughput_kernels_prefetch_each_target_in_turn_and_keep_their_place(kind):
    name = f"pf_tput_{kind}"
    if not _core.isa_supported(ROWS[name]["isa"] or ""):
        pytest.skip(f"{name} needs {ROWS[name]['isa']}, which this CPU lacks")
    addrs = np.array([0, 64, 4096, 0xFFFFFFFF81000000, 0x4000000000000000], dtype=np.uint64)
    buf = _targets(addrs)
    got = _run(name, dst=buf, size=8 * len(addrs), count=7)
    assert got == int(np.sum(addrs[[0, 1, 2, 3, 4, 0, 1]], dtype=np.uint64))
    assert _cursor(buf, len(addrs)) == 2                  # the next call goes on at target 2
    got = _run(name, dst=buf, size=8 * len(addrs), count=3)
    assert got == int(np.sum(addrs[[2, 3, 4]], dtype=np.uint64))
    assert _cursor(buf, len(addrs)) == 0


@pytest.mark.measuring
@pytest.mark.parametrize("kind", ["none", "t0", "t1", "t2", "nta", "w"])
def test_repeated_kernels_prefetch_the_one_address_count_times(kind):
    name = f"pf_rep_{kind}"
    if not _core.isa_supported(ROWS[name]["isa"] or ""):
        pytest.skip(f"{name} needs {ROWS[name]['isa']}, which this CPU lacks")
    addr = 0xFFFF800000000040
    buf = _targets(np.array([addr], dtype=np.uint64))
    # 8 per trip and a rest: 13 = one trip and 5, 8 = one trip, 3 = the rest only
    for count in (13, 8, 3, 0):
        assert _run(name, dst=buf, size=8, count=count) == addr * count % (1 << 64)
    assert _run(name, dst=buf, size=7, count=5) == 0          # no address: nothing read
    assert _core.footprint(ROWS[name]["index"], 8, 5, 0)[:2] == (8, 0)   # reads the one word


@pytest.mark.measuring
def test_latency_kernel_walks_the_chain_and_prefetches_each_target():
    lab = _lab()
    region = lab.buffer(8 * 64)
    chain = lab.link_chain(region, 64, 8, np.arange(8, dtype=np.int32))
    addrs = np.arange(1, 6, dtype=np.uint64) * 4096
    buf = _targets(addrs)
    got = _core.run(KERNELS["pf_lat_t0"], buf, 0, chain.buffer, 0, 8 * len(addrs), 0, 12, 0,
                    [], None)[3]
    assert got == int(np.sum(addrs[np.arange(12) % 5], dtype=np.uint64))
    lab.release()


@pytest.mark.measuring
@pytest.mark.parametrize("d", [-1, 0, 1, 3, 17])
@pytest.mark.parametrize("kernel", ["pf_stride_t0", "pf_stride_none"])
def test_stride_kernels_prefetch_d_elements_ahead(kernel, d):
    n, stride = 32, 128
    region = mmap.mmap(-1, n * stride)
    cursor = mmap.mmap(-1, 8)
    got = _core.run(KERNELS[kernel], cursor, 0, region, 0, n * stride, stride, 50,
                    d & 0xFFFFFFFFFFFFFFFF, [], None)[3]
    assert got == expected_stride_check(n, d, 50, stride)
    # a prefetch one element behind is a different address sequence from one ahead
    assert expected_stride_check(n, 1, 50, stride) != expected_stride_check(n, -1, 50, stride)
    assert int(np.frombuffer(cursor, dtype=np.uint64)[0]) == 50 % n


def _order(order):
    buf = mmap.mmap(-1, 4 * len(order) + 8)
    np.frombuffer(buf, dtype=np.uint32, count=len(order))[:] = order
    return buf


@pytest.mark.measuring
@pytest.mark.parametrize("d", [-1, 0, 1, 2, 5, 40])
@pytest.mark.parametrize("kernel", ["pf_pages_t0", "pf_pages_none"])
def test_page_walk_kernels_prefetch_the_page_d_steps_ahead_in_the_order(kernel, d):
    n, page = 16, 4096
    order = page_order(n, 3)
    assert sorted(order) == list(range(n)) and list(order) != list(range(n))
    region = mmap.mmap(-1, n * page)
    table = _order(order)
    got = _core.run(KERNELS[kernel], table, 0, region, 0, n * page, page, 37,
                    d & 0xFFFFFFFFFFFFFFFF, [], None)[3]
    assert got == expected_pages_check(order, d, 37, page)
    # the checksum tells a prefetch behind (the control) from one ahead, and
    # both from a prefetch in address order instead of the visiting order
    assert expected_pages_check(order, -1, 37, page) != expected_pages_check(order, 1, 37, page)
    assert got != expected_pages_check(np.arange(n), d, 37, page)
    assert int(np.frombuffer(table, dtype=np.uint64, count=1, offset=4 * n)[0]) == 37 % n


@pytest.mark.measuring
def test_page_walk_kernel_checks_its_footprint():
    region = mmap.mmap(-1, 4 * 4096)
    with pytest.raises(ValueError):           # the order table is 4 bytes per page + a cursor
        _core.run(KERNELS["pf_pages_t0"], mmap.mmap(-1, 16), 0, region, 0, 4 * 4096, 4096, 1,
                  1, [], None)
    with pytest.raises(ValueError):           # more pages than the region holds
        _core.run(KERNELS["pf_pages_t0"], _order(np.arange(8)), 0, region, 0, 8 * 4096, 4096,
                  1, 1, [], None)


@pytest.mark.measuring
def test_tlb_part_walks_pages_in_random_order_with_the_behind_control():
    """The tlb cells: the page-walk kernels, the distance as the signed aux,
    d = -1 always planned, and the arms of a cell on one order table."""
    exp = get_experiment("prefetch")
    params = exp.resolve("quick", {"parts": "tlb", "region": "1M", "distances": "4"})
    pts = exp.plan(params, {})
    assert sorted({p.params["distance"] for p in pts}) == [-1, 4]
    lab = _lab()
    try:
        cell = [p for p in pts if p.params["distance"] == -1 and p.params["pages"] == "4k"]
        trials = {p.arm: exp.prepare(p, params, lab) for p in cell}
        assert trials["prefetch"].kernel == "pf_pages_t0" and trials["none"].kernel == "pf_pages_none"
        assert trials["prefetch"].aux == 2**64 - 1 and trials["prefetch"].value == 4096
        assert trials["prefetch"].dst.buffer is trials["none"].dst.buffer
        n = (1 << 20) // 4096
        order = np.frombuffer(trials["prefetch"].dst.buffer, dtype=np.uint32, count=n,
                              offset=trials["prefetch"].dst.offset)
        assert list(order) == list(page_order(n, params["seed"]))
        del order
        _order_cursor(trials["prefetch"].dst, n, 0)
        got = lab.call(trials["prefetch"], 300)
        assert got == expected_pages_check(page_order(n, params["seed"]), -1, 300, 4096)
    finally:
        lab.close()


@pytest.mark.measuring
def test_stride_kernel_checks_footprint():
    region = mmap.mmap(-1, 4096)
    cursor = mmap.mmap(-1, 8)
    with pytest.raises(ValueError):
        _core.run(KERNELS["pf_stride_t0"], cursor, 0, region, 0, 8192, 64, 1, 1, [], None)
    with pytest.raises(ValueError):       # the cursor must be writable space in dst
        _core.run(KERNELS["pf_stride_t0"], None, 0, region, 0, 4096, 64, 1, 1, [], None)


@pytest.mark.measuring
def test_list_kernels_follow_the_chain_and_return_where_they_stopped():
    lab = _lab()
    region = lab.buffer(8 * 64)
    chain = lab.link_chain(region, 64, 8, np.array([0, 3, 1, 7, 2, 6, 4, 5], dtype=np.int32))
    base = _core.address(region.buffer)
    for arm in ("none", "unguarded", "guarded"):
        end = _core.run(KERNELS[f"pf_list_{arm}"], None, 0, chain.buffer, 0, 0, 0, 3, 0,
                        [], None)[3]
        assert end == base + 7 * 64          # 0 -> 3 -> 1 -> 7
    lab.release()


def _maps():
    with open("/proc/self/maps") as f:
        spans = []
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            spans.append((lo, hi, line.split()[1]))
    return spans


@pytest.mark.measuring
def test_invalid_addresses_are_what_they_claim():
    lab = _lab()
    addrs = target_addresses(lab)
    assert set(addrs) == set(INVALID_TARGETS)
    assert target_problems(addrs) == []
    assert addrs["null"] == 0
    # both kernel targets: canonical supervisor-half addresses, above every
    # user address; the hole is not the kernel's text
    for name in ("kernel", "kernel_hole"):
        assert (1 << 64) - user_limit() <= addrs[name] < 1 << 64
    text = kernel_text_span()
    if text:
        assert not text[0] <= addrs["kernel_hole"] < text[1]
    spans = _maps()

    def mapping(a):
        return next((s for s in spans if s[0] <= a < s[1]), None)
    assert mapping(addrs["unmapped"]) is None                       # a hole ...
    assert mapping(addrs["unmapped"] - 4096) and mapping(addrs["unmapped"] + 4096)  # ... inside a range
    assert mapping(addrs["prot_none"])[2].startswith("---")
    assert addrs["kernel"] >= 1 << 63
    top = addrs["noncanonical"] >> 47
    assert top not in (0, (1 << 17) - 1)                            # bits 63..47 not all equal
    made = {a: mapping(a) for a in (addrs["unmapped"] - 4096, addrs["unmapped"] + 4096,
                                    addrs["prot_none"])}
    lab.release()                                                   # the lab tears its holes down
    # The lab's own mappings (these exact spans and permissions) are gone.
    # Not "nothing is mapped there": once freed, an address may be reused by
    # any allocation, even the one that reads /proc/self/maps.
    spans = _maps()
    for a, span in made.items():
        assert mapping(a) != span, (hex(a), span)


def _sample(arm, params, ns, n=6, counters=None):
    return [{"arm": arm, "point": params, "metric": "ns_per_prefetch", "unit": "ns",
             "value": ns * (1 + 0.001 * i), "length": 1000, "ns": ns * 1000 * (1 + 0.001 * i),
             "cycles_est": None, "counters": dict(counters or {}), "rejected": False}
            for i in range(n)]


def _doc(samples):
    run = {"id": "r", "experiment": "prefetch", "status": "complete", "params": {},
           "machine": {}}
    return {a["question"]: a for a in document(run, samples)["answers"]}


def _cost(target, arm, ns, sys_share=0.0):
    cpu = {"user_ns": 1e6 * (1 - sys_share), "system_ns": 1e6 * sys_share}
    return _sample(arm, {"part": "cost", "mode": "throughput", "target": target}, ns,
                   counters=cpu)


def test_trap_answer_detects_system_time_and_says_no_without_it():
    quiet = sum((_cost(t, "t0", 0.5) for t in ("l1",) + INVALID_TARGETS), [])
    a = _doc(quiet)
    assert a["prefetch.traps"]["verdict"] == NOT_DETECTED
    assert a["prefetch.traps"]["value"] == 0.0
    trapping = quiet + _cost("null", "w", 40.0, sys_share=0.5)
    b = _doc(trapping)["prefetch.traps"]
    # the value is the mean share over every invalid-target sample (6 per
    # target at 0, 6 at 0.5), the worst target and kind is named in details
    at_zero = 6 * len(INVALID_TARGETS)
    assert b["verdict"] in (DETECTED, INCONCLUSIVE)
    assert b["value"] == pytest.approx(3 / (at_zero + 6))
    assert b["ci_low"] <= b["value"] <= b["ci_high"]
    assert max(d["value"] for d in b["details"]) == pytest.approx(0.5)
    assert "null" in b["because"]


def test_invalid_target_penalty_names_the_dearest_target():
    s = _cost("l1", "t0", 0.4) + _cost("kernel", "t0", 20.0) + _cost("null", "t0", 0.45)
    a = _doc(s)
    pen = a["prefetch.invalid_target_penalty"]
    assert pen["verdict"] == DETECTED and pen["value"] == pytest.approx(50, rel=0.01)
    assert "kernel" in pen["because"] and "null" in pen["because"]
    assert a["prefetch.null_cost"]["value"] == pytest.approx(0.45, rel=0.01)
    assert a["prefetch.seed_loop"]["verdict"] == NOT_MEASURED


def _tlb(pages, d, none_ns, pf_ns):
    p = {"part": "tlb", "pages": pages, "distance": d, "stride_bytes": 4096,
         "region_bytes": 1 << 27}
    return _sample("none", p, none_ns) + _sample("prefetch", p, pf_ns)


def test_tlb_priming_compares_ahead_with_the_behind_control():
    s = _tlb("4k", -1, 100, 100) + _tlb("4k", 1, 100, 110) + _tlb("4k", 8, 100, 50) \
        + _tlb("thp", 8, 60, 40)
    a = _doc(s)["prefetch.tlb_priming"]
    assert a["verdict"] == DETECTED and a["value"] == pytest.approx(2.0, rel=0.01)
    assert "8 page(s) ahead" in a["because"] and "behind" in a["because"]
    assert {d["distance_pages"] for d in a["details"]} == {-1, 1, 8}


def _spread(arm, params, ns, rel):
    """Samples of median ns spread +-rel (a wide CI)."""
    out = _sample(arm, params, ns, n=7)
    for k, f in enumerate(np.linspace(1 - rel, 1 + rel, 7)):
        out[k]["value"] = ns * f
    return out


def test_tlb_priming_is_not_detected_when_the_behind_control_gains_as_much():
    s = _tlb("4k", -1, 100, 50) + _tlb("4k", 4, 100, 48) + _tlb("4k", 16, 100, 49)
    a = _doc(s)["prefetch.tlb_priming"]
    assert a["verdict"] == INCONCLUSIVE and a["value"] == pytest.approx(100 / 48, rel=0.01)
    assert "control gains too" in a["because"]


def test_tlb_priming_without_a_control_cannot_be_detected():
    a = _doc(_tlb("4k", 4, 100, 20))["prefetch.tlb_priming"]
    assert a["verdict"] == INCONCLUSIVE and "no d = -1 control" in a["because"]


def test_tlb_priming_with_a_ci_across_one_is_inconclusive_and_says_so():
    p = {"part": "tlb", "pages": "4k", "distance": 4, "stride_bytes": 4096,
         "region_bytes": 1 << 27}
    s = _tlb("4k", -1, 100, 100) + _spread("none", p, 100, 0.6) + _spread("prefetch", p, 80, 0.6)
    a = _doc(s)["prefetch.tlb_priming"]
    assert a["ci_low"] < 1 < a["ci_high"]
    assert a["verdict"] == INCONCLUSIVE and "reaches across" in a["because"]


def test_tlb_priming_no_gain_anywhere_is_not_detected_as_weak():
    s = _tlb("4k", -1, 100, 100) + _tlb("4k", 4, 100, 100.5) + _tlb("4k", 16, 100, 99.5)
    a = _doc(s)["prefetch.tlb_priming"]
    assert a["verdict"] == NOT_DETECTED and "dropped" in a["because"]


def _stream(d, none_ns, pf_ns):
    """The stream part at distance d, stride 64: the loop without and with prefetch."""
    p = {"part": "stream", "stride_bytes": 64, "distance": d, "region_bytes": 1 << 27}
    return _sample("none", p, none_ns) + _sample("prefetch", p, pf_ns)


def test_stream_answers_pick_the_fastest_distance():
    st = _stream
    a = _doc(st(2, 1.0, 1.0) + st(8, 1.0, 0.8) + st(32, 1.0, 0.9))
    assert a["prefetch.stream_distance"]["value"] == 8
    assert a["prefetch.stream_gain"]["verdict"] == DETECTED
    assert "prefetch 8 elements" in a["prefetch.stream_gain"]["because"]
    details = {d["distance"]: d for d in a["prefetch.stream_gain"]["details"]}
    assert details[8]["value"] == pytest.approx(1.25, rel=0.01) and details[8]["verdict"] == DETECTED
    assert details[2]["verdict"] == NOT_DETECTED
    assert all(d["ci_low"] <= d["value"] <= d["ci_high"] for d in details.values())


def test_stream_distance_is_the_shortest_of_the_distances_tied_with_the_fastest():
    st = _stream
    # a flat curve: the argmin was whichever distance the noise favoured
    flat = _doc(st(2, 1.0, 1.02) + st(8, 1.0, 1.0) + st(32, 1.0, 0.99))
    assert flat["prefetch.stream_distance"]["value"] == 2
    # a clear best distance is still the answer, and the advice names it
    clear = _doc(st(2, 1.0, 1.0) + st(8, 1.0, 0.8) + st(32, 1.0, 0.83))
    assert clear["prefetch.stream_distance"]["value"] == 8
    assert "prefetch 8 elements" in clear["prefetch.stream_gain"]["because"]
    # the details mark the ties compare reads (8 and 32 here, not 2)
    marks = {d["choice"]: d["tied"] for d in clear["prefetch.stream_distance"]["details"]}
    assert marks == {2: False, 8: True, 32: True}


def test_every_question_is_answered_on_an_empty_sweep():
    exp = get_experiment("prefetch")
    a = _doc(_cost("l1", "t0", 0.4))
    assert list(a) == [q.id for q in exp.questions]


@pytest.mark.measuring
def test_bad_kind_is_one_line_and_exit_2(tmp_path):
    db = str(tmp_path / "r.db")
    p = run_cli("run", "prefetch", "--set", "kinds=t9", db=db)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "kinds" in p.stderr
    p = run_cli("run", "prefetch", "--set", "distances=-5", db=db)
    assert p.returncode == 2 and "distances" in p.stderr


@pytest.mark.measuring
def test_quick_run_answers_every_question(tmp_path):
    db = str(tmp_path / "r.db")
    p = run_cli("run", "prefetch", "--quick", "--json", "--set", "parts=cost,list",
                "--set", "targets=l1,null,kernel", "--set", "kinds=t0",
                "--set", "levels=short", "--set", "samples=3", "--set", "min_sample_ms=0.2",
                db=db)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    a = {x["question"]: x for x in doc["answers"]}
    assert a["prefetch.null_cost"]["verdict"] == "measured"
    assert a["prefetch.traps"]["verdict"] in (NOT_DETECTED, INCONCLUSIVE)
    assert a["prefetch.tlb_priming"]["verdict"] == NOT_MEASURED


def test_declared_plots_draw_every_panel(tmp_path):
    import matplotlib.pyplot as plt

    from memfx.report.plots import figure_for
    s = _cost("l1", "t0", 0.4) + _cost("null", "t0", 0.45) + _cost("null", "none", 0.4) \
        + _tlb("4k", 1, 100, 80) + _tlb("4k", 4, 100, 60)
    run = {"id": "r", "experiment": "prefetch", "status": "complete", "params": {},
           "machine": {}}
    doc = document(run, s, include_values=True)
    fig = figure_for(doc)
    axes = fig.get_axes()
    titles = [ax.get_title() for ax in axes]
    assert any("by target" in t for t in titles) and any("4 KiB page" in t for t in titles)
    cost = next(ax for ax in axes if "by target" in ax.get_title())
    assert [t.get_text() for t in cost.get_xticklabels()] == ["l1", "null"]
    assert len(cost.patches) == 3                     # l1/t0, null/t0, null/none
    tlb = next(ax for ax in axes if "4 KiB page" in ax.get_title())
    assert sorted(len(line.get_xdata()) for line in tlb.get_lines()) == [2, 2]
    # no stream point was measured: no empty panel for it
    assert not any("stream" in t for t in titles)
    plt.close(fig)


# ---- issue 45: the targets are the addresses they are named after ---------

def _libc():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return libc


@pytest.mark.measuring
def test_target_problems_names_a_filled_hole_and_a_readable_prot_none_page():
    lab = _lab()
    addrs = target_addresses(lab)
    hole, prot = addrs["unmapped"] & ~4095, addrs["prot_none"] & ~4095
    libc = _libc()
    # a mapping made into the hole (what a later one-page mmap may do) and
    # the PROT_NONE page made readable: neither target is what it is named
    assert libc.mmap(hole, 4096, 3, 0x22 | 0x10, -1, 0) == hole        # MAP_FIXED
    assert libc.mprotect(prot, 4096, 1) == 0
    problems = target_problems(addrs)
    assert any("unmapped" in p and "is mapped" in p for p in problems)
    assert any(p.startswith("prot_none") for p in problems)
    lab.release()


def test_target_problems_rejects_kernel_targets_in_the_user_half_and_canonical_noncanonical():
    assert target_problems({"kernel": 0x7FFF_FFFF_F000}) != []
    assert target_problems({"kernel_hole": 1 << 46}) != []
    assert target_problems({"noncanonical": 0x7FFF_0000_0000}) != []
    assert target_problems({"noncanonical": 0xFFFF_8000_0000_0000}) != []
    assert target_problems({"null": 8}) != []
    assert target_problems({"kernel": KERNEL_TEXT, "noncanonical": 0x4000_0000_0000_0000,
                            "null": 0}) == []


def test_kernel_hole_and_user_limit_follow_the_paging_in_use(tmp_path):
    four, five = tmp_path / "four", tmp_path / "five"
    four.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 pku\n")
    five.write_text("processor\t: 0\nflags\t\t: fpu sse2 la57 pku\n")
    assert not five_level_paging(str(four)) and five_level_paging(str(five))
    assert user_limit(False) == 1 << 47 and user_limit(True) == 1 << 56
    # the first address of the supervisor half in each mode
    assert kernel_hole(False) == (1 << 64) - (1 << 47)
    assert kernel_hole(True) == (1 << 64) - (1 << 56)


def test_kernel_text_span_reads_kallsyms_and_refuses_hidden_addresses(tmp_path):
    shown, hidden = tmp_path / "shown", tmp_path / "hidden"
    shown.write_text("ffffffff81000000 T _stext\nffffffff81000000 T _text\n"
                     "ffffffff81e00000 T _etext\n")
    hidden.write_text("0000000000000000 T _text\n0000000000000000 T _etext\n")
    assert kernel_text_span(str(shown)) == (0xFFFFFFFF81000000, 0xFFFFFFFF81E00000)
    assert kernel_text_span(str(hidden)) is None
    assert kernel_text_span(str(tmp_path / "absent")) is None


@pytest.mark.measuring
@pytest.mark.parametrize("mode", ["throughput", "latency"])
def test_every_arm_of_a_cost_cell_prefetches_a_hole_that_is_still_unmapped(mode):
    """All arms are prepared before any runs: a table mapped for a later arm
    must not land in an earlier arm's hole."""
    exp = get_experiment("prefetch")
    lab = _lab()
    params = {"kinds": ["t0", "nta", "t1"], "seed": 1}
    trials = [exp.prepare(Point(arm, {"part": "cost", "mode": mode, "target": "unmapped"}),
                          params, lab) for arm in ("none", "t0", "nta", "t1")]
    kernels = [t.kernel for t in trials]
    prefix = "pf_rep_" if mode == "throughput" else "pf_lat_"
    assert kernels == [prefix + a for a in ("none", "t0", "nta", "t1")]
    targets = set()
    for t in trials:
        n = t.size // 8
        view = np.frombuffer(t.dst.buffer, dtype=np.uint64, count=n, offset=t.dst.offset)
        targets |= set(int(x) for x in view)
        del view
    assert len(targets) == 1                     # one hole for the cell, in every slot
    (addr,) = targets
    assert mapping_at(addr) is None
    assert mapping_at(addr - 4096) and mapping_at(addr + 4096)
    # the tables themselves are not in the hole's page
    assert all(not (t.dst.address <= addr < t.dst.address + t.size) for t in trials)
    lab.release()


@pytest.mark.measuring
def test_kernel_target_is_the_kernel_text_when_kallsyms_shows_it():
    text = kernel_text_span()
    if text is None:
        pytest.skip("/proc/kallsyms hides the kernel's addresses here")
    exp = get_experiment("prefetch")
    lab = _lab()
    trial = exp.prepare(Point("t0", {"part": "cost", "mode": "throughput", "target": "kernel"}),
                        {"kinds": ["t0"], "seed": 1}, lab)
    assert trial.extra["target_is_kernel_text"] == int(text[0] <= KERNEL_TEXT < text[1])
    lab.release()


def test_cost_answers_name_the_loop_and_each_target_against_the_l1_line():
    s = []
    for target, ns in (("l1", 0.12), ("null", 0.12), ("unmapped", 0.36), ("kernel", 0.13)):
        for arm, v in (("t0", ns), ("none", 0.04)):
            for rec in _cost(target, arm, v):
                rec["counters"]["repeated"] = 1
                s.append(rec)
    a = _doc(s)
    because = a["prefetch.invalid_target_penalty"]["because"]
    assert "unmapped 3.00x" in because and "null 1.00x" in because
    assert "back to back" in because and "walks the page tables" in because
    assert "back to back" in a["prefetch.null_cost"]["because"]
    assert "(1.00x)" in a["prefetch.null_cost"]["because"]
    # a run stored before the repeated loop: its samples say nothing of it
    old = _doc(_cost("l1", "t0", 0.4) + _cost("null", "t0", 0.4) + _cost("unmapped", "t0", 0.41))
    assert "one table load and add per prefetch" in old["prefetch.invalid_target_penalty"]["because"]


@pytest.mark.measuring
def test_probe_and_memfx_time_the_same_hot_loop(tmp_path):
    """The runner compares like with like only when the probe's loop_reg and
    memfx's pf_rep_t0 are both eight prefetcht0 of one register per trip."""
    import importlib.util
    import os
    import shutil
    if not (shutil.which("gcc") and shutil.which("objdump")):
        pytest.skip("needs gcc and objdump")
    path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "probes",
                        "prefetch_targets.py")
    spec = importlib.util.spec_from_file_location("prefetch_targets", path)
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    exe = runner.build("prefetch_targets", str(tmp_path))
    assert runner.check_eight_prefetches(exe, "loop_reg") is None
    assert runner.check_eight_prefetches(_core.__file__, "pf_rep_t0") is None
    # and the check does tell: the table loop has one prefetch per iteration
    assert runner.check_eight_prefetches(exe, "loop_table") is not None
    assert runner.check_eight_prefetches(_core.__file__, "pf_tput_t0") is not None
