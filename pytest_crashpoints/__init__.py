"""pytest-crashpoints: prove that tool calls survive crashes.

The public API; everything else lives in private modules. Every name is loaded on first use
(PEP 562): the pytest plugin lives in this package, so every pytest run of every user
imports it, and that must cost next to nothing.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._authority import (
        Authority,
    )
    from ._authority_store import (
        AuthorityChange,
        AuthorityStore,
    )
    from ._case import (
        CaseResult,
        Scenario,
        run_case,
    )
    from ._clock import (
        HARNESS_EPOCH,
        HarnessClock,
    )
    from ._context import (
        Context,
        ProviderSpec,
    )
    from ._delivery import (
        Redelivery,
        deliver_concurrently,
        redeliver_after_crash,
        redeliver_after_success,
    )
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
    from ._evidence import (
        LedgerView,
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
    from ._fixture import (
        CrashpointsFixture,
    )
    from ._interleaving import (
        run_interleaved,
    )
    from ._invariants import (
        INVARIANTS,
        Violation,
    )
    from ._ledger import (
        SCHEMA_VERSION,
        Attempt,
        Event,
        Ledger,
        QueueEntry,
    )
    from ._normalize import (
        args_hash,
        canonical_json,
        normalize_args,
    )
    from ._recovery import (
        RecoveryAction,
        RecoveryPolicy,
        recover,
    )
    from ._reference import (
        reference_recovery,
        reference_worker,
    )
    from ._rundir import (
        RunDir,
    )
    from ._schedule import (
        Advance,
        ChangeAuthority,
        Deliver,
        KillAt,
        LookupTimeouts,
        Recover,
        Schedule,
        replay_token,
    )
    from ._states import (
        FINAL_STATES,
        IN_FLIGHT_STATES,
        TRANSITIONS,
        State,
    )
    from ._toolcall import (
        Absent,
        Found,
        LookupResult,
        Receipt,
        ToolAdapter,
        Unavailable,
        guarded_call,
    )
    from ._transport import (
        AsyncCrashTransport,
        CrashTransport,
    )
    from ._views import (
        SQLiteLedgerView,
    )
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

_LAZY = {
    "replay_token": "_schedule",
    "CrashpointsFixture": "_fixture",
    "Authority": "_authority",
    "AuthorityChange": "_authority_store",
    "AuthorityStore": "_authority_store",
    "CaseResult": "_case",
    "Scenario": "_case",
    "run_case": "_case",
    "HARNESS_EPOCH": "_clock",
    "HarnessClock": "_clock",
    "Context": "_context",
    "ProviderSpec": "_context",
    "Redelivery": "_delivery",
    "deliver_concurrently": "_delivery",
    "redeliver_after_crash": "_delivery",
    "redeliver_after_success": "_delivery",
    "ArgumentsError": "_errors",
    "CrashpointsError": "_errors",
    "HarnessError": "_errors",
    "HarnessUsageError": "_errors",
    "IdempotencyKeyConflict": "_errors",
    "IllegalTransition": "_errors",
    "LeaseHeld": "_errors",
    "LedgerError": "_errors",
    "ProviderRejected": "_errors",
    "SchemaVersionError": "_errors",
    "UnknownAttempt": "_errors",
    "UnknownTask": "_errors",
    "WorkerNotPaused": "_errors",
    "LedgerView": "_evidence",
    "Count": "_failpoints",
    "Fault": "_failpoints",
    "Hit": "_failpoints",
    "Kill": "_failpoints",
    "Pause": "_failpoints",
    "Raise": "_failpoints",
    "SPEC_POINTS": "_failpoints",
    "crashpoint": "_failpoints",
    "crashpoint_context": "_failpoints",
    "run_interleaved": "_interleaving",
    "INVARIANTS": "_invariants",
    "Violation": "_invariants",
    "Attempt": "_ledger",
    "Event": "_ledger",
    "Ledger": "_ledger",
    "QueueEntry": "_ledger",
    "SCHEMA_VERSION": "_ledger",
    "args_hash": "_normalize",
    "canonical_json": "_normalize",
    "normalize_args": "_normalize",
    "RecoveryAction": "_recovery",
    "RecoveryPolicy": "_recovery",
    "recover": "_recovery",
    "reference_recovery": "_reference",
    "reference_worker": "_reference",
    "RunDir": "_rundir",
    "Advance": "_schedule",
    "ChangeAuthority": "_schedule",
    "Deliver": "_schedule",
    "KillAt": "_schedule",
    "LookupTimeouts": "_schedule",
    "Recover": "_schedule",
    "Schedule": "_schedule",
    "FINAL_STATES": "_states",
    "IN_FLIGHT_STATES": "_states",
    "State": "_states",
    "TRANSITIONS": "_states",
    "Absent": "_toolcall",
    "Found": "_toolcall",
    "LookupResult": "_toolcall",
    "Receipt": "_toolcall",
    "ToolAdapter": "_toolcall",
    "Unavailable": "_toolcall",
    "guarded_call": "_toolcall",
    "AsyncCrashTransport": "_transport",
    "CrashTransport": "_transport",
    "SQLiteLedgerView": "_views",
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
    "replay_token",
    "CrashpointsFixture",
    "Absent",
    "Advance",
    "ArgumentsError",
    "AsyncCrashTransport",
    "Attempt",
    "Authority",
    "AuthorityChange",
    "AuthorityStore",
    "CaseResult",
    "ChangeAuthority",
    "Completed",
    "Context",
    "Count",
    "CrashTransport",
    "CrashpointsError",
    "Deliver",
    "Died",
    "Event",
    "FINAL_STATES",
    "Fault",
    "Found",
    "HARNESS_EPOCH",
    "HarnessClock",
    "HarnessError",
    "HarnessUsageError",
    "Hit",
    "INVARIANTS",
    "IN_FLIGHT_STATES",
    "IdempotencyKeyConflict",
    "IllegalTransition",
    "Kill",
    "KillAt",
    "Killed",
    "LeaseHeld",
    "Ledger",
    "LedgerError",
    "LedgerView",
    "LookupResult",
    "LookupTimeouts",
    "Outcome",
    "Pause",
    "ProviderRejected",
    "ProviderSpec",
    "QueueEntry",
    "Raise",
    "Raised",
    "Receipt",
    "Recover",
    "RecoveryAction",
    "RecoveryPolicy",
    "Redelivery",
    "RunDir",
    "SCHEMA_VERSION",
    "SPEC_POINTS",
    "SQLiteLedgerView",
    "Scenario",
    "Schedule",
    "SchemaVersionError",
    "State",
    "TRANSITIONS",
    "TimedOut",
    "ToolAdapter",
    "Unavailable",
    "UnknownAttempt",
    "UnknownTask",
    "Violation",
    "Worker",
    "WorkerNotPaused",
    "args_hash",
    "canonical_json",
    "crashpoint",
    "crashpoint_context",
    "deliver_concurrently",
    "guarded_call",
    "normalize_args",
    "recover",
    "redeliver_after_crash",
    "redeliver_after_success",
    "reference_recovery",
    "reference_worker",
    "run_case",
    "run_interleaved",
    "run_worker",
    "start_worker",
]
