"""ResponseInfo: what the provider made of a request, on the response it produced."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

from fake_providers import Provider, ResponseInfo, mock, transport

from .conftest import auth, issue_derived, send_write


def info_of(response: httpx.Response) -> ResponseInfo:
    info = response.extensions["crashpoints"]
    assert isinstance(info, ResponseInfo)
    return info


@pytest.fixture
def client(payments: Provider) -> httpx.Client:
    return httpx.Client(transport=transport(payments), base_url=payments.base_url)


def test_a_write_and_its_replay(payments: Provider, client: httpx.Client) -> None:
    secret = issue_derived(payments, "worker-1")
    headers = auth(secret, **{"Idempotency-Key": "k-1"})
    first = client.post("/v1/charges", data={"amount": "5", "currency": "usd"}, headers=headers)
    again = client.post("/v1/charges", data={"amount": "5", "currency": "usd"}, headers=headers)
    assert info_of(first) == ResponseInfo(
        operation="charges.create", kind="write", status=200, effect_applied=True,
        replayed=False, request_id=first.headers["Request-Id"], label="worker-1",
        idempotency_key="k-1", provider="payments",
    )
    assert info_of(again) == dataclasses.replace(
        info_of(first), effect_applied=False, replayed=True,
        request_id=again.headers["Request-Id"],
    )
    journaled = [(r.request_id, r.effect_applied, r.replayed, r.label)
                 for r in payments.journal.requests()]
    assert journaled == [
        (i.request_id, i.effect_applied, i.replayed, i.label)
        for i in (info_of(first), info_of(again))
    ]


def test_a_lookup(payments: Provider, client: httpx.Client) -> None:
    charge = client.post("/v1/charges", data={"amount": "5", "currency": "usd"},
                         headers=auth("payments-writer-a")).json()["id"]
    got = client.get(f"/v1/charges/{charge}", headers=auth("payments-reader-a"))
    assert info_of(got) == ResponseInfo(
        operation="charges.retrieve", kind="lookup", status=200, effect_applied=False,
        replayed=False, request_id=got.headers["Request-Id"], label=None,
        idempotency_key=None, provider="payments",
    )


def test_refusals_carry_it_too(payments: Provider, client: httpx.Client) -> None:
    write = {"amount": "5", "currency": "usd"}
    unknown = client.post("/v1/charges", data=write, headers=auth("sk_nope"))
    assert info_of(unknown) == ResponseInfo(
        operation="charges.create", kind="write", status=401, effect_applied=False,
        replayed=False, request_id=unknown.headers["Request-Id"], label=None,
        idempotency_key=None, provider="payments",
    )
    forbidden = client.post("/v1/charges", data=write, headers=auth("payments-reader-a"))
    assert (info_of(forbidden).status, info_of(forbidden).effect_applied) == (403, False)
    nowhere = client.get("/v1/nowhere", headers=auth("payments-reader-a"))
    assert (info_of(nowhere).status, info_of(nowhere).operation, info_of(nowhere).kind) == (
        404, None, None)
    payments.faults.rate_limits(1)
    assert info_of(client.post("/v1/charges", data=write,
                               headers=auth("payments-writer-a"))).status == 429
    payments.faults.server_errors(1, status=503)
    failed = client.post("/v1/charges", data=write, headers=auth("payments-writer-a"))
    assert (info_of(failed).status, info_of(failed).kind) == (503, "write")
    assert payments.journal.effects() == []


def test_a_revoked_derived_key_is_refused_with_its_label(
    payments: Provider, client: httpx.Client
) -> None:
    secret = issue_derived(payments, "worker-9")
    payments.keys.revoke("payments-writer-a")
    refused = client.post("/v1/charges", data={"amount": "5", "currency": "usd"},
                          headers=auth(secret))
    assert (info_of(refused).status, info_of(refused).label) == (401, "worker-9")


@pytest.mark.parametrize("name", ["email", "tickets", "deploy"])
def test_every_provider_names_itself(request: pytest.FixtureRequest, name: str) -> None:
    provider: Provider = request.getfixturevalue(name)
    with mock(provider), httpx.Client(base_url=provider.base_url) as client:  # respx keeps it
        answer = send_write(name, client, f"{name}-writer-a")
    info = info_of(answer)
    assert (info.provider, info.kind, info.effect_applied, info.status) == (
        name, "write", True, answer.status_code)
    [record] = provider.journal.requests()
    assert (record.operation, record.request_id) == (info.operation, info.request_id)
