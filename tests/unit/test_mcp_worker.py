"""``mcp_server_worker``: one ``tools/call`` per message into the user's own MCP server, in
process or on the wire to its streamable HTTP app; and a low-level ``Server``'s annotations."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp SDK is an agents extra: pip install -e .[agents]")
# mcp 2's API (MCPServer, a low-level Server built from handlers); mcp 1's in
# test_mcp_serving.py.
pytest.importorskip("mcp.server.mcpserver", reason="mcp 2's MCPServer; this is mcp 1")

from mcp import types
from mcp.server import Server
from mcp.server.mcpserver import MCPServer

from pytest_crashpoints.errors import HarnessUsageError
from pytest_crashpoints.mcp import McpCallError, mcp_annotations, mcp_server_worker

TOOL = types.Tool(
    name="note", input_schema={"type": "object"},
    annotations=types.ToolAnnotations(idempotent_hint=True),
)


def low_level(seen: Path) -> Server[Any]:
    """A low-level server whose ``note`` tool writes down the JSON-RPC id of each call."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[TOOL])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name != "note":
            return types.CallToolResult(
                content=[types.TextContent(type="text", text="no such tool")], is_error=True
            )
        with seen.open("a") as out:
            out.write(json.dumps({"id": ctx.request_id, "arguments": params.arguments}) + "\n")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="noted")],
            structured_content={"noted": (params.arguments or {}).get("text")},
        )

    return Server("notes", on_list_tools=list_tools, on_call_tool=call_tool)


def run(worker: Any, message: Any) -> Any:
    return asyncio.run(asyncio.wait_for(worker(message, None), 60))


@pytest.mark.parametrize("transport", ["memory", "http"])
def test_a_low_level_server_is_called_and_answers_its_structured_result(
    tmp_path: Path, transport: str
) -> None:
    seen = tmp_path / "seen.jsonl"
    worker = mcp_server_worker(lambda message, ctx: low_level(seen), transport=transport)
    answer = run(worker, {"tool": "note", "arguments": {"text": "hi"}})
    assert answer == {"noted": "hi"}
    assert [json.loads(line)["arguments"] for line in seen.read_text().splitlines()] == [
        {"text": "hi"}
    ]


def test_over_http_a_message_delivered_again_sends_the_same_request_id(tmp_path: Path) -> None:
    seen = tmp_path / "seen.jsonl"
    worker = mcp_server_worker(lambda message, ctx: low_level(seen), transport="http")
    message = {"tool": "note", "arguments": {"text": "hi"}, "request_id": 7}
    run(worker, message)
    run(worker, message)  # the retry after a kill: a new server, the same request
    run(worker, {"tool": "note", "arguments": {"text": "hi"}})
    ids = [json.loads(line)["id"] for line in seen.read_text().splitlines()]
    assert ids == [7, 7, 1]


@pytest.mark.parametrize("transport", ["memory", "http"])
def test_a_tool_error_fails_the_worker(tmp_path: Path, transport: str) -> None:
    worker = mcp_server_worker(lambda m, c: low_level(tmp_path / "seen"), transport=transport)
    with pytest.raises(McpCallError, match="no such tool"):
        run(worker, {"tool": "missing", "arguments": {}})


def test_an_mcpserver_tool_that_raises_fails_the_worker_over_http() -> None:
    server = MCPServer("failing")

    @server.tool()
    def explode() -> str:
        raise RuntimeError("the disk is full")

    worker = mcp_server_worker(lambda m, c: server, transport="http")
    with pytest.raises(McpCallError, match="explode"):  # the SDK hides the text
        run(worker, {"tool": "explode"})


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: mcp_server_worker(lambda m, c: None, transport="stdio"),  # type: ignore[arg-type]
         "use 'memory'"),
        (lambda: mcp_server_worker("server"), "build must be a function"),  # type: ignore[arg-type]
    ],
)
def test_bad_arguments_say_what_to_do(make: Any, message: str) -> None:
    with pytest.raises(HarnessUsageError, match=message):
        make()


@pytest.mark.parametrize(
    ("message", "said"),
    [({"arguments": {}}, "names its tool in 'tool'"),
     ({"tool": "note", "arguments": ["x"]}, "must be a dict")],
)
def test_a_message_without_a_call_is_a_usage_error(message: Any, said: str) -> None:
    worker = mcp_server_worker(lambda m, c: pytest.fail("built for a bad message"))
    with pytest.raises(HarnessUsageError, match=said):
        run(worker, message)


def test_mcp_annotations_reads_a_low_level_server_through_the_client(tmp_path: Path) -> None:
    checks = mcp_annotations(low_level(tmp_path / "seen"), [{"tool": "note"}])
    assert [c.__name__ for c in checks] == ["mcp_read_only_hint", "mcp_idempotent_hint"]
    with pytest.raises(Exception, match="does not list"):
        mcp_annotations(low_level(tmp_path / "seen"), [{"tool": "other"}])
