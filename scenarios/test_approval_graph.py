"""A refund that waits for a person's approval (``approval_graph.py``: LangGraph,
``interrupt()``, a SQLite checkpointer), crash-tested across the approval: the ticket starts
the thread, the approval resumes it, and the worker is killed around the refund the resumed
node makes. LangGraph runs a resumed node again from its start, so the approval delivered
again after a kill refunds again unless the refund carries a key derived from the thread: the
keyed graph passes; its unkeyed twin is in ``broken/test_approval_graph.py``."""

from __future__ import annotations

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite", reason="LangGraph is an agents extra")

from scenarios import approval_graph

CHARGE_ID = "ch_000000000000000000000001"  # the first object the case's payments creates
TICKET = {"task_id": "ticket-5", "kind": "ticket", "ticket_id": "ticket-5",
          "charge_id": CHARGE_ID, "amount": 1500}
APPROVAL = {"task_id": "ticket-5", "kind": "approval", "ticket_id": "ticket-5",
            "decision": "approve"}


def create_charge(ctx):
    ctx.client("payments", "ticket-5").post(
        "/v1/charges", data={"amount": "4999", "currency": "eur"}).raise_for_status()


def worker(message, ctx, *, keyed=True):
    return approval_graph.handle(
        message, db=str(ctx.env.path / "threads.db"), api_url=ctx.base_url("payments"),
        api_key=ctx.api_key("payments", message["task_id"]), keyed=keyed)


def unkeyed(message, ctx):
    return worker(message, ctx, keyed=False)


@pytest.mark.crashpoints(points="BCD", providers=["payments"], mode="exhaustive",
                         strict_coverage=False)
def test_an_approved_refund_is_made_once_across_crashes(crashpoints):
    crashpoints.run(worker=worker, messages=[TICKET, APPROVAL], setup=create_charge)
