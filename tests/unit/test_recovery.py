from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_crashpoints import (
    Attempt,
    Authority,
    CrashpointsError,
    Found,
    Ledger,
    State,
    Unavailable,
    args_hash,
    recover,
)
from pytest_crashpoints.ledger import RecoveryPolicy
from tests.conftest import ManualClock
from tests.fakes import ARGS, AUTH, FakeMailer

KEY = "invoice:tenant-7:inv-7:send"


def left_at(ledger: Ledger, state: State, *, sent: FakeMailer | None = None) -> Attempt:
    """An attempt a dead worker left in ``state`` (and, if ``sent``, the provider has it)."""
    attempt, _ = ledger.record_intent(
        task_id="t-1",
        tool_name="send_email",
        args=ARGS,
        idempotency_key=KEY,
        authority=AUTH,
        actor="worker-1",
        lease_seconds=60,
    )
    path = {
        State.INTENT_RECORDED: [],
        State.DISPATCHED: [State.DISPATCHED],
        State.UNKNOWN: [State.DISPATCHED, State.UNKNOWN],
        State.FAILED_RETRYABLE: [State.DISPATCHED, State.FAILED_RETRYABLE],
    }[state]
    for step in path:
        attempt = ledger.transition(attempt.attempt_id, step, actor="worker-1", reason="test")
    if sent is not None:
        sent.sent.append((KEY, args_hash(ARGS)))
    return attempt


def run(ledger: Ledger, mailer: FakeMailer, **kwargs: object) -> list[tuple[State, State, str]]:
    actions = recover(ledger, {"send_email": mailer}, owner="recovery-1", **kwargs)  # type: ignore[arg-type]
    return [(a.from_state, a.to_state, a.action) for a in actions]


@pytest.fixture
def mailer(ledger: Ledger) -> FakeMailer:
    return FakeMailer(ledger.path)


def test_found_with_matching_payload_is_confirmed_without_sending(
    ledger: Ledger, mailer: FakeMailer, clock: ManualClock
) -> None:
    left_at(ledger, State.UNKNOWN, sent=mailer)
    clock.advance(61)
    assert run(ledger, mailer) == [(State.UNKNOWN, State.OUTCOME_CONFIRMED, "confirmed")]
    assert len(mailer.sent) == 1


def test_dispatched_by_a_dead_worker_is_unknown_then_reconciled(
    ledger: Ledger, mailer: FakeMailer, clock: ManualClock
) -> None:
    attempt = left_at(ledger, State.DISPATCHED, sent=mailer)
    clock.advance(61)
    assert run(ledger, mailer) == [(State.DISPATCHED, State.OUTCOME_CONFIRMED, "confirmed")]
    assert [e.to_state for e in ledger.events(attempt.attempt_id)][-2:] == [
        State.UNKNOWN,
        State.OUTCOME_CONFIRMED,
    ]


def test_absent_is_dispatched_again_with_the_same_key(
    ledger: Ledger, mailer: FakeMailer, clock: ManualClock
) -> None:
    left_at(ledger, State.UNKNOWN)
    clock.advance(61)
    assert run(ledger, mailer) == [
        (State.UNKNOWN, State.OUTCOME_CONFIRMED, "retried with the same key")
    ]
    assert mailer.sent == [(KEY, args_hash(ARGS))]


@pytest.mark.parametrize(
    "provider",
    [{"lookup_answer": Found(payload_hash="f" * 64)}, {"has_lookup": False}],
    ids=["other-payload", "no-lookup-and-no-idempotency"],
)
def test_an_unknown_that_cannot_be_settled_goes_to_review_never_retried(
    ledger: Ledger, clock: ManualClock, provider: dict[str, Any]
) -> None:
    """The provider has the request with another payload, or it cannot say whether it has
    it and would not deduplicate a retry."""
    mailer = FakeMailer(ledger.path, **provider)
    left_at(ledger, State.UNKNOWN)
    clock.advance(61)
    assert run(ledger, mailer) == [(State.UNKNOWN, State.MANUAL_REVIEW, "sent to review")]
    assert mailer.sent == []


def test_unavailable_lookup_backs_off_keeps_an_owner_then_reviews(
    ledger: Ledger, mailer: FakeMailer, clock: ManualClock
) -> None:
    attempt = left_at(ledger, State.UNKNOWN)
    mailer.lookup_answer = Unavailable("lookup timed out")
    policy = RecoveryPolicy(backoff_min=5, backoff_max=300, review_after=1000)
    clock.advance(61)
    assert run(ledger, mailer, policy=policy) == [(State.UNKNOWN, State.UNKNOWN, "backed off 61s")]
    after = ledger.get(attempt.attempt_id)
    assert (after.state, after.owner, after.next_attempt_at) == (
        State.UNKNOWN,
        "recovery-1",
        clock.t + 61,
    )
    assert run(ledger, mailer, policy=policy) == []  # still backing off: nothing asked
    clock.advance(61)
    assert run(ledger, mailer, policy=policy) == [(State.UNKNOWN, State.UNKNOWN, "backed off 122s")]
    clock.advance(1000)
    assert run(ledger, mailer, policy=policy) == [
        (State.UNKNOWN, State.MANUAL_REVIEW, "sent to review")
    ]
    assert mailer.sent == []


def test_no_lookup_but_idempotent_retries_with_the_same_key(
    ledger: Ledger, mailer: FakeMailer, clock: ManualClock
) -> None:
    mailer.has_lookup, mailer.idempotent, mailer.durable = False, True, True
    left_at(ledger, State.UNKNOWN)
    clock.advance(61)
    assert run(ledger, mailer) == [
        (State.UNKNOWN, State.OUTCOME_CONFIRMED, "retried with the same key")
    ]
    assert [key for key, _ in mailer.sent] == [KEY]


