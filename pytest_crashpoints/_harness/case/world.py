"""The world of one case: its clock, its providers and their keys, the authority store.

Everything here lives in the case's run directory, outside every worker process: it survives
the kills. The harness changes it between steps (an authority change, a provider's lookups
timing out) and reads it after the case (the providers' journals, the ledger through its
view) to gather the evidence.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..._ledger.authority import Authority
from ..._ledger.records import Attempt, Event, QueueEntry
from ...errors import LedgerError
from ..storage.authority_store import AuthorityChange
from ..storage.crashstates import RunDirReader
from ..verdict.evidence import PRODUCTION, ProviderRequest
from .context import CaseEnv, Context, authority_fingerprint, key_secret, make_provider
from .scenario import Scenario

if TYPE_CHECKING:
    import httpx

    from fake_providers import Admit, ModelCall, Provider, Server

    from ..._ledger.views import LedgerView
    from ..._process.clock import HarnessClock
    from ..storage.agent_redis import AgentRedis
    from ..storage.authority_store import AuthorityStore

__all__ = ["World", "authority_text"]

#: Seconds a case's server waits for the bytes of a request before it hangs up.
SERVER_READ_TIMEOUT = 60.0


class World:
    """The external reality of one case over its run directory.

    ``fresh`` sets it up (provider settings, each task's initial authority and API key); a
    world opened on a copy of a run directory (``fresh=False``) takes it as it is.
    """

    def __init__(self, scenario: Scenario, env: CaseEnv, *, fresh: bool = True) -> None:
        import contextlib
        import secrets

        from ..._ledger.postgres_view import holding_connections
        from ..._process.clock import HarnessClock
        from ..storage.authority_store import AuthorityStore

        self.scenario = scenario
        #: Why the ledger view could not be read during the current case (``None``: it
        #: could); reset when a case begins (``CaseRun``).
        self.unreadable: Exception | None = None
        env.run_dir.journals.mkdir(parents=True, exist_ok=True)
        self.clock: HarnessClock = HarnessClock(env.clock_path)
        self.providers: dict[str, Provider] = {
            spec.name: make_provider(env, spec, self.clock) for spec in env.providers
        }
        self.store: AuthorityStore = AuthorityStore(env.authority_path, clock=self.clock.now)
        for provider in self.providers.values():
            if provider.is_model:
                provider.script = scenario.model  # type: ignore[attr-defined]
        self._servers = contextlib.ExitStack()
        # A PostgreSQL ledger view keeps its connection between the case's reads (closed
        # before the case's database is copied or dropped, and with the world).
        self._servers.enter_context(holding_connections())
        #: Each provider's loopback server.
        self.servers: dict[str, Server] = {}
        #: The processes of the case that are running now (named as in the timeline): the
        #: servers admit their requests, and refuse those of a process that has ended.
        self.live: set[str] = set()
        #: Whether a process of the case has started: before, a ledger the agent has not
        #: created yet reads as empty, not as one the faults left unreadable.
        self.started = False
        #: How many of each server's refused requests the case has seen (``refusals``).
        self._refusals_seen: dict[str, int] = {}
        #: The agent's own Redis, when the scenario has one (a world on a copy of a run
        #: directory is given the copy's: ``env.redis_url``), and copies of it to close.
        self.redis: AgentRedis | None = None
        self.redis_copies: list[AgentRedis] = []
        try:
            if scenario.redis is not None and not env.redis_url:
                from ..storage.agent_redis import AgentRedis

                self.redis = self._servers.enter_context(
                    contextlib.closing(AgentRedis(scenario.redis, timeout=scenario.timeout).start())
                )
                env = dataclasses.replace(env, redis_url=self.redis.url)
            if fresh:
                for database in scenario.databases:
                    database.create(env.path)
                env = dataclasses.replace(env, signing_secret=secrets.token_hex(16))
                self._set_up(env.signing_secret)
            self._signing_secret = env.signing_secret
            self.env = dataclasses.replace(
                env, urls=self._serve(), messages=tuple(scenario.messages),
                databases=tuple(scenario.databases),
            )
        except BaseException:
            self._servers.close()
            self._drop_databases(env)
            raise
        self.ctx = Context(self.env, "harness")
        #: Reads the run directory's files while the harness's connections are open (never
        #: closing a descriptor of them before the connections are closed: ``crashstates``).
        self.files = RunDirReader(self.env.path)
        if fresh and (scenario.setup is not None or scenario.incident is not None):
            try:
                if scenario.setup is not None:
                    scenario.setup(self.ctx)
                if scenario.incident is not None:
                    scenario.incident.seed(self)
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        self.ctx.close()
        self.files.close()
        for copy in self.redis_copies:
            copy.close()
        self._servers.close()
        for provider in self.providers.values():
            provider.close()
        self._drop_databases(self.env)

    def _drop_databases(self, env: CaseEnv) -> None:
        """Drop the case's databases in a database server (``Scenario.databases``)."""
        for database in self.scenario.databases:
            database.drop(env.path)

    def _serve(self) -> tuple[tuple[str, str], ...]:
        """Start a loopback server per provider: any client of a worker reaches it there."""
        from fake_providers import loopback, smtp_loopback

        for name, provider in self.providers.items():
            # A mail relay is reached over SMTP (its server keeps the same contract).
            serve: Any = smtp_loopback if getattr(provider, "protocol", "") == "smtp" else loopback
            self.servers[name] = self._servers.enter_context(
                serve(
                    provider,
                    preamble=_preamble,
                    admit=self._admitter(name),
                    # A worker stopped (a crash state being copied) or starved on a busy
                    # machine may hold a connection it has not written to yet.
                    read_timeout=SERVER_READ_TIMEOUT,
                )
            )
        return tuple((name, server.url) for name, server in self.servers.items())

    def _admitter(self, name: str) -> Admit:
        """Who a provider's server answers: a process of this case that is running (its key
        says which), the harness itself, and a process of the case that presents no key of
        the run (the kernel says who holds the connection). Anything else is refused
        unjournaled: another run's process on a reused port, a request after its process
        ended. The ground truth holds this run's requests only."""
        from fake_providers import derived_label

        provider = self.providers[name]

        def admit(request: httpx.Request, client: tuple[str, int]) -> str | None:
            label = derived_label(provider.credential(request), signing_secret=self._signing_secret)
            if label is not None:
                process = label.rpartition(".")[0]
                if process == "harness" or process in self.live:
                    return None
                return f"{process} is not a running process of this case"
            if self._sent_by_the_case(name, client):
                return None
            return "not signed for this run, and not sent by a process of it"

        return admit

    def _sent_by_the_case(self, name: str, client: tuple[str, int]) -> bool:
        """Whether the connection from ``client`` to provider ``name``'s server is held by
        the harness or a process of a running worker's group (True where the platform cannot
        tell)."""
        import os
        import urllib.parse

        from ..._process.handle import live_worker_pids
        from ..._process.peers import process_groups, sender

        if not os.path.isdir("/proc/net"):
            return True
        server = self.servers.get(name)
        if server is None:
            return True
        parts = urllib.parse.urlsplit(server.url)
        address = (parts.hostname or "127.0.0.1", parts.port or 80)
        candidates = [os.getpid(), *process_groups(live_worker_pids())]
        return sender(client, address, candidates) is not None

    def settle(self) -> list[str]:
        """Wait until no provider's server is still answering a request that reached it
        (a process that ended may have left one in flight); the providers that did not
        settle within the case's timeout."""
        timeout = self.scenario.timeout
        return [name for name, server in self.servers.items() if not server.settle(timeout)]

    @contextlib.contextmanager
    def still(self) -> Iterator[list[str]]:
        """While the block runs, nothing of this process writes the providers' journals: the
        servers settle (every request that reached them answered), then hold (later ones
        wait until the block ends). Yields the providers that did not settle within the
        case's timeout. (The case's processes are the caller's to stop: a journal's SQLite
        lock is not taken, since a stopped process may hold it.)"""
        unsettled = self.settle()
        with contextlib.ExitStack() as stack:
            for server in self.servers.values():
                stack.enter_context(server.held())
            yield unsettled

    def refusals(self) -> list[tuple[str, str, str, str]]:
        """``(provider, method, path, reason)`` of the requests the servers refused since the
        last call (see :meth:`_admitter`)."""
        new = []
        for name, server in self.servers.items():
            refused = server.refused
            seen = self._refusals_seen.get(name, 0)
            new += [(name, *entry) for entry in refused[seen:]]
            self._refusals_seen[name] = len(refused)
        return new

    # -- set-up -----------------------------------------------------------------------------

    def _set_up(self, signing_secret: str) -> None:
        from fake_providers import ProviderSettings

        for provider in self.providers.values():
            provider.keys.set_signing_secret(signing_secret)
        for spec in self.scenario.providers:
            self.providers[spec.name].settings.replace(
                ProviderSettings(
                    idempotency=spec.idempotency,
                    search_lag=spec.search_lag,
                    retention=spec.retention,
                )
            )
        for task_id, authority in self.scenario.authorities.items():
            self.store.set(task_id, authority, reason="initial authority")
            self._issue_key(authority)

    def describe(self) -> str:
        """One line for the timeline: how many messages, which providers."""
        providers = ", ".join(
            spec.name + ("" if spec.idempotent or spec.name != "payments" else " (no idempotency)")
            for spec in self.scenario.providers
        )
        said = f"{len(self.scenario.messages)} message(s); providers: {providers}"
        if self.scenario.incident is not None:
            said += f"; {self.scenario.incident.describe()}"
        return said

    def _issue_key(self, authority: Authority) -> None:
        from fake_providers import ApiKey

        key = ApiKey(key_secret(authority), authority.tenant_id, authority.credential_scope)
        for provider in self.providers.values():
            provider.keys.add(key)

    def _retire_key(self, authority: Authority) -> None:
        # One key per tenant and scope: it stays while any task's authority still uses it.
        secret = key_secret(authority)
        still_used = any(
            current is not None and key_secret(current) == secret
            for current in (self.store.current(task) for task in self.scenario.authorities)
        )
        if not still_used:
            for provider in self.providers.values():
                provider.keys.revoke(key_secret(authority))

    # -- changes between steps --------------------------------------------------------------

    def change_authority(self, task: str, change: str) -> str:
        """E: change the authority of ``task``; return what changed, for the timeline."""
        before = self.store.current(task)
        if before is None:
            return f"{task}: already revoked"
        if change == "revoke":
            self.store.revoke(task, reason="E: revoked")
        elif change == "narrow":
            narrowed = {s for s in before.credential_scope if not s.endswith(":write")}
            self.store.narrow_scope(task, narrowed, reason="E: write scopes withdrawn")
        elif change == "bump_policy":
            self.store.bump_policy(
                task, f"{before.policy_version}-next", reason="E: policy version bumped"
            )
        else:
            self.store.move_tenant(task, f"{before.tenant_id}-moved", reason="E: moved tenant")
        after = self.store.current(task)
        if after is not None:
            self._issue_key(after)
        self._retire_key(before)
        return (
            f"E: {change.replace('_', ' ')} for {task}: {authority_text(before)} -> "
            f"{authority_text(after)}"
        )

    def lift_faults(self) -> None:
        for provider in self.providers.values():
            provider.faults.lift()

    # -- reading ----------------------------------------------------------------------------

    def view(self) -> LedgerView:
        """The ledger the invariants read: the scenario's view, or the reference ledger (if
        the case's processes used it; a case without either has no ledger). A ledger the
        case's faults left unreadable reads as empty, and the first reason is kept in
        :attr:`unreadable` for the verdict."""
        if self.scenario.ledger_view is not None:
            return _Guarded(self.scenario.ledger_view(self.ctx), self)
        if "ledger" in self.ctx.__dict__ or self.env.ledger_path.exists():
            return _Guarded(self.ctx.ledger, self)
        return _NO_LEDGER

    def requests(self, deliveries: Mapping[str, int] | None = None) -> list[ProviderRequest]:
        """Every request every provider received, as its journal recorded it, attributed to
        the process whose credential it presented (``deliveries``: which message each worker
        process delivered) and to the authority that credential was issued for."""
        from .incident import read_incident

        readings, _rows = read_incident(self.env.run_dir.journals)
        # The processes that made an incident's objects in production (``incident.py``).
        deliveries = {
            **{f"{PRODUCTION}-{i}": i for i in range(len(self.scenario.messages))},
            **(deliveries or {}),
        }
        issued = {
            authority_fingerprint(change.authority): change.authority
            for change in self.store.changes()
            if change.authority is not None
        }
        out = []
        monotonic: list[int] = []
        for spec in self.env.providers:
            provider = self.providers[spec.name]
            journal = provider.journal
            notes = provider.notes()
            bodies = {effect.request_id: effect.body for effect in journal.effects()}
            for record in journal.requests():
                note = notes.get(record.request_id)
                if provider.is_model and record.fault:
                    note = f"{note or 'no answer'} [{_FAULTS.get(record.fault, record.fault)}]"
                process, authority = None, None
                if record.label:
                    process, _, fingerprint = record.label.rpartition(".")
                    authority = issued.get(fingerprint)
                message = deliveries.get(process or "")
                task = None if message is None else str(self.scenario.messages[message]["task_id"])
                reading = readings.get((spec.name, record.request_id), {})
                task = task or reading.get("task")
                out.append(
                    ProviderRequest(
                        provider=spec.name,
                        request_id=record.request_id,
                        at=record.time,
                        tenant_id=record.tenant_id,
                        scope=frozenset(record.scopes or ()),
                        kind=record.operation or record.kind or "",
                        operation_key=record.idempotency_key or record.correlation_id,
                        args_hash=record.args_hash,
                        payload_hash=record.payload_hash,
                        status=record.status or 0,
                        effect_applied=record.effect_applied,
                        idempotent=spec.idempotent,
                        object_id=record.object_id,
                        attempt_id=record.attempt_id,
                        process=process or None,
                        message=message,
                        task_id=task,
                        authority=authority,
                        aliases=tuple(record.aliases),
                        note=note,
                        body=bodies.get(record.request_id) if record.effect_applied else None,
                        fault=record.fault,
                        world_limit=record.world_limit,
                        journal_key=record.operation_key if record.kind == "write" else None,
                        reading=reading.get("text"),
                        history=bool(reading.get("history")),
                    )
                )
                monotonic.append(record.mono_ns or 0)
        # In the order they happened: by harness time, then by the machine's clock (within a
        # harness second, requests to several providers of one process).
        order = sorted(range(len(out)), key=lambda i: (out[i].at, monotonic[i]))
        return [out[i] for i in order]

    def state_lines(self) -> list[str]:
        """The final state without volatile ids: what two runs of a schedule must share."""
        view = self.view()
        # By creation time, else as the view lists them (a key may be random: never by key).
        attempts = sorted(view.attempts(), key=lambda a: a.created_at)
        names: dict[str, str] = {}

        def name(key: str | None) -> str:
            if key is None:
                return "-"
            return names.setdefault(key, f"k{len(names) + 1}")

        by_id = {a.attempt_id: a for a in attempts}
        lines = []
        for a in attempts:
            parent = by_id.get(a.parent_attempt_id or "")
            lines.append(
                f"attempt {name(a.idempotency_key)} task={a.task_id} tool={a.tool_name} "
                f"state={a.state.value} args={a.args_hash[:12]} tenant={a.authority.tenant_id} "
                f"scope='{a.authority.scope_text}' policy={a.authority.policy_version} "
                f"parent={name(parent.idempotency_key) if parent else '-'}"
            )
        # Effects by what they did, not by their payload: a payload may hold what differs
        # from run to run by design (a random key, a timestamp), not by recovery's doing.
        for spec in self.env.providers:
            for effect in self.providers[spec.name].journal.effects():
                key = name(effect.idempotency_key or effect.correlation_id)
                lines.append(
                    f"effect {spec.name} {effect.operation} key={key} tenant={effect.tenant_id}"
                )
        return lines

    def model_calls(self) -> list[ModelCall]:
        """Every answer the case's models made (or could not make), in order."""
        calls: list[ModelCall] = []
        for provider in self.providers.values():
            if provider.is_model:
                calls += provider.calls()  # type: ignore[attr-defined]
        return sorted(calls, key=lambda c: (c.time, c.seq))

    def authority_history(self) -> list[AuthorityChange]:
        return self.store.changes()


class _NoLedger:
    """The view of a case whose agent keeps no ledger the harness can read."""

    provides: frozenset[str] = frozenset()

    def attempts(self) -> list[Attempt]:
        return []

    def queue(self) -> list[QueueEntry]:
        return []

    def events(self) -> list[Event]:
        return []


_NO_LEDGER = _NoLedger()

_UNREADABLE = (LedgerError, sqlite3.DatabaseError)


class _Guarded:
    """A ledger view read after faults: what cannot be read (a record torn by a power loss
    and written over, a database file that is no longer one) reads as empty, and the first
    error is kept (``World.unreadable``): the verdict reports it, and the fault-free run
    raises it."""

    def __init__(self, view: LedgerView, world: World) -> None:
        self._view = view
        self._world = world

    def _read(self, read: Callable[[], Sequence[Any]]) -> Sequence[Any]:
        try:
            return read()
        except _UNREADABLE as exc:
            if self._world.unreadable is None and self._world.started:
                self._world.unreadable = exc
            return []

    def attempts(self) -> Sequence[Attempt]:
        return self._read(self._view.attempts)

    def queue(self) -> Sequence[QueueEntry]:
        return self._read(self._view.queue)

    def events(self) -> Sequence[Event]:
        return self._read(self._view.events)

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self._view, name)
        except _UNREADABLE as exc:  # ``provides`` reads the file too
            if self._world.unreadable is None:
                self._world.unreadable = exc
            raise AttributeError(name) from exc


