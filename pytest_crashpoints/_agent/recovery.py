"""Reference recovery: reconcile in-flight attempts against the providers.

Recovery is a reconciliation, not a retry loop. For each attempt left in flight it claims a
lease, checks the authority, asks the provider, and only then decides:

======================================  ==================================================
what recovery finds                      what it does
======================================  ==================================================
authority or arguments changed           no reuse: resolve the old attempt without dispatch
                                         (FAILED if it never left, MANUAL_REVIEW if it may
                                         have) and create a linked attempt in MANUAL_REVIEW
INTENT_RECORDED past the grace period    the request never left: dispatch it
FAILED_RETRYABLE past its backoff        the provider proved nothing happened: dispatch again
lookup finds it, payload hash matches    OUTCOME_CONFIRMED
lookup finds another payload             MANUAL_REVIEW
lookup proves it absent                  dispatch again with the same key
lookup unavailable or ambiguous          stay UNKNOWN, owned, ``next_attempt_at`` backed off;
                                         MANUAL_REVIEW once ``review_after`` has passed
no lookup, idempotent provider           dispatch again with the same key (the provider
                                         replays the first answer)
no lookup, not idempotent                MANUAL_REVIEW, never a retry
======================================  ==================================================

Fail points: ``recovery.claimed`` (after the lease is taken) and ``recovery.looked_up``
(after the provider answered, before the verdict is committed), so the harness can kill
recovery itself. Every step is a compare-and-set on the attempt's state, so recovery is safe
to run twice, concurrently, and after being killed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from .._inject.failpoints import crashpoint
from .._ledger.authority import Authority
from .._ledger.records import Attempt
from .._ledger.sqlite import Ledger
from .._ledger.states import State
from ..errors import CrashpointsError, IllegalTransition, LeaseHeld
from .toolcall import (
    Absent,
    Found,
    ToolAdapter,
    Unavailable,
    dispatch_and_confirm,
    look_up,
)

__all__ = ["RecoveryAction", "RecoveryPolicy", "recover"]


@dataclasses.dataclass(frozen=True)
class RecoveryPolicy:
    """Timing of recovery, in harness seconds.

    ``grace`` is how old an INTENT_RECORDED attempt must be before recovery takes it over from
    a worker that may still be alive; ``lease`` how long a claim lasts; backoff for an
    unanswered lookup doubles with the attempt's age, between ``backoff_min`` and
    ``backoff_max``; after ``review_after`` seconds without an answer, MANUAL_REVIEW.
    """

    grace: float = 30.0
    lease: float = 60.0
    backoff_min: float = 5.0
    backoff_max: float = 300.0
    review_after: float = 3600.0


@dataclasses.dataclass(frozen=True)
class RecoveryAction:
    """What recovery did with one attempt."""

    attempt_id: str
    from_state: State
    to_state: State
    action: str


def recover(
    ledger: Ledger,
    adapters: Mapping[str, ToolAdapter],
    *,
    owner: str,
    current_authority: Callable[[Attempt], Authority | None] | None = None,
    policy: RecoveryPolicy | None = None,
) -> list[RecoveryAction]:
    """Reconcile every in-flight attempt that is due; return what was done, in order.

    ``adapters`` maps a tool name to its adapter. ``current_authority`` returns the authority
    the attempt's task holds *now* (tenant, scope, policy version; ``None`` if it was
    revoked); by default the attempt's own. Attempts owned by another live lease, or backing
    off, are left alone. An attempt whose tool has no adapter raises
    :class:`CrashpointsError` naming the tool.
    """
    policy = policy or RecoveryPolicy()
    actions: list[RecoveryAction] = []
    for attempt in ledger.attempts():
        if not _due(ledger, attempt, policy):
            continue
        adapter = adapters.get(attempt.tool_name)
        if adapter is None:
            raise CrashpointsError(
                f"recovery has no adapter for tool {attempt.tool_name!r} (attempt "
                f"{attempt.attempt_id}); pass one in adapters={{{attempt.tool_name!r}: ...}}."
            )
        try:
            claimed = ledger.claim(attempt.attempt_id, owner=owner, lease_seconds=policy.lease)
        except LeaseHeld:
            continue
        if claimed.state != attempt.state:
            continue  # someone moved it between our read and our claim; next pass will see it
        crashpoint("recovery.claimed", attempt_id=attempt.attempt_id, tool=attempt.tool_name)
        try:
            action = _reconcile(ledger, adapter, claimed, owner, current_authority, policy)
        except IllegalTransition:
            continue  # another recovery won the compare-and-set: it owns the outcome
        finally:
            ledger.release(attempt.attempt_id, owner=owner)
        if action is not None:
            actions.append(action)
    return actions


def _due(ledger: Ledger, attempt: Attempt, policy: RecoveryPolicy) -> bool:
    now = ledger.now()
    if not attempt.in_flight:
        return False
    if attempt.next_attempt_at is not None and attempt.next_attempt_at > now:
        return False
    if attempt.state is State.INTENT_RECORDED:
        return now - attempt.created_at >= policy.grace
    return True


def _reconcile(
    ledger: Ledger,
    adapter: ToolAdapter,
    attempt: Attempt,
    owner: str,
    current_authority: Callable[[Attempt], Authority | None] | None,
    policy: RecoveryPolicy,
) -> RecoveryAction | None:
    start = attempt.state

    def move(to: State, reason: str, found: Found | None = None) -> Attempt:
        nonlocal attempt
        attempt = ledger.transition(
            attempt.attempt_id,
            to,
            expected=attempt.state,
            actor=owner,
            reason=reason,
            result_ref=None if found is None else found.result_ref,
            provider_request_id=None if found is None else found.request_id,
        )
        return attempt

    def done(action: str) -> RecoveryAction:
        return RecoveryAction(attempt.attempt_id, start, attempt.state, action)

    now_authority = attempt.authority if current_authority is None else current_authority(attempt)
    if now_authority != attempt.authority:
        return done(_relink(ledger, attempt, now_authority, owner, move))

    if attempt.state in (State.INTENT_RECORDED, State.FAILED_RETRYABLE, State.RECONCILED):
        # Never left, or proven not applied: dispatching now cannot duplicate anything.
        move(State.DISPATCHED, f"recovery dispatches an attempt left {start.value}")
        attempt = _redispatch(ledger, adapter, attempt, owner)
        return done("dispatched")

    if attempt.state is State.DISPATCHED:
        move(State.UNKNOWN, "recovery found it dispatched with no live owner: outcome unknown")

    if not adapter.has_lookup:
        if adapter.idempotent:
            move(State.RECONCILED, "no lookup, but the provider deduplicates by key")
            move(State.DISPATCHED, "recovery retries with the same idempotency key")
            attempt = _redispatch(ledger, adapter, attempt, owner)
            return done("retried with the same key")
        move(State.MANUAL_REVIEW, "no idempotency and no lookup: never retried blindly")
        return done("sent to review")

    try:
        found = look_up(adapter, attempt, ledger.now)
    except Exception as exc:
        found = Unavailable(f"lookup raised {type(exc).__name__}: {exc}")
    crashpoint("recovery.looked_up", attempt_id=attempt.attempt_id, tool=attempt.tool_name)

    if isinstance(found, Found):
        if found.payload_hash == attempt.args_hash:
            move(State.OUTCOME_CONFIRMED, "the provider's lookup shows it", found)
            return done("confirmed")
        move(State.MANUAL_REVIEW, "the provider holds an effect with another payload hash")
        return done("sent to review")
    if isinstance(found, Absent):
        move(State.RECONCILED, "a consistent lookup proves it absent")
        move(State.DISPATCHED, "recovery dispatches again with the same key")
        attempt = _redispatch(ledger, adapter, attempt, owner)
        return done("retried with the same key")
    now = ledger.now()
    if now - attempt.created_at >= policy.review_after:
        move(State.MANUAL_REVIEW, f"no answer for {policy.review_after:g}s: {found.reason}")
        return done("sent to review")
    delay = min(policy.backoff_max, max(policy.backoff_min, now - attempt.created_at))
    ledger.defer(attempt.attempt_id, until=now + delay, actor=owner)
    return RecoveryAction(attempt.attempt_id, start, State.UNKNOWN, f"backed off {delay:g}s")


def _relink(
    ledger: Ledger,
    attempt: Attempt,
    now_authority: Authority | None,
    owner: str,
    move: Callable[..., Attempt],
) -> str:
    old = attempt.authority
    if now_authority is None:
        changed = "revoked"
    else:
        changed = ", ".join(
            name
            for name, before, after in (
                ("tenant", old.tenant_id, now_authority.tenant_id),
                ("credential scope", old.credential_scope, now_authority.credential_scope),
                ("policy version", old.policy_version, now_authority.policy_version),
            )
            if before != after
        )
    reason = f"authority changed since the intent ({changed}): not reused"
    if attempt.state in (State.INTENT_RECORDED, State.FAILED_RETRYABLE, State.RECONCILED):
        move(State.FAILED, reason + "; it never took effect")
    else:
        if attempt.state is State.DISPATCHED:
            move(State.UNKNOWN, "recovery found it dispatched with no live owner")
        move(State.MANUAL_REVIEW, reason + "; it may have taken effect")
    if now_authority is None:
        return "resolved: authority revoked"
    ledger.link_attempt(
        attempt.attempt_id, args=attempt.args, authority=now_authority, actor=owner, reason=reason
    )
    return "relinked for review"


def _redispatch(ledger: Ledger, adapter: ToolAdapter, attempt: Attempt, owner: str) -> Attempt:
    where = {
        "tool": attempt.tool_name,
        "task_id": attempt.task_id,
        "attempt_id": attempt.attempt_id,
    }
    return dispatch_and_confirm(ledger, adapter, attempt, attempt.args, actor=owner, where=where)
