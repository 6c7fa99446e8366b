"""Fail points: the places where the harness may kill, raise or pause a worker.

Outside a harness run :func:`crashpoint` does nothing, so it can stay in production code: the
disarmed path is one module-level ``None`` check and a return. Inside a worker started by the
harness (``pytest_crashpoints._worker``), the worker installs a plan of :class:`Fault` s before
the user's callable runs, and every call is counted, traced and matched against the plan.

Actions
-------
:class:`Kill`
    ``SIGKILL`` of the current process. No ``finally``, no ``atexit``, no buffered output
    flushed. Just before the signal, a small record (which point, which hit) is written to the
    harness with an unbuffered ``os.write`` on the worker's pipe, so the parent can say where the
    worker died.
:class:`Raise`
    Raise the given exception at the point (an exception is not a crash: the outcome is
    *raised*).
:class:`Pause`
    Tell the harness the worker reached the gate and block until the harness releases it; this
    forces a chosen interleaving of two workers. While paused, other threads of the worker that
    reach a fail point wait too.
:class:`Count`
    Match and count only (the outcome reports how often each fault matched).
:class:`Stop`
    Tell the harness, then stop the whole process with ``SIGSTOP`` (every thread, at once),
    exactly where a :class:`Kill` would have killed it; the harness copies the durable state,
    which is then what a kill at this call leaves behind, and lets the process go on with
    ``SIGCONT``. This is how the harness records crash states (``_harness/storage/crashstates.py``).

Triggers: a fault matches a call when the names are equal (or the fault's point is
:data:`EVERY_POINT`) and every ``when`` item equals the call's context item; it acts on the
``hit``-th matching call (``hit=None``: on every one).

Where the crash points fire
---------------------------
``"A"``
    The reference tool wrapper calls ``crashpoint("A", tool=..., task_id=..., attempt_id=...)``
    after the intent commit, before marking the attempt dispatched.
``"B"``
    The harness transport (``pytest_crashpoints._transport``) calls
    ``crashpoint("B", source="transport", ...)`` after the provider handled the request and its
    whole response body was read (the provider has applied and committed the effect), before the
    response is returned to the client. The reference wrapper also calls ``crashpoint("B")``
    after ``dispatch`` returned; both are hits of ``"B"`` (the transport's comes first).
``"C"``
    The harness transport *defers* C: when a C fault matches as the response is handed back,
    the action is held as pending and fires at the start of the next :func:`crashpoint` call of
    any name in that worker. The reference ledger calls
    ``crashpoint("ledger.write", op=..., attempt_id=...)`` at the start of every write
    transaction, so a transport C kill happens at the next ledger write or at the next fail
    point, whichever is first (in the reference wrapper: its own ``crashpoint("B")`` right
    after ``dispatch`` returns, before anything of the response is recorded).
    Code that calls ``crashpoint("C")`` itself is acted on at once. A pending action that never
    finds a next call does not fire.
``"D"``
    The delivery harness (``pytest_crashpoints._delivery``) calls
    ``crashpoint("D", delivery=n)`` in the worker before the handler gets the message.
``"E"``, ``"F"``
    Harness-side changes (authority store, provider lookups); not fail points in the worker.

Points the harness can place without any user code, inside its worker processes (see
``wire.py``, ``commits.py`` and ``syncs.py`` in this package):

``"db.commit"``, ``"db.committed"`` (:data:`COMMIT_POINTS`)
    Just before and just after each durable SQLite commit of the process, with
    ``db=<file name>`` and ``n=<the process's commit number>``.
``"file.sync"`` (:data:`SYNC_POINT`)
    Just before each ``os.fsync`` or ``os.fdatasync`` of a file of the agent's (not SQLite's),
    with ``file=<its path in the run directory>``: after the writes it syncs, before they are
    on disk (``syncs.py``).
``"A"`` with ``source="auto"``
    Before a POST, PUT, PATCH or DELETE leaves for a provider, if the process committed since its
    last write request to a provider (reads in between do not count) and did not call
    ``crashpoint("A")`` itself since then.
``"http.write"`` (:data:`WRITE_POINT`) at the wire
    Before every POST, PUT, PATCH or DELETE leaves for a provider (after an automatic A), with
    ``method`` and ``path``: a duplicate delivery may run while the first waits there.
``"B"``, ``"C"`` at the wire
    When the provider's answer arrives on the socket, before the client reads any of it, with the
    context the harness's loopback server sends.
``"model.tool_call"`` (:data:`MODEL_POINT`) at the wire
    When a model's answer that calls a tool arrives, before the client reads any of it: the
    model chose a tool call, and nothing of it is recorded or dispatched yet.

Any other name is yours (recovery uses its own). :func:`crashpoint_context` adds context to
every call made inside it (the reference wrapper sets ``tool=...`` around ``dispatch`` so that
the transport's points can be targeted per tool).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import signal
import threading
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, TypeAlias

from ..errors import HarnessUsageError

__all__ = [
    "COMMIT_POINTS",
    "CRASH_POINTS",
    "MODEL_POINT",
    "SYNC_POINT",
    "Action",
    "Count",
    "EVERY_POINT",
    "Fault",
    "Hit",
    "Kill",
    "Pause",
    "Raise",
    "Stop",
    "Plan",
    "automatic_crashpoint",
    "crashpoint",
    "crashpoint_context",
    "crashpoint_deferred",
    "since_last_request",
]

CRASH_POINTS = ("A", "B", "C", "D", "E", "F")

#: The points the commit hooks fire around every durable SQLite commit (``commits.py``).
COMMIT_POINTS = ("db.commit", "db.committed")

#: The point the sync hooks fire just before each ``os.fsync`` / ``os.fdatasync`` of a file of
#: the agent's (``syncs.py``): the window between its writes and their sync.
SYNC_POINT = "file.sync"

#: The point name of a fault that matches a call of any name.
EVERY_POINT = "*"

#: The point the wire fires when a model's answer that calls a tool reaches the process: the
#: model chose, and nothing of its choice is recorded yet (``wire.py``).
MODEL_POINT = "model.tool_call"

#: The point the wire fires before every write request (POST, PUT, PATCH, DELETE) leaves for a
#: provider (``wire.py``): where a concurrent duplicate delivery may wait, so that an agent
#: that checks "already done?" and then acts meets its twin between the two.
WRITE_POINT = "http.write"

# The most hits a worker keeps in its trace; a worker in a loop must not exhaust memory.
_TRACE_LIMIT = 100_000


@dataclasses.dataclass(frozen=True)
class Kill:
    """SIGKILL the worker at the point: no ``finally``, no ``atexit``, no flush."""


@dataclasses.dataclass(frozen=True)
class Raise:
    """Raise ``exception`` at the point. It must be picklable to cross a spawn."""

    exception: BaseException


@dataclasses.dataclass(frozen=True)
class Pause:
    """Block at the point until the harness calls ``release(gate)`` on the worker."""

    gate: str


@dataclasses.dataclass(frozen=True)
class Count:
    """Only count matching hits."""


@dataclasses.dataclass(frozen=True)
class Stop:
    """Stop the whole process (``SIGSTOP``) after telling the harness which call this is; the
    harness continues it (``SIGCONT``) once it has copied the durable state. Never deferred:
    the state a deferred kill leaves is the one at the call where it fires."""


Action: TypeAlias = Kill | Raise | Pause | Count | Stop


@dataclasses.dataclass(frozen=True)
class Fault:
    """An action armed at a fail point.

    ``point`` is a fail point name; ``action`` what to do there; ``hit`` which matching call
    acts (1 = the first; ``None`` = every one); ``when`` the context items a call must carry to
    match (e.g. ``{"tool": "send_email"}``).

    Raises :class:`HarnessUsageError` for an empty point name, a ``hit`` below 1, or an
    action that is not one of Kill, Raise, Pause, Count.
    """

    point: str
    action: Action = dataclasses.field(default_factory=Kill)
    hit: int | None = dataclasses.field(default=1, kw_only=True)
    when: Mapping[str, object] = dataclasses.field(default_factory=dict, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.point, str) or not self.point:
            raise HarnessUsageError(
                f"fault point {self.point!r} is not a fail point name; use one of "
                f"{', '.join(CRASH_POINTS)} or a non-empty name of your own."
            )
        if self.hit is not None and (not isinstance(self.hit, int) or self.hit < 1):
            raise HarnessUsageError(
                f"fault at {self.point!r}: hit={self.hit!r} is not a hit number; use 1 for the "
                "first matching call, 2 for the second, ..., or None for every one."
            )
        if not isinstance(self.action, Kill | Raise | Pause | Count | Stop):
            raise HarnessUsageError(
                f"fault at {self.point!r}: action {self.action!r} is not Kill(), Raise(exc), "
                "Pause(gate), Count() or Stop()."
            )

    def matches(self, name: str, context: Mapping[str, object]) -> bool:
        """Whether a call of ``name`` with ``context`` is one this fault looks at."""
        if name != self.point and self.point != EVERY_POINT:
            return False
        missing = object()
        return all(context.get(key, missing) == value for key, value in self.when.items())


@dataclasses.dataclass(frozen=True)
class Hit:
    """One fail point call in a worker: its name, its number among calls of that name (from 1)
    and its context (values that are not plain JSON scalars are kept as their ``repr``)."""

    point: str
    n: int
    context: Mapping[str, object]


class Channel(Protocol):
    """The worker's line to the harness (a ``multiprocess`` connection)."""

    def send(self, obj: Any) -> None: ...

    def recv(self) -> Any: ...

    def fileno(self) -> int: ...


