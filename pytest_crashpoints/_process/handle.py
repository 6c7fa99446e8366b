"""The parent's handle on a worker process, and the registry of live workers.

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
"""

from __future__ import annotations

import atexit
import contextlib
import os
import reprlib
import signal
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal, TypeAlias

import multiprocess
from multiprocess.connection import wait as _wait_ready

from .._inject.failpoints import Fault
from ..errors import HarnessError, WorkerNotPaused
from .child import child_main
from .outcome import Outcome, TimedOut, outcome_of

__all__ = [
    "StartMethod",
    "Worker",
    "kill_group",
    "kill_live_workers",
    "signal_live_workers",
    "live_worker_pids",
    "register",
    "start_process",
    "unregister",
]

StartMethod: TypeAlias = Literal["fork", "spawn"]

# pid -> live worker; their groups are killed on interruption and at exit.
_live: dict[int, Worker] = {}


def register(worker: Worker) -> None:
    """Put ``worker`` in the registry of live workers (killed on interruption and at exit)."""
    _live[worker.pid] = worker


def unregister(pid: int) -> None:
    _live.pop(pid, None)


# A forked child inherits the registry: those workers are its siblings, not its own.
os.register_at_fork(after_in_child=_live.clear)


def start_process(
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
        target=child_main,
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
            f"could not start a {start_method} worker: {_cannot_cross(fn, args, kwargs)} "
            f"({type(exc).__name__}: {exc}). Under spawn the callable, its arguments and faults "
            "must be picklable by dill; use start_method='fork', or pass plain values."
        ) from exc
    child_conn.close()
    with contextlib.suppress(OSError):
        # Also done by the child; whichever runs first wins the race with an early kill.
        os.setpgid(process.pid, process.pid)
    return Worker(process, parent_conn, timeout=timeout, started=started)


