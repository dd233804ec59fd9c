"""run() in chunks (Trial.chunks): a stream through a working set longer
than one sample, one call per chunk, consecutive calls on consecutive chunks.
The bytes a chunked write touches, the sum a chunked read returns, the
footprint check of the last chunk, and the lab's cursor are checked here."""
import numpy as np
import pytest

from memfx.experiments import bandwidth as bw
from memfx.experiments import get_experiment
from memfx.lab import _core
from memfx.lab.core import call_kernel
from memfx.lab.lab import Lab
from memfx.model.protocol import Point, Region, Trial

pytestmark = pytest.mark.measuring

CHUNK = 4096


def _index(name):
    return {k["name"]: i for i, k in enumerate(_core.kernels())}[name]


def _run(name, dst, src, size, value, count, chunks, first, dst_step, src_step, aux=0):
    return _core.run(_index(name), dst, 0, src, 0, size, value, count, aux, None, None,
                     chunks, first, dst_step, src_step)[3]


def test_a_chunked_fill_writes_the_chunks_after_the_first_and_nothing_else():
    buf = bytearray(6 * CHUNK)
    # 4 chunks of the first 4 * CHUNK bytes, starting at chunk 2, 3 calls: 2, 3, 0
    _run("fill_scalar8", buf, None, CHUNK, 0x5A5A5A5A5A5A5A5A, 3, 4, 2, CHUNK, 0)
    written = [bytes(buf[i * CHUNK:(i + 1) * CHUNK]) == b"\x5a" * CHUNK for i in range(6)]
    untouched = [bytes(buf[i * CHUNK:(i + 1) * CHUNK]) == bytes(CHUNK) for i in range(6)]
    assert written == [True, False, True, True, False, False]
    assert untouched == [False, True, False, False, True, True]


def test_a_chunked_read_sums_each_chunk_it_visits():
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, 4 * CHUNK, dtype=np.uint8).tobytes()
    got = _run("bw_sum_scalar", None, data, CHUNK, 0, 5, 4, 1, 0, CHUNK)   # 1 2 3 0 1
    sums = [bw._reference_sums(data, i * CHUNK, CHUNK) for i in range(4)]
    assert got == (sums[1] * 2 + sums[2] + sums[3] + sums[0]) % (1 << 64)
    # the same as one whole pass when the calls go round once
    whole = call_kernel(_index("bw_sum_scalar"), None, 0, data, 0, 4 * CHUNK)
    assert _run("bw_sum_scalar", None, data, CHUNK, 0, 4, 4, 0, 0, CHUNK) == whole


def test_a_chunked_random_read_reaches_every_line_of_the_set():
    rng = np.random.default_rng(5)
    lines = 64
    data = rng.integers(0, 256, lines * 64, dtype=np.uint8).tobytes()
    order = rng.permutation(lines).astype(np.uint32)
    per = 16
    got = _run("bw_random_scalar", order, data, per * 64, 0, 4, 4, 0, per * 4, 0, aux=lines)
    assert got == bw._reference_sums(data, 0, lines * 64)


def test_the_last_chunk_must_fit_and_bad_chunk_arguments_are_refused():
    buf = bytearray(4 * CHUNK)
    with pytest.raises(ValueError, match="past the end"):
        _run("fill_scalar8", buf, None, CHUNK, 1, 1, 5, 0, CHUNK, 0)
    with pytest.raises(ValueError, match="chunks"):
        _run("fill_scalar8", buf, None, CHUNK, 1, 1, 2, 2, CHUNK, 0)
    with pytest.raises(ValueError, match="chunks"):
        _run("fill_scalar8", buf, None, CHUNK, 1, 1, 0, 0, CHUNK, 0)
    # a random chunk's reach is checked against src
    order = np.zeros(16, np.uint32)
    with pytest.raises(ValueError, match="past the end"):
        _run("bw_random_scalar", order, bytes(16 * 64), 16 * 64, 0, 1, 1, 0, 0, 0, aux=17)


