"""Futile busy waits: an SQLite lock wait that nothing can end is not slept out.

A forced interleaving (``interleaving.py``) holds one worker at a gate while another runs.
When the held worker has a write transaction open, the running one waits for its lock: with
``sqlite3.connect(path, timeout=10.0)`` SQLite's busy handler sleeps, retries, and after ten
seconds of *planned* sleeps (SQLite adds up the delays it asked for, not the time that
passed) gives up with "database is locked". Nothing can release the lock before that: the
holder is held until the running worker reaches its own gate or ends. So the ten seconds are
pure waiting, and the outcome (the same number of retries, then ``SQLITE_BUSY``) does not
depend on them.

While the harness runs a worker with every other process of the interleaving held, it says
so in a plan file next to the harness clock (:func:`running_alone`): the runner's pid and the
monotonic time by which its waits must end. In the runner, SQLite's sleep (the ``xSleep`` of
every registered VFS, patched in place by :func:`install`) returns at once, as if it had
slept, when all of this holds:

* the plan names this process, and nothing else of this process can move
  (:func:`~.stillness.frozen`):
  no child, and every other thread asleep in an untimed wait on a private futex, which only
  a thread of this process could end (an idle pool thread, a queue's reader);
* every held process could not move when the plan was written: no child, its thread at the
  gate asleep reading its release, every other thread asleep as above. A held worker cannot
  move, so neither can any lock it holds (a signal handler that touches the database is the
  one way around this, and nothing bundled has one);
* the skipped time, added to the time that has passed, stays within half the worker's
  timeout. A wait that would go further is slept for real, the part already skipped too
  (:data:`_Skips.owed`), so that a worker that waits longer than its timeout still times
  out, as it would without this.

Anything else sleeps as SQLite would. Only the wall time changes: the retries, the error, the
harness clock, the timeline and the verdict are the same (``PYTEST_CRASHPOINTS_REAL_BUSY_WAITS=1``
turns the skipping off, to compare). Programs in other languages, and SQLite linked into
Python statically, sleep as before.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from .plan import nobody_alone, plan_path, read_plan, write_plan
from .stillness import frozen
from .switches import REAL_BUSY_WAITS_ENV, switched_on

__all__ = [
    "arm",
    "install",
    "nobody_alone",
    "plan_path",
    "running_alone",
    "skipped",
    "supported",
]

#: Set to ``1`` (or ``true``, ``yes``, ``on``) in the harness's environment: every wait is slept.
REAL_WAITS_ENV = REAL_BUSY_WAITS_ENV


class Running(Protocol):
    """What the plan needs of a worker (``handle.Worker`` has it)."""

    @property
    def pid(self) -> int: ...

    @property
    def started(self) -> float: ...

    @property
    def timeout(self) -> float: ...


class Held(Protocol):
    """What the plan needs of a held worker (``handle.Worker`` has it)."""

    @property
    def pid(self) -> int: ...

    def waiting_thread(self, gate: str) -> tuple[int, int] | None: ...


@functools.cache
def _c_types() -> tuple[Any, Any]:
    """The C sleep's function type and the head of ``struct sqlite3_vfs`` up to ``xSleep``
    (stable since SQLite 3.5). Made on first use: ``ctypes`` is not imported by the plugin's
    start-up (the option check imports this module)."""
    import ctypes

    sleep = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
    pointer = ctypes.c_void_p
    names = ["xOpen", "xDelete", "xAccess", "xFullPathname", "xDlOpen", "xDlError", "xDlSym"]
    names += ["xDlClose", "xRandomness", "xSleep"]

    class Vfs(ctypes.Structure):
        _fields_ = [
            ("iVersion", ctypes.c_int),
            ("szOsFile", ctypes.c_int),
            ("mxPathname", ctypes.c_int),
            ("pNext", pointer),
            ("zName", ctypes.c_char_p),
            ("pAppData", pointer),
            *((name, pointer) for name in names),
        ]

    return sleep, Vfs


class _Skips:
    """This process's part: where the plan is, and the sleep it skipped so far."""

    plan: str | None = None
    #: Microseconds skipped and not slept since (each is owed if the wait goes on too long).
    owed = 0
    #: Microseconds skipped in all (what a test reads).
    total = 0
    #: Set once a wait was slept for real: every later one is, too.
    real = False


#: The original sleep of each patched VFS (by address), and the shim that stands in for them.
_originals: dict[int, Any] = {}
_shim: Any = None


