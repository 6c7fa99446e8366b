"""The safe-order tool call around any tool adapter: five steps, in order.

::

    1. normalize and validate the arguments      (bad arguments: ArgumentsError, nothing written)
    2. record the intent and its key              (one transaction; same key -> same attempt)
       crashpoint("A")                            kill after the intent commit, before dispatch
    3. mark DISPATCHED, durably                   (committed before the request leaves)
       adapter.dispatch(..., idempotency_key)
       crashpoint("B")                            the provider applied it; nothing of the
                                                  response is recorded yet
    4. persist the provider request id            (its own commit, before the lookup; with
                                                  a durable receipt, none: see step 5)
       crashpoint("C")                            the response arrived; the outcome is not
                                                  committed yet
    5. confirm through a durable receipt or the provider's lookup; otherwise UNKNOWN
                                                  (one commit: the outcome and its event;
                                                  with a durable receipt the request id and
                                                  result ref too, named in the event)

So a call that ends with a durable receipt makes three ledger commits (intent, DISPATCHED,
request id with outcome); one that needs the lookup (or has none) makes four (intent,
DISPATCHED, request id, outcome). A durable receipt is the provider's record of the effect and
its request id arrives with it, so committing them together is persisting the id as soon as it
comes back: a kill at C then leaves the attempt DISPATCHED with no request id, and recovery
reconciles it as after a kill at B (the provider's lookup, a re-dispatch with the same key to
an idempotent provider, or review).

A tool adapter is a plain object that satisfies :class:`ToolAdapter`; no base class.
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeAlias

from .._inject.failpoints import crashpoint, crashpoint_context
from .._ledger.args import JSONValue, normalize_args
from .._ledger.authority import Authority
from .._ledger.records import Attempt
from .._ledger.sqlite import Ledger
from .._ledger.states import State
from ..errors import IllegalTransition, LeaseHeld, ProviderRejected

__all__ = [
    "Absent",
    "Found",
    "LookupResult",
    "Receipt",
    "ToolAdapter",
    "Unavailable",
    "guarded_call",
]


@dataclasses.dataclass(frozen=True)
class Receipt:
    """What a provider answered to a dispatch.

    ``request_id`` is the provider's (or transport's) id for the request. Set ``durable`` only
    when the answer itself is the provider's durable record of the effect (e.g. the created
    object with its id): then ``result_ref`` names it and, if given, ``payload_hash`` must be
    the attempt's arguments hash. A bare "200 OK" is not durable.
    """

    request_id: str
    result_ref: str | None = None
    durable: bool = False
    payload_hash: str | None = None


@dataclasses.dataclass(frozen=True)
class Found:
    """The provider has the effect: ``payload_hash`` is the hash of what it applied (the
    attempt's arguments hash, for a match), ``request_id`` the provider's id of the request
    that applied it, when the lookup tells."""

    payload_hash: str
    result_ref: str | None = None
    request_id: str | None = None


@dataclasses.dataclass(frozen=True)
class Absent:
    """A consistent lookup proves the provider has no such effect."""


@dataclasses.dataclass(frozen=True)
class Unavailable:
    """The lookup could not answer (timeout, outage, a search that may lag)."""

    reason: str


LookupResult: TypeAlias = Found | Absent | Unavailable


#: The clock of the ledger whose attempt an adapter is looking up (set by ``guarded_call`` and
#: ``recover`` around each lookup): an adapter that weighs how long ago an attempt was sent
#: (a search that lags) compares the attempt's times with the clock that wrote them, whatever
#: clock the ledger runs on (harness seconds, or the wall clock of an agent's own ledger).
ATTEMPT_CLOCK: contextvars.ContextVar[Callable[[], float] | None] = contextvars.ContextVar(
    "crashpoints_attempt_clock", default=None
)


def look_up(adapter: ToolAdapter, attempt: Attempt, clock: Callable[[], float]) -> LookupResult:
    """``adapter.lookup(attempt)`` with :data:`ATTEMPT_CLOCK` set to ``clock`` (the clock of
    the ledger that holds the attempt)."""
    token = ATTEMPT_CLOCK.set(clock)
    try:
        return adapter.lookup(attempt)
    finally:
        ATTEMPT_CLOCK.reset(token)


class ToolAdapter(Protocol):
    """How the ledger talks to one tool. Any object with these members will do."""

    @property
    def tool_name(self) -> str:
        """The tool's name in the ledger, e.g. ``"send_email"``."""
        ...

    @property
    def idempotent(self) -> bool:
        """Whether the provider deduplicates requests by idempotency key."""
        ...

    @property
    def has_lookup(self) -> bool:
        """Whether :meth:`lookup` can find an effect at the provider."""
        ...

    def dispatch(
        self, args: Mapping[str, JSONValue], *, idempotency_key: str, authority: Authority
    ) -> Receipt:
        """Send the request. Raise :class:`ProviderRejected` only when the provider proved
        that nothing happened; any other exception leaves the attempt UNKNOWN."""
        ...

    def lookup(self, attempt: Attempt) -> LookupResult:
        """Ask the provider whether ``attempt``'s effect exists."""
        ...


def guarded_call(
    ledger: Ledger,
    adapter: ToolAdapter,
    *,
    task_id: str,
    args: Mapping[str, Any],
    idempotency_key: str,
    authority: Authority,
    actor: str,
    lease_seconds: float = 60.0,
    current_authority: Callable[[], Authority | None] | None = None,
) -> Attempt:
    """Perform one tool call in the safe order and return the attempt as it ends.

    A second call with the same ``idempotency_key`` (a redelivered message) never creates a
    second attempt: a finished attempt is returned as it is; one that another live process
    owns, or that was already dispatched, is returned in flight for that process or for
    recovery to finish. The returned state is OUTCOME_CONFIRMED only when a durable receipt or
    the provider's lookup proved the effect; a lost or unconfirmed response leaves UNKNOWN.

    ``current_authority()``, if given, returns the task's authority now (``None``: revoked).
    It is asked again just before the request leaves: if the authority changed since
    ``authority`` (revoked, narrowed, another tenant or policy), nothing is sent and the
    attempt goes to MANUAL_REVIEW with the reason, for a person to decide.

    Raises :class:`ArgumentsError` for arguments that cannot be normalized (nothing written),
    and :class:`IdempotencyKeyConflict` when the key already names other arguments.
    """
    normalized = normalize_args(args)
    attempt, created = ledger.record_intent(
        task_id=task_id,
        tool_name=adapter.tool_name,
        args=normalized,
        idempotency_key=idempotency_key,
        authority=authority,
        actor=actor,
        lease_seconds=lease_seconds,
    )
    if not created:
        if attempt.state is not State.INTENT_RECORDED:
            return attempt
        try:
            attempt = ledger.claim(attempt.attempt_id, owner=actor, lease_seconds=lease_seconds)
        except LeaseHeld:
            return attempt
    where = {"tool": adapter.tool_name, "task_id": task_id, "attempt_id": attempt.attempt_id}
    crashpoint("A", **where)
    if current_authority is not None:
        now = current_authority()
        if now != authority:
            changed = "revoked" if now is None else "changed"
            try:
                return ledger.transition(
                    attempt.attempt_id,
                    State.MANUAL_REVIEW,
                    expected=State.INTENT_RECORDED,
                    actor=actor,
                    reason=f"the task's authority was {changed} before dispatch: nothing sent",
                )
            except IllegalTransition:
                return ledger.get(attempt.attempt_id)
    try:
        attempt = ledger.transition(
            attempt.attempt_id,
            State.DISPATCHED,
            expected=State.INTENT_RECORDED,
            actor=actor,
            reason="dispatching with the idempotency key",
        )
    except IllegalTransition:
        return ledger.get(attempt.attempt_id)
    return dispatch_and_confirm(ledger, adapter, attempt, normalized, actor=actor, where=where)


def dispatch_and_confirm(
    ledger: Ledger,
    adapter: ToolAdapter,
    attempt: Attempt,
    args: Mapping[str, JSONValue],
    *,
    actor: str,
    where: dict[str, str],
) -> Attempt:
    attempt_id = attempt.attempt_id
    try:
        # The transport's B and C fire inside dispatch: give them the call's context.
        with crashpoint_context(**where):
            receipt = adapter.dispatch(
                args, idempotency_key=attempt.idempotency_key, authority=attempt.authority
            )
    except ProviderRejected as exc:
        if exc.retryable:
            retry_at = ledger.now() + (exc.retry_after or 0.0)
            reason = f"provider refused before applying: {exc}"
            return _settle(
                ledger, attempt_id, State.FAILED_RETRYABLE, reason, actor=actor, retry_at=retry_at
            )
        reason = f"provider rejected the request, nothing applied: {exc}"
        return _settle(ledger, attempt_id, State.FAILED, reason, actor=actor)
    except Exception as exc:
        reason = f"dispatch raised {type(exc).__name__}: {exc}; the effect may have happened"
        return _settle(ledger, attempt_id, State.UNKNOWN, reason, actor=actor)
    crashpoint("B", **where)
    if not receipt.durable:
        # The lookup may take long or fail: the request id must be on disk before it.
        attempt = ledger.record_provider_request_id(
            attempt_id, receipt.request_id, result_ref=receipt.result_ref
        )
    # A durable receipt brings the request id with the proof: _confirm commits both at once.
    crashpoint("C", **where)
    return _confirm(ledger, adapter, attempt, receipt, actor=actor)


def _settle(
    ledger: Ledger,
    attempt_id: str,
    state: State,
    reason: str,
    *,
    actor: str,
    answer: Receipt | Found | None = None,
    retry_at: float | None = None,
) -> Attempt:
    """Move a dispatched attempt to ``state``, with the result and request id ``answer``
    names; only from DISPATCHED (one that moved on meanwhile raises IllegalTransition)."""
    return ledger.transition(
        attempt_id,
        state,
        expected=State.DISPATCHED,
        actor=actor,
        reason=reason,
        result_ref=answer.result_ref if answer else None,
        provider_request_id=answer.request_id if answer else None,
        next_attempt_at=retry_at,
    )


def _confirm(
    ledger: Ledger, adapter: ToolAdapter, attempt: Attempt, receipt: Receipt, *, actor: str
) -> Attempt:
    def settle(state: State, reason: str, found: Found | None = None) -> Attempt:
        # The receipt's request id is already recorded unless the receipt is durable; a
        # request id recorded first is kept (transition() only fills an empty one).
        return _settle(
            ledger, attempt.attempt_id, state, reason, actor=actor, answer=found or receipt
        )

    if receipt.durable:
        # One commit: the provider request id, the result, the outcome and its event.
        request = f"provider request {receipt.request_id}"
        if receipt.payload_hash not in (None, attempt.args_hash):
            return settle(
                State.UNKNOWN, f"the receipt's payload hash differs from the intent's ({request})"
            )
        return settle(State.OUTCOME_CONFIRMED, f"durable receipt from the provider ({request})")
    if not adapter.has_lookup:
        return settle(State.UNKNOWN, "no durable receipt and no lookup: a response is no proof")
    try:
        found = look_up(adapter, attempt, ledger.now)
    except Exception as exc:
        return settle(State.UNKNOWN, f"lookup raised {type(exc).__name__}: {exc}")
    if isinstance(found, Found):
        if found.payload_hash == attempt.args_hash:
            return settle(State.OUTCOME_CONFIRMED, "confirmed by the provider's lookup", found)
        return settle(State.UNKNOWN, "the provider holds an effect with another payload hash")
    if isinstance(found, Absent):
        return settle(State.UNKNOWN, "lookup does not show the effect yet (it may lag)")
    return settle(State.UNKNOWN, f"lookup unavailable: {found.reason}")
