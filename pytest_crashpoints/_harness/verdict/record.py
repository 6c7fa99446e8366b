"""The record of a failing case as data: what the JSON report carries and the HTML report draws.

The text timeline is one rendering of a case; this is the structure under it, so a reader
never parses text: the merged timeline (harness entries, ledger transitions, provider
requests, in the order :meth:`History.merge` gives them), the ledger's rows as the case left
them, and each violation with the attempts and journal entries its check named. Versioned
(:data:`RECORD_VERSION`): later versions add fields and never change the meaning of one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..._ledger.authority import format_scope
from ..._ledger.records import Attempt
from .history import TimelineRow
from .invariants import Violation

__all__ = ["RECORD_VERSION", "case_record"]

RECORD_VERSION = 1


def case_record(
    rows: Sequence[TimelineRow],
    attempts: Iterable[Attempt],
    violations: Iterable[Violation],
    *,
    epoch: float | None = None,
) -> dict[str, Any]:
    """The case as JSON-ready data: ``timeline``, ``attempts`` and ``violations``; with
    ``epoch``, the wall time (Unix seconds) of harness time 0 in a case that starts from an
    incident (its times are shown as wall times)."""
    record: dict[str, Any] = {
        "version": RECORD_VERSION,
        "timeline": [_row(row) for row in rows],
        "attempts": [_attempt(attempt) for attempt in attempts],
        "violations": [_violation(violation) for violation in violations],
    }
    if epoch is not None:
        record["epoch"] = epoch
    return record


def _row(row: TimelineRow) -> dict[str, Any]:
    data: dict[str, Any] = {"source": row.source, "at": row.at, "text": row.text.strip()}
    if row.entry is not None:
        entry = row.entry
        data.update(step=entry.step, kind=entry.kind, data=dict(entry.data))
        data["text"] = entry.text
    elif row.event is not None:
        event = row.event
        data.update(
            attempt_id=event.attempt_id,
            from_state=event.from_state.value if event.from_state else None,
            to_state=event.to_state.value,
            actor=event.actor,
            reason=event.reason,
        )
    else:
        request = row.request
        assert request is not None
        data.update(
            provider=request.provider,
            request_id=request.request_id,
            kind=request.kind,
            status=request.status,
            effect_applied=request.effect_applied,
            idempotent=request.idempotent,
            operation_key=request.operation_key,
            payload_hash=request.payload_hash,
            object_id=request.object_id,
            process=request.process,
            message=request.message,
            task_id=request.task_id,
            tenant_id=request.tenant_id,
            scope=format_scope(request.scope),
            attempt_id=row.attempt_id,
        )
        if request.note is not None:  # a model's turn: what it answered
            data["note"] = request.note
        if request.reading is not None:  # an incident's object: whose, on what evidence
            data["reading"] = request.reading
    return data


def _attempt(attempt: Attempt) -> dict[str, Any]:
    return {
        "attempt_id": attempt.attempt_id,
        "task_id": attempt.task_id,
        "tool_name": attempt.tool_name,
        "idempotency_key": attempt.idempotency_key,
        "state": attempt.state.value,
        "args_hash": attempt.args_hash,
        "args": attempt.args,
        "provider_request_id": attempt.provider_request_id,
        "result_ref": attempt.result_ref,
        "tenant_id": attempt.authority.tenant_id,
        "scope": attempt.authority.scope_text,
        "policy_version": attempt.authority.policy_version,
        "owner": attempt.owner,
        "parent_attempt_id": attempt.parent_attempt_id,
        "attempt_count": attempt.attempt_count,
    }


def _violation(violation: Violation) -> dict[str, Any]:
    return {
        "invariant": violation.invariant,
        "title": violation.says,
        "message": violation.message,
        "attempts": list(violation.attempt_ids),
        "requests": [
            {"provider": provider, "request_id": request_id}
            for provider, request_id in violation.requests
        ],
        "evidence": list(violation.evidence),
    }
