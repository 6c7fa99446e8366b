from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_crashpoints import (
    Absent,
    Attempt,
    Found,
    Ledger,
    ProviderRejected,
    State,
    Unavailable,
    guarded_call,
)
from pytest_crashpoints.errors import ArgumentsError, IdempotencyKeyConflict
from pytest_crashpoints.ledger import LookupResult
from tests.conftest import ManualClock
from tests.fakes import AUTH, FakeMailer


def call(ledger: Ledger, adapter: FakeMailer, **overrides: object) -> Attempt:
    params: dict[str, object] = dict(
        task_id="t-1",
        args={"to": "a@example.com", "invoice": "inv-7"},
        idempotency_key="invoice:tenant-7:inv-7:send",
        authority=AUTH,
        actor="worker-1",
    )
    params.update(overrides)
    return guarded_call(ledger, adapter, **params)  # type: ignore[arg-type]


@pytest.fixture
def mailer(ledger: Ledger) -> FakeMailer:
    return FakeMailer(ledger.path)


def states(ledger: Ledger, attempt: Attempt) -> list[State]:
    return [e.to_state for e in ledger.events(attempt.attempt_id)]


def test_confirmed_through_lookup_and_dispatched_before_the_request_left(
    ledger: Ledger, mailer: FakeMailer
) -> None:
    attempt = call(ledger, mailer)
    assert attempt.state is State.OUTCOME_CONFIRMED
    assert mailer.state_seen_at_dispatch == [State.DISPATCHED]
    assert attempt.provider_request_id == "req_1"
    assert attempt.result_ref == "msg-of-invoice:tenant-7:inv-7:send"
    assert states(ledger, attempt) == [
        State.INTENT_RECORDED,
        State.DISPATCHED,
        State.OUTCOME_CONFIRMED,
    ]


def test_durable_receipt_confirms_without_lookup(ledger: Ledger, mailer: FakeMailer) -> None:
    mailer.durable, mailer.lookup_answer = True, Unavailable("must not be asked")
    attempt = call(ledger, mailer)
    assert (attempt.state, attempt.result_ref) == (State.OUTCOME_CONFIRMED, "msg_1")


def test_a_bare_response_without_lookup_is_not_confirmation(
    ledger: Ledger, mailer: FakeMailer
) -> None:
    mailer.has_lookup = False
    attempt = call(ledger, mailer)
    assert attempt.state is State.UNKNOWN
    assert attempt.provider_request_id == "req_1"


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (Absent(), "may lag"),
        (Unavailable("lookup timed out"), "lookup timed out"),
        (Found(payload_hash="0" * 64), "another payload hash"),
    ],
)
def test_unconfirmed_lookup_leaves_unknown(
    ledger: Ledger, mailer: FakeMailer, answer: LookupResult, why: str
) -> None:
    mailer.lookup_answer = answer
    attempt = call(ledger, mailer)
    assert attempt.state is State.UNKNOWN
    assert why in ledger.events(attempt.attempt_id)[-1].reason


def test_an_exception_from_dispatch_means_unknown_not_failed(
    ledger: Ledger, mailer: FakeMailer
) -> None:
    mailer.fail_with = ConnectionResetError("connection lost after sending")
    attempt = call(ledger, mailer)
    assert attempt.state is State.UNKNOWN
    assert "may have happened" in ledger.events(attempt.attempt_id)[-1].reason


def test_a_provider_refusal_fails_and_a_retryable_one_backs_off(
    ledger: Ledger, mailer: FakeMailer, clock: ManualClock
) -> None:
    mailer.fail_with = ProviderRejected("422 invalid address", retryable=False)
    failed = call(ledger, mailer)
    assert failed.state is State.FAILED
    mailer.fail_with = ProviderRejected("429 slow down", retryable=True, retry_after=30)
    later = call(ledger, mailer, idempotency_key="other-key")
    assert later.state is State.FAILED_RETRYABLE
    assert later.next_attempt_at == clock.t + 30


