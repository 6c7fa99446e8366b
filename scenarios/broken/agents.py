"""Deliberately broken agents: one classic recovery bug each, and the invariant that catches it.

Each agent is a worker ``worker(message, ctx)`` and a recovery ``recover(ctx)`` (the reference
one where the bug is elsewhere), built on the reference ledger, wrapper and adapters with the
one mistake put back in. They are the harness's own regression suite (every one must be
caught) and a catalogue for users: if your worker does what one of these does, the invariant
named in its docstring is the one that will fail.

Messages have the reference worker's shape::

    {"task_id": "t-1", "calls": [{"tool": "send_email", "key": "...", "args": {...}}]}
"""

from __future__ import annotations

import dataclasses
import sqlite3
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import httpx

from pytest_crashpoints import (
    Absent,
    Attempt,
    Authority,
    Context,
    Found,
    Receipt,
    State,
    crashpoint,
    guarded_call,
    recover,
    reference_worker,
)
from pytest_crashpoints.errors import IllegalTransition
from pytest_crashpoints.ledger import LookupResult, normalize_args

#: The custom argument the reference email adapter sends the idempotency key in.
CORRELATION = "idempotency_key"

__all__ = [
    "authority_read_once_worker",
    "blind_retry_recovery",
    "confirm_on_http_200_recovery",
    "dispatched_after_send_worker",
    "failed_lookup_as_failure_worker",
    "forget_owner_recovery",
    "gives_up_after_crashed_recovery",
    "key_per_delivery_worker",
    "lagging_search_trusted_recovery",
    "random_key_worker",
    "retry_review_recovery",
    "skip_after_crash_worker",
    "stale_authority_recovery",
    "tenant_blind_recovery",
    "tenant_blind_releasing_recovery",
    "timeout_as_absent_recovery",
    "unclaimed_recovery",
]


def _authority(ctx: Context, task_id: str) -> Authority:
    authority = ctx.authority(task_id)
    if authority is None:
        raise RuntimeError(f"task {task_id!r} was revoked; the message stays unacknowledged")
    return authority


def _calls_with_keys(message: Mapping[str, Any], ctx: Context, keys: list[str]) -> list[str]:
    """The reference worker, but with the given idempotency key for each call, and the task's
    authority read once, when the message arrives."""
    task_id = str(message["task_id"])
    authority = _authority(ctx, task_id)
    adapters = ctx.adapters()
    states = []
    for call, key in zip(message["calls"], keys, strict=True):
        attempt = guarded_call(
            ctx.ledger,
            adapters[call["tool"]],
            task_id=task_id,
            args=call["args"],
            idempotency_key=key,
            authority=authority,
            actor=ctx.worker_id,
        )
        states.append(attempt.state.value)
    return states


def _intents(
    message: Mapping[str, Any], ctx: Context, *, lease_seconds: float | None = None
) -> Iterator[tuple[Attempt, bool, Any, Authority]]:
    """Record the intent of each call of the message in turn, under the task's authority read
    when the message arrives: the reference order's first step, which the workers below that
    take the later steps by hand get right (their bugs come after it). Yields the attempt,
    whether this delivery created it, the call's adapter and that authority."""
    task_id = str(message["task_id"])
    authority = _authority(ctx, task_id)
    adapters = ctx.adapters()
    for call in message["calls"]:
        adapter = adapters[call["tool"]]
        attempt, created = ctx.ledger.record_intent(
            task_id=task_id,
            tool_name=adapter.tool_name,
            args=normalize_args(call["args"]),
            idempotency_key=call["key"],
            authority=authority,
            actor=ctx.worker_id,
            lease_seconds=lease_seconds,
        )
        yield attempt, created, adapter, authority


# -- 1. blind retry ---------------------------------------------------------------------------


