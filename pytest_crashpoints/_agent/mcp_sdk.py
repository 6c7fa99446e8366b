"""The ``mcp`` SDK as installed, 1.x or 2.x, behind one face for the MCP helpers.

mcp 2 renamed FastMCP (``mcp.server.fastmcp``) to ``MCPServer`` (``mcp.server.mcpserver``),
added an in-process ``mcp.Client(server)``, and moved the streamable HTTP options
(``stateless_http``, ``json_response``, the path) out of the server into
``streamable_http_app(...)`` and ``run("streamable-http", ...)``. mcp 1 keeps those options in
FastMCP's ``settings`` (given to its constructor), connects in process through
``mcp.shared.memory``, and its low-level ``Server`` has no HTTP app of its own: one is built
the way the SDK's examples build it, on a ``StreamableHTTPSessionManager``.

Every import of ``mcp`` happens inside a function, and a missing or too old SDK is one
:class:`~pytest_crashpoints.errors.DependencyError` naming the version installed and what to
install, never a bare ``ImportError``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

from ..errors import DependencyError, HarnessUsageError

__all__ = ["HttpServing", "in_process", "installed", "listed_tools", "serving_app", "tool_result"]

#: The oldest ``mcp`` the helpers support: streamable HTTP, ``stateless_http`` and
#: ``json_response`` came in 1.8.
OLDEST = (1, 8)
_INSTALL = "pip install 'mcp>=1.8' (1.x or 2.x)"


def installed(feature: str) -> tuple[int, ...]:
    """The installed ``mcp`` version (major, minor); ``DependencyError`` (naming ``feature``) when
    it is missing or older than :data:`OLDEST`."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        text = version("mcp")
    except PackageNotFoundError:
        raise DependencyError(
            f"{feature} needs the mcp SDK, which is not installed: {_INSTALL}"
        ) from None
    found = re.match(r"(\d+)\.(\d+)", text)
    numbers = (int(found[1]), int(found[2])) if found else (0, 0)
    if numbers < OLDEST:
        raise DependencyError(
            f"{feature} needs mcp 1.8 or later (streamable HTTP); mcp {text} is installed: "
            f"{_INSTALL}"
        )
    return numbers


