"""Derived per-process keys: accepted as their base key, journaled with their label."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from fake_providers import ApiKey, Email, Payments, Provider, derive_key
from fake_providers._journal import SCHEMA_VERSION
from tests.conftest import ManualClock

from .conftest import SIGNING_SECRET, Connect, auth, derived, issue_derived, send_write

PROVIDERS = ["payments", "email", "tickets", "deploy"]


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest) -> Provider:
    provider: Provider = request.getfixturevalue(str(request.param))
    provider.keys.set_signing_secret(SIGNING_SECRET)
    return provider


def test_derive_key_is_base_label_and_a_truncated_hmac() -> None:
    import hashlib
    import hmac

    mac = hmac.new(b"s3cret", b"sk_a\x00worker-1", hashlib.sha256).hexdigest()[:16]
    assert derive_key("sk_a", "worker-1", signing_secret="s3cret") == f"sk_a~worker-1~{mac}"
    assert derive_key("sk_a", "worker-2", signing_secret="s3cret") != f"sk_a~worker-2~{mac}"


@pytest.mark.parametrize("label", ["", "has space", "a~b", "é", "x" * 81, "a/b", "a:b"])
def test_bad_labels_are_refused(label: str) -> None:
    with pytest.raises(ValueError, match="label must be 1 to 80 characters"):
        derive_key("sk_a", label, signing_secret="s")


def test_empty_secrets_are_refused(payments: Provider) -> None:
    with pytest.raises(ValueError, match="base key secret"):
        derive_key("", "w", signing_secret="s")
    with pytest.raises(ValueError, match="signing secret"):
        derive_key("sk_a", "w", signing_secret="")
    with pytest.raises(ValueError, match="signing secret must be a non-empty string"):
        payments.keys.set_signing_secret("")


def test_derived_key_acts_as_its_base_key_and_is_journaled_with_its_label(
    provider: Provider, connect: Connect
) -> None:
    client = connect(provider)
    secret = derived(provider, "worker-7")
    answer = send_write(provider.name, client, secret)
    assert answer.status_code in (200, 201, 202), answer.text
    base = provider.keys.find(f"{provider.name}-writer-a")
    assert base is not None

    [request] = provider.journal.requests(label="worker-7")
    assert (request.tenant_id, request.key_id, request.scopes) == (
        "tenant-a", base.key_id, (f"{provider.name}:write",))
    assert request.effect_applied and request.payload_hash is not None
    [effect] = provider.journal.effects(label="worker-7")
    assert (effect.tenant_id, effect.key_id, effect.scopes, effect.label) == (
        "tenant-a", base.key_id, (f"{provider.name}:write",), "worker-7")
    assert effect.request_id == request.request_id

    # A plain key is journaled without a label; the filter tells them apart.
    send_write(provider.name, client, f"{provider.name}-writer-a")
    assert [r.label for r in provider.journal.requests()] == ["worker-7", None]
    assert len(provider.journal.effects()) == 2
    assert provider.journal.requests(label="worker-8") == []


def test_find_and_presented_return_the_base_key_with_the_label(payments: Provider) -> None:
    secret = issue_derived(payments, "recovery.1")
    found = payments.keys.find(secret)
    base = payments.keys.find("payments-writer-a")
    assert found is not None and base is not None
    assert (found.secret, found.label) == (secret, "recovery.1")
    assert (found.tenant_id, found.scopes, found.key_id) == (
        base.tenant_id, base.scopes, base.key_id)
    assert base.label is None
    payments.keys.revoke("payments-writer-a")
    assert payments.keys.find(secret) is None
    assert payments.keys.presented(secret) == found


def test_a_tampered_mac_is_an_unknown_key(provider: Provider, connect: Connect) -> None:
    client = connect(provider)
    secret = derived(provider, "worker-1")
    mac = secret.rsplit("~", 1)[1]
    tampered = [
        secret[:-1] + ("0" if secret[-1] != "0" else "1"),  # one digit of the mac
        secret.replace("worker-1", "worker-2"),              # another label, the same mac
        secret.replace(f"{provider.name}-writer-a", f"{provider.name}-writer-b"),  # another base
        f"{provider.name}-writer-a~worker-1~{mac.upper()}",
        f"{provider.name}-writer-a~worker-1",
    ]
    for presented in tampered:
        assert send_write(provider.name, client, presented).status_code == 401, presented
    assert provider.journal.effects() == []
    requests = provider.journal.requests()
    assert len(requests) == len(tampered)
    assert {(r.status, r.tenant_id, r.key_id, r.label) for r in requests} == {
        (401, None, None, None)}


def test_derived_keys_need_a_signing_secret_and_the_right_one(
    payments: Provider, connect: Connect
) -> None:
    client = connect(payments)
    secret = derived(payments, "worker-1")
    assert send_write("payments", client, secret).status_code == 401  # none set yet
    payments.keys.set_signing_secret("another-secret")
    assert send_write("payments", client, secret).status_code == 401
    payments.keys.set_signing_secret(SIGNING_SECRET)
    assert send_write("payments", client, secret).status_code == 200
    assert [r.status for r in payments.journal.requests()] == [401, 401, 200]


def test_an_unknown_base_key_derives_nothing(provider: Provider, connect: Connect) -> None:
    client = connect(provider)
    secret = derived(provider, "worker-1", base="never-added")
    assert send_write(provider.name, client, secret).status_code == 401
    assert provider.journal.effects() == []


def test_revoking_the_base_key_refuses_its_derived_keys(
    provider: Provider, connect: Connect
) -> None:
    client = connect(provider)
    first, second = derived(provider, "worker-1"), derived(provider, "worker-2")
    assert send_write(provider.name, client, first).status_code in (200, 201, 202)
    provider.keys.revoke(f"{provider.name}-writer-a")
    for secret in (first, second):
        assert send_write(provider.name, client, secret).status_code == 401
    refused = [r for r in provider.journal.requests() if r.status == 401]
    assert [(r.tenant_id, r.scopes, r.label, r.effect_applied) for r in refused] == [
        ("tenant-a", (f"{provider.name}:write",), "worker-1", False),
        ("tenant-a", (f"{provider.name}:write",), "worker-2", False),
    ]
    assert [e.label for e in provider.journal.effects()] == ["worker-1"]
    provider.keys.add(ApiKey(f"{provider.name}-writer-a", "tenant-a",
                             frozenset({f"{provider.name}:write"})))
    assert send_write(provider.name, client, second).status_code in (200, 201, 202)


def test_narrowing_the_base_key_narrows_its_derived_keys(
    payments: Provider, connect: Connect
) -> None:
    payments.keys.set_signing_secret(SIGNING_SECRET)
    client = connect(payments)
    payments.keys.add(ApiKey("payments-writer-a", "tenant-a", frozenset({"payments:read"})))
    answer = send_write("payments", client, derived(payments, "worker-1"))
    assert answer.status_code == 403
    [request] = payments.journal.requests(label="worker-1")
    assert (request.status, request.scopes) == (403, ("payments:read",))


def test_a_base_secret_may_contain_the_separator(payments: Provider, connect: Connect) -> None:
    payments.keys.set_signing_secret(SIGNING_SECRET)
    payments.keys.add(ApiKey("sk~odd~base", "tenant-a", frozenset({"payments:write"})))
    secret = derive_key("sk~odd~base", "w.1", signing_secret=SIGNING_SECRET)
    assert send_write("payments", connect(payments), secret).status_code == 200
    [effect] = payments.journal.effects()
    assert (effect.label, effect.key_id) == ("w.1", ApiKey("sk~odd~base", "t", frozenset()).key_id)


def test_derived_keys_are_not_added(payments: Provider) -> None:
    key = ApiKey("payments-writer-a~w~0123456789abcdef", "tenant-a", frozenset(), label="w")
    with pytest.raises(ValueError, match="add its base key"):
        payments.keys.add(key)
    with pytest.raises(ValueError, match="label must be"):
        ApiKey("sk", "tenant-a", frozenset(), label="no spaces")


def test_basic_and_token_schemes_carry_derived_keys_too(
    tickets: Provider, connect: Connect
) -> None:
    import base64

    client = connect(tickets)
    secret = issue_derived(tickets, "worker-1")
    basic = base64.b64encode(f"{secret}:x".encode()).decode()
    for header in (f"token {secret}", f"Basic {basic}"):
        answer = client.post("/repos/tenant-a/ops/issues", json={"title": "t"},
                             headers={"Authorization": header})
        assert answer.status_code == 201
    assert [e.label for e in tickets.journal.effects()] == ["worker-1", "worker-1"]


def test_the_signing_secret_is_seen_by_another_instance_of_the_journal(
    tmp_path: Path, clock: ManualClock
) -> None:
    key = ApiKey("sk_a", "tenant-a", frozenset({"email:write"}))
    first = Email(tmp_path / "e.sqlite3", clock=clock, keys=[key])
    second = Email(tmp_path / "e.sqlite3", clock=clock)
    try:
        first.keys.set_signing_secret("s")
        found = second.keys.find(derive_key("sk_a", "w", signing_secret="s"))
        assert found is not None and found.label == "w"
    finally:
        first.close()
        second.close()


def test_a_journal_of_another_schema_version_is_refused(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "p.sqlite3"
    Payments(path, clock=clock).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value='1' WHERE name='schema'")
    conn.close()
    with pytest.raises(ValueError, match="schema version 1, but this version of fake_providers "
                                         f"reads version {SCHEMA_VERSION}"):
        Payments(path, clock=clock)
    with pytest.raises(ValueError, match="journal of the 'payments' provider"):
        Email(path, clock=clock)


def test_refusals_name_the_base_key_not_the_derived_secret(
    payments: Provider, connect: Connect
) -> None:
    client = connect(payments)
    secret = issue_derived(payments, "worker-1")
    answer = client.post("/v1/charges", data={"amount": "5", "currency": "usd"},
                         headers=auth(secret, **{"Stripe-Account": "tenant-b"}))
    assert answer.status_code == 403
    assert secret not in answer.text
