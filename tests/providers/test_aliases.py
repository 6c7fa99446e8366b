"""Aliases: every name the API gives the object a request created or read, in the journal."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from fake_providers import Provider, Tickets, serve, transport
from tests.conftest import ManualClock

from .conftest import Connect, auth, issue_derived, keys_for, send_write


def test_payments_aliases_are_the_object_id(payments: Provider, connect: Connect) -> None:
    client = connect(payments)
    headers = auth("payments-writer-a", **{"Idempotency-Key": "k"})
    charge = client.post("/v1/charges", data={"amount": "5", "currency": "usd"},
                         headers=headers).json()["id"]
    client.post("/v1/charges", data={"amount": "5", "currency": "usd"}, headers=headers)
    intent = client.post("/v1/payment_intents", data={"amount": "5", "currency": "usd"},
                         headers=auth("payments-writer-a")).json()["id"]
    declined = client.post("/v1/charges", headers=auth("payments-writer-a"), data={
        "amount": "5", "currency": "usd", "source": "tok_chargeDeclined"})
    assert declined.status_code == 402
    declined_id = declined.json()["error"]["charge"]
    client.get(f"/v1/charges/{charge}", headers=auth("payments-reader-a"))
    client.get(f"/v1/payment_intents/{intent}", headers=auth("payments-reader-a"))
    client.get("/v1/charges/ch_missing", headers=auth("payments-reader-a"))
    client.get("/v1/charges/search", params={"query": "currency:'usd'"},
               headers=auth("payments-reader-a"))
    client.post("/v1/charges", data={"amount": "5"}, headers=auth("payments-writer-a"))

    assert [(e.object_id, e.aliases) for e in payments.journal.effects()] == [
        (charge, (charge,)), (intent, (intent,))]
    assert [(r.operation, r.replayed, r.aliases) for r in payments.journal.requests()] == [
        ("charges.create", False, (charge,)),
        ("charges.create", True, (charge,)),  # the replay names the charge it replays
        ("payment_intents.create", False, (intent,)),
        ("charges.create", False, (declined_id,)),  # a decline names its failed charge
        ("charges.retrieve", False, (charge,)),
        ("payment_intents.retrieve", False, (intent,)),
        ("charges.retrieve", False, ()),  # 404: no object
        ("charges.search", False, ()),  # a search names no single object
        ("charges.create", False, ()),  # 400: no object
    ]


def test_email_aliases_are_the_message_id(email: Provider, connect: Connect) -> None:
    client = connect(email)
    sent = send_write("email", client, "email-writer-a")
    msg_id = sent.headers["X-Message-Id"]
    client.get(f"/v3/messages/{msg_id}", headers=auth("email-reader-a"))
    client.get("/v3/messages/msg_nope", headers=auth("email-reader-a"))
    client.get("/v3/messages", params={"query": f'msg_id="{msg_id}"'},
               headers=auth("email-reader-a"))
    [effect] = email.journal.effects()
    assert effect.aliases == (msg_id,)
    assert [r.aliases for r in email.journal.requests()] == [(msg_id,), (msg_id,), (), ()]


def issue_aliases(full: str, number: int, body: dict[str, object]) -> tuple[str, ...]:
    return (
        f"{full}#{number}", str(number), f"#{number}", f"/repos/{full}/issues/{number}",
        f"/{full}/issues/{number}", str(body["url"]), str(body["html_url"]),
    )


def test_tickets_aliases_are_every_name_of_the_issue_as_the_client_saw_it(
    tickets: Provider, connect: Connect
) -> None:
    client = connect(tickets)
    opened = client.post("/repos/tenant-a/ops/issues", json={"title": "t"},
                         headers=auth("tickets-writer-a"))
    body = opened.json()
    origin = str(client.base_url).rstrip("/")  # in-process base URL, or the loopback server
    assert body["url"] == f"{origin}/repos/tenant-a/ops/issues/1"
    assert body["html_url"] == f"{origin}/tenant-a/ops/issues/1"
    [effect] = tickets.journal.effects()
    assert effect.aliases == (
        "tenant-a/ops#1", "1", "#1", "/repos/tenant-a/ops/issues/1", "/tenant-a/ops/issues/1",
        f"{origin}/repos/tenant-a/ops/issues/1", f"{origin}/tenant-a/ops/issues/1",
    )
    assert effect.aliases == issue_aliases("tenant-a/ops", 1, body)
    assert opened.headers["Location"] in effect.aliases

    got = client.get("/repos/tenant-a/ops/issues/1", headers=auth("tickets-reader-a"))
    client.get("/repos/tenant-a/ops/issues/2", headers=auth("tickets-reader-a"))
    client.get("/repos/tenant-a/ops/issues", headers=auth("tickets-reader-a"))
    client.get("/search/issues", params={"q": "t"}, headers=auth("tickets-reader-a"))
    client.get("/repos/tenant-a/ops", headers=auth("tickets-reader-a"))
    assert [r.aliases for r in tickets.journal.requests()] == [
        effect.aliases, issue_aliases("tenant-a/ops", 1, got.json()), (), (), (), ()]


def test_tickets_url_aliases_follow_the_origin_each_request_used(
    tmp_path: Path, clock: ManualClock
) -> None:
    tickets = Tickets(tmp_path / "t.sqlite3", clock=clock, keys=keys_for("tickets"))
    try:
        with httpx.Client(transport=transport(tickets), base_url=tickets.base_url) as client:
            client.post("/repos/tenant-a/ops/issues", json={"title": "t"},
                        headers=auth("tickets-writer-a"))
        with serve(tickets) as url, httpx.Client(base_url=url) as client:
            client.get("/repos/tenant-a/ops/issues/1", headers=auth("tickets-reader-a"))
        created, fetched = tickets.journal.requests()
        assert created.aliases[5:] == (
            "https://tickets.crashpoints.test/repos/tenant-a/ops/issues/1",
            "https://tickets.crashpoints.test/tenant-a/ops/issues/1")
        assert fetched.aliases[5:] == (
            f"{url}/repos/tenant-a/ops/issues/1", f"{url}/tenant-a/ops/issues/1")
        assert created.aliases[:5] == fetched.aliases[:5]
    finally:
        tickets.close()


def test_deploy_aliases_are_the_object_id_and_the_request_id(
    deploy: Provider, connect: Connect
) -> None:
    client = connect(deploy)
    answer = send_write("deploy", client, "deploy-writer-a")
    [effect] = deploy.journal.effects()
    assert effect.aliases == (effect.object_id, answer.headers["X-Request-Id"])
    assert effect.object_id.startswith("deploy_")
    [request] = deploy.journal.requests()
    assert request.aliases == effect.aliases


def test_lost_responses_still_record_aliases(tickets: Provider, connect: Connect) -> None:
    tickets.faults.lose_responses(1)
    with pytest.raises(httpx.TransportError):
        send_write("tickets", connect(tickets), "tickets-writer-a")
    [request] = tickets.journal.requests()
    assert request.fault == "response_lost"
    assert request.aliases[:3] == ("tenant-a/ops#1", "1", "#1")


@pytest.mark.parametrize("name", ["payments", "email", "tickets", "deploy"])
def test_a_request_with_no_marker_is_attributed_all_the_same(
    request: pytest.FixtureRequest, connect: Connect, name: str
) -> None:
    provider: Provider = request.getfixturevalue(name)
    secret = issue_derived(provider, "worker-3")
    answer = send_write(name, connect(provider), secret)
    assert answer.status_code in (200, 201, 202)
    [effect] = provider.journal.effects()
    [record] = provider.journal.requests()
    assert (effect.correlation_id, effect.args_hash, effect.attempt_id) == (None, None, None)
    assert effect.operation_key == effect.payload_hash and effect.payload_hash
    assert (effect.label, record.label) == ("worker-3", "worker-3")
    assert effect.aliases and record.aliases == effect.aliases
    assert record.payload_hash == effect.payload_hash and record.effect_applied
