"""The support team's MCP server, faked for the support agent's crash tests
(``mcp_support.py``, ``mcp1_support.py``, ``mcp_agents_sdk.py``): ``refund`` and
``send_email`` take the ticket's id as their idempotency (``dedupe_by``), and ``find_email``
looks e-mails up. ``PLAIN_TOOLS`` is the same server whose ``send_email`` has no such key;
``STATELESS_TOOLS`` the same server deployed stateless (``stateless_http=True``: no session,
every request on its own)."""

from __future__ import annotations

from fake_providers import McpServer, McpTool

TICKET = {"task_id": "ticket-31", "charge_id": "ch_31", "amount": 1500,
          "email": "ada@customer.example"}

_REFUND = McpTool(
    "refund",
    description="Refund a charge, once per ticket.",
    input_schema={"type": "object", "required": ["ticket_id", "charge_id", "amount"]},
    idempotent=True,
    dedupe_by=("ticket_id",),
)
_FIND = McpTool("find_email", description="E-mails sent for a ticket.", read_only=True,
                finds="send_email")
_SCHEMA = {"type": "object", "required": ["ticket_id", "to", "body"]}
TOOLS = McpServer(
    "support-tools",
    _REFUND,
    McpTool("send_email", description="E-mail a customer, once per ticket.",
            input_schema=_SCHEMA, idempotent=True, dedupe_by=("ticket_id",)),
    _FIND,
)
PLAIN_TOOLS = McpServer(
    "support-tools",
    _REFUND,
    McpTool("send_email", description="E-mail a customer.", input_schema=_SCHEMA),
    _FIND,
)
STATELESS_TOOLS = McpServer("support-tools", *TOOLS.tools, stateless=True)
