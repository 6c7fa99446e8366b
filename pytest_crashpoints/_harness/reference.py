"""The reference worker and recovery: the ledger, the safe order and the reference adapters.

A message for the reference worker names its task and the tool calls to make::

    {"task_id": "t-1",
     "calls": [{"tool": "send_email", "key": "invoice:tenant-7:inv-7:send",
                "args": {"to": "billing@example.com", "subject": "...", "body": "..."}}]}

Each call goes through :func:`guarded_call` under the task's current authority; recovery is
:func:`recover` with the reference adapters. Scenarios use them as they are, and the
differential check compares a user's worker against them.
"""

from __future__ import annotations

from typing import Any

from .._agent.toolcall import guarded_call
from .._ledger.records import Attempt
from ..errors import CrashpointsError
from .context import Context

__all__ = ["reference_recovery", "reference_worker"]


def reference_worker(message: Any, ctx: Context) -> list[str]:
    """Handle one message: every tool call in the safe order. Returns the attempts' states."""
    task_id = str(message["task_id"])
    authority = ctx.authority(task_id)
    if authority is None:
        raise CrashpointsError(
            f"task {task_id!r} has no authority any more (revoked); the message cannot be "
            "handled and stays unacknowledged."
        )
    adapters = ctx.adapters()
    ended: list[Attempt] = []
    for call in message["calls"]:
        ended.append(
            guarded_call(
                ctx.ledger,
                adapters[call["tool"]],
                task_id=task_id,
                args=call["args"],
                idempotency_key=call["key"],
                authority=authority,
                actor=ctx.worker_id,
            )
        )
    return [attempt.state.value for attempt in ended]


def reference_recovery(ctx: Context) -> int:
    """Run the reference recovery once; return how many attempts it acted on."""
    return len(ctx.recover())
