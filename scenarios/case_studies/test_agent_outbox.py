"""agent-outbox 0.1.1: "Same session + tool + args → first call runs, later calls replay." Its
README says where that ends: "That reclaim is **at-least-once** ... Downstream
`Idempotency-Key` is how you close that gap.\""""

import pytest

pytest.importorskip("agent_outbox", reason="pip install -e '.[case-studies]'")

import agent_outbox

from pytest_crashpoints import SQLiteLedgerView, State
from scenarios.case_studies.tools import charge, send_email

ORDER = {"task_id": "agent-session-1", "amount": 4200}
STATES = {"pending": State.DISPATCHED, "succeeded": State.OUTCOME_CONFIRMED,
          "failed": State.FAILED}


def charger(order, ctx):
    """The README's wrap, around a Stripe-style API that honours its Idempotency-Key."""
    def create_charge(amount: int, idempotency_key: str | None = None) -> dict:
        return charge(ctx, order["task_id"], amount, key=idempotency_key)

    ex = agent_outbox.ToolExecutor(agent_outbox.OutboxStore(ctx.env.path / "outbox.db"))
    return ex.run("create_charge", create_charge, {"amount": order["amount"]},
                  order["task_id"]).result


def mailer(order, ctx):
    """The same wrap around an e-mail API, which has no idempotency key."""
    def send_receipt(to: str, idempotency_key: str | None = None) -> dict:
        return send_email(ctx, order["task_id"], to, "Paid.", key=idempotency_key)

    ex = agent_outbox.ToolExecutor(agent_outbox.OutboxStore(ctx.env.path / "outbox.db"))
    return ex.run("send_receipt", send_receipt, {"to": "a@b.com"}, order["task_id"]).result


def outbox(ctx):
    return SQLiteLedgerView(ctx.env.path / "outbox.db", table="outbox", states=STATES,
                            columns={"attempt_id": "key", "state": "status",
                                     "idempotency_key": "key", "tool_name": "tool",
                                     "task_id": "session_id"})


@pytest.mark.crashpoints(points="ABCD", faults=["-lose_response"], providers=["payments"],
                         mode="exhaustive", strict_coverage=False)
def test_a_keyed_charge_is_made_once(crashpoints):
    crashpoints.run(worker=charger, messages=[ORDER], ledger_view=outbox)


@pytest.mark.crashpoints(points="B", faults=["kill"], providers=["email"], mode="exhaustive",
                         expect=1, strict_coverage=False)
def test_a_reclaimed_email_is_sent_again_as_documented(crashpoints):
    crashpoints.run(worker=mailer, messages=[ORDER], ledger_view=outbox)


# "If the tool fails: The first attempt is recorded as failed. Retries return that error and
# **do not** call `fn` again." A charge whose answer was lost is recorded failed, made once.
@pytest.mark.crashpoints(points="B", faults=["lose_response"], providers=["payments"],
                         mode="exhaustive", expect=2, strict_coverage=False)
def test_a_lost_answer_is_recorded_failed_as_documented(crashpoints):
    crashpoints.run(worker=charger, messages=[ORDER], ledger_view=outbox)
