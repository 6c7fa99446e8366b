"""The reference worker and recovery: the ledger, the safe order and the reference adapters.

A message for the reference worker names its task and the tool calls to make::

    {"task_id": "t-1",
     "calls": [{"tool": "send_email", "key": "invoice:tenant-7:inv-7:send",
                "args": {"to": "billing@example.com", "subject": "...", "body": "..."}}]}

Each call goes through :func:`guarded_call` under the task's current authority; recovery is
:func:`recover` with the reference adapters. The ``_async`` twins are the same agent as
``async def`` functions, for asyncio code. Scenarios use them as they are, and the
differential check compares a user's worker against them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..._agent.toolcall import guarded_call
from ..._ledger.authority import Authority
from ..._ledger.records import Attempt
from ..._ledger.states import State
from ...errors import CrashpointsError
from .context import Context

__all__ = [
    "reference_recovery",
    "reference_recovery_async",
    "reference_worker",
    "reference_worker_async",
]


def reference_worker(message: Any, ctx: Context) -> list[str]:
    """Handle one message: every tool call in the safe order. Returns the attempts' states.

    The task's authority is asked before each call and again before each request leaves: a
    call the authority no longer allows (revoked, narrowed, moved, another policy) is not
    made, and is recorded in MANUAL_REVIEW with the reason, so that no work is dropped
    without a trace and a person can decide.
    """
    task_id = str(message["task_id"])
    started = ctx.authority(task_id)
    adapters = ctx.adapters()
    ended: list[Attempt] = []
    for call in message["calls"]:
        authority = ctx.authority(task_id)
        if authority is None or authority != started:
            ended.append(_refuse(ctx, task_id, call, adapters[call["tool"]], started))
            continue
        ended.append(
            guarded_call(
                ctx.ledger,
                adapters[call["tool"]],
                task_id=task_id,
                args=call["args"],
                idempotency_key=call["key"],
                authority=authority,
                actor=ctx.worker_id,
                current_authority=lambda: ctx.authority(task_id),
            )
        )
    return [attempt.state.value for attempt in ended]


def _refuse(
    ctx: Context, task_id: str, call: Any, adapter: Any, started: Authority | None
) -> Attempt:
    """Record a call the task's authority no longer allows, in MANUAL_REVIEW: never sent."""
    authority = started or ctx.authority_at(task_id, 0.0)
    if authority is None:
        raise CrashpointsError(
            f"task {task_id!r} never held an authority: grant one before delivering its messages."
        )
    now = ctx.authority(task_id)
    reason = (
        "the task's authority was revoked: not sent"
        if now is None
        else "the task's authority changed during the message: not sent"
    )
    attempt, _ = ctx.ledger.record_intent(
        task_id=task_id,
        tool_name=adapter.tool_name,
        args=call["args"],
        idempotency_key=call["key"],
        authority=authority,
        actor=ctx.worker_id,
        state=State.MANUAL_REVIEW,
        reason=reason,
    )
    return attempt


def reference_recovery(ctx: Context) -> int:
    """Run the reference recovery once; return how many attempts it acted on."""
    return len(ctx.recover())


async def reference_worker_async(message: Any, ctx: Context) -> list[str]:
    """The async twin of :func:`reference_worker`, for agents written with asyncio: the same
    calls in the same safe order, each run in a worker thread (``asyncio.to_thread``) so the
    event loop stays free while the ledger commits and the request is on the wire. A kill
    lands wherever the process is: in the thread, while the coroutine awaits it."""
    return await asyncio.to_thread(reference_worker, message, ctx)


async def reference_recovery_async(ctx: Context) -> int:
    """The async twin of :func:`reference_recovery` (the reference recovery in a thread)."""
    return await asyncio.to_thread(reference_recovery, ctx)
