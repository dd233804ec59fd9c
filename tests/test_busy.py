"""memfx on a busy machine and a moving host (issue 40): an implausible
sample is rejected, not fatal; a calibration that never gets a clean try
ends within its budget; replicas in two host states are reported as such;
how busy the machine was is measured and said."""
import numpy as np
import pytest

from memfx.analysis.results import busy_caution, busy_summary
from memfx.model import stats
from memfx.model.answers import Question, combine_replicas
from memfx.model.errors import MemfxError
from memfx.model.findings import DETECTED, INCONCLUSIVE, NOT_DETECTED
from memfx.model.protocol import Region, Trial
from memfx.report.screen import quality_line


def _chase_lab():
    from memfx.lab.lab import Lab
    from test_core import _chain
    lab = Lab(cpu=-1, min_sample_ms=0.05)
    chain, base, _ = _chain(64)
    trial = Trial("chase_ptr", src=Region(chain, 0, len(chain.buffer), base), metric="time")
    return lab, trial, chain


@pytest.mark.measuring
def test_an_implausible_sample_among_good_ones_is_rejected_not_fatal():
    """A cycle estimate from a calibration the host stalled (here: 0.001
    cycles per tick) makes a chase read < 2 cycles per load: the sample is
    rejected with its reason, the next good one is kept, and the run goes on."""
    from memfx.lab import busy as _lab
    lab, trial, _chain_keep = _chase_lab()
    try:
        good = lab.sample(trial, 1000, lab.cycles_per_tick()[0])
        bad = lab.sample(trial, 1000, 0.001)
        assert bad["rejected"] and bad["reason"] == "implausible", bad
        assert ("cycles per dependent load" in bad["counters"]["implausible"]
                or "bytes/cycle" in bad["counters"]["implausible"])
        again = lab.sample(trial, 1000, lab.cycles_per_tick()[0])
        assert good["reason"] != "implausible" and again["reason"] != "implausible"
        # a streak short of the limit never raises, and a fresh calibration
        # that makes the figure plausible ends the streak
        for _ in range(_lab.IMPLAUSIBLE_PERSIST_SAMPLES + 3):
            rec = lab.sample(trial, 1000, 0.001)
            assert rec["rejected"]
    finally:
        lab.close()


@pytest.mark.measuring
def test_implausibility_that_persists_under_fresh_calibration_fails_the_run(monkeypatch):
    from memfx.lab import busy as _lab
    lab, trial, _chain_keep = _chase_lab()
    try:
        monkeypatch.setattr(lab, "cycles_per_tick", lambda *a, **k: (0.001, 0.0))
        with pytest.raises(MemfxError, match="in a row and under a fresh cycle calibration"):
            for _ in range(_lab.IMPLAUSIBLE_PERSIST_SAMPLES + 1):
                rec = lab.sample(trial, 1000, 0.001)
                # samples switched out by the busy machine do not count
                # toward the streak; only clean ones do
                assert rec["reason"] in ("implausible", "context_switch", "migrated",
                                         "page_fault")
    finally:
        lab.close()


class _NeverCleanLab:
    """A lab whose every team call is preempted: no try is ever clean."""
    tsc_hz = 1e9
    min_sample_ms = 1.0

    def __init__(self):
        self.calls = []

    def call(self, trial, count):
        self.calls.append(count)


def test_a_calibration_that_never_gets_a_clean_try_ends_within_its_budget(monkeypatch):
    from memfx.experiments import _kit
    lab = _NeverCleanLab()
    now = [0.0]

    def clock():
        now[0] += 0.05          # every try takes 50 ms of wall time
        return now[0]

    def dirty_window(region, threads):
        # the window of the last call: its count's ticks plus a preemption
        return {}, [lab.calls[-1]]

    monkeypatch.setattr(_kit, "read_area", dirty_window)
    monkeypatch.setattr(_kit, "check_call", lambda kernel, header, slots: {
        "thread_switches": 3, "overlap": 0.5, "window_ticks": slots[0] * 1000})
    count = _kit.calibrated_count(lab, "at_xadd", Region(None, 0), 2, 0, floor=16,
                                  max_seconds=1.0, clock=clock)
    assert now[0] <= 1.0 + 0.2          # ended at its budget, not at 2^34 iterations
    assert len(lab.calls) <= 25
    # the count came from the windows seen: ~1 ms at 1000 ticks a count
    assert 16 <= count <= 4 * 1000 and max(lab.calls) < 1 << 20


