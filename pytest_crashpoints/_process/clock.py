"""The harness clock: one virtual clock per run, shared by the parent and every worker.

The clock is a small file in the run directory holding harness seconds as text. Readers open
and read it; writers (normally only the parent, between the steps of a schedule) hold an
``flock`` on a sibling ``.lock`` file and replace the file atomically with ``os.replace``, so a
reader never sees a half-written value. Harness time never goes backwards and never moves by
itself: nothing in the harness sleeps; backoff, leases and eventual consistency wait for the
schedule to advance the clock.

Whatever needs time takes a plain ``Callable[[], float]``: pass :meth:`HarnessClock.now`.

Inside a worker started with ``clock=``, wall time (``time.time()``, ``datetime.now()`` and
friends, patched by time-machine) is the run's epoch plus harness time when the
worker starts, plus the worker's own clock (``process_clock``): frozen while it computes, moved by
what it waits (``waits``), on real time while something real could act. The clocks are synced
when the worker starts, at every fail point call (the reference ledger calls one at the start
of every write), after every wait and when a paused worker is released: when harness time
moved past the worker's clock (the parent's steps, another worker's waits), the worker's
clock jumps forward to it; when the worker's clock moved past harness time (real time it
waited for something real), harness time follows it. Neither goes back. A worker that is alone
and still reads exactly harness time; ``ctx.now()`` reads the harness clock itself.

A run's epoch is the wall time its harness time 0 stands for: :data:`HARNESS_EPOCH`, unless
the run starts from an incident in production, whose epoch is its own (a sibling
``.epoch`` file, written once before any worker starts: :meth:`HarnessClock.set_epoch`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import HarnessUsageError
from . import process_clock

__all__ = ["HARNESS_EPOCH", "HarnessClock", "pin_at_epoch", "pin_wall_time"]

HARNESS_EPOCH = _dt.datetime(2026, 1, 1, tzinfo=_dt.timezone.utc)
"""The wall time that harness time 0 stands for inside a worker, unless the run has an epoch of
its own (:meth:`HarnessClock.set_epoch`)."""


class HarnessClock:
    """A file-backed virtual clock in harness seconds.

    ``HarnessClock(path)`` opens the clock at ``path``, creating it at ``start`` (default 0.0)
    if it does not exist yet. The object pickles as its path, so it crosses to workers under
    fork and spawn alike.
    """

    def __init__(self, path: str | os.PathLike[str], *, start: float = 0.0) -> None:
        self._path = Path(path)
        #: The run's epoch once read from its file (it never changes after it is written).
        self._epoch: float | None = None
        if not self._path.exists():
            with self._locked():
                if not self._path.exists():
                    self._write(float(start))

    @property
    def path(self) -> Path:
        return self._path

    def now(self) -> float:
        """The current harness time in seconds."""
        fd = os.open(self._path, os.O_RDONLY)
        try:
            return float(os.read(fd, 64))
        finally:
            os.close(fd)

    def __call__(self) -> float:
        return self.now()

    def datetime(self) -> _dt.datetime:
        """The current harness time as an aware UTC datetime (the epoch + now)."""
        return _dt.datetime.fromtimestamp(self.epoch() + self.now(), _dt.timezone.utc)

    @property
    def epoch_path(self) -> Path:
        """Where the run's own epoch is kept, beside the clock."""
        return self._path.with_name(self._path.name + ".epoch")

    def epoch(self) -> float:
        """The wall time (Unix seconds) harness time 0 stands for: the run's own, once
        :meth:`set_epoch` gave it one, else :data:`HARNESS_EPOCH`."""
        if self._epoch is None:
            try:
                with open(self.epoch_path, "rb") as f:
                    self._epoch = float(f.read(64))
            except FileNotFoundError:
                return HARNESS_EPOCH.timestamp()
        return self._epoch

    def set_epoch(self, wall: float) -> None:
        """Give the run an epoch of its own: harness time 0 stands for wall time ``wall``
        (Unix seconds). Written once, before any worker reads the clock.

        Raises :class:`HarnessUsageError` if the run has an epoch already (a worker may have
        read it) or ``wall`` is not a finite number.
        """
        if not (isinstance(wall, (int, float)) and abs(wall) < 1e12):
            raise HarnessUsageError(
                f"cannot set the harness epoch to {wall!r}: give Unix seconds (a finite number)."
            )
        with self._locked():
            if self.epoch_path.exists():
                raise HarnessUsageError(
                    f"the run of {self._path} has an epoch already ({self.epoch()!r}); it is "
                    "set once, before the first worker starts."
                )
            tmp = self.epoch_path.with_name(f"{self.epoch_path.name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, repr(float(wall)).encode())
            finally:
                os.close(fd)
            os.replace(tmp, self.epoch_path)
        self._epoch = float(wall)

    def advance(self, seconds: float) -> float:
        """Move the clock forward by ``seconds`` and return the new time.

        Raises :class:`HarnessUsageError` for a negative step: harness time never goes back.
        """
        if not seconds >= 0:
            raise HarnessUsageError(
                f"cannot advance the harness clock by {seconds!r} seconds: harness time never "
                "goes backwards; pass a step of 0 or more."
            )
        with self._locked():
            now = self.now() + float(seconds)
            self._write(now)
            return now

    def reach(self, t: float) -> float:
        """Move the clock forward to ``t`` unless it is there already; return the time now.

        What a wait that ran its course does (begun at harness time ``t0``, ``d`` long:
        ``reach(t0 + d)``): two processes waiting at once move it once, not twice. Never
        backwards; a ``t`` in the past changes nothing.
        """
        with self._locked():
            now = self.now()
            if t > now:
                self._write(float(t))
                return float(t)
            return now

    def set(self, t: float) -> None:
        """Set the clock to ``t``. Raises :class:`HarnessUsageError` if ``t`` is in the past."""
        with self._locked():
            now = self.now()
            if not t >= now:
                raise HarnessUsageError(
                    f"cannot set the harness clock to {t!r}: it is already {now!r}, and harness "
                    "time never goes backwards. Use a time at or after now."
                )
            self._write(float(t))

    def __repr__(self) -> str:
        return f"HarnessClock({str(self._path)!r})"

    def __reduce__(self) -> tuple[type[HarnessClock], tuple[str]]:
        return (HarnessClock, (str(self._path),))

    def _write(self, t: float) -> None:
        tmp = self._path.with_name(f"{self._path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, repr(t).encode())
        finally:
            os.close(fd)
        os.replace(tmp, self._path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        lock = self._path.with_name(self._path.name + ".lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


#: This process's time-machine traveller, once started. A worker forked from the fork server
#: inherits the server's and only moves it.
_traveller: Any = None


def _travel_to(target: float) -> None:
    """Wall time ``target`` (a POSIX timestamp) now, ticking on with real time from there."""
    global _traveller
    if _traveller is None:
        import time_machine

        _traveller = time_machine.travel(target, tick=True).start()
    else:
        _traveller.move_to(target)
    # time-machine starts the tick at the first reading: read now, so that wall time moves
    # from the moment of the pin, not from whenever the worker first looks.
    time.time()


def pin_wall_time(clock: HarnessClock) -> Callable[[], None]:
    """Pin this process's clocks to ``clock``; return the re-sync function.

    Only a worker calls this, in the child before the user's callable runs. Wall time
    (``time.time()``, ``datetime.now()`` and friends) is the run's epoch plus
    the clock's time, plus this process's own clock (``process_clock``), which ``time.monotonic()``
    and ``time.perf_counter()`` read too (``waits`` swaps them). The returned function syncs
    the two (the worker calls it at every fail point, after every wait and after a pause):
    the process's clock jumps forward to harness time, and harness time forward to the
    process's clock; neither goes back. The pin is never lifted: the worker ends with it.
    """
    start = clock.now()
    wall = clock.epoch() + start
    _travel_to(wall)
    process_clock.pin(wall, _traveller, time.perf_counter_ns())

    def resync() -> None:
        harness = clock.now()
        process_clock.reach(round((harness - start) * 1e9))
        mine = start + process_clock.followed_ns() / 1e9
        if mine > harness + 1e-6:  # it waited for something real: harness time follows
            clock.reach(mine)

    return resync


def pin_at_epoch() -> None:
    """Pin this process's wall time at :data:`HARNESS_EPOCH`, for processes forked from it to
    move (the fork server calls this once). Never call it in the harness's own process."""
    if _traveller is None:
        _travel_to(HARNESS_EPOCH.timestamp())


def prime_wall_time_pins() -> None:
    """Do, once in the parent, what every forked worker's pin would repeat: import the time
    travel library, so that children start with it loaded. Nothing is patched here."""
    import time_machine  # noqa: F401
