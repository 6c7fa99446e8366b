"""A support agent that reaches its tools over MCP: the official ``mcp`` client, unchanged.

For a ticket it refunds the charge and e-mails the customer, each a ``tools/call`` to the
support team's MCP server. The server (``TOOLS`` in ``support_tools.py``, a fake of it) honours its
``idempotentHint``: ``refund`` and ``send_email`` take the ticket's id, and a second call with
the same ticket answers the first result and does nothing new. The agent passes the ticket's id,
so a worker killed after a tool ran (B), or a ticket delivered again, refunds and e-mails once.

``PLAIN_TOOLS`` is the same server whose ``send_email`` has no such key (``idempotentHint:
false``, as most e-mail tools are). Against it, ``retry=True`` is the bug MCP users report: a
client that calls a tool again after its result was lost sends the e-mail twice.
``look_first=True`` asks ``find_email`` before it sends: that survives a kill and a lost
result (the message comes back and the e-mail is found), but not two deliveries at once (both
look, neither finds, both send): check-then-act with nothing claimed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from pytest_crashpoints import Context
from scenarios.support_tools import PLAIN_TOOLS, TICKET, TOOLS

__all__ = ["PLAIN_TOOLS", "TICKET", "TOOLS", "call_tool", "handle_ticket"]


async def call_tool(url: str, key: str, tool: str, arguments: Mapping[str, Any]) -> Any:
    """One ``tools/call`` in a session of its own."""
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=10.0) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await session.call_tool(tool, dict(arguments))
        if result.is_error:
            raise RuntimeError(f"{tool} failed: {result.content}")
        return result.structured_content


async def handle_ticket(
    ticket: Mapping[str, Any], ctx: Context, *, retry: bool = False, look_first: bool = False
) -> str:
    """Refund the ticket's charge and e-mail the customer, through the MCP server."""
    url = ctx.base_url("support-tools") + "/mcp"
    key = ctx.api_key("support-tools", str(ticket["task_id"]))
    calls = [
        ("refund", {"ticket_id": ticket["task_id"], "charge_id": ticket["charge_id"],
                    "amount": ticket["amount"]}),
        ("send_email", {"ticket_id": ticket["task_id"], "to": ticket["email"],
                        "body": "We refunded your order."}),
    ]
    for tool, arguments in calls:
        if look_first and tool == "send_email":
            found = await call_tool(url, key, "find_email", {"ticket_id": ticket["task_id"]})
            if found["found"]:
                continue  # sent before this delivery: a redelivery
        for attempt in range(3 if retry else 1):
            try:
                await call_tool(url, key, tool, arguments)
                break
            except Exception:  # the session died with the lost answer (an ExceptionGroup)
                if not retry or attempt == 2:
                    raise
    return "done"