class Plan(Protocol):
    """What an armed process's fail point calls go to: the plan of faults a harness worker
    is armed with (:func:`install`), or a program's line to the worker that started it
    (``remote.py``)."""

    def hit(self, name: str, context: dict[str, object], *, defer: bool) -> None: ...


@dataclasses.dataclass
class _Pending:
    fault_index: int
    point: str
    n: int
    context: dict[str, object]


class _Armed:
    """The plan installed in a worker, with its counters and trace."""

    def __init__(
        self,
        faults: tuple[Fault, ...],
        channel: Channel,
        *,
        on_hit: Callable[[], None] | None = None,
        on_hold: Callable[[], None] | None = None,
    ) -> None:
        self.faults = faults
        self.channel = channel
        self.on_hit = on_hit
        self.on_hold = on_hold
        self.matched = [0] * len(faults)
        self.counts: dict[str, int] = {}
        self.trace: list[Hit] = []
        self.pending: _Pending | None = None
        self.injected: BaseException | None = None
        self.injected_at: tuple[str, int] | None = None
        # Re-entrant: a pause blocks other threads, and on_hit may itself call crashpoint.
        self.lock = threading.RLock()

    def hit(self, name: str, context: dict[str, object], *, defer: bool) -> None:
        with self.lock:
            if self.on_hit is not None:
                self.on_hit()
            pending, self.pending = self.pending, None
            if pending is not None:
                self._act(pending.fault_index, pending.point, pending.n, pending.context, name)
            n = self.counts.get(name, 0) + 1
            self.counts[name] = n
            plain = _plain(context)
            if len(self.trace) < _TRACE_LIMIT:
                self.trace.append(Hit(name, n, plain))
            for index, fault in enumerate(self.faults):
                if not fault.matches(name, context):
                    continue
                self.matched[index] += 1
                if fault.hit is not None and self.matched[index] != fault.hit:
                    continue
                if isinstance(fault.action, Count):
                    continue
                if isinstance(fault.action, Stop):
                    self._stop(name, n, defer)
                    continue
                if defer:
                    self.pending = _Pending(index, name, n, plain)
                    return
                self._act(index, name, n, plain, name)

    def _act(
        self, index: int, point: str, n: int, context: dict[str, object], fired_at: str
    ) -> None:
        action = self.faults[index].action
        if isinstance(action, Kill):
            record = ("killed", point, n, context, fired_at, self.trace, self.matched)
            with contextlib.suppress(BaseException):
                self.channel.send(record)
            _kill_this_process()
        elif isinstance(action, Raise):
            self.injected = action.exception
            self.injected_at = (point, n)
            raise action.exception
        elif isinstance(action, Pause):
            self._pause(action.gate, point, n)

    def _stop(self, point: str, n: int, deferred: bool) -> None:
        # The record goes first, then the signal: the process stops right here, as a kill
        # would end it right here. ``deferred``: a deferred action at this call would fire
        # at the next call instead (the harness takes that call's state for it).
        try:
            self.channel.send(("stopped", point, n, len(self.trace), deferred))
        except (EOFError, OSError):
            os.kill(os.getpid(), signal.SIGKILL)
        self._held()
        os.kill(os.getpid(), signal.SIGSTOP)
        if self.on_hit is not None:
            self.on_hit()

    def _held(self) -> None:
        # The time a worker is held (at a gate, stopped) is the harness's, not the world's.
        if self.on_hold is not None:
            self.on_hold()

    def _pause(self, gate: str, point: str, n: int) -> None:
        try:
            # The thread that waits here, and what it reads the release from: with them the
            # harness can tell that this process cannot move (``_process/busywait.py``).
            waiting = (threading.get_native_id(), self.channel.fileno())
            self._held()
            self.channel.send(("paused", gate, point, n, waiting))
            while self.channel.recv() != ("release", gate):
                pass
        except (EOFError, OSError):
            # The harness is gone: nobody will release this gate, and nobody is left to tell.
            _kill_this_process()
        if self.on_hit is not None:
            # The harness usually moves the clock while a worker waits at a gate.
            self.on_hit()