def test_synthetic_bimodal_replicas_give_two_states_and_an_inconclusive_verdict():
    q = Question("x.cas_ratio", "how much slower is CAS?", "x", "004", "ratio of medians",
                 band=(0.9, 1.1))
    reps = [{"verdict": DETECTED, "value": 2.33, "ci_low": 2.2, "ci_high": 2.45},
            {"verdict": DETECTED, "value": 2.75, "ci_low": 2.6, "ci_high": 2.9},
            {"verdict": NOT_DETECTED, "value": 1.02, "ci_low": 0.98, "ci_high": 1.06}]
    pooled = {"question": q.id, "verdict": DETECTED, "value": 2.0, "ci_low": 1.9,
              "ci_high": 2.1, "unit": "x", "because": "CAS is 2.0x slower"}
    out = combine_replicas(q, pooled, reps)
    assert out["verdict"] == INCONCLUSIVE
    states = out["states"]
    assert [len(s["replicas"]) for s in states] == [1, 2]
    assert states[0]["verdict"] == NOT_DETECTED and states[1]["verdict"] == DETECTED
    assert "two states" in out["because"] and "1.02" in out["because"]
    # the CI holds both states
    assert out["ci_low"] <= 1.02 and out["ci_high"] >= 2.6


def test_states_that_agree_keep_their_verdict_and_replicas_that_scatter_are_no_states():
    q = Question("x.ratio", "ratio?", "x", "004", "ratio of medians", band=(0.9, 1.1))
    reps = [{"verdict": DETECTED, "value": v, "ci_low": v * 0.97, "ci_high": v * 1.03}
            for v in (2.3, 2.35, 3.4)]
    pooled = {"question": q.id, "verdict": DETECTED, "value": 2.6, "unit": "x",
              "because": "2.6x"}
    out = combine_replicas(q, pooled, reps)
    assert out["verdict"] == DETECTED and len(out["states"]) == 2
    assert stats.replica_states([1.44, 2.0, 2.63]) is None        # a scatter, not states
    assert stats.replica_states([1.0, 1.01, 0.99, 1.02]) is None


def test_replica_states_seldom_split_replicas_of_one_state():
    rng = np.random.default_rng(7)
    false = 0
    for _ in range(500):
        x = np.exp(rng.normal(0, 0.05, 5))
        false += stats.replica_states(x, x * 0.97, x * 1.03) is not None
    assert false <= 5


def _cell(wall, others, steal=0.0, total=None, load=None):
    c = {"busy_wall_s": wall, "busy_others_s": others, "busy_steal_s": steal,
         "busy_all_s": total if total is not None else 2 * wall}
    if load is not None:
        c["busy_load_1m"] = load
    return {"counters": c, "rejected": False}


def test_busy_is_measured_and_said():
    quiet = [_cell(1.0, 0.05), _cell(1.0, 0.02)] + [{"counters": {}, "rejected": False}] * 8
    b = busy_summary(quiet)
    assert b["others_cpus"] == pytest.approx(0.035) and not b["busy"]
    assert busy_caution(b) is None
    busy = [_cell(1.0, 1.6, load=3.1), _cell(1.0, 1.8, steal=0.2)] + \
        [{"counters": {}, "rejected": True}] * 2 + [{"counters": {}, "rejected": False}] * 2
    b = busy_summary(busy)
    assert b["busy"] and b["others_cpus"] == pytest.approx(1.7)
    assert b["rejected_share"] == pytest.approx(2 / 6, abs=1e-3) and b["load_1m"] == 3.1
    assert b["steal_share"] == pytest.approx(0.2 / 4)
    caution = busy_caution(b)
    assert caution["id"] == "busy_machine" and "1.7 CPUs" in caution["message"]
    line = quality_line([{"points": [], "busy": b}, {"points": [], "busy": None}], "s-1", 200)
    assert "busy: other work kept up to 1.7 CPUs busy" in line
    assert busy_summary([{"counters": {}}]) is None        # older runs: not measured


@pytest.mark.measuring
def test_a_measured_cell_records_how_busy_the_machine_was():
    from memfx.lab.busy import busy_between, cpu_snapshot
    a = cpu_snapshot()
    x = 0
    for i in range(200_000):
        x += i
    b = cpu_snapshot()
    c = busy_between(a, b)
    assert c["busy_wall_s"] > 0 and c["busy_all_s"] >= 0


