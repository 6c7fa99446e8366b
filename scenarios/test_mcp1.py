"""MCP on the mcp 1.x SDK, as deployed: a FastMCP server of one's own, stateless with JSON
answers, as the worker (``fastmcp_mailer.py``), and the support agent on the 1.x client
against a stateless MCP server (``mcp1_support.py``). Each passes every applicable fault; a
session the server forgot is not applicable to a stateless server, and the summary says so.
The FastMCP server that does not keep its claim is caught in ``broken/test_mcp1.py``. Skipped
where mcp 2 is installed: ``make test-mcp1`` runs them on mcp 1.x."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp SDK is an agents extra: pip install -e .[agents]")
pytest.importorskip("mcp.server.fastmcp", reason="mcp 1.x's FastMCP: make test-mcp1")

from pytest_crashpoints import Context
from pytest_crashpoints.mcp import mcp_annotations, mcp_server_worker
from scenarios import fastmcp_mailer, mcp1_support
from scenarios.mcp_mailer import CALL, sent
from scenarios.support_tools import STATELESS_TOOLS, TICKET


def server_for(call: dict[str, Any] | None, ctx: Context | None, *, claim: bool = True) -> Any:
    if ctx is None or call is None:  # only to list the tools: no call is made
        return fastmcp_mailer.build(api_url="", api_key="", db="", claim=claim)
    return fastmcp_mailer.build(api_url=ctx.base_url("email"),
                                api_key=ctx.api_key("email", call["task_id"]),
                                db=str(ctx.env.path / "mailer.db"), claim=claim)


@pytest.mark.crashpoints(points="ABCD", providers=["email"], mode="exhaustive",
                         strict_coverage=False)
def test_a_stateless_fastmcp_server_keeps_its_idempotent_hint(crashpoints):
    crashpoints.run(worker=mcp_server_worker(server_for, transport="http"), messages=[CALL],
                    ledger_view=sent, invariants=mcp_annotations(server_for(None, None), [CALL]))


@pytest.mark.crashpoints(points="BCDF", providers=[STATELESS_TOOLS], mode="exhaustive",
                         strict_coverage=False)
def test_the_mcp1_client_refunds_and_emails_once_on_a_stateless_server(crashpoints):
    crashpoints.run(worker=mcp1_support.handle_ticket, messages=[TICKET])
