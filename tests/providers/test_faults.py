"""Every fault switch, its counter, and lifting it; in-process and over loopback."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from fake_providers import Email, Payments, Provider, Tickets
from tests.conftest import ManualClock

from .conftest import Connect, auth, keys_for

Send = Callable[[httpx.Client], httpx.Response]

WRITES: dict[str, Send] = {
    "payments": lambda c: c.post("/v1/charges", data={"amount": "5", "currency": "usd"},
                                 headers=auth("payments-writer-a")),
    "email": lambda c: c.post("/v3/mail/send", headers=auth("email-writer-a"), json={
        "personalizations": [{"to": [{"email": "b@example.com"}]}],
        "from": {"email": "a@example.com"}, "subject": "s",
        "content": [{"type": "text/plain", "value": "v"}]}),
    "tickets": lambda c: c.post("/repos/tenant-a/ops/issues", json={"title": "t"},
                                headers=auth("tickets-writer-a")),
    "deploy": lambda c: c.post("/v1/deployments", headers=auth("deploy-writer-a"), json={
        "service": "s", "version": "v", "environment": "e"}),
}
LOOKUPS: dict[str, Send] = {
    "payments": lambda c: c.get("/v1/charges/search", params={"query": "currency:'usd'"},
                                headers=auth("payments-reader-a")),
    "email": lambda c: c.get("/v3/messages/msg_x", headers=auth("email-reader-a")),
    "tickets": lambda c: c.get("/repos/tenant-a/ops/issues/1", headers=auth("tickets-reader-a")),
}


@pytest.fixture(params=["payments", "email", "tickets", "deploy"])
def provider(request: pytest.FixtureRequest) -> Provider:
    return request.getfixturevalue(str(request.param))  # type: ignore[no-any-return]


def lost(way: str) -> type[Exception]:
    return httpx.RemoteProtocolError if way == "inprocess" else httpx.TransportError


@pytest.mark.parametrize("name", sorted(LOOKUPS))
def test_lookup_timeouts_for_n_calls_then_until_lifted(
    request: pytest.FixtureRequest, connect: Connect, way: str, name: str
) -> None:
    provider: Provider = request.getfixturevalue(name)
    client = connect(provider)
    lookup, write = LOOKUPS[name], WRITES[name]
    timeout = httpx.ReadTimeout if way == "inprocess" else httpx.TransportError
    provider.faults.lookup_timeouts(2)
    assert write(client).status_code in (200, 201, 202)  # writes are not lookups
    for _ in range(2):
        with pytest.raises(timeout):
            lookup(client)
    assert lookup(client).status_code in (200, 404)
    provider.faults.lookup_timeouts()
    for _ in range(3):
        with pytest.raises(timeout):
            lookup(client)
    assert provider.faults.active()["lookup_timeout"].remaining is None
    provider.faults.lift("lookup_timeout")
    assert lookup(client).status_code in (200, 404)
    timed_out = [r for r in provider.journal.requests() if r.fault == "lookup_timeout"]
    assert len(timed_out) == 5 and {r.status for r in timed_out} == {None}


def test_server_errors_apply_nothing(provider: Provider, connect: Connect) -> None:
    client = connect(provider)
    write = WRITES[provider.name]
    provider.faults.server_errors(1, status=503)
    reply = write(client)
    assert reply.status_code == 503 and reply.content  # an error body in the provider's format
    assert provider.journal.effects() == []
    assert write(client).status_code in (200, 201, 202)
    provider.faults.server_errors(on="writes")
    assert [write(client).status_code for _ in range(2)] == [500, 500]
    if provider.name in LOOKUPS:
        assert LOOKUPS[provider.name](client).status_code in (200, 404)
    provider.faults.lift()
    assert write(client).status_code in (200, 201, 202)
    assert len(provider.journal.effects()) == 2
    assert [r.fault for r in provider.journal.requests()].count("server_error") == 3


def test_lost_response_applies_the_effect(provider: Provider, connect: Connect, way: str) -> None:
    client = connect(provider)
    write = WRITES[provider.name]
    provider.faults.lose_responses(1)
    with pytest.raises(lost(way)):
        write(client)
    [effect] = provider.journal.effects()
    [request] = provider.journal.requests()
    assert (request.fault, request.effect_applied, request.request_id) == (
        "response_lost", True, effect.request_id)
    assert write(client).status_code in (200, 201, 202)
    assert provider.faults.active() == {}


def test_lost_payment_response_is_replayed_with_the_same_key(
    payments: Provider, connect: Connect, way: str
) -> None:
    client = connect(payments)
    headers = auth("payments-writer-a", **{"Idempotency-Key": "lost"})
    payments.faults.lose_responses()
    with pytest.raises(lost(way)):
        client.post("/v1/charges", data={"amount": "5", "currency": "usd"}, headers=headers)
    payments.faults.lift("response_lost")
    replay = client.post("/v1/charges", data={"amount": "5", "currency": "usd"}, headers=headers)
    assert replay.headers["Idempotent-Replayed"] == "true"
    [effect] = payments.journal.effects()
    assert replay.json()["id"] == effect.object_id


def test_rate_limits(provider: Provider, connect: Connect) -> None:
    client = connect(provider)
    provider.faults.rate_limits(2, retry_after=7)
    for _ in range(2):
        reply = WRITES[provider.name](client)
        assert reply.status_code == 429 and reply.headers["Retry-After"] == "7"
    assert provider.journal.effects() == []
    assert WRITES[provider.name](client).status_code in (200, 201, 202)


def test_latency_moves_harness_time_only(
    tmp_path: Path, clock: ManualClock, connect: Connect
) -> None:
    slept: list[float] = []
    provider = Payments(tmp_path / "p.sqlite3", clock=clock, sleep=slept.append,
                        keys=keys_for("payments"))
    try:
        client = connect(provider)
        provider.faults.latency(30, 1, on="writes")
        WRITES["payments"](client)
        WRITES["payments"](client)
        assert slept == [30]
        assert [e.time for e in provider.journal.effects()] == [clock.t + 30, clock.t]
        assert [r.time for r in provider.journal.requests()] == [clock.t + 30, clock.t]
    finally:
        provider.close()


def test_fault_counters_are_shared_across_processes(email: Provider) -> None:
    """Four forked workers draw on one budget of 7 timeouts: exactly 7 time out."""
    from fake_providers import transport

    email.faults.lookup_timeouts(7)
    pids = []
    for _ in range(4):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                with httpx.Client(transport=transport(email), base_url=email.base_url) as c:
                    for _ in range(5):
                        try:
                            LOOKUPS["email"](c)
                        except httpx.ReadTimeout:
                            code += 1
            finally:
                os._exit(code)
        pids.append(pid)
    timeouts = sum(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids)
    assert timeouts == 7
    assert sum(r.fault == "lookup_timeout" for r in email.journal.requests()) == 7
    assert email.faults.active() == {}


@pytest.mark.parametrize("n", [0, -1, 1.5, True])
def test_bad_counts_are_refused(payments: Provider, n: object) -> None:
    with pytest.raises(ValueError, match="positive number of calls"):
        payments.faults.lookup_timeouts(n)  # type: ignore[arg-type]
    assert payments.faults.active() == {}


def test_switches_are_seen_by_another_instance_of_the_same_journal(
    tmp_path: Path, clock: ManualClock
) -> None:
    first = Tickets(tmp_path / "t.sqlite3", clock=clock, keys=keys_for("tickets"))
    second = Tickets(tmp_path / "t.sqlite3", clock=clock)
    try:
        first.faults.search_misses(3)
        first.settings.update(search_lag=4.0)
        assert second.faults.active()["search_miss"].remaining == 3
        assert second.settings.get().search_lag == 4.0
        assert [k.secret for k in second.keys.active()] == sorted(
            k.secret for k in keys_for("tickets"))
        with pytest.raises(ValueError, match="journal of the 'tickets' provider"):
            Email(tmp_path / "t.sqlite3")
        with pytest.raises(TypeError, match="unknown provider setting"):
            first.settings.update(lag=3)
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("variant", ["timeout", "502"])
def test_a_lost_response_can_look_like_a_timeout_or_a_bad_gateway(
    provider: Provider, connect: Connect, way: str, variant: str
) -> None:
    client = connect(provider)
    write = WRITES[provider.name]
    provider.faults.lose_responses(1, variant=variant)  # type: ignore[arg-type]
    if variant == "502":
        gateway = write(client)
        assert gateway.status_code == 502  # ... and yet the provider applied it
    elif way == "inprocess":
        with pytest.raises(httpx.ReadTimeout):
            write(client)
    else:  # over loopback a timeout and a reset look alike: the connection just closes
        with pytest.raises(httpx.TransportError):
            write(client)
    [effect] = provider.journal.effects()
    [request] = provider.journal.requests()
    assert request.fault == f"response_lost:{variant}" and request.effect_applied
    assert effect.request_id == request.request_id
    if variant == "502":
        assert request.status == 502


def test_a_write_timeout_applies_nothing(provider: Provider, connect: Connect, way: str) -> None:
    client = connect(provider)
    provider.faults.write_timeouts(1)
    with pytest.raises(httpx.ReadTimeout if way == "inprocess" else httpx.TransportError):
        WRITES[provider.name](client)
    assert provider.journal.effects() == []
    [request] = provider.journal.requests()
    assert (request.fault, request.effect_applied) == ("write_timeout", False)
    assert WRITES[provider.name](client).status_code in (200, 201, 202)


def test_after_lets_requests_through_before_the_switch_acts(
    provider: Provider, connect: Connect, way: str
) -> None:
    client = connect(provider)
    write = WRITES[provider.name]
    provider.faults.lose_responses(1, after=2)
    assert write(client).status_code in (200, 201, 202)
    assert write(client).status_code in (200, 201, 202)
    with pytest.raises(lost(way)):
        write(client)
    assert [r.fault for r in provider.journal.requests()] == [None, None, "response_lost"]
    with pytest.raises(ValueError, match="after must be how many"):
        provider.faults.server_errors(1, after=-1)
