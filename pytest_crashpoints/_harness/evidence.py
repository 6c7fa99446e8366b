"""What the invariant checkers look at: one case's evidence, gathered after it ran.

The ground truth is the providers' journals (:class:`ProviderRequest`), not the ledger. The
ledger is read through a :class:`~pytest_crashpoints.LedgerView`, so a user's own ledger
can be checked too.
"""

from __future__ import annotations

import dataclasses

from .._ledger.records import Attempt, Event, QueueEntry
from .authority_store import AuthorityChange

__all__ = [
    "Evidence",
    "ExpectedEffect",
    "Incident",
    "Observation",
    "ProviderRequest",
    "RecoveryRerun",
]


@dataclasses.dataclass(frozen=True)
class ProviderRequest:
    """One request as a provider's journal recorded it.

    ``operation_key`` is the idempotency key (payments) or correlation id the client sent;
    ``args_hash`` the attempt's arguments hash the client declared (metadata), if any;
    ``payload_hash`` the provider's own hash of what it applied.
    """

    provider: str
    request_id: str
    at: float
    tenant_id: str | None
    scope: frozenset[str]
    kind: str
    operation_key: str | None
    args_hash: str | None
    payload_hash: str | None
    status: int
    effect_applied: bool
    idempotent: bool
    #: The id of what the request created or read (a charge, a message, an issue), if any.
    object_id: str | None = None
    #: The ledger attempt the client said the request was for (lookups carry no key).
    attempt_id: str | None = None

    @property
    def logical_hash(self) -> str | None:
        """What names the logical effect: the declared args hash, else the payload hash."""
        return self.args_hash or self.payload_hash


@dataclasses.dataclass(frozen=True)
class Observation:
    """The ledger as seen between two steps of a schedule."""

    step: int
    at: float
    label: str
    attempts: tuple[Attempt, ...]
    queue: tuple[QueueEntry, ...]


@dataclasses.dataclass(frozen=True)
class ExpectedEffect:
    """An effect the fault-free run of a message produced: it must never be silently lost."""

    task_id: str
    tool_name: str
    args_hash: str


@dataclasses.dataclass(frozen=True)
class Incident:
    """Something the harness did, for the story a violation tells (e.g. a kill at B)."""

    at: float
    text: str


@dataclasses.dataclass(frozen=True)
class RecoveryRerun:
    """What running recovery again changed (invariant 6).

    ``ledger_changes`` and ``new_requests`` come from a second recovery after the quiet
    phase; ``killed_vs_uninterrupted`` lists the differences between a recovery killed midway
    and rerun and an uninterrupted one, started from the same state.
    """

    ledger_changes: tuple[str, ...] = ()
    new_requests: tuple[ProviderRequest, ...] = ()
    killed_vs_uninterrupted: tuple[str, ...] = ()
    killed_at: str | None = None


@dataclasses.dataclass(frozen=True)
class Evidence:
    """Everything one case left behind."""

    attempts: tuple[Attempt, ...]
    events: tuple[Event, ...]
    requests: tuple[ProviderRequest, ...]
    observations: tuple[Observation, ...] = ()
    authority_history: tuple[AuthorityChange, ...] = ()
    expected_effects: tuple[ExpectedEffect, ...] = ()
    incidents: tuple[Incident, ...] = ()
    rerun: RecoveryRerun | None = None

    @property
    def effects(self) -> tuple[ProviderRequest, ...]:
        return tuple(r for r in self.requests if r.effect_applied)
