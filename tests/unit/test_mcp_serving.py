"""``mcp_server_worker`` serves the user's server as its owner runs it, on either major of the
``mcp`` SDK: stateful or stateless, event streams or JSON answers (mcp 2: the worker's
``stateless_http=``/``json_response=``; mcp 1: FastMCP's own settings), and mcp 1's
low-level ``Server``, which has no HTTP app of its own. A missing or too old SDK is one
``DependencyError``. These tests run in the main venv (mcp 2) and in ``make test-mcp1``."""

from __future__ import annotations

import asyncio
import importlib.metadata
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp SDK is an agents extra: pip install -e .[agents]")

from pytest_crashpoints._agent import mcp_worker
from pytest_crashpoints.errors import DependencyError, HarnessUsageError
from pytest_crashpoints.mcp import mcp_annotations, mcp_server_worker

MAJOR = int(importlib.metadata.version("mcp").split(".")[0])
ADD = {"tool": "add", "arguments": {"a": 1, "b": 2}}


def server(*, stateless: bool = False, json_response: bool = False) -> Any:
    """A server with one tool, ``add``, built as each major builds it (mcp 1's FastMCP holds
    its HTTP options; mcp 2's MCPServer leaves them to the app)."""
    if MAJOR >= 2:
        from mcp.server.mcpserver import MCPServer

        built: Any = MCPServer("adder")
    else:
        from mcp.server.fastmcp import FastMCP

        built = FastMCP("adder", stateless_http=stateless, json_response=json_response)

    @built.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    return built


def run(worker: Any, message: Any) -> Any:
    return asyncio.run(asyncio.wait_for(worker(message, None), 60))


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, str, str | None]]:
    """What each answer of the served app was: (request id, content type, session id)."""
    seen: list[tuple[object, str, str | None]] = []
    answer = mcp_worker._answer

    def spy(response: Any, rpc_id: object) -> dict[str, Any]:
        kind = response.headers.get("content-type", "").split(";")[0]
        seen.append((rpc_id, kind, response.headers.get("mcp-session-id")))
        return answer(response, rpc_id)

    monkeypatch.setattr(mcp_worker, "_answer", spy)
    return seen


@pytest.mark.parametrize(
    ("stateless", "json_response"), list(itertools.product([False, True], [False, True]))
)
def test_the_server_is_served_stateless_or_not_with_json_or_event_streams(
    answers: list[tuple[object, str, str | None]], stateless: bool, json_response: bool
) -> None:
    options = {"stateless_http": stateless, "json_response": json_response} if MAJOR >= 2 else {}
    worker = mcp_server_worker(
        lambda m, c: server(stateless=stateless, json_response=json_response),
        transport="http", **options,
    )
    assert run(worker, ADD) == {"result": 3}
    kind = "application/json" if json_response else "text/event-stream"
    assert [(rpc_id, shown) for rpc_id, shown, _ in answers] == [
        ("crashpoints-initialize", kind), (1, kind)
    ]
    sessions = {session for _, _, session in answers}
    assert (sessions == {None}) == stateless, answers


@pytest.mark.skipif(MAJOR >= 2, reason="mcp 1's FastMCP keeps its HTTP options in its settings")
def test_an_option_that_contradicts_fastmcps_own_settings_is_refused() -> None:
    worker = mcp_server_worker(lambda m, c: server(stateless=False), transport="http",
                               stateless_http=True)
    with pytest.raises(HarnessUsageError, match=r"contradicts the FastMCP server it serves, "
                       r"built with stateless_http=False.*FastMCP\(\.\.\., stateless_http=True\)"):
        run(worker, ADD)
    same = mcp_server_worker(lambda m, c: server(stateless=True), transport="http",
                             stateless_http=True)
    assert run(same, ADD) == {"result": 3}


@pytest.mark.skipif(MAJOR >= 2, reason="mcp 1's FastMCP keeps its endpoint's path in its settings")
def test_fastmcps_own_endpoint_path_is_where_the_call_goes() -> None:
    from mcp.server.fastmcp import FastMCP

    built = FastMCP("adder", streamable_http_path="/api/mcp")

    @built.tool()
    def add(a: int, b: int) -> int:
        return a + b

    assert run(mcp_server_worker(lambda m, c: built, transport="http"), ADD) == {"result": 3}


