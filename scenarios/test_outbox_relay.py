"""A transactional outbox and its relay (``outbox_relay.py``), crash-tested: the worker writes
the order and its event in one transaction and relays it; the relay also runs on its own as
the recovery. Killed between the commit and the publish, the next run publishes the event;
killed between the publish and the mark, the next run publishes it again, and the broker,
given the outbox row's id as the key, keeps one event. The consumer's view is the broker's
journal: one ``order.placed`` per order, whatever the crash. The relay without the key is in
``broken/test_outbox_relay.py``."""

from __future__ import annotations

import functools

import pytest

from fake_providers import Effect, HttpApi
from pytest_crashpoints import SQLiteLedgerView, State
from scenarios import outbox_relay

#: The event broker: ``POST /v1/events`` appends an event; a key makes a second publish of
#: the same event a replay, as an idempotent producer or a deduping consumer does.
BROKER = HttpApi("broker", Effect("POST", "/v1/events", "event", required=("topic",)),
                 idempotency_header="Idempotency-Key")
ORDER = {"task_id": "order-7", "amount": 4200}


def worker(order, ctx, *, dedupe=True):
    db = ctx.env.path / "orders.db"
    outbox_relay.place_order(order, db=db)
    return outbox_relay.relay(db=db, api_url=ctx.base_url("broker"),
                              api_key=ctx.api_key("broker", order["task_id"]), dedupe=dedupe)


def recover(ctx, *, dedupe=True):
    outbox_relay.relay(db=ctx.env.path / "orders.db", api_url=ctx.base_url("broker"),
                       api_key=ctx.api_key("broker", ORDER["task_id"]), dedupe=dedupe)


def outbox(ctx):
    # Each outbox row is an attempt: unsent is in flight, sent is confirmed.
    return SQLiteLedgerView(ctx.env.path / "orders.db", table="outbox",
                            columns={"attempt_id": "id", "state": "sent"},
                            states={0: State.DISPATCHED, 1: State.OUTCOME_CONFIRMED})


@pytest.mark.crashpoints(points="ABCD", providers=[BROKER], mode="exhaustive",
                         strict_coverage=False)
def test_each_event_reaches_the_consumer_once(crashpoints):
    crashpoints.run(worker=worker, recover=recover, messages=[ORDER], ledger_view=outbox)


no_key_worker = functools.partial(worker, dedupe=False)
no_key_recover = functools.partial(recover, dedupe=False)
