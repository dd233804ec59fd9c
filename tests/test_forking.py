"""forking.fork_map: pure work over the CPUs in forked processes, with the
same result as doing it here."""
import os

import pytest

from memfx.model.forking import fork_map

pytestmark = pytest.mark.measuring       # it forks processes


def test_results_come_back_in_order_and_equal_the_serial_ones():
    items = list(range(12))
    square = lambda x: (x * x, os.getpid())            # noqa: E731 -- forked, never pickled
    out = fork_map(square, items, jobs=2, cost=lambda x: x)
    assert [v for v, _ in out] == [x * x for x in items]
    if len(os.sched_getaffinity(0)) > 1:
        assert {pid for _, pid in out} != {os.getpid()}     # some ran in a worker


def test_what_fails_in_a_worker_is_done_again_here():
    parent = os.getpid()

    def only_here(x):
        if os.getpid() != parent and x % 2:
            raise RuntimeError("fails in the worker")
        return -x

    assert fork_map(only_here, list(range(6)), jobs=2) == [0, -1, -2, -3, -4, -5]


def test_one_job_runs_here():
    assert fork_map(lambda x: os.getpid(), [1, 2], jobs=1) == [os.getpid()] * 2
