"""safeact 0.0.2: "at most once, forever, across restarts"; a crash in the gap leaves the key
IN_DOUBT, and the next call raises InDoubtError "rather than blindly retrying"."""

import httpx
import pytest

safeact = pytest.importorskip("safeact", reason="pip install -e '.[case-studies]'")

from pytest_crashpoints import SQLiteLedgerView, State

REFUND = {"task_id": "refund-8842", "to": "a@b.com", "amount": 50}
STATES = {"ATTEMPTING": State.DISPATCHED, "SUCCEEDED": State.OUTCOME_CONFIRMED,
          "FAILED": State.FAILED, "IN_DOUBT": State.MANUAL_REVIEW}


def worker(refund, ctx):
    @safeact.safe(store=str(ctx.env.path / "agent.db"))
    def send_receipt(key, to, amount):
        httpx.post(f"{ctx.base_url('email')}/v3/mail/send", json={
            "personalizations": [{"to": [{"email": to}]}], "from": {"email": "shop@example.com"},
            "subject": "Your refund", "content": [{"type": "text/plain",
                                                   "value": f"Refunded ${amount}."}]},
            headers={"Authorization": f"Bearer {ctx.api_key('email', refund['task_id'])}",
                     "X-Correlation-Id": key}).raise_for_status()
        return {"sent": True}

    try:
        return send_receipt(refund["task_id"], refund["to"], refund["amount"])
    except safeact.InDoubtError as e:   # the README: "go check", a person decides
        return {"in_doubt": e.key}


def calls(ctx):
    return SQLiteLedgerView(ctx.env.path / "agent.db", table="calls", states=STATES,
                            columns={"attempt_id": "key", "state": "state",
                                     "idempotency_key": "key", "tool_name": "fn_name"})


@pytest.mark.crashpoints(points="ABCD", providers=["email"], mode="exhaustive",
                         strict_coverage=False)
def test_a_receipt_is_sent_at_most_once(crashpoints):
    crashpoints.run(worker=worker, messages=[REFUND], ledger_view=calls)
