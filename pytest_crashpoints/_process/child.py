"""The child side of a worker: what runs in the new process before and around the callable.

Its first acts: lead its own process group, die with its parent (``PR_SET_PDEATHSIG``), leave
SIGINT to the parent, redirect its output to the log, pin wall time to the harness clock and
arm the fault plan; then the callable runs (a coroutine function on an event loop of its
own, ``calling.py``), and its end is reported over the pipe: returned
(pickled value), raised (type, message, traceback text), or killed at a fail point (the record
the fail point writes just before ``SIGKILL``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

from .._inject import failpoints as _failpoints
from .._inject.failpoints import Fault
from .calling import call_to_completion
from .clock import HarnessClock, pin_wall_time

__all__ = ["child_main"]

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> None:
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        # The parent died before the death signal was set: nobody would reap us.
        os.kill(os.getpid(), signal.SIGKILL)


def _redirect_output(log_path: str) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # sys.stdout may write elsewhere than fd 1 (pytest's capture does): point both at the log,
    # buffered as Python's own streams are (stdout by block, stderr by line).
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115


def child_main(
    fn: Callable[..., object],
    args: tuple[object, ...],
    kwargs: dict[str, object],
    faults: tuple[Fault, ...],
    conn: Any,
    parent_pid: int,
    clock_path: str | None,
    log_path: str | None,
) -> None:
    """The worker's entry point (runs in the child)."""
    _die_with_parent(parent_pid)
    # SIGINT belongs to the parent: it kills the group. A worker must not die of it first.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if log_path is not None:
        _redirect_output(log_path)
    resync = None if clock_path is None else pin_wall_time(HarnessClock(clock_path))
    armed = _failpoints.install(faults, conn, on_hit=resync)
    try:
        value = call_to_completion(fn, args, kwargs)
    except BaseException as exc:
        injected_at = armed.injected_at if exc is armed.injected else None
        conn.send(
            (
                "raised",
                f"{type(exc).__module__}.{type(exc).__qualname__}",
                str(exc),
                "".join(traceback.format_exception(exc)),
                injected_at,
                armed.trace,
                armed.matched,
            )
        )
        return
    try:
        conn.send(("returned", value, armed.trace, armed.matched))
    except Exception as exc:
        conn.send(
            (
                "raised",
                f"{type(exc).__module__}.{type(exc).__qualname__}",
                f"the worker returned {type(value).__name__} that cannot be sent to the "
                f"harness ({exc}); return a picklable value",
                "".join(traceback.format_exception(exc)),
                None,
                armed.trace,
                armed.matched,
            )
        )
