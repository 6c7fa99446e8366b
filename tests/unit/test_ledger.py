from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from pytest_crashpoints import Authority, Ledger, State, args_hash
from pytest_crashpoints.errors import (
    ArgumentsError,
    IdempotencyKeyConflict,
    IllegalTransition,
    LeaseHeld,
    LedgerError,
    SchemaVersionError,
    UnknownAttempt,
)
from pytest_crashpoints.ledger import SCHEMA_VERSION
from tests.conftest import ManualClock
from tests.fakes import AUTH


def intent(ledger: Ledger, key: str = "invoice:tenant-7:inv-1:send", **overrides: object):
    params: dict[str, object] = dict(
        task_id="t-1",
        tool_name="send_email",
        args={"to": "a@example.com", "invoice": "inv-1"},
        idempotency_key=key,
        authority=AUTH,
        actor="worker-1",
    )
    params.update(overrides)
    return ledger.record_intent(**params)  # type: ignore[arg-type]


def test_record_intent_writes_row_and_event(ledger: Ledger, clock: ManualClock) -> None:
    attempt, created = intent(ledger)
    assert created
    assert attempt.state is State.INTENT_RECORDED
    assert attempt.args == {"invoice": "inv-1", "to": "a@example.com"}
    assert attempt.args_hash == args_hash({"to": "a@example.com", "invoice": "inv-1"})
    assert attempt.authority == AUTH
    assert attempt.owner == "worker-1"
    assert attempt.created_at == attempt.updated_at == clock.t
    [event] = ledger.events(attempt.attempt_id)
    assert (event.from_state, event.to_state, event.actor) == (
        None,
        State.INTENT_RECORDED,
        "worker-1",
    )


def test_same_key_same_args_returns_the_existing_attempt(ledger: Ledger) -> None:
    first, _ = intent(ledger)
    again, created = intent(ledger, args={"invoice": "inv-1", "to": "a@example.com"})
    assert not created
    assert again == first
    assert len(ledger.attempts()) == 1
    assert len(ledger.events()) == 1


def test_same_key_other_args_is_a_key_conflict_and_changes_nothing(ledger: Ledger) -> None:
    first, _ = intent(ledger)
    with pytest.raises(IdempotencyKeyConflict) as info:
        intent(ledger, args={"to": "b@example.com", "invoice": "inv-1"})
    assert "invoice:tenant-7:inv-1:send" in str(info.value)
    assert "nothing was recorded" in str(info.value)
    assert ledger.attempts() == [first]


def test_arguments_that_cannot_be_normalized_record_nothing(ledger: Ledger) -> None:
    with pytest.raises(ArgumentsError):
        intent(ledger, args={"amount": float("nan")})
    assert ledger.attempts() == []
    assert ledger.events() == []


def test_empty_key_is_refused(ledger: Ledger) -> None:
    with pytest.raises(LedgerError, match="empty idempotency key"):
        intent(ledger, key="")


def test_legal_path_to_confirmed_is_logged(ledger: Ledger, clock: ManualClock) -> None:
    attempt, _ = intent(ledger)
    clock.advance(1)
    sent = ledger.transition(attempt.attempt_id, State.DISPATCHED, actor="w", reason="send")
    assert sent.dispatched_at == clock.t
    ledger.record_provider_request_id(attempt.attempt_id, "req_1")
    clock.advance(1)
    done = ledger.transition(
        attempt.attempt_id, State.OUTCOME_CONFIRMED, actor="w", reason="ok", result_ref="msg_1"
    )
    assert done.state is State.OUTCOME_CONFIRMED
    assert (done.provider_request_id, done.result_ref, done.attempt_count) == ("req_1", "msg_1", 1)
    assert done.updated_at == clock.t
    assert [e.to_state for e in ledger.events(attempt.attempt_id)] == [
        State.INTENT_RECORDED,
        State.DISPATCHED,
        State.OUTCOME_CONFIRMED,
    ]


def test_illegal_transition_names_everything_and_changes_nothing(ledger: Ledger) -> None:
    attempt, _ = intent(ledger)
    with pytest.raises(IllegalTransition) as info:
        ledger.transition(attempt.attempt_id, State.OUTCOME_CONFIRMED, actor="w", reason="x")
    message = str(info.value)
    assert attempt.attempt_id in message
    assert "INTENT_RECORDED" in message and "OUTCOME_CONFIRMED" in message
    assert ledger.get(attempt.attempt_id) == attempt
    assert len(ledger.events()) == 1


