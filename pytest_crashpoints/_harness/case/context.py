"""What a worker and recovery get from the harness: the :class:`Context` of one case.

A case runs in a run directory (ledger, provider journals, authority store, clock) and has a
loopback HTTP server per provider. A :class:`CaseEnv` names both in a few picklable fields;
each worker process builds its own :class:`Context` from it, so nothing (no SQLite
connection, no client) crosses a fork or a spawn. The context hands out:

- ``ctx.base_url(provider)`` and ``ctx.api_key(provider, task_id)``: where a provider is and
  the credential this process uses for a task, for any HTTP client or SDK (also in the
  environment as ``CRASHPOINTS_<PROVIDER>_URL`` and ``CRASHPOINTS_<PROVIDER>_KEY``);
  ``ctx.smtp_address(provider)``: the host and port of a relay reached over SMTP (also
  ``CRASHPOINTS_<PROVIDER>_HOST`` and ``CRASHPOINTS_<PROVIDER>_PORT``);
- ``ctx.client(provider, task_id)``: an httpx client that reaches the provider in-process
  (``ctx.async_client(...)``: the same for async code);
- ``ctx.ledger``: the reference ledger of the case, on the harness clock;
- ``ctx.authority(task_id)``: the task's authority *now* (``None`` once revoked);
- ``ctx.tasks()`` and ``ctx.messages()``: the case's work, for recovery;
- ``ctx.adapters()`` and ``ctx.recover()``: the reference adapters and recovery.

Every credential is the harness's own, issued to this process for one authority: the
providers' journals record which process sent each request, so the harness never needs the
agent's payloads or ledger to know who did what.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._ledger.authority import Authority
from ...errors import CrashpointsError, UnknownTask

if TYPE_CHECKING:
    import httpx

    from fake_providers import HttpApi, McpServer, Provider

    from ..._agent.recovery import RecoveryAction, RecoveryPolicy
    from ..._ledger.sqlite import Ledger
    from ..._process.clock import HarnessClock
    from ..storage.authority_store import AuthorityStore
    from ..storage.rundir import RunDir

__all__ = [
    "CaseEnv",
    "Context",
    "ProviderSpec",
    "SEARCH_LAG",
    "authority_fingerprint",
    "credential_label",
    "key_secret",
    "make_provider",
]


#: How far (harness seconds) every provider's search lags behind its writes in a crash test,
#: unless its ``ProviderSpec`` says otherwise: as Stripe's search, SendGrid's activity and
#: GitHub's issue search do. A provider's normal behaviour, not a fault. (A fake provider built
#: by hand, outside a crash test, lags only when its ``ProviderSettings`` say so.)
SEARCH_LAG = 30.0


@dataclasses.dataclass(frozen=True)
class ProviderSpec:
    """A fake provider in a case, and how it behaves.

    ``name`` is a bundled provider's (``"payments"``, ``"email"``, ``"tickets"``,
    ``"deploy"``), or your own's with ``api``: the :class:`~fake_providers.HttpApi` that
    describes it (``ProviderSpec(chat.name, api=chat, search_lag=5.0)``; the marker also takes
    the ``HttpApi`` itself). ``idempotency=False`` simulates a provider without idempotency
    support (payments, or an API with an idempotency header); ``search_lag`` is how far
    (harness seconds) its searches lag behind writes: :data:`SEARCH_LAG` by default, the
    provider's normal eventual consistency, on in every case (the fault "search lag" that F
    brings makes it lag further, ``schedule.LAG_THAT_MATTERS``).
    """

    name: str
    idempotency: bool = True
    search_lag: float = SEARCH_LAG
    retention: float = 24 * 3600.0
    api: HttpApi | McpServer | None = None

    def __post_init__(self) -> None:
        if self.api is not None and self.api.name != self.name:
            raise CrashpointsError(
                f"ProviderSpec({self.name!r}, api={self.api!r}): the name must be the API's "
                f"own, {self.api.name!r}."
            )

    @property
    def idempotent(self) -> bool:
        """Whether the provider honours idempotency keys in this case."""
        if self.api is not None:
            return self.api.idempotency_header is not None and self.idempotency
        return self.name == "payments" and self.idempotency

    @property
    def has_lookup(self) -> bool:
        """Whether a client can ask the provider whether an effect happened."""
        if self.api is not None:
            return self.api.has_lookup
        from fake_providers import PROVIDERS

        return PROVIDERS[self.name].has_lookup

    @property
    def has_search(self) -> bool:
        """Whether the provider has a search that lags behind its writes."""
        if self.api is not None:
            return self.api.has_search
        from fake_providers import PROVIDERS

        return PROVIDERS[self.name].has_search

    @property
    def has_sessions(self) -> bool:
        """Whether the provider keeps sessions a fault can make it forget (an MCP server that
        is not stateless)."""
        return bool(getattr(self.api, "has_sessions", False))

    @property
    def speaks_smtp(self) -> bool:
        """Whether the provider is reached over SMTP (a mail relay), not HTTP."""
        if self.api is not None:
            return False
        from fake_providers import PROVIDERS

        return getattr(PROVIDERS[self.name], "protocol", "http") == "smtp"

    @property
    def stateless(self) -> bool:
        """Whether the provider is an MCP server deployed stateless: no session to forget."""
        return bool(getattr(self.api, "stateless", False))

    @property
    def duplicates_requests(self) -> bool:
        """Whether a request to the provider may arrive twice (an MCP server: a proxy's
        retry of the same JSON-RPC request)."""
        return bool(getattr(self.api, "duplicates_requests", False))

    @property
    def is_model(self) -> bool:
        """Whether the provider is a model (its answers are reads, generated from a script)."""
        if self.api is not None:
            return False
        from fake_providers import PROVIDERS

        return PROVIDERS[self.name].is_model

    @property
    def scopes(self) -> frozenset[str]:
        """Every scope the provider's operations need."""
        if self.api is not None:
            return self.api.scopes
        return frozenset({f"{self.name}:read", f"{self.name}:write"})