def test_in_process_the_tool_is_called_too() -> None:
    assert run(mcp_server_worker(lambda m, c: server()), ADD) == {"result": 3}


def test_the_annotations_of_the_server_are_read_on_either_major() -> None:
    checks = mcp_annotations(server(), [ADD])
    assert [check.__name__ for check in checks] == ["mcp_read_only_hint", "mcp_idempotent_hint"]
    with pytest.raises(Exception, match="does not list"):
        mcp_annotations(server(), [{"tool": "subtract"}])


def low_level(seen: Path) -> Any:
    """A low-level ``Server`` with one tool, ``note``, as each major writes one."""
    from mcp import types

    if MAJOR >= 2:
        from mcp.server import Server

        tool = types.Tool(name="note", input_schema={"type": "object"},
                          annotations=types.ToolAnnotations(idempotent_hint=True))

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=[tool])

        async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
            with seen.open("a") as out:
                out.write(json.dumps(params.arguments) + "\n")
            return types.CallToolResult(content=[types.TextContent(type="text", text="noted")])

        return Server("notes", on_list_tools=list_tools, on_call_tool=call_tool)
    from mcp.server.lowlevel import Server as LowLevel

    old: Any = LowLevel("notes")

    @old.list_tools()
    async def listed() -> list[Any]:
        return [types.Tool(name="note", inputSchema={"type": "object"},
                           annotations=types.ToolAnnotations(idempotentHint=True))]

    @old.call_tool()
    async def called(name: str, arguments: dict[str, Any]) -> list[Any]:
        with seen.open("a") as out:
            out.write(json.dumps(arguments) + "\n")
        return [types.TextContent(type="text", text="noted")]

    return old


@pytest.mark.parametrize("transport", ["memory", "http"])
@pytest.mark.parametrize("stateless", [False, True])
def test_a_low_level_server_is_served_on_either_major(
    tmp_path: Path, answers: list[tuple[object, str, str | None]], transport: str,
    stateless: bool,
) -> None:
    seen = tmp_path / "seen.jsonl"
    options = {"stateless_http": stateless} if transport == "http" else {}
    worker = mcp_server_worker(lambda m, c: low_level(seen), transport=transport,
                               **options)
    assert run(worker, {"tool": "note", "arguments": {"text": "hi"}}) == "noted"
    assert seen.read_text().splitlines() == ['{"text": "hi"}']
    if transport == "http":
        assert ({session for _, _, session in answers} == {None}) == stateless
    claims = mcp_annotations(low_level(seen), [{"tool": "note"}])
    assert len(claims) == 2


def test_an_object_that_is_no_mcp_server_is_named() -> None:
    worker = mcp_server_worker(lambda m, c: object(), transport="http")
    with pytest.raises(HarnessUsageError, match="is not an MCP server of the mcp SDK"):
        run(worker, ADD)


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda: mcp_server_worker(lambda m, c: None, stateless_http=True),
         "the 'memory' transport has no HTTP: pass transport='http'"),
        (lambda: mcp_server_worker(lambda m, c: None, transport="http", json_response="yes"),
         "json_response='yes'\\): give True, False or None"),
    ],
)
def test_bad_http_options_say_what_to_do(make: Any, said: str) -> None:
    with pytest.raises(HarnessUsageError, match=said):
        make()


@pytest.mark.parametrize(
    ("installed", "said"),
    [
        (None, "mcp_server_worker needs the mcp SDK, which is not installed: pip install "
               "'mcp>=1.8'"),
        ("1.7.1", "mcp_server_worker needs mcp 1.8 or later \\(streamable HTTP\\); mcp 1.7.1 "
                  "is installed: pip install 'mcp>=1.8'"),
    ],
)
def test_a_missing_or_too_old_sdk_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, installed: str | None, said: str
) -> None:
    def version(name: str) -> str:
        if installed is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed

    monkeypatch.setattr(importlib.metadata, "version", version)
    with pytest.raises(DependencyError, match=said) as raised:
        mcp_server_worker(lambda m, c: None)
    assert isinstance(raised.value, ImportError) and "\n" not in str(raised.value)
    with pytest.raises(DependencyError, match=said.replace("mcp_server_worker", "mcp_annotations")):
        mcp_annotations(server(), [ADD])
