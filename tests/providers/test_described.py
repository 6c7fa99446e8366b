"""Every operation of the published API descriptions the bundled fakes serve, called through
the official SDKs unchanged (stripe-python's ``StripeClient``, PyGithub, sendgrid), each
answered with a response that validates against the description's own schema for its status.

The operations are drawn from the vendored descriptions themselves: creates first (their ids
fill the later paths), deletes last, the request bodies built from each operation's schema.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import stripe
from github import Auth, Github, GithubException
from openapi_schema_validator import OAS30Validator, OAS31Validator
from python_http_client.exceptions import HTTPError
from sendgrid import SendGridAPIClient

from fake_providers import Provider, serve
from fake_providers._described.engine import document, operations
from fake_providers._described.operations import Operation
from fake_providers._described.shapes import instance

#: Realistic values for fields a sample body needs (by name), where the schema's simplest
#: value would be refused by the service's own rules (an amount of 0, a currency "").
VALUES: dict[str, Any] = {
    "amount": 1500, "currency": "usd", "email": "ada@example.com", "title": "A title",
    "name": "triage", "body": "Text", "content": "+1", "head": "feature", "base": "main",
    "subject": "Hello", "query": "status:'succeeded'", "q": "is:issue", "color": "ededed",
    "payment_method": "pm_card_visa", "recipient_emails": ["ada@example.com"],
    "emails": ["ada@example.com"], "hostname": "parse.example.com", "url": "https://example.com/h",
    "generation": "dynamic", "list_ids": [], "contacts": [{"email": "ada@example.com"}],
}


def _sample(op: Operation, ids: Mapping[str, Any]) -> dict[str, Any]:
    """A body for ``op``: its schema's required fields, realistic where the service checks
    them, and any field that names an object of the world (``charge``) naming one."""
    doc = document(op_description(op))
    body = instance(doc, op.body) if op.body else {}
    if not isinstance(body, dict):
        return {}
    for name in (op.body or {}).get("properties") or {}:
        made = next((v for k, v in ids.items() if k.endswith("/{" + name + "}")), None)
        if made is not None:
            body[name] = made
        elif name in VALUES and (name in body or name in ("amount", "currency", "title")):
            body[name] = VALUES[name]
    return {k: v for k, v in body.items() if v is not None}


_DESCRIPTION_OF: dict[int, str] = {}


def op_description(op: Operation) -> str:
    return _DESCRIPTION_OF[id(op)]


def _ordered(name: str) -> list[Operation]:
    ops = list(operations(name))
    for op in ops:
        _DESCRIPTION_OF[id(op)] = name
    rank = {"create": 0, "delete": 3}
    return sorted(ops, key=lambda o: (rank.get(o.kind, 1), o.template.count("/")))


def _path(op: Operation, ids: Mapping[str, Any]) -> str:
    """``op``'s path, each parameter the id of an object made earlier at that place (an
    object of ``/v1/customers/{customer}``, keyed by that item path), else ``x1``."""
    out, at = "", 0
    for found in re.finditer(r"\{([^}/]+)\}", op.template):
        out += op.template[at:found.start()]
        item = op.template[: found.end()]
        out += str(ids.get(item, ids.get(found.group(1), "x1")))
        at = found.end()
    return out + op.template[at:]


#: Each description's own error schema: what an error answers where the operation does not
#: document that status (GitHub answers 404 for an object that does not exist everywhere,
#: and documents it on some operations only).
ERRORS = {"stripe": "error", "github": "basic-error", "sendgrid": "ErrorResponse"}


def _validator(name: str, op: Operation, status: int) -> Any:
    """The validator of ``op``'s documented answer for ``status`` (``None``: no body)."""
    doc = document(name)
    responses = doc.resolve(doc.data["paths"][op.template])[op.method.lower()]["responses"]
    key = str(status) if str(status) in responses else "default"
    if key in responses:
        content = doc.resolve(responses[key]).get("content") or {}
        media = content.get("application/json") or next(iter(content.values()), None)
        if not media or "schema" not in media:
            return None
    else:
        assert status >= 400, f"{op.method} {op.template}: status {status} is not documented"
        media = {"schema": {"$ref": f"#/components/schemas/{ERRORS[name]}"}}
    cls = OAS31Validator if doc.version.startswith("3.1") else OAS30Validator
    return cls({"allOf": [media["schema"]], "components": _components(name)})