#: How long the reference adapters assume a provider's search may lag behind its writes, at
#: most (seconds), unless the case declares a longer lag: a search index can lag minutes.
SEARCH_CATCHES_UP = 300.0


def key_secret(authority: Authority) -> str:
    """The base API key the harness registers for an authority (one per tenant and scope).
    Processes never get it: each gets a key derived from it (:func:`credential_label`)."""
    digest = hashlib.sha256(f"{authority.tenant_id}|{authority.scope_text}".encode()).hexdigest()
    return f"sk_test_{authority.tenant_id}_{digest[:12]}"


def revoked_key(process: str, task_id: str) -> str:
    """The API key a process gets for a task whose authority was revoked: one no provider
    accepts (it answers 401, as a real provider answers a revoked key), so that a request
    made with it is refused, applies nothing and is no request of the task's."""
    digest = hashlib.sha256(f"{process}|{task_id}".encode()).hexdigest()
    return f"sk_revoked_{digest[:16]}"


def authority_fingerprint(authority: Authority) -> str:
    """A short, stable name of an authority (tenant, scope and policy version)."""
    text = f"{authority.tenant_id}|{authority.scope_text}|{authority.policy_version}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def credential_label(process: str, authority: Authority) -> str:
    """The label of the key a process gets for an authority: who, and under what."""
    return f"{process}.{authority_fingerprint(authority)}"


