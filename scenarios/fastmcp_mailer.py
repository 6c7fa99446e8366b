"""The mailer of ``mcp_mailer.py`` written for mcp 1.x: FastMCP from ``mcp.server.fastmcp``
(mcp 2 renamed it ``MCPServer``), deployed as most are, stateless with JSON answers. mcp 1
keeps those options in the server's settings, so the crash test's ``mcp_server_worker`` serves
it as it is built, with no option of its own. The tool is the same plain function,
``send_email_once``: it records the ticket before it sends, and parks one found half done
(``claim=False``, its broken twin, sends on every call).

In production: ``build(...).run("streamable-http")``.
"""

from __future__ import annotations

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations

from scenarios.mcp_mailer import send_email_once


def build(*, api_url: str, api_key: str, db: str, claim: bool = True) -> FastMCP:
    server = FastMCP("mailer", stateless_http=True, json_response=True)

    @server.tool(annotations=ToolAnnotations(idempotentHint=True, destructiveHint=False))
    def send_email(ticket_id: str, to: str, body: str) -> str:
        """E-mail a customer about a ticket, once per ticket."""
        return send_email_once(api_url=api_url, api_key=api_key, db=db, claim=claim,
                               ticket_id=ticket_id, to=to, body=body)

    return server
