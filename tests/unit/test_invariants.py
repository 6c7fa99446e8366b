"""Each invariant checker fires on evidence that breaks exactly it, and on nothing else."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_crashpoints import Attempt, Authority, State, args_hash
from pytest_crashpoints.harness import (
    AuthorityChange,
    Evidence,
    ExpectedEffect,
    Incident,
    Observation,
    ProviderRequest,
    RecoveryRerun,
    Violation,
    check_all,
)
from pytest_crashpoints.ledger import QueueEntry

AUTH = Authority.of(tenant_id="tenant-7", credential_scope="email:send", policy_version="p1")
ARGS = {"to": "a@example.com", "invoice": "inv-7"}
HASH = args_hash(ARGS)


def attempt(**changes: object) -> Attempt:
    base = Attempt(
        attempt_id="a-1",
        task_id="t-1",
        tool_name="send_email",
        args_hash=HASH,
        args=dict(ARGS),
        idempotency_key="invoice:inv-7",
        state=State.OUTCOME_CONFIRMED,
        provider_request_id="r-1",
        result_ref="msg-1",
        authority=AUTH,
        owner="worker-1",
        lease_expires_at=None,
        next_attempt_at=None,
        attempt_count=1,
        parent_attempt_id=None,
        created_at=0.0,
        updated_at=1.0,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def request(**changes: object) -> ProviderRequest:
    base = ProviderRequest(
        provider="email",
        request_id="r-1",
        at=1.0,
        tenant_id="tenant-7",
        scope=frozenset({"email:send"}),
        kind="send",
        operation_key="invoice:inv-7",
        args_hash=HASH,
        payload_hash="p" * 64,
        status=202,
        effect_applied=True,
        idempotent=False,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def queue_entry(a: Attempt) -> QueueEntry:
    return QueueEntry(
        a.attempt_id,
        a.task_id,
        a.tool_name,
        a.state,
        a.owner,
        None,
        0.0,
        None,
        a.args_hash,
        a.provider_request_id,
    )


def evidence(**changes: object) -> Evidence:
    a = attempt()
    base = Evidence(
        attempts=(a,),
        events=(),
        requests=(request(),),
        observations=(Observation(1, 1.0, "deliver t-1", (a,), ()),),
        authority_history=(AuthorityChange(1, "t-1", 0.0, AUTH, "initial"),),
        expected_effects=(ExpectedEffect("t-1", "send_email", HASH),),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def fired(ev: Evidence) -> list[Violation]:
    return check_all(ev)


def test_a_clean_case_has_no_violations() -> None:
    assert fired(evidence()) == []


def test_1_two_emails_for_one_attempt() -> None:
    ev = evidence(
        requests=(request(), request(request_id="r-2", at=9.0)),
        incidents=(Incident(5.0, "the worker was killed at B (hit 1)"),),
    )
    [v] = [v for v in fired(ev) if v.invariant == 1]
    assert v.attempt_ids == ("a-1",)
    assert "attempt a-1 (send_email, args " in v.message
    assert "caused 2 email effects: requests r-1 at t=1s and r-2 at t=9s" in v.message
    assert "email: it has no idempotency" in v.message
    assert "the worker was killed at B (hit 1)" in v.message


def test_1_fresh_keys_do_not_hide_a_double_charge() -> None:
    ev = evidence(
        attempts=(
            attempt(),
            attempt(attempt_id="a-2", idempotency_key="random-2", state=State.FAILED),
        ),
        requests=(
            request(provider="payments", idempotent=True),
            request(
                provider="payments", idempotent=True, request_id="r-2", operation_key="random-2"
            ),
        ),
    )
    ones = [v for v in fired(ev) if v.invariant == 1]
    assert len(ones) == 1
    assert "the keys differed" in ones[0].message
    assert set(ones[0].attempt_ids) == {"a-1", "a-2"}


@pytest.mark.parametrize(
    ("ev", "fragment"),
    [
        (evidence(attempts=(attempt(state=State.UNKNOWN),)), "ended UNKNOWN after the quiet phase"),
        (
            evidence(requests=(request(effect_applied=False, status=500),)),
            "CONFIRMED but the provider has 0 effect(s)",
        ),
        (
            evidence(attempts=(attempt(state=State.FAILED),)),
            "is FAILED but the provider applied it",
        ),
        (
            evidence(requests=(request(args_hash="9" * 64),)),
            "1 effect(s) for key 'invoice:inv-7', 0 with its arguments hash",
        ),
    ],
    ids=["not-final", "confirmed-without-effect", "failed-with-effect", "other-payload"],
)
def test_2_ledger_must_agree_with_the_provider(ev: Evidence, fragment: str) -> None:
    violations = fired(ev)
    assert {v.invariant for v in violations} == {2}
    assert any(fragment in v.message for v in violations), violations


def test_2_an_effect_no_attempt_records() -> None:
    ev = evidence(
        attempts=(), observations=(), requests=(request(args_hash="e" * 64),), expected_effects=()
    )
    [v] = fired(ev)
    assert v.invariant == 2
    assert "no attempt in the ledger records it" in v.message


def test_2_a_silently_dropped_message() -> None:
    ev = evidence(attempts=(), requests=(), observations=())
    [v] = fired(ev)
    assert v.invariant == 2
    assert "message t-1 was delivered and its send_email" in v.message
    assert "silently dropped" in v.message


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"args": {}}, "no arguments recorded"),
        ({"args": {"to": "someone-else@example.com"}}, "the recorded arguments hash to"),
        ({"provider_request_id": None}, "CONFIRMED without a provider request id"),
        ({"provider_request_id": "r-404"}, "'r-404' was never issued by the provider"),
    ],
)
def test_3_operator_visibility(changes: dict[str, object], fragment: str) -> None:
    ev = evidence(attempts=(attempt(**changes),))
    violations = fired(ev)
    assert {v.invariant for v in violations} == {3}
    assert fragment in violations[0].message


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"tenant_id": "tenant-8"}, "made for tenant 'tenant-8'"),
        (
            {"scope": frozenset({"email:send", "email:admin"})},
            "scope wider than the attempt's: email:admin",
        ),
    ],
)
def test_4_requests_stay_within_tenant_and_scope(changes: dict[str, object], fragment: str) -> None:
    violations = fired(evidence(requests=(request(**changes),)))
    assert {v.invariant for v in violations} == {4}
    assert fragment in violations[0].message


def test_4_no_request_under_changed_authority() -> None:
    revoked = Authority.of(tenant_id="tenant-7", credential_scope="", policy_version="p2")
    history = (
        AuthorityChange(1, "t-1", 0.0, AUTH, "initial"),
        AuthorityChange(2, "t-1", 0.5, revoked, "E"),
    )
    violations = fired(evidence(authority_history=history))
    assert {v.invariant for v in violations} == {4}
    assert "under authority that had changed" in violations[0].message
    # The same request before the change is fine.
    assert (
        fired(
            evidence(
                authority_history=(*history[:1], AuthorityChange(2, "t-1", 2.0, revoked, "E"))
            )
        )
        == []
    )


@pytest.mark.parametrize(
    ("owner", "queued", "fragment"),
    [(None, True, "has no owner"), ("worker-1", False, "is missing from the queue")],
)
def test_5_in_flight_work_is_queued_and_owned(
    owner: str | None, queued: bool, fragment: str
) -> None:
    in_flight = attempt(state=State.UNKNOWN, owner=owner)
    seen = Observation(
        3, 2.0, "after kill at B", (in_flight,), (queue_entry(in_flight),) if queued else ()
    )
    violations = fired(evidence(observations=(seen,)))
    assert {v.invariant for v in violations} == {5}
    assert "after step 3 (after kill at B, t=2s)" in violations[0].message
    assert fragment in violations[0].message


@pytest.mark.parametrize(
    ("rerun", "fragment"),
    [
        (
            RecoveryRerun(ledger_changes=("a-1: UNKNOWN -> OUTCOME_CONFIRMED",)),
            "changed the ledger",
        ),
        (
            RecoveryRerun(new_requests=(request(request_id="r-9", at=50.0),)),
            "caused 1 provider effect",
        ),
        (
            RecoveryRerun(
                killed_vs_uninterrupted=("a-1: FAILED vs OUTCOME_CONFIRMED",),
                killed_at="recovery.looked_up",
            ),
            "recovery killed at recovery.looked_up and run again ended elsewhere",
        ),
    ],
)
def test_6_recovery_twice_and_after_a_kill(rerun: RecoveryRerun, fragment: str) -> None:
    violations = fired(evidence(rerun=rerun))
    assert {v.invariant for v in violations} == {6}
    assert fragment in violations[0].message


def test_violation_text_names_the_invariant_and_shows_evidence() -> None:
    [v] = fired(evidence(attempts=(attempt(state=State.FAILED),)))
    text = str(v)
    assert text.startswith("invariant 2 (every attempt ends CONFIRMED, FAILED or MANUAL_REVIEW")
    assert "ledger: a-1 task=t-1 tool=send_email key=invoice:inv-7 state=FAILED" in text
    assert "journal: email r-1 t=1s send key=invoice:inv-7" in text
