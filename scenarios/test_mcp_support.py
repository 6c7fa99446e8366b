"""The support agent over MCP (``mcp_support.py``): the official ``mcp`` client, unchanged,
against a fake MCP server whose tools take the ticket's id as their idempotency: one refund
and one e-mail whatever the kill, the lost result or the second delivery. Its broken twin is
in ``broken/test_mcp_support.py``."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp", reason="the mcp SDK is an agents extra: pip install -e .[agents]")

from scenarios.mcp_support import TICKET, TOOLS, handle_ticket


@pytest.mark.crashpoints(points="BCDF", providers=[TOOLS], mode="exhaustive",
                         strict_coverage=False)
def test_one_refund_and_one_email_over_mcp(crashpoints):
    crashpoints.run(worker=handle_ticket, messages=[TICKET])
