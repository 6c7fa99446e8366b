"""The worker runner: a callable in a real subprocess, armed with faults, with a structured outcome.

:func:`run_worker` runs a callable to its end; :func:`start_worker` returns a
:class:`~pytest_crashpoints.harness.Worker` handle for runs the harness steers (pause gates,
concurrent workers). Processes come from ``multiprocess`` (dill pickling), so under
``start_method="spawn"`` a closure or a lambda still crosses to the child; ``"fork"`` is the
default and the fastest. While a fork server is active (``forkserver.serving``, as inside
``run_case``), fork workers are forked by it instead of by this process; the lifetime
guarantees of ``handle`` hold for them as well.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from .._inject.failpoints import Fault
from ..errors import HarnessUsageError
from . import forkserver
from .clock import HarnessClock
from .handle import StartMethod, Worker, register, start_process
from .outcome import Outcome

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "DEFAULT_TIMEOUT",
    "StartMethod",
    "WorkerOptions",
    "run_worker",
    "start_worker",
    "stopping_workers",
]

DEFAULT_TIMEOUT = 60.0


class WorkerOptions(TypedDict, total=False):
    """The keyword arguments of :func:`start_worker` (see there), which :func:`run_worker`
    takes too."""

    args: Sequence[object]
    kwargs: Mapping[str, object] | None
    faults: Sequence[Fault]
    timeout: float
    start_method: StartMethod
    clock: HarnessClock | None
    log: str | os.PathLike[str] | None


#: Set while the harness is interrupted: no new worker may start (see ``stopping_workers``).
_stopping = threading.Event()


@contextlib.contextmanager
def stopping_workers() -> Iterator[None]:
    """While the block runs, every live worker is killed and no new one starts (starting one
    raises ``KeyboardInterrupt``): for an interrupted harness whose other threads are running
    cases, so that each ends at once and reaps its own workers."""
    from .handle import signal_live_workers

    _stopping.set()
    try:
        signal_live_workers()
        yield
    finally:
        _stopping.clear()


def start_worker(
    fn: Callable[..., object],
    /,
    *,
    args: Sequence[object] = (),
    kwargs: Mapping[str, object] | None = None,
    faults: Sequence[Fault] = (),
    timeout: float = DEFAULT_TIMEOUT,
    start_method: StartMethod = "fork",
    clock: HarnessClock | None = None,
    log: str | os.PathLike[str] | None = None,
) -> Worker:
    """Start ``fn(*args, **kwargs)`` in a new worker process armed with ``faults``.

    ``timeout`` (wall seconds, > 0) bounds the whole run, pauses included. With ``clock``, the
    worker's wall time is pinned to that harness clock. With ``log``, the worker's stdout and
    stderr (file descriptors 1 and 2) are appended to that file (e.g. in the run directory's
    ``logs/``); output still in a buffer when the worker is killed is lost, as it must be.
    Raises :class:`HarnessUsageError` for a bad timeout, start method or fault.
    """
    if not (isinstance(timeout, int | float) and 0 < timeout < float("inf")):
        raise HarnessUsageError(
            f"worker timeout {timeout!r} is not a positive number of seconds; every run needs "
            "a finite timeout (a safety bound in wall time)."
        )
    if start_method not in ("fork", "spawn"):
        raise HarnessUsageError(
            f"start_method {start_method!r} is not supported; use 'fork' (default) or 'spawn'."
        )
    if _stopping.is_set():
        raise KeyboardInterrupt("the harness is being interrupted: no new worker starts")
    plan = tuple(faults)
    for fault in plan:
        if not isinstance(fault, Fault):
            raise HarnessUsageError(
                f"{fault!r} is not a Fault; arm a point with Fault('A', Kill()) and friends."
            )
    request: dict[str, Any] = {
        "args": tuple(args),
        "kwargs": dict(kwargs or {}),
        "faults": plan,
        "timeout": float(timeout),
        "clock_path": None if clock is None else str(clock.path),
        "log_path": None if log is None else os.fspath(log),
    }
    worker = None
    if start_method == "fork":
        server = forkserver.active()
        if server is not None:
            worker = server.start_worker(fn, **request)
    if worker is None:
        worker = start_process(fn, start_method=start_method, **request)
    register(worker)
    if _stopping.is_set():  # started while the harness was being interrupted: it ends now
        from .handle import kill_group

        kill_group(worker.pid)
    return worker


def run_worker(fn: Callable[..., object], /, **options: Unpack[WorkerOptions]) -> Outcome:
    """Run ``fn(*args, **kwargs)`` in a worker process to its end and return the outcome.

    Same arguments as :func:`start_worker`. A Pause fault in ``faults`` would wait for a
    release nobody sends and end as :class:`TimedOut`; use :func:`start_worker` to steer gates.
    """
    return start_worker(fn, **options).wait()
