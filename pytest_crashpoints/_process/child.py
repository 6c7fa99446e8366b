"""The child side of a worker: what runs in the new process before and around the callable.

Its first acts: lead its own process group, die with its parent (``PR_SET_PDEATHSIG``),
become a child subreaper (orphans below it come to it, see ``orphans``), keep the harness's
descriptors from its own children (close-on-exec, and closed in any process it forks), leave
SIGINT to the parent, redirect its output to the log, pin wall time to the harness clock, arm
its waits to move that clock (``waits``) and arm the fault plan; then the callable runs (a
coroutine function on an event loop of its own, ``calling.py``), every process it left
running is killed and named, and its end is reported over the pipe: returned (pickled
value), raised (type, message, traceback text), or killed at a fail point (the record the
fail point writes just before ``SIGKILL``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

from .._inject import failpoints as _failpoints
from .._inject.failpoints import Fault
from . import busywait, prctl, process_clock, waits
from .calling import call_to_completion
from .clock import HarnessClock, pin_wall_time
from .orphans import become_subreaper, end_children

__all__ = ["child_main"]


def _die_with_parent(parent_pid: int) -> None:
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    prctl.set_option(prctl.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        # The parent died before the death signal was set: nobody would reap us.
        os.kill(os.getpid(), signal.SIGKILL)
    become_subreaper()


# The harness's descriptors this process holds; closed in any process it forks (once: in
# that process the numbers are free for reuse).
_harness_fds: list[int] = []


def _close_harness_fds() -> None:
    _failpoints.uninstall()
    for fd in _harness_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    _harness_fds.clear()


os.register_at_fork(after_in_child=_close_harness_fds)


def _keep_from_children(fds: tuple[int, ...]) -> None:
    """Keep the harness's descriptors (the report pipe, the exit sentinel) from whatever the
    worker starts: a helper that held them would keep the harness waiting for an end that
    has come (a fake timeout). Close-on-exec for programs it runs; closed, and the fault plan
    disarmed, in a process it forks."""
    for fd in fds:
        with contextlib.suppress(OSError):
            os.set_inheritable(fd, False)
    _harness_fds[:] = fds


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
    harness_fds: tuple[int, ...] = (),
) -> None:
    """The worker's entry point (runs in the child). ``harness_fds``: descriptors of the
    harness the worker holds besides ``conn`` (the exit sentinel of a served worker)."""
    _die_with_parent(parent_pid)
    _keep_from_children((conn.fileno(), *harness_fds))
    # SIGINT belongs to the parent: it kills the group. A worker must not die of it first.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if log_path is not None:
        _redirect_output(log_path)
    clock = None if clock_path is None else HarnessClock(clock_path)
    resync = None if clock is None else pin_wall_time(clock)
    waits.install()
    waits.arm(clock, resync or _still, parent=parent_pid)
    if busywait.install():
        busywait.arm(clock_path)
    armed = _failpoints.install(
        faults, conn, on_hit=resync, on_hold=None if clock is None else process_clock.hold
    )
    try:
        value = call_to_completion(fn, args, kwargs)
    except BaseException as exc:
        _report_left_running(conn)
        injected_at = armed.injected_at if exc is armed.injected else None
        conn.send(
            (
                "raised",
                f"{type(exc).__module__}.{type(exc).__qualname__}",
                str(exc),
                _user_traceback(exc),
                injected_at,
                armed.trace,
                armed.matched,
            )
        )
        return
    _report_left_running(conn)
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


def _still() -> None:
    """A process without a clock has no harness time to catch up with."""


# The harness's own frames, above the user's callable in every worker's traceback.
_HARNESS_DIRS = tuple(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), name) + os.sep
    for name in ("_process", "_harness")
)


def _user_traceback(exc: BaseException) -> str:
    """The traceback text of ``exc`` from the user's code down: the frames of the harness
    that called it (this module, the case's entry points) are left out, all of them when
    the harness raised it itself (a command that failed: its message says why)."""
    tb = exc.__traceback__
    while tb is not None:
        if not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_HARNESS_DIRS):
            break
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _report_left_running(conn: Any) -> None:
    """Kill whatever the callable left running below this process; name it to the harness."""
    left = end_children()
    if left:
        conn.send(("left", tuple(left)))