def test_compare_and_set_refuses_a_move_from_an_unexpected_state(ledger: Ledger) -> None:
    attempt, _ = intent(ledger)
    ledger.transition(attempt.attempt_id, State.DISPATCHED, actor="w1", reason="send")
    # A second worker that still believes the attempt is INTENT_RECORDED must lose.
    with pytest.raises(IllegalTransition):
        ledger.transition(
            attempt.attempt_id,
            State.FAILED,
            expected=State.INTENT_RECORDED,
            actor="w2",
            reason="stale",
        )
    assert ledger.get(attempt.attempt_id).state is State.DISPATCHED


def test_a_refused_compare_and_set_names_the_state_it_found(ledger: Ledger) -> None:
    attempt, _ = intent(ledger)
    ledger.transition(attempt.attempt_id, State.DISPATCHED, actor="w1", reason="send")
    before = ledger.get(attempt.attempt_id)
    for expected in (State.INTENT_RECORDED, (State.INTENT_RECORDED, State.FAILED_RETRYABLE)):
        with pytest.raises(IllegalTransition, match="from DISPATCHED to FAILED"):
            ledger.transition(
                attempt.attempt_id, State.FAILED, expected=expected, actor="w2", reason="stale"
            )
    assert ledger.get(attempt.attempt_id) == before
    assert len(ledger.events()) == 2
    moved = ledger.transition(
        attempt.attempt_id,
        State.UNKNOWN,
        expected=(State.INTENT_RECORDED, State.DISPATCHED),
        actor="w1",
        reason="no answer",
    )
    assert moved.state is State.UNKNOWN
    assert (ledger.events()[-1].from_state, ledger.events()[-1].to_state) == (
        State.DISPATCHED,
        State.UNKNOWN,
    )


def test_unknown_attempt(ledger: Ledger) -> None:
    with pytest.raises(UnknownAttempt, match="no attempt 'a-missing'"):
        ledger.transition("a-missing", State.DISPATCHED, actor="w", reason="x")
    with pytest.raises(UnknownAttempt):
        ledger.transition(
            "a-missing", State.DISPATCHED, expected=State.INTENT_RECORDED, actor="w", reason="x"
        )
    for write in (
        lambda: ledger.record_provider_request_id("a-missing", "req_1"),
        lambda: ledger.defer("a-missing", until=1.0, actor="w"),
        lambda: ledger.claim("a-missing", owner="w", lease_seconds=1.0),
        lambda: ledger.release("a-missing", owner="w"),
    ):
        with pytest.raises(UnknownAttempt):
            write()
    assert ledger.attempts() == []


def test_only_the_owner_releases_a_lease(ledger: Ledger, clock: ManualClock) -> None:
    attempt, _ = intent(ledger)
    held = ledger.claim(attempt.attempt_id, owner="recovery-1", lease_seconds=10)
    assert ledger.release(attempt.attempt_id, owner="recovery-2") == held
    released = ledger.release(attempt.attempt_id, owner="recovery-1")
    assert (released.owner, released.lease_expires_at) == ("recovery-1", clock.t)


