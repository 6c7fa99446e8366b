"""BUG, on mcp 1.x: a FastMCP tool, deployed stateless with JSON answers, that says
``idempotentHint: true`` and sends an e-mail every time it is called (``fastmcp_mailer.py``
with ``claim=False``). Called again with the same arguments, it sends a second e-mail:
invariant 1, and the annotation's own check. Its twin that keeps the claim passes
(``../test_mcp1.py``). Skipped where mcp 2 is installed: ``make test-mcp1`` runs it."""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("mcp", reason="the mcp SDK is an agents extra: pip install -e .[agents]")
pytest.importorskip("mcp.server.fastmcp", reason="mcp 1.x's FastMCP: make test-mcp1")

from pytest_crashpoints.mcp import mcp_annotations, mcp_server_worker
from scenarios.mcp_mailer import CALL
from scenarios.test_mcp1 import server_for


@pytest.mark.crashpoints(points="D", providers=["email"], mode="exhaustive",
                         expect=[1, "mcp_idempotent_hint"], strict_coverage=False)
def test_a_fastmcp_tool_that_says_idempotent_and_sends_twice(crashpoints):
    build = functools.partial(server_for, claim=False)
    crashpoints.run(worker=mcp_server_worker(build, transport="http"), messages=[CALL],
                    invariants=mcp_annotations(server_for(None, None, claim=False), [CALL]))