def _preamble(request: httpx.Request, response: httpx.Response) -> bytes:
    """What the case's server tells a worker process before its response: hit B (a write the
    provider accepted and applied, or replayed) and count C (the response arrived; the kill,
    if any, comes at the worker's next fail point); before a model's answer that calls a
    tool, hit ``model.tool_call``. Only processes of the case, which hook their sockets, get
    it; the harness's own requests do not."""
    from fake_providers import PROVIDERS, ResponseInfo

    from ..._inject.failpoints import MODEL_POINT
    from ..._inject.wire import encode_preamble

    info = response.extensions.get("crashpoints")
    if not isinstance(info, ResponseInfo) or not info.label or info.plumbing:
        return b""
    process = info.label.rpartition(".")[0]
    if not process or process == "harness":
        return b""
    context: dict[str, object] = {}
    model = PROVIDERS.get(info.provider)
    if model is not None and model.is_model:
        # A model's answer is no provider's outcome (no C): the agent's point is the moment
        # it holds the model's choice of a tool, before anything of it is recorded.
        if not info.tool_calls:
            return b""
        context = {"provider": info.provider, "tools": ",".join(info.tool_calls)}
        return encode_preamble([MODEL_POINT], {"source": "server", **context})
    points = ["B", "C"] if info.kind == "write" and info.status < 400 else ["C"]
    context = {
        "source": "server",
        "provider": info.provider,
        "method": request.method,
        "path": request.url.path,
        "status_code": info.status,
        "operation": info.operation,
        "idempotency_key": info.idempotency_key,
    }
    return encode_preamble(points, context)


#: How a fault the provider's journal names reads in a timeline.
_FAULTS = {
    "response_lost": "answer lost: reset",
    "response_lost:timeout": "answer lost: timeout",
    "response_lost:502": "answer lost: 502",
    "write_timeout": "timed out before answering",
    "server_error": "refused: 5xx",
    "rate_limit": "refused: 429",
}


def authority_text(authority: Authority | None) -> str:
    if authority is None:
        return "revoked"
    return (
        f"tenant {authority.tenant_id}, scope '{authority.scope_text}', "
        f"policy {authority.policy_version}"
    )