def test_the_lab_advances_the_cursor_so_samples_walk_the_whole_set():
    lab = Lab(min_sample_ms=0.05, hardware_counters=False)
    region = lab.buffer(8 * CHUNK)
    trial = Trial("fill_scalar8", size=CHUNK, dst=region, value=0x11, metric="bandwidth",
                  difference=False, chunks=8, dst_step=CHUNK)
    lab.call(trial, 3)
    assert trial.next_chunk == 3
    lab.call(trial, 6)
    assert trial.next_chunk == 1
    view = np.frombuffer(region.buffer, np.uint8, count=8 * CHUNK, offset=region.offset)
    assert (view == 0x11).all()


def test_bandwidth_chunks_only_working_sets_of_chunked_from_and_more():
    small = Trial("bw_read_avx2", size=bw.CHUNKED_FROM - 4096, src=Region(None, 0))
    assert bw.chunked(small, "read", small.size).chunks == 1
    big = Trial("bw_read_avx2", size=bw.CHUNKED_FROM * 2 + 100, src=Region(None, 0))
    bw.chunked(big, "read", big.size)
    assert (big.chunks, big.size, big.src_step, big.dst_step) == \
        (2 * bw.CHUNKED_FROM // bw.CHUNK_BYTES, bw.CHUNK_BYTES, bw.CHUNK_BYTES, 0)
    assert big.warmup == big.chunks          # the warm-up is one pass
    rnd = Trial("bw_random_avx2", size=bw.CHUNKED_FROM, src=Region(None, 0), dst=Region(None, 0))
    bw.chunked(rnd, "random", rnd.size)
    lines = bw.CHUNKED_FROM // 64
    assert rnd.aux == lines and rnd.src_step == 0
    assert rnd.dst_step == bw.CHUNK_BYTES // 64 * 4
    assert rnd.chunks * rnd.size // 64 == lines


def test_calibrate_trusts_a_warm_up_whose_calls_each_lasted_two_samples(monkeypatch):
    """A warm-up call of two samples or more is itself the sample length:
    calibrate() returns 1 without another call; a shorter warm-up (or a
    warm-up of another trial) leaves calibration to its own calls."""
    lab = Lab(min_sample_ms=1.0, hardware_counters=False)
    target = lab.min_sample_ms * 1e-3 * lab.tsc_hz
    calls = []

    def fake_call(row, trial, count):
        calls.append(count)
        return (trial.extra["ticks_per_call"] * count, 0, 0, 0, ())

    monkeypatch.setattr(lab, "_call", fake_call)
    monkeypatch.setattr(lab, "_row", lambda trial: None)
    long_call = Trial("fill_scalar8", size=CHUNK, extra={"ticks_per_call": 3 * target})
    lab.warm(long_call, 1)
    assert lab.calibrate(long_call) == 1 and calls == [1]
    short_call = Trial("fill_scalar8", size=CHUNK, extra={"ticks_per_call": 0.25 * target})
    lab.warm(short_call, 1)
    assert lab.calibrate(short_call) == 4 and calls == [1, 1, 1, 4]
    other = Trial("fill_scalar8", size=CHUNK, extra={"ticks_per_call": 3 * target})
    lab.warm(long_call, 1)
    before = len(calls)
    assert lab.calibrate(other) == 1 and len(calls) == before + 1   # it timed its own call


def test_the_idle_and_the_loaded_chase_of_a_cell_share_one_chain():
    """Both arms of a loaded-latency cell chase the same chain, linked once
    per cell; the next cell links its own."""
    exp = get_experiment("bandwidth")
    lab = Lab(min_sample_ms=0.05, hardware_counters=False)
    params = dict(exp.resolve("quick"), seed=3)
    linked = []
    real = lab.link_chain
    lab.link_chain = lambda *a, **k: linked.append(1) or real(*a, **k)
    size = 1 << 20
    point = {"part": "loaded", "level": "l2", "size_bytes": size, "threads": 1,
             "cpus": str(lab.cpu), "pages": "4k", "kernel": "chase_ptr",
             "loader": "bw_read_scalar", "loader_bytes": size}
    idle = exp.prepare_loaded(Point("idle_latency", point), params, lab)
    again = exp.prepare_loaded(Point("idle_latency", point), params, lab)
    assert idle.src.buffer is again.src.buffer and len(linked) == 1
    lab.release()
    exp.prepare_loaded(Point("idle_latency", point), params, lab)
    assert len(linked) == 2