def test_short_cells_of_a_quiet_machine_do_not_add_up_to_busy():
    """/proc/stat counts whole 10 ms ticks: a 4 ms cell sees one (others
    +6 ms) or none (others -4 ms).  Summed as they are, a quiet machine
    reads quiet; clamped cell by cell it read 0.8 CPU of other work."""
    from memfx.lab import busy as _busy
    snaps = []
    own = nonidle = 0.0
    for i in range(300):
        snaps.append((i * 0.004, own, nonidle, 0.0, i * 0.008, 0.1))
        own += 0.004
        nonidle += 0.010 if i % 5 in (0, 3) else 0.0      # 2 ticks in 5 cells of 4 ms
        snaps.append((i * 0.004 + 0.004, own, nonidle, 0.0, i * 0.008 + 0.008, 0.1))
    cells = [{"counters": _busy.busy_between(snaps[2 * i], snaps[2 * i + 1]), "rejected": False}
             for i in range(300)]
    assert min(c["counters"]["busy_others_s"] for c in cells) < 0
    b = busy_summary(cells)
    assert b["others_cpus"] == pytest.approx(0.0, abs=1e-6) and not b["busy"]


@pytest.mark.measuring
def test_memfx_processes_above_a_worker_count_as_memfx_not_other_work():
    """The runner that decodes and stores a worker's samples is memfx's own
    work: a child of a process whose command line names memfx lists it."""
    import os
    import subprocess
    import sys
    child = ("import os; from memfx.lab.busy import _memfx_ancestors; "
             "print(os.getppid(), _memfx_ancestors())")
    parent = ("import subprocess, sys; "
              f"subprocess.run([sys.executable, '-c', {child!r}], check=True)  # memfx")
    out = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True,
                         check=True, env=dict(os.environ)).stdout.split(maxsplit=1)
    ppid, ancestors = int(out[0]), eval(out[1])
    assert ancestors[:1] == [ppid]


def _answer(q, value, lo, hi, **kw):
    return dict({"question": q, "verdict": DETECTED, "value": value, "ci_low": lo,
                 "ci_high": hi, "unit": "x", "better": "lower"}, **kw)


def test_compare_reads_a_move_between_known_states_as_host_state_changed():
    from memfx.analysis.compare import HOST_STATE, REGRESSED, compare
    # A saw both states in its replicas; B's replicas all sat in the slow one
    states = [{"value": 1.3, "share": 1 / 3, "replicas": [2], "ci_low": 1.25, "ci_high": 1.36,
               "verdict": DETECTED},
              {"value": 2.4, "share": 2 / 3, "replicas": [0, 1], "ci_low": 2.3, "ci_high": 2.55,
               "verdict": DETECTED}]
    a = _answer("atomics.cas_ratio", 1.35, 1.25, 1.45, states=states)
    b = _answer("atomics.cas_ratio", 2.45, 2.35, 2.55)
    doc = compare([a], [b])
    assert doc["rows"][0]["verdict"] == HOST_STATE and not doc["regressed"]
    assert "two host states" in doc["rows"][0]["reason"]
    # the same move with no state seen anywhere is a regression
    plain = compare([dict(a, states=None)], [b])
    assert plain["rows"][0]["verdict"] == REGRESSED
    # states seen in the machine's history, neither side's replicas split
    hist = compare([dict(a, states=None)], [b], history={"atomics.cas_ratio":
                                                         [1.32, 2.38, 1.30, 2.42]}, n_history=4)
    assert hist["rows"][0]["verdict"] == HOST_STATE
    # a history that only ever saw the fast state does not excuse the move
    once = compare([dict(a, states=None)], [b], history={"atomics.cas_ratio":
                                                         [1.32, 1.34, 1.30, 1.33]}, n_history=4)
    assert once["rows"][0]["verdict"] == REGRESSED


def test_compare_marks_a_side_that_ran_busy():
    from memfx.analysis.compare import compare, summary
    from memfx.report.screen import compare_lines
    a = _answer("latency.memory", 100.0, 97.0, 103.0, unit="ns")
    b = _answer("latency.memory", 140.0, 135.0, 146.0, unit="ns", busy=True)
    doc = compare([a], [b], a_label="survey s-a", b_label="survey s-b")
    assert doc["busy_sides"] == ["survey s-b"] and doc["rows"][0]["busy"] == "B"
    assert "survey s-b ran on a busy machine" in summary(doc)
    lines = compare_lines(doc, 120)
    assert any("latency.memory" in x and "(B busy)" in x for x in lines)


