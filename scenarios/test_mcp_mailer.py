"""An MCP server of one's own as the worker (``mcp_mailer.py``): each message is one
``tools/call`` the official client makes to it (in process, through the SDK's own client and
server), the worker is killed around the tool's commits and its e-mail, and a message delivered
again is the client calling again with the same arguments. Its annotation
(``idempotentHint: true``) is checked as an invariant of the test's own. The server that keeps
its claim passes; its twin that does not is in ``broken/test_mcp_mailer.py``."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp SDK is an agents extra: pip install -e .[agents]")

from pytest_crashpoints import Context, SQLiteLedgerView, State, mcp_annotations
from scenarios.mcp_mailer import build

CALL = {"task_id": "ticket-9", "tool": "send_email",
        "arguments": {"ticket_id": "ticket-9", "to": "ada@customer.example", "body": "Fixed."}}
STATES = {"sending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED,
          "review": State.MANUAL_REVIEW}


def server_for(ctx: Context | None, *, claim: bool = True) -> Any:
    if ctx is None:  # only to list the tools: no call is made
        return build(api_url="", api_key="", db="", claim=claim)
    return build(api_url=ctx.base_url("email"), api_key=ctx.api_key("email", "ticket-9"),
                 db=str(ctx.env.path / "mailer.db"), claim=claim)


def tool_call(*, claim: bool = True) -> Any:
    async def worker(call: dict[str, Any], ctx: Context) -> Any:
        from mcp import Client

        async with Client(server_for(ctx, claim=claim)) as client:
            result = await client.call_tool(call["tool"], call["arguments"])
        if result.is_error:
            raise RuntimeError(f"{call['tool']} failed: {result.content}")
        return result.structured_content

    return worker


def sent(ctx: Context) -> SQLiteLedgerView:
    return SQLiteLedgerView(ctx.env.path / "mailer.db", table="sent", states=STATES,
                            columns={"attempt_id": "ticket_id", "state": "status"})


@pytest.mark.crashpoints(points="ABCD", providers=["email"], mode="exhaustive",
                         strict_coverage=False)
def test_a_server_that_keeps_its_idempotent_hint(crashpoints):
    crashpoints.run(worker=tool_call(), messages=[CALL], ledger_view=sent,
                    invariants=mcp_annotations(server_for(None), [CALL]))
