"""The support agent of ``support_agent.py`` as a LangGraph graph: a model node
(``langchain_openai.ChatOpenAI`` with the tools bound) and a ``ToolNode``, checkpointed on
SQLite (``SqliteSaver``), so the framework's own durable state is part of what a crash leaves.
A crash test changes only the model's base URL and key, and where the files live.

A worker restarted after a crash resumes the ticket's thread from its last checkpoint. A
checkpoint is written after each step of the graph, not inside one: killed while the tool
node runs, the graph runs the tool node again, with the same tool calls. So the tools cannot
trust the framework to run them once:

- ``ledger=True`` (the safe way): each tool records its intent in the reference ledger under
  a key derived from the ticket before it sends anything; run again, it finds its attempt and
  sends nothing twice (recovery finishes what was in flight).
- ``ledger=False`` (the classic bug): the tools call the providers straight away, trusting
  the checkpoint. A kill after the refund left, before the step's checkpoint, refunds twice.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

import httpx
from langchain_core.messages import SystemMessage
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from pytest_crashpoints import Context
from scenarios.support_agent import MODEL, SYSTEM, run_tool


def _tools(ctx: Context, ticket: Mapping[str, Any], *, ledger: bool) -> list[StructuredTool]:
    task_id = str(ticket["task_id"])

    def refund_charge(charge_id: str, amount: int, reason: str = "requested_by_customer") -> str:
        """Refund part or all of a charge (amount in cents)."""
        arguments = {"charge_id": charge_id, "amount": amount, "reason": reason}
        if ledger:
            return run_tool(ctx, ticket, "refund_charge", arguments, call_id="")
        # BUG: no record before the send; the framework's checkpoint is trusted to run this
        # once, and the tool node runs again after a crash.
        with httpx.Client(base_url=ctx.base_url("payments"), headers={
            "Authorization": f"Bearer {ctx.api_key('payments', task_id)}"}) as payments:
            response = payments.post("/v1/refunds", data={
                "charge": charge_id, "amount": str(amount), "reason": reason})
        response.raise_for_status()
        return f"refund: {response.json()['id']}"

    def email_customer(subject: str, body: str) -> str:
        """Send the customer an e-mail."""
        arguments = {"subject": subject, "body": body}
        if ledger:
            return run_tool(ctx, ticket, "email_customer", arguments, call_id="")
        with httpx.Client(base_url=ctx.base_url("email"), headers={
            "Authorization": f"Bearer {ctx.api_key('email', task_id)}"}) as email:
            response = email.post("/v3/mail/send", json={
                "personalizations": [{"to": [{"email": ticket["email"]}]}],
                "from": {"email": "support@example.com"}, "subject": subject,
                "content": [{"type": "text/plain", "value": body}]})
        response.raise_for_status()
        return f"sent: {response.headers['X-Message-Id']}"

    return [StructuredTool.from_function(refund_charge),
            StructuredTool.from_function(email_customer)]


def handle_ticket(ticket: Mapping[str, Any], ctx: Context, *, ledger: bool = True) -> str:
    """Run (or resume) the ticket's thread of the graph; return the model's last words."""
    tools = _tools(ctx, ticket, ledger=ledger)
    model = ChatOpenAI(
        model=MODEL,
        base_url=ctx.base_url("model") + "/v1",
        api_key=ctx.api_key("model", str(ticket["task_id"])),  # type: ignore[arg-type]
        max_retries=0,
    ).bind_tools(tools)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    conn = sqlite3.connect(ctx.env.path / "checkpoints.db", check_same_thread=False)
    try:
        app = graph.compile(checkpointer=SqliteSaver(conn))
        config: Any = {"configurable": {"thread_id": str(ticket["id"])}}
        state = app.get_state(config)
        # "sync": each step's checkpoint is written before the next step starts. LangGraph's
        # default ("async") writes it while the next step runs, so what a crash leaves of it
        # depends on the threads' timing: not a state anyone can reason about, or replay.
        if state.next:  # a run of this ticket was cut short: go on from its checkpoint
            result = app.invoke(None, config, durability="sync")
        elif state.values:  # done before
            result = state.values
        else:
            question = (f"Ticket {ticket['id']} from {ticket['email']}: {ticket['text']}")
            result = app.invoke(
                {"messages": [SystemMessage(SYSTEM), ("user", question)]}, config,
                durability="sync",
            )
        return str(result["messages"][-1].content)
    finally:
        conn.close()