def _cannot_cross(fn: Callable[..., object], args: tuple[object, ...], kwargs: Any) -> str:
    """Name what cannot be pickled for a spawned worker: an argument first (the harness's
    entry points take the user's worker or recovery as their first argument), else ``fn``."""
    import dill

    for obj in (*args, *kwargs.values(), fn):
        try:
            dill.dumps(obj)
        except Exception:
            name = getattr(obj, "__qualname__", None)
            if name is not None:
                return f"{getattr(obj, '__module__', '?')}.{name} cannot be pickled"
            return f"{type(obj).__name__} {reprlib.repr(obj)} cannot be pickled"
    return f"{getattr(fn, '__qualname__', repr(fn))} or its arguments cannot be pickled"


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
        #: Seconds the worker's processes waited for a CPU, as of the last deadline check.
        self._stalled = 0.0
        #: The gates the worker waits at, each with the thread waiting there and the
        #: descriptor it reads the release from.
        self._paused: dict[str, tuple[int, int]] = {}
        self._record: tuple[Any, ...] | None = None
        self._left_running: tuple[str, ...] = ()
        self._outcome: Outcome | None = None
        #: Called as ``on_stop(point, n, trace_length, deferred)`` while the worker's whole
        #: process group is stopped at a :class:`~pytest_crashpoints._inject.failpoints.Stop`
        #: fault; the worker goes on when it returns.
        self.on_stop: Callable[[str, int, int, bool], None] | None = None
        # Readable once the process has ended, whoever else holds its pipes (a daemon it
        # forked may hold the exit sentinel): a pidfd on Linux, else the sentinel.
        self._ended: Any = _pidfd(self.pid)

    @property
    def started(self) -> float:
        """When the worker was started (``time.monotonic()``)."""
        return self._started

    @property
    def outcome(self) -> Outcome | None:
        """The outcome once the worker has ended and been reaped, else ``None``."""
        return self._outcome

    @property
    def paused_at(self) -> frozenset[str]:
        """The gates the worker reported it is waiting at (and was not released from yet)."""
        return frozenset(self._paused)

    def waiting_thread(self, gate: str) -> tuple[int, int] | None:
        """The thread waiting at ``gate`` (its id, ``threading.get_native_id()``) and the
        descriptor it reads the release from; ``None`` if the worker is not paused there."""
        return self._paused.get(gate)

    def wait(self) -> Outcome:
        """Block until the worker ends (or its timeout passes) and return its outcome.

        If the wait is interrupted (``KeyboardInterrupt`` or any exception), the worker's
        group is killed and reaped before the exception propagates.
        """
        with self._killed_on_error():
            while True:
                self._pump(lambda: False, self._deadline)
                if self._outcome is not None or not self._extend_deadline():
                    return self._finish_or_time_out()

    def wait_unless(
        self, condition: Callable[[], bool], *, gate: str | None = None, poll: float = 0.05
    ) -> bool:
        """Block until the worker ends (with ``gate``: or reports it is paused there), or
        until ``condition()`` holds, asked every ``poll`` seconds: True when ``condition``
        ended the wait. Its deadline is :meth:`wait`'s; once it has passed, False (the
        caller's :meth:`wait` or :meth:`wait_paused` then times the worker out)."""
        def done() -> bool:
            return gate is not None and gate in self._paused

        with self._killed_on_error():
            while True:
                self._pump(done, min(self._deadline, time.monotonic() + poll))
                if self._outcome is not None or done():
                    return False
                if condition():
                    return True
                if time.monotonic() >= self._deadline and not self._extend_deadline():
                    return False

    def _extend_deadline(self) -> bool:
        """At the deadline: move it by the time the worker's processes waited for a CPU (a
        busy machine delays a worker, it does not hang it), up to ``STALL_CAP`` times the
        timeout. False when the worker has used its timeout."""
        from .stall import STALL_CAP, group_stall

        self._stalled = group_stall(self.pid)
        deadline = min(
            self._started + self.timeout + self._stalled,
            self._started + self.timeout * STALL_CAP,
        )
        if deadline - time.monotonic() <= 0.001:
            return False
        self._deadline = deadline
        return True

    def wait_paused(self, gate: str, *, timeout: float | None = None) -> None:
        """Block until the worker reports it is paused at ``gate``.

        ``timeout`` bounds this wait (default: the rest of the run's timeout). Raises
        :class:`WorkerNotPaused` if the worker ends, or the time is up, first; when the run's
        own timeout passed, the worker is killed and ``error.outcome`` is :class:`TimedOut`.
        """
        until = None if timeout is None else time.monotonic() + timeout
        with self._killed_on_error():
            while True:
                deadline = self._deadline if until is None else min(self._deadline, until)
                self._pump(lambda: gate in self._paused, deadline)
                if gate in self._paused or self._outcome is not None:
                    break
                if time.monotonic() < self._deadline or not self._extend_deadline():
                    break
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
        del self._paused[gate]
        self._conn.send(("release", gate))

    def kill(self) -> Outcome:
        """Kill the worker's process group now (if still running), reap it, return the outcome."""
        if self._outcome is None:
            kill_group(self.pid)
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
        """Read the worker's reports until ``done()``, the worker exits, or ``deadline``.

        What is already there is read even at the deadline: a worker that ended (or reported)
        just before it, while this process waited for a CPU, ended in time; only a wait that
        finds nothing ready at the deadline ends the pump."""
        while self._outcome is None and not done():
            remaining = max(0.0, deadline - time.monotonic())
            ended = self._process.sentinel if self._ended is None else self._ended
            waitables = [ended]
            if self._conn is not None:
                waitables.append(self._conn)
            ready = _wait_ready(waitables, remaining)
            if self._conn is not None and self._conn in ready:
                self._read()
            elif ended in ready:
                self._drain()
                self._finish()
            elif remaining <= 0:
                return

    def _read(self) -> None:
        assert self._conn is not None
        try:
            message = self._conn.recv()
        except (EOFError, OSError):
            self._conn.close()
            self._conn = None
            return
        if message[0] == "paused":
            self._paused[message[1]] = message[4]
        elif message[0] == "left":
            self._left_running = tuple(message[1])
        elif message[0] == "stopped":
            self._stopped(*message[1:])
        else:
            self._record = message

    def _stopped(self, point: str, n: int, trace_length: int, deferred: bool) -> None:
        """The worker stopped itself at a Stop fault: let ``on_stop`` look at the world while
        the worker's whole group is stopped, then continue them."""
        if not wait_stopped(self.pid, self._deadline):
            return  # gone (killed, timed out): nothing to continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGSTOP)  # what it started, too
        try:
            if self.on_stop is not None:
                self.on_stop(point, n, trace_length, deferred)
        finally:
            # One SIGCONT, to the group the worker leads: a second one could reach the worker
            # after it stopped itself at its next fail point, and a SIGCONT discards a
            # pending stop.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGCONT)

    def _drain(self) -> None:
        while self._conn is not None and self._conn.poll(0):
            self._read()

    def _finish_or_time_out(self) -> Outcome:
        if self._outcome is None:
            # The deadline passed with the worker still running.
            kill_group(self.pid)
            after = time.monotonic() - self._started
            self._finish()
            self._outcome = TimedOut(timeout=self.timeout, after=after, stalled=self._stalled)
        return self._outcome

    def _finish(self) -> None:
        """Reap the exited (or killed) worker and settle its outcome."""
        # Kill stragglers while the worker is unreaped, so its group id cannot be reused yet.
        kill_group(self.pid)
        self._process.join()
        self._drain()
        duration = time.monotonic() - self._started
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        exitcode = self._process.exitcode
        self._process.close()
        if self._ended is not None:
            os.close(self._ended)
            self._ended = None
        unregister(self.pid)
        self._paused.clear()
        self._outcome = outcome_of(
            self._record, exitcode, duration, left_running=self._left_running
        )


def _pidfd(pid: int) -> int | None:
    """A descriptor readable once process ``pid`` has ended (Linux 5.3+), else None."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(pid)
    except OSError:  # an old kernel, or the process is already reaped
        return None
    return fd


def wait_stopped(pid: int, deadline: float) -> bool:
    """Wait until every thread of process ``pid`` is stopped (Linux ``/proc``); False if it
    is gone first, or ``deadline`` (monotonic) passes."""
    delay = 1e-5
    while time.monotonic() < deadline:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
            states = []
            for task in tasks:
                with open(f"/proc/{pid}/task/{task}/stat", "rb") as stat:
                    states.append(stat.read().rpartition(b")")[2].split()[0])
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return False
        if all(state in (b"T", b"t") for state in states):
            return True
        if any(state in (b"Z", b"X") for state in states):
            return False
        time.sleep(delay)
        delay = min(delay * 2, 1e-3)
    return False


def kill_group(pid: int) -> None:
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(target, signal.SIGKILL)


def live_worker_pids() -> frozenset[int]:
    """The pids of workers started by this process and not reaped yet."""
    return frozenset(_live)


def signal_live_workers() -> None:
    """Send ``SIGKILL`` to every live worker's group, and leave reaping to whoever waits on
    it (another thread may be in its ``wait``: a handle is reaped by one thread only)."""
    for pid in list(_live):
        kill_group(pid)


def kill_live_workers() -> None:
    """Kill and reap every live worker of this process (its whole process group)."""
    for worker in list(_live.values()):
        with contextlib.suppress(Exception):
            worker.kill()
        _live.pop(worker.pid, None)


# Registered after multiprocess's exit hook, so this runs first (atexit is LIFO) and that hook
# never joins a hung worker.
atexit.register(kill_live_workers)
