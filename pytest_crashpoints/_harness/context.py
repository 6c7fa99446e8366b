"""What a worker and recovery get from the harness: the :class:`Context` of one case.

A case runs in a run directory (ledger, provider journals, authority store, clock). A
:class:`CaseEnv` names it in a few picklable fields; each worker process builds its own
:class:`Context` from it, so nothing (no SQLite connection, no client) crosses a fork or a
spawn. The context hands out:

- ``ctx.ledger``: the reference ledger of the case, on the harness clock;
- ``ctx.client(provider, authority)``: an httpx client for a fake provider, authenticated with
  the API key of that authority, through the crash transport (points B and C);
- ``ctx.authority(task_id)``: the task's authority *now* (``None`` once revoked);
- ``ctx.adapters()``: the reference adapters for the case's providers;
- ``ctx.recover()``: the reference recovery, reading the current authority.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._ledger.authority import Authority
from ..errors import CrashpointsError

if TYPE_CHECKING:
    import httpx

    from fake_providers import Provider

    from .._agent.recovery import RecoveryAction, RecoveryPolicy
    from .._ledger.sqlite import Ledger
    from .._process.clock import HarnessClock
    from .authority_store import AuthorityStore
    from .rundir import RunDir

__all__ = ["CaseEnv", "Context", "ProviderSpec", "key_secret", "make_provider"]

@dataclasses.dataclass(frozen=True)
class ProviderSpec:
    """A fake provider in a case, and how it behaves.

    ``idempotency`` (payments only) simulates a provider without idempotency support when
    False; ``search_lag`` is how far (harness seconds) its searches lag behind writes.
    """

    name: str
    idempotency: bool = True
    search_lag: float = 30.0
    retention: float = 24 * 3600.0

    @property
    def idempotent(self) -> bool:
        return self.name == "payments" and self.idempotency


def key_secret(authority: Authority) -> str:
    """The API key the harness issues for an authority (one per tenant and scope)."""
    digest = hashlib.sha256(f"{authority.tenant_id}|{authority.scope_text}".encode()).hexdigest()
    return f"sk_test_{authority.tenant_id}_{digest[:12]}"


@dataclasses.dataclass(frozen=True)
class CaseEnv:
    """The run directory of a case and its providers: all a worker process needs."""

    root: str
    providers: tuple[ProviderSpec, ...]
    transport_points: tuple[str, ...] = ("B", "C")
    http_timeout: float = 10.0

    @property
    def path(self) -> Path:
        return Path(self.root)

    @property
    def run_dir(self) -> RunDir:
        """The run directory's layout (one place names every file in it)."""
        from .rundir import RunDir

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
        raise KeyError(f"provider {provider!r} is not part of this case (it has: {names})")


def make_provider(env: CaseEnv, spec: ProviderSpec, clock: HarnessClock) -> Provider:
    """Open (or create) the fake provider of ``spec`` over its journal in ``env``."""
    from fake_providers import PROVIDERS

    return PROVIDERS[spec.name](env.journal_path(spec.name), clock=clock.now)


class Context:
    """The harness, as seen from inside one worker or recovery process."""

    def __init__(self, env: CaseEnv, worker_id: str) -> None:
        self.env = env
        self.worker_id = worker_id
        self._clients: dict[tuple[str, Authority], httpx.Client] = {}

    @cached_property
    def clock(self) -> HarnessClock:
        from .._process.clock import HarnessClock

        return HarnessClock(self.env.clock_path)

    def now(self) -> float:
        """Harness time, in seconds."""
        return self.clock.now()

    @cached_property
    def ledger(self) -> Ledger:
        """The case's reference ledger, on the harness clock."""
        from .._ledger.sqlite import Ledger

        return Ledger(self.env.ledger_path, clock=self.clock.now)

    @cached_property
    def _authorities(self) -> AuthorityStore:
        from .authority_store import AuthorityStore

        return AuthorityStore(self.env.authority_path, clock=self.clock.now)

    def authority(self, task_id: str) -> Authority | None:
        """The authority ``task_id`` holds now; ``None`` once it was revoked."""
        return self._authorities.current(task_id)

    def authority_at(self, task_id: str, at: float) -> Authority | None:
        """The authority ``task_id`` held at time ``at`` (for ledger views whose table does
        not store it). ``at`` is harness seconds (``ctx.now()``) or, for a ledger stamped
        with ``time.time()`` inside a worker, the pinned wall time: both are understood."""
        from .._process.clock import HARNESS_EPOCH

        epoch = HARNESS_EPOCH.timestamp()
        if at >= epoch:
            at -= epoch
        held = None
        for change in self._authorities.changes(task_id):
            if change.at <= at:
                held = change.authority
        return held

    @cached_property
    def _providers(self) -> dict[str, Provider]:
        return {spec.name: make_provider(self.env, spec, self.clock) for spec in self.env.providers}

    def client(self, provider: str, authority: Authority) -> httpx.Client:
        """An httpx client for ``provider``, authenticated as ``authority``, whose transport
        reaches the fake provider in-process and carries the crash points B and C."""
        if not isinstance(authority, Authority):
            raise CrashpointsError(
                f"ctx.client({provider!r}, {authority!r}): an Authority is needed; "
                "ctx.authority(task_id) returns None once the task's authority was revoked, "
                "and nothing may be sent for it then."
            )
        cached = self._clients.get((provider, authority))
        if cached is not None:
            return cached
        import httpx

        import fake_providers

        from .._inject.transport import CrashTransport

        self.env.spec(provider)
        target = self._providers[provider]
        client = httpx.Client(
            base_url=target.base_url,
            transport=CrashTransport(
                fake_providers.transport(target), points=self.env.transport_points
            ),
            headers={"Authorization": f"Bearer {key_secret(authority)}"},
            timeout=self.env.http_timeout,
        )
        self._clients[(provider, authority)] = client
        return client

    def adapters(self, *, search_lag_bound: float | None = None) -> dict[str, Any]:
        """The reference adapter of each provider of the case, keyed by tool name."""
        from .._agent.adapters import reference_adapters

        specs = {spec.name: spec for spec in self.env.providers}
        lag = search_lag_bound
        if lag is None:
            lag = 2 * max((spec.search_lag for spec in specs.values()), default=0.0)
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
        from .._agent.recovery import recover

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
        return self.context.client(self.provider, authority)
