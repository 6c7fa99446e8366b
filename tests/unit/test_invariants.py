"""Each invariant checker fires on evidence that breaks exactly it, and on nothing else."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_crashpoints import Attempt, Authority, State, args_hash
from pytest_crashpoints._harness.storage.authority_store import AuthorityChange
from pytest_crashpoints._harness.verdict.evidence import (
    ExpectedEffect,
    Incident,
    Observation,
    ProviderRequest,
    RecoveryRerun,
)
from pytest_crashpoints._harness.verdict.invariants import check_all, unaccounted
from pytest_crashpoints.harness import Evidence, Violation, unchecked
from pytest_crashpoints.ledger import QueueEntry
from tests.fakes import ARGS, AUTH

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


PAYLOAD = "p" * 64


def request(**changes: object) -> ProviderRequest:
    base = ProviderRequest(
        provider="email",
        request_id="r-1",
        at=1.0,
        tenant_id="tenant-7",
        scope=frozenset({"email:send"}),
        kind="mail.send",
        operation_key="invoice:inv-7",
        args_hash=HASH,
        payload_hash=PAYLOAD,
        status=202,
        effect_applied=True,
        idempotent=False,
        object_id="msg-1",
        process="worker-1",
        message=0,
        task_id="t-1",
        authority=AUTH,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


#: What the fault-free run of the same message did: one email.
BASELINE = (ExpectedEffect("email", "mail.send", PAYLOAD, 0, "t-1", "r-0"),)


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
        expected_effects=BASELINE,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def fired(ev: Evidence) -> list[Violation]:
    return check_all(ev)


def test_a_clean_case_has_no_violations() -> None:
    assert fired(evidence()) == []


def test_1_two_emails_for_one_message() -> None:
    ev = evidence(
        requests=(
            request(),
            request(request_id="r-2", at=9.0, process="recovery-2", message=None, task_id=None),
        ),
        incidents=(Incident(5.0, "worker-1 was killed at B (hit 1)"),),
    )
    [v] = [v for v in fired(ev) if v.invariant == 1]
    assert v.attempt_ids == ("a-1",)
    # The journal entries it found, first the effect, then its repeat: what a report marks.
    assert v.requests == (("email", "r-1"), ("email", "r-2"))
    assert "mail.send happened twice at email" in v.message
    assert "r-1 at t=1s by worker-1 (delivering message 0)" in v.message
    assert "r-2 at t=9s by recovery-2" in v.message
    assert "email: it has no idempotency" in v.message
    assert "worker-1 was killed at B (hit 1)" in v.message


def _charges(*keys: str | None, payloads: tuple[str, ...] = ("c" * 64, "c" * 64)) -> Evidence:
    """Two charges for message 0 of a payments provider that honours keys, the ledger
    recording (or not) whatever the agent chose."""
    requests = tuple(
        request(
            provider="payments",
            kind="charges.create",
            idempotent=True,
            request_id=f"req-{n}",
            at=float(n),
            operation_key=key,
            args_hash=None,
            payload_hash=payload,
            object_id=f"ch_{n}",
        )
        for n, (key, payload) in enumerate(zip(keys, payloads, strict=True), start=1)
    )
    baseline = (ExpectedEffect("payments", "charges.create", "c" * 64, 0, "t-1", "req-0"),)
    return evidence(requests=requests, expected_effects=baseline, attempts=(), observations=())


@pytest.mark.parametrize(
    ("ev", "why"),
    [
        (_charges("key-1", "key-2"), "the keys differed"),
        (  # the agent kept no key at all, and no ledger the harness can read
            dataclasses.replace(_charges(None, None), ledger_columns=frozenset()),
            "the same effect was applied twice",
        ),
        (  # a payload that differs from try to try: still one message's charge twice
            _charges("key-1", "key-2", payloads=("d" * 64, "e" * 64)),
            "the keys differed",
        ),
    ],
    ids=["fresh-key-per-try", "no-key-no-ledger", "volatile-payload"],
)
def test_1_a_double_charge_shows_whatever_the_agent_recorded(ev: Evidence, why: str) -> None:
    ones = [v for v in fired(ev) if v.invariant == 1]
    assert len(ones) == 1, ones
    assert "message 0's charges.create happened twice at payments" in ones[0].message
    assert why in ones[0].message


def test_1_what_the_fault_free_run_did_is_no_duplicate() -> None:
    # Two different emails for two messages, both in the baseline: fine.
    two = (
        request(),
        request(request_id="r-2", message=1, task_id="t-2", payload_hash="q" * 64),
    )
    baseline = (*BASELINE, ExpectedEffect("email", "mail.send", "q" * 64, 1, "t-2", "r-9"))
    history = (
        AuthorityChange(1, "t-1", 0.0, AUTH, "initial"),
        AuthorityChange(2, "t-2", 0.0, AUTH, "initial"),
    )
    ev = evidence(requests=two, expected_effects=baseline, authority_history=history)
    assert [v for v in fired(ev) if v.invariant == 1] == []
    # An idempotent replay is no effect, and a new kind of effect (a refund) is no repeat.
    replay = request(request_id="r-3", effect_applied=False)
    refund = request(request_id="r-4", kind="refunds.create", provider="email")
    ev = evidence(requests=(request(), replay, refund))
    assert [v for v in fired(ev) if v.invariant == 1] == []


def test_1_the_fault_free_run_itself_is_checked_on_payloads() -> None:
    twice = (request(), request(request_id="r-2", at=2.0))
    [v] = [v for v in fired(evidence(requests=twice, expected_effects=None)) if v.invariant == 1]
    assert "made it once before" not in v.message and "the same payload once before" in v.message
    other_message = (request(), request(request_id="r-2", message=1, task_id="t-2"))
    assert not [
        v
        for v in fired(evidence(requests=other_message, expected_effects=None))
        if v.invariant == 1
    ]


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
            "1 effect(s) for what the row names (invoice:inv-7, msg-1, r-1), 0 with its arguments",
        ),
    ],
    ids=["not-final", "confirmed-without-effect", "failed-with-effect", "other-payload"],
)
def test_2_ledger_must_agree_with_the_provider(ev: Evidence, fragment: str) -> None:
    violations = fired(ev)
    assert {v.invariant for v in violations} == {2}
    assert any(fragment in v.message for v in violations), violations
    for v in violations:  # the effects the row names, and nothing else
        assert v.requests == tuple(
            ("email", r.request_id) for r in ev.requests if r.effect_applied
        ), v


def test_2_two_rows_confirmed_by_one_effect() -> None:
    """Two orders under one key: the provider replays the first charge for the second, and
    both rows name it. The fault-free run does the same, so only this check sees it."""
    second = attempt(attempt_id="a-2", task_id="t-2", provider_request_id="r-2")
    replay = request(
        request_id="r-2", at=2.0, effect_applied=False, status=200, message=1, task_id="t-2"
    )
    ev = evidence(attempts=(attempt(), second), requests=(request(), replay))
    [v] = [v for v in fired(ev) if v.invariant == 2]
    assert v.attempt_ids == ("a-1", "a-2")
    assert "2 attempts are CONFIRMED by one and the same effect, email r-1" in v.message
    assert v.requests == (("email", "r-1"),)
    # Each with an effect of its own: nothing to say.
    own = request(request_id="r-3", at=2.0, operation_key="invoice:inv-8", object_id="msg-3",
                  message=1, task_id="t-2")
    apart = attempt(attempt_id="a-2", task_id="t-2", idempotency_key="invoice:inv-8",
                    provider_request_id="r-3", result_ref="msg-3")
    assert [v for v in fired(evidence(attempts=(attempt(), apart),
                                      requests=(request(), own))) if v.invariant == 2] == []
    # Two rows of the same work (a second delivery of one message wrote a row of its own and
    # got the first answer replayed): one effect stands for both.
    same_work = attempt(attempt_id="a-2", provider_request_id="r-2")
    again = request(request_id="r-2", at=2.0, effect_applied=False, status=200)
    assert [v for v in fired(evidence(attempts=(attempt(), same_work),
                                      requests=(request(), again))) if v.invariant == 2] == []


def test_2_an_effect_no_attempt_records() -> None:
    ev = evidence(attempts=(), observations=(), expected_effects=None)
    [v] = fired(ev)
    assert v.invariant == 2
    assert "no attempt in the ledger records it" in v.message
    assert v.requests == (("email", "r-1"),)


def test_2_a_row_that_never_learned_what_happened_may_stand_for_the_effect() -> None:
    blank = attempt(idempotency_key="", provider_request_id=None, result_ref=None)
    reviewed = evidence(attempts=(dataclasses.replace(blank, state=State.MANUAL_REVIEW),))
    assert fired(reviewed) == []
    confirmed = evidence(attempts=(blank,))
    assert {v.invariant for v in fired(confirmed)} == {2, 3}


def test_2_a_failed_row_that_names_nothing_does_not_stand_for_its_tasks_effect() -> None:
    """FAILED is "proven not to have happened": a row of the task that names no request,
    next to an effect of that task no row records, is the ledger saying the work did not
    happen when it did. In review, a person will find out: it may stand for it."""
    blank = attempt(state=State.FAILED, idempotency_key="", provider_request_id=None,
                    result_ref=None)
    [v] = fired(evidence(attempts=(blank,), expected_effects=None))
    assert v.invariant == 2 and v.attempt_ids == ("a-1",)
    assert "ended FAILED (proven not to have happened)" in v.message
    assert "r-1" in v.message
    reviewed = dataclasses.replace(blank, state=State.MANUAL_REVIEW)
    assert fired(evidence(attempts=(reviewed,), expected_effects=None)) == []
    # Whose work a row is that reads no task cannot be told: not checked, and said so.
    no_task = dataclasses.replace(blank, task_id="")
    ev = evidence(attempts=(no_task,), expected_effects=None)
    assert fired(ev) == []
    [line] = unaccounted(ev)
    assert "FAILED row(s) a-1 name no request and no task" in line
    assert unaccounted(evidence(attempts=(blank,), expected_effects=None)) == []


def test_2_a_row_in_review_whose_key_names_no_request_may_stand_for_its_tasks_effect() -> None:
    """An incident's object, made before the harness saw anything: the row parked for review
    kept a key the provider never received. Only review, only for its own task, and only
    while its key names no request at all."""
    made_elsewhere = request(operation_key=None, object_id="msg-prod", aliases=("msg-prod",))
    lost_key = attempt(state=State.MANUAL_REVIEW, idempotency_key="key-never-sent",
                       provider_request_id=None, result_ref=None)
    assert fired(evidence(attempts=(lost_key,), requests=(made_elsewhere,))) == []

    def unrecorded(row: Attempt, *requests: ProviderRequest) -> list[str]:
        return [v.message for v in fired(evidence(attempts=(row,), requests=requests))
                if "no attempt in the ledger records it" in v.message]

    # Failed is no "a person looks": the effect the row never names is reported.
    failed = dataclasses.replace(lost_key, state=State.FAILED)
    assert len(unrecorded(failed, made_elsewhere)) == 1
    # A row whose key names a request learned what it sent: another effect is not its.
    sent = request(request_id="r-2", operation_key="key-never-sent", effect_applied=False,
                   status=500)
    assert len(unrecorded(lost_key, made_elsewhere, sent)) == 1
    # Another task's row stands for nothing of this one.
    other = dataclasses.replace(lost_key, task_id="t-2")
    assert len(unrecorded(other, made_elsewhere)) == 1


def test_2_a_silently_dropped_message() -> None:
    ev = evidence(attempts=(), requests=(), observations=())
    [v] = fired(ev)
    assert v.invariant == 2
    assert v.requests == ()  # nothing in this case's journal: the effect never happened
    assert "message 0 (task t-1) was delivered and its mail.send at email" in v.message
    assert "silently dropped" in v.message
    # A row in review accounts for the missing effect: a person decides.
    in_review = attempt(state=State.MANUAL_REVIEW, provider_request_id=None, result_ref=None)
    assert fired(evidence(attempts=(in_review,), requests=(), observations=())) == []


def test_2_work_refused_after_an_authority_change_is_no_drop_where_no_ledger_is_read() -> None:
    """An agent with no ledger the harness reads (a server of its own, a stateless tool)
    rightly does nothing for a task whose credentials were revoked: with nothing to show
    where the work went, that is not checked, never a silent drop. Without the change, or
    with a ledger, the drop is still one."""
    revoked = AuthorityChange(seq=2, task_id="t-1", at=2.0, authority=None, reason="E: revoked")
    no_ledger = evidence(attempts=(), requests=(), observations=(), ledger_columns=frozenset(),
                         authority_history=(revoked,))
    assert fired(no_ledger) == []
    [v] = fired(dataclasses.replace(no_ledger, authority_history=()))
    assert "silently dropped" in v.message and "no ledger view" in v.message
    with_ledger = dataclasses.replace(no_ledger, ledger_columns=None)
    [v] = fired(with_ledger)
    assert "silently dropped" in v.message


def test_2_without_a_link_column_only_the_final_states_are_checked() -> None:
    no_links = frozenset({"attempt_id", "state", "task_id"})
    lonely = attempt(state=State.OUTCOME_CONFIRMED)
    assert fired(evidence(attempts=(lonely,), requests=(), ledger_columns=no_links)) == [
        # the email is gone and nothing in review stands for it
        v
        for v in fired(evidence(attempts=(lonely,), requests=(), ledger_columns=no_links))
        if "silently dropped" in v.message
    ]
    stuck = evidence(attempts=(attempt(state=State.UNKNOWN),), ledger_columns=no_links)
    assert [v.invariant for v in fired(stuck)] == [2]


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


def test_3_a_confirmed_row_must_name_the_effect_not_the_read_that_found_it() -> None:
    lookup = request(
        request_id="r-2",
        at=2.0,
        kind="messages.get",
        operation_key=None,
        status=200,
        effect_applied=False,
        process="recovery-2",
        message=None,
    )
    stored_the_read = evidence(
        attempts=(attempt(provider_request_id="r-2"),), requests=(request(), lookup)
    )
    [v] = fired(stored_the_read)
    assert v.invariant == 3
    assert "CONFIRMED with request id 'r-2', which names a read (email messages.get by " in (
        v.message
    )
    # What the lookup found (the message it read) names the effect: accepted.
    found = evidence(attempts=(attempt(provider_request_id="msg-1"),), requests=(request(), lookup))
    assert fired(found) == []
    # So does an idempotent replay of the write (the same key), by its own request id.
    replay = request(request_id="r-3", at=2.0, effect_applied=False, status=200)
    replayed = evidence(
        attempts=(attempt(provider_request_id="r-3"),), requests=(request(), replay)
    )
    assert [v for v in fired(replayed) if v.invariant == 3] == []


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
    assert violations[0].requests == (("email", "r-1"),)


def test_4_no_request_under_changed_authority() -> None:
    revoked = Authority.of(tenant_id="tenant-7", credential_scope="", policy_version="p2")
    history = (
        AuthorityChange(1, "t-1", 0.0, AUTH, "initial"),
        AuthorityChange(2, "t-1", 0.5, revoked, "E"),
    )
    violations = fired(evidence(authority_history=history))
    assert {v.invariant for v in violations} == {4}
    assert "by worker-1 (delivering message 0) was made at t=1s for task t-1 under tenant" in (
        violations[0].message
    )
    assert "but the task then held tenant 'tenant-7', scope '', policy 'p2'" in (
        violations[0].message
    )
    # Without the harness's credential, the ledger's recorded authority still tells.
    anonymous = evidence(
        authority_history=history, requests=(request(authority=None, process=None),)
    )
    [v] = fired(anonymous)
    assert "under authority that had changed" in v.message
    # The same request before the change is fine.
    assert (
        fired(
            evidence(
                authority_history=(*history[:1], AuthorityChange(2, "t-1", 2.0, revoked, "E"))
            )
        )
        == []
    )


def test_4_a_request_refused_for_a_key_no_one_holds_was_made_under_no_authority() -> None:
    """After a revocation a task's key is one the provider refuses (401): a request with it,
    a lookup whose client named the attempt in a header, applied nothing under any
    authority. It is no request of the task's; the same request applied is."""
    history = (
        AuthorityChange(1, "t-1", 0.0, AUTH, "initial"),
        AuthorityChange(2, "t-1", 0.5, None, "E: revoked"),
    )
    refused = request(authority=None, process=None, tenant_id=None, scope=frozenset(),
                      status=401, effect_applied=False, kind="messages.search",
                      attempt_id="a-1", payload_hash=None, object_id=None)
    assert [v for v in fired(evidence(authority_history=history, requests=(refused,)))
            if v.invariant == 4] == []
    applied = dataclasses.replace(refused, status=202, effect_applied=True)
    [v] = [v for v in fired(evidence(authority_history=history, requests=(applied,)))
           if v.invariant == 4]
    assert "after the task's authority was revoked" in v.message


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
    # Only an effect of the second recovery is a journal entry the check names.
    assert violations[0].requests == tuple(
        (r.provider, r.request_id) for r in rerun.new_requests if r.effect_applied
    )