@functools.cache
def _components(name: str) -> Any:
    doc = document(name)
    null = {"type": "null"} if doc.version.startswith("3.1") else {
        "type": "string", "nullable": True, "enum": [None]}
    return _nullable_as_written(doc.data["components"], null)


def _nullable_as_written(node: Any, null: dict[str, Any]) -> Any:
    """``nullable: true`` as the descriptions' authors mean it: null is allowed, whatever else
    the schema says. OpenAPI 3.0.0 said so; 3.0.3 later confined it to schemas with a
    ``type`` and 3.1 dropped the keyword, and the validators follow those: Stripe's 3.0.0
    description marks ``customer: anyOf[id, customer]`` nullable, and SendGrid's 3.1 one
    still writes ``nullable`` where its API answers null."""
    if isinstance(node, dict):
        out = {k: _nullable_as_written(v, null) for k, v in node.items()}
        if out.get("nullable") and ("type" not in out or isinstance(out["type"], str)):
            body = {k: v for k, v in out.items() if k != "nullable"}
            return {"anyOf": [body, null]}
        return out
    if isinstance(node, list):
        return [_nullable_as_written(v, null) for v in node]
    return node


def _remember(op: Operation, provider: Provider, answer: Any, ids: dict[str, Any]) -> None:
    """After a create: the id its object's item paths name it by."""
    if op.kind != "create" or not isinstance(answer, dict):
        return
    for item in operations(op_description(op)):
        placed = item.collection == op.template or (
            item.kind == "retrieve" and item.object_type == op.object_type)
        if placed and item.id_param:
            field = provider._id_field(item, item.object_type or item.collection)  # type: ignore[attr-defined]
            if answer.get(field) is not None:
                ids.setdefault(item.template, answer[field])


Call = Callable[[Operation, str, dict[str, Any], dict[str, Any]], tuple[int, Any]]


def _exercise(name: str, provider: Provider, call: Call, ids: dict[str, Any]
              ) -> tuple[list[str], int, int]:
    """Every operation of ``name`` through ``call``; the answers that do not validate, how
    many operations ran, and how many succeeded (2xx)."""
    failures: list[str] = []
    ran = succeeded = 0
    for op in _ordered(name):
        query = {q: VALUES.get(q, "x") for q in op.required_query}
        body = _sample(op, ids) if op.method != "GET" else {}
        status, answer = call(op, _path(op, ids), query, body)
        ran += 1
        succeeded += 200 <= status < 300
        try:
            validator = _validator(name, op, status)
            if validator is not None and answer not in (None, b"", ""):
                validator.validate(answer)
        except Exception as exc:  # a documented-shape failure: collected, shown at the end
            failures.append(f"{op.method} {op.template} -> {status}: {str(exc)[:300]}")
        if 200 <= status < 300:
            _remember(op, provider, answer, ids)
    return failures, ran, succeeded


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[str]:
    provider = request.getfixturevalue(request.param)
    with serve(provider) as url:
        yield url


def test_every_stripe_operation_answers_as_documented(payments: Provider) -> None:
    with serve(payments) as url:
        http = stripe.RequestsClient()
        client = stripe.StripeClient("payments-writer-a", base_addresses={"api": url},
                                     http_client=http, max_network_retries=0)

        def call(op: Operation, path: str, query: dict[str, Any], body: dict[str, Any]
                 ) -> tuple[int, Any]:
            params = {**query, **body}
            try:
                answer = client.raw_request(op.method.lower(), path, **params)
            except stripe.StripeError as exc:
                return int(exc.http_status or 0), json.loads(exc.http_body or "null")
            return answer.code, json.loads(answer.body) if answer.body else None

        try:
            failures, ran, succeeded = _exercise("stripe", payments, call, {})
        finally:
            http.close()
    assert failures == []
    assert ran >= 100
    assert succeeded >= 0.8 * ran, (succeeded, ran)


