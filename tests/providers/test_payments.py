"""payments: Stripe-like idempotency, lookups and search, both ways in."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import httpx
import pytest

from fake_providers import Provider
from tests.conftest import ManualClock

from .conftest import Connect, auth, post_bad_input

WRITER = "payments-writer-a"


def idem(key: str) -> dict[str, str]:
    return auth(WRITER, **{"Idempotency-Key": key})


CHARGE = {"amount": "1500", "currency": "usd", "metadata[order]": "o-1"}


def test_charge_is_committed_with_request_id_and_retrievable(
    payments: Provider, connect: Connect
) -> None:
    client = connect(payments)
    created = client.post("/v1/charges", data=CHARGE, headers=auth(WRITER, **{
        "Idempotency-Key": "k1", "X-Crashpoints-Attempt-Id": "att-1"}))
    assert created.status_code == 200
    charge = created.json()
    assert charge["object"] == "charge" and charge["amount"] == 1500
    assert charge["metadata"] == {"order": "o-1"}
    assert created.headers["Request-Id"].startswith("req_")

    [effect] = payments.journal.effects(operation_key="k1")
    assert effect.object_id == charge["id"]
    assert effect.request_id == created.headers["Request-Id"]
    assert (effect.tenant_id, effect.scopes) == ("tenant-a", ("payments:write",))
    [request] = payments.journal.requests(attempt_id="att-1")
    assert request.status == 200 and request.effect_applied
    assert request.payload_hash == effect.payload_hash

    got = client.get(f"/v1/charges/{charge['id']}", headers=auth("payments-reader-a"))
    assert got.status_code == 200 and got.json() == charge
    assert got.headers["Request-Id"] != created.headers["Request-Id"]
    missing = client.get("/v1/charges/ch_nope", headers=auth(WRITER))
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "resource_missing"


def test_payload_hash_is_args_hash_of_logical_parameters(
    payments: Provider, connect: Connect
) -> None:
    from pytest_crashpoints import args_hash

    client = connect(payments)
    client.post("/v1/charges", data={**CHARGE, "expand[0]": "customer"}, headers=auth(WRITER))
    [effect] = payments.journal.effects()
    assert effect.payload_hash == args_hash(
        {"amount": 1500, "currency": "usd", "metadata": {"order": "o-1"}}
    )


def test_same_key_same_parameters_replays_byte_for_byte(
    payments: Provider, connect: Connect
) -> None:
    client = connect(payments)
    first = client.post("/v1/charges", data=CHARGE, headers=idem("k"))
    again = client.post("/v1/charges", data=CHARGE, headers=idem("k"))
    assert again.status_code == 200
    assert again.content == first.content
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.headers["Original-Request"] == first.headers["Request-Id"]
    assert again.headers["Request-Id"] != first.headers["Request-Id"]
    assert len(payments.journal.effects(operation_key="k")) == 1
    assert [r.replayed for r in payments.journal.requests(idempotency_key="k")] == [False, True]


def test_key_is_scoped_per_tenant(payments: Provider, connect: Connect) -> None:
    client = connect(payments)
    a = client.post("/v1/charges", data=CHARGE, headers=idem("k"))
    b = client.post("/v1/charges", data=CHARGE,
                    headers=auth("payments-writer-b", **{"Idempotency-Key": "k"}))
    assert a.status_code == b.status_code == 200
    assert a.json()["id"] != b.json()["id"]
    assert "Idempotent-Replayed" not in b.headers
    assert {e.tenant_id for e in payments.journal.effects(operation_key="k")} == {
        "tenant-a", "tenant-b"}


def test_same_key_other_parameters_is_rejected(payments: Provider, connect: Connect) -> None:
    client = connect(payments)
    client.post("/v1/charges", data=CHARGE, headers=idem("k"))
    other = client.post("/v1/charges", data={**CHARGE, "amount": "1600"},
                        headers=idem("k"))
    assert other.status_code == 400
    assert other.json()["error"]["type"] == "idempotency_error"
    assert len(payments.journal.effects()) == 1


def test_error_after_execution_started_is_replayed(payments: Provider, connect: Connect) -> None:
    client = connect(payments)
    declined = {**CHARGE, "source": "tok_chargeDeclined"}
    first = client.post("/v1/charges", data=declined, headers=idem("d"))
    assert first.status_code == 402
    assert first.json()["error"]["code"] == "card_declined"
    again = client.post("/v1/charges", data=declined, headers=idem("d"))
    assert (again.status_code, again.content) == (402, first.content)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert payments.journal.effects() == []


def test_validation_error_is_not_saved(payments: Provider, connect: Connect) -> None:
    client = connect(payments)
    bad = client.post("/v1/charges", data={"currency": "usd"},
                      headers=idem("v"))
    assert bad.status_code == 400
    assert bad.json()["error"] == {
        "type": "invalid_request_error", "message": "Missing required param: amount.",
        "code": "parameter_missing", "param": "amount"}
    fixed = client.post("/v1/charges", data={"currency": "usd", "amount": "5"},
                        headers=idem("v"))
    assert fixed.status_code == 200 and "Idempotent-Replayed" not in fixed.headers


def test_keys_are_pruned_after_the_retention_window(
    payments: Provider, connect: Connect, clock: ManualClock
) -> None:
    payments.settings.update(retention=3600.0)
    client = connect(payments)
    headers = idem("r")
    client.post("/v1/charges", data=CHARGE, headers=headers)
    clock.advance(3599)
    assert client.post("/v1/charges", data=CHARGE, headers=headers).headers.get(
        "Idempotent-Replayed") == "true"
    clock.advance(2)
    fresh = client.post("/v1/charges", data=CHARGE, headers=headers)
    assert "Idempotent-Replayed" not in fresh.headers
    assert len(payments.journal.effects(operation_key="r")) == 2


def test_default_retention_is_24_hours(
    payments: Provider, connect: Connect, clock: ManualClock
) -> None:
    client = connect(payments)
    headers = idem("r")
    client.post("/v1/charges", data=CHARGE, headers=headers)
    clock.advance(24 * 3600 - 1)
    client.post("/v1/charges", data=CHARGE, headers=headers)
    assert len(payments.journal.effects()) == 1
    clock.advance(2)
    client.post("/v1/charges", data=CHARGE, headers=headers)
    assert len(payments.journal.effects()) == 2


def test_without_idempotency_every_request_applies(payments: Provider, connect: Connect) -> None:
    payments.settings.update(idempotency=False)
    client = connect(payments)
    for _ in range(2):
        reply = client.post("/v1/charges", data=CHARGE, headers=idem("k"))
        assert "Idempotent-Replayed" not in reply.headers
    assert payments.journal.effect_counts() == {"k": 2}


def test_search_lags_behind_writes(
    payments: Provider, connect: Connect, clock: ManualClock
) -> None:
    payments.settings.update(search_lag=30.0)
    client = connect(payments)
    charge = client.post("/v1/charges", data=CHARGE, headers=auth(WRITER)).json()
    query = {"query": "metadata['order']:'o-1' AND currency:'usd'"}

    def hits() -> list[str]:
        reply = client.get("/v1/charges/search", params=query, headers=auth(WRITER))
        assert reply.status_code == 200 and reply.json()["object"] == "search_result"
        return [c["id"] for c in reply.json()["data"]]

    assert hits() == []
    assert client.get(f"/v1/charges/{charge['id']}", headers=auth(WRITER)).status_code == 200
    clock.advance(29.5)
    assert hits() == []
    clock.advance(0.5)
    assert hits() == [charge["id"]]
    other = client.get("/v1/charges/search", params=query, headers=auth("payments-writer-b"))
    assert other.json()["data"] == []


def test_payment_intents(payments: Provider, connect: Connect) -> None:
    client = connect(payments)
    params = {"amount": "700", "currency": "eur", "confirm": "true",
              "payment_method": "pm_card_visa", "metadata[crashpoints_args_hash]": "h1"}
    intent = client.post("/v1/payment_intents", data=params, headers=auth(WRITER)).json()
    assert intent["object"] == "payment_intent" and intent["status"] == "succeeded"
    assert client.get(f"/v1/payment_intents/{intent['id']}", headers=auth(WRITER)).json() == intent
    found = client.get("/v1/payment_intents/search", headers=auth(WRITER),
                       params={"query": "metadata['crashpoints_args_hash']:'h1'"}).json()
    assert [i["id"] for i in found["data"]] == [intent["id"]]
    [effect] = payments.journal.effects()
    assert effect.args_hash == "h1"


@pytest.mark.parametrize(
    ("secret", "extra", "status"),
    [
        (None, {}, 401),
        ("sk_unknown", {}, 401),
        ("payments-reader-a", {}, 403),
        ("payments-writer-a", {"Stripe-Account": "tenant-b"}, 403),
    ],
    ids=["no-key", "unknown-key", "read-scope", "other-tenant"],
)
def test_refused_requests_apply_nothing(
    payments: Provider, connect: Connect, secret: str | None, extra: dict[str, str], status: int
) -> None:
    client = connect(payments)
    headers = {**(auth(secret) if secret else {}), **extra, "Idempotency-Key": "k"}
    reply = client.post("/v1/charges", data=CHARGE, headers=headers)
    assert reply.status_code == status
    assert reply.json()["error"]["type"] == "invalid_request_error"
    assert reply.headers["Request-Id"]
    assert payments.journal.effects() == []
    [request] = payments.journal.requests()
    assert (request.status, request.effect_applied) == (status, False)
    # The refused request did not claim the key: the owner can still use it.
    ok = client.post("/v1/charges", data=CHARGE, headers=idem("k"))
    assert ok.status_code == 200 and "Idempotent-Replayed" not in ok.headers


def test_revoked_key_is_refused_from_the_next_request(payments: Provider, connect: Connect) -> None:
    client = connect(payments)
    assert client.post("/v1/charges", data=CHARGE, headers=auth(WRITER)).status_code == 200
    payments.keys.revoke(WRITER)
    refused = client.post(
        "/v1/charges", data=CHARGE, headers=auth(WRITER, **{"Idempotency-Key": "late-retry"})
    )
    assert refused.status_code == 401
    assert len(payments.journal.effects()) == 1
    # The journal still says whose revoked key it was, and which effect it tried.
    last = payments.journal.requests()[-1]
    assert (last.status, last.effect_applied, last.idempotency_key) == (401, False, "late-retry")
    assert last.tenant_id is not None and last.key_id is not None


@pytest.mark.parametrize(
    ("content", "content_type"),
    [
        (b"amount=1&currency=usd", "application/json"),
        (b"amount=1&&=&currency", "application/x-www-form-urlencoded"),
        (b"metadata[a]=1&metadata=2", "application/x-www-form-urlencoded"),
        (b"\xff\xfe", "application/x-www-form-urlencoded"),
        (b"amount=-3&currency=usd", "application/x-www-form-urlencoded"),
        (b"amount=3&currency=usd&bogus=1", "application/x-www-form-urlencoded"),
    ],
    ids=["wrong-content-type", "malformed", "hash-and-value", "not-utf8", "negative", "unknown"],
)
def test_bad_input_is_a_400_in_stripe_format(
    payments: Provider, connect: Connect, content: bytes, content_type: str
) -> None:
    client = connect(payments)
    reply = post_bad_input(payments, client, "/v1/charges", content, content_type)
    assert reply.json()["error"]["type"] == "invalid_request_error"
    # The server is still there.
    assert client.post("/v1/charges", data=CHARGE, headers=auth(WRITER)).status_code == 200


def test_in_flight_key_conflicts_until_its_owner_dies(payments: Provider, connect: Connect) -> None:
    """A worker stuck between claiming the key and committing holds it (409, nothing stored);
    once it is killed, the key is taken over and exactly one effect happens."""
    from fake_providers import _payments, transport

    client = connect(payments)
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the stuck worker
        try:
            original = _payments.Payments._execute

            def stuck(self: object, *args: object) -> object:
                os.write(ready_w, b"1")
                os.read(hold_r, 1)  # never answered: the parent kills us here
                return original(self, *args)  # type: ignore[arg-type]

            _payments.Payments._execute = stuck  # type: ignore[method-assign]
            import httpx

            with httpx.Client(transport=transport(payments), base_url=payments.base_url) as c:
                c.post("/v1/charges", data=CHARGE, headers=idem("f"))
        finally:
            os._exit(3)
    try:
        assert os.read(ready_r, 1) == b"1"
        busy = client.post("/v1/charges", data=CHARGE, headers=idem("f"))
        assert busy.status_code == 409
        assert busy.json()["error"]["code"] == "idempotency_key_in_use"
        assert payments.journal.effects() == []
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        for fd in (ready_r, ready_w, hold_r, hold_w):
            os.close(fd)
    taken = client.post("/v1/charges", data=CHARGE, headers=idem("f"))
    assert taken.status_code == 200 and "Idempotent-Replayed" not in taken.headers
    replay = client.post("/v1/charges", data=CHARGE, headers=idem("f"))
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert payments.journal.effect_counts() == {"f": 1}
    statuses = [r.status for r in payments.journal.requests(idempotency_key="f")]
    assert statuses == [409, 200, 200]
    assert json.loads(replay.content)["id"] == taken.json()["id"]


def charge_in_euros(client: httpx.Client, amount: str) -> dict[str, Any]:
    """A charge of ``amount`` cents in euros by tenant-a's writer: the charge as answered."""
    data = {"amount": amount, "currency": "eur"}
    reply = client.post("/v1/charges", data=data, headers=auth(WRITER))
    assert reply.status_code == 200
    return dict(reply.json())


