"""What a ledger holds, as the harness and operators read it: attempts, events, queue rows.

Every ledger (the reference SQLite one, or a user's own read through a view) is read as these.
"""

from __future__ import annotations

import dataclasses

from .args import JSONValue
from .authority import Authority
from .states import FINAL_STATES, IN_FLIGHT_STATES, State

__all__ = ["Attempt", "Event", "QueueEntry"]


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One attempt at one logical side effect, as the ledger holds it."""

    attempt_id: str
    task_id: str
    tool_name: str
    args_hash: str
    args: dict[str, JSONValue]
    idempotency_key: str
    state: State
    provider_request_id: str | None
    result_ref: str | None
    authority: Authority
    owner: str | None
    lease_expires_at: float | None
    next_attempt_at: float | None
    attempt_count: int
    parent_attempt_id: str | None
    created_at: float
    updated_at: float
    #: When the request last left (the latest move to DISPATCHED), if ever.
    dispatched_at: float | None = None

    @property
    def tenant_id(self) -> str:
        return self.authority.tenant_id

    @property
    def in_flight(self) -> bool:
        return self.state in IN_FLIGHT_STATES

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


@dataclasses.dataclass(frozen=True)
class Event:
    """One transition in the append-only event log."""

    event_id: int
    attempt_id: str
    from_state: State | None
    to_state: State
    at: float
    actor: str
    reason: str


@dataclasses.dataclass(frozen=True)
class QueueEntry:
    """A row of the operator's queue: work that still needs someone (invariants 3 and 5)."""

    attempt_id: str
    task_id: str
    tool_name: str
    state: State
    owner: str | None
    lease_expires_at: float | None
    age: float
    next_attempt_at: float | None
    args_hash: str
    provider_request_id: str | None