def blind_retry_recovery(ctx: Context) -> int:
    """BUG: recovery re-sends every attempt left in flight, without asking the provider.

    A worker killed after the provider applied the request (B) leaves a DISPATCHED attempt;
    "retry on restart" sends it again. Caught by invariant 1 (a non-idempotent effect twice).
    """
    adapters = ctx.adapters()
    acted = 0
    for attempt in ctx.ledger.attempts():
        if not attempt.in_flight:
            continue
        path = {
            State.INTENT_RECORDED: [State.DISPATCHED],
            State.DISPATCHED: [],
            State.UNKNOWN: [State.RECONCILED, State.DISPATCHED],
            State.RECONCILED: [State.DISPATCHED],
            State.FAILED_RETRYABLE: [State.DISPATCHED],
        }[attempt.state]
        for state in path:
            ctx.ledger.transition(
                attempt.attempt_id, state, actor=ctx.worker_id, reason="retry on restart"
            )
        try:
            receipt = adapters[attempt.tool_name].dispatch(
                attempt.args, idempotency_key=attempt.idempotency_key, authority=attempt.authority
            )
        except Exception:
            continue  # still DISPATCHED: the next restart retries it again
        ctx.ledger.transition(
            attempt.attempt_id,
            State.OUTCOME_CONFIRMED,
            actor=ctx.worker_id,
            reason="retried after the restart",
            provider_request_id=receipt.request_id,
            result_ref=receipt.result_ref,
        )
        acted += 1
    return acted


# -- 2. a random idempotency key per try ------------------------------------------------------


def random_key_worker(message: Mapping[str, Any], ctx: Context) -> list[str]:
    """BUG: a fresh ``uuid4()`` idempotency key on every delivery.

    The key must name the logical effect; a random one names the try. A redelivered message
    creates a second attempt with a new key, and even an idempotent provider (payments)
    cannot tell it is the same charge. Caught by invariant 1.
    """
    keys = [f"{call['key']}:{uuid.uuid4().hex}" for call in message["calls"]]
    return _calls_with_keys(message, ctx, keys)


# -- 3. DISPATCHED recorded after the send ----------------------------------------------------


def dispatched_after_send_worker(message: Mapping[str, Any], ctx: Context) -> list[str]:
    """BUG: the attempt is marked DISPATCHED only once the provider has answered.

    The safe order marks DISPATCHED durably *before* the request leaves. Here a kill between
    the send and the record (B) leaves an INTENT_RECORDED attempt for an email that was sent:
    recovery rightly believes it never left and sends it again. Caught by invariant 1.
    """
    ledger = ctx.ledger
    states = []
    for attempt, created, adapter, authority in _intents(message, ctx, lease_seconds=60.0):
        if not created and attempt.state is not State.INTENT_RECORDED:
            states.append(attempt.state.value)
            continue
        crashpoint("A", tool=adapter.tool_name, task_id=attempt.task_id)
        receipt: Receipt = adapter.dispatch(
            attempt.args, idempotency_key=attempt.idempotency_key, authority=authority
        )
        crashpoint("B", tool=adapter.tool_name, task_id=attempt.task_id)
        ledger.transition(
            attempt.attempt_id,
            State.DISPATCHED,
            expected=State.INTENT_RECORDED,
            actor=ctx.worker_id,
            reason="sent",
        )
        attempt = ledger.transition(
            attempt.attempt_id,
            State.OUTCOME_CONFIRMED,
            expected=State.DISPATCHED,
            actor=ctx.worker_id,
            reason="the provider answered",
            provider_request_id=receipt.request_id,
            result_ref=receipt.result_ref,
        )
        states.append(attempt.state.value)
    return states


# -- 4. an HTTP 200 taken as confirmation -----------------------------------------------------


def confirm_on_http_200_recovery(ctx: Context) -> int:
    """BUG: recovery asks the email provider's search about every in-flight attempt and takes
    an HTTP 200 as confirmation, whatever the answer holds.

    A search answers 200 with zero hits when nothing was sent (or when it lags). A worker
    killed after the intent commit (A) never sent the email; recovery marks it CONFIRMED and
    the invoice is never sent. Caught by invariant 2 (CONFIRMED, but the provider has no
    effect); invariant 3 also fails (CONFIRMED without a provider request id).
    """
    acted = 0
    for attempt in ctx.ledger.attempts():
        if not attempt.in_flight:
            continue
        client = ctx.client("email", attempt.authority)
        query = f"unique_args['{CORRELATION}']=\"{attempt.idempotency_key}\""
        try:
            response = client.get("/v3/messages", params={"query": query})
        except httpx.HTTPError:
            continue
        if response.status_code != 200:
            continue
        path = {
            State.INTENT_RECORDED: [State.DISPATCHED, State.OUTCOME_CONFIRMED],
            State.DISPATCHED: [State.OUTCOME_CONFIRMED],
            State.UNKNOWN: [State.OUTCOME_CONFIRMED],
        }.get(attempt.state, [])
        for state in path:
            ctx.ledger.transition(
                attempt.attempt_id, state, actor=ctx.worker_id, reason="the provider said 200"
            )
        acted += 1
    return acted


