"""safeact 0.0.2: "at most once, forever, across restarts"; a crash in the gap leaves the key
IN_DOUBT, and the next call raises InDoubtError "rather than blindly retrying"."""

import pytest

pytest.importorskip("safeact", reason="pip install -e '.[case-studies]'")

import safeact

from pytest_crashpoints import SQLiteLedgerView, State
from scenarios.case_studies.tools import send_email

REFUND = {"task_id": "refund-8842", "to": "a@b.com", "amount": 50}
STATES = {"ATTEMPTING": State.DISPATCHED, "SUCCEEDED": State.OUTCOME_CONFIRMED,
          "FAILED": State.FAILED, "IN_DOUBT": State.MANUAL_REVIEW}


def worker(refund, ctx):
    @safeact.safe(store=str(ctx.env.path / "agent.db"))
    def send_receipt(key, to, amount):   # the key forwarded downstream, as the README says
        send_email(ctx, refund["task_id"], to, f"Refunded ${amount}.", key=key)
        return {"sent": True}

    try:
        return send_receipt(refund["task_id"], refund["to"], refund["amount"])
    except safeact.InDoubtError as e:   # the README: "go check", a person decides
        return {"in_doubt": e.key}


def calls(ctx):
    return SQLiteLedgerView(ctx.env.path / "agent.db", table="calls", states=STATES,
                            columns={"attempt_id": "key", "state": "state",
                                     "idempotency_key": "key", "tool_name": "fn_name"})


@pytest.mark.crashpoints(points="ABCD", faults=["-lose_response"], providers=["email"],
                         mode="exhaustive", strict_coverage=False)
def test_a_receipt_killed_in_the_gap_is_in_doubt_not_sent_again(crashpoints):
    crashpoints.run(worker=worker, messages=[REFUND], ledger_view=calls)


# Documented: "a `FAILED` key refuses to re-run by default ... re-running either hammers a
# doomed action or risks duplicating a partial success". A mail whose answer was lost is
# recorded FAILED though it was sent (sent once: the promise holds).
@pytest.mark.crashpoints(points="B", faults=["lose_response"], providers=["email"],
                         mode="exhaustive", expect=2, strict_coverage=False)
def test_a_lost_answer_is_recorded_failed_as_documented(crashpoints):
    crashpoints.run(worker=worker, messages=[REFUND], ledger_view=calls)