def _kill_this_process() -> None:
    """SIGKILL this process and, when it leads its process group (every harness worker
    does), the whole group in the same call: a program the worker runs (a command, see
    ``_harness/case/bridge.py``) is killed before this process's sockets close, so it never
    sees its answer's connection drop and runs on for a moment."""
    me = os.getpid()
    with contextlib.suppress(OSError):
        if os.getpgid(0) == me:
            os.killpg(me, signal.SIGKILL)
    os.kill(me, signal.SIGKILL)


class _SinceLastRequest:
    """What this process did since its last write request to a provider.

    The wire hooks' automatic A reads it before each write request to a provider and resets it after
    (``wire.py``); the commit hooks set ``committed`` after each durable commit
    (``commits.py``); an armed :func:`crashpoint` call of ``"A"`` sets ``marked_a``.
    """

    __slots__ = ("committed", "marked_a")

    def __init__(self) -> None:
        self.committed = False
        self.marked_a = False


since_last_request = _SinceLastRequest()

_armed: Plan | None = None
_context: contextvars.ContextVar[Mapping[str, object]] = contextvars.ContextVar(
    "crashpoints_context", default=types.MappingProxyType({})
)


def crashpoint(name: str, /, **context: object) -> None:
    """Mark a place where the harness may crash this process.

    ``name`` is one of the crash points (``"A"``, ``"B"``, ``"C"``...) or a name of your own;
    ``context`` (e.g. ``tool="send_email"``) lets a schedule target one call among many.
    Outside a harness run this returns at once and does nothing. Inside a worker run it may
    never return (a kill), raise the armed exception, or block until the harness releases it.
    """
    if _armed is None:
        return None
    _hit(name, context, defer=False, by_code=True)
    return None


