"""A worker for multi-step tasks: it records the whole plan before it acts.

Every tool call of a message gets its intent (and idempotency key) in the ledger before the
first request leaves. A crash in the middle of the task then leaves the remaining steps in
the ledger as INTENT_RECORDED, for recovery to dispatch, instead of nowhere: the work is never
lost, even if the message is not delivered again. Each step then runs through the reference
:func:`guarded_call` (a planned intent is found by its key, claimed and dispatched), which
asks the task's authority again before each request leaves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_crashpoints import Context, CrashpointsError, guarded_call
from pytest_crashpoints.ledger import normalize_args

__all__ = ["planned_worker"]

#: How long the worker holds its planned steps before recovery may take them over.
LEASE_SECONDS = 60.0


def planned_worker(message: Mapping[str, Any], ctx: Context) -> list[str]:
    """Record every call's intent, then make the calls in order; return their states."""
    task_id = str(message["task_id"])
    authority = ctx.authority(task_id)
    if authority is None:
        raise CrashpointsError(f"task {task_id!r} was revoked; the message stays unacknowledged")
    adapters = ctx.adapters()
    for call in message["calls"]:
        ctx.ledger.record_intent(
            task_id=task_id,
            tool_name=adapters[call["tool"]].tool_name,
            args=normalize_args(call["args"]),
            idempotency_key=call["key"],
            authority=authority,
            actor=ctx.worker_id,
            lease_seconds=LEASE_SECONDS,
        )
    states = []
    for call in message["calls"]:
        attempt = guarded_call(
            ctx.ledger,
            adapters[call["tool"]],
            task_id=task_id,
            args=call["args"],
            idempotency_key=call["key"],
            authority=authority,
            actor=ctx.worker_id,
            lease_seconds=LEASE_SECONDS,
            # Asked again before each request leaves: a step the task may no longer take
            # (revoked, narrowed, moved) goes to MANUAL_REVIEW, not out under old credentials.
            current_authority=lambda: ctx.authority(task_id),
        )
        states.append(attempt.state.value)
    return states