# -- 5. work skipped after a crash ------------------------------------------------------------


def skip_after_crash_worker(message: Mapping[str, Any], ctx: Context) -> list[str]:
    """BUG: the message is marked done (acknowledged) before its work is done.

    The worker keeps an inbox of handled messages and records the message there first. A kill
    right after that (the user fail point ``message.acked``) loses the work: a redelivery finds
    the message "done" and skips it, and the ledger never heard of it. Caught by invariant 2
    (a delivered message silently dropped).
    """
    task_id = str(message["task_id"])
    inbox = sqlite3.connect(ctx.env.path / "inbox.sqlite3", isolation_level=None)
    try:
        inbox.execute("CREATE TABLE IF NOT EXISTS handled (task_id TEXT PRIMARY KEY)")
        marked = inbox.execute("INSERT OR IGNORE INTO handled VALUES (?)", (task_id,))
        if marked.rowcount == 0:
            return []  # "already handled": a redelivery is skipped
    finally:
        inbox.close()
    crashpoint("message.acked", task_id=task_id)
    result: list[str] = reference_worker(message, ctx)
    return result


# -- 6. stale authority ------------------------------------------------------------------------


def stale_authority_recovery(ctx: Context) -> int:
    """BUG: recovery never compares the task's authority now with the attempt's: it keeps
    reconciling (and would keep retrying) with the credentials the attempt was created under.

    After E (revoked, narrowed, policy bumped, moved tenant) yesterday's credentials are
    applied to today's task. The fake providers refuse the retired key (401), so the attempt
    can never be resolved: caught by invariant 2 (it ends UNKNOWN) and by invariant 4 (no
    request under authority that was revoked: the journal records whose key a refused
    request presented).
    """
    return len(recover(ctx.ledger, ctx.adapters(), owner=ctx.worker_id))


class _UnderTodaysAuthority:
    """An adapter that makes every request with the task's authority *now*."""

    def __init__(self, inner: Any, ctx: Context) -> None:
        self._inner = inner
        self._ctx = ctx
        self.tool_name = inner.tool_name
        self.idempotent = inner.idempotent
        self.has_lookup = inner.has_lookup

    def _today(self, task_id: str, fallback: Authority) -> Authority:
        return self._ctx.authority(task_id) or fallback

    def dispatch(
        self, args: Mapping[str, Any], *, idempotency_key: str, authority: Authority
    ) -> Receipt:
        attempt = self._ctx.ledger.find(idempotency_key)
        if attempt is not None:
            authority = self._today(attempt.task_id, authority)
        receipt: Receipt = self._inner.dispatch(
            args, idempotency_key=idempotency_key, authority=authority
        )
        return receipt

    def lookup(self, attempt: Attempt) -> LookupResult:
        today = self._today(attempt.task_id, attempt.authority)
        result: LookupResult = self._inner.lookup(dataclasses.replace(attempt, authority=today))
        return result


def tenant_blind_recovery(ctx: Context) -> int:
    """BUG: recovery checks that the task's credential scope and policy version are unchanged
    (and that it was not revoked) but forgets the tenant, then carries the old attempt on with
    the task's credentials of today.

    A task moved to another tenant (E) while its email was UNKNOWN: the lookup under the new
    tenant finds nothing, and recovery sends the old attempt again for the new tenant. Caught
    by invariant 4 (a request that crosses a tenant boundary).
    """

    def authority_now(attempt: Attempt) -> Authority | None:
        now = ctx.authority(attempt.task_id)
        if now is None:
            return None
        old = attempt.authority
        same = (now.credential_scope, now.policy_version) == (
            old.credential_scope,
            old.policy_version,
        )
        return old if same else now  # the tenant is never compared

    adapters = {name: _UnderTodaysAuthority(a, ctx) for name, a in ctx.adapters().items()}
    return len(recover(ctx.ledger, adapters, owner=ctx.worker_id, current_authority=authority_now))


# -- 7. recovery that acts again on every run -------------------------------------------------


