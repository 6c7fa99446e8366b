"""Errors raised by pytest-crashpoints.

Every error descends from :class:`CrashpointsError` and says what went wrong and what to do::

    CrashpointsError
    ├── ArgumentsError            arguments that cannot be normalized (nothing recorded or sent)
    ├── LedgerError
    │   ├── SchemaVersionError    a ledger file of another schema version
    │   ├── IdempotencyKeyConflict  the same key already names an effect with other arguments
    │   ├── IllegalTransition     a state change the transition table forbids (nothing changed)
    │   ├── UnknownAttempt        no attempt with that id
    │   └── LeaseHeld             the attempt is owned by someone else whose lease has not expired
    ├── ProviderRejected          the provider refused the request before applying any effect
    ├── CommandFailed             a worker or recovery command exited non-zero or by a signal
    ├── ScriptError               the fake model's script is malformed or has no answer (ValueError)
    ├── DependencyError           a library a feature needs is missing, or of a version it does
    │                             not support (ImportError)
    └── HarnessError              the fault-injection harness could not do what was asked
        ├── ServerError           a test's private server (redis-server, PostgreSQL) is not
        │                         installed, or did not start
        ├── HarnessUsageError     a bad fault, timeout, clock move or authority change (ValueError)
        ├── WorkerNotPaused       a worker did not reach (or is not at) the gate being waited on
        └── UnknownTask           the authority store has no authority for that task (KeyError)
"""

from __future__ import annotations

__all__ = [
    "ArgumentsError",
    "CommandFailed",
    "CrashpointsError",
    "DependencyError",
    "HarnessError",
    "HarnessUsageError",
    "IdempotencyKeyConflict",
    "IllegalTransition",
    "LeaseHeld",
    "LedgerError",
    "ProviderRejected",
    "SchemaVersionError",
    "ScriptError",
    "ServerError",
    "UnknownAttempt",
    "UnknownTask",
    "WorkerNotPaused",
]


class CrashpointsError(Exception):
    """Base class of every error pytest-crashpoints raises on purpose."""


class ArgumentsError(CrashpointsError, ValueError):
    """Tool arguments that cannot be normalized to canonical JSON.

    Raised before anything is recorded or sent.
    """


class LedgerError(CrashpointsError):
    """A ledger operation that was refused; the ledger is unchanged."""


class SchemaVersionError(LedgerError):
    """The ledger file was written by another schema version."""


class IdempotencyKeyConflict(LedgerError):
    """The idempotency key already names an effect whose arguments hash differently."""

    def __init__(self, idempotency_key: str, existing_hash: str, new_hash: str) -> None:
        self.idempotency_key = idempotency_key
        self.existing_hash = existing_hash
        self.new_hash = new_hash
        super().__init__(
            f"idempotency key {idempotency_key!r} already names an effect with arguments hash "
            f"{existing_hash[:12]}…, not {new_hash[:12]}…; nothing was recorded. An idempotency "
            "key must name one logical effect: derive it from what makes the effect unique, or "
            "use a new key for a different effect."
        )


class IllegalTransition(LedgerError):
    """A state change that the transition table forbids."""

    def __init__(self, attempt_id: str, from_state: str, to_state: str) -> None:
        self.attempt_id = attempt_id
        self.from_state = from_state
        self.to_state = to_state
        super().__init__(
            f"attempt {attempt_id!r} cannot go from {from_state} to {to_state}: the transition "
            "table forbids it, and nothing was changed. Re-read the attempt: another process "
            "may have moved it first."
        )


class UnknownAttempt(LedgerError, KeyError):
    """No attempt with that id exists in the ledger."""

    def __init__(self, attempt_id: str) -> None:
        self.attempt_id = attempt_id
        super().__init__(attempt_id)

    def __str__(self) -> str:
        return f"no attempt {self.attempt_id!r} in this ledger; check the id and the ledger path."


class LeaseHeld(LedgerError):
    """The attempt is owned by another process whose lease has not expired."""

    def __init__(self, attempt_id: str, owner: str, lease_expires_at: float) -> None:
        self.attempt_id = attempt_id
        self.owner = owner
        self.lease_expires_at = lease_expires_at
        super().__init__(
            f"attempt {attempt_id!r} is owned by {owner!r} until t={lease_expires_at:g}; "
            "wait for the lease to expire or let its owner finish."
        )


class ProviderRejected(CrashpointsError):
    """The provider refused the request before applying any effect.

    Raise it from a tool adapter's ``dispatch`` only when the provider's answer proves that
    nothing happened (a validation error, a 5xx before applying, a 429). Any other exception
    from ``dispatch`` leaves the attempt UNKNOWN, because the effect may have happened.

    ``retryable`` says whether the same request may succeed later (``retry_after`` seconds of
    harness time from now, when the provider said so).
    """

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None) -> None:
        self.retryable = retryable
        self.retry_after = retry_after
        super().__init__(message)


class CommandFailed(CrashpointsError):
    """A worker or recovery that is a command exited with a non-zero status or was killed by
    a signal the harness did not send: as a Python worker that raised, its message stays
    unacknowledged. The message quotes the end of its standard error (all of it is in the run
    directory's ``logs/``)."""


class ScriptError(CrashpointsError, ValueError):
    """The fake model's script is malformed, or has no answer for what the agent asked (a
    turn it does not have, a tool the request does not offer, a function that raised)."""


class DependencyError(CrashpointsError, ImportError):
    """A library a feature needs is not installed, or is installed in a version the feature
    does not support. The message names the version installed (if any) and what to install."""


class HarnessError(CrashpointsError):
    """The fault-injection harness could not do what was asked."""


class ServerError(HarnessError):
    """A test's private server (``pytest_crashpoints.servers``) could not run: its program is
    not installed (``installed`` is false), or it did not start. The message says which, with
    the end of the server's own log, and what to install or check."""

    def __init__(self, message: str, *, installed: bool = True) -> None:
        self.installed = installed
        super().__init__(message)


class HarnessUsageError(HarnessError, ValueError):
    """A request the harness refuses: a bad fault, timeout, clock move or authority change."""


class WorkerNotPaused(HarnessError):
    """A worker did not reach the gate being waited on, or is not paused at the gate being
    released. ``outcome`` is the worker's outcome when it already ended, else ``None``."""

    def __init__(self, message: str, *, gate: str, outcome: object | None = None) -> None:
        self.gate = gate
        self.outcome = outcome
        super().__init__(message)


class UnknownTask(HarnessError, KeyError):
    """The authority store has no authority for that task."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(task_id)

    def __str__(self) -> str:
        return (
            f"no authority was ever granted for task {self.task_id!r} in this store; grant one "
            "with AuthorityStore.set(task_id, authority) before a worker reads it."
        )
