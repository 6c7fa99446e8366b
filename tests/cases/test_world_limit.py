"""A request a fake provider does not serve is the simulated world's limit, never the agent's
violation: the case's verdict is an error of origin ``world`` that names the request and the
way out, in the fault-free run and in a faulted case alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fake_providers import Effect, HttpApi, Lookup, Script, say
from pytest_crashpoints import Authority, Context, ProviderSpec, reference_worker
from pytest_crashpoints.harness import Deliver, KillAt, Scenario, Schedule, run_case

from .conftest import INVOICE_EMAIL, email_task_scenario

WORLD_LIMIT = "the world's limit: "

NOTES = HttpApi(
    "notes",
    Effect("POST", "/v1/notes", "note"),
    Lookup("GET", "/v1/notes/{id}", "note"),
)

#: Per provider: a request no description of it serves, and the scope its key needs.
UNSERVED: dict[str, tuple[str, str, str]] = {
    "payments": ("GET", "/v1/no_such_resources", "payments:read payments:write"),
    "email": ("GET", "/v3/no_such_resources", "email:read email:write"),
    "tickets": ("GET", "/repos/acme/shop/no_such_resources", "tickets:read tickets:write"),
    "deploy": ("GET", "/v1/deployments", "deploy:write"),
    "model": ("POST", "/v1/no_such_resources", "model:read"),
    "notes": ("DELETE", "/v1/notes", "notes:read notes:write"),
}


def asks_beyond_the_world(message: dict[str, Any], ctx: Context) -> object:
    """Makes one request the test's provider does not serve, then goes on as if answered."""
    provider, (method, path, _) = message["provider"], UNSERVED[message["provider"]]
    with ctx.client(provider, message["task_id"]) as client:
        answer = client.request(method, path)
    assert answer.status_code >= 400, answer.text
    return None


def spec_of(name: str) -> ProviderSpec:
    return ProviderSpec(name, api=NOTES) if name == "notes" else ProviderSpec(name)


@pytest.mark.parametrize("name", sorted(UNSERVED))
def test_the_fault_free_run_stops_at_a_request_the_fake_does_not_serve(
    name: str, tmp_path: Path
) -> None:
    method, path, scope = UNSERVED[name]
    case = Scenario(
        worker=asks_beyond_the_world,
        recover=None,
        messages=({"task_id": "t-1", "provider": name},),
        providers=(spec_of(name),),
        authorities={
            "t-1": Authority.of(tenant_id="tenant-1", credential_scope=scope, policy_version="p1")
        },
        model=Script([say("unused")]) if name == "model" else None,
    )
    result = run_case(case, Schedule((Deliver(0),)), base_dir=tmp_path)
    assert result.violations == ()  # never the agent's violation
    first = result.errors[0]
    assert first.startswith(WORLD_LIMIT), result.errors
    assert f"the fake {name} provider does not serve what worker-1 sent: {method} {path}" in (
        first
    ), first
    assert "origin 'world'" in first
    assert "HttpApi(...)" in first and "openapi(...)" in first  # the way out
    assert "[the world's limit: not served:" in result.timeline


def reads_beyond_the_world_first(ctx: Context) -> None:
    """A recovery that asks the provider through a route the fake does not serve (and gives
    up on the answer), before it reconciles."""
    for task_id in {a.task_id for a in ctx.ledger.attempts() if a.in_flight}:
        with ctx.client("email", task_id) as client:
            answer = client.get("/v3/messages/by-campaign/invoices")
        if answer.status_code >= 400:
            raise RuntimeError(f"the provider said {answer.status_code}: {answer.text}")
    ctx.recover()


def test_a_case_whose_recovery_reaches_past_the_world_is_no_violation(tmp_path: Path) -> None:
    case = email_task_scenario(reference_worker, INVOICE_EMAIL)
    case = Scenario(**{**case.__dict__, "recover": reads_beyond_the_world_first})
    golden = run_case(case, Schedule((Deliver(0),)), base_dir=tmp_path)
    assert golden.passed, golden.errors  # a quiet day never recovers: nothing unserved
    result = run_case(
        case,
        Schedule((Deliver(0, KillAt("B")),)),
        base_dir=tmp_path,
        expected=golden.expected_effects,
    )
    # The attempt stays in flight (its recovery raised on every run): without the world's
    # limit this would be invariants 2 and 5, blaming the agent for the simulator.
    assert result.violations == ()
    assert result.errors[0].startswith(WORLD_LIMIT), result.errors
    assert "what recovery-" in result.errors[0]
    assert "GET /v3/messages/by-campaign/invoices" in result.errors[0]
