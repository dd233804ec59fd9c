"""How a sample is sized and taken: the one harness of the lab and of the
processes that advice starts.

`calibrated_count` finds how many calls make one sample last at least a
target time; `per_call_ns` takes samples of that many calls.  The lab
(`Lab.calibrate`) times its kernels this way, and advice's child process
(memfx/advice/child.py) times libc under other GLIBC_TUNABLES and GCC's
builds of the same copies with and without strategy strings this way too,
so that a check and the experiment it checks size their samples alike.

Standard library only, and no memfx import: the child loads this file by
its path in an interpreter started with `-I -S` (no site-packages, ~20 ms).
"""
from __future__ import annotations

from typing import Callable, List

# A sample never grows past this many calls (a function that takes no time
# at all must still end).
MAX_COUNT = 1 << 40
# How far one calibration step may grow the count at once, and the margin
# over the target it aims at (a step that lands just short costs a doubling).
MAX_GROWTH = 1000
AIM = 1.2


def calibrated_count(ticks_of: Callable[[int], float], target_ticks: float,
                     max_count: int = MAX_COUNT) -> int:
    """The smallest count tried whose call of ``ticks_of(count)`` (TSC ticks
    of ``count`` calls) lasts at least ``target_ticks``: it starts at one
    and at least doubles, growing towards the target by the last time's
    rate (at most MAX_GROWTH times in one step)."""
    count = 1
    while True:
        ticks = ticks_of(count)
        if ticks >= target_ticks or count >= max_count:
            return count
        grow = target_ticks / max(ticks, 1) * AIM
        count = min(max_count, max(count * 2, int(count * min(grow, MAX_GROWTH))))


def per_call_ns(ticks_of: Callable[[int], float], count: int, samples: int,
                tsc_hz: float) -> List[float]:
    """``samples`` samples of ``count`` calls each, in ns per call."""
    return [ticks_of(count) * 1e9 / tsc_hz / count for _ in range(samples)]