@dataclasses.dataclass(frozen=True)
class CaseEnv:
    """The run directory of a case, its providers and their servers: all a worker needs.

    ``urls`` maps each provider to the base URL of its loopback server (set when the case's
    world starts them); ``signing_secret`` derives each process's credentials; ``messages``
    are the case's messages (what recovery may need to know about its work).
    """

    root: str
    providers: tuple[ProviderSpec, ...]
    transport_points: tuple[str, ...] = ("B", "C")
    #: Seconds the harness's own HTTP clients and relays wait for a provider's answer. A
    #: provider always answers; this only bounds a broken one, so it is long enough for a
    #: machine shared with other jobs.
    http_timeout: float = 60.0
    urls: tuple[tuple[str, str], ...] = ()
    signing_secret: str = ""
    messages: tuple[Mapping[str, Any], ...] = ()
    #: The case's own ``redis-server`` (``unix:///...``), when the test asks for one.
    redis_url: str = ""
    #: The case's databases in a database server (``Scenario.databases``): each names the
    #: case's database from the run directory, so a copy of the case reaches its copy.
    databases: tuple[Any, ...] = ()

    def database_urls(self) -> tuple[str, ...]:
        """The URL of each database of the case (``postgresql://...``), in order."""
        return tuple(
            str(database.url(self.path)) for database in self.databases
            if callable(getattr(database, "url", None))
        )

    @property
    def path(self) -> Path:
        return Path(self.root)

    @property
    def run_dir(self) -> RunDir:
        """The run directory's layout (one place names every file in it)."""
        from ..storage.rundir import RunDir

        return RunDir(self.path)

    @property
    def ledger_path(self) -> Path:
        return self.run_dir.ledger_path

    @property
    def clock_path(self) -> Path:
        return self.run_dir.clock_path

    @property
    def authority_path(self) -> Path:
        return self.run_dir.authority_path

    def journal_path(self, provider: str) -> Path:
        return self.run_dir.journals / f"{provider}.sqlite3"

    def spec(self, provider: str) -> ProviderSpec:
        for spec in self.providers:
            if spec.name == provider:
                return spec
        names = ", ".join(s.name for s in self.providers) or "none"
        raise CrashpointsError(
            f"provider {provider!r} is not part of this case (it has: {names}); add it to the "
            "marker's providers=."
        )

    def url(self, provider: str) -> str:
        """The base URL of ``provider``'s loopback server."""
        self.spec(provider)
        for name, url in self.urls:
            if name == provider:
                return url
        raise CrashpointsError(
            f"the loopback server of {provider!r} is not running (this process is not part of "
            "a running case)."
        )

    @property
    def tasks(self) -> tuple[str, ...]:
        """The case's task ids, in the order their first message comes."""
        return tuple(dict.fromkeys(str(m["task_id"]) for m in self.messages))


def make_provider(env: CaseEnv, spec: ProviderSpec, clock: HarnessClock) -> Provider:
    """Open (or create) the fake provider of ``spec`` over its journal in ``env``."""
    if spec.api is not None:
        return spec.api.provider(env.journal_path(spec.name), clock=clock.now, epoch=clock.epoch)
    from fake_providers import PROVIDERS

    return PROVIDERS[spec.name](env.journal_path(spec.name), clock=clock.now, epoch=clock.epoch)


def _env_name(provider: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in provider.upper())


