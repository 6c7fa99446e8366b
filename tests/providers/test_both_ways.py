"""One implementation, two ways in: the same requests get the same answers."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from respx.models import AllMockedAssertionError

from fake_providers import Deploy, Email, Payments, Provider, Tickets, mock, serve, transport
from tests.conftest import ManualClock

from .conftest import keys_for
from .test_faults import LOOKUPS, WRITES

KINDS: dict[str, type[Provider]] = {
    "payments": Payments, "email": Email, "tickets": Tickets, "deploy": Deploy}
SAME_HEADERS = ("content-type", "request-id", "x-request-id", "x-github-request-id",
                "x-message-id", "idempotent-replayed", "retry-after")


Answer = tuple[int, bytes, dict[str, str]]


def answers(client: httpx.Client, name: str, origin: str) -> list[Answer]:
    sends = [WRITES[name], WRITES[name]]
    if name in LOOKUPS:
        sends.append(LOOKUPS[name])
    sends.append(lambda c: c.get("/nowhere"))
    out = []
    for send in sends:
        reply = send(client)
        headers = {k: v for k, v in reply.headers.items() if k in SAME_HEADERS}
        out.append((reply.status_code, reply.content.replace(origin.encode(), b"ORIGIN"), headers))
    return out


@pytest.mark.parametrize("name", sorted(KINDS))
def test_same_requests_same_answers(tmp_path: Path, clock: ManualClock, name: str) -> None:
    cls = KINDS[name]
    inproc = cls(tmp_path / "a.sqlite3", clock=clock, keys=keys_for(name))
    loop = cls(tmp_path / "b.sqlite3", clock=clock, keys=keys_for(name))
    try:
        with httpx.Client(transport=transport(inproc), base_url=inproc.base_url) as client:
            first = answers(client, name, inproc.base_url)
        with serve(loop) as url, httpx.Client(base_url=url) as client:
            second = answers(client, name, url)
        assert first == second
        assert [e.body for e in inproc.journal.effects()] == [
            e.body for e in loop.journal.effects()]
    finally:
        inproc.close()
        loop.close()


def test_mock_routes_each_provider_and_can_pass_the_rest_through(
    payments: Provider, email: Provider
) -> None:
    with serve(email) as url, mock(payments, assert_all_mocked=False), httpx.Client() as client:
        with httpx.Client(base_url=payments.base_url) as to_payments:
            assert WRITES["payments"](to_payments).status_code == 200
        sent = client.post(f"{url}/v3/mail/send", content=b"{", headers={
            "Authorization": "Bearer email-writer-a", "Content-Type": "application/json"})
        assert sent.status_code == 400  # answered by the loopback server, not by respx
    with mock(payments), httpx.Client() as client, pytest.raises(AllMockedAssertionError):
        client.get("https://elsewhere.test/")


def test_transport_refuses_urls_no_provider_serves(payments: Provider) -> None:
    with (
        httpx.Client(transport=transport(payments)) as client,
        pytest.raises(httpx.ConnectError, match="no fake provider serves"),
    ):
        client.get("https://elsewhere.test/v1/charges")
