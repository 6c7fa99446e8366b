"""approval-ledger 0.1.0: "A dispatch reservation is durable before the callback runs. A
transport exception produces indeterminate state; the library does not retry and risk
duplicate delivery." One approved action, dispatched by a worker that may be killed."""

import pytest

pytest.importorskip("approval_ledger",
                                      reason="pip install -e '.[case-studies]'")

import approval_ledger

from pytest_crashpoints import SQLiteLedgerView, State
from scenarios.case_studies.tools import send_email

MESSAGE = {"task_id": "post-7"}
STATES = {"running": State.DISPATCHED, "completed": State.OUTCOME_CONFIRMED,
          "indeterminate": State.MANUAL_REVIEW}


def approved(ctx):
    """Before the case: the action an editor approved (the README's example)."""
    ledger = approval_ledger.SQLiteLedger(ctx.env.path / "ledger.sqlite3")
    action = ledger.create_action({"to": "ada@example.com", "body": "Human-approved message"},
                                  required_gates=("artifact-qa",))
    ledger.record_gate(action.id, action.digest, "artifact-qa", passed=True)
    ledger.approve(action.id, action.digest, approver="editor@example.test")
    (ctx.env.path / "action-id").write_text(action.id)


def dispatcher(message, ctx):
    ledger = approval_ledger.SQLiteLedger(ctx.env.path / "ledger.sqlite3")
    receipt = ledger.dispatch(
        (ctx.env.path / "action-id").read_text(),
        lambda payload, key: send_email(ctx, message["task_id"], payload["to"], payload["body"],
                                        key=key)["message_id"])
    return receipt.status


def dispatches(ctx, states=STATES):
    return SQLiteLedgerView(ctx.env.path / "ledger.sqlite3", table="dispatches", states=states,
                            columns={"attempt_id": "idempotency_key", "state": "status",
                                     "idempotency_key": "idempotency_key",
                                     "result_ref": "external_id"})


def in_doubt(ctx):
    # A receipt still `running` once every worker is gone is in doubt, and its caller can
    # only leave it to a person, as it does an `indeterminate` one.
    return dispatches(ctx, {**STATES, "running": State.MANUAL_REVIEW})


@pytest.mark.crashpoints(points="ABCD", providers=["email"], mode="exhaustive",
                         strict_coverage=False)
def test_an_approved_action_is_never_dispatched_twice(crashpoints):
    crashpoints.run(worker=dispatcher, messages=[MESSAGE], ledger_view=in_doubt, setup=approved)


# Not claimed: killed after its reservation, before the callback, the dispatch stays
# `running` for good. Delivered again, `dispatch` returns that receipt and sends nothing:
# the approved message is never sent, and nothing marks it indeterminate.
@pytest.mark.crashpoints(points="A", faults=["kill"], providers=["email"], mode="exhaustive",
                         expect=2, strict_coverage=False)
def test_a_reservation_left_by_a_dead_dispatcher_stays_running(crashpoints):
    crashpoints.run(worker=dispatcher, messages=[MESSAGE], ledger_view=dispatches, setup=approved)
