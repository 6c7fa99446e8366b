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
