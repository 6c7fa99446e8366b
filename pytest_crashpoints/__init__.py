"""pytest-crashpoints: prove that tool calls survive crashes.

The public API; everything else lives in private modules.
"""

from ._authority import Authority
from ._errors import (
    ArgumentsError,
    CrashpointsError,
    IdempotencyKeyConflict,
    IllegalTransition,
    LeaseHeld,
    LedgerError,
    ProviderRejected,
    SchemaVersionError,
    UnknownAttempt,
)
from ._failpoints import crashpoint
from ._ledger import SCHEMA_VERSION, Attempt, Event, Ledger, QueueEntry
from ._normalize import args_hash, canonical_json, normalize_args
from ._recovery import RecoveryAction, RecoveryPolicy, recover
from ._states import FINAL_STATES, IN_FLIGHT_STATES, TRANSITIONS, State
from ._toolcall import (
    Absent,
    Found,
    LookupResult,
    Receipt,
    ToolAdapter,
    Unavailable,
    guarded_call,
)

__all__ = [
    "FINAL_STATES",
    "SCHEMA_VERSION",
    "IN_FLIGHT_STATES",
    "TRANSITIONS",
    "Absent",
    "ArgumentsError",
    "Attempt",
    "Authority",
    "CrashpointsError",
    "Event",
    "Found",
    "IdempotencyKeyConflict",
    "IllegalTransition",
    "LeaseHeld",
    "Ledger",
    "LedgerError",
    "LookupResult",
    "ProviderRejected",
    "QueueEntry",
    "Receipt",
    "RecoveryAction",
    "RecoveryPolicy",
    "SchemaVersionError",
    "State",
    "ToolAdapter",
    "Unavailable",
    "UnknownAttempt",
    "args_hash",
    "canonical_json",
    "crashpoint",
    "guarded_call",
    "normalize_args",
    "recover",
]
