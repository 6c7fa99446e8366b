"""pytest-crashpoints: prove that tool calls survive crashes.

The names agent code and a crash test need; the rest is in three public modules:
``pytest_crashpoints.ledger`` (the ledger, the safe-order call, recovery, views),
``pytest_crashpoints.harness`` (cases, schedules, workers, faults, the clock) and
``pytest_crashpoints.errors`` (every exception). Everything else is private.

Every name is loaded on first use (PEP 562): the pytest plugin lives in this package, so
every pytest run of every user imports it, and that must cost next to nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._agent.annotations import mcp_annotations
    from ._agent.recovery import recover
    from ._agent.toolcall import (
        Absent,
        Found,
        Receipt,
        ToolAdapter,
        Unavailable,
        guarded_call,
    )
    from ._harness.case.context import Context, ProviderSpec
    from ._harness.case.incident import Incident
    from ._harness.case.reference import (
        reference_recovery,
        reference_recovery_async,
        reference_worker,
        reference_worker_async,
    )
    from ._harness.search.findings import ExplorationReport
    from ._inject.failpoints import crashpoint, crashpoint_context
    from ._inject.transport import AsyncCrashTransport, CrashTransport
    from ._ledger.args import args_hash
    from ._ledger.authority import Authority
    from ._ledger.jsonlines import JSONLinesLedgerView
    from ._ledger.records import Attempt
    from ._ledger.sqlite import Ledger
    from ._ledger.states import State
    from ._ledger.views import LedgerView, SQLiteLedgerView
    from ._plugin.fixture import CrashpointsFixture
    from .errors import CrashpointsError, ProviderRejected

#: Where each public name lives.
_HOME = {
    "crashpoint": "._inject.failpoints",
    "crashpoint_context": "._inject.failpoints",
    "CrashTransport": "._inject.transport",
    "AsyncCrashTransport": "._inject.transport",
    "guarded_call": "._agent.toolcall",
    "ToolAdapter": "._agent.toolcall",
    "Receipt": "._agent.toolcall",
    "Found": "._agent.toolcall",
    "Absent": "._agent.toolcall",
    "Unavailable": "._agent.toolcall",
    "recover": "._agent.recovery",
    "mcp_annotations": "._agent.annotations",
    "Ledger": "._ledger.sqlite",
    "Attempt": "._ledger.records",
    "State": "._ledger.states",
    "Authority": "._ledger.authority",
    "args_hash": "._ledger.args",
    "LedgerView": "._ledger.views",
    "SQLiteLedgerView": "._ledger.views",
    "JSONLinesLedgerView": "._ledger.jsonlines",
    "Context": "._harness.case.context",
    "ProviderSpec": "._harness.case.context",
    "ExplorationReport": "._harness.search.findings",
    "Incident": "._harness.case.incident",
    "reference_worker": "._harness.case.reference",
    "reference_recovery": "._harness.case.reference",
    "reference_worker_async": "._harness.case.reference",
    "reference_recovery_async": "._harness.case.reference",
    "CrashpointsFixture": "._plugin.fixture",
    "CrashpointsError": ".errors",
    "ProviderRejected": ".errors",
}

#: Names that moved to a public submodule: (new module, new name). They still work, with a
#: DeprecationWarning, until 0.3.
_MOVED = {
    **{
        name: ("pytest_crashpoints.errors", name)
        for name in (
            "ArgumentsError",
            "HarnessError",
            "HarnessUsageError",
            "IdempotencyKeyConflict",
            "IllegalTransition",
            "LeaseHeld",
            "LedgerError",
            "SchemaVersionError",
            "UnknownAttempt",
            "UnknownTask",
            "WorkerNotPaused",
        )
    },
    **{
        name: ("pytest_crashpoints.ledger", name)
        for name in (
            "Event",
            "FINAL_STATES",
            "IN_FLIGHT_STATES",
            "LookupResult",
            "QueueEntry",
            "RecoveryAction",
            "RecoveryPolicy",
            "SCHEMA_VERSION",
            "TRANSITIONS",
            "canonical_json",
            "normalize_args",
        )
    },
    **{
        name: ("pytest_crashpoints.harness", name)
        for name in (
            "Advance",
            "CaseResult",
            "ChangeAuthority",
            "Deliver",
            "HarnessClock",
            "INVARIANTS",
            "KillAt",
            "LookupTimeouts",
            "Recover",
            "RunDir",
            "Scenario",
            "Schedule",
            "Violation",
            "replay_token",
            "run_case",
        )
    },
    "SPEC_POINTS": ("pytest_crashpoints.harness", "CRASH_POINTS"),
}

#: Names that left the public API in 0.2 (the process plumbing under the harness): they still
#: work, with a DeprecationWarning, until 0.3.
_WITHDRAWN = {
    "AuthorityChange": "._harness.storage.authority_store",
    "AuthorityStore": "._harness.storage.authority_store",
    "Completed": "._process.outcome",
    "Count": "._inject.failpoints",
    "Died": "._process.outcome",
    "Fault": "._inject.failpoints",
    "HARNESS_EPOCH": "._process.clock",
    "Hit": "._inject.failpoints",
    "Kill": "._inject.failpoints",
    "Killed": "._process.outcome",
    "Outcome": "._process.outcome",
    "Pause": "._inject.failpoints",
    "Raise": "._inject.failpoints",
    "Raised": "._process.outcome",
    "Redelivery": "._process.delivery",
    "TimedOut": "._process.outcome",
    "Worker": "._process.handle",
    "deliver_concurrently": "._process.delivery",
    "redeliver_after_crash": "._process.delivery",
    "redeliver_after_success": "._process.delivery",
    "run_interleaved": "._process.interleaving",
    "run_worker": "._process.worker",
    "start_worker": "._process.worker",
}


def __getattr__(name: str) -> Any:
    import importlib

    home = _HOME.get(name)
    if home is not None:
        from ._exports import show_public_home

        value = getattr(importlib.import_module(home, __name__), name)
        globals()[name] = value
        show_public_home(__name__, [name])
        return value
    moved = _MOVED.get(name)
    if moved is not None:
        import warnings

        module, new_name = moved
        warnings.warn(
            f"pytest_crashpoints.{name} moved to {module}.{new_name}; import it from there "
            "(the old name goes away in pytest-crashpoints 0.3).",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(module), new_name)
    withdrawn = _WITHDRAWN.get(name)
    if withdrawn is not None:
        import warnings

        warnings.warn(
            f"pytest_crashpoints.{name} is no longer public (it is the harness's process "
            "plumbing) and goes away in pytest-crashpoints 0.3; drive crash cases with the "
            "crashpoints fixture or pytest_crashpoints.harness.run_case.",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(withdrawn, __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "Absent",
    "AsyncCrashTransport",
    "Attempt",
    "Authority",
    "Context",
    "CrashTransport",
    "CrashpointsError",
    "CrashpointsFixture",
    "ExplorationReport",
    "Incident",
    "Found",
    "JSONLinesLedgerView",
    "Ledger",
    "LedgerView",
    "ProviderRejected",
    "ProviderSpec",
    "Receipt",
    "SQLiteLedgerView",
    "State",
    "ToolAdapter",
    "Unavailable",
    "args_hash",
    "crashpoint",
    "crashpoint_context",
    "guarded_call",
    "mcp_annotations",
    "recover",
    "reference_recovery",
    "reference_recovery_async",
    "reference_worker",
    "reference_worker_async",
]
