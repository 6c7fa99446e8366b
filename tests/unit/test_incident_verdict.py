"""The checks on a case that starts from an incident judge what the case did, never what
production did before it: a duplicate production already made, an object of other work, a
row production finished that nothing touched, production's own requests. What the case must
still answer for: its own repeat of production's effect, a row production left in flight,
and production's effect of the case's work that no row records. Hand-made evidence, one rule
per test, each also shown to fire when the evidence is the case's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pytest_crashpoints import State
from pytest_crashpoints._harness.verdict.evidence import (
    ExpectedEffect,
    Observation,
    row_digest,
)
from pytest_crashpoints._harness.verdict.history import render_timeline, shown_time
from pytest_crashpoints._harness.verdict.invariants import check_all
from pytest_crashpoints._harness.verdict.linking import compare_with_baseline
from pytest_crashpoints.harness import Evidence
from tests.unit.test_invariants import attempt, queue_entry, request

#: The charge production made for the redelivered message's task before it died.
MADE = request(request_id="r-p1", process="production-0", object_id="ch-1",
               operation_key=None, payload_hash="x" * 64, at=0.0,
               reading="ch-1: t-1's effect: metadata order_id")
#: What the fault-free run of the message made: one e-mail.
BASELINE = (ExpectedEffect("email", "mail.send", "p" * 64, 0, "t-1", "r-0"),)


def invariants(evidence: Evidence) -> list[int | str]:
    return [v.invariant for v in check_all(evidence)]


def test_a_case_that_repeats_productions_effect_is_a_duplicate() -> None:
    again = request(request_id="r-2", at=60.0, process="worker-1")
    row = attempt(provider_request_id="r-2", result_ref="msg-2")
    evidence = Evidence((row,), (), (MADE, again), expected_effects=BASELINE)
    # (Production's e-mail, which no row records, is invariant 2's.)
    [violation, unrecorded] = check_all(evidence)
    assert (violation.invariant, unrecorded.invariant) == (1, 2)
    assert "production had made it before the case" in violation.message
    assert "[from the incident: ch-1: t-1's effect: metadata order_id]" in violation.evidence[0]


def test_a_duplicate_production_made_before_the_case_is_not_the_cases() -> None:
    twice = dataclasses.replace(MADE, request_id="r-p2", object_id="ch-2", at=1.0)
    row = attempt(provider_request_id="r-p1", result_ref="ch-1")  # the case confirmed one
    evidence = Evidence((row,), (), (MADE, twice), expected_effects=BASELINE)
    assert invariants(evidence) == []
    # The same two effects, the second the case's own: a duplicate (and no row records it).
    mine = dataclasses.replace(twice, process="worker-1", reading=None)
    assert invariants(dataclasses.replace(evidence, requests=(MADE, mine))) == [1, 2]


def test_productions_effects_take_their_places_in_the_baseline_first() -> None:
    # The case's e-mail has the baseline's very payload; production's has none of it. The
    # baseline's one e-mail is production's: what the case adds is the extra.
    mine = request(request_id="r-2", at=60.0)
    comparison = compare_with_baseline(BASELINE, [MADE, mine])
    assert [m[1].request_id for m in comparison.matched] == ["r-p1"]
    assert [e.request_id for e in comparison.extra] == ["r-2"]


def test_an_object_of_other_work_needs_no_row_but_the_cases_work_does() -> None:
    other = dataclasses.replace(MADE, process="production", message=None, task_id=None,
                                history=True)
    assert invariants(Evidence((), (), (other,), expected_effects=())) == []
    # Production's object of the case's own work must be recorded (or parked for review).
    unrecorded = check_all(Evidence((), (), (MADE,), expected_effects=BASELINE))
    assert [v.invariant for v in unrecorded] == [2]
    assert "no attempt in the ledger records it" in unrecorded[0].message


def test_productions_repeat_of_a_recorded_effect_needs_no_row_of_its_own() -> None:
    twice = dataclasses.replace(MADE, request_id="r-p2", object_id="ch-2", at=1.0)
    row = attempt(provider_request_id="r-p1", result_ref="ch-1")
    evidence = Evidence((row,), (), (MADE, twice), expected_effects=BASELINE)
    assert invariants(evidence) == []
    # A repeat the case made itself is reported, not taken for production's.
    mine = dataclasses.replace(twice, process="worker-1", reading=None)
    assert 2 in invariants(dataclasses.replace(evidence, requests=(MADE, mine)))


def test_a_row_production_finished_and_nothing_touched_is_history() -> None:
    # October's row names a charge the export does not hold, without a request id.
    october = attempt(attempt_id="oct", task_id="t-0", result_ref="ch-oct",
                      provider_request_id=None, idempotency_key="k-oct")
    left = {"oct": row_digest(october)}
    evidence = Evidence((october,), (), (), expected_effects=(), incident_rows=left)
    assert invariants(evidence) == []
    # Changed by the case, the same row is the case's, and checked.
    touched = dataclasses.replace(october, owner="recovery-1")
    assert invariants(dataclasses.replace(evidence, attempts=(touched,))) == [2, 3]


def test_a_row_production_left_in_flight_must_still_end() -> None:
    stuck = attempt(state=State.DISPATCHED, owner=None, result_ref=None,
                    provider_request_id=None)
    seen = Observation(0, 0.0, "set-up", (stuck,), ())
    evidence = Evidence((stuck,), (), (), observations=(seen,), expected_effects=(),
                        incident_rows={"a-1": row_digest(stuck)})
    # Invariant 2 (still in flight after the quiet phase); invariant 5 was production's.
    assert invariants(evidence) == [2]
    assert invariants(dataclasses.replace(evidence, incident_rows={})) == [2, 5]
    assert queue_entry  # the fixtures the invariant tests share


def test_productions_own_requests_are_never_judged_for_their_authority() -> None:
    revoked = dataclasses.replace(MADE, authority=None, tenant_id="another-tenant")
    row = attempt(provider_request_id="r-p1", result_ref="ch-1")
    evidence = Evidence((row,), (), (revoked,), expected_effects=BASELINE)
    assert 4 not in invariants(evidence)
    mine = dataclasses.replace(revoked, process="worker-1", reading=None)
    assert 4 in invariants(dataclasses.replace(evidence, requests=(mine,)))


def test_an_incidents_times_read_in_its_own_wall_time() -> None:
    june = 1718357401.0  # 2024-06-14T09:30:01Z
    assert shown_time(64.0, june) == "2024-06-14T09:31:05Z"
    assert shown_time(-2592000.0, june) == "2024-05-15T09:30:01Z"
    assert shown_time(64.0) == "64s"
    evidence = Evidence((), (), (MADE, request(request_id="r-2", at=64.0)),
                        expected_effects=BASELINE, epoch=june)
    duplicate = check_all(evidence)[0]
    assert "r-p1 at t=2024-06-14T09:30:01Z" in duplicate.message
    assert "r-2 at t=2024-06-14T09:31:05Z" in duplicate.message
    assert render_timeline([], epoch=june) == ""


def test_the_html_timeline_of_an_incident_is_in_its_own_time(tmp_path: Path) -> None:
    from tests.unit.test_html_report import document, render

    doc = document()
    case = doc["tests"][0]["failure"]["case"]
    case["epoch"] = 1718357401.0
    case["timeline"][4]["reading"] = "ch-1: t-1's effect: metadata order_id"
    page = render(doc, tmp_path)  # the schema takes both fields
    assert "(time in the incident's wall time)" in page
    assert "t=2024-06-14T09:30:02Z" in page and "t=1s" not in page
    assert "<dt>from the incident</dt><dd>ch-1: t-1&#x27;s effect: metadata order_id</dd>" \
        in page
    # Without an epoch, harness seconds, as before.
    (tmp_path / "plain").mkdir()
    assert "t=1s" in render(document(), tmp_path / "plain")
