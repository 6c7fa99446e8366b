"""The fork server: one pinned process that forks the workers of a run.

Every worker pins its wall time to the harness clock with time-machine (``_process/clock.py``).
Starting a pin, and importing what a worker imports, costs each fresh process; a fork server is
a worker that imports once and pins itself once, at
:data:`~pytest_crashpoints._process.clock.HARNESS_EPOCH`, and then forks each worker of the run
on request: a worker forked from it only moves the inherited pin to the clock's time
(``_travel_to``), and starts warm.

While a server is active (:func:`serving`), :func:`~pytest_crashpoints.harness.start_worker`
with ``start_method="fork"`` starts workers through it, and everything else about a worker
stays the same: its outcome, pause gates, timeout, log file, and the lifetime guarantees of
``handle``. The server is itself a worker of the harness process (own process group, killed
with its parent, in the registry of live workers); each worker it forks leads its own process
group and has ``PR_SET_PDEATHSIG`` tied to the server, so killing the harness kills the
server, and that kills every worker. The harness still kills a worker's group itself; the
server reaps the worker when the harness asks, and reports its exit status.

A worker forked from the server sees memory as it was when the server started, not as it is
at the request. So the callable and its arguments are sent over a pipe, pickled (by the C
pickler, or by dill as ``multiprocess`` does for spawn when closures or lambdas must travel
by value), except the objects named in ``serving(keep=...)`` (the scenario's callables and
messages), which are passed by reference to the server's own copy, identity and all. A
request that cannot be pickled, or that the server cannot fork, is started directly, as
without a server (:meth:`ForkServer.start_worker` returns ``None``).
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import pickle
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import multiprocess
from multiprocess.connection import Connection
from multiprocess.connection import wait as _wait_ready

from .._inject.failpoints import Fault
from ..errors import HarnessError
from . import busywait, waits
from .child import child_main
from .clock import pin_at_epoch
from .forked_pools import reset_forked_pools
from .handle import Worker, kill_group, register, start_process
from .orphans import end_children

__all__ = ["ForkServer", "active", "serving"]

#: Wall seconds the harness waits for the server to answer a request (a fork, a reap).
REPLY_TIMEOUT = 30.0
#: The server's own safety bound: it lives as long as the run that started it.
SERVER_TIMEOUT = 7 * 24 * 3600.0

_active: ForkServer | None = None


def active() -> ForkServer | None:
    """The fork server workers of this process are started from, if any."""
    return _active


@contextlib.contextmanager
def serving(keep: Iterable[object] = ()) -> Iterator[ForkServer | None]:
    """Start workers from a fork server until the block ends (then stop the server).

    ``keep`` are objects the workers' callables and arguments may refer to that cannot be
    pickled (a closure, a lambda): they are passed by reference to the server's copy. Inside
    an active server's block this is a no-op (the outer server keeps serving). Yields the
    server, or ``None`` when it is the outer block's.
    """
    global _active
    if _active is not None:
        yield None
        return
    server = ForkServer(keep)
    _active = server
    try:
        yield server
    finally:
        _active = None
        server.close()


class ForkServer:
    """A pinned process that forks workers on request. Use :func:`serving`."""

    def __init__(self, keep: Iterable[object] = ()) -> None:
        # The objects themselves are held here, so their ids stay theirs while we serve.
        self._keep = {id(obj): obj for obj in keep}
        control, server_end = multiprocess.Pipe(duplex=True)
        try:
            self._server = start_process(
                _serve,
                args=(server_end, control.fileno(), self._keep),
                kwargs={},
                faults=(),
                timeout=SERVER_TIMEOUT,
                start_method="fork",
                clock_path=None,
                log_path=None,
            )
        finally:
            server_end.close()
        self._control: Connection | None = control
        # One request and its answer at a time, whichever thread asks.
        self._lock = threading.Lock()
        self.pid = self._server.pid
        # In the registry of live workers: killed on interruption and at exit like any worker.
        register(self._server)

    # -- requests ---------------------------------------------------------------------------

    def start_worker(
        self,
        fn: Any,
        *,
        args: tuple[object, ...],
        kwargs: dict[str, object],
        faults: tuple[Fault, ...],
        timeout: float,
        clock_path: str | None,
        log_path: str | None,
    ) -> Worker | None:
        """Fork a worker from the server; return its :class:`Worker`, or ``None`` when the
        request cannot be pickled or the server is gone (start it directly then)."""
        if self._control is None:
            return None
        try:
            payload = self._dumps((fn, args, kwargs, faults, clock_path, log_path))
        except Exception:
            return None
        report, report_child = multiprocess.Pipe(duplex=True)
        sentinel, sentinel_child = os.pipe()
        started = time.monotonic()
        try:
            with self._lock:
                self._control.send_bytes(payload)
                with socket.socket(fileno=os.dup(self._control.fileno())) as sock:
                    socket.send_fds(sock, [b"F"], [report_child.fileno(), sentinel_child])
                answer = self._answer()
        except (OSError, EOFError, HarnessError):
            # The server is gone (killed from outside, or it stopped answering): it was
            # killed with its workers, and this worker starts directly.
            self._broken()
            answer = ("gone",)
        except BaseException:
            # Interrupted mid-request: the worker it may have forked has no owner here, and
            # the next answer could be this one's. Kill the server, and its workers with it.
            self._broken()
            report.close()
            os.close(sentinel)
            raise
        finally:
            report_child.close()
            os.close(sentinel_child)
        if answer[0] != "forked":
            report.close()
            os.close(sentinel)
            return None
        return Worker(
            _ServedProcess(self, answer[1], sentinel), report, timeout=timeout, started=started
        )

    def reap(self, pid: int) -> int | None:
        """Have the server reap worker ``pid`` (already killed or exited); its exit code in
        ``multiprocess``'s convention (``-signal`` for a signal), ``None`` if unknown."""
        if self._control is None:
            return None
        try:
            with self._lock:
                self._control.send_bytes(b"R" + pickle.dumps(pid))
                answer = self._answer()
        except (OSError, EOFError, HarnessError):
            self._broken()
            return None
        except BaseException:
            self._broken()
            raise
        return answer[2] if answer[0] == "reaped" else None

    def close(self) -> None:
        """Stop the server: it kills and reaps any worker still running, then exits."""
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._server.outcome is None:
            _wait_ready([self._server._process.sentinel], REPLY_TIMEOUT)
        self._server.kill()  # reaps it (and kills it if it did not stop in time)

    def _dumps(self, obj: object) -> bytes:
        """``b"F"`` and the pickled request: by the C pickler when it can (fast), else by dill
        (closures and lambdas by value); the kept objects by reference either way."""
        try:
            return _dumps(_KeepingPickler, obj, self._keep)
        except Exception:
            return _dumps(_dill_pickler(), obj, self._keep)

    def _answer(self) -> tuple[Any, ...]:
        assert self._control is not None
        if not self._control.poll(REPLY_TIMEOUT):
            self._broken()
            raise HarnessError(
                f"the fork server (pid {self.pid}) did not answer within {REPLY_TIMEOUT:g} "
                "seconds; it was killed with its workers."
            )
        try:
            answer: tuple[Any, ...] = pickle.loads(self._control.recv_bytes())
        except (EOFError, OSError) as exc:
            self._broken()
            raise HarnessError(f"the fork server (pid {self.pid}) is gone: {exc}") from exc
        return answer

    def _broken(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None
        self._server.kill()


class _KeepingPickler(pickle.Pickler):
    """Pickles the kept objects as references to the server's copy."""

    keep: Mapping[int, object] = MappingProxyType({})  # set per instance by _dumps

    def persistent_id(self, obj: object) -> int | None:
        key = id(obj)
        return key if key in self.keep and self.keep[key] is obj else None


def _dill_pickler() -> type[pickle.Pickler]:
    from multiprocess.reduction import ForkingPickler

    class _KeepingDillPickler(ForkingPickler):  # type: ignore[misc]
        persistent_id = _KeepingPickler.persistent_id

    return _KeepingDillPickler


def _dumps(pickler: type[pickle.Pickler], obj: object, keep: dict[int, object]) -> bytes:
    buffer = io.BytesIO()
    buffer.write(b"F")
    instance = pickler(buffer, pickle.HIGHEST_PROTOCOL)
    instance.keep = keep  # type: ignore[attr-defined]
    instance.dump(obj)
    return buffer.getvalue()


class _ServedProcess:
    """What :class:`~pytest_crashpoints.harness.Worker` needs of a process, for a worker the
    server forked: its pid, a sentinel readable once it is gone, and its exit code."""

    def __init__(self, server: ForkServer, pid: int, sentinel: int) -> None:
        self._server = server
        self.pid = pid
        self.sentinel = sentinel
        self.exitcode: int | None = None
        self._reaped = False

    def join(self) -> None:
        if not self._reaped:
            self._reaped = True
            self.exitcode = self._server.reap(self.pid)

    def close(self) -> None:
        if self.sentinel >= 0:
            os.close(self.sentinel)
            self.sentinel = -1


# -- the server process ---------------------------------------------------------------------


def _serve(control: Connection, harness_end: int, keep: dict[int, object]) -> None:
    """The server's loop (runs in the server process until the harness closes its end)."""
    # The fork copied the harness's end of the pipe too: without closing it, the server
    # would never see the harness close it.
    os.close(harness_end)
    pin_at_epoch()
    busywait.install()  # once: every worker forked from here is patched
    waits.install()  # the same: a worker only arms its clocks and waits
    reset_forked_pools()  # a pool the harness's process ran has no thread here
    # Everything alive now is shared with every worker: keep the collector from walking it
    # in a worker (each object it touches is a page the worker must copy).
    gc.freeze()
    me = os.getpid()
    children: set[int] = set()

    class _Unpickler(pickle.Unpickler):
        def persistent_load(self, pid: Any) -> object:
            return keep[pid]

    try:
        while True:
            try:
                request = control.recv_bytes()
            except EOFError:
                return
            if request[:1] == b"R":
                pid = pickle.loads(request[1:])
                try:
                    _, status = os.waitpid(pid, 0)
                    code: int | None = os.waitstatus_to_exitcode(status)
                except ChildProcessError:  # not ours, or reaped already: nothing to tell
                    code = None
                children.discard(pid)
                # What a dead worker left (a helper in a session of its own) came to this
                # subreaper: it ends with the worker, as the worker's process group does.
                end_children(keep=frozenset(children))
                control.send_bytes(pickle.dumps(("reaped", pid, code)))
                continue
            with socket.socket(fileno=os.dup(control.fileno())) as sock:
                _, fds, _, _ = socket.recv_fds(sock, 1, 2)
            report, sentinel = fds
            for fd in fds:  # received descriptors are inheritable: a worker's helper must not
                os.set_inheritable(fd, False)
            try:
                job = _Unpickler(io.BytesIO(request[1:])).load()
            except Exception as exc:
                os.close(report)
                os.close(sentinel)
                control.send_bytes(pickle.dumps(("error", f"{type(exc).__name__}: {exc}")))
                continue
            try:
                pid = os.fork()
            except OSError as exc:  # out of processes or memory: the harness will say so
                pid = -1
                failure = f"fork failed: {exc}"
            if pid == 0:
                _worker_main(job, control, report, sentinel, me)
            del job
            os.close(report)
            os.close(sentinel)
            if pid < 0:
                control.send_bytes(pickle.dumps(("error", failure)))
                continue
            with contextlib.suppress(OSError):
                os.setpgid(pid, pid)  # also done by the worker: whoever is first
            children.add(pid)
            control.send_bytes(pickle.dumps(("forked", pid)))
    finally:
        for pid in children:
            kill_group(pid)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        end_children()


def _worker_main(
    job: tuple[Any, ...], control: Connection, report: int, sentinel: int, server: int
) -> None:
    """A forked worker: run ``child_main`` as a worker started directly would, then exit.
    The sentinel's write end stays open until the process is gone."""
    code = 1
    try:
        control.close()
        fn, args, kwargs, faults, clock_path, log_path = job
        child_main(
            fn,
            args,
            kwargs,
            faults,
            Connection(report),
            server,
            clock_path,
            log_path,
            harness_fds=(sentinel,),
        )
        code = 0
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
