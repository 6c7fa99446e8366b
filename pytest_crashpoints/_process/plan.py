"""The plan: which process of a case may take itself to be the only one running.

The harness runs the processes of a case one at a time, except in a forced interleaving (two
deliveries at once, racing recoveries), where several workers live together. While one does,
the interleaving keeps a plan file next to the harness clock (:func:`plan_path`): ``0 0``
("nobody runs alone") while its workers may all move, and ``PID UNTIL`` while worker ``PID``
runs and every other one is held at a gate, seen frozen (``busywait.running_alone``);
``UNTIL`` is the monotonic time (the harness's) by which that worker's futile SQLite waits
must end. No plan: the process that runs is the only one.

Readers: a worker's timed waits (``waits``: skipped only by a process that runs alone) and
SQLite's busy handler (``busywait``). The plan is never part of a crash state.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["Plan", "nobody_alone", "plan_path", "read_plan", "write_plan"]

#: ``(runner pid, until)``: the process that runs alone (0: nobody), and until when.
Plan = tuple[int, float]


def plan_path(clock_path: str | os.PathLike[str]) -> Path:
    """Where the harness writes the plan of a run whose clock is at ``clock_path``."""
    path = Path(clock_path)
    return path.with_name(path.name + ".runner")


def write_plan(clock_path: str | os.PathLike[str], runner: int, until: float) -> None:
    """Say that ``runner`` (0: nobody) runs alone until ``until``, in one atomic write."""
    path = plan_path(clock_path)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(f"{runner} {until!r}\n")
    os.replace(temporary, path)


def read_plan(path: str | os.PathLike[str]) -> Plan | None:
    """The plan at ``path`` (a :func:`plan_path`); ``None`` when there is none. A plan that
    cannot be read names nobody."""
    try:
        with open(path) as file:
            runner, until = file.read().split()
        return int(runner), float(until)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return 0, 0.0


@contextlib.contextmanager
def nobody_alone(clock_path: str | os.PathLike[str] | None) -> Iterator[None]:
    """While the block runs, several processes of the case live at once: nobody runs alone
    unless the plan is changed to name one. The plan is removed on the way out."""
    if clock_path is None:
        yield
        return
    write_plan(clock_path, 0, 0.0)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            plan_path(clock_path).unlink()