class Context:
    """The harness, as seen from inside one worker or recovery process.

    ``task_id`` is the task of the message a worker delivers (``None`` in recovery).
    """

    def __init__(self, env: CaseEnv, worker_id: str, *, task_id: str | None = None) -> None:
        self.env = env
        self.worker_id = worker_id
        self.task_id = task_id
        self._clients: dict[tuple[str, Authority], httpx.Client] = {}

    @cached_property
    def clock(self) -> HarnessClock:
        from ..._process.clock import HarnessClock

        return HarnessClock(self.env.clock_path)

    def now(self) -> float:
        """Harness time, in seconds."""
        return self.clock.now()

    @cached_property
    def ledger(self) -> Ledger:
        """The case's reference ledger, on the harness clock."""
        from ..._ledger.sqlite import Ledger

        return Ledger(self.env.ledger_path, clock=self.clock.now)

    @cached_property
    def _authorities(self) -> AuthorityStore:
        from ..storage.authority_store import AuthorityStore

        return AuthorityStore(self.env.authority_path, clock=self.clock.now, create=False)

    def authority(self, task_id: str) -> Authority | None:
        """The authority ``task_id`` holds now; ``None`` once it was revoked."""
        return self._authorities.current(task_id)

    def _revoked(self, task_id: str) -> bool:
        """Whether ``task_id`` held an authority that was revoked (not: was never granted)."""
        try:
            return self.authority(task_id) is None
        except UnknownTask:
            return False

    def authority_at(self, task_id: str, at: float) -> Authority | None:
        """The authority ``task_id`` held at time ``at`` (for ledger views whose table does
        not store it). ``at`` is harness seconds (``ctx.now()``) or, for a ledger stamped
        with ``time.time()`` inside a worker, the pinned wall time: both are understood."""
        epoch = self.clock.epoch()
        if at >= epoch:
            at -= epoch
        held = None
        for change in self._authorities.changes(task_id):
            if change.at <= at:
                held = change.authority
        return held

    # -- the case's work --------------------------------------------------------------------

    def tasks(self) -> list[str]:
        """The case's task ids (recovery's work is theirs), in message order; in a case with
        no messages (an incident reproduced by its recovery alone), every task the harness
        gave an authority, in the order it did."""
        if self.env.messages:
            return list(self.env.tasks)
        return list(dict.fromkeys(change.task_id for change in self._authorities.changes()))

    def messages(self) -> list[Mapping[str, Any]]:
        """The case's messages, in delivery order."""
        return list(self.env.messages)

    # -- reaching the providers -------------------------------------------------------------

    def _authority_for(self, what: str, task_or_authority: str | Authority) -> Authority:
        if isinstance(task_or_authority, Authority):
            return task_or_authority
        if task_or_authority is None:
            raise CrashpointsError(
                f"{what}: an Authority or a task id is needed, not None; ctx.authority(task_id) "
                "returns None once the task's authority was revoked, and nothing may be sent "
                "for it then."
            )
        if not isinstance(task_or_authority, str):
            raise CrashpointsError(
                f"{what}: {task_or_authority!r} is neither a task id nor an Authority; pass the "
                "task the request is for, e.g. ctx.client('email', message['task_id'])."
            )
        authority = self.authority(task_or_authority)
        if authority is None:
            raise CrashpointsError(
                f"{what}: task {task_or_authority!r} has no authority any more (it was "
                "revoked, or never granted): nothing may be sent for it. Check "
                "ctx.authority(task_id) first, and record why the work was not done."
            )
        return authority

    def base_url(self, provider: str) -> str:
        """The base URL of ``provider``'s loopback server, for any HTTP client or SDK."""
        return self.env.url(provider)

    @property
    def redis_url(self) -> str:
        """The URL of the case's own ``redis-server`` (``unix:///.../redis.sock``, for
        ``redis.Redis.from_url``), started for each case by ``crashpoints.run(..., redis=...)``.
        Raises :class:`CrashpointsError` when the test did not ask for one."""
        if not self.env.redis_url:
            raise CrashpointsError(
                "this case has no Redis of its own; pass redis=True (Redis's default "
                "persistence) or redis={...redis.conf directives...} to crashpoints.run."
            )
        return self.env.redis_url

    def smtp_address(self, provider: str = "smtp") -> tuple[str, int]:
        """``(host, port)`` of the SMTP server of ``provider``, a relay reached over SMTP (the
        ``smtp`` provider), for ``smtplib.SMTP(host, port)`` or Django's ``EMAIL_HOST`` and
        ``EMAIL_PORT``. Log in with any user name and ``ctx.api_key(provider, task_id)`` as the
        password. Raises :class:`CrashpointsError` for a provider that speaks HTTP."""
        if not self.env.spec(provider).speaks_smtp:
            raise CrashpointsError(
                f"provider {provider!r} speaks HTTP, not SMTP: reach it at "
                f"ctx.base_url({provider!r})."
            )
        import urllib.parse

        parts = urllib.parse.urlsplit(self.env.url(provider))
        return parts.hostname or "127.0.0.1", int(parts.port or 25)

    def api_key(self, provider: str, task_or_authority: str | Authority) -> str:
        """The API key this process uses at ``provider`` for a task (its authority now) or
        for an explicit :class:`Authority`. For a task whose authority was revoked, a key the
        provider refuses (401), as a real provider refuses a revoked key: the work that
        asked for it may still record why nothing was sent. Raises :class:`CrashpointsError`
        for a task never granted an authority."""
        import fake_providers

        self.env.spec(provider)
        if isinstance(task_or_authority, str) and self._revoked(task_or_authority):
            return revoked_key(self.worker_id, task_or_authority)
        authority = self._authority_for(f"ctx.api_key({provider!r}, ...)", task_or_authority)
        return fake_providers.derive_key(
            key_secret(authority),
            credential_label(self.worker_id, authority),
            signing_secret=self.env.signing_secret,
        )

    def sdk_env(self, task_id: str | None = None) -> dict[str, str]:
        """Environment variables for an SDK, for ``task_id`` (default: this worker's task):
        ``CRASHPOINTS_<PROVIDER>_URL`` and ``CRASHPOINTS_<PROVIDER>_KEY`` for each provider
        of the case (for one reached over SMTP, also ``CRASHPOINTS_<PROVIDER>_HOST`` and
        ``CRASHPOINTS_<PROVIDER>_PORT``), ``CRASHPOINTS_RUN_DIR``, ``CRASHPOINTS_PROCESS``,
        ``CRASHPOINTS_REDIS_URL`` (``ctx.redis_url``, with the case's own Redis),
        ``CRASHPOINTS_DATABASE_URL`` (the ``postgresql://`` URL of the case's database, with
        ``databases=``; with several, also ``CRASHPOINTS_DATABASE_URL_1``, ``_2``... in
        their order) and, with a task, ``CRASHPOINTS_TASK_ID``. Without a task (recovery),
        the keys are set only when every task of the case holds the same authority. With the
        ``model`` provider, also the variables the OpenAI and Anthropic SDKs read:
        ``OPENAI_BASE_URL`` (its ``/v1``), ``OPENAI_API_KEY``, ``ANTHROPIC_BASE_URL`` and
        ``ANTHROPIC_API_KEY``."""
        task = task_id if task_id is not None else self.task_id
        env = {"CRASHPOINTS_RUN_DIR": str(self.env.path), "CRASHPOINTS_PROCESS": self.worker_id}
        if self.env.redis_url:
            env["CRASHPOINTS_REDIS_URL"] = self.env.redis_url
        urls = self.env.database_urls()
        for number, url in enumerate(urls, start=1):
            if number == 1:
                env["CRASHPOINTS_DATABASE_URL"] = url
            if len(urls) > 1:
                env[f"CRASHPOINTS_DATABASE_URL_{number}"] = url
        authority: Authority | None = None
        revoked = False
        if task is not None:
            env["CRASHPOINTS_TASK_ID"] = task
            authority = self.authority(task)
            revoked = self._revoked(task)
        else:
            held = {self.authority(t) for t in self.env.tasks}
            if len(held) == 1:
                authority = held.pop()
        for spec in self.env.providers:
            name = _env_name(spec.name)
            if self.env.urls:
                env[f"CRASHPOINTS_{name}_URL"] = self.env.url(spec.name)
                if spec.speaks_smtp:
                    host, port = self.smtp_address(spec.name)
                    env[f"CRASHPOINTS_{name}_HOST"] = host
                    env[f"CRASHPOINTS_{name}_PORT"] = str(port)
            if authority is not None:
                env[f"CRASHPOINTS_{name}_KEY"] = self.api_key(spec.name, authority)
            elif revoked and task is not None:
                env[f"CRASHPOINTS_{name}_KEY"] = self.api_key(spec.name, task)
            if spec.is_model:
                # What an SDK or a framework built on one reads when nobody passes it a URL.
                if self.env.urls:
                    env["OPENAI_BASE_URL"] = self.env.url(spec.name) + "/v1"
                    env["ANTHROPIC_BASE_URL"] = self.env.url(spec.name)
                if authority is not None or revoked:
                    env["OPENAI_API_KEY"] = env["ANTHROPIC_API_KEY"] = env[
                        f"CRASHPOINTS_{name}_KEY"
                    ]
        return env

    @cached_property
    def _providers(self) -> dict[str, Provider]:
        return {spec.name: make_provider(self.env, spec, self.clock) for spec in self.env.providers}

    def client(self, provider: str, task_or_authority: str | Authority) -> httpx.Client:
        """An httpx client for ``provider``, authenticated for a task (its authority now) or
        an explicit :class:`Authority`, whose transport reaches the fake provider in-process
        and carries the crash points of the case's ``transport_points``. The ``model``
        answers from the script the harness holds: its client reaches the case's server."""
        authority = self._authority_for(f"ctx.client({provider!r}, ...)", task_or_authority)
        self._speaks_http(provider, "client")
        cached = self._clients.get((provider, authority))
        if cached is not None:
            return cached
        import httpx

        import fake_providers

        from ..._inject.transport import CrashTransport

        if self.env.spec(provider).is_model:
            # The model answers from the script the harness holds: reach it where it serves.
            client = httpx.Client(
                base_url=self.base_url(provider),
                headers={"Authorization": f"Bearer {self.api_key(provider, authority)}"},
                timeout=self.env.http_timeout,
            )
            self._clients[(provider, authority)] = client
            return client
        target = self._providers[provider]
        client = httpx.Client(
            base_url=target.base_url,
            transport=CrashTransport(
                fake_providers.transport(target), points=self.env.transport_points
            ),
            headers={"Authorization": f"Bearer {self.api_key(provider, authority)}"},
            timeout=self.env.http_timeout,
        )
        self._clients[(provider, authority)] = client
        return client

    def async_client(self, provider: str, task_or_authority: str | Authority) -> httpx.AsyncClient:
        """An ``httpx.AsyncClient`` for ``provider``, as :meth:`client` but for async code:
        in-process, authenticated for the task, through the async crash transport. A new
        client per call: use it in ``async with`` (or close it with ``await
        client.aclose()``)."""
        authority = self._authority_for(f"ctx.async_client({provider!r}, ...)", task_or_authority)
        self._speaks_http(provider, "async_client")
        import httpx

        import fake_providers

        from ..._inject.transport import AsyncCrashTransport

        if self.env.spec(provider).is_model:
            # The model answers from the script the harness holds: reach it where it serves.
            return httpx.AsyncClient(
                base_url=self.base_url(provider),
                headers={"Authorization": f"Bearer {self.api_key(provider, authority)}"},
                timeout=self.env.http_timeout,
            )
        target = self._providers[provider]
        return httpx.AsyncClient(
            base_url=target.base_url,
            transport=AsyncCrashTransport(
                fake_providers.transport(target), points=self.env.transport_points
            ),
            headers={"Authorization": f"Bearer {self.api_key(provider, authority)}"},
            timeout=self.env.http_timeout,
        )

    def _speaks_http(self, provider: str, method: str) -> None:
        if self.env.spec(provider).speaks_smtp:
            raise CrashpointsError(
                f"ctx.{method}({provider!r}, ...): {provider!r} is a mail relay reached over "
                f"SMTP, not HTTP; connect an SMTP client to ctx.smtp_address({provider!r}) and "
                f"log in with ctx.api_key({provider!r}, task_id) as the password."
            )

    def adapters(self, *, search_lag_bound: float | None = None) -> dict[str, Any]:
        """The reference adapter of each provider of the case, keyed by tool name.

        ``search_lag_bound``: how old a send must be before a search that does not show it
        proves it absent (default: twice the longest declared lag, and at least 300 s)."""
        from ..._agent.adapters import reference_adapters

        specs = {spec.name: spec for spec in self.env.providers}
        lag = search_lag_bound
        if lag is None:
            declared = 2 * max((spec.search_lag for spec in specs.values()), default=0.0)
            lag = max(declared, SEARCH_CATCHES_UP)
        clients = {name: _ClientFor(self, name) for name in specs}
        payments = specs.get("payments")
        return reference_adapters(
            clients,
            now=self.now,
            payments_idempotent=payments is None or payments.idempotent,
            search_lag_bound=lag,
        )

    def recover(
        self,
        adapters: Mapping[str, Any] | None = None,
        *,
        policy: RecoveryPolicy | None = None,
    ) -> list[RecoveryAction]:
        """Run the reference recovery on this case's ledger as this process."""
        from ..._agent.recovery import recover

        return recover(
            self.ledger,
            adapters if adapters is not None else self.adapters(),
            owner=self.worker_id,
            current_authority=lambda attempt: self.authority(attempt.task_id),
            policy=policy,
        )

    def close(self) -> None:
        """Close this process's clients and connections."""
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        if "ledger" in self.__dict__:
            self.ledger.close()
        if "_providers" in self.__dict__:
            for provider in self._providers.values():
                provider.close()


@dataclasses.dataclass(frozen=True)
class _ClientFor:
    context: Context
    provider: str

    def __call__(self, authority: Authority) -> httpx.Client:
        if not isinstance(authority, Authority):
            raise CrashpointsError(
                f"an adapter of {self.provider!r} asked for a client with {authority!r}: an "
                "Authority is needed; ctx.authority(task_id) returns None once the task's "
                "authority was revoked, and nothing may be sent for it then."
            )
        return self.context.client(self.provider, authority)
