"""What the invariant checkers look at: one case's evidence, gathered after it ran.

The ground truth is the providers' journals (:class:`ProviderRequest`), not the ledger. Which
process sent each request (and so which message it served, and under which authority) is
known to the harness from the credential it issued to that process, never from anything the
agent put in its payloads or its ledger. The ledger is read through a
:class:`~pytest_crashpoints.LedgerView`, so a user's own ledger can be checked too; a view
that cannot read every column says which ones it reads (``ledger_columns``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..._ledger.authority import Authority
from ..._ledger.records import Attempt, Event, QueueEntry
from ..storage.authority_store import AuthorityChange

#: The name of the processes that made an incident's objects (``production-<message>``, and
#: ``production`` for those of no message): the harness labels their keys so when it seeds
#: them (``case/incident.py``).
PRODUCTION = "production"

__all__ = [
    "PRODUCTION",
    "Evidence",
    "ExpectedEffect",
    "Incident",
    "Observation",
    "ProviderRequest",
    "RecoveryRerun",
    "row_digest",
]


@dataclasses.dataclass(frozen=True)
class ProviderRequest:
    """One request as a provider's journal recorded it, attributed by the harness.

    ``kind`` is the provider's operation (``charges.create``, ``mail.send``); ``payload_hash``
    the provider's own hash of the request's arguments, from its wire format. ``process``,
    ``message``, ``task_id`` and ``authority`` say who sent it: the harness process, worker
    or recovery run whose credential it presented, the message that process was delivering
    (``None`` for recovery), and the authority the credential was issued for. ``aliases``
    are the names the API gives what the request created or read (ids, numbers, URLs).

    ``note`` is what the provider says of it for a timeline (a model: the turn it answered).
    ``body`` is the object an effect created, as the provider stored it.

    ``operation_key`` (the idempotency key or correlation id the client sent), ``args_hash``
    (an arguments hash the client declared in its payload) and ``attempt_id`` (a header
    naming the ledger attempt) are what the client chose to say: used to link ledger rows to
    requests when present, never needed.
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
    process: str | None = None
    message: int | None = None
    task_id: str | None = None
    authority: Authority | None = None
    aliases: tuple[str, ...] = ()
    #: What the provider says of the request, for the timeline (a model: the turn it
    #: answered, and how: ``turn 0: refund(charge='ch_1', amount=1500)``).
    note: str | None = None
    #: What an effect created, as the provider stored it (a charge with its amount, a
    #: message with its text); ``None`` for a request that applied no effect.
    body: Mapping[str, Any] | None = dataclasses.field(default=None, compare=False, hash=False)
    #: The fault injected into this request, if any (the journal's ``fault``:
    #: ``"response_lost"``, ``"server_error"``, ``"rate_limit"``, ``"write_timeout"``, ...).
    fault: str | None = dataclasses.field(default=None, compare=False, hash=False)
    #: What of this request the fake provider does not serve (a route, a parameter, a media
    #: type its description lacks), if anything: the world's limit, not the agent's doing.
    world_limit: str | None = dataclasses.field(default=None, compare=False, hash=False)
    #: The provider's own name of the logical write a write request made or repeated (its
    #: key, else its payload), from the provider's journal: a write made again that changed
    #: nothing (an idempotent retry) shares it with the effect it repeats. ``None`` for a read.
    journal_key: str | None = dataclasses.field(default=None, compare=False, hash=False)
    #: An object of an incident: how the harness read it (whose it is, on what evidence:
    #: ``"history of order-8 (metadata order_id)"``); ``None`` for a request of the case.
    reading: str | None = dataclasses.field(default=None, compare=False, hash=False)
    #: An object of an incident that is none of the case's work (another task's, or one
    #: nothing names): what production did before, never judged as the case's effect.
    history: bool = dataclasses.field(default=False, compare=False, hash=False)

    @property
    def from_incident(self) -> bool:
        """Whether production made it, before the case started (an incident's object)."""
        return (self.process or "").partition("-")[0] == PRODUCTION

    @property
    def logical_hash(self) -> str | None:
        """What names the logical effect: the declared args hash, else the payload hash."""
        return self.args_hash or self.payload_hash

    @property
    def identifiers(self) -> frozenset[str]:
        """Every string a ledger row may have stored to name this request or its object."""
        names = {self.request_id, self.object_id, self.operation_key, *self.aliases}
        return frozenset(name for name in names if name)

    @property
    def sender(self) -> str:
        """Who sent it, in words: ``worker-1 (delivering message 0)``, ``recovery-2``."""
        if self.process is None:
            return "an unknown process"
        if self.from_incident:
            which = "" if self.message is None else f", delivering message {self.message}"
            return f"production (in the incident{which})"
        if self.message is not None:
            return f"{self.process} (delivering message {self.message})"
        return self.process


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
    """An effect the fault-free run of the same messages produced (from the providers'
    journals): no schedule may lose it, and one beyond it is a duplicate."""

    provider: str
    operation: str
    payload_hash: str | None
    message: int | None
    task_id: str | None
    request_id: str


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
    """Everything one case left behind.

    The providers' ground truth is ``requests`` (and ``effects``, those that applied one);
    the ledger, read through its view, is ``attempts``, ``events`` and the ``observations``
    between steps; ``incidents`` are what the harness did to the case (kills);
    ``authority_history`` every task's authority over time. An invariant of your own reads
    any of them.

    ``expected_effects`` is ``None`` for the fault-free run itself (there is nothing to
    compare it with yet). ``ledger_columns`` are the seed names the ledger view reads
    (``None``: all of them).
    """

    attempts: tuple[Attempt, ...]
    events: tuple[Event, ...]
    requests: tuple[ProviderRequest, ...]
    observations: tuple[Observation, ...] = ()
    authority_history: tuple[AuthorityChange, ...] = ()
    expected_effects: tuple[ExpectedEffect, ...] | None = None
    incidents: tuple[Incident, ...] = ()
    rerun: RecoveryRerun | None = None
    ledger_columns: frozenset[str] | None = None
    #: The case's timeline, as a failure report shows it (what the harness did, the ledger's
    #: events and the providers' requests, in harness time).
    timeline: str = ""
    #: In a case that starts from an incident, the wall time (Unix seconds) its harness time
    #: 0 stands for: times are shown as wall times, the incident's own; ``None`` otherwise.
    epoch: float | None = None
    #: In a case that starts from an incident, its ledger's rows as production left them:
    #: attempt id -> :func:`row_digest`.
    incident_rows: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def as_left(self, attempt: Attempt) -> bool:
        """Whether ``attempt`` is a row of the incident, exactly as production left it."""
        left = self.incident_rows.get(attempt.attempt_id)
        return left is not None and left == row_digest(attempt)

    @property
    def effects(self) -> tuple[ProviderRequest, ...]:
        return tuple(r for r in self.requests if r.effect_applied)

    def reads(self, *columns: str) -> bool:
        """Whether the ledger view reads every one of ``columns``."""
        return self.ledger_columns is None or set(columns) <= self.ledger_columns

    def reads_any(self, *columns: str) -> bool:
        """Whether the ledger view reads at least one of ``columns``."""
        return self.ledger_columns is None or bool(set(columns) & self.ledger_columns)


def row_digest(attempt: Attempt) -> str:
    """What a row holds, as one string: equal for equal rows, whatever process reads them."""
    import hashlib
    import json

    fields = dataclasses.asdict(attempt)
    fields["state"] = attempt.state.value
    fields["authority"] = [
        attempt.authority.tenant_id,
        sorted(attempt.authority.credential_scope),
        attempt.authority.policy_version,
    ]
    text = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()
