"""One sampling harness (issue 44 item 3): the lab's calibration and the
child process that advice starts share memfx/lab/harness.py, and the
child times a compiler's build through the core's own loop (time_call)."""
import ctypes
import json
import subprocess
import sys

import pytest

from memfx.advice import child
from memfx.advice.common import run_child
from memfx.lab import _core, harness
from memfx.lab.core import core_file, harness_file
from memfx.model.errors import MemfxError


def test_calibrated_count_is_the_first_count_that_reaches_the_target():
    calls = []

    def ticks_of(count):            # 7 ticks a call
        calls.append(count)
        return 7.0 * count
    count = harness.calibrated_count(ticks_of, 7000)
    assert 7.0 * count >= 7000
    assert all(7.0 * c < 7000 for c in calls[:-1])       # every earlier try fell short
    assert calls[0] == 1 and all(b >= 2 * a for a, b in zip(calls, calls[1:]))
    # a function that takes no time still ends, at the cap
    assert harness.calibrated_count(lambda c: 0.0, 1e9, max_count=1 << 10) == 1 << 10


def test_per_call_ns_divides_by_count_and_rate():
    assert harness.per_call_ns(lambda c: 3e9 * c, 4, 2, 3e9) == [1e9, 1e9]


@pytest.mark.measuring
def test_the_lab_calibrates_with_the_harness(monkeypatch):
    """Lab.calibrate sizes a sample by harness.calibrated_count, aiming at
    min_sample_ms in TSC ticks, and its count is what the lab uses."""
    import mmap

    from memfx.lab import lab, sampling
    from memfx.model.protocol import Region, Trial
    seen = []

    def fake(ticks_of, target):
        seen.append((ticks_of(1) > 0, target))
        return 5
    monkeypatch.setattr(sampling, "calibrated_count", fake)
    lb = lab.Lab(cpu=-1, min_sample_ms=0.5, hardware_counters=False)
    buf = mmap.mmap(-1, 8192)
    trial = Trial(kernel="copy_libc", size=64, dst=Region(buf, 0), src=Region(buf, 4096))
    assert lb.calibrate(trial) == 5
    assert seen == [(True, pytest.approx(0.5e-3 * lb.tsc_hz))]


def _address(fn):
    return ctypes.cast(fn, ctypes.c_void_p).value


@pytest.mark.measuring
def test_time_call_runs_the_function_it_is_given():
    libc = ctypes.CDLL(None)
    src = bytes(range(256)) * 16
    dst = bytearray(4096)
    ticks = _core.time_call(_address(libc.memcpy), "memcpy", dst, src, 4096, 3)
    assert ticks > 0 and bytes(dst) == src
    _core.time_call(fn=_address(libc.memset), kind="memset", dst=dst, src=b"", size=100,
                    count=1, value=7)
    assert dst[:100] == b"\x07" * 100 and dst[100] == src[100]


@pytest.mark.parametrize("kwargs, message", [
    ({"kind": "memmove"}, "kind memmove"),
    ({"fn": 0}, "null address"),
    ({"size": 8192}, "does not fit"),
    ({"count": 0}, "count must be at least 1"),
])
def test_time_call_refuses_what_it_cannot_time(kwargs, message):
    libc = ctypes.CDLL(None)
    args = dict(fn=_address(libc.memcpy), kind="memcpy", dst=bytearray(4096),
                src=bytes(4096), size=64, count=1)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        _core.time_call(**args)


@pytest.mark.measuring
def test_the_child_times_a_kernel_with_the_lab_harness():
    got = run_child({"what": "kernel", "kernel": "copy_libc", "sizes": [64, 4096],
                     "samples": 2, "min_ms": 0.05})
    assert sorted(got) == [64, 4096]
    assert all(len(v) == 2 and all(x > 0 for x in v) for v in got.values())


def test_the_child_says_one_line_why_it_cannot_measure(tmp_path):
    with pytest.raises(MemfxError, match="kernel no_such not available"):
        run_child({"what": "kernel", "kernel": "no_such", "sizes": [64], "samples": 1,
                   "min_ms": 0.05})
    with pytest.raises(MemfxError, match="what 'nothing'"):
        run_child({"what": "nothing", "sizes": [64], "samples": 1, "min_ms": 0.05})


@pytest.mark.measuring
def test_the_child_runs_with_the_standard_library_only():
    """-I -S: no site-packages; the child loads the core and the harness by
    their paths and imports nothing of memfx."""
    spec = {"core": core_file(), "harness": harness_file(), "what": "kernel",
            "kernel": "set_libc", "sizes": [128], "samples": 1, "min_ms": 0.05}
    p = subprocess.run([sys.executable, "-I", "-S", child.__file__, json.dumps(spec)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert list(json.loads(p.stdout)) == ["128"]
    source = open(child.__file__).read()
    assert "import memfx" not in source and "from memfx" not in source
