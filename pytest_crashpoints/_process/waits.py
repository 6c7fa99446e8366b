"""One clock: what a worker waits moves the case's time, and costs no real time where nothing
real needs it.

A case has one time, harness seconds in its clock file (``clock.py``). The schedule moves it
between steps; the providers read it; and a worker moves it by what it waits. Inside a worker
process (never in the harness's own), wall time, ``time.monotonic()`` and
``time.perf_counter()`` (and their ``_ns`` forms) read the worker's own clock
(``process_clock``): frozen while it computes, so that the same schedule gives the same times
quiet or loaded, and synced with harness time after every wait and at every fail point.

The waits
---------
Three kinds of wait are seen, however the code reached them:

* ``time.sleep`` (swapped in place, ``builtin_swap``: ``from time import sleep`` too; the
  openai, anthropic and stripe SDKs' backoff and ``Retry-After``, tenacity, urllib3);
* a selector's ``select(timeout)`` (``selectors``' classes): an asyncio event loop's timers,
  so ``asyncio.sleep``, ``loop.call_later``, anyio's sleeps and timeouts;
* ``threading.Condition.wait(timeout)``: ``Event.wait``, ``queue.Queue.get/put``,
  ``Semaphore.acquire`` and ``Barrier.wait`` with a timeout.

A skipped wait
--------------
A wait is skipped (it returns at once, as if it had run its course; the worker's clock and
harness time move by exactly its length) only when nothing but the waiting thread could act
during it, so that nothing could have ended it or changed what follows it:

1. this process is the only process of the case that can run: the harness runs one process
   at a time (no plan next to the clock, ``plan``), or a forced interleaving names it while
   it holds every other worker at a gate, each seen frozen;
2. nothing else of this process can move: no child process, every other thread asleep in an
   untimed wait on a private futex, which only a thread of this process could end
   (``stillness``, read in ``/proc``);
3. nothing real is on the other side of a connection: every connected stream socket leads to
   this process, the harness, the fork server or one of the case's servers (its providers'
   addresses, :func:`world`; ``peers``). The harness's fake providers act only when asked and
   keep time by the harness clock; a real server (redis-server, PostgreSQL, a broker, a
   remote host) changes with time and with other clients (a TTL, ``now()``, a job another
   worker runs), so it gets real time;
4. for a select, only this process can make what it watches ready (the event loop's own
   socket pair);
5. the process has skipped less than :data:`SKIP_BOUND` in all: a worker that would wait
   forever still times out in real time, as it would without this.

A real wait
-----------
Anything else is waited for real, with the original function, in one of two ways:

* with a connection to a real server (3 fails), the worker's clock moves with real time
  (``process_clock.ticking``) as long as that lasts, and harness time follows it: the server
  lives on real time, as in production;
* otherwise (another process of the case, a thread or a child of this one may act, a request
  is in flight to the case's providers, or skipping is switched off, :data:`REAL_WAITS_ENV`,
  or used up, 5) the clock stays frozen: the wait moves it by its length if it ran its course
  and not at all if it ended early (the answer came, the thread finished). What the
  process's own threads and children compute, and the simulator's own latency, is no time
  in the case, as computing is none.

A real wait is waited a slice at a time (:data:`SLICE`), and what could act is looked at
again after each: a wait begun while a twin still ran free or a thread still worked is skipped
from the moment nothing else can act. However much of it was real, a wait that runs its course
ends the clock at its start plus its length (on a real server, later if real time went
further). The timeline says which waits were real and why ("waited 12s for real: a
connection to pid 4242 (redis-server)"). A rule that cannot tell (another platform, an
unreadable ``/proc``) waits for real.

What is not seen
----------------
A process a worker forks (a pool's process, a daemon) is no worker of the case: it runs on
real time, its waits are real and move no clock but its own, as a program a worker runs.

Waits inside C code: a socket's own timeout (a blocking read with ``settimeout``),
``lock.acquire(timeout=...)`` and ``Thread.join(timeout)``, ``select.select`` or ``poll``
called directly, SQLite's busy handler (``busywait`` has its own rule), uvloop's loop. They
are real; the worker's clock does not see them, except that a frozen clock moves with real
time once it has stood still for ``process_clock.GRACE`` seconds, so that a deadline loop
around such a wait still ends. A program a worker starts (a command in any language, a queue's
worker process) runs on real time.

Every wait is appended to the run's wait log (:func:`log_path`, a line of JSON per wait),
which the harness reads into the timeline.
"""

from __future__ import annotations

import json
import math
import os
import selectors
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from . import builtin_swap, clock, peers, process_clock, stillness, switches
from .plan import plan_path, read_plan