def test_the_core_speed_explains_an_absolute_move_no_larger_than_its_own():
    """A page fault 1.57x slower while the core read L1d at 0.61x its speed
    (two surveys of an A/A minutes apart, docs/stability.md) moved with the
    host; the same move with the core unchanged, or a move well past the
    core's, or the other way, is the machine's."""
    from memfx.analysis.compare import HOST_STATE, IMPROVED, REGRESSED, compare, summary
    a = _answer("fill_alloc.ns_per_page", 1239.0, 1180.0, 1300.0, unit="ns", core_gbps=350.0)
    b = _answer("fill_alloc.ns_per_page", 1948.0, 1850.0, 2050.0, unit="ns", core_gbps=213.0)
    doc = compare([a], [b])
    row = doc["rows"][0]
    assert row["verdict"] == HOST_STATE and "0.61x" in row["reason"], row
    assert "the core read L1d at 0.61x A's speed in B (350 -> 213 GB/s)" in summary(doc)
    assert compare([a], [dict(b, core_gbps=345.0)])["rows"][0]["verdict"] == REGRESSED
    assert compare([dict(a, core_gbps=None)], [b])["rows"][0]["verdict"] == REGRESSED
    far = dict(b, value=3100.0, ci_low=3000.0, ci_high=3200.0)
    assert compare([a], [far])["rows"][0]["verdict"] == REGRESSED
    # faster while the core was slower: not the host's doing
    quicker = dict(b, value=700.0, ci_low=680.0, ci_high=720.0)
    assert compare([a], [quicker])["rows"][0]["verdict"] == IMPROVED
    # a rate moves the core's way, a time the other way
    ra = _answer("bandwidth.write_l1d", 160.0, 155.0, 165.0, unit="GB/s", better="higher",
                 core_gbps=350.0)
    rb = dict(ra, value=98.7, ci_low=95.0, ci_high=102.0, core_gbps=213.0)
    assert compare([ra], [rb])["rows"][0]["verdict"] == HOST_STATE
    # ratios of two arms cancel the core's speed: never excused by it
    xa = _answer("fill_alloc.calloc_vs_memset_fresh", 1.0, 0.97, 1.03, core_gbps=350.0)
    xb = dict(xa, value=1.6, ci_low=1.55, ci_high=1.65, core_gbps=213.0)
    assert compare([xa], [xb])["rows"][0]["verdict"] == REGRESSED


def test_busy_summary_keeps_the_core_speed_per_run_and_replica():
    cells = [dict(_cell(1.0, 0.05), replica=0), dict(_cell(1.0, 0.05), replica=0),
             dict(_cell(1.0, 0.05), replica=1)]
    for c, v in zip(cells, (300.0, 310.0, 200.0)):
        c["counters"]["core_read_gbps"] = v
    b = busy_summary(cells)
    assert b["core_read_gbps"] == 300.0 and b["core_read_gbps_replicas"] == [305.0, 200.0]
    assert "core_read_gbps" not in busy_summary([_cell(1.0, 0.05)])    # older runs


@pytest.mark.measuring
def test_the_lab_times_the_core_speed_as_an_l1d_read():
    from memfx.lab.lab import Lab
    from memfx.lab.sampling import CORE_REFERENCE_KERNELS
    lab = Lab(cpu=-1)
    try:
        speeds = [lab.core_speed() for _ in range(3)]
        row = lab._core_reference[0]
    finally:
        lab.close()
    # every x86-64 core loads at least 8 bytes a cycle from L1d, at 1 GHz
    # or more; no core loads 1,000 GB/s
    assert all(8.0 < v < 1000.0 for v in speeds), speeds
    assert row.name in CORE_REFERENCE_KERNELS and row.supported


