"""An order charger with its own tables and a key derived from the order: a try killed after
the provider charged, delivered again, reuses the key and the provider replays the first
answer. One charge, whatever the crash. (Its fresh-key variants are in ``broken/``.)"""

import pytest

from scenarios.broken.test_fresh_keys import ORDER, charger, orders


@pytest.mark.crashpoints(
    points="ABCD", providers=["payments"], mode="exhaustive", strict_coverage=False
)
def test_a_stable_key_charges_once(crashpoints):
    crashpoints.run(worker=charger("stable"), messages=[ORDER], ledger_view=orders)


@pytest.mark.crashpoints(
    points=["db.commit"], faults=["failed_commit"], providers=["payments"], mode="exhaustive",
    strict_coverage=False,
)
def test_a_failed_commit_is_never_taken_for_done(crashpoints):
    # Each commit of the charger fails in turn (a full disk, an I/O error): the error raises,
    # the order is delivered again, and the stable key charges nothing twice.
    crashpoints.run(worker=charger("stable"), messages=[ORDER], ledger_view=orders)


@pytest.mark.crashpoints(
    points="ABC", providers=["payments"], mode="exhaustive", strict_coverage=False
)
def test_a_stable_key_survives_a_power_loss(crashpoints):
    # WAL with synchronous=NORMAL: each kill is tried again as a power loss, which takes the
    # commits since the last checkpoint (the order's rows). Delivered again, the order is new
    # to the charger, and its key, derived from the order, makes the provider replay.
    crashpoints.run(worker=charger("stable", synchronous="NORMAL"), messages=[ORDER],
                    ledger_view=orders)


@pytest.mark.crashpoints(
    points="ABC", faults=["backup_restore"], providers=["payments"], mode="exhaustive",
    strict_coverage=False,
)
def test_a_stable_key_survives_a_restored_backup(crashpoints):
    # Killed at each point, then the shop's database restored from the backup taken before
    # the order: the order is new again, and the key derived from it makes the provider
    # replay its first charge instead of charging twice.
    crashpoints.run(worker=charger("stable"), messages=[ORDER], ledger_view=orders)
