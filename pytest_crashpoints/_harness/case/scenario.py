"""What a crash test runs: a worker, its recovery, the messages and the providers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..._ledger.authority import Authority
from ...errors import CrashpointsError
from .context import Context, ProviderSpec

if TYPE_CHECKING:
    from fake_providers import Script

    from ..._ledger.views import LedgerView
    from ..._process.handle import StartMethod
    from ..storage.agent_redis import RedisConfig
    from ..verdict.invariants import Invariant
    from .incident import Incident

__all__ = ["CaseDatabase", "Recovery", "Scenario", "WorkerFn"]

WorkerFn = Callable[[Any, Context], object]
Recovery = Callable[[Context], object]


class CaseDatabase(Protocol):
    """A database of each case kept outside its run directory, in a database server
    (:class:`~pytest_crashpoints.servers.PostgresCaseDatabase`): the harness creates it fresh
    for a case, copies it when it copies the case's run directory, and drops it (and its
    copies) when the case ends, and settles after the test. Each is named for the case's run
    directory."""

    def create(self, run_dir: Path) -> None: ...

    def copy(self, source: Path, target: Path) -> None: ...

    def drop(self, run_dir: Path) -> None: ...

    def settle(self) -> None:
        """Finish what it does in the background; called after the test's last case."""


@dataclasses.dataclass(frozen=True)
class Scenario:
    """What a crash test runs: a worker, its recovery, the messages, the providers.

    ``worker(message, ctx)`` handles one message in a worker process; ``recover(ctx)`` runs
    recovery (either may be ``async def``: run to its end on an event loop in its process;
    ``None``: the agent has none; the queue's redelivery of a dead worker's message is
    then all that finishes its work). Each message is a mapping with a ``task_id``;
    ``authorities`` gives each task its initial authority. ``ledger_view(ctx)`` reads the ledger
    the invariants are checked on (default: the reference ledger). ``transport_points`` are the
    points the crash transport fires (B and C); leave them empty when the worker marks B and C
    itself (as the reference ``guarded_call`` does). ``invariants`` are invariants of your own,
    checked on every case after the six (see :data:`~.invariants.Invariant`). ``model`` is the
    script the ``model`` provider answers from. ``setup(ctx)`` runs in the harness before each
    case's first step, as the harness (its requests are not the agent's effects): it creates
    what the agent's tools expect to find at the providers, e.g. the charge a support agent
    refunds. ``incident`` starts each case from a state production was left in (see
    :class:`~.incident.Incident`): the baseline is then the fault-free run from an empty world.
    ``databases`` are the case's databases in a database server (:class:`CaseDatabase`),
    fresh for each case: such a scenario runs on the processes engine, every case from its
    start (the states engine copies files only).

    Raises :class:`~pytest_crashpoints.errors.HarnessUsageError` for a worker or recovery that
    is not a plain or coroutine function taking those arguments (a generator function, a
    coroutine object) and for invariants that are not named callables of one argument, and
    :class:`CrashpointsError` for a message without a task or a task without an authority, a
    ``model`` provider without a script or a script without one.
    """

    worker: WorkerFn
    recover: Recovery | None
    messages: tuple[Mapping[str, Any], ...]
    providers: tuple[ProviderSpec, ...]
    authorities: Mapping[str, Authority]
    ledger_view: Callable[[Context], LedgerView] | None = None
    transport_points: tuple[str, ...] = ()
    timeout: float = 30.0
    start_method: StartMethod = "fork"
    invariants: tuple[Invariant, ...] = ()
    model: Script | None = None
    setup: Callable[[Context], object] | None = None
    incident: Incident | None = None
    databases: tuple[CaseDatabase, ...] = ()
    #: The agent's Redis (``crashpoints.run(..., redis=...)``): a ``redis-server`` per case,
    #: restarted by a power loss on what its files keep (``storage/agent_redis.py``).
    redis: RedisConfig | None = None

    def __post_init__(self) -> None:
        from fake_providers import Script

        # A ledger view made by a case database (``db.ledger_view(...)``) reads that
        # database: the cases make it even when ``databases=`` leaves it out.
        from ..._servers.postgres_cases import CaseLedgerView

        if isinstance(self.ledger_view, CaseLedgerView):
            read = self.ledger_view.case_database
            if not any(read is database for database in self.databases):
                object.__setattr__(self, "databases", (*self.databases, read))

        from ..._process.calling import check_callable
        from ..verdict.invariants import check_invariants

        check_callable(self.worker, role="worker", arguments=("message", "ctx"))
        check_invariants(self.invariants)
        if self.recover is not None:
            check_callable(self.recover, role="recover", arguments=("ctx",))
        models = [s.name for s in self.providers if s.is_model]
        if self.model is not None and not isinstance(self.model, Script):
            raise CrashpointsError(
                f"model={self.model!r} is not a script; pass model=Script([...turns...]) "
                "(from fake_providers import Script, call, say)."
            )
        if self.model is not None and not models:
            raise CrashpointsError(
                "model= gives a script, but 'model' is not one of the marker's providers; add "
                "it: providers=['model', ...]."
            )
        if models and self.model is None:
            raise CrashpointsError(
                "the marker names the 'model' provider but no script says what it answers; pass "
                "model=Script([...]) to crashpoints.run (from fake_providers import Script, "
                "call, say)."
            )
        if self.incident is not None:
            from .incident import Incident

            if not isinstance(self.incident, Incident):
                raise CrashpointsError(
                    f"incident={self.incident!r} is not an Incident; pass "
                    "incident=Incident(ledger=..., exports={...})."
                )
            self.incident.check_providers(spec.name for spec in self.providers)
        for database in self.databases:
            if not all(callable(getattr(database, name, None)) for name in ("create", "copy",
                                                                             "drop", "settle")):
                raise CrashpointsError(
                    f"databases= holds {database!r}, which is not a database per case; pass "
                    "crashpoints_postgres.case_database(schema=...) (or an object with "
                    "create, copy and drop of a run directory, and settle)."
                )
        if self.setup is not None and not callable(self.setup):
            raise CrashpointsError(f"setup={self.setup!r} is not a function of the context.")
        for index, message in enumerate(self.messages):
            task = message.get("task_id") if isinstance(message, Mapping) else None
            if not isinstance(task, str) or not task:
                raise CrashpointsError(
                    f"message {index} ({message!r}) has no task_id; every message is a mapping "
                    "with a 'task_id' string, e.g. {'task_id': 't-1', ...}."
                )
            if task not in self.authorities:
                raise CrashpointsError(
                    f"message {index} belongs to task {task!r}, which has no authority; pass "
                    f"authorities={{{task!r}: Authority.of(tenant_id=..., "
                    "credential_scope=..., policy_version=...)}."
                )
