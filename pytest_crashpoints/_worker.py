"""The worker runner: a callable in a real subprocess, armed with faults, with a structured outcome.

:func:`run_worker` runs a callable to its end; :func:`start_worker` returns a :class:`Worker`
handle for runs the harness steers (pause gates, concurrent workers). Processes come from
``multiprocess`` (dill pickling), so under ``start_method="spawn"`` a closure or a lambda still
crosses to the child; ``"fork"`` is the default and the fastest. While a fork server is active
(``_forkserver.serving``, as inside ``run_case``), fork workers are forked by it instead of by
this process; everything below holds for them as well.

Lifetime guarantees
-------------------
* Every worker is the leader of its own process group (``setpgid`` in the child and, against
  the race, in the parent). Whatever the worker starts is in that group.
* On Linux the child sets ``PR_SET_PDEATHSIG=SIGKILL``: if the parent dies, even by SIGKILL,
  the kernel kills the worker. The signal is tied to the parent *thread* that started the
  worker, so start workers from a thread that outlives them (normally the main thread).
* The parent keeps a registry of live workers. Their groups are killed and reaped when a run
  times out, when the harness wait is interrupted (``KeyboardInterrupt`` or any other
  exception), when a :class:`Worker` used as a context manager exits, when
  :func:`kill_live_workers` is called, and at interpreter exit of the parent (registered after
  ``multiprocess``'s own exit hook, so it runs first and that hook never waits on a hung
  worker).
* When a worker exits, its group is killed before the worker is reaped (the zombie keeps the
  group id from being reused), so nothing it started survives it.
* Timeouts are wall-clock safety bounds, not harness time. Waiting is a blocking
  ``multiprocess.connection.wait`` on the worker's pipe and exit sentinel, never a polling sleep.

The child's first act is to install the fault plan (``_failpoints.install``) and, with a
``clock``, to pin wall time to the harness clock; then the callable runs. Its end is reported
over a pipe: returned (pickled value), raised (type, message, traceback text), or killed at a
fail point (the record written just before ``SIGKILL``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, TypeAlias

import multiprocess
from multiprocess.connection import wait as _wait_ready

from . import _failpoints
from ._clock import HarnessClock, pin_wall_time
from ._errors import HarnessError, HarnessUsageError, WorkerNotPaused
from ._failpoints import Fault, Hit

__all__ = [
    "Completed",
    "Died",
    "Killed",
    "Outcome",
    "Raised",
    "StartMethod",
    "TimedOut",
    "Worker",
    "kill_live_workers",
    "live_worker_pids",
    "run_worker",
    "start_worker",
]

StartMethod: TypeAlias = Literal["fork", "spawn"]

DEFAULT_TIMEOUT = 60.0
_PR_SET_PDEATHSIG = 1


@dataclasses.dataclass(frozen=True)
class Completed:
    """The callable returned ``value``."""

    value: Any
    hits: tuple[Hit, ...]
    matched: tuple[int, ...]
    duration: float
    kind: Literal["completed"] = "completed"


@dataclasses.dataclass(frozen=True)
class Killed:
    """A Kill fault fired: at ``point``, on its ``hit``-th call (``context`` of that call).

    ``fired_at`` is the fail point call where the kill happened: the same as ``point``, except
    for a deferred action (the transport's C fires at the next fail point of any name).
    """

    point: str
    hit: int
    context: Mapping[str, object]
    fired_at: str
    hits: tuple[Hit, ...]
    matched: tuple[int, ...]
    duration: float
    kind: Literal["killed"] = "killed"


@dataclasses.dataclass(frozen=True)
class Raised:
    """The callable raised. ``injected_at`` is ``(point, hit)`` when the exception is the one a
    Raise fault injected, else ``None``."""

    exc_type: str
    message: str
    traceback: str
    injected_at: tuple[str, int] | None
    hits: tuple[Hit, ...]
    matched: tuple[int, ...]
    duration: float
    kind: Literal["raised"] = "raised"


@dataclasses.dataclass(frozen=True)
class TimedOut:
    """The worker was still running after ``timeout`` seconds (wall time) and was killed with
    its whole process group, ``after`` seconds after it started."""

    timeout: float
    after: float
    kind: Literal["timed_out"] = "timed_out"


@dataclasses.dataclass(frozen=True)
class Died:
    """The worker ended without reporting: killed from outside, crashed, or ``os._exit``.
    ``signal`` is the signal number that ended it, else ``None`` and ``exitcode`` says how."""

    exitcode: int | None
    signal: int | None
    duration: float
    kind: Literal["died"] = "died"


Outcome: TypeAlias = Completed | Killed | Raised | TimedOut | Died

# pid -> live worker; their groups are killed on interruption and at exit.
_live: dict[int, Worker] = {}


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
        from . import _forkserver

        server = _forkserver.active()
        if server is not None:
            worker = server.start_worker(fn, **request)
    if worker is None:
        worker = _start_process(fn, start_method=start_method, **request)
    _live[worker.pid] = worker
    return worker


def _start_process(
    fn: Callable[..., object],
    *,
    args: tuple[object, ...],
    kwargs: dict[str, object],
    faults: tuple[Fault, ...],
    timeout: float,
    start_method: StartMethod,
    clock_path: str | None,
    log_path: str | None,
) -> Worker:
    """Start a worker as a child of this process (not registered in ``_live`` yet)."""
    ctx = multiprocess.get_context(start_method)
    parent_conn, child_conn = ctx.Pipe(duplex=True)
    process = ctx.Process(
        target=_child_main,
        args=(fn, args, kwargs, faults, child_conn, os.getpid(), clock_path, log_path),
        name=f"crashpoints-worker-{getattr(fn, '__name__', 'fn')}",
        daemon=False,
    )
    started = time.monotonic()
    try:
        process.start()
    except Exception as exc:
        parent_conn.close()
        child_conn.close()
        raise HarnessError(
            f"could not start a {start_method} worker for {fn!r}: {type(exc).__name__}: {exc}. "
            "Under spawn the callable, its arguments and faults must be picklable by dill; "
            "use fork, or pass plain values."
        ) from exc
    child_conn.close()
    with contextlib.suppress(OSError):
        # Also done by the child; whichever runs first wins the race with an early kill.
        os.setpgid(process.pid, process.pid)
    return Worker(process, parent_conn, timeout=timeout, started=started)


def run_worker(
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
) -> Outcome:
    """Run ``fn(*args, **kwargs)`` in a worker process to its end and return the outcome.

    Same arguments as :func:`start_worker`. A Pause fault in ``faults`` would wait for a
    release nobody sends and end as :class:`TimedOut`; use :func:`start_worker` to steer gates.
    """
    worker = start_worker(
        fn,
        args=args,
        kwargs=kwargs,
        faults=faults,
        timeout=timeout,
        start_method=start_method,
        clock=clock,
        log=log,
    )
    return worker.wait()


class Worker:
    """A running worker. Use it as a context manager: leaving the block kills and reaps the
    worker's process group if it is still running."""

    def __init__(self, process: Any, conn: Any, *, timeout: float, started: float) -> None:
        self._process = process
        self._conn: Any | None = conn
        self.pid: int = process.pid
        self.timeout = timeout
        self._started = started
        self._deadline = started + timeout
        self._paused: set[str] = set()
        self._record: tuple[Any, ...] | None = None
        self._outcome: Outcome | None = None

    @property
    def outcome(self) -> Outcome | None:
        """The outcome once the worker has ended and been reaped, else ``None``."""
        return self._outcome

    @property
    def paused_at(self) -> frozenset[str]:
        """The gates the worker reported it is waiting at (and was not released from yet)."""
        return frozenset(self._paused)

    def wait(self) -> Outcome:
        """Block until the worker ends (or its timeout passes) and return its outcome.

        If the wait is interrupted (``KeyboardInterrupt`` or any exception), the worker's
        group is killed and reaped before the exception propagates.
        """
        with self._killed_on_error():
            self._pump(lambda: False, self._deadline)
            return self._finish_or_time_out()

    def wait_paused(self, gate: str, *, timeout: float | None = None) -> None:
        """Block until the worker reports it is paused at ``gate``.

        ``timeout`` bounds this wait (default: the rest of the run's timeout). Raises
        :class:`WorkerNotPaused` if the worker ends, or the time is up, first; when the run's
        own timeout passed, the worker is killed and ``error.outcome`` is :class:`TimedOut`.
        """
        deadline = self._deadline
        if timeout is not None:
            deadline = min(deadline, time.monotonic() + timeout)
        with self._killed_on_error():
            self._pump(lambda: gate in self._paused, deadline)
            if gate in self._paused:
                return
            if self._outcome is None and time.monotonic() >= self._deadline:
                self._finish_or_time_out()
        if self._outcome is not None:
            raise WorkerNotPaused(
                f"worker {self.pid} ended ({self._outcome.kind}) without reaching gate "
                f"{gate!r}; check that a Pause({gate!r}) fault is armed at a point the worker "
                "passes, and its hit and when= match.",
                gate=gate,
                outcome=self._outcome,
            )
        raise WorkerNotPaused(
            f"worker {self.pid} did not reach gate {gate!r} within {timeout!r} seconds; it is "
            "still running. Wait longer, or check the gate's fault.",
            gate=gate,
        )

    def release(self, gate: str) -> None:
        """Let the worker go on from ``gate``. Raises :class:`WorkerNotPaused` if it is not
        paused there (call :meth:`wait_paused` first)."""
        if gate not in self._paused or self._conn is None:
            raise WorkerNotPaused(
                f"worker {self.pid} is not paused at gate {gate!r} (paused at: "
                f"{sorted(self._paused)!r}); call wait_paused({gate!r}) before release.",
                gate=gate,
                outcome=self._outcome,
            )
        self._paused.discard(gate)
        self._conn.send(("release", gate))

    def kill(self) -> Outcome:
        """Kill the worker's process group now (if still running), reap it, return the outcome."""
        if self._outcome is None:
            _kill_group(self.pid)
            self._finish()
        assert self._outcome is not None
        return self._outcome

    def __enter__(self) -> Worker:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()

    def __repr__(self) -> str:
        state = self._outcome.kind if self._outcome is not None else "running"
        return f"<Worker pid={self.pid} {state}>"

    @contextlib.contextmanager
    def _killed_on_error(self) -> Any:
        try:
            yield
        except BaseException:
            self.kill()
            raise

    def _pump(self, done: Callable[[], bool], deadline: float) -> None:
        """Read the worker's reports until ``done()``, the worker exits, or ``deadline``."""
        while self._outcome is None and not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            waitables = [self._process.sentinel]
            if self._conn is not None:
                waitables.append(self._conn)
            ready = _wait_ready(waitables, remaining)
            if self._conn is not None and self._conn in ready:
                self._read()
            elif self._process.sentinel in ready:
                self._drain()
                self._finish()

    def _read(self) -> None:
        assert self._conn is not None
        try:
            message = self._conn.recv()
        except (EOFError, OSError):
            self._conn.close()
            self._conn = None
            return
        if message[0] == "paused":
            self._paused.add(message[1])
        else:
            self._record = message

    def _drain(self) -> None:
        while self._conn is not None and self._conn.poll(0):
            self._read()

    def _finish_or_time_out(self) -> Outcome:
        if self._outcome is None:
            # The deadline passed with the worker still running.
            _kill_group(self.pid)
            after = time.monotonic() - self._started
            self._finish()
            self._outcome = TimedOut(timeout=self.timeout, after=after)
        return self._outcome

    def _finish(self) -> None:
        """Reap the exited (or killed) worker and settle its outcome."""
        # Kill stragglers while the worker is unreaped, so its group id cannot be reused yet.
        _kill_group(self.pid)
        self._process.join()
        self._drain()
        duration = time.monotonic() - self._started
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        exitcode = self._process.exitcode
        self._process.close()
        _live.pop(self.pid, None)
        self._paused.clear()
        self._outcome = _outcome_of(self._record, exitcode, duration)


def _outcome_of(record: tuple[Any, ...] | None, exitcode: int | None, duration: float) -> Outcome:
    if record is not None and record[0] == "returned":
        _, value, hits, matched = record
        return Completed(value, tuple(hits), tuple(matched), duration)
    if record is not None and record[0] == "raised":
        _, exc_type, message, text, injected_at, hits, matched = record
        return Raised(exc_type, message, text, injected_at, tuple(hits), tuple(matched), duration)
    if record is not None and record[0] == "killed" and exitcode == -signal.SIGKILL:
        _, point, hit, context, fired_at, hits, matched = record
        return Killed(point, hit, context, fired_at, tuple(hits), tuple(matched), duration)
    if exitcode is not None and exitcode < 0:
        return Died(exitcode=None, signal=-exitcode, duration=duration)
    return Died(exitcode=exitcode, signal=None, duration=duration)


def _kill_group(pid: int) -> None:
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(target, signal.SIGKILL)


def live_worker_pids() -> frozenset[int]:
    """The pids of workers started by this process and not reaped yet."""
    return frozenset(_live)


def kill_live_workers() -> None:
    """Kill and reap every live worker of this process (its whole process group)."""
    for worker in list(_live.values()):
        with contextlib.suppress(Exception):
            worker.kill()
        _live.pop(worker.pid, None)


# Registered after multiprocess's exit hook, so this runs first (atexit is LIFO) and that hook
# never joins a hung worker.
atexit.register(kill_live_workers)


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


def _child_main(
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
    # A forked child inherits the parent's registry: those workers are its siblings, not its own.
    _live.clear()
    # SIGINT belongs to the parent: it kills the group. A worker must not die of it first.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if log_path is not None:
        _redirect_output(log_path)
    resync = None if clock_path is None else pin_wall_time(HarnessClock(clock_path))
    armed = _failpoints.install(faults, conn, on_hit=resync)
    try:
        value = fn(*args, **kwargs)
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
