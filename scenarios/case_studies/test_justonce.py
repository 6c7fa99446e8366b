"""justonce 0.2.0: "the function now runs **at most once per order** — across retries,
restarts, queue replays, and concurrent workers", and "When a process dies *between* the
effect and recording it, the key is left `UNKNOWN`"; "retries refuse until reconciled"."""

import pytest

justonce = pytest.importorskip("justonce", reason="pip install -e '.[case-studies]'")

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


@pytest.mark.crashpoints(points="ABCD", providers=["email"], mode="exhaustive",
                         strict_coverage=False)
def test_an_email_is_sent_at_most_once(crashpoints):
    crashpoints.run(worker=worker, messages=[ORDER], ledger_view=keys)
