"""email: SendGrid-like, not idempotent; consistent lookup by id, lagging search."""

from __future__ import annotations

from typing import Any

import pytest

from fake_providers import Provider
from pytest_crashpoints import args_hash
from tests.conftest import ManualClock

from .conftest import Connect, auth, post_bad_input

WRITER = "email-writer-a"


def mail(**custom_args: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "personalizations": [{"to": [{"email": "ops@example.com"}]}],
        "from": {"email": "agent@example.com"},
        "subject": "Invoice 7",
        "content": [{"type": "text/plain", "value": "Your invoice."}],
    }
    if custom_args:
        body["custom_args"] = custom_args
    return body


def test_every_send_is_an_effect(email: Provider, connect: Connect) -> None:
    client = connect(email)
    body = mail(crashpoints_correlation_id="c-1", crashpoints_args_hash="h")
    first = client.post("/v3/mail/send", json=body, headers=auth(WRITER))
    second = client.post("/v3/mail/send", json=body, headers=auth(WRITER))
    assert (first.status_code, first.content) == (202, b"")
    assert first.headers["X-Message-Id"] != second.headers["X-Message-Id"]
    assert first.headers["X-Request-Id"]
    effects = email.journal.effects(operation_key="c-1")
    assert [e.object_id for e in effects] == [
        first.headers["X-Message-Id"], second.headers["X-Message-Id"]]
    assert {e.payload_hash for e in effects} == {args_hash(body)}
    assert {(e.correlation_id, e.args_hash) for e in effects} == {("c-1", "h")}


@pytest.mark.parametrize("where", ["mail-header", "http-header", "none"])
def test_correlation_id_sources(email: Provider, connect: Connect, where: str) -> None:
    client = connect(email)
    body = mail()
    headers = auth(WRITER)
    if where == "mail-header":
        body["headers"] = {"X-Correlation-Id": "c-9"}
    elif where == "http-header":
        headers["X-Correlation-Id"] = "c-9"
    assert client.post("/v3/mail/send", json=body, headers=headers).status_code == 202
    [effect] = email.journal.effects()
    expected = None if where == "none" else "c-9"
    assert effect.correlation_id == expected
    assert effect.operation_key == (expected or args_hash(body))


def test_lookup_by_id_is_consistent_and_search_lags(
    email: Provider, connect: Connect, clock: ManualClock
) -> None:
    email.settings.update(search_lag=60.0)
    client = connect(email)
    sent = client.post("/v3/mail/send", json=mail(crashpoints_correlation_id="c-2"),
                       headers=auth(WRITER))
    msg_id = sent.headers["X-Message-Id"]
    reader = auth("email-reader-a")
    got = client.get(f"/v3/messages/{msg_id}", headers=reader)
    assert got.status_code == 200
    assert got.json()["unique_args"] == {"crashpoints_correlation_id": "c-2"}
    query = {"query": "unique_args['crashpoints_correlation_id']=\"c-2\"", "limit": "10"}

    def found() -> list[str]:
        reply = client.get("/v3/messages", params=query, headers=reader)
        assert reply.status_code == 200
        return [m["msg_id"] for m in reply.json()["messages"]]

    assert found() == []
    clock.advance(60)
    assert found() == [msg_id]
    assert client.get("/v3/messages/msg_nope", headers=reader).status_code == 404
    other = client.get(f"/v3/messages/{msg_id}", headers=auth("email-writer-b"))
    assert other.status_code == 404


@pytest.mark.parametrize(
    ("secret", "extra", "status"),
    [(None, {}, 401), ("nope", {}, 401), ("email-reader-a", {}, 403),
     (WRITER, {"on-behalf-of": "tenant-b"}, 403)],
    ids=["no-key", "unknown-key", "read-scope", "other-tenant"],
)
def test_refused_sends_apply_nothing(
    email: Provider, connect: Connect, secret: str | None, extra: dict[str, str], status: int
) -> None:
    client = connect(email)
    headers = {**(auth(secret) if secret else {}), **extra}
    reply = client.post("/v3/mail/send", json=mail(), headers=headers)
    assert reply.status_code == status
    assert reply.json()["errors"][0]["message"]
    assert email.journal.effects() == []
    assert email.journal.requests()[0].status == status


@pytest.mark.parametrize(
    ("content", "content_type", "field"),
    [
        (b'{"a": 1}', "text/plain", None),
        (b"{not json", "application/json", None),
        (b"[1, 2]", "application/json", None),
        (b'{"from": {"email": "a@example.com"}, "subject": "s"}', "application/json",
         "personalizations"),
        (b'{"personalizations": [{"to": [{"email": "b@example.com"}]}], "subject": "s", '
         b'"content": [{"type": "text/plain", "value": "v"}]}', "application/json", "from.email"),
        (b'{"personalizations": [{"to": [{"email": "b@example.com"}]}], '
         b'"from": {"email": "a@example.com"}, "content": [{"type": "text/plain", "value": "v"}]}',
         "application/json", "subject"),
        (b'{"personalizations": [{"to": [{"email": "b@example.com"}]}], "subject": "s", '
         b'"from": {"email": "a@example.com"}}', "application/json", "content"),
        (b'{"personalizations": [{"to": [{"email": "b@example.com"}]}], "subject": "s", '
         b'"from": {"email": "a@example.com"}, "content": [{"type": "text/plain", "value": NaN}]}',
         "application/json", None),
    ],
    ids=["content-type", "malformed", "not-object", "no-personalizations", "no-from",
         "no-subject", "no-content", "nan"],
)
def test_bad_input_is_a_400_in_sendgrid_format(
    email: Provider, connect: Connect, content: bytes, content_type: str, field: str | None
) -> None:
    client = connect(email)
    reply = post_bad_input(email, client, "/v3/mail/send", content, content_type)
    [error] = reply.json()["errors"]
    assert error["field"] == field and error["message"]
    assert client.post("/v3/mail/send", json=mail(), headers=auth(WRITER)).status_code == 202


def test_bad_search_query_is_a_400(email: Provider, connect: Connect) -> None:
    client = connect(email)
    reply = client.get("/v3/messages", params={"query": "opens>3"}, headers=auth(WRITER))
    assert reply.status_code == 400 and reply.json()["errors"][0]["field"] == "query"
