"""An MCP server of one's own (the SDK's ``MCPServer``, once FastMCP): one tool,
``send_email``, that e-mails a customer about a ticket through a SendGrid-style API with plain
httpx. Its annotation says ``idempotentHint: true``: a client may call it again with the same
arguments (after a timeout, a lost result) and trust nothing more happens.

``claim=True`` makes that true: the tool records the ticket in its own SQLite table before it
sends, skips a ticket already sent, and parks one found half done (``sending``: it may or may
not have gone out, and SendGrid has no key to ask by) for review. ``claim=False`` sends every
time it is called: the claim is false, and a second call sends a second e-mail.

The tool's work is :func:`send_email_once`, plain Python: ``build`` registers it on mcp 2's
``MCPServer``; ``fastmcp_mailer.py`` registers the same function on mcp 1's FastMCP.

In production: ``build(api_url="https://api.sendgrid.com", api_key=..., db="/var/lib/mailer.db")``
and ``server.run("streamable-http", stateless_http=True, json_response=True)`` (or
``server.run()`` on stdio); nothing of the harness is in it.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import httpx

SCHEMA = "CREATE TABLE IF NOT EXISTS sent (ticket_id TEXT PRIMARY KEY, status TEXT)"
#: The crash tests' message: one ``tools/call`` of ``send_email``.
CALL = {"task_id": "ticket-9", "tool": "send_email",
        "arguments": {"ticket_id": "ticket-9", "to": "ada@customer.example", "body": "Fixed."}}


def sent(ctx: Any) -> Any:
    """The ``sent`` table read as the crash tests' ledger view."""
    from pytest_crashpoints import SQLiteLedgerView, State

    states = {"sending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED,
              "review": State.MANUAL_REVIEW}
    return SQLiteLedgerView(ctx.env.path / "mailer.db", table="sent", states=states,
                            columns={"attempt_id": "ticket_id", "state": "status"})


def send_email_once(
    *, api_url: str, api_key: str, db: str, claim: bool, ticket_id: str, to: str, body: str
) -> str:
    """E-mail a customer about a ticket; with ``claim``, once per ticket."""
    conn = sqlite3.connect(db)
    try:
        conn.execute(SCHEMA)
        if claim:
            row = conn.execute(
                "SELECT status FROM sent WHERE ticket_id = ?", (ticket_id,)
            ).fetchone()
            if row is not None and row[0] in ("sent", "review"):
                return str(row[0])
            if row is not None:  # "sending": a call died after claiming, maybe after sending
                with conn:
                    conn.execute(
                        "UPDATE sent SET status = 'review' WHERE ticket_id = ?", (ticket_id,)
                    )
                return "review"
            with conn:
                conn.execute("INSERT INTO sent VALUES (?, 'sending')", (ticket_id,))
        httpx.post(
            f"{api_url}/v3/mail/send",
            headers={"Authorization": f"Bearer {api_key}"},
            json={"personalizations": [{"to": [{"email": to}]}],
                  "from": {"email": "support@example.com"}, "subject": "Your ticket",
                  "content": [{"type": "text/plain", "value": body}]},
            timeout=10.0,
        ).raise_for_status()
        if claim:
            with conn:
                conn.execute("UPDATE sent SET status = 'sent' WHERE ticket_id = ?", (ticket_id,))
        return "sent"
    finally:
        conn.close()


def build(*, api_url: str, api_key: str, db: str, claim: bool = True) -> Any:
    """The mailer as mcp 2's ``MCPServer``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    server = MCPServer("mailer")

    @server.tool(annotations=ToolAnnotations(idempotentHint=True, destructiveHint=False))
    def send_email(ticket_id: str, to: str, body: str) -> str:
        """E-mail a customer about a ticket, once per ticket."""
        return send_email_once(api_url=api_url, api_key=api_key, db=db, claim=claim,
                               ticket_id=ticket_id, to=to, body=body)

    return server