def _preempted_sample(monkeypatch, size, llc_bytes, window_ns, waited_ns):
    """One set_sse sample of `size` bytes whose window lasted window_ns and
    saw one context switch with waited_ns of run-queue wait (the core call,
    the counters and the schedstat file faked; the rule under test is the
    lab's, not the scheduler's)."""
    from memfx.lab.lab import Lab
    lab = Lab(cpu=-1)
    lab.llc_bytes = llc_bytes
    ticks = window_ns * lab.tsc_hz / 1e9
    monkeypatch.setattr(lab, "_call", lambda row, trial, count: (ticks, 0, 0, 0, None))
    monkeypatch.setattr(lab.perf, "decode", lambda deltas: {"context_switches": 1})
    waits = iter([1_000_000, 1_000_000 + waited_ns])
    monkeypatch.setattr(lab, "_run_queue_wait", lambda: next(waits))
    trial = Trial("set_sse", size=size, metric="bandwidth", difference=False)
    try:
        return lab.sample(trial, 1, 3.0)
    finally:
        lab.close()


@pytest.mark.measuring
def test_a_preempted_dram_sample_is_corrected_a_cached_one_retaken(monkeypatch):
    """A working set beyond the last-level cache streams from DRAM whether or
    not a neighbour ran: its preempted sample keeps the time it ran (window
    less run-queue wait); a cached one, or one that mostly waited, is rejected."""
    from memfx.lab.sampling import PREEMPT_CORRECT_MAX_SHARE
    mib = 1 << 20
    rec = _preempted_sample(monkeypatch, 64 * mib, 32 * mib, 20e6, 8e6)
    assert not rec["rejected"], rec
    assert rec["ns"] == pytest.approx(12e6) and rec["counters"]["wall_ns"] == pytest.approx(20e6)
    assert rec["value"] == pytest.approx(64 * mib / 12e6)          # GB/s of the 12 ms it ran
    cached = _preempted_sample(monkeypatch, 16 * mib, 32 * mib, 20e6, 8e6)
    assert cached["rejected"] and cached["reason"] == "context_switch"
    assert cached["ns"] == pytest.approx(20e6) and "wall_ns" not in cached["counters"]
    waited = _preempted_sample(monkeypatch, 64 * mib, 32 * mib, 20e6,
                               (PREEMPT_CORRECT_MAX_SHARE + 0.05) * 20e6)
    assert waited["rejected"] and waited["reason"] == "context_switch"
    unknown_llc = _preempted_sample(monkeypatch, 64 * mib, None, 20e6, 8e6)
    assert unknown_llc["rejected"]


def test_a_cell_whose_samples_are_all_preempted_ends_its_retakes_on_the_time_budget(monkeypatch):
    """Every sample rejected (a busy machine): the planned visits run, the
    retakes stop once they have taken as long as the plan did (or
    RETAKE_MIN_SECONDS), and the cell says it was cut short."""
    import random

    from memfx.running import worker as _worker
    from test_protocol import ColdStartLab, TwoArms

    clock = [0.0]
    monkeypatch.setattr(_worker.time, "monotonic", lambda: clock[0])

    class Preempted(ColdStartLab):
        def sample(self, trial, count, cycles_per_tick):
            clock[0] += 0.1                   # each sample takes 0.1 s of the clock
            rec = super().sample(trial, count, cycles_per_tick)
            return dict(rec, rejected=True, reason="context_switch")

    exp = TwoArms()
    lab = Preempted({"slow": 1.0, "fast": 1.0}, amplitude=0.0)
    monkeypatch.setattr(_worker, "settle", lambda *a, **k: {})
    recs = _worker.measure_cell(exp, exp.plan({}, {}), {"samples": 20}, lab, random.Random(1))
    planned = 2 * 20 * 1               # two arms x 20 samples; a rejected N stops the N/2N pair
    retakes = len(recs) - planned
    # the plan took 4 s: its retakes get 2 s (20 samples); without the
    # budget they would make another 40
    assert 0 < retakes <= _worker.RETAKE_SHARE * 4.0 / 0.1 + 1 < 40
    assert recs[0]["counters"].get("retakes_cut") == 1
    # a quiet cell never hits it
    lab = ColdStartLab({"slow": 1.0, "fast": 1.0}, amplitude=0.0)
    recs = _worker.measure_cell(exp, exp.plan({}, {}), {"samples": 5}, lab, random.Random(1))
    assert "retakes_cut" not in recs[0]["counters"]
    # the core's speed after the cell, once per cell (results.busy_summary)
    assert recs[0]["counters"]["core_read_gbps"] == 300.0
    assert not any("core_read_gbps" in r["counters"] for r in recs[1:])
