"""The support agent on the OpenAI Agents SDK, its tools on an MCP server.

The SDK's ``Runner`` asks the model (the scripted fake here, through ``OPENAI_BASE_URL``,
which the harness sets in the worker's process), the model calls ``refund`` and then
``send_email``, and the SDK calls each on the support team's MCP server through its own
``MCPServerStreamableHttp``. Nothing of the harness is in the agent.

``raise_tool_errors`` is the one setting that matters under faults. The SDK's default shows a
failed MCP call to the model as the tool's answer (``failure_error_function``): a refused
``refund`` becomes a line of text, the model goes on to its next step, and the run ends
"done" with no refund made; nothing ever delivers the ticket again. With
``failure_error_function=None`` the failure raises out of ``Runner.run``, the worker fails,
and the ticket comes back; the server's ``dedupe_by`` keys make the second delivery act once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fake_providers import Script, call, say
from pytest_crashpoints import Context

TICKET = {"task_id": "ticket-31", "charge_id": "ch_31", "amount": 1500,
          "email": "ada@customer.example",
          "text": "Order 7 arrived broken: refund ch_31 (15 EUR) and tell ada@customer.example."}

#: The model: refund, then e-mail the customer, then say it is done.
SCRIPT = Script([
    call("refund", ticket_id="ticket-31", charge_id="ch_31", amount=1500),
    call("send_email", ticket_id="ticket-31", to="ada@customer.example",
         body="We refunded the 15 EUR of order 7."),
    say("Refunded 15 EUR and told the customer."),
])


async def handle_ticket(
    ticket: Mapping[str, Any], ctx: Context, *, raise_tool_errors: bool = True
) -> str:
    """Run the support agent on one ticket; its tools are the MCP server's."""
    from agents import Agent, Runner, set_default_openai_client, set_tracing_disabled
    from agents.mcp import MCPServerStreamableHttp
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # traces would go to api.openai.com
    set_default_openai_client(AsyncOpenAI(max_retries=0))  # reads OPENAI_BASE_URL / _API_KEY
    params = {"url": ctx.base_url("support-tools") + "/mcp",
              "headers": {"Authorization": "Bearer "
                          + ctx.api_key("support-tools", str(ticket["task_id"]))}}
    options: dict[str, Any] = {} if not raise_tool_errors else {"failure_error_function": None}
    async with MCPServerStreamableHttp(params=params, client_session_timeout_seconds=10,
                                       **options) as tools:
        agent = Agent(name="support", model="gpt-4o-mini", mcp_servers=[tools],
                      instructions="You are a support agent: refund what is owed, then tell "
                                   "the customer.")
        result = await Runner.run(agent, str(ticket["text"]))
    return str(result.final_output)
