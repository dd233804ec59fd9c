"""A run's duration is the time its replicas measured (issue 42: the report
said fill "took 44.8 s" where the survey said 1.8 s a replica, and a
"measuring time" of 10 min for a 1.5 min survey: a survey measures a run's
replicas in rounds, and the span from a run's start to its end counted
every other experiment's rounds)."""
import time

import pytest

from memfx.store.store import Store


def test_a_run_finished_with_its_measured_seconds_keeps_them_not_its_span(tmp_path):
    store = Store(str(tmp_path / "d.db"))
    run = store.begin_run("latency", {"replicas": 3}, "quick", {"cpu": {}})
    time.sleep(0.2)
    store.finish_run(run, "complete", measured_s=0.05)
    assert store.run(run)["duration_s"] == pytest.approx(0.05)
    other = store.begin_run("latency", {"replicas": 1}, "quick", {"cpu": {}})
    time.sleep(0.05)
    store.finish_run(other, "complete")           # no measured time given: the span
    assert store.run(other)["duration_s"] >= 0.05


@pytest.mark.measuring
def test_a_measurement_counts_only_its_replicas_time(tmp_path):
    from memfx.lab.machine import fingerprint
    from memfx.running.runner import Measurement
    store = Store(str(tmp_path / "m.db"))
    m = Measurement("misaligned", store, fingerprint(), "quick",
                    {"replicas": 2, "samples": 3, "min_sample_ms": 0.05})
    t0 = time.monotonic()
    m.measure_replica(0)
    time.sleep(1.0)                                # another experiment's round
    m.measure_replica(1)
    m.finish("complete")
    span = time.monotonic() - t0
    took = store.run(m.run_id)["duration_s"]
    assert took == pytest.approx(m.measured_s) and took < m.measured_s + 0.01
    assert 0 < took < span - 0.9                   # the second between the replicas is not its
