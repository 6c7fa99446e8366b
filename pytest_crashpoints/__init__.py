"""pytest-crashpoints: prove that tool calls survive crashes.

The public API; everything else lives in private modules.
"""

from typing import TYPE_CHECKING, Any

from ._authority import Authority
from ._authority_store import AuthorityChange, AuthorityStore
from ._clock import HARNESS_EPOCH, HarnessClock
from ._errors import (
    ArgumentsError,
    CrashpointsError,
    HarnessError,
    HarnessUsageError,
    IdempotencyKeyConflict,
    IllegalTransition,
    LeaseHeld,
    LedgerError,
    ProviderRejected,
    SchemaVersionError,
    UnknownAttempt,
    UnknownTask,
    WorkerNotPaused,
)
from ._failpoints import (
    SPEC_POINTS,
    Count,
    Fault,
    Hit,
    Kill,
    Pause,
    Raise,
    crashpoint,
    crashpoint_context,
)
from ._ledger import SCHEMA_VERSION, Attempt, Event, Ledger, QueueEntry
from ._normalize import args_hash, canonical_json, normalize_args
from ._recovery import RecoveryAction, RecoveryPolicy, recover
from ._rundir import RunDir
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

if TYPE_CHECKING:
    from ._case import CaseResult, Scenario, run_case
    from ._context import Context, ProviderSpec
    from ._delivery import (
        Redelivery,
        deliver_concurrently,
        redeliver_after_crash,
        redeliver_after_success,
    )
    from ._evidence import LedgerView
    from ._interleaving import run_interleaved
    from ._invariants import INVARIANTS, Violation
    from ._reference import reference_recovery, reference_worker
    from ._schedule import (
        Advance,
        ChangeAuthority,
        Deliver,
        KillAt,
        LookupTimeouts,
        Recover,
        Schedule,
    )
    from ._transport import AsyncCrashTransport, CrashTransport
    from ._views import SQLiteLedgerView
    from ._worker import (
        Completed,
        Died,
        Killed,
        Outcome,
        Raised,
        TimedOut,
        Worker,
        run_worker,
        start_worker,
    )

# Names loaded on first use (their modules import multiprocess or httpx, or are only needed
# by crash tests), so that importing the
# package (which every pytest run does, through the plugin) stays cheap.
_LAZY = {
    "CaseResult": "_case",
    "Scenario": "_case",
    "run_case": "_case",
    "Context": "_context",
    "ProviderSpec": "_context",
    "LedgerView": "_evidence",
    "INVARIANTS": "_invariants",
    "Violation": "_invariants",
    "reference_recovery": "_reference",
    "reference_worker": "_reference",
    "Advance": "_schedule",
    "ChangeAuthority": "_schedule",
    "Deliver": "_schedule",
    "KillAt": "_schedule",
    "LookupTimeouts": "_schedule",
    "Recover": "_schedule",
    "Schedule": "_schedule",
    "SQLiteLedgerView": "_views",
    "Redelivery": "_delivery",
    "deliver_concurrently": "_delivery",
    "redeliver_after_crash": "_delivery",
    "redeliver_after_success": "_delivery",
    "run_interleaved": "_interleaving",
    "AsyncCrashTransport": "_transport",
    "CrashTransport": "_transport",
    "Completed": "_worker",
    "Died": "_worker",
    "Killed": "_worker",
    "Outcome": "_worker",
    "Raised": "_worker",
    "TimedOut": "_worker",
    "Worker": "_worker",
    "run_worker": "_worker",
    "start_worker": "_worker",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "INVARIANTS",
    "Advance",
    "CaseResult",
    "ChangeAuthority",
    "Context",
    "Deliver",
    "KillAt",
    "LedgerView",
    "LookupTimeouts",
    "ProviderSpec",
    "Recover",
    "SQLiteLedgerView",
    "Scenario",
    "Schedule",
    "Violation",
    "reference_recovery",
    "reference_worker",
    "run_case",
    "FINAL_STATES",
    "HARNESS_EPOCH",
    "SPEC_POINTS",
    "SCHEMA_VERSION",
    "IN_FLIGHT_STATES",
    "TRANSITIONS",
    "Absent",
    "AsyncCrashTransport",
    "AuthorityChange",
    "AuthorityStore",
    "Completed",
    "Count",
    "CrashTransport",
    "Died",
    "Fault",
    "HarnessClock",
    "HarnessError",
    "HarnessUsageError",
    "Hit",
    "Kill",
    "Killed",
    "Outcome",
    "Pause",
    "Raise",
    "Raised",
    "Redelivery",
    "RunDir",
    "TimedOut",
    "UnknownTask",
    "Worker",
    "WorkerNotPaused",
    "crashpoint_context",
    "deliver_concurrently",
    "redeliver_after_crash",
    "redeliver_after_success",
    "run_interleaved",
    "run_worker",
    "start_worker",
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
