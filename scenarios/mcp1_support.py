"""The support agent of ``mcp_support.py`` written for the mcp 1.x client (what
langchain-mcp-adapters still requires): ``streamable_http_client`` on an httpx client, whose
context yields three values (the third, the session id getter, unused), and results whose
fields are ``isError`` and ``structuredContent``. Its crash test runs it against the support
team's server deployed stateless (``support_tools.STATELESS_TOOLS``): no session, every
``tools/call`` on its own. Nothing of the harness is in the agent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from pytest_crashpoints import Context


async def call_tool(url: str, key: str, tool: str, arguments: Mapping[str, Any]) -> Any:
    async with (
        httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=10.0) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await session.call_tool(tool, dict(arguments))
        if result.isError:
            raise RuntimeError(f"{tool} failed: {result.content}")
        return result.structuredContent


async def handle_ticket(ticket: Mapping[str, Any], ctx: Context) -> str:
    """Refund the ticket's charge and e-mail the customer, through the MCP server."""
    url = ctx.base_url("support-tools") + "/mcp"
    key = ctx.api_key("support-tools", str(ticket["task_id"]))
    await call_tool(url, key, "refund", {"ticket_id": ticket["task_id"],
                                         "charge_id": ticket["charge_id"],
                                         "amount": ticket["amount"]})
    await call_tool(url, key, "send_email", {"ticket_id": ticket["task_id"],
                                             "to": ticket["email"],
                                             "body": "We refunded your order."})
    return "done"
