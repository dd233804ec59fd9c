"""Pure work spread over this machine's CPUs by forked processes (base
layer): the analysis of a survey's runs and the drawing of its figures,
after every measurement is done -- never beside one, which would share the
caches and memory it measures."""
from __future__ import annotations

import gc
import os
from typing import Any, Callable, Optional, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_ITEMS: Sequence[Any] = []
_FN: Optional[Callable[[Any], Any]] = None


def default_jobs() -> int:
    """One process per CPU this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def can_fork() -> bool:
    """Forking is safe only while this process runs one thread."""
    import multiprocessing
    import threading
    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


def _call(i: int) -> Any:
    assert _FN is not None          # set by fork_map before the workers fork
    return _FN(_ITEMS[i])


def fork_map(fn: Callable[[T], R], items: Sequence[T], jobs: Optional[int] = None,
             cost: Optional[Callable[[T], float]] = None) -> list[R]:
    """[fn(item) for item in items], in up to ``jobs`` forked processes
    (default: one per CPU), the costliest first (``cost(item)``).  A worker
    reads its item from memory it shares (nothing is pickled on the way in)
    and sends back fn's result, pickled; whatever fails or cannot be sent in
    a worker is done again here, so the result is the same either way."""
    global _ITEMS, _FN
    jobs = default_jobs() if jobs is None else jobs
    results: list[Any] = [None] * len(items)
    left = set(range(len(items)))
    if jobs > 1 and len(items) > 1 and can_fork():
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed
        order = sorted(left, key=lambda i: -cost(items[i])) if cost is not None else sorted(left)
        _ITEMS, _FN = items, fn
        # what exists now is shared with the workers, and the collector
        # leaves it alone there (scanning it would copy every page it holds)
        gc.freeze()
        try:
            with ProcessPoolExecutor(min(jobs, len(items)),
                                     mp_context=multiprocessing.get_context("fork")) as pool:
                futures = {pool.submit(_call, i): i for i in order}
                for future in as_completed(futures):
                    i = futures[future]
                    if future.exception() is None:
                        results[i] = future.result()
                        left.discard(i)
        except Exception:          # what is left is done below
            pass
        finally:
            gc.unfreeze()
            _ITEMS, _FN = [], None
    for i in sorted(left):
        results[i] = fn(items[i])
    return results
