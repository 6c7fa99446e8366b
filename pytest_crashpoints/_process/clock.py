"""The harness clock: one virtual clock per run, shared by the parent and every worker.

The clock is a small file in the run directory holding harness seconds as text. Readers open
and read it; writers (normally only the parent, between the steps of a schedule) hold an
``flock`` on a sibling ``.lock`` file and replace the file atomically with ``os.replace``, so a
reader never sees a half-written value. Harness time never goes backwards and never moves by
itself: nothing in the harness sleeps; backoff, leases and eventual consistency wait for the
schedule to advance the clock.

Whatever needs time takes a plain ``Callable[[], float]``: pass :meth:`HarnessClock.now`.

Inside a worker started with ``clock=``, freezegun pins ``time.time()``, ``datetime.now()`` and
friends to :data:`HARNESS_EPOCH` plus harness time. The pin is re-read from the file when the
worker starts, at every fail point call (the reference ledger calls one at the start of every
write), and when a paused worker is released, so the worker's wall time follows the parent's
advances step by step. Code that must see an advance made while it runs between two fail
points should call the clock directly rather than ``time.time()``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import HarnessUsageError

__all__ = ["HARNESS_EPOCH", "HarnessClock", "pin_at_epoch", "pin_wall_time"]

HARNESS_EPOCH = _dt.datetime(2026, 1, 1, tzinfo=_dt.timezone.utc)
"""The wall time that harness time 0 stands for inside a worker."""


class HarnessClock:
    """A file-backed virtual clock in harness seconds.

    ``HarnessClock(path)`` opens the clock at ``path``, creating it at ``start`` (default 0.0)
    if it does not exist yet. The object pickles as its path, so it crosses to workers under
    fork and spawn alike.
    """

    def __init__(self, path: str | os.PathLike[str], *, start: float = 0.0) -> None:
        self._path = Path(path)
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
        """The current harness time as an aware UTC datetime (``HARNESS_EPOCH`` + now)."""
        return HARNESS_EPOCH + _dt.timedelta(seconds=self.now())

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


#: This process's freezegun pin, once started. A worker forked from the fork server inherits
#: the server's pin and only moves it.
_frozen: Any = None


def pin_wall_time(clock: HarnessClock) -> Callable[[], None]:
    """Pin this process's wall time to ``clock`` with freezegun; return the re-sync function.

    Only a worker calls this, in the child before the user's callable runs. The returned
    function moves the pin to the clock's current time (the worker calls it at every fail
    point). The pin is never lifted: the worker process ends with it. When this process
    already has a pin (a worker forked from the fork server, which pinned itself once with
    :func:`pin_at_epoch`), the pin is only moved: freezegun's ``start()``, which walks every
    loaded module, is not repeated.
    """
    global _frozen
    if _frozen is None:
        from freezegun import freeze_time

        # No extra ignores: freezegun gives real time to any call with an ignored module
        # among the caller's nearest frames, and the worker's entry (ours, under
        # multiprocess's) is right under the user's callable. The child needs no real time.
        _frozen = freeze_time(clock.datetime()).start()
    else:
        _frozen.move_to(clock.datetime())
    frozen = _frozen

    def resync() -> None:
        frozen.move_to(clock.datetime())

    return resync


def pin_at_epoch() -> None:
    """Pin this process's wall time at :data:`HARNESS_EPOCH`, for processes forked from it to
    move (the fork server calls this once). Never call it in the harness's own process."""
    global _frozen
    if _frozen is None:
        from freezegun import freeze_time

        _frozen = freeze_time(HARNESS_EPOCH).start()


_primed_modules = 0


def prime_wall_time_pins() -> None:
    """Do, once in the parent, the work every forked worker's pin would repeat.

    ``freeze_time().start()`` walks every loaded module looking for references to the real
    time functions, and caches what it found per module. Filling that cache here, in the
    parent, lets each forked child inherit it instead of walking (and lazily importing)
    everything again: most of a worker's start-up cost. Nothing is patched here. Cheap when
    no module was imported since the last call.
    """
    global _primed_modules
    import sys
    import warnings

    from freezegun import api

    if len(sys.modules) == _primed_modules:
        return
    fill = getattr(api, "_get_cached_module_attributes", None)
    if fill is None:  # another freezegun release: the children do the walk themselves
        return
    # Reading every attribute of every module trips deprecation warnings (typing.io, ...)
    # that are none of the user's business.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, module in list(sys.modules.items()):
            if module is None or name == api.__name__:
                continue
            if getattr(module, "__name__", None) in (None, "datetime", "time"):
                continue
            try:
                fill(module)
            except Exception:  # unlistable attributes: skipped, as freezegun itself does
                continue
    _primed_modules = len(sys.modules)