def test_violation_text_names_the_invariant_and_shows_evidence() -> None:
    [v] = fired(evidence(attempts=(attempt(state=State.FAILED),)))
    text = str(v)
    assert text.startswith("invariant 2 (every attempt ends CONFIRMED, FAILED or MANUAL_REVIEW")
    assert "ledger: a-1 task=t-1 tool=send_email key=invoice:inv-7 state=FAILED" in text
    assert "key=invoice:inv-7 payload=pppppppp…" in text
    assert "journal: email r-1 t=1s mail.send by worker-1 (delivering message 0)" in text


def test_4_a_credential_no_task_held_any_more() -> None:
    stale = Authority.of(tenant_id="tenant-7", credential_scope="email:send", policy_version="p0")
    recovery = request(process="recovery-3", message=None, task_id=None, authority=stale, at=5.0)
    ev = evidence(requests=(recovery,), attempts=(), observations=(), expected_effects=None)
    fours = [v for v in fired(ev) if v.invariant == 4]
    assert len(fours) == 1
    assert "by recovery-3 was made under tenant 'tenant-7', scope 'email:send', policy 'p0'" in (
        fours[0].message
    )
    assert "which no task held at t=5s" in fours[0].message


def test_5_an_owner_is_not_asked_of_a_view_without_one() -> None:
    in_flight = attempt(state=State.UNKNOWN, owner=None)
    seen = Observation(3, 2.0, "after kill at B", (in_flight,), (queue_entry(in_flight),))
    no_owner = frozenset({"attempt_id", "state", "idempotency_key"})
    fives = fired(evidence(observations=(seen,), ledger_columns=no_owner))
    assert [v for v in fives if v.invariant == 5] == []


