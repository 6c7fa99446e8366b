"""An MCP tool's annotations are claims about what it does: checked as invariants.

``readOnlyHint: true`` says a call changes nothing; ``idempotentHint: true`` says a second call
with the same arguments changes nothing more. A client trusts both (it retries an idempotent
tool after a lost result). :func:`mcp_annotations` turns the claims of the tools a test calls
into two invariants of the test's own (``crashpoints.run(..., invariants=...)``), checked on
the providers' journals like every invariant:

- ``mcp_read_only_hint``: a call of a tool that says ``readOnlyHint: true`` made no effect;
- ``mcp_idempotent_hint``: the calls of a tool that says ``idempotentHint: true`` with the
  same arguments (a message delivered again, a client's retry) made no effect the fault-free
  run did not make once.

A tool that declares no annotations claims nothing, and neither check holds it to anything.
An ``MCPServer`` (mcp 2) or FastMCP (mcp 1) is read through its own ``list_tools()``, a
low-level ``Server`` through the SDK's in-process client (``mcp_sdk``); an object of your own
with a ``list_tools()`` is read without importing ``mcp``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ..errors import CrashpointsError
from . import mcp_sdk

__all__ = ["mcp_annotations"]

Check = Callable[[Any], Iterator[Any]]


def _hint(annotations: object, camel: str, snake: str) -> bool:
    if annotations is None:
        return False
    if isinstance(annotations, Mapping):
        return bool(annotations.get(camel, annotations.get(snake, False)))
    return bool(getattr(annotations, snake, None) or getattr(annotations, camel, None))


def _awaited(found: Any) -> Any:
    """``found``, awaited on an event loop of its own when it is awaitable."""
    if not inspect.isawaitable(found):
        return found
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(found)  # type: ignore[arg-type]
    if inspect.iscoroutine(found):
        found.close()
    raise CrashpointsError(
        "mcp_annotations(server, ...) was called inside a running event loop; call it from "
        "the test function (not a coroutine), or pass the annotations as a dict "
        "{tool name: annotations}"
    )


def _claims(tools: object) -> dict[str, tuple[bool, bool]]:
    """Each tool's (readOnlyHint, idempotentHint), from a server or a mapping."""
    if isinstance(tools, Mapping):
        listed: list[tuple[str, object]] = [(str(k), v) for k, v in tools.items()]
    elif type(tools).__module__.startswith("mcp."):
        # The SDK's servers, 1.x or 2.x (a low-level Server through its in-process client).
        listed = _awaited(mcp_sdk.listed_tools(tools, "mcp_annotations"))
    elif callable(getattr(tools, "list_tools", None)):
        found = _awaited(tools.list_tools())  # type: ignore[attr-defined]
        tools_of = getattr(found, "tools", found)
        listed = [(str(t.name), getattr(t, "annotations", None)) for t in tools_of]
    else:
        raise CrashpointsError(
            f"mcp_annotations() takes an MCP server (an MCPServer, a FastMCP, a low-level "
            f"Server, or anything with list_tools()) or a dict {{tool name: annotations}}, "
            f"not {tools!r}"
        )
    return {
        name: (
            _hint(annotations, "readOnlyHint", "read_only_hint"),
            _hint(annotations, "idempotentHint", "idempotent_hint"),
        )
        for name, annotations in listed
    }


def mcp_annotations(
    tools: object, messages: Sequence[Mapping[str, Any]], *, tool_key: str = "tool"
) -> list[Check]:
    """The annotations of the tools ``messages`` call, as two invariants of your own.

    ``tools`` is your MCP server (an ``MCPServer``, a FastMCP of mcp 1, a low-level
    ``Server``, or anything whose ``list_tools()`` lists the tools) or a dict
    ``{tool name: annotations}``;
    ``messages[i][tool_key]`` names the tool message ``i`` calls. Raises
    :class:`~pytest_crashpoints.CrashpointsError` for a message without a tool, or naming one
    the server does not have.
    """
    claims = _claims(tools)
    called: dict[int, str] = {}
    for index, message in enumerate(messages):
        tool = message.get(tool_key) if isinstance(message, Mapping) else None
        if not isinstance(tool, str):
            raise CrashpointsError(
                f"message {index} has no {tool_key!r} naming the tool it calls: "
                f"{message!r}; give each message one (or pass tool_key=...)"
            )
        if tool not in claims:
            raise CrashpointsError(
                f"message {index} calls {tool!r}, which the server does not list (its tools: "
                f"{', '.join(sorted(claims)) or 'none'})"
            )
        called[index] = tool

    def mcp_read_only_hint(evidence: Any) -> Iterator[str]:
        """A tool that says readOnlyHint: true changes nothing"""
        for effect in evidence.effects:
            tool = called.get(effect.message) if effect.message is not None else None
            if tool is not None and claims[tool][0]:
                yield (
                    f"{tool} says readOnlyHint: true, but message {effect.message}'s call made "
                    f"{effect.kind} at {effect.provider} ({effect.request_id} by "
                    f"{effect.sender})."
                )

    def mcp_idempotent_hint(evidence: Any) -> Iterator[str]:
        """A tool that says idempotentHint: true, called again, changes nothing more"""
        expected = Counter(
            (e.message, e.provider, e.operation, e.payload_hash)
            for e in (evidence.expected_effects or ())
        )
        made: dict[tuple[Any, ...], list[Any]] = {}
        for effect in evidence.effects:
            key = (effect.message, effect.provider, effect.kind, effect.payload_hash)
            made.setdefault(key, []).append(effect)
        for key, effects in made.items():
            tool = called.get(key[0]) if key[0] is not None else None
            if tool is None or not claims[tool][1] or claims[tool][0]:
                continue
            if len(effects) > max(expected.get(key, 0), 1):
                shown = ", ".join(f"{e.request_id} by {e.sender}" for e in effects)
                yield (
                    f"{tool} says idempotentHint: true, but message {key[0]}'s calls with the "
                    f"same arguments made {key[2]} at {key[1]} {len(effects)} times "
                    f"({shown}); the fault-free run made it {expected.get(key, 0)} time(s)."
                )

    return [mcp_read_only_hint, mcp_idempotent_hint]
