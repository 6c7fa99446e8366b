"""BUG: an MCP tool that says ``idempotentHint: true`` and sends an e-mail every time it is
called. Called again with the same arguments (the message delivered again: a client's retry),
it sends a second e-mail: invariant 1, and the annotation's own check,
``mcp_idempotent_hint``. Its twin that keeps the claim passes (``../test_mcp_mailer.py``)."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp", reason="the mcp SDK is an agents extra: pip install -e .[agents]")
pytest.importorskip("mcp.server.mcpserver", reason="mcp 2's API; mcp 1.x: test_mcp1.py")

import functools

from pytest_crashpoints.mcp import mcp_annotations, mcp_server_worker
from scenarios.test_mcp_mailer import CALL, server_for


@pytest.mark.parametrize("transport", ["memory", "http"])
@pytest.mark.crashpoints(points="D", providers=["email"], mode="exhaustive",
                         expect=[1, "mcp_idempotent_hint"], strict_coverage=False)
def test_a_tool_that_says_idempotent_and_sends_twice(crashpoints, transport):
    # In process through the SDK's client, and on the wire to the server's HTTP app.
    build = functools.partial(server_for, claim=False)
    crashpoints.run(worker=mcp_server_worker(build, transport=transport),
                    messages=[CALL],
                    invariants=mcp_annotations(server_for(None, None, claim=False), [CALL]))