def test_3_an_issue_number_is_a_request_id_the_provider_issued() -> None:
    issue = request(provider="tickets", kind="issues.create", object_id="o/r#7", aliases=("7",))
    ev = evidence(attempts=(attempt(provider_request_id="7"),), requests=(issue,))
    assert [v for v in fired(ev) if v.invariant == 3] == []


def test_what_a_narrow_view_leaves_unchecked_is_said() -> None:
    assert unchecked(None) == []
    [nothing] = unchecked(frozenset())
    assert "no ledger" in nothing
    lines = unchecked(frozenset({"attempt_id", "state"}))
    assert any("invariant 2 (the ledger agrees with the provider)" in line for line in lines)
    assert any("no args_json column" in line for line in lines)
    assert any("no owner column" in line for line in lines)
    full = unchecked(
        frozenset(
            {"attempt_id", "state", "idempotency_key", "args_json", "args_hash", "owner",
             "provider_request_id", "tenant_id", "credential_scope", "policy_version"}
        )
    )
    assert full == []


def test_2_a_row_that_names_an_object_stands_for_that_objects_history() -> None:
    """An object's id names every write of it (its create, its confirm, its capture): a row
    that stored only the id stands for the object, each of whose operations happened once.
    A row that names its own write by its key or request id stands for that one alone."""
    created = request(request_id="r-1", operation_key=None, kind="payment_intents.create",
                      object_id="pi_1", aliases=("pi_1",))
    confirmed = request(request_id="r-2", operation_key=None, kind="payment_intents.confirm",
                        object_id="pi_1", aliases=("pi_1",), payload_hash="q" * 64)
    captured = request(request_id="r-3", operation_key=None, kind="payment_intents.capture",
                       object_id="pi_1", aliases=("pi_1",), payload_hash="r" * 64)
    by_object = attempt(idempotency_key="", provider_request_id=None, result_ref="pi_1")
    ev = evidence(attempts=(by_object,), requests=(created, confirmed, captured),
                  expected_effects=None)
    assert [v for v in fired(ev) if v.invariant == 2] == []
    # The same operation twice on the object is no history: CONFIRMED needs one.
    again = dataclasses.replace(confirmed, request_id="r-4", payload_hash="s" * 64)
    twice = dataclasses.replace(ev, requests=(created, confirmed, again))
    assert any("CONFIRMED but the provider has 3 effect(s)" in v.message for v in fired(twice))
    # Named by its request id, a row stands for its own write: the later ones are not its.
    own = attempt(idempotency_key="", provider_request_id="r-2", result_ref="pi_1")
    mine = dataclasses.replace(ev, attempts=(own, by_object))
    assert not any("CONFIRMED but" in v.message for v in fired(mine))


def test_a_retry_that_changed_nothing_names_the_effect_it_repeats() -> None:
    """An idempotent write made again after a lost answer changes nothing at a provider that
    keeps no key (adding a label already there): the row that stored the retry's request id
    names the first write's effect, for invariant 2 and for invariant 3."""
    first = request(request_id="r-1", operation_key=None, journal_key="labels-payload",
                    kind="issues.labels.post", object_id=None, aliases=())
    retry = dataclasses.replace(first, request_id="r-2", effect_applied=False, status=200)
    row = attempt(idempotency_key="", provider_request_id="r-2", result_ref=None)
    ev = evidence(attempts=(row,), requests=(first, retry), expected_effects=None)
    assert fired(ev) == []
    unrelated = dataclasses.replace(retry, journal_key="another-payload")
    said = [v.message for v in fired(dataclasses.replace(ev, requests=(first, unrelated)))]
    assert any("names a read" in m or "0 effect(s)" in m for m in said), said