def test_refunds_are_bounded_by_the_charge_and_replayed_by_key(
    payments: Provider, connect: Connect
) -> None:
    client = connect(payments)
    charge = charge_in_euros(client, "5000")
    refund = {"charge": charge["id"], "amount": "1500", "reason": "requested_by_customer"}
    first = client.post("/v1/refunds", data=refund,
                        headers=auth("payments-writer-a", **{"Idempotency-Key": "r-1"}))
    assert first.status_code == 200 and first.json()["amount"] == 1500
    again = client.post("/v1/refunds", data=refund,
                        headers=auth("payments-writer-a", **{"Idempotency-Key": "r-1"}))
    assert again.headers["Idempotent-Replayed"] == "true"
    too_much = client.post("/v1/refunds", data={"charge": charge["id"], "amount": "4000"},
                           headers=auth("payments-writer-a"))
    assert (too_much.status_code, too_much.json()["error"]["code"]) == (400, "amount_too_large")
    rest = client.post("/v1/refunds", data={"charge": charge["id"]},
                       headers=auth("payments-writer-a"))
    assert rest.json()["amount"] == 3500
    done = client.post("/v1/refunds", data={"charge": charge["id"], "amount": "1"},
                       headers=auth("payments-writer-a"))
    assert done.json()["error"]["code"] == "charge_already_refunded"
    missing = client.post("/v1/refunds", data={"charge": "ch_nope", "amount": "1"},
                          headers=auth("payments-writer-a"))
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "resource_missing")
    shown = client.get(f"/v1/charges/{charge['id']}", headers=auth("payments-reader-a")).json()
    assert (shown["amount_refunded"], shown["refunded"]) == (5000, True)
    listed = client.get("/v1/refunds", params={"charge": charge["id"]},
                        headers=auth("payments-reader-a")).json()["data"]
    assert [r["amount"] for r in listed] == [3500, 1500]  # newest first
    got = client.get(f"/v1/refunds/{first.json()['id']}", headers=auth("payments-reader-a"))
    assert got.json() == first.json()
    assert [e.operation for e in payments.journal.effects()] == [
        "charges.create", "refunds.create", "refunds.create"]


def test_a_refund_of_another_tenants_charge_is_not_found(
    payments: Provider, connect: Connect
) -> None:
    client = connect(payments)
    charge = charge_in_euros(client, "500")
    answer = client.post("/v1/refunds", data={"charge": charge["id"]},
                         headers=auth("payments-writer-b"))
    assert answer.status_code == 404
