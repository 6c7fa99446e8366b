"""durastep 0.1.0: "Every later call with the same arguments in the same run gets the stored
result back, including from a new process after a crash." Its Limits: "At most once after
success, not exactly once ... For payments and similar, also pass an idempotency key.\""""

import pytest

pytest.importorskip("durastep", reason="pip install -e '.[case-studies]'")

import durastep

from pytest_crashpoints import SQLiteLedgerView, State
from scenarios.case_studies.tools import charge, send_email

ORDER = {"task_id": "ticket-4821", "amount": 4200}
STEPS = """SELECT step_key AS attempt_id, run_id AS task_id, step_name AS tool_name,
                  'done' AS state, json_extract(value, '$.id') AS result_ref
             FROM durastep_steps"""


def charger(order, ctx):
    @durastep.step(name="charge_order")
    def charge_order(amount: int) -> dict:
        return charge(ctx, order["task_id"], amount, key=f"{order['task_id']}:charge_order")

    with durastep.run(order["task_id"], store=durastep.SQLiteStore(ctx.env.path / "steps.db")):
        return charge_order(order["amount"])


def mailer(order, ctx):
    @durastep.step(name="send_receipt")
    def send_receipt(to: str) -> dict:
        return send_email(ctx, order["task_id"], to, "Refund approved")

    with durastep.run(order["task_id"], store=durastep.SQLiteStore(ctx.env.path / "steps.db")):
        return send_receipt("ops@acme.com")


def steps(ctx):
    return SQLiteLedgerView(ctx.env.path / "steps.db", query=STEPS,
                            states={"done": State.OUTCOME_CONFIRMED})


@pytest.mark.crashpoints(points="ABCD", providers=["payments"], mode="exhaustive",
                         strict_coverage=False)
def test_a_step_with_a_downstream_key_charges_once(crashpoints):
    crashpoints.run(worker=charger, messages=[ORDER], ledger_view=steps)


@pytest.mark.crashpoints(points="B", faults=["kill"], providers=["email"], mode="exhaustive",
                         expect=1, strict_coverage=False)
def test_a_step_killed_before_its_result_is_stored_runs_again_as_documented(crashpoints):
    crashpoints.run(worker=mailer, messages=[ORDER])