def test_redelivery_after_success_sends_nothing(ledger: Ledger, mailer: FakeMailer) -> None:
    first = call(ledger, mailer)
    second = call(ledger, mailer, actor="worker-2")
    assert second == first
    assert len(mailer.sent) == 1
    assert len(ledger.attempts()) == 1


def test_redelivery_of_an_in_flight_attempt_leaves_it_to_recovery(
    ledger: Ledger, mailer: FakeMailer
) -> None:
    mailer.has_lookup = False
    unknown = call(ledger, mailer)
    assert unknown.state is State.UNKNOWN
    again = call(ledger, mailer, actor="worker-2")
    assert again.state is State.UNKNOWN
    assert len(mailer.sent) == 1


def test_redelivery_while_the_intent_is_owned_does_not_dispatch(
    ledger: Ledger, mailer: FakeMailer, clock: ManualClock
) -> None:
    ledger.record_intent(
        task_id="t-1",
        tool_name="send_email",
        args={"to": "a@example.com", "invoice": "inv-7"},
        idempotency_key="invoice:tenant-7:inv-7:send",
        authority=AUTH,
        actor="worker-1",
        lease_seconds=60,
    )
    held = call(ledger, mailer, actor="worker-2")
    assert held.state is State.INTENT_RECORDED
    assert mailer.sent == []
    clock.advance(61)  # worker-1 died at A; its lease ran out
    taken = call(ledger, mailer, actor="worker-2")
    assert taken.state is State.OUTCOME_CONFIRMED
    assert len(mailer.sent) == 1


def test_bad_arguments_record_nothing_and_send_nothing(ledger: Ledger, mailer: FakeMailer) -> None:
    with pytest.raises(ArgumentsError):
        call(ledger, mailer, args={"to": "a@example.com", "amount": float("inf")})
    assert ledger.attempts() == []
    assert mailer.sent == []


def test_key_conflict_sends_nothing(ledger: Ledger, mailer: FakeMailer) -> None:
    call(ledger, mailer)
    with pytest.raises(IdempotencyKeyConflict):
        call(ledger, mailer, args={"to": "b@example.com", "invoice": "inv-7"})
    assert len(mailer.sent) == 1


@pytest.fixture
def commits(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ledger's write transactions, by operation, as they begin (bench/guarded_call.py
    counts them the same way)."""
    ops: list[str] = []
    original = Ledger._write

    @contextlib.contextmanager
    def counting(self: Ledger, op: str, attempt_id: str | None = None) -> Iterator[Any]:
        ops.append(op)
        with original(self, op, attempt_id) as conn:
            yield conn

    monkeypatch.setattr(Ledger, "_write", counting)
    return ops


def test_a_durable_receipt_is_committed_with_its_request_id_and_outcome_at_once(
    ledger: Ledger, mailer: FakeMailer, commits: list[str]
) -> None:
    mailer.durable = True
    attempt = call(ledger, mailer)
    assert commits == ["record_intent", "transition", "transition"]
    assert (attempt.state, attempt.provider_request_id, attempt.result_ref) == (
        State.OUTCOME_CONFIRMED,
        "req_1",
        "msg_1",
    )
    outcome = ledger.events(attempt.attempt_id)[-1]
    assert (outcome.from_state, outcome.to_state) == (State.DISPATCHED, State.OUTCOME_CONFIRMED)
    assert "req_1" in outcome.reason


def test_without_a_durable_receipt_the_request_id_is_committed_before_the_lookup(
    ledger: Ledger, mailer: FakeMailer, commits: list[str]
) -> None:
    seen: list[str | None] = []
    lookup = mailer.lookup

    def looking(attempt: Attempt) -> LookupResult:
        with Ledger(ledger.path) as observer:  # what another process reads meanwhile
            seen.append(observer.get(attempt.attempt_id).provider_request_id)
        return lookup(attempt)

    mailer.lookup = looking  # type: ignore[method-assign]
    attempt = call(ledger, mailer)
    assert commits == ["record_intent", "transition", "record_provider_request_id", "transition"]
    assert seen == ["req_1"]
    assert (attempt.state, attempt.provider_request_id) == (State.OUTCOME_CONFIRMED, "req_1")