def _library() -> Any:
    """The SQLite library this Python's ``sqlite3`` module uses (a ``ctypes.CDLL``), if it is
    a shared one; else ``None``."""
    import ctypes
    import sqlite3  # noqa: F401  (loads the library)

    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libsqlite3" in line}
    except OSError:
        return None
    paths = {p for p in paths if p.startswith("/")}
    if len(paths) != 1:
        return None  # linked statically, or two copies: leave every sleep alone
    library = ctypes.CDLL(paths.pop())
    library.sqlite3_vfs_find.restype = ctypes.c_void_p
    library.sqlite3_vfs_find.argtypes = [ctypes.c_char_p]
    return library


def supported() -> bool:
    """Whether this process could skip futile waits (Linux, a shared ``libsqlite3``)."""
    return sys.platform.startswith("linux") and _library() is not None


def install() -> bool:
    """Patch the sleep of every registered SQLite VFS in this process (once; a process forked
    from a patched one is patched). False where it cannot be done: waits are slept."""
    global _shim
    if _shim is not None:
        return True
    if not sys.platform.startswith("linux") or switched_on(REAL_WAITS_ENV):
        return False
    library = _library()
    if library is None:
        return False
    import ctypes

    sleep_type, vfs_type = _c_types()
    shim = sleep_type(_sleep)
    address = library.sqlite3_vfs_find(None)
    while address:
        vfs = vfs_type.from_address(address)
        if vfs.xSleep:
            _originals[address] = sleep_type(vfs.xSleep)
            vfs.xSleep = ctypes.cast(shim, ctypes.c_void_p).value
        address = vfs.pNext
    _shim = shim
    return True


def arm(clock_path: str | os.PathLike[str] | None) -> None:
    """In a worker: read the harness's plan for this run at each wait (``None``: no plan)."""
    _Skips.plan = None if clock_path is None else str(plan_path(clock_path))
    _Skips.owed = _Skips.total = 0
    _Skips.real = False


def skipped() -> float:
    """Seconds of SQLite sleep this process skipped so far."""
    return _Skips.total / 1e6


def _sleep(vfs: int, microseconds: int) -> int:
    original = _originals.get(vfs)
    try:
        if _skips(microseconds):
            return microseconds
        if _Skips.owed:  # a long wait: what was skipped is slept now, then the rest
            owed, _Skips.owed = _Skips.owed, 0
            from .waits import real_sleep  # a worker's own time.sleep may be skipped

            real_sleep(owed / 1e6)
    except Exception:  # never fail a sleep: sleep it
        pass
    return original(vfs, microseconds) if original is not None else 0


def _skips(microseconds: int) -> bool:
    if _Skips.real or _Skips.plan is None:
        return False
    plan = read_plan(_Skips.plan)
    if plan is None:
        return False
    runner, until = plan
    if runner != os.getpid() or not frozen(os.getpid(), threading.get_native_id()):
        return False
    # The harness's clock: a worker's monotonic() is its own (``waits``).
    if time.clock_gettime(time.CLOCK_MONOTONIC) + (_Skips.owed + microseconds) / 1e6 > until:
        _Skips.real = True
        return False
    _Skips.owed += microseconds
    _Skips.total += microseconds
    return True


def _held_still(worker: Held, gate: str) -> bool:
    waiting = worker.waiting_thread(gate)
    if waiting is None:
        return False
    thread, reading = waiting
    # The thread at the gate reads its release right after it says it is there: give it a
    # moment to get there (and the other threads to settle) before taking it as moving.
    for pause in (0, 0.001, 0.004, 0.016):
        time.sleep(pause)
        if frozen(worker.pid, thread, reading):
            return True
    return False


@contextlib.contextmanager
def running_alone(
    clock_path: str | os.PathLike[str] | None,
    runner: Running,
    held: Sequence[tuple[Held, str]],
) -> Iterator[None]:
    """While the block runs, ``runner`` runs and every worker in ``held`` stays held at its
    gate: write the plan that names it (when each held worker is frozen), and on the way
    out, before anyone is released, the plan that names nobody (``plan.nobody_alone`` holds
    it while the interleaving's workers live)."""
    if clock_path is None or not all(_held_still(worker, gate) for worker, gate in held):
        yield
        return
    write_plan(clock_path, runner.pid, runner.started + runner.timeout / 2)
    try:
        yield
    finally:
        write_plan(clock_path, 0, 0.0)
