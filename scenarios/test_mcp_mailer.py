"""An MCP server of one's own as the worker (``mcp_mailer.py``): each message is one
``tools/call`` into it (``mcp_server_worker``: through the SDK's own client in process, or on
the wire to the server's streamable HTTP app), the worker is killed around the tool's commits
and its e-mail, and a message delivered again is the client calling again with the same
arguments. Its annotation (``idempotentHint: true``) is checked as an invariant of the test's
own. The server that keeps its claim passes; its twin that does not is in
``broken/test_mcp_mailer.py``."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp SDK is an agents extra: pip install -e .[agents]")
pytest.importorskip("mcp.server.mcpserver", reason="mcp 2's API; mcp 1.x: test_mcp1.py")

from pytest_crashpoints import Context
from pytest_crashpoints.mcp import mcp_annotations, mcp_server_worker
from scenarios.mcp_mailer import CALL, build, sent


def server_for(call: dict[str, Any] | None, ctx: Context | None, *, claim: bool = True) -> Any:
    if ctx is None or call is None:  # only to list the tools: no call is made
        return build(api_url="", api_key="", db="", claim=claim)
    return build(api_url=ctx.base_url("email"), api_key=ctx.api_key("email", call["task_id"]),
                 db=str(ctx.env.path / "mailer.db"), claim=claim)


@pytest.mark.crashpoints(points="ABCD", providers=["email"], mode="exhaustive",
                         strict_coverage=False)
def test_a_server_that_keeps_its_idempotent_hint(crashpoints):
    crashpoints.run(worker=mcp_server_worker(server_for), messages=[CALL], ledger_view=sent,
                    invariants=mcp_annotations(server_for(None, None), [CALL]))


@pytest.mark.crashpoints(points="ABCD", providers=["email"], mode="exhaustive",
                         strict_coverage=False)
def test_the_same_server_over_streamable_http(crashpoints):
    # The server's own HTTP app on loopback, the call as a client sends it on the wire: a
    # message delivered again sends the same JSON-RPC request id to the restarted server.
    crashpoints.run(worker=mcp_server_worker(server_for, transport="http"), messages=[CALL],
                    ledger_view=sent, invariants=mcp_annotations(server_for(None, None), [CALL]))


@pytest.mark.crashpoints(points="ABCD", providers=["email"], mode="exhaustive",
                         strict_coverage=False)
def test_the_same_server_deployed_stateless_with_json_answers(crashpoints):
    # As it runs behind a load balancer: run("streamable-http", stateless_http=True,
    # json_response=True). No session, every request on its own, one JSON body per answer.
    worker = mcp_server_worker(server_for, transport="http", stateless_http=True,
                               json_response=True)
    crashpoints.run(worker=worker, messages=[CALL], ledger_view=sent,
                    invariants=mcp_annotations(server_for(None, None), [CALL]))
