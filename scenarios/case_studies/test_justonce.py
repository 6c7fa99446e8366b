"""justonce 0.2.0: "the function now runs **at most once per order** — across retries,
restarts, queue replays, and concurrent workers", and "When a process dies *between* the
effect and recording it, the key is left `UNKNOWN`"; "retries refuse until reconciled"."""

import pytest

pytest.importorskip("justonce", reason="pip install -e '.[case-studies]'")

import justonce
from justonce.stores import SqliteStore

from pytest_crashpoints import SQLiteLedgerView, State
from scenarios.case_studies.tools import send_email

ORDER = {"task_id": "order-7", "to": "ada@example.com"}
STATES = {"in_progress": State.DISPATCHED, "succeeded": State.OUTCOME_CONFIRMED,
          "failed": State.FAILED, "unknown": State.MANUAL_REVIEW}


def worker(order, ctx):
    justonce.configure(SqliteStore(ctx.env.path / "effects.db"))

    @justonce.idempotent(key=lambda o: justonce.operation_key("confirm", o["task_id"]))
    def send_confirmation(o):
        return send_email(ctx, o["task_id"], o["to"], "Your order is confirmed")

    return send_confirmation(order)


def keys(ctx):
    return SQLiteLedgerView(ctx.env.path / "effects.db", table="justonce_keys", states=STATES,
                            columns={"attempt_id": "key", "state": "state"})


@pytest.mark.crashpoints(points="AD", providers=["email"], mode="exhaustive",
                         strict_coverage=False)
def test_a_claim_is_taken_once_and_taken_over_after_its_lease(crashpoints):
    crashpoints.run(worker=worker, messages=[ORDER], ledger_view=keys)


# BROKEN PROMISE (confirmed by confirm_justonce.py): killed after the mail went out and before
# the outcome was recorded, the key is left `in_progress`, not `unknown`; once its lease (15
# minutes) runs out, the redelivered message takes the claim over and sends again.
@pytest.mark.crashpoints(points="B", faults=["kill"], providers=["email"], mode="exhaustive",
                         expect=1, strict_coverage=False)
def test_a_process_killed_between_effect_and_record_sends_again(crashpoints):
    crashpoints.run(worker=worker, messages=[ORDER], ledger_view=keys)


# Documented: "Effect raised a transient error | Claim released; a later attempt may retry"
# (`retry_on_failure=True`, the default). A mail whose answer was lost is sent again.
@pytest.mark.crashpoints(points="B", faults=["lose_response"], providers=["email"],
                         mode="exhaustive", expect=1, strict_coverage=False)
def test_a_lost_answer_releases_the_claim_as_documented(crashpoints):
    crashpoints.run(worker=worker, messages=[ORDER], ledger_view=keys)


def test_the_broken_promise_is_confirmed_by_hand():
    from scenarios.case_studies import confirm_justonce

    assert confirm_justonce.main() == 0
