"""Jobs: the independent cases of one test run at once (``--crashpoints-jobs``).

In exhaustive mode every schedule is known before the first one runs. With more than one
job, each job is a thread of the harness process with a world of its own (a states engine
of its own: run directory, loopback servers, signing secret; or, with the processes engine,
the fresh world of each case) that takes the next schedule in enumeration order. A case
spends its time waiting for the agent's processes, and the jobs' processes run side by side
on the free cores. A schedule's result does not depend on the job that ran it: each world is
exact on its own (``engine``), and the processes engine starts every case from nothing.

Results are handed back in schedule order, and the first failing schedule (in that order)
ends the run as one job would end it: schedules after it that a job had already run are
dropped, so the report (its cases, the failure and its schedule) is the one a single job
gives. An interruption kills every job's processes and lets no new one start, then waits for
the jobs to end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from ..._process.worker import stopping_workers

__all__ = ["run_in_order"]

T = TypeVar("T")
S = TypeVar("S")


class _Shared(Generic[T]):
    """What the jobs and the harness's own thread share, under one condition."""

    def __init__(self, total: int) -> None:
        self.changed = threading.Condition()
        self.next = 0
        #: No item from here on runs: past the first failure (or error) found so far.
        self.limit = total
        self.stop = False
        self.results: dict[int, tuple[T, float]] = {}
        self.errors: dict[int, BaseException] = {}

    def take(self) -> int | None:
        with self.changed:
            index = self.next
            if self.stop or index >= self.limit:
                return None
            self.next = index + 1
            return index

    def end_at(self, index: int) -> None:
        """Item ``index`` ended the run (failed, or raised): nothing after it starts."""
        self.limit = min(self.limit, index + 1)
        self.changed.notify_all()


def run_in_order(
    items: Sequence[S],
    jobs: Sequence[Callable[[S], T]],
    *,
    failed: Callable[[T], bool],
    on_result: Callable[[T, float], None],
) -> T | None:
    """Run every item on one of ``jobs`` (each called from a thread of its own, one item at
    a time); call ``on_result(result, seconds)`` in item order, in this thread. Stop after
    the first result (in item order) that ``failed`` says failed, and return it; ``None`` if
    none failed. An item whose job raised is an end too: the exception is raised here, once
    every item before it has been handed to ``on_result`` (as one job would have met it)."""
    shared: _Shared[T] = _Shared(len(items))

    def job(run: Callable[[S], T]) -> None:
        while (index := shared.take()) is not None:
            started = time.monotonic()
            try:
                result = run(items[index])
            except BaseException as exc:
                with shared.changed:
                    shared.errors[index] = exc
                    shared.end_at(index)
                return
            with shared.changed:
                shared.results[index] = (result, time.monotonic() - started)
                if failed(result):
                    shared.end_at(index)
                else:
                    shared.changed.notify_all()

    threads = [
        threading.Thread(target=job, args=(run,), name=f"crashpoints-job-{n}", daemon=True)
        for n, run in enumerate(jobs)
    ]
    for thread in threads:
        thread.start()
    try:
        return _in_order(shared, failed, on_result)
    except BaseException:
        # Interrupted, or an item raised: what the jobs run now (items after it) ends, and
        # nothing new starts.
        with stopping_workers():
            _end(shared, threads)
        raise
    finally:
        _end(shared, threads)


def _end(shared: _Shared[T], threads: list[threading.Thread]) -> None:
    """No job takes another item; wait for each to finish the one it has."""
    with shared.changed:
        shared.stop = True
    for thread in threads:
        thread.join()


def _in_order(
    shared: _Shared[T], failed: Callable[[T], bool], on_result: Callable[[T, float], None]
) -> T | None:
    done = 0
    while True:
        with shared.changed:
            while done not in shared.results and done not in shared.errors and done < shared.limit:
                # A timed wait: an interruption (SIGINT) reaches this thread between two.
                shared.changed.wait(0.2)
            if done in shared.errors:
                raise shared.errors[done]
            if done >= shared.limit:
                return None
            result, seconds = shared.results.pop(done)
        on_result(result, seconds)
        done += 1
        if failed(result):
            return result
