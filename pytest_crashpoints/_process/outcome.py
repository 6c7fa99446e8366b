"""How a worker process ended: the outcome types the harness reports.

A worker reports its end over a pipe (returned, raised, or killed at a fail point); the parent
turns that record and the exit status into one of these.
"""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

from .._inject.failpoints import Hit

__all__ = ["Completed", "Died", "Killed", "Outcome", "Raised", "TimedOut", "outcome_of"]


@dataclasses.dataclass(frozen=True)
class Completed:
    """The callable returned ``value``. ``left_running`` names each process it started that
    was still running when it returned (the worker killed them: a harness error in a case)."""

    value: Any
    hits: tuple[Hit, ...]
    matched: tuple[int, ...]
    duration: float
    kind: Literal["completed"] = "completed"
    left_running: tuple[str, ...] = ()


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
    Raise fault injected, else ``None``. ``left_running`` as for :class:`Completed`."""

    exc_type: str
    message: str
    traceback: str
    injected_at: tuple[str, int] | None
    hits: tuple[Hit, ...]
    matched: tuple[int, ...]
    duration: float
    kind: Literal["raised"] = "raised"
    left_running: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class TimedOut:
    """The worker was still running after ``timeout`` seconds and was killed with its whole
    process group, ``after`` seconds (wall time) after it started; ``stalled`` of them its
    processes spent waiting for a CPU (a busy machine), which the timeout does not count."""

    timeout: float
    after: float
    kind: Literal["timed_out"] = "timed_out"
    stalled: float = 0.0


@dataclasses.dataclass(frozen=True)
class Died:
    """The worker ended without reporting: killed from outside, crashed, or ``os._exit``.
    ``signal`` is the signal number that ended it, else ``None`` and ``exitcode`` says how."""

    exitcode: int | None
    signal: int | None
    duration: float
    kind: Literal["died"] = "died"


Outcome: TypeAlias = Completed | Killed | Raised | TimedOut | Died


def outcome_of(
    record: tuple[Any, ...] | None,
    exitcode: int | None,
    duration: float,
    *,
    left_running: tuple[str, ...] = (),
) -> Outcome:
    """The outcome of a worker from its last record, exit status and run time."""
    if record is not None and record[0] == "returned":
        _, value, hits, matched = record
        return Completed(value, tuple(hits), tuple(matched), duration, left_running=left_running)
    if record is not None and record[0] == "raised":
        _, exc_type, message, text, injected_at, hits, matched = record
        return Raised(
            exc_type,
            message,
            text,
            injected_at,
            tuple(hits),
            tuple(matched),
            duration,
            left_running=left_running,
        )
    if record is not None and record[0] == "killed" and exitcode == -signal.SIGKILL:
        _, point, hit, context, fired_at, hits, matched = record
        return Killed(point, hit, context, fired_at, tuple(hits), tuple(matched), duration)
    if exitcode is not None and exitcode < 0:
        return Died(exitcode=None, signal=-exitcode, duration=duration)
    return Died(exitcode=exitcode, signal=None, duration=duration)