__all__ = [
    "OVERSHOOT",
    "REAL_WAITS_ENV",
    "SKIP_BOUND",
    "WaitRecord",
    "arm",
    "install",
    "log_path",
    "name",
    "read_log",
    "real_monotonic",
    "real_sleep",
    "records_by_run",
    "skipped",
    "world",
]

#: Set to ``1`` (or ``true``, ``yes``, ``on``) in the harness's environment: every wait is real.
REAL_WAITS_ENV = switches.REAL_WAITS_ENV
#: Harness seconds one process may skip in all; past it every wait is real.
SKIP_BOUND = 24 * 3600.0
#: Real seconds a real wait lasts before what could act is looked at again: a wait begun
#: while a twin still ran, or a thread worked, is skipped from the moment nothing can.
SLICE = 0.05
_SWITCHED_OFF = f"{REAL_WAITS_ENV} is set"
_USED_UP = f"this process skipped {SKIP_BOUND / 3600:g} hours of waits already"
#: The reasons that hold for the whole of a wait: it is not looked at again.
_STICKY = (_SWITCHED_OFF, _USED_UP)
#: What a wait moves the clock beyond its length: a real wait lasts at least its length, so a
#: reading of ``time.time()`` after ``sleep(d)`` is never less than ``d`` after one before
#: (float rounding of a timestamp near 1.8e9 included), and a loop waiting for a deadline
#: always gets there.
OVERSHOOT = 1e-6

_T = TypeVar("_T")


class _Armed:
    """This process's part, set by :func:`arm` (class attributes: one per process)."""

    clock: clock.HarnessClock | None = None
    resync: Callable[[], None] = staticmethod(lambda: None)
    plan: str = ""
    log: str = ""
    label: str = ""
    #: The processes whose end of a connection is no real server: this one, the harness,
    #: the fork server; and the addresses of the case's own servers (its providers).
    allowed: frozenset[int] = frozenset()
    world: frozenset[peers.Address] = frozenset()
    skipped = 0.0
    real = False


#: The original builtins, callable as before (filled by :func:`install`).
_original: dict[str, Callable[..., Any]] = {}
#: Pid of the harness process, as seen by the process that installed (the fork server).
_harness = 0


def log_path(clock_path: str | os.PathLike[str]) -> Path:
    """Where the workers of a run log their waits (part of a crash state: a case resumed from
    one goes on from the waits its processes had made by then)."""
    path = Path(clock_path)
    return path.with_name(path.name + ".waits")


def real_sleep(seconds: float) -> None:
    """``time.sleep`` as it was: always real."""
    _original.get("sleep", time.sleep)(seconds)


def real_monotonic() -> float:
    """The real monotonic clock (the harness's), whatever this process's clocks say."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def skipped() -> float:
    """Seconds of waiting this process skipped so far."""
    return _Armed.skipped


# -- installing and arming ------------------------------------------------------------------


def install() -> bool:
    """Put the worker's clocks and waits in this process (once; a process forked from it has
    them). Until :func:`arm`, every clock and wait is the real one. False where the builtins
    cannot be swapped here: then the clocks are real and waits are slept."""
    global _harness
    if _original:
        return True
    if not builtin_swap.supported():
        return False
    _harness = os.getppid()
    for name, replacement in _REPLACEMENTS.items():
        original = builtin_swap.swap(getattr(time, name), replacement)
        if original is None:
            return False  # pragma: no cover - a builtin of another kind: left as it was
        _original[name] = original
    _patch_selectors()
    _patch_condition()
    return True


def arm(
    harness_clock: clock.HarnessClock | None, resync: Callable[[], None], *, parent: int
) -> None:
    """In a worker, before its callable: its waits move ``harness_clock`` (``None``: this
    process has no clock, and every wait is real and moves nothing). ``resync`` catches this
    process's clocks up with harness time; ``parent`` is the process that started it."""
    _Armed.clock = harness_clock
    _Armed.resync = staticmethod(resync)
    _Armed.plan = _Armed.log = ""
    if harness_clock is not None:
        _Armed.plan = str(plan_path(harness_clock.path))
        _Armed.log = str(log_path(harness_clock.path))
    _Armed.allowed = frozenset({os.getpid(), parent, _harness or parent})
    _Armed.skipped = 0.0
    _Armed.real = switches.switched_on(REAL_WAITS_ENV)
    _Armed.label = ""
    _Armed.world = frozenset()


def _forked() -> None:
    """A process forked from a worker (a pool's process, a daemon) is no worker of the
    case: its waits are real and move no clock but its own, which runs on real time."""
    _Armed.clock = None
    _Armed.plan = _Armed.log = ""
    process_clock.forked()


os.register_at_fork(after_in_child=_forked)


