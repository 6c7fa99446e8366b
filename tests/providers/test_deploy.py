"""deploy: not idempotent, and no lookup at all."""

from __future__ import annotations

import pytest

from fake_providers import Provider
from pytest_crashpoints import args_hash

from .conftest import Connect, auth, post_bad_input

WRITER = "deploy-writer-a"
DEPLOYMENT = {"service": "billing", "version": "1.4.2", "environment": "prod",
              "metadata": {"crashpoints_correlation_id": "d-1"}}


def test_every_deploy_is_an_effect_with_nothing_to_look_up(
    deploy: Provider, connect: Connect
) -> None:
    client = connect(deploy)
    for _ in range(2):
        reply = client.post("/v1/deployments", json=DEPLOYMENT, headers=auth(WRITER))
        assert reply.status_code == 202 and reply.json() == {"status": "accepted"}
        assert reply.headers["X-Request-Id"]
    assert deploy.journal.effect_counts() == {"d-1": 2}
    assert {e.payload_hash for e in deploy.journal.effects()} == {args_hash(DEPLOYMENT)}
    for path in ("/v1/deployments", "/v1/deployments/deploy_00000000000001"):
        assert client.get(path, headers=auth(WRITER)).status_code == 404


@pytest.mark.parametrize(
    ("secret", "extra", "status"),
    [(None, {}, 401), ("x", {}, 401), (WRITER, {"X-Crashpoints-Tenant": "tenant-b"}, 403)],
    ids=["no-key", "unknown-key", "other-tenant"],
)
def test_refused_deploys_apply_nothing(
    deploy: Provider, connect: Connect, secret: str | None, extra: dict[str, str], status: int
) -> None:
    client = connect(deploy)
    headers = {**(auth(secret) if secret else {}), **extra}
    reply = client.post("/v1/deployments", json=DEPLOYMENT, headers=headers)
    assert reply.status_code == status and reply.json()["error"]["message"]
    assert deploy.journal.effects() == []


@pytest.mark.parametrize(
    ("content", "content_type"),
    [(b"{", "application/json"), (b'{"service": "s"}', "application/json"),
     (b'{"service": "s", "version": "v", "environment": "e", "x": 1}', "application/json"),
     (b'{"service": "s", "version": "v", "environment": "e"}', "text/plain")],
    ids=["malformed", "missing-fields", "unknown-field", "content-type"],
)
def test_bad_input_is_a_400(
    deploy: Provider, connect: Connect, content: bytes, content_type: str
) -> None:
    reply = post_bad_input(deploy, connect(deploy), "/v1/deployments", content, content_type)
    assert reply.json()["error"]["code"]
