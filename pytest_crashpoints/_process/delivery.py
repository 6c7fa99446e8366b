"""D, duplicate delivery: the same message delivered twice, in sequence or at once.

A handler is a plain callable ``handler(message)``, run in a worker per delivery. In each
worker the harness calls ``crashpoint("D", delivery=n)`` (n = 1 or 2) just before the handler
gets the message, so a fault or an interleaving step can target one delivery.

* :func:`redeliver_after_success`: deliver, let it finish, deliver again.
* :func:`redeliver_after_crash`: deliver with a crash armed (the first delivery must be
  killed), then deliver again, as a queue does when a worker dies before acknowledging.
* :func:`deliver_concurrently`: two workers get the message at once; with ``interleaving``
  their steps are forced through pause points (see ``_interleaving``), so a race is
  reproducible, not lucky.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

from .._inject.failpoints import Fault, Kill, crashpoint
from ..errors import HarnessError, HarnessUsageError
from .clock import HarnessClock
from .handle import StartMethod
from .interleaving import Step, run_interleaved
from .outcome import Killed, Outcome
from .worker import DEFAULT_TIMEOUT, start_worker

__all__ = [
    "Redelivery",
    "deliver_concurrently",
    "redeliver_after_crash",
    "redeliver_after_success",
]


@dataclasses.dataclass(frozen=True)
class Redelivery:
    """The outcomes of the first and the second delivery of one message."""

    first: Outcome
    second: Outcome


def _deliver(handler: Callable[[Any], object], message: object, delivery: int) -> object:
    crashpoint("D", delivery=delivery)
    return handler(message)


def _delivery(handler: Callable[[Any], object], message: object, n: int) -> Callable[[], object]:
    return functools.partial(_deliver, handler, message, n)


def redeliver_after_success(
    handler: Callable[[Any], object],
    message: object,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    start_method: StartMethod = "fork",
    clock: HarnessClock | None = None,
) -> Redelivery:
    """Deliver ``message`` to ``handler`` in a worker, then once more in a new worker."""
    options: dict[str, Any] = {"timeout": timeout, "start_method": start_method, "clock": clock}
    first = start_worker(_delivery(handler, message, 1), **options).wait()
    second = start_worker(_delivery(handler, message, 2), **options).wait()
    return Redelivery(first, second)


def redeliver_after_crash(
    handler: Callable[[Any], object],
    message: object,
    *,
    crash: Sequence[Fault],
    timeout: float = DEFAULT_TIMEOUT,
    start_method: StartMethod = "fork",
    clock: HarnessClock | None = None,
) -> Redelivery:
    """Deliver ``message`` with ``crash`` armed, then deliver it again unarmed.

    ``crash`` must contain a Kill fault. Raises :class:`HarnessError` if the first delivery
    was not killed (the crash never happened, so the redelivery would prove nothing).
    """
    if not any(isinstance(fault.action, Kill) for fault in crash):
        raise HarnessUsageError(
            f"redeliver_after_crash needs a Kill fault in crash=, got {list(crash)!r}; for "
            "example crash=[Fault('B', Kill())]."
        )
    options: dict[str, Any] = {"timeout": timeout, "start_method": start_method, "clock": clock}
    first = start_worker(_delivery(handler, message, 1), faults=crash, **options).wait()
    if not isinstance(first, Killed):
        raise HarnessError(
            f"the first delivery was meant to be killed by {list(crash)!r} but ended "
            f"{first.kind}: {first!r}. Check the fault's point, hit and when= against the "
            "points the handler passes (a Count fault on a dry run lists them)."
        )
    second = start_worker(_delivery(handler, message, 2), **options).wait()
    return Redelivery(first, second)


def deliver_concurrently(
    handler: Callable[[Any], object] | Sequence[Callable[[Any], object]],
    message: object,
    *,
    interleaving: Sequence[Step] | None = None,
    faults: Sequence[Sequence[Fault]] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    start_method: StartMethod = "fork",
    clock: HarnessClock | None = None,
    blocked: Callable[[], bool] | None = None,
) -> tuple[Outcome, Outcome]:
    """Deliver ``message`` to two workers at once; return both outcomes (delivery 1, 2).

    ``handler`` handles both deliveries, or is a pair: the handler of the first delivery and
    that of the second (e.g. the same worker under two names). Workers are numbered 0 and 1
    in ``interleaving`` (steps ``(worker, point)``, see ``run_interleaved``); without it they
    race freely. ``faults`` are extra faults per worker; ``blocked`` is
    ``run_interleaved``'s.
    """
    handlers = (handler, handler) if callable(handler) else tuple(handler)
    if len(handlers) != 2 or not all(callable(h) for h in handlers):
        raise HarnessUsageError(
            f"handler={handler!r} is neither a callable nor a pair of callables (one per "
            "delivery)."
        )
    calls = [_delivery(h, message, n) for n, h in enumerate(handlers, start=1)]
    first, second = run_interleaved(
        calls,
        list(interleaving or ()),
        faults=faults,
        timeout=timeout,
        start_method=start_method,
        clock=clock,
        blocked=blocked,
    )
    return first, second
