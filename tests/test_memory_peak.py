"""Issue 14, item 2: the latency experiment's memory estimate is its true
peak.  A small run is measured in a child (ru_maxrss of its descendants,
the worker included) and must stay within what the plan's check assumes
(experiments.latency.peak_bytes); building the chain with int64 numpy
temporaries used to take 12x the working set."""
import json
import subprocess
import sys

import pytest

from memfx.experiments.latency import Latency, peak_bytes

MEASURE = r"""
import json, resource, subprocess, sys
lo, hi, db = sys.argv[1], sys.argv[2], sys.argv[3]
p = subprocess.run([sys.executable, "-m", "memfx", "run", "latency", "--set", "min_size=" + lo,
                    "--set", "max_size=" + hi, "--set", "per_octave=1", "--set", "npad=0",
                    "--set", "samples=3", "--set", "refine=false", "--db", db],
                   capture_output=True, text=True)
print(json.dumps({"rc": p.returncode, "stderr": p.stderr[-2000:],
                  "maxrss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}))
"""

MiB = 1 << 20


def _peak(lo, hi, db):
    out = subprocess.run([sys.executable, "-c", MEASURE, lo, hi, db], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["rc"] == 0, res["stderr"]
    return res["maxrss"]


@pytest.mark.measuring
def test_latency_worker_peak_is_within_the_planned_estimate(tmp_path):
    pytest.importorskip("resource")
    small = _peak("512K", "1M", str(tmp_path / "small.db"))
    big = _peak("32M", "64M", str(tmp_path / "big.db"))
    grown = big - small
    allowed = peak_bytes(64 * MiB, 0) - peak_bytes(1 * MiB, 0)
    # fixed costs (imports, allocator slack) cancel in the difference; a few MiB of noise remain
    assert grown <= allowed + 8 * MiB, (
        f"the worker grew by {grown / MiB:.0f} MiB for a 64 MiB working set; the plan assumes "
        f"{allowed / MiB:.0f} MiB ({peak_bytes(64 * MiB, 0) / (64 * MiB):.1f}x)")
    # and the measurement saw the working set at all: more than one arm's chain
    # (both are alive together; allocator reuse between runs blurs the rest)
    assert grown >= 1.5 * 64 * MiB


def test_plan_refuses_what_its_peak_would_not_fit():
    exp = Latency()
    params = {"min_size": 1 << 20, "max_size": 9 << 30, "per_octave": 4, "npad": 0,
              "pages": ["4k"], "refine": False}
    machine = {"memory": {"available_bytes": 23 << 30}}
    # 9 GiB chains at npad=0: 18 GiB for both arms plus 4.5 GiB of int32 order
    assert peak_bytes(9 << 30, 0) == 2 * (9 << 30) + (9 << 30) // 2
    from memfx.model.errors import ParamError
    with pytest.raises(ParamError, match="does not fit"):
        exp.plan(params, machine)
    params["max_size"] = 6 << 30
    assert exp.plan(params, machine)
    # larger elements need fewer indices
    assert peak_bytes(64 * MiB, 7) == 2 * 64 * MiB + (64 * MiB // 64) * 4
