"""Your own MCP server as the worker: each message one ``tools/call`` into it.

:func:`mcp_server_worker` turns a function that builds your server for a case (the fake
providers' URLs, a key, a database in the case's directory) into a worker. Each message names
a tool and its arguments; the worker builds the server, calls the tool, and fails when the
call fails (a tool error, a JSON-RPC error), so the harness delivers the message again: the
client calling again with the same arguments, as MCP clients do after a timeout.

Two transports:

- ``"memory"``: the SDK's own in-process client (mcp 2's ``Client(server)``, mcp 1's
  connected memory session), no HTTP;
- ``"http"``: the server's own streamable HTTP app (what ``run("streamable-http")`` serves)
  on a loopback port of the worker's process, under uvicorn, served as its owner runs it:
  stateful or stateless (``stateless_http``), answering with an event stream or one JSON
  body (``json_response``); mcp 1's FastMCP keeps both in its settings, mcp 2 takes them with
  the app. The call goes as a client sends it on the wire: ``initialize``, the
  ``Mcp-Session-Id`` it answers (none from a stateless server), ``notifications/initialized``,
  then ``tools/call`` with the message's JSON-RPC id (``"request_id"``, 1 if absent). A
  message delivered again after a kill sends the same request id to the restarted server, as
  a client retrying its request does; give each delivery its own id in your messages to test
  the other kind of retry.

Nothing here imports ``mcp`` or uvicorn until a worker runs (mcp 1.8 or later, 1.x or 2.x:
``mcp_sdk``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import socket
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Literal

from ..errors import CrashpointsError, HarnessUsageError
from . import mcp_sdk

__all__ = ["McpCallError", "mcp_server_worker"]

Transport = Literal["memory", "http"]
#: The handshake-era protocol version the ``http`` transport asks for.
PROTOCOL_VERSION = "2025-06-18"
_STARTUP_SECONDS = 20.0
_CALL_SECONDS = 60.0
_FEATURE = "mcp_server_worker"


@dataclasses.dataclass(frozen=True)
class _Options:
    """How the ``http`` transport serves the server (``None``: as the server is configured)."""

    stateless_http: bool | None = None
    json_response: bool | None = None


class McpCallError(RuntimeError):
    """A ``tools/call`` into your server failed: the tool answered an error (``isError``), or
    the server a JSON-RPC error. The worker raises it, and the message is delivered again."""


def _call_of(message: object, tool_key: str, arguments_key: str) -> tuple[str, dict[str, Any]]:
    if not isinstance(message, Mapping) or not isinstance(message.get(tool_key), str):
        raise HarnessUsageError(
            f"an MCP server worker's message names its tool in {tool_key!r} and its arguments "
            f"in {arguments_key!r}; got {message!r}"
        )
    arguments = message.get(arguments_key, {})
    if not isinstance(arguments, Mapping):
        raise HarnessUsageError(
            f"message {message!r}: {arguments_key!r} must be a dict of the tool's arguments"
        )
    return str(message[tool_key]), dict(arguments)


def _text(content: object) -> str:
    parts = content if isinstance(content, list) else []
    texts = [
        str(p.get("text") if isinstance(p, Mapping) else getattr(p, "text", p)) for p in parts
    ]
    return " ".join(texts) or repr(content)


async def _call_in_memory(server: Any, tool: str, arguments: dict[str, Any]) -> Any:
    async with mcp_sdk.in_process(server, _FEATURE) as client:
        result = await client.call_tool(tool, arguments)
    is_error, structured, content = mcp_sdk.tool_result(result)
    if is_error:
        raise McpCallError(f"{tool} answered an error: {_text(content)}")
    if structured is not None:
        return structured
    return _text(content)


@contextlib.asynccontextmanager
async def _serving(server: Any, options: _Options) -> AsyncIterator[str]:
    """The server's streamable HTTP app under uvicorn on a loopback port, in a thread of this
    process, served as ``options`` say; yields its endpoint's URL. Stopped (and its thread
    joined) on the way out."""
    import uvicorn

    app, serving = mcp_sdk.serving_app(
        server, stateless_http=options.stateless_http, json_response=options.json_response,
        feature=_FEATURE,
    )
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    served = uvicorn.Server(config)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            served.run(sockets=[listener])
        except BaseException as error:  # shown to the caller below
            failure.append(error)

    thread = threading.Thread(target=run, name="crashpoints-mcp-server", daemon=True)
    thread.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _STARTUP_SECONDS
        while not served.started:
            if not thread.is_alive() or loop.time() > deadline:
                raise CrashpointsError(
                    f"the MCP server's streamable HTTP app did not start on 127.0.0.1:{port}"
                    + (f": {failure[0]!r}" if failure else " (uvicorn stopped or took over "
                       f"{_STARTUP_SECONDS:.0f} s)")
                )
            await asyncio.sleep(0.005)
        yield f"http://127.0.0.1:{port}{serving.path}"
    finally:
        served.should_exit = True
        await asyncio.to_thread(thread.join, _STARTUP_SECONDS)
        listener.close()


def _answer(response: Any, rpc_id: object) -> dict[str, Any]:
    """The JSON-RPC answer to ``rpc_id`` in a response: one JSON body or an event stream."""
    if response.status_code >= 400:
        raise McpCallError(
            f"the MCP server answered HTTP {response.status_code}: {response.text[:300]}"
        )
    kind = response.headers.get("content-type", "")
    messages: list[Any] = []
    if kind.startswith("text/event-stream"):
        data: list[str] = []
        for line in [*response.text.splitlines(), ""]:
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            elif not line and data:
                messages.append(json.loads("\n".join(data)))
                data = []
    else:
        messages.append(response.json())
    for message in messages:
        if isinstance(message, Mapping) and message.get("id") == rpc_id and (
            "result" in message or "error" in message
        ):
            if "error" in message:
                raise McpCallError(f"the MCP server answered a JSON-RPC error: {message['error']}")
            return dict(message["result"])
    raise McpCallError(f"the MCP server's answer holds no response to request {rpc_id!r}")


async def _call_over_http(
    server: Any, tool: str, arguments: dict[str, Any], request_id: object, options: _Options
) -> Any:
    import httpx

    headers = {"Accept": "application/json, text/event-stream"}
    async with _serving(server, options) as url, httpx.AsyncClient(timeout=_CALL_SECONDS) as http:
        initialize = {
            "jsonrpc": "2.0", "id": "crashpoints-initialize", "method": "initialize",
            "params": {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                       "clientInfo": {"name": "crashpoints", "version": "1"}},
        }
        response = await http.post(url, json=initialize, headers=headers)
        version = _answer(response, initialize["id"]).get("protocolVersion", PROTOCOL_VERSION)
        headers["MCP-Protocol-Version"] = str(version)
        if "mcp-session-id" in response.headers:
            headers["Mcp-Session-Id"] = response.headers["mcp-session-id"]
        notified = await http.post(
            url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
        )
        if notified.status_code >= 400:
            raise McpCallError(f"notifications/initialized: HTTP {notified.status_code}")
        call = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                "params": {"name": tool, "arguments": arguments}}
        result = _answer(await http.post(url, json=call, headers=headers), request_id)
        if "Mcp-Session-Id" in headers:  # end the session, as a client closing does
            with contextlib.suppress(httpx.HTTPError):
                await http.delete(url, headers=headers)
    if result.get("isError"):
        raise McpCallError(f"{tool} answered an error: {_text(result.get('content'))}")
    if result.get("structuredContent") is not None:
        return result["structuredContent"]
    return _text(result.get("content"))


def _flag(name: str, value: object) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise HarnessUsageError(f"mcp_server_worker({name}={value!r}): give True, False or None")
    return value


def mcp_server_worker(
    build: Callable[[Any, Any], Any],
    *,
    transport: Transport = "memory",
    stateless_http: bool | None = None,
    json_response: bool | None = None,
    tool_key: str = "tool",
    arguments_key: str = "arguments",
    request_id_key: str = "request_id",
) -> Callable[[Any, Any], Any]:
    """A worker that calls one tool of your MCP server per message.

    ``build(message, ctx)`` returns your server (an ``MCPServer``, once FastMCP, or a
    low-level ``Server``) built for the case: the fake providers' URLs and keys from ``ctx``,
    its database under ``ctx.env.path``. ``message[tool_key]`` names the tool,
    ``message[arguments_key]`` holds its arguments, ``message[request_id_key]`` the JSON-RPC
    id of the ``tools/call`` (``"http"`` only; 1 if absent). ``transport``: ``"memory"`` (the
    SDK's in-process client) or ``"http"`` (the server's streamable HTTP app on loopback).
    With ``"http"``, ``stateless_http=True`` serves it stateless (no session: every request
    stands alone) and ``json_response=True`` answers each POST with one JSON body instead of
    an event stream, as ``run("streamable-http", stateless_http=..., json_response=...)``
    does; ``None`` (the default) serves it as it is configured (mcp 1's FastMCP settings, or
    the SDK's defaults: sessions and event streams). The worker returns the tool's structured
    result (or its text) and raises :class:`McpCallError` when the call fails.

    Raises :class:`~pytest_crashpoints.errors.HarnessUsageError` for a bad transport, a
    ``build`` that is no function, or HTTP options with ``transport="memory"``, and
    :class:`~pytest_crashpoints.errors.DependencyError` when the ``mcp`` SDK is missing or
    older than 1.8.
    """
    if transport not in ("memory", "http"):
        raise HarnessUsageError(
            f"mcp_server_worker(transport={transport!r}): use 'memory' (the SDK's in-process "
            "client) or 'http' (the server's streamable HTTP app on loopback)"
        )
    if not callable(build):
        raise HarnessUsageError(
            f"mcp_server_worker(build): build must be a function (message, ctx) -> your MCP "
            f"server, not {build!r}"
        )
    options = _Options(_flag("stateless_http", stateless_http),
                       _flag("json_response", json_response))
    if transport == "memory" and options != _Options():
        raise HarnessUsageError(
            "mcp_server_worker(stateless_http=..., json_response=...) shape the streamable "
            "HTTP transport; the 'memory' transport has no HTTP: pass transport='http'"
        )
    mcp_sdk.installed(_FEATURE)

    async def mcp_server(message: Any, ctx: Any) -> Any:
        tool, arguments = _call_of(message, tool_key, arguments_key)
        server = build(message, ctx)
        if transport == "memory":
            return await _call_in_memory(server, tool, arguments)
        return await _call_over_http(
            server, tool, arguments, message.get(request_id_key, 1), options
        )

    mcp_server.__qualname__ = mcp_server.__name__ = f"mcp_server_worker({transport})"
    return mcp_server
