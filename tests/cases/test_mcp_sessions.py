"""A fake MCP server deployed stateless keeps no session, so a session it forgot is not
applicable: never scheduled, never demanded by coverage, and the summary says why; a request
sent twice still is. ``faults=["-forget_session"]`` leaves that fault out of a server with
sessions, and nothing else. The agent speaks MCP on the wire with plain httpx (the handshake,
the session it is given if any, one ``tools/call``), so the cases are cheap."""

from __future__ import annotations

import pytest

from tests.conftest import run_reported

AGENT = '''
import httpx
import pytest
from fake_providers import McpServer, McpTool

TICKET = {"task_id": "ticket-3", "to": "ada@example.com"}
TOOLS = [McpTool("send_email", idempotent=True, dedupe_by=("ticket_id",))]
STATELESS = McpServer("tools", *TOOLS, stateless=True)
WITH_SESSIONS = McpServer("tools", *TOOLS)


def rpc(http, url, headers, message):
    answer = http.post(url, json=message, headers=headers)
    answer.raise_for_status()
    return answer


def send(ticket, ctx):
    url = ctx.base_url("tools") + "/mcp"
    headers = {"Authorization": f"Bearer {ctx.api_key('tools', ticket['task_id'])}",
               "Accept": "application/json, text/event-stream"}
    with httpx.Client(timeout=10) as http:
        hello = rpc(http, url, headers, {
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "1"}}})
        if "mcp-session-id" in hello.headers:
            headers["Mcp-Session-Id"] = hello.headers["mcp-session-id"]
        rpc(http, url, headers, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        result = rpc(http, url, headers, {
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "send_email",
                       "arguments": {"ticket_id": ticket["task_id"], "to": ticket["to"]}}}).json()
    if "error" in result or result["result"].get("isError"):
        raise RuntimeError(f"send_email failed: {result}")
    return "sent"


@pytest.mark.crashpoints(points="BDF", providers=[STATELESS], mode="exhaustive",
                         strict_coverage=False)
def test_stateless(crashpoints):
    crashpoints.run(worker=send, messages=[TICKET])


@pytest.mark.crashpoints(points="DF", providers=[STATELESS], mode="exhaustive",
                         strict_coverage=False, faults=["forget_session", "duplicate_request"])
def test_stateless_chosen(crashpoints):
    crashpoints.run(worker=send, messages=[TICKET])


@pytest.mark.crashpoints(points="BDF", providers=[WITH_SESSIONS], mode="exhaustive",
                         strict_coverage=False)
def test_with_sessions(crashpoints):
    crashpoints.run(worker=send, messages=[TICKET])


@pytest.mark.crashpoints(points="BDF", providers=[WITH_SESSIONS], mode="exhaustive",
                         strict_coverage=False, faults="-forget_session")
def test_sessions_left_out(crashpoints):
    crashpoints.run(worker=send, messages=[TICKET])
'''


def _texts(test: dict[str, object]) -> list[str]:
    return [str(run["schedule_text"]) for run in test["schedules"]]  # type: ignore[attr-defined]


def test_a_forgotten_session_is_tried_only_where_a_server_keeps_sessions(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_tools=AGENT)
    result, tests = run_reported(pytester)
    result.assert_outcomes(passed=4)
    stateless, sessions, left_out = (
        tests[name] for name in ("test_stateless", "test_with_sessions", "test_sessions_left_out")
    )
    forgotten = [t for t in _texts(sessions) if "session forgotten" in t]
    assert forgotten, _texts(sessions)  # the control: a server with sessions forgets one
    for test in (stateless, left_out):
        texts = _texts(test)
        assert not [t for t in texts if "session forgotten" in t], texts
        assert [t for t in texts if "twice (the same request sent again)" in t], texts
        assert [t for t in texts if "refused" in t or "500" in t], texts
    # Left out by the marker: every other schedule of the server with sessions is still run.
    assert set(_texts(left_out)) == set(_texts(sessions)) - set(forgotten)
    assert "session lost" not in stateless["coverage"]
    assert stateless["not_applicable"] == [
        "lookup failures (F): no provider of this test answers lookups",
        "a session the server forgot (session lost): tools is stateless (no Mcp-Session-Id: "
        "every request stands alone), so there is no session to forget",
    ]
    assert not any("session" in line for line in sessions["not_applicable"])
    # Chosen by name, the fault is still not applicable: never demanded by coverage.
    chosen = tests["test_stateless_chosen"]
    assert chosen["declared"] == ["duplicated request"] and chosen["unreached"] == []
    assert "no session to forget" in chosen["not_applicable"][-1]
    result.stdout.fnmatch_lines(
        ["NOT APPLICABLE in test_tools.py::test_stateless *: *a session the server forgot*"]
    )
