"""payments starts from what Stripe held: its list JSON of charges, payment intents and refunds,
seeded as effects of the key that made them.

A seeded object must answer every retrieve, list and search of the fake as one the fake made
itself; an idempotency key the export gives must replay the object, as Stripe replays the
request that made it; new ids must never take a seeded one; the fake's own export must seed the
same objects again; and a bad export must say what is wrong. The tickets and email twins are in
``test_exports_tickets_email.py``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from fake_providers import EXPORT_FORMAT, ApiKey, ExportError, Payments, Provider, read_export
from fake_providers._described.engine import document
from tests.conftest import ManualClock

from .conftest import Connect, auth, keys_for

WRITER = "payments-writer-a"
OTHER_TENANT = "payments-writer-b"
#: Who seeds: the production deployment whose incident is reproduced (a key of tenant-a).
SEEDER = ApiKey("sk_live_acme_prod", "tenant-a", frozenset({"payments:write"}),
                label="production-0.x")

INCIDENT = Path(__file__).parents[2] / "scenarios" / "incident"
#: Stripe's list of the customer's charges, newest first: November's and October's renewals.
NOVEMBER, OCTOBER = json.loads((INCIDENT / "charges.json").read_text(encoding="utf-8"))["data"]
#: The payment intent behind November's charge, as ``GET /v1/payment_intents`` lists it.
INTENT: dict[str, Any] = {
    "id": "pi_3QK9pLLkdIwHu7ix1Rw0Kq7T",
    "object": "payment_intent",
    "amount": 2900,
    "amount_capturable": 0,
    "amount_received": 2900,
    "capture_method": "automatic",
    "client_secret": "pi_3QK9pLLkdIwHu7ix1Rw0Kq7T_secret_Zx1o9bQ4UeGd2",
    "confirmation_method": "automatic",
    "created": 1796047500,
    "currency": "usd",
    "customer": "cus_QxT4m2",
    "description": "Renewal ren-2026-11",
    "latest_charge": NOVEMBER["id"],
    "livemode": False,
    "metadata": {"renewal_id": "ren-2026-11"},
    "payment_method": "pm_1Q7wTfLkdIwHu7ixVcKr8mNd",
    "payment_method_types": ["card"],
    "status": "succeeded",
}
#: A partial refund of October's charge, as ``GET /v1/refunds`` lists it.
REFUND: dict[str, Any] = {
    "id": "re_3QA1xKLkdIwHu7ix0Jk2Lp4M",
    "object": "refund",
    "amount": 1000,
    "balance_transaction": "txn_3QA1xKLkdIwHu7ix0Qe8Rt5u",
    "charge": OCTOBER["id"],
    "created": 1793800000,
    "currency": "usd",
    "metadata": {"ticket": "SUP-4411"},
    "payment_intent": None,
    "reason": "requested_by_customer",
    "status": "succeeded",
}
#: Everything the account held, as a user puts Stripe's three lists together in one file.
STRIPE_EXPORT = [NOVEMBER, OCTOBER, INTENT, REFUND]
SEEDED_IDS = {obj["id"] for obj in STRIPE_EXPORT}


def _export_file(tmp_path: Path, data: Any, name: str = "stripe.json") -> Any:
    """``data`` written as the file a user would give, and read back as the harness does."""
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return read_export(path)


def _seed(provider: Provider, data: Any, clock: ManualClock, *, key: ApiKey = SEEDER) -> list[str]:
    return provider.seed(provider.exported_objects(data, where="stripe.json"), key=key, at=clock())


def test_seeded_stripe_objects_answer_like_ones_the_fake_made(
    payments: Provider, connect: Connect, tmp_path: Path, clock: ManualClock
) -> None:
    payments.settings.update(search_lag=30.0)
    _seed(payments, _export_file(tmp_path, STRIPE_EXPORT), clock)
    client = connect(payments)
    headers = auth(WRITER)

    def get(path: str, secret: str = WRITER, **params: str) -> httpx.Response:
        return client.get(path, headers=auth(secret), params=params)

    def exported(answer: dict[str, Any], export: dict[str, Any]) -> dict[str, Any]:
        """What of ``answer`` the export held (Stripe's description documents more fields,
        which the answer has too)."""
        return {k: v for k, v in answer.items() if k in export}

    november = get(f"/v1/charges/{NOVEMBER['id']}")
    assert november.status_code == 200
    # Every field as exported, those the description does not know kept.
    assert exported(november.json(), NOVEMBER) == NOVEMBER
    assert exported(get(f"/v1/payment_intents/{INTENT['id']}").json(), INTENT) == INTENT
    october = get(f"/v1/charges/{OCTOBER['id']}").json()
    assert {k: v for k, v in exported(october, OCTOBER).items()
            if k not in ("amount_refunded", "refunded")} == {
        k: v for k, v in OCTOBER.items() if k not in ("amount_refunded", "refunded")}
    assert (october["amount_refunded"], october["refunded"]) == (1000, False)
    assert exported(get(f"/v1/refunds/{REFUND['id']}").json(), REFUND) == REFUND
    refunds = get("/v1/refunds", charge=OCTOBER["id"])
    assert [r["id"] for r in refunds.json()["data"]] == [REFUND["id"]]
    assert get("/v1/refunds", charge=NOVEMBER["id"]).json()["data"] == []

    # Another tenant's key sees none of it, as another Stripe account would not.
    for path in (f"/v1/charges/{NOVEMBER['id']}", f"/v1/payment_intents/{INTENT['id']}",
                 f"/v1/refunds/{REFUND['id']}"):
        missing = get(path, OTHER_TENANT)
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "resource_missing"

    def searched(query: str, secret: str = WRITER) -> list[str]:
        reply = get("/v1/charges/search", secret, query=query)
        assert reply.status_code == 200
        return [c["id"] for c in reply.json()["data"]]

    renewal = "metadata['renewal_id']:'ren-2026-11'"
    assert searched(renewal) == []  # the search lags behind the seeding, as behind a write
    clock.advance(29.5)
    assert searched(renewal) == []
    clock.advance(0.5)
    assert searched(renewal) == [NOVEMBER["id"]]
    # In the order the fake made them (oldest first), as for charges it made itself.
    assert searched("customer:'cus_QxT4m2' AND status:'succeeded'") == [
        OCTOBER["id"], NOVEMBER["id"]]
    assert searched(renewal, OTHER_TENANT) == []
    intents = get("/v1/payment_intents/search", query=renewal).json()["data"]
    assert [i["id"] for i in intents] == [INTENT["id"]]

    # What the fake makes next takes fake ids, never a seeded one, and counts seeded refunds.
    created = client.post("/v1/charges", headers=headers, data={
        "amount": "2900", "currency": "usd", "customer": "cus_QxT4m2",
        "metadata[renewal_id]": "ren-2026-12"})
    assert created.status_code == 200
    assert created.json()["id"] not in SEEDED_IDS
    # The shape of Stripe's: what the export shows, and what the description requires.
    assert set(created.json()) <= set(NOVEMBER) | set(
        document("stripe").schema("charge")["required"])
    rest = client.post("/v1/refunds", headers=headers, data={"charge": OCTOBER["id"]})
    assert rest.status_code == 200
    assert rest.json()["amount"] == 1900  # what the seeded refund left of 2900
    assert rest.json()["id"] not in SEEDED_IDS
    again = client.post("/v1/refunds", headers=headers, data={"charge": OCTOBER["id"],
                                                               "amount": "1"})
    assert again.json()["error"]["code"] == "charge_already_refunded"
    assert get(f"/v1/charges/{OCTOBER['id']}").json()["refunded"] is True
    assert len(payments.journal.effects()) == len(STRIPE_EXPORT) + 2


def test_seeded_objects_are_effects_of_the_seeding_key(
    payments: Provider, clock: ManualClock
) -> None:
    objects = payments.exported_objects(
        {"object": "list", "url": "/v1/charges", "has_more": False, "data": STRIPE_EXPORT},
        where="stripe.json",
    )
    # Oldest first (Stripe lists newest first): the order the fake would have made them in.
    assert [(o.object_type, o.object_id, o.operation, o.aliases) for o in objects] == [
        ("charge", OCTOBER["id"], "charges.create", (OCTOBER["id"],)),
        ("refund", REFUND["id"], "refunds.create", (REFUND["id"],)),
        ("payment_intent", INTENT["id"], "payment_intents.create", (INTENT["id"],)),
        ("charge", NOVEMBER["id"], "charges.create", (NOVEMBER["id"],)),
    ]
    assert objects[-1].created == 1796047501.0
    clock.advance(5)
    request_ids = payments.seed(objects, key=SEEDER, at=clock())

    effects = payments.journal.effects(label="production-0.x")
    assert [e.object_id for e in effects] == [o.object_id for o in objects]
    assert [e.request_id for e in effects] == request_ids
    assert len(set(request_ids)) == 4 and all(r.startswith("req_") for r in request_ids)
    assert {(e.tenant_id, e.key_id, e.scopes, e.time) for e in effects} == {
        ("tenant-a", SEEDER.key_id, ("payments:write",), 1005.0)}
    assert [e.body for e in effects] == [OCTOBER, REFUND, INTENT, NOVEMBER]
    assert payments.journal.effects(label="someone-else") == []
    # Each has its request, journaled as the seeding key's, applied and not replayed.
    requests = {r.request_id: r for r in payments.journal.requests()}
    assert [(requests[r].label, requests[r].effect_applied, requests[r].status)
            for r in request_ids] == [("production-0.x", True, 200)] * 4


def test_a_refund_with_its_charge_expanded_names_the_charge_by_id(payments: Provider) -> None:
    expanded = {**REFUND, "charge": copy.deepcopy(OCTOBER)}
    [refund] = payments.exported_objects(expanded, where="refund.json")
    assert refund.body["charge"] == OCTOBER["id"]


def test_seeded_refunds_are_listed_newest_first_as_stripe_lists_them(
    payments: Provider, clock: ManualClock
) -> None:
    later = {**REFUND, "id": "re_3QA1xKLkdIwHu7ix0Zy9Pq1B", "amount": 500,
             "created": REFUND["created"] + 86_400}
    # GET /v1/refunds?charge=... as Stripe answered it: newest first.
    _seed(payments, {"object": "list", "url": "/v1/refunds", "data": [later, REFUND]}, clock)
    _seed(payments, [OCTOBER], clock)
    client = httpx.Client(transport=httpx.MockTransport(payments.handle),
                          base_url=payments.base_url)
    listed = client.get("/v1/refunds", headers=auth(WRITER), params={"charge": OCTOBER["id"]})
    assert [r["id"] for r in listed.json()["data"]] == [later["id"], REFUND["id"]]


def test_an_exported_idempotency_key_replays_the_seeded_charge_whatever_is_sent(
    payments: Provider, clock: ManualClock
) -> None:
    [seeded_request] = _seed(payments, [{**NOVEMBER, "idempotency_key": "k1"}], clock)
    [effect] = payments.journal.effects()
    assert "idempotency_key" not in effect.body  # not Stripe's: it stays out of the charge
    assert (effect.idempotency_key, effect.operation_key) == ("k1", "k1")
    client = httpx.Client(transport=httpx.MockTransport(payments.handle),
                          base_url=payments.base_url)

    def charge(key: str, secret: str = WRITER, **params: str) -> httpx.Response:
        return client.post("/v1/charges", data=params,
                           headers=auth(secret, **{"Idempotency-Key": key}))

    # What the request that made it sent is unknown: any parameters are taken as it, even
    # ones the fake would refuse if it executed them.
    for params in ({"amount": "2900", "currency": "usd", "customer": "cus_QxT4m2"},
                   {"amount": "1", "currency": "eur"}, {"amount": "-5", "bogus": "x"}):
        replayed = charge("k1", **params)
        assert replayed.status_code == 200
        assert replayed.json()["id"] == NOVEMBER["id"]
        assert replayed.headers["Idempotent-Replayed"] == "true"
        assert replayed.headers["Original-Request"] == seeded_request
        info = replayed.extensions["crashpoints"]
        assert (info.replayed, info.effect_applied, info.idempotency_key) == (True, False, "k1")
    assert payments.journal.effect_counts() == {"k1": 1}

    fresh = charge("k2", amount="2900", currency="usd")
    assert fresh.status_code == 200 and "Idempotent-Replayed" not in fresh.headers
    assert fresh.json()["id"] not in SEEDED_IDS
    # Keys are per account: another tenant's k1 is a key of its own.
    elsewhere = charge("k1", OTHER_TENANT, amount="2900", currency="usd")
    assert elsewhere.status_code == 200 and "Idempotent-Replayed" not in elsewhere.headers
    assert elsewhere.json()["id"] not in SEEDED_IDS | {fresh.json()["id"]}
    # Past the retention, the key is forgotten, as Stripe forgets it after 24 hours.
    clock.advance(payments.settings.get().retention + 1)
    late = charge("k1", amount="2900", currency="usd")
    assert late.status_code == 200 and "Idempotent-Replayed" not in late.headers
    assert [(e.tenant_id, e.label) for e in payments.journal.effects(operation_key="k1")] == [
        ("tenant-a", "production-0.x"), ("tenant-b", None), ("tenant-a", None)]


def _same_objects(provider: Provider) -> list[tuple[Any, ...]]:
    return [(e.object_type, e.object_id, e.operation, e.body, e.aliases, e.idempotency_key,
             e.tenant_id) for e in provider.journal.effects()]


def test_an_export_of_the_fakes_own_journal_seeds_the_same_objects(
    payments: Provider, tmp_path: Path, clock: ManualClock
) -> None:
    _seed(payments, STRIPE_EXPORT, clock)
    client = httpx.Client(transport=httpx.MockTransport(payments.handle),
                          base_url=payments.base_url)
    made = client.post("/v1/charges", headers=auth(WRITER, **{"Idempotency-Key": "order-7"}),
                       data={"amount": "1500", "currency": "usd", "metadata[order]": "7"})
    assert made.status_code == 200
    refund = client.post("/v1/refunds", headers=auth(WRITER), data={
        "charge": made.json()["id"], "amount": "500", "reason": "duplicate"})
    assert refund.status_code == 200

    data = _export_file(tmp_path, payments.export(), "export.json")
    assert (data["format"], data["provider"]) == (EXPORT_FORMAT, "payments")
    fresh = Payments(tmp_path / "fresh.sqlite3", clock=clock, keys=keys_for("payments"))
    try:
        fresh.seed(fresh.exported_objects(data, where="export.json"), key=SEEDER, at=clock())
        assert _same_objects(fresh) == _same_objects(payments)
        assert {e.label for e in fresh.journal.effects()} == {"production-0.x"}

        again = httpx.Client(transport=httpx.MockTransport(fresh.handle), base_url=fresh.base_url)
        for path in (f"/v1/charges/{made.json()['id']}", f"/v1/charges/{OCTOBER['id']}",
                     f"/v1/refunds/{refund.json()['id']}"):
            assert again.get(path, headers=auth(WRITER)).json() == client.get(
                path, headers=auth(WRITER)).json()
        # The key the fake's own request carried goes along, and replays its charge.
        replayed = again.post("/v1/charges", headers=auth(WRITER, **{"Idempotency-Key": "order-7"}),
                              data={"amount": "1500", "currency": "usd", "metadata[order]": "7"})
        assert replayed.headers["Idempotent-Replayed"] == "true"
        assert replayed.json()["id"] == made.json()["id"]
    finally:
        fresh.close()


def test_a_charge_after_seeding_the_fakes_own_export_gets_an_id_of_its_own(
    payments: Provider, tmp_path: Path, clock: ManualClock
) -> None:
    client = httpx.Client(transport=httpx.MockTransport(payments.handle),
                          base_url=payments.base_url)
    charge = {"amount": "1500", "currency": "usd"}
    # An agent that looks before it charges: the lookup takes a request number too.
    assert client.get("/v1/charges/search", headers=auth(WRITER),
                      params={"query": "metadata['order']:'7'"}).status_code == 200
    made = client.post("/v1/charges", headers=auth(WRITER), data=charge).json()
    data = _export_file(tmp_path, payments.export(), "export.json")
    fresh = Payments(tmp_path / "fresh.sqlite3", clock=clock, keys=keys_for("payments"))
    try:
        fresh.seed(fresh.exported_objects(data, where="export.json"), key=SEEDER, at=clock())
        again = httpx.Client(transport=httpx.MockTransport(fresh.handle), base_url=fresh.base_url)
        reply = again.post("/v1/charges", headers=auth(WRITER), data=charge)
        assert reply.status_code == 200
        assert reply.json()["id"] != made["id"]
        assert len(fresh.journal.effects()) == 2
    finally:
        fresh.close()


def _charge(**changes: Any) -> dict[str, Any]:
    charge: dict[str, Any] = copy.deepcopy(NOVEMBER)
    for name, value in changes.items():
        if value is _DROP:
            del charge[name]
        else:
            charge[name] = value
    return charge


_DROP = object()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        # The dashboard's CSV export, not the API's JSON.
        ("id,Amount,Currency\nch_3QK9pLLkdIwHu7ix1cVb2RfS,29.00,usd\n",
         r"stripe\.json is not JSON \(.*\); an export is the JSON a provider's API gives "
         r"\(e\.g\. Stripe's list of charges\)"),
        ([NOVEMBER["id"], OCTOBER["id"]],
         r"^stripe\.json: object 0 is str JSON, not a Stripe object"),
        ({"id": "cus_QxT4m2", "object": "customer", "email": "ana@example.org"},
         r"^stripe\.json: object 0 is not a charge, payment intent or refund "
         r"\(object='customer', id='cus_QxT4m2'\); export them as Stripe's API returns them"),
        ([OCTOBER, _charge(amount=_DROP)],
         r"^stripe\.json: object 1 \(ch_3QK9pLLkdIwHu7ix1cVb2RfS\) has no 'amount'"),
        ([_charge(amount="12")], r"amount must be an integer, not '12'"),
        ([_charge(metadata=["renewal_id", "ren-2026-11"])], r"metadata must be an object"),
        ([{**REFUND, "charge": None}],
         r"\(re_3QA1xKLkdIwHu7ix0Jk2Lp4M\): a refund names its charge"),
        ([NOVEMBER, OCTOBER, NOVEMBER],
         r"^payments: charge 'ch_3QK9pLLkdIwHu7ix1cVb2RfS' is given twice; each object may "
         r"appear once"),
        ({"format": EXPORT_FORMAT, "provider": "tickets", "objects": []},
         r"^stripe\.json is an export of provider 'tickets', not 'payments'; give it as "
         r"tickets=<file>"),
        ({"format": EXPORT_FORMAT, "provider": "payments"},
         r"^stripe\.json: 'objects' must be a list of objects"),
        ({"format": "crashpoints-export/2", "provider": "payments", "objects": []},
         r"^stripe\.json is not an export the payments provider reads: give the fakes' own "
         r"format"),
    ],
    ids=["not-json", "not-objects", "customer", "no-amount", "amount-string", "metadata-list",
         "refund-without-charge", "charge-twice", "other-provider", "no-objects",
         "unknown-format"],
)
def test_a_bad_stripe_export_says_what_is_wrong_and_seeds_nothing(
    payments: Provider, tmp_path: Path, clock: ManualClock, content: Any, message: str
) -> None:
    path = tmp_path / "stripe.json"
    text = content if isinstance(content, str) else json.dumps(content, indent=2)
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ExportError, match=message):
        objects = payments.exported_objects(read_export(path), where=path.name)
        payments.seed(objects, key=SEEDER, at=clock())
    assert payments.journal.effects() == []  # nothing half-seeded
    assert payments.journal.requests() == []
