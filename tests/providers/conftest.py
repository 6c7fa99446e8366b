"""Fixtures for the fake providers: each semantic is checked in-process and over loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from fake_providers import (
    ApiKey,
    Deploy,
    Email,
    Payments,
    Provider,
    Tickets,
    derive_key,
    serve,
    transport,
)
from tests.conftest import ManualClock

Connect = Callable[[Provider], httpx.Client]


def keys_for(name: str) -> list[ApiKey]:
    """Three keys per provider: writer and reader of tenant-a, writer of tenant-b."""
    return [
        ApiKey(f"{name}-writer-a", "tenant-a", frozenset({f"{name}:write"})),
        ApiKey(f"{name}-reader-a", "tenant-a", frozenset({f"{name}:read"})),
        ApiKey(f"{name}-writer-b", "tenant-b", frozenset({f"{name}:write"})),
    ]


def auth(secret: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}", **headers}


@pytest.fixture(params=["inprocess", "loopback"])
def way(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def connect(way: str) -> Iterator[Connect]:
    """Open an httpx client to a provider, in-process (MockTransport) or over loopback."""
    with ExitStack() as stack:

        def open_client(provider: Provider) -> httpx.Client:
            if way == "inprocess":
                client = httpx.Client(transport=transport(provider), base_url=provider.base_url)
            else:
                url = stack.enter_context(serve(provider))
                client = httpx.Client(base_url=url)
            return stack.enter_context(client)

        yield open_client


def _provider_fixture(cls: type[Provider]) -> Any:
    """A fixture named for ``cls``'s provider: a fresh one in the test's folder, on the
    test's clock, with :func:`keys_for` its keys; closed after the test."""

    @pytest.fixture(name=cls.name)
    def provider(tmp_path: Path, clock: ManualClock) -> Iterator[Provider]:
        provider = cls(tmp_path / f"{cls.name}.sqlite3", clock=clock, keys=keys_for(cls.name))
        yield provider
        provider.close()

    return provider


payments = _provider_fixture(Payments)
email = _provider_fixture(Email)
tickets = _provider_fixture(Tickets)
deploy = _provider_fixture(Deploy)


SIGNING_SECRET = "case-signing-secret"


def derived(provider: Provider, label: str, base: str = "") -> str:
    """The key derived for ``label`` from ``base`` (by default the provider's writer of
    tenant-a) under :data:`SIGNING_SECRET`; the provider's own secret is left as it is."""
    return derive_key(base or f"{provider.name}-writer-a", label, signing_secret=SIGNING_SECRET)


def issue_derived(provider: Provider, label: str) -> str:
    """Sign ``provider``'s derived keys with :data:`SIGNING_SECRET`, as the harness does for a
    case, and issue the key of ``label`` derived from its writer of tenant-a."""
    provider.keys.set_signing_secret(SIGNING_SECRET)
    return derived(provider, label)


def send_write(name: str, client: httpx.Client, secret: str, **headers: str) -> httpx.Response:
    """One valid write to provider ``name``, presenting ``secret``, with no crashpoints_*
    marker, correlation id or attempt header anywhere in it."""
    headers = auth(secret, **headers)
    if name == "payments":
        return client.post("/v1/charges", data={"amount": "700", "currency": "usd"},
                           headers=headers)
    if name == "email":
        return client.post("/v3/mail/send", headers=headers, json={
            "personalizations": [{"to": [{"email": "b@example.com"}]}],
            "from": {"email": "a@example.com"}, "subject": "s",
            "content": [{"type": "text/plain", "value": "v"}]})
    if name == "tickets":
        return client.post("/repos/tenant-a/ops/issues", json={"title": "t"}, headers=headers)
    assert name == "deploy"
    return client.post("/v1/deployments", headers=headers, json={
        "service": "s", "version": "v", "environment": "e"})


def post_bad_input(
    provider: Provider, client: httpx.Client, path: str, content: bytes, content_type: str
) -> httpx.Response:
    """POST ``content`` as ``content_type`` to ``path`` with the writer key of tenant-a, and
    check that it is refused with a 400 that applied nothing; the answer, for the caller to
    check the provider's own error format."""
    headers = auth(f"{provider.name}-writer-a", **{"Content-Type": content_type})
    reply = client.post(path, content=content, headers=headers)
    assert reply.status_code == 400
    assert provider.journal.effects() == []
    return reply
