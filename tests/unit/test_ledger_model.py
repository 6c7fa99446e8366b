"""The ledger against a small in-memory model, under random operations (illegal ones included)."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from pytest_crashpoints import Authority, Ledger, State, args_hash
from pytest_crashpoints.errors import IdempotencyKeyConflict, IllegalTransition, LeaseHeld
from pytest_crashpoints.ledger import TRANSITIONS
from tests.conftest import ManualClock

AUTH = Authority.of(tenant_id="t", credential_scope="s", policy_version="p1")
KEYS = st.sampled_from(["k1", "k2", "k3"])
ARGS = st.sampled_from([{"n": 1}, {"n": 2}])
OWNERS = st.sampled_from(["w1", "w2", "recovery"])


@dataclasses.dataclass
class ModelAttempt:
    key: str
    args_hash: str
    state: State
    owner: str | None
    lease_expires_at: float | None
    attempt_count: int = 0
    next_attempt_at: float | None = None
    parent: str | None = None


class LedgerMachine(RuleBasedStateMachine):
    attempts = Bundle("attempts")

    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.TemporaryDirectory()
        self.clock = ManualClock()
        self.ledger = Ledger(Path(self._dir.name) / "ledger.sqlite3", clock=self.clock)
        self.model: dict[str, ModelAttempt] = {}
        self.events = 0

    def teardown(self) -> None:
        self.ledger.close()
        self._dir.cleanup()

    @rule(target=attempts, key=KEYS, args=ARGS, owner=OWNERS)
    def record_intent(self, key: str, args: dict[str, int], owner: str) -> str:
        existing = next((a for a in self.model.items() if a[1].key == key), None)
        try:
            attempt, created = self.ledger.record_intent(
                task_id="task",
                tool_name="tool",
                args=args,
                idempotency_key=key,
                authority=AUTH,
                actor=owner,
                lease_seconds=10,
            )
        except IdempotencyKeyConflict:
            assert existing is not None and existing[1].args_hash != args_hash(args)
            return existing[0]
        if existing is not None:
            assert not created and attempt.attempt_id == existing[0]
            assert existing[1].args_hash == args_hash(args)
            return existing[0]
        assert created
        self.model[attempt.attempt_id] = ModelAttempt(
            key, args_hash(args), State.INTENT_RECORDED, owner, self.clock.t + 10
        )
        self.events += 1
        return attempt.attempt_id

    @rule(attempt_id=attempts, to=st.sampled_from(State), expect=st.none() | st.sampled_from(State))
    def transition(self, attempt_id: str, to: State, expect: State | None) -> None:
        model = self.model[attempt_id]
        legal = to in TRANSITIONS[model.state] and expect in (None, model.state)
        try:
            self.ledger.transition(attempt_id, to, actor="x", reason="r", expected=expect)
        except IllegalTransition as exc:
            assert not legal
            assert (exc.attempt_id, exc.from_state, exc.to_state) == (
                attempt_id,
                model.state.value,
                to.value,
            )
            return
        assert legal
        model.state = to
        model.attempt_count += to is State.DISPATCHED
        model.next_attempt_at = None
        self.events += 1

    @rule(attempt_id=attempts, owner=OWNERS, lease=st.sampled_from([1.0, 5.0, 30.0]))
    def claim(self, attempt_id: str, owner: str, lease: float) -> None:
        model = self.model[attempt_id]
        held = (
            model.owner not in (None, owner)
            and model.lease_expires_at is not None
            and model.lease_expires_at > self.clock.t
        )
        try:
            self.ledger.claim(attempt_id, owner=owner, lease_seconds=lease)
        except LeaseHeld:
            assert held
            return
        assert not held
        model.owner, model.lease_expires_at = owner, self.clock.t + lease

    @rule(attempt_id=attempts, delay=st.sampled_from([1.0, 60.0]))
    def defer(self, attempt_id: str, delay: float) -> None:
        self.ledger.defer(attempt_id, until=self.clock.t + delay, actor="recovery")
        model = self.model[attempt_id]
        model.next_attempt_at, model.owner = self.clock.t + delay, "recovery"

    @rule(target=attempts, attempt_id=attempts)
    def link(self, attempt_id: str) -> str:
        parent = self.model[attempt_id]
        args = self.ledger.get(attempt_id).args
        child = self.ledger.link_attempt(
            attempt_id, args=args, authority=AUTH, actor="recovery", reason="authority changed"
        )
        assert child.idempotency_key not in {m.key for m in self.model.values()}
        self.model[child.attempt_id] = ModelAttempt(
            child.idempotency_key,
            parent.args_hash,
            State.MANUAL_REVIEW,
            "recovery",
            None,
            parent=attempt_id,
        )
        self.events += 1
        return child.attempt_id

    @rule(seconds=st.sampled_from([0.5, 3.0, 20.0]))
    def advance_clock(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @invariant()
    def ledger_agrees_with_the_model(self) -> None:
        rows = {a.attempt_id: a for a in self.ledger.attempts()}
        assert rows.keys() == self.model.keys()
        for attempt_id, model in self.model.items():
            row = rows[attempt_id]
            assert (row.idempotency_key, row.args_hash, row.state) == (
                model.key,
                model.args_hash,
                model.state,
            )
            assert (row.owner, row.lease_expires_at) == (model.owner, model.lease_expires_at)
            assert (row.attempt_count, row.next_attempt_at) == (
                model.attempt_count,
                model.next_attempt_at,
            )
            assert row.parent_attempt_id == model.parent
        in_flight = {a.attempt_id for a in self.ledger.queue()}
        assert in_flight == {
            i
            for i, m in self.model.items()
            if m.state not in (State.OUTCOME_CONFIRMED, State.FAILED, State.MANUAL_REVIEW)
        }

    @invariant()
    def event_log_replays_to_the_current_states(self) -> None:
        events = self.ledger.events()
        assert len(events) == self.events
        last: dict[str, State] = {}
        for event in events:
            assert event.from_state == last.get(event.attempt_id)
            last[event.attempt_id] = event.to_state
        assert last == {i: m.state for i, m in self.model.items()}


LedgerMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestLedgerModel = LedgerMachine.TestCase
