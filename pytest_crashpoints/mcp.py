"""MCP: your own MCP server as the worker, and its tools' annotations as invariants.

- :func:`mcp_server_worker`: a worker that calls one tool of your MCP server per message, in
  process or on the wire to its streamable HTTP app; it raises :class:`McpCallError` when
  the call fails, so the message comes back;
- :func:`mcp_annotations`: ``readOnlyHint`` and ``idempotentHint`` checked as invariants of
  the test's own (also importable from ``pytest_crashpoints``).

Nothing here imports the ``mcp`` SDK until a worker runs or a server is read.
"""

from __future__ import annotations

from ._agent.annotations import mcp_annotations
from ._agent.mcp_worker import McpCallError, mcp_server_worker
from ._exports import show_public_home

__all__ = ["McpCallError", "mcp_annotations", "mcp_server_worker"]

show_public_home(__name__, __all__)
