"""exactly-once 0.2.1: "the effect is *entered at most once per key* across retries, concurrent
workers, crashes, and replays"; a crash mid-effect is quarantined, and its recipe for money
movement, ``check_then_decide(prober)`` with a lease, observes the world instead of guessing."""

import pytest

pytest.importorskip("exactly_once", reason="pip install -e '.[case-studies]'")


from exactly_once import ProbeResult, Store, Verdict, check_then_decide, current_key, once

from pytest_crashpoints import SQLiteLedgerView, State
from scenarios.case_studies.tools import charge, find_charge, send_email

ORDER = {"task_id": "order-7", "amount": 4200}
STATES = {"in_flight": State.DISPATCHED, "committed": State.OUTCOME_CONFIRMED}


def worker(order, ctx):
    def prober(key):    # observe the world: did the charge actually land?
        found = find_charge(ctx, order["task_id"], key)
        if found:
            return ProbeResult(Verdict.COMMITTED, found)
        return ProbeResult(Verdict.NOT_COMMITTED)

    @once(Store.sqlite(str(ctx.env.path / "effects.db")), key=lambda o: f"charge:{o['task_id']}",
          policy=check_then_decide(prober), lease_ttl=30.0)
    def charge_card(o):
        return charge(ctx, o["task_id"], o["amount"], key=current_key())

    return charge_card(order)


def effects(ctx):
    return SQLiteLedgerView(ctx.env.path / "effects.db", table="effects", states=STATES,
                            columns={"attempt_id": "key", "state": "state",
                                     "idempotency_key": "key"})


@pytest.mark.crashpoints(points="ABCD", providers=["payments"], mode="exhaustive",
                         strict_coverage=False)
def test_a_quarantined_charge_is_probed_and_made_once(crashpoints):
    crashpoints.run(worker=worker, messages=[ORDER], ledger_view=effects)


def mailer(order, ctx):
    """The quickstart's decorator around an e-mail, with the default policy: quarantine."""
    @once(Store.sqlite(str(ctx.env.path / "effects.db")), key=lambda o: f"welcome:{o['task_id']}")
    def send_welcome(o):
        return send_email(ctx, o["task_id"], "ada@example.com", "Welcome", key=current_key())

    return send_welcome(order)


def quarantine(ctx):
    # The table does not tell a quarantined key from one being run: at the end of a case no
    # worker runs, so a key left in flight is quarantined, waiting for a person.
    return SQLiteLedgerView(ctx.env.path / "effects.db", table="effects",
                            states={**STATES, "in_flight": State.MANUAL_REVIEW},
                            columns={"attempt_id": "key", "state": "state",
                                     "idempotency_key": "key"})


@pytest.mark.crashpoints(points="ABCD", faults=["-power_loss"], providers=["email"],
                         mode="exhaustive", strict_coverage=False)
def test_an_email_killed_mid_effect_is_quarantined_not_sent_again(crashpoints):
    crashpoints.run(worker=mailer, messages=[ORDER], ledger_view=quarantine)


# Its SQLite store: "WAL journaling with synchronous=NORMAL survives process death (our crash
# model: SIGKILL, not power loss)". A power loss takes the unsynced claim, and the e-mail,
# which has no key of its own, is sent again.
@pytest.mark.crashpoints(points="B", faults=["power_loss"], providers=["email"],
                         mode="exhaustive", expect=1, strict_coverage=False)
def test_a_power_loss_takes_the_claim_as_documented(crashpoints):
    crashpoints.run(worker=mailer, messages=[ORDER], ledger_view=quarantine)
