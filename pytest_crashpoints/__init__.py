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
from ._normalize import args_hash, canonical_json, normalize_args
from ._states import FINAL_STATES, IN_FLIGHT_STATES, TRANSITIONS, State

__all__ = [
    "FINAL_STATES",
    "IN_FLIGHT_STATES",
    "TRANSITIONS",
    "ArgumentsError",
    "Authority",
    "CrashpointsError",
    "IdempotencyKeyConflict",
    "IllegalTransition",
    "LeaseHeld",
    "LedgerError",
    "ProviderRejected",
    "SchemaVersionError",
    "State",
    "UnknownAttempt",
    "args_hash",
    "canonical_json",
    "crashpoint",
    "normalize_args",
]
