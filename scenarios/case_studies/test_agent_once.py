"""agent-once 0.1.0: "Each distinct call runs at most once"; a pending record older than
``stale_after`` goes to the tool's ``verify`` (here the bundled Stripe verifier), which says
whether the charge happened before anything runs again."""

import pytest

pytest.importorskip("once", reason="pip install -e '.[case-studies]'")
pytest.importorskip("stripe", reason="pip install stripe")

import once
import stripe
from once.verifiers import stripe_params, stripe_verifier

from pytest_crashpoints import SQLiteLedgerView, State

ORDER = {"task_id": "order_456", "amount": 1000, "customer": "cus_123"}
STATES = {"pending": State.DISPATCHED, "done": State.OUTCOME_CONFIRMED, "failed": State.FAILED,
          "unknown": State.MANUAL_REVIEW}


def worker(order, ctx, *, unknown_on=(TimeoutError, stripe.APIConnectionError, stripe.APIError)):
    client = stripe.StripeClient(ctx.api_key("payments", order["task_id"]),
                                 base_addresses={"api": ctx.base_url("payments")})
    runner = once.Once(str(ctx.env.path / "once.db"), stale_after=60,
                       unknown_on=unknown_on)

    @runner.tool(name="charge_card", verify=stripe_verifier("charge", client=client))
    def charge_card(amount: int, customer: str, idempotency_key: str | None = None) -> dict:
        params = {"amount": amount, "currency": "usd", "customer": customer}
        return client.v1.charges.create(**stripe_params(idempotency_key, params)).to_dict()

    with runner.scope(order["task_id"]):
        return charge_card(order["amount"], order["customer"])["id"]


def effects(ctx):
    return SQLiteLedgerView(ctx.env.path / "once.db", table="effects", states=STATES,
                            columns={"attempt_id": "key", "state": "status",
                                     "idempotency_key": "key"})


@pytest.mark.crashpoints(points="ABCDF", providers=["payments"], mode="exhaustive",
                         strict_coverage=False)
def test_a_card_is_charged_at_most_once(crashpoints):
    crashpoints.run(worker=worker, messages=[ORDER], ledger_view=effects)


def worker_with_the_default(order, ctx):
    return worker(order, ctx, unknown_on=(TimeoutError,))


# Documented: "`TimeoutError` marks a record unknown ... Pass `unknown_on=(TimeoutError,
# MyClientError)` to change that." By default a charge whose answer was lost is recorded
# `failed` (never run again, so still at most once) though Stripe made it.
@pytest.mark.crashpoints(points="B", faults=["lose_response"], providers=["payments"],
                         mode="exhaustive", expect=2, strict_coverage=False)
def test_by_default_a_lost_answer_is_recorded_failed(crashpoints):
    crashpoints.run(worker=worker_with_the_default, messages=[ORDER], ledger_view=effects)