def test_intent_is_taken_over_only_after_grace_and_lease(
    ledger: Ledger, mailer: FakeMailer, clock: ManualClock
) -> None:
    left_at(ledger, State.INTENT_RECORDED)
    clock.advance(10)
    assert run(ledger, mailer, policy=RecoveryPolicy(grace=30)) == []
    clock.advance(25)  # past grace, but the worker's lease (60s) still holds
    assert run(ledger, mailer, policy=RecoveryPolicy(grace=30)) == []
    clock.advance(30)
    assert run(ledger, mailer, policy=RecoveryPolicy(grace=30)) == [
        (State.INTENT_RECORDED, State.OUTCOME_CONFIRMED, "dispatched")
    ]
    assert len(mailer.sent) == 1


def test_failed_retryable_waits_for_its_backoff(
    ledger: Ledger, mailer: FakeMailer, clock: ManualClock
) -> None:
    attempt = left_at(ledger, State.FAILED_RETRYABLE)
    ledger.defer(attempt.attempt_id, until=clock.t + 100, actor="worker-1")
    clock.advance(61)
    assert run(ledger, mailer) == []
    clock.advance(40)
    assert run(ledger, mailer) == [(State.FAILED_RETRYABLE, State.OUTCOME_CONFIRMED, "dispatched")]


@pytest.mark.parametrize(
    "changed",
    [
        Authority.of(tenant_id="tenant-8", credential_scope="email:send", policy_version="p1"),
        Authority.of(tenant_id="tenant-7", credential_scope="", policy_version="p1"),
        Authority.of(tenant_id="tenant-7", credential_scope="email:send", policy_version="p2"),
    ],
    ids=["tenant", "scope", "policy"],
)
@pytest.mark.parametrize("state", [State.INTENT_RECORDED, State.UNKNOWN])
def test_changed_authority_is_never_reused(
    ledger: Ledger, mailer: FakeMailer, clock: ManualClock, changed: Authority, state: State
) -> None:
    old = left_at(ledger, state)
    clock.advance(61)
    actions = run(ledger, mailer, current_authority=lambda _attempt: changed)
    expected = State.FAILED if state is State.INTENT_RECORDED else State.MANUAL_REVIEW
    assert actions == [(state, expected, "relinked for review")]
    assert mailer.sent == []
    [child] = [a for a in ledger.attempts() if a.parent_attempt_id == old.attempt_id]
    assert (child.state, child.authority) == (State.MANUAL_REVIEW, changed)
    assert "authority changed" in ledger.events(old.attempt_id)[-1].reason


def test_running_recovery_twice_changes_nothing_the_second_time(
    ledger: Ledger, mailer: FakeMailer, clock: ManualClock
) -> None:
    left_at(ledger, State.UNKNOWN)
    clock.advance(61)
    run(ledger, mailer)
    rows, events, sent = ledger.attempts(), ledger.events(), list(mailer.sent)
    assert run(ledger, mailer) == []
    assert (ledger.attempts(), ledger.events(), mailer.sent) == (rows, events, sent)


def test_an_attempt_without_an_adapter_is_a_clear_error(
    ledger: Ledger, mailer: FakeMailer, clock: ManualClock
) -> None:
    left_at(ledger, State.UNKNOWN)
    clock.advance(61)
    with pytest.raises(CrashpointsError, match="no adapter for tool 'send_email'"):
        recover(ledger, {}, owner="recovery-1")


def _search_finds_nothing(sent: list[str]) -> Any:
    """An e-mail API whose search has no hit yet; a send is accepted without a message id."""
    import httpx

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            sent.append(request.url.path)
            return httpx.Response(202, headers={"X-Request-Id": f"req-{len(sent)}"})
        return httpx.Response(200, json={"messages": []})

    return lambda authority: httpx.Client(base_url="https://email.test",
                                          transport=httpx.MockTransport(answer))


@pytest.mark.parametrize("waited, retried", [(400.0, True), (10.0, False)])
def test_the_search_lag_is_weighed_on_the_clock_of_the_attempts_ledger(
    tmp_path: Path, waited: float, retried: bool
) -> None:
    """An agent's own ledger on the wall clock, the reference e-mail adapter on harness
    seconds: whether a search with no hit proves the mail absent depends on how long ago the
    ledger says it was sent, read on the ledger's clock (not on the adapter's)."""
    from pytest_crashpoints._agent.adapters import EmailAdapter

    wall = ManualClock(start=1_767_225_600.0)
    ledger = Ledger(tmp_path / "agent.sqlite3", clock=wall)
    attempt, _ = ledger.record_intent(
        task_id="t-1", tool_name="send_email", idempotency_key="invoice:inv-7:send",
        args={"to": "a@example.com", "subject": "Invoice", "body": "120 EUR"},
        authority=AUTH, actor="worker-1",
    )
    ledger.transition(attempt.attempt_id, State.DISPATCHED, actor="worker-1", reason="send")
    ledger.transition(attempt.attempt_id, State.UNKNOWN, actor="worker-1", reason="no answer")
    wall.advance(waited)
    sent: list[str] = []
    adapter = EmailAdapter(_search_finds_nothing(sent), now=lambda: 5.0, search_lag_bound=60)
    [action] = recover(ledger, {"send_email": adapter}, owner="recovery-1")
    assert (action.action == "retried with the same key") is retried, action
    assert sent == (["/v3/mail/send"] if retried else [])
    ledger.close()