def _module(name: str, feature: str) -> Any:
    """``importlib.import_module(name)``, a missing module said as the SDK's version."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        version = ".".join(map(str, installed(feature)))
        raise DependencyError(
            f"{feature} needs {name}, which mcp {version} does not have ({error}): {_INSTALL}"
        ) from None


def _is_low_level(server: object) -> bool:
    lowlevel = importlib.import_module("mcp.server.lowlevel")
    return isinstance(server, lowlevel.Server)


@contextlib.asynccontextmanager
async def in_process(server: object, feature: str) -> AsyncIterator[Any]:
    """An initialized client session of ``server`` in this process (no HTTP): mcp 2's
    ``Client(server)``, mcp 1's ``create_connected_server_and_client_session``. Both have
    ``call_tool(name, arguments)`` and ``list_tools()``."""
    major = installed(feature)[0]
    if major >= 2:
        client_class = _module("mcp", feature).Client
        async with client_class(server) as client:
            yield client
        return
    memory = _module("mcp.shared.memory", feature)
    # Before 1.18 it takes only a low-level Server: FastMCP's is its ``_mcp_server``.
    low_level = server if _is_low_level(server) else getattr(server, "_mcp_server", server)
    async with memory.create_connected_server_and_client_session(low_level) as session:
        yield session


def tool_result(result: object) -> tuple[bool, Any, Any]:
    """``(is_error, structured content, content)`` of a ``CallToolResult`` of either SDK
    (mcp 1 spells its fields ``isError``, ``structuredContent``)."""
    is_error = getattr(result, "is_error", None)
    if is_error is None:
        is_error = getattr(result, "isError", False)
    structured = getattr(result, "structured_content", None)
    if structured is None:
        structured = getattr(result, "structuredContent", None)
    return bool(is_error), structured, getattr(result, "content", None)


async def listed_tools(server: object, feature: str) -> list[tuple[str, object]]:
    """Each tool of ``server`` with its annotations (``None`` when it declares none): an
    ``MCPServer`` or FastMCP through its own ``list_tools()``, a low-level ``Server`` through
    the SDK's in-process client (mcp 1's low-level ``list_tools`` is a decorator)."""
    installed(feature)
    if _is_low_level(server):
        async with in_process(server, feature) as client:
            found = await client.list_tools()
        tools = found.tools
    else:
        tools = await server.list_tools()  # type: ignore[attr-defined]
    return [(str(tool.name), getattr(tool, "annotations", None)) for tool in tools]


@dataclasses.dataclass(frozen=True)
class HttpServing:
    """How the server answers on the wire: ``stateless`` (no ``Mcp-Session-Id``, every
    request stands alone), ``json_response`` (one JSON body per POST, not an event stream),
    and the ``path`` of its endpoint."""

    stateless: bool
    json_response: bool
    path: str


def serving_app(
    server: object, *, stateless_http: bool | None, json_response: bool | None, feature: str
) -> tuple[Any, HttpServing]:
    """The ASGI app that serves ``server``'s streamable HTTP endpoint as its owner runs it,
    and how it serves. ``None``: as the server is configured (mcp 1's FastMCP settings; the
    SDK's defaults, stateful with an event stream, where the server holds none). Raises
    :class:`HarnessUsageError` for an option that contradicts the server's own settings or a
    server that is no MCP server of the SDK."""
    installed(feature)
    settings = getattr(server, "settings", None)
    maker = getattr(server, "streamable_http_app", None)
    if callable(maker) and "stateless_http" in inspect.signature(maker).parameters:
        # mcp 2 (MCPServer and the low-level Server): the options are the app's.
        serving = HttpServing(bool(stateless_http), bool(json_response), "/mcp")
        app = maker(stateless_http=serving.stateless, json_response=serving.json_response)
        return app, serving
    if callable(maker) and hasattr(settings, "stateless_http"):
        # mcp 1's FastMCP: the options are its settings, fixed when it was built.
        serving = HttpServing(
            _agreed("stateless_http", stateless_http, settings),
            _agreed("json_response", json_response, settings),
            str(getattr(settings, "streamable_http_path", "/mcp")),
        )
        return maker(), serving
    if _is_low_level(server):
        serving = HttpServing(bool(stateless_http), bool(json_response), "/mcp")
        return _low_level_app(server, serving), serving
    raise HarnessUsageError(
        f"{feature}: {server!r} is not an MCP server of the mcp SDK (an MCPServer, a FastMCP "
        "of mcp 1, or a low-level Server); make build() return one"
    )


def _agreed(option: str, given: bool | None, settings: object) -> bool:
    """mcp 1's FastMCP setting ``option``, and ``given`` when it says the same."""
    configured = bool(getattr(settings, option))
    if given is not None and given != configured:
        raise HarnessUsageError(
            f"mcp_server_worker({option}={given!r}) contradicts the FastMCP server it serves, "
            f"built with {option}={configured!r} (mcp 1 keeps it in the server's settings): "
            f"leave {option} out of mcp_server_worker, or build the server with "
            f"FastMCP(..., {option}={given!r})"
        )
    return configured


def _low_level_app(server: object, serving: HttpServing) -> Any:
    """mcp 1's low-level ``Server`` on streamable HTTP, as the SDK's examples serve it: a
    session manager at ``/mcp``, run for the app's lifespan."""
    manager_module = importlib.import_module("mcp.server.streamable_http_manager")
    from starlette.applications import Starlette
    from starlette.routing import Route

    manager = manager_module.StreamableHTTPSessionManager(
        app=server, json_response=serving.json_response, stateless=serving.stateless
    )

    class Endpoint:
        async def __call__(self, scope: Mapping[str, Any], receive: Any, send: Any) -> None:
            await manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(app: object) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return Starlette(routes=[Route(serving.path, endpoint=Endpoint())], lifespan=lifespan)