def name(label: str) -> None:
    """This process's name in the wait log (``worker-1``), as the timeline calls it."""
    _Armed.label = label


def world(addresses: Iterable[peers.Address]) -> None:
    """The addresses of the case's own servers (its fake providers, served by the harness):
    a connection to one is no real server (they act only when asked, on harness time)."""
    _Armed.world = frozenset(addresses)


# -- the clocks -----------------------------------------------------------------------------


def _monotonic() -> float:
    if not process_clock.armed():
        return float(_original["monotonic"]())
    return process_clock.monotonic_ns() / 1e9


def _monotonic_ns() -> int:
    if not process_clock.armed():
        return int(_original["monotonic_ns"]())
    return process_clock.monotonic_ns()


def _perf_counter() -> float:
    if not process_clock.armed():
        return float(_original["perf_counter"]())
    return process_clock.perf_counter_ns() / 1e9


def _perf_counter_ns() -> int:
    if not process_clock.armed():
        return int(_original["perf_counter_ns"]())
    return process_clock.perf_counter_ns()


# -- the waits ------------------------------------------------------------------------------


def _sleep(seconds: object) -> None:
    sleep = _original["sleep"]
    if (
        _Armed.clock is None
        or type(seconds) not in (int, float)
        or not 0 < seconds < math.inf  # type: ignore[operator]
    ):
        sleep(seconds)  # 0, and what it refuses
        return
    length = float(seconds)  # type: ignore[arg-type]

    def real(part: float) -> tuple[None, bool]:
        sleep(part)
        return None, True

    _waited(length, "time.sleep", (), real, None)


_REPLACEMENTS: dict[str, Callable[..., Any]] = {
    "monotonic": _monotonic,
    "monotonic_ns": _monotonic_ns,
    "perf_counter": _perf_counter,
    "perf_counter_ns": _perf_counter_ns,
    "sleep": _sleep,
}


def _patch_selectors() -> None:
    """Every selector class's ``select``: an event loop's timers are its timeouts."""
    for name in ("SelectSelector", "_PollLikeSelector", "EpollSelector", "DevpollSelector",
                 "KqueueSelector"):
        kind = getattr(selectors, name, None)
        if kind is not None and "select" in vars(kind):
            kind.select = _timed_select(vars(kind)["select"])


def _timed_select(select: Callable[..., Any]) -> Callable[..., Any]:
    def timed(self: selectors.BaseSelector, timeout: float | None = None) -> Any:
        if _Armed.clock is None or timeout is None or not timeout > 0:
            return select(self, timeout)
        ready = select(self, 0)
        if ready:
            return ready
        watched = [key.fd for key in self.get_map().values()]

        def real(part: float) -> tuple[Any, bool]:
            events = select(self, part)
            return events, not events

        return _waited(float(timeout), "a select timeout (an event loop's timers)", watched,
                       real, [])

    timed.__doc__ = select.__doc__
    timed.__wrapped__ = select  # type: ignore[attr-defined]
    return timed


def _patch_condition() -> None:
    wait = threading.Condition.wait

    def timed_wait(self: threading.Condition, timeout: float | None = None) -> bool:
        if _Armed.clock is None or timeout is None or not timeout > 0:
            return wait(self, timeout)
        if not self._is_owned():  # type: ignore[attr-defined]
            raise RuntimeError("cannot wait on un-acquired lock")

        def real(part: float) -> tuple[bool, bool]:
            notified = wait(self, part)
            return notified, not notified

        return _waited(float(timeout), "a timed wait (threading)", (), real, False)

    timed_wait.__doc__ = wait.__doc__
    timed_wait.__wrapped__ = wait  # type: ignore[attr-defined]
    threading.Condition.wait = timed_wait  # type: ignore[method-assign]


