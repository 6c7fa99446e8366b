"""A refund that waits for a person's approval: a LangGraph graph with ``interrupt()`` and a
SQLite checkpointer, run as it is.

The graph has one node, ``refund``: it asks for approval (``interrupt(...)``: the run stops,
the checkpointer keeps the thread), and when resumed with ``Command(resume="approve")`` it
refunds the charge through a Stripe-style API with plain httpx. Two messages drive it: the
ticket (start the thread, which stops at the approval) and the approval (resume it).

LangGraph runs a resumed node again *from its start*; ``interrupt()`` then returns the resume
value. So a worker killed after the refund left and before the node's end was checkpointed
runs the refund again when the approval is delivered again:

- ``keyed=True``: the refund carries an ``Idempotency-Key`` derived from the thread and the
  node (the same in every run of it), and the provider replays the first refund;
- ``keyed=False``: a second refund.

In production: the same graph, ``SqliteSaver`` on the service's database (or Postgres), the
API's URL and key from the configuration.
"""

from __future__ import annotations

import sqlite3
from typing import Any, TypedDict

import httpx
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt


class Ticket(TypedDict, total=False):
    ticket_id: str
    charge_id: str
    amount: int
    outcome: str


def build(*, api_url: str, api_key: str, keyed: bool, saver: SqliteSaver) -> Any:
    def refund(state: Ticket, config: RunnableConfig) -> Ticket:
        decision = interrupt({"refund": state["amount"], "charge": state["charge_id"]})
        if decision != "approve":
            return {"outcome": "declined"}
        headers = {"Authorization": f"Bearer {api_key}"}
        if keyed:  # the same in every run of this node for this thread
            headers["Idempotency-Key"] = f"{config.get('configurable', {})['thread_id']}:refund"
        response = httpx.post(f"{api_url}/v1/refunds", headers=headers, timeout=10.0,
                              data={"charge": state["charge_id"], "amount": state["amount"]})
        response.raise_for_status()
        return {"outcome": f"refunded {response.json()['id']}"}

    graph = StateGraph(Ticket)
    graph.add_node("refund", refund)
    graph.add_edge(START, "refund")
    graph.add_edge("refund", END)
    return graph.compile(checkpointer=saver)


def handle(message: dict[str, Any], *, db: str, api_url: str, api_key: str,
           keyed: bool = True) -> str:
    """Start a ticket's thread (it stops at the approval), or resume it with a decision."""
    conn = sqlite3.connect(db, check_same_thread=False)
    try:
        graph = build(api_url=api_url, api_key=api_key, keyed=keyed, saver=SqliteSaver(conn))
        config = {"configurable": {"thread_id": message["ticket_id"]}}
        if message["kind"] == "ticket":
            state = graph.get_state(config)
            if state.created_at is not None:
                return "started before"  # the ticket delivered again: its thread exists
            graph.invoke({"ticket_id": message["ticket_id"], "charge_id": message["charge_id"],
                          "amount": message["amount"]}, config)
            return "waiting for approval"
        result = graph.invoke(Command(resume=message["decision"]), config)
        return str(result.get("outcome"))
    finally:
        conn.close()