def retry_review_recovery(ctx: Context) -> int:
    """BUG: recovery "nudges" the review queue: each run re-sends every attempt that an earlier
    run left in MANUAL_REVIEW, with its original key, trusting the key to deduplicate.

    The deploy provider has no idempotency and no lookup, so a lost answer goes to review;
    the next recovery run deploys again, and so does every run after it. Caught by
    invariant 6 (a second recovery run causes a provider effect), and invariant 1.
    """
    in_review = [a for a in ctx.ledger.attempts() if a.state is State.MANUAL_REVIEW]
    acted = len(ctx.recover())
    adapters = ctx.adapters()
    for attempt in in_review:
        if attempt.tool_name in adapters:
            try:
                adapters[attempt.tool_name].dispatch(
                    attempt.args,
                    idempotency_key=attempt.idempotency_key,
                    authority=attempt.authority,
                )
            except Exception:
                continue
            acted += 1
    return acted


# -- 8. UNKNOWN without an owner --------------------------------------------------------------


def forget_owner_recovery(ctx: Context) -> int:
    """BUG: when recovery backs off from an attempt it cannot resolve yet, it "releases" it
    by clearing the owner, so the UNKNOWN attempt belongs to nobody until some recovery run
    happens to pick it up again.

    Caught by invariant 5 (in-flight work without an owner), e.g. when the provider's lookup
    times out (F) while an attempt is UNKNOWN.
    """
    actions = ctx.recover()
    ledger_path = ctx.env.ledger_path
    conn = sqlite3.connect(ledger_path, isolation_level=None, timeout=10.0)
    try:
        conn.execute(
            "UPDATE attempts SET owner = NULL, lease_expires_at = NULL "
            "WHERE state NOT IN ('OUTCOME_CONFIRMED', 'FAILED', 'MANUAL_REVIEW')"
        )
    finally:
        conn.close()
    return len(actions)


# -- 9. duplicate delivery not deduplicated ---------------------------------------------------


def key_per_delivery_worker(message: Mapping[str, Any], ctx: Context) -> list[str]:
    """BUG: the idempotency key counts deliveries (``<key>#<n>``, n = attempts already in the
    ledger for this call), so a redelivered message is a new attempt and sends again.

    The ledger would have deduplicated the redelivery by its key; the worker defeats it by
    naming every delivery anew. Caught by invariant 1.
    """
    task_id = str(message["task_id"])
    existing = ctx.ledger.attempts(task_id=task_id)
    keys = []
    for call in message["calls"]:
        n = sum(1 for a in existing if a.idempotency_key.startswith(call["key"] + "#"))
        keys.append(f"{call['key']}#{n + 1}")
    return _calls_with_keys(message, ctx, keys)


# -- 10. a lookup timeout taken for "absent" --------------------------------------------------


