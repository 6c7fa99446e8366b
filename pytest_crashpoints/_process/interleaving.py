"""Forced interleavings: run workers concurrently in an order chosen through pause points.

An order is a list of steps ``(worker, point)``: "let ``worker`` run until it reaches its next
call of ``point``, and hold it there", ``(worker, point, hit)``: "... until its ``hit``-th call
of ``point``", or ``(worker, None)``: "let it run to its end". Each
worker is armed with a :class:`Pause` at every point named for it (the k-th step naming a point
pauses at its k-th call), so between steps every worker that the order has not released yet is
held at a gate, and what happens after a point happens in the order's order, every time: a race
becomes reproducible, not lucky.

Code before a worker's first gate runs concurrently with everything else; name a point early
in the worker (for example ``"D"``, which the delivery harness fires before the handler) to
hold it from the start. Workers the order does not run to their end are released and run to
their end after the last step, all released at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from .._inject.failpoints import Fault, Pause
from ..errors import HarnessUsageError, WorkerNotPaused
from . import busywait
from .clock import HarnessClock
from .handle import StartMethod, Worker
from .outcome import Completed, Outcome
from .plan import nobody_alone
from .worker import DEFAULT_TIMEOUT, start_worker

__all__ = ["Step", "run_interleaved"]

Step = tuple[int, str | None] | tuple[int, str, int]


def _gates(order: Sequence[Step], workers: int) -> tuple[list[str | None], list[list[Fault]]]:
    """The gate each step waits for (None: the end), and the pause faults of each worker."""
    seen: dict[tuple[int, str], int] = {}
    finished: set[int] = set()
    gates: list[str | None] = []
    faults: list[list[Fault]] = [[] for _ in range(workers)]
    for index, step in enumerate(order):
        worker, point, *at = step
        if not (isinstance(worker, int) and 0 <= worker < workers):
            raise HarnessUsageError(
                f"step {index} {step!r} names worker {worker!r}; there are workers "
                f"0..{workers - 1}."
            )
        if worker in finished:
            raise HarnessUsageError(
                f"step {index} {step!r} comes after worker {worker} was run to its end; drop "
                "it or move the (worker, None) step last for that worker."
            )
        if point is None:
            finished.add(worker)
            gates.append(None)
            continue
        hit = seen.get((worker, point), 0) + 1
        if at:
            if not isinstance(at[0], int) or at[0] < hit:
                raise HarnessUsageError(
                    f"step {index} {step!r}: hit {at[0]!r} of {point!r} is not after the "
                    f"calls the order already passed ({hit - 1}); give a later hit."
                )
            hit = at[0]
        seen[worker, point] = hit
        gate = f"worker {worker} at {point} #{hit}"
        faults[worker].append(Fault(point, Pause(gate), hit=hit))
        gates.append(gate)
    return gates, faults


def _held(
    workers: Sequence[Worker], held: Sequence[str | None], index: int
) -> list[tuple[Worker, str]]:
    """The workers held at a gate, each with its gate, but worker ``index``."""
    pairs = enumerate(zip(workers, held, strict=True))
    return [(w, gate) for n, (w, gate) in pairs if gate and n != index]


def _alone(
    clock: HarnessClock | None, workers: Sequence[Worker], held: Sequence[str | None], index: int
) -> Path | None:
    """The clock's path when worker ``index`` is to run while every other worker still alive
    is held at a gate (``busywait``: its futile lock waits need not be slept out)."""
    if clock is None:
        return None
    for other, (worker, gate) in enumerate(zip(workers, held, strict=True)):
        if other != index and gate is None and worker.outcome is None:
            return None
    return clock.path


def _waited(worker: Worker, gate: str | None) -> bool:
    """Wait for ``worker`` to reach ``gate`` (True: it is held there) or, with no gate, to
    end (False). A worker that ends without reaching its gate raises :class:`WorkerNotPaused`
    when it completed (the order could not be forced); killed or raising, it skips the rest
    of its steps (False)."""
    if gate is None:
        worker.wait()
        return False
    try:
        worker.wait_paused(gate)
    except WorkerNotPaused as error:
        if isinstance(error.outcome, Completed):
            raise
        return False
    return True


def run_interleaved(
    calls: Sequence[Callable[[], object]],
    order: Sequence[Step],
    *,
    faults: Sequence[Sequence[Fault]] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    start_method: StartMethod = "fork",
    clock: HarnessClock | None = None,
    blocked: Callable[[], bool] | None = None,
) -> list[Outcome]:
    """Run ``calls[i]`` in worker ``i``, all at once, forced through ``order``.

    ``faults[i]`` are extra faults for worker ``i`` (e.g. a kill). ``timeout`` bounds each
    worker's run. Returns the outcomes in worker order.

    ``blocked()`` says whether a process waits for a lock in a server (a PostgreSQL row
    lock) that only a held worker can hold: while a worker runs with others held, it is
    asked every 50 ms, and when it holds, every held worker is released, as a server would
    let the lock's holder go on (the order is forced up to the lock; from there the workers
    run as they would in production). Without it, such a wait lasts until the timeout.

    A worker killed, raising or timing out before a gate of its own skips its remaining steps.
    A worker that *completes* without reaching a gate means the order could not be forced:
    every worker is killed and :class:`WorkerNotPaused` is raised. Raises
    :class:`HarnessUsageError` for a step naming no worker or following that worker's end.
    """
    extra = [list(f) for f in faults] if faults is not None else [[] for _ in calls]
    if len(extra) != len(calls):
        raise HarnessUsageError(
            f"faults has {len(extra)} entries for {len(calls)} workers; give one (possibly "
            "empty) list per worker."
        )
    gates, pauses = _gates(order, len(calls))
    workers: list[Worker] = []
    # Several workers live at once: none runs alone (its timed waits are real, see
    # ``waits``) unless ``running_alone`` names it while the others are held.
    with nobody_alone(None if clock is None else clock.path):
        try:
            for index, call in enumerate(calls):
                workers.append(
                    start_worker(
                        call,
                        faults=[*pauses[index], *extra[index]],
                        timeout=timeout,
                        start_method=start_method,
                        clock=clock,
                    )
                )
            held: list[str | None] = [None] * len(workers)
            for step, gate in zip(order, gates, strict=True):
                index = step[0]
                worker = workers[index]
                if worker.outcome is not None:
                    continue
                unblocked = False
                with busywait.running_alone(
                    _alone(clock, workers, held, index), worker, _held(workers, held, index)
                ):
                    holding = held[index]
                    if holding is not None:
                        worker.release(holding)
                        held[index] = None
                    if blocked is not None and _held(workers, held, index):
                        unblocked = worker.wait_unless(blocked, gate=gate)
                    if not unblocked and not _waited(worker, gate):
                        continue
                if unblocked:  # out of running_alone: the held workers move from now on
                    for n, (other, holding) in enumerate(zip(workers, held, strict=True)):
                        if holding is not None and other.outcome is None:
                            other.release(holding)
                        held[n] = None
                    if not _waited(worker, gate):
                        continue
                held[index] = gate
            # Release every held worker before waiting for any: one may wait on another.
            for worker, holding in zip(workers, held, strict=True):
                if holding is not None and worker.outcome is None:
                    worker.release(holding)
            for worker in workers:
                worker.wait()
        finally:
            for worker in workers:
                worker.kill()
    return [worker.kill() for worker in workers]
