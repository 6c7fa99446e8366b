"""Fixtures for the fake providers: each semantic is checked in-process and over loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from fake_providers import ApiKey, Deploy, Email, Payments, Provider, Tickets, serve, transport
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


def _make(cls: type[Provider], tmp_path: Path, clock: ManualClock) -> Iterator[Provider]:
    provider = cls(tmp_path / f"{cls.name}.sqlite3", clock=clock, keys=keys_for(cls.name))
    yield provider
    provider.close()


@pytest.fixture
def payments(tmp_path: Path, clock: ManualClock) -> Iterator[Provider]:
    yield from _make(Payments, tmp_path, clock)


@pytest.fixture
def email(tmp_path: Path, clock: ManualClock) -> Iterator[Provider]:
    yield from _make(Email, tmp_path, clock)


@pytest.fixture
def tickets(tmp_path: Path, clock: ManualClock) -> Iterator[Provider]:
    yield from _make(Tickets, tmp_path, clock)


@pytest.fixture
def deploy(tmp_path: Path, clock: ManualClock) -> Iterator[Provider]:
    yield from _make(Deploy, tmp_path, clock)


SIGNING_SECRET = "case-signing-secret"


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