class _TimeoutMeansAbsent:
    """An adapter whose lookup answers Absent when the provider's lookup fails or times out."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.tool_name = inner.tool_name
        self.idempotent = inner.idempotent
        self.has_lookup = inner.has_lookup

    def dispatch(self, args: Mapping[str, Any], *, idempotency_key: str, authority: Any) -> Receipt:
        receipt: Receipt = self._inner.dispatch(
            args, idempotency_key=idempotency_key, authority=authority
        )
        return receipt

    def lookup(self, attempt: Attempt) -> LookupResult:
        try:
            result: LookupResult = self._inner.lookup(attempt)
        except httpx.HTTPError:
            return Absent()
        return result


def timeout_as_absent_recovery(ctx: Context) -> int:
    """BUG: recovery treats a lookup that timed out as "the provider has no such effect" and
    sends the (non-idempotent) email again.

    A timeout proves nothing; the attempt must stay UNKNOWN and back off. Caught by
    invariant 1 when the lookup times out (F) after a kill at B.
    """
    adapters = {name: _TimeoutMeansAbsent(a) for name, a in ctx.adapters().items()}
    return len(
        recover(
            ctx.ledger,
            adapters,
            owner=ctx.worker_id,
            current_authority=lambda attempt: ctx.authority(attempt.task_id),
        )
    )


# -- 11. a crashed recovery's attempts given up ------------------------------------------------


def gives_up_after_crashed_recovery(ctx: Context) -> int:
    """BUG: a "poison pill" rule: an attempt still in flight whose owner is a recovery process
    (so an earlier recovery died while holding it) is marked FAILED instead of reconciled.

    On its own every run looks right: a worker's crash is reconciled as it should be. Only
    when recovery itself is killed after claiming an attempt does the next run give up on it,
    and the work ends FAILED where an uninterrupted recovery puts it in MANUAL_REVIEW (deploy:
    no lookup). Caught by invariant 6 (recovery killed and run again ends elsewhere than an
    uninterrupted recovery from the same state).
    """
    given_up = 0
    for attempt in ctx.ledger.attempts():
        if attempt.in_flight and (attempt.owner or "").startswith("recovery-"):
            ctx.ledger.transition(
                attempt.attempt_id,
                State.FAILED,
                actor=ctx.worker_id,
                reason="a recovery crashed while holding it: given up as a poison pill",
            )
            given_up += 1
    return given_up + len(ctx.recover())


# -- 12. a failed confirming lookup taken as failure ------------------------------------------


def failed_lookup_as_failure_worker(message: Mapping[str, Any], ctx: Context) -> list[str]:
    """BUG: after the send, the worker confirms with the provider's lookup, and takes a lookup
    that fails (a timeout, a 500) for "the send failed": the attempt is marked FAILED.

    The email went out; the lookup failing says nothing about it. The attempt must stay
    UNKNOWN for recovery (as ``guarded_call`` leaves it). Caught by invariant 2 (FAILED, but
    the provider holds the effect) when lookups fail (F) during the worker's own delivery.
    """
    ledger = ctx.ledger
    states = []
    for attempt, created, adapter, authority in _intents(message, ctx):
        if not created:
            states.append(attempt.state.value)
            continue
        where = {"tool": adapter.tool_name, "task_id": attempt.task_id}
        crashpoint("A", **where)
        attempt = ledger.transition(
            attempt.attempt_id,
            State.DISPATCHED,
            expected=State.INTENT_RECORDED,
            actor=ctx.worker_id,
            reason="dispatching",
        )
        receipt: Receipt = adapter.dispatch(
            attempt.args, idempotency_key=attempt.idempotency_key, authority=authority
        )
        crashpoint("B", **where)
        attempt = ledger.record_provider_request_id(
            attempt.attempt_id, receipt.request_id, result_ref=receipt.result_ref
        )
        crashpoint("C", **where)
        try:
            found = adapter.lookup(attempt)
        except httpx.HTTPError as exc:
            attempt = ledger.transition(
                attempt.attempt_id,
                State.FAILED,
                expected=State.DISPATCHED,
                actor=ctx.worker_id,
                reason=f"could not confirm the send ({type(exc).__name__}): failed",
            )
        else:
            confirmed = isinstance(found, Found) and found.payload_hash == attempt.args_hash
            attempt = ledger.transition(
                attempt.attempt_id,
                State.OUTCOME_CONFIRMED if confirmed else State.UNKNOWN,
                expected=State.DISPATCHED,
                actor=ctx.worker_id,
                reason="the lookup shows it" if confirmed else "not confirmed yet",
            )
        states.append(attempt.state.value)
    return states


# -- 13. a recovery that does not claim -------------------------------------------------------


def unclaimed_recovery(ctx: Context) -> int:
    """BUG: recovery re-sends an attempt that never left (INTENT_RECORDED: the safe order
    proves it was not sent) without claiming it first, and records the send after it.

    Alone it is right. Two recoveries at once (two restarted workers, a cron and an operator)
    both read INTENT_RECORDED and both send: without a claim (an owner with a lease, taken by
    compare-and-set) nothing stops the second. Caught by invariant 1 when two recoveries race
    after a worker was killed at A, the first waiting where it would have claimed
    (``recovery.claimed``) while the second runs.
    """
    adapters = ctx.adapters()
    ledger = ctx.ledger
    acted = 0
    for attempt in ledger.attempts():
        if attempt.state is not State.INTENT_RECORDED or ledger.now() - attempt.created_at < 30:
            continue
        if attempt.lease_expires_at is not None and attempt.lease_expires_at > ledger.now():
            continue  # its worker is alive
        adapter = adapters[attempt.tool_name]
        # The reference recovery claims the attempt here; this one only marks the place.
        crashpoint("recovery.claimed", attempt_id=attempt.attempt_id, tool=attempt.tool_name)
        receipt = adapter.dispatch(
            attempt.args, idempotency_key=attempt.idempotency_key, authority=attempt.authority
        )
        try:
            for state in (State.DISPATCHED, State.OUTCOME_CONFIRMED):
                ledger.transition(
                    attempt.attempt_id,
                    state,
                    actor=ctx.worker_id,
                    reason="recovery sent what never left",
                    provider_request_id=receipt.request_id,
                    result_ref=receipt.result_ref,
                )
        except IllegalTransition:
            pass  # someone else recorded it meanwhile
        acted += 1
    return acted + len(ctx.recover())


# -- 14. a lagging search trusted --------------------------------------------------------------


def lagging_search_trusted_recovery(ctx: Context) -> int:
    """BUG: recovery takes "not in the provider's search" for "never sent", however recent
    the send: it ignores that the search index lags behind the writes.

    An email sent just before the worker died is not in the search yet when recovery asks;
    recovery sends it again. The reference adapters wait until a send is older than the
    search's lag bound before a miss counts as absent. Caught by invariant 1 when the search
    still lags (a search lag that matters) at the recovery after a kill at B.
    """
    return len(
        recover(
            ctx.ledger,
            ctx.adapters(search_lag_bound=0),
            owner=ctx.worker_id,
            current_authority=lambda attempt: ctx.authority(attempt.task_id),
        )
    )


# -- 15. authority read once per message --------------------------------------------------------


def authority_read_once_worker(message: Mapping[str, Any], ctx: Context) -> list[str]:
    """BUG: the worker reads the task's authority once, when the message arrives, and makes
    every tool call of the message under it.

    When the authority is revoked or narrowed between two calls (an operator revokes the
    integration while the agent is mid-task), the later calls still go out with the old
    credentials. The reference worker asks before each call and records a refused call in
    MANUAL_REVIEW. Caught by invariant 4 when the authority changes between two tool calls of
    one message (E midway).
    """
    return _calls_with_keys(message, ctx, [call["key"] for call in message["calls"]])


# -- 16. two bugs in one recovery ---------------------------------------------------------------


class _ReleasedOnFailedLookup:
    """An adapter that notes each attempt whose lookup failed (a timeout, a 500)."""

    def __init__(self, inner: Any, released: set[str]) -> None:
        self._inner = inner
        self._released = released
        self.tool_name = inner.tool_name
        self.idempotent = inner.idempotent
        self.has_lookup = inner.has_lookup

    def dispatch(self, args: Mapping[str, Any], *, idempotency_key: str, authority: Any) -> Receipt:
        receipt: Receipt = self._inner.dispatch(
            args, idempotency_key=idempotency_key, authority=authority
        )
        return receipt

    def lookup(self, attempt: Attempt) -> LookupResult:
        try:
            result: LookupResult = self._inner.lookup(attempt)
        except httpx.HTTPError:
            self._released.add(attempt.attempt_id)
            raise
        return result


def tenant_blind_releasing_recovery(ctx: Context) -> int:
    """BUG (two of them, each shown by a schedule of its own): the tenant change of
    :func:`tenant_blind_recovery`, and an attempt whose lookup failed "released" (its owner
    cleared) for some later run to pick up, as :func:`forget_owner_recovery` does to every
    attempt it backs off from.

    A task moved to another tenant (E) while its email was UNKNOWN is sent again under the new
    tenant (invariant 4, with 1 and 2); the provider's lookups failing (F) while an attempt is
    UNKNOWN leave it with no owner (invariant 5). No one schedule shows both: the test reports
    the first, and the other as found after it.
    """
    released: set[str] = set()

    def authority_now(attempt: Attempt) -> Authority | None:
        now = ctx.authority(attempt.task_id)
        if now is None:
            return None
        old = attempt.authority
        same = (now.credential_scope, now.policy_version) == (
            old.credential_scope,
            old.policy_version,
        )
        return old if same else now  # the tenant is never compared

    adapters = {
        name: _ReleasedOnFailedLookup(_UnderTodaysAuthority(adapter, ctx), released)
        for name, adapter in ctx.adapters().items()
    }
    acted = recover(ctx.ledger, adapters, owner=ctx.worker_id, current_authority=authority_now)
    conn = sqlite3.connect(ctx.env.ledger_path, isolation_level=None, timeout=10.0)
    try:
        for attempt_id in sorted(released):
            conn.execute(
                "UPDATE attempts SET owner = NULL, lease_expires_at = NULL WHERE attempt_id = ? "
                "AND state NOT IN ('OUTCOME_CONFIRMED', 'FAILED', 'MANUAL_REVIEW')",
                (attempt_id,),
            )
    finally:
        conn.close()
    return len(acted)