def test_every_github_operation_answers_as_documented(tickets: Provider) -> None:
    with serve(tickets) as url:
        gh = Github(auth=Auth.Token("tickets-writer-a"), base_url=url, retry=None,
                    seconds_between_requests=None, seconds_between_writes=None)

        def call(op: Operation, path: str, query: dict[str, Any], body: dict[str, Any]
                 ) -> tuple[int, Any]:
            try:
                _, data = gh.requester.requestJsonAndCheck(
                    op.method, path, parameters=query or None, input=body or None)
            except GithubException as exc:
                return exc.status, exc.data
            status = 204 if data is None and op.status == 204 else op.status
            return status, data

        try:
            failures, ran, succeeded = _exercise(
                "github", tickets, call, {"owner": "tenant-a", "repo": "ops"})
        finally:
            gh.close()
    assert failures == []
    assert ran >= 100
    assert succeeded >= 0.8 * ran, (succeeded, ran)


def test_every_sendgrid_operation_answers_as_documented(email: Provider) -> None:
    with serve(email) as url:
        sg = SendGridAPIClient(api_key="email-writer-a", host=url)

        def call(op: Operation, path: str, query: dict[str, Any], body: dict[str, Any]
                 ) -> tuple[int, Any]:
            client = sg.client
            for segment in path.strip("/").split("/")[1:]:  # after /v3, the client's own
                client = client._(segment)
            method = getattr(client, op.method.lower())
            try:
                answer = method(request_body=body or None, query_params=query or None)
            except HTTPError as exc:
                return exc.status_code, json.loads(exc.body or b"null")
            return answer.status_code, json.loads(answer.body) if answer.body else None

        failures, ran, succeeded = _exercise("sendgrid", email, call, {})
    assert failures == []
    assert ran >= 100
    # Fewer succeed here: SendGrid's bounces, blocks, spam reports and invalid addresses come
    # from mail the world delivers, not from a call, and its contacts from an import job, so
    # a read of one by address is a documented 404 (or an empty list) in a fresh world.
    assert succeeded >= 0.6 * ran, (succeeded, ran)


#: Per provider: a collection its description has (a POST creates in it, a GET lists it),
#: and the media type of its bodies, to stretch past in each way.
DESCRIBED = {
    "payments": ("/v1/customers", "application/x-www-form-urlencoded"),
    "tickets": ("/repos/tenant-a/ops/labels", "application/json"),
    "email": ("/v3/templates", "application/json"),
}


@pytest.mark.parametrize("name", sorted(DESCRIBED))
@pytest.mark.parametrize("beyond", ["route", "method", "query", "field", "media"])
def test_what_a_description_lacks_is_the_worlds_limit(
    name: str, beyond: str, request: pytest.FixtureRequest
) -> None:
    """A route, a method, a query parameter, a body field or a media type the description
    does not have is answered in the provider's error format and journaled as the world's
    limit, never served as if it were known."""
    import httpx

    from fake_providers import transport

    provider: Provider = request.getfixturevalue(name)
    path, media = DESCRIBED[name]
    client = httpx.Client(transport=transport(provider), base_url=provider.base_url,
                          headers={"Authorization": f"Bearer {name}-writer-a"})
    fields = {"name": "triage"}
    if beyond == "route":
        answer = client.get(path + "/x1/no-such-thing")
    elif beyond == "method":
        answer = client.request("PATCH", path)
    elif beyond == "query":
        answer = client.get(path, params={"no_such_filter": "1"})
    elif beyond == "field":
        body = {**fields, "no_such_field": "1"}
        answer = (client.post(path, data=body) if media.endswith("urlencoded")
                  else client.post(path, json=body))
    else:
        answer = client.post(path, content=b"<a/>", headers={"Content-Type": "text/xml"})
    info = answer.extensions["crashpoints"]
    assert answer.status_code >= 400
    assert info.world_limit is not None, answer.text
    [record] = provider.journal.requests()
    assert record.world_limit == info.world_limit
    assert provider.journal.effects() == []
    assert "does not serve this request" in answer.text