def test_event_log_is_append_only(ledger: Ledger) -> None:
    intent(ledger)
    conn = sqlite3.connect(ledger.path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("UPDATE events SET actor = 'someone else'")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("DELETE FROM events")
    finally:
        conn.close()


def test_state_column_has_a_check_constraint(ledger: Ledger) -> None:
    attempt, _ = intent(ledger)
    conn = sqlite3.connect(ledger.path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute(
                "UPDATE attempts SET state = 'DONE-ISH' WHERE attempt_id = ?", (attempt.attempt_id,)
            )
    finally:
        conn.close()


def test_durability_pragmas(ledger: Ledger) -> None:
    conn = ledger._connection()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] > 0
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_queue_shows_in_flight_work_with_owner_age_and_request_id(
    ledger: Ledger, clock: ManualClock
) -> None:
    done, _ = intent(ledger, key="k-done")
    ledger.transition(done.attempt_id, State.DISPATCHED, actor="w", reason="send")
    ledger.transition(done.attempt_id, State.OUTCOME_CONFIRMED, actor="w", reason="ok")
    stuck, _ = intent(ledger, key="k-stuck")
    ledger.transition(stuck.attempt_id, State.DISPATCHED, actor="w", reason="send")
    ledger.record_provider_request_id(stuck.attempt_id, "req_9")
    ledger.transition(stuck.attempt_id, State.UNKNOWN, actor="w", reason="response lost")
    review, _ = intent(ledger, key="k-review")
    ledger.transition(review.attempt_id, State.MANUAL_REVIEW, actor="w", reason="no lookup")
    clock.advance(30)
    [entry] = ledger.queue()
    assert entry.attempt_id == stuck.attempt_id
    assert (entry.state, entry.owner, entry.provider_request_id) == (
        State.UNKNOWN,
        "worker-1",
        "req_9",
    )
    assert entry.age == 30
    assert entry.args_hash == stuck.args_hash
    assert [e.attempt_id for e in ledger.queue(include_review=True)] == [
        stuck.attempt_id,
        review.attempt_id,
    ]


def test_claim_and_lease_run_on_the_injected_clock(ledger: Ledger, clock: ManualClock) -> None:
    attempt, _ = intent(ledger)
    claimed = ledger.claim(attempt.attempt_id, owner="recovery-1", lease_seconds=10)
    assert (claimed.owner, claimed.lease_expires_at) == ("recovery-1", clock.t + 10)
    with pytest.raises(LeaseHeld, match="recovery-1"):
        ledger.claim(attempt.attempt_id, owner="recovery-2", lease_seconds=10)
    clock.advance(9.9)
    with pytest.raises(LeaseHeld):
        ledger.claim(attempt.attempt_id, owner="recovery-2", lease_seconds=10)
    clock.advance(0.2)
    assert (
        ledger.claim(attempt.attempt_id, owner="recovery-2", lease_seconds=10).owner == "recovery-2"
    )
    released = ledger.release(attempt.attempt_id, owner="recovery-2")
    assert released.owner == "recovery-2"  # never ownerless
    assert (
        ledger.claim(attempt.attempt_id, owner="recovery-3", lease_seconds=5).owner == "recovery-3"
    )
    with pytest.raises(LedgerError, match="positive"):
        ledger.claim(attempt.attempt_id, owner="x", lease_seconds=0)


def test_defer_sets_backoff_without_changing_state(ledger: Ledger, clock: ManualClock) -> None:
    attempt, _ = intent(ledger)
    deferred = ledger.defer(attempt.attempt_id, until=clock.t + 60, actor="recovery")
    assert deferred.state is State.INTENT_RECORDED
    assert deferred.next_attempt_at == clock.t + 60
    assert deferred.owner == "recovery"


def test_linked_attempt_requires_review_under_the_new_authority(ledger: Ledger) -> None:
    parent, _ = intent(ledger)
    narrowed = Authority.of(tenant_id="tenant-7", credential_scope="", policy_version="p2")
    child = ledger.link_attempt(
        parent.attempt_id,
        args=parent.args,
        authority=narrowed,
        actor="recovery",
        reason="policy version changed",
    )
    assert child.parent_attempt_id == parent.attempt_id
    assert child.state is State.MANUAL_REVIEW
    assert child.authority == narrowed
    assert child.idempotency_key == f"{parent.idempotency_key}/linked-1"
    assert ledger.get(parent.attempt_id) == parent
    second = ledger.link_attempt(
        parent.attempt_id, args=parent.args, authority=narrowed, actor="r", reason="again"
    )
    assert second.idempotency_key.endswith("/linked-2")


def test_backupround__trip(ledger: Ledger, tmp_path: Path, clock: ManualClock) -> None:
    attempt, _ = intent(ledger)
    ledger.transition(attempt.attempt_id, State.DISPATCHED, actor="w", reason="send")
    target = ledger.backup(tmp_path / "backup.sqlite3")
    restored = Ledger(target, clock=clock)
    try:
        assert restored.attempts() == ledger.attempts()
        assert restored.events() == ledger.events()
    finally:
        restored.close()
    assert not (tmp_path / "backup.sqlite3.partial").exists()
    with pytest.raises(LedgerError, match="already exists"):
        ledger.backup(target)


def test_other_schema_version_is_a_clear_error_and_not_touched(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE attempts (id TEXT)")
    conn.execute("PRAGMA user_version = 7")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(SchemaVersionError, match="schema version 7") as info:
        Ledger(path).attempts()
    assert "nothing was changed" in str(info.value)
    assert path.read_bytes() == before


def test_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("this is not sqlite, " * 100)
    with pytest.raises(LedgerError, match="not a readable SQLite ledger"):
        Ledger(path).attempts()
