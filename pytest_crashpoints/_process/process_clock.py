"""A worker's own clock: the one time its wall and monotonic clocks read.

Inside a worker every clock the code can read is this one clock seen from a different origin:
wall time (``time.time()``, ``datetime.now()``..., through time-machine's pin) is the pin's
wall time plus it; ``time.monotonic()`` and ``time.perf_counter()`` (``waits`` swaps them) are
their real values at the pin plus it. It starts at 0 when the worker is pinned (at harness
time ``H``: wall time is then :data:`~.clock.HARNESS_EPOCH` plus ``H``) and moves:

* to where a wait the worker skipped (or waited to its end) ends: its start plus its length
  (:func:`reach`: two threads waiting at once move it once);
* to harness time when another process moved that (:func:`reach`);
* with real time while it *ticks*: while it is connected to a real server (``waits`` sets
  :func:`ticking`), and, however still the process is, once it has gone :data:`GRACE`
  seconds of real time without an event (a deadline loop around a wait nobody sees, a
  socket's own timeout, still comes to its end). Harness time follows the first; the second
  is the worker's own (:func:`followed_ns`).

While the harness holds the worker (at a gate of an interleaving, stopped to copy a crash
state) the clock stands still whatever it did before (:func:`hold`): that time is the
harness's, and harness time is what the worker finds when it goes on. Otherwise it is frozen:
computing takes no time on it, as it takes none on the harness clock.
So a worker that is alone and still gets the same times every run (the same schedule, the
same timestamps, quiet or loaded), and its clocks agree with harness time after every wait.
Never backwards. Outside a worker (the harness's process, the fork server) nothing here is
armed and every clock is the real one.
"""

from __future__ import annotations

import _thread
import time
from typing import Any

__all__ = [
    "GRACE",
    "armed",
    "hold",
    "followed_ns",
    "forked",
    "monotonic_ns",
    "now_ns",
    "perf_counter_ns",
    "pin",
    "reach",
    "ticking",
]

#: Real seconds a frozen clock stays frozen without an event (a wait, a fail point, a
#: release); past them it moves with real time until the next one.
GRACE = 5.0
_GRACE_NS = int(GRACE * 1e9)


#: Held while the clock is moved: the threads of a worker fold it from their own waits and
#: fail points (a plain lock: ``threading``'s timed waits are the ones ``waits`` replaces).
_moving = _thread.allocate_lock()


def _real_ns() -> int:
    """The real monotonic clock (never swapped)."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class _Clock:
    """This process's clock (class attributes: one per process)."""

    armed = False
    #: The clock's value (nanoseconds since the pin) at the last fold.
    value = 0
    #: The real monotonic time (ns) of the last fold.
    folded = 0
    ticks = False
    #: Held by the harness: still until the next event.
    held = False
    #: Nanoseconds the grace added to the clock at the folds so far.
    leaked = 0
    #: Real ``monotonic_ns()`` and ``perf_counter_ns()`` at the pin, and wall time (ns).
    monotonic = 0
    perf_counter = 0
    wall = 0


def armed() -> bool:
    """Whether this process's clocks are a worker's (pinned), not the real ones."""
    return _Clock.armed


def _moved(real: int) -> tuple[int, int]:
    """What the clock moved since the last event, at real time ``real`` (ns): in all, and
    how much of it the grace added."""
    if _Clock.held:
        return 0, 0
    elapsed = real - _Clock.folded
    if _Clock.ticks:
        return elapsed, 0
    over = max(elapsed - _GRACE_NS, 0)
    return over, over


def now_ns() -> int:
    """The clock: nanoseconds since the pin."""
    return _Clock.value + _moved(_real_ns())[0]


def _fold() -> None:
    """An event: what the clock moved since the last one is kept, and it is not held (call
    with :data:`_moving` held)."""
    real = _real_ns()
    moved, leaked = _moved(real)
    _Clock.value += moved
    _Clock.leaked += leaked
    _Clock.folded = real
    _Clock.held = False


def followed_ns() -> int:
    """The clock less what the grace added to it (ns): what harness time follows. The real
    time a still worker spent in waits nobody sees is its own (its deadlines must pass), not
    the world's."""
    moved, leaked = _moved(_real_ns())
    return _Clock.value + moved - _Clock.leaked - leaked


def hold() -> None:
    """The harness holds this process: the clock stands still until the next event."""
    with _moving:
        _fold()
        _Clock.held = True


def reach(ns: int) -> None:
    """Move the clock forward to ``ns`` since the pin, unless it is there already."""
    with _moving:
        _fold()
        _Clock.value = max(_Clock.value, ns)


def ticking(on: bool) -> None:
    """From now on, move with real time (``on``) or stay frozen between events."""
    with _moving:
        _fold()
        _Clock.ticks = on


def forked() -> None:
    """In a process a worker forked (a pool's process, a daemon): it is no worker of the
    harness, it runs on real time from here (its clocks tick, from where the worker's were).
    The lock is made anew: another thread of the worker may have held it at the fork."""
    global _moving
    _moving = _thread.allocate_lock()
    if _Clock.armed:
        _fold()
        _Clock.ticks = True


def monotonic_ns() -> int:
    """``time.monotonic_ns()`` in a worker (once :func:`armed`)."""
    return _Clock.monotonic + now_ns()


def perf_counter_ns() -> int:
    """``time.perf_counter_ns()`` in a worker (once :func:`armed`)."""
    return _Clock.perf_counter + now_ns()


def wall_ns() -> int:
    return _Clock.wall + now_ns()


def pin(wall: float, traveller: Any, perf_counter_ns: int) -> None:
    """Arm this process's clock at wall time ``wall`` (a POSIX timestamp): from now on
    ``traveller`` (time-machine's) reads wall time from it. ``perf_counter_ns``: the real
    ``perf_counter_ns()`` now."""
    _Clock.armed = True
    _Clock.value = 0
    _Clock.ticks = _Clock.held = False
    _Clock.leaked = 0
    _Clock.folded = _real_ns()
    _Clock.monotonic = _Clock.folded
    _Clock.perf_counter = perf_counter_ns
    _Clock.wall = round(wall * 1e9)
    # time-machine asks its traveller for the time (``traveller.time_ns()``) at every reading
    # of wall time: this traveller answers from this clock.
    traveller.time_ns = wall_ns