def automatic_crashpoint(name: str, /, **context: object) -> None:
    """A fail point the harness's hooks place on the code's behalf: :func:`crashpoint`, except
    that an ``"A"`` here does not count as the code marking A itself."""
    if _armed is None:
        return None
    _hit(name, context, defer=False, by_code=False)
    return None


def _hit(name: str, context: dict[str, object], *, defer: bool, by_code: bool) -> None:
    """One call of fail point ``name`` in an armed process; ``by_code``: the code placed it
    itself, not the harness's hooks (an ``"A"`` then marks A)."""
    armed = _armed
    if armed is None:
        return
    if by_code and name == "A":
        since_last_request.marked_a = True
    ambient = _context.get()
    if ambient:
        context = {**ambient, **context}
    armed.hit(name, context, defer=defer)


def crashpoint_deferred(name: str, /, **context: object) -> None:
    """Count a hit of ``name`` now, but hold a matching action until the next fail point call.

    This is how the transport implements C: the response is delivered, and the kill happens at
    the next ledger write or fail point.
    """
    if _armed is None:
        return None
    _hit(name, context, defer=True, by_code=True)
    return None


@contextlib.contextmanager
def crashpoint_context(**context: object) -> Iterator[None]:
    """Add ``context`` to every :func:`crashpoint` call made inside the block (this thread or
    task). Inner blocks and explicit arguments win over outer ones."""
    token = _context.set({**_context.get(), **context})
    try:
        yield
    finally:
        _context.reset(token)


def _plain(context: Mapping[str, object]) -> dict[str, object]:
    return {
        key: value if value is None or isinstance(value, str | int | float | bool) else repr(value)
        for key, value in context.items()
    }


def install(
    faults: tuple[Fault, ...],
    channel: Channel,
    *,
    on_hit: Callable[[], None] | None = None,
    on_hold: Callable[[], None] | None = None,
) -> _Armed:
    """Arm fail points in this process. Only a harness worker calls this, in the child.
    ``on_hit`` runs at every fail point call and after the process was held (at a gate,
    stopped); ``on_hold`` just before it is held."""
    global _armed
    _armed = _Armed(faults, channel, on_hit=on_hit, on_hold=on_hold)
    return _armed


def install_plan(plan: Plan) -> None:
    """Send this process's fail point calls to ``plan`` (a program's line to the harness
    worker that started it, ``remote.py``)."""
    global _armed
    _armed = plan


def uninstall() -> None:
    """Disarm fail points in this process."""
    global _armed
    _armed = None