def _waited(
    length: float,
    what: str,
    watched: Iterable[int],
    real: Callable[[float], tuple[_T, bool]],
    ran_out: _T,
) -> _T:
    """Wait ``length`` seconds: skipped when nothing can act meanwhile (returning
    ``ran_out``, what the wait returns when it runs its course), else for real, a slice at a
    time (``real(seconds)`` returns what the wait returned and whether it ran that long), the
    rest skipped as soon as nothing can act any more (a twin held at last, a thread gone
    idle). Then the worker's clock and harness time are synced."""
    harness = _Armed.clock
    assert harness is not None
    # To the nanosecond, the clocks' own grain: a length an event loop computed on a clock
    # whose origin is the real one carries a rounding error that differs from run to run.
    length = round(length, 9)
    _Armed.resync()
    began, mine = harness.now(), process_clock.now_ns()
    # Where the clocks are once the wait has run its course: from where it began (two threads
    # waiting at once move it once), however much of it was real.
    end, at = mine + round((length + OVERSHOOT) * 1e9), began + length + OVERSHOOT
    why, real_cause = _why_real(length, watched)
    start, slices = real_monotonic(), 0
    while why is not None:
        process_clock.ticking(real_cause)  # a real server: real time passes, on and on
        left = length - (real_monotonic() - start)
        if left > 0:
            result, full = real(min(left, SLICE))
            if not full:  # it ended early: the answer came, the event was set
                return _ended(result, what, start, why, real_cause)
            slices += 1
            if left > SLICE and why not in _STICKY:
                before = why, real_cause
                why, real_cause = _why_real(left - SLICE, watched)
                if why is not None:
                    continue
                _log(what, real_monotonic() - start, harness.now(), *before)
                break
            if left > SLICE:
                continue
        process_clock.reach(end)  # its length at least: the time it took is no time, unless
        _Armed.resync()  # a real server was there (the clock then goes on with real time)
        _log(what, length if not real_cause else real_monotonic() - start, harness.reach(at),
             why, real_cause)
        return ran_out
    process_clock.ticking(False)
    process_clock.reach(end)
    skipped = round(length + OVERSHOOT - slices * SLICE, 9)  # what was not slept
    _Armed.skipped += skipped
    _log(what, skipped, harness.reach(at), None, False)
    _Armed.resync()
    return ran_out


def _ended(result: _T, what: str, start: float, why: str, real_cause: bool) -> _T:
    """A real wait that ended before its length: no time in the case, unless something real
    was on the other side (then the clock moved with real time meanwhile)."""
    _Armed.resync()
    if real_cause:
        assert _Armed.clock is not None
        _log(what, real_monotonic() - start, _Armed.clock.now(), why, real_cause)
    return result


def _why_real(length: float, watched: Iterable[int]) -> tuple[str | None, bool]:
    """Why this wait must be real, in a few words (None when it may be skipped), and whether
    something real is on the other side (a real server: the clock then moves with real
    time); else only the case's own world or this process's own work could act meanwhile."""
    foreign = peers.foreign_connection(_Armed.allowed, _Armed.world)
    if foreign is not None:
        return foreign, True
    if not _alone():
        return "another process of the case runs", False
    reach = peers.outside_reach(watched, _Armed.allowed, _Armed.world)
    if reach is not None:
        return f"the event loop waits on {reach}", False
    moves = stillness.what_moves(os.getpid(), threading.get_native_id())
    if moves is not None:
        return moves, False
    if _Armed.real:
        return _SWITCHED_OFF, False
    if _Armed.skipped + length > SKIP_BOUND:
        return _USED_UP, False
    return None, False


def _alone() -> bool:
    """Whether no other process of the case can run: no plan (one process at a time), or a
    plan that names this process."""
    plan = read_plan(_Armed.plan)
    return plan is None or plan[0] == os.getpid()


# -- the wait log ---------------------------------------------------------------------------


class WaitRecord(dict[str, Any]):
    """One line of the wait log: ``pid``, ``process`` (its name, or ""), ``what`` (the kind
    of wait), ``seconds`` (what it moved the clock: its length, or the real time it took for
    a wait on something real), ``at`` (harness time after it), ``why`` (why it was real; None:
    skipped), ``real`` (something real could act: the clock moved with real time)."""


def _log(what: str, seconds: float, at: float, why: str | None, real: bool) -> None:
    if not _Armed.log:
        return
    line = json.dumps({"pid": os.getpid(), "process": _Armed.label, "what": what,
                       "seconds": seconds, "at": at, "why": why, "real": real})
    try:
        fd = os.open(_Armed.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        return
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def read_log(path: str | os.PathLike[str], start: int = 0) -> tuple[list[WaitRecord], int]:
    """The complete lines of the wait log at ``path`` from byte ``start``, and where the next
    read starts (a line still being written is left for it; a log shorter than ``start``,
    put back by a crash state, is read from its beginning)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return [], 0
    if len(data) < start:
        start = 0
    end = data.rfind(b"\n", start) + 1
    records = []
    for line in data[start:end].splitlines():
        try:
            records.append(WaitRecord(json.loads(line)))
        except ValueError:
            continue  # a line torn by a kill: nothing to tell
    return records, max(end, start)


def records_by_run(records: Iterable[WaitRecord]) -> Iterator[list[WaitRecord]]:
    """Consecutive records of one process that waited the same way (skipped, or real for one
    reason), together: one line of the timeline each."""
    run: list[WaitRecord] = []
    for record in records:
        if run and (record["pid"], record["why"], record["what"]) != (
            run[-1]["pid"], run[-1]["why"], run[-1]["what"]
        ):
            yield run
            run = []
        run.append(record)
    if run:
        yield run
