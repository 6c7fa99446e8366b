"""BUG: an outbox relay that publishes without a key (``../outbox_relay.py`` with
``dedupe=False``). Killed after the publish and before it marked the row sent (B), the next
run (the relay as recovery, or the order delivered again) publishes the row again: the
consumer gets ``order.placed`` twice (invariant 1). With the outbox row's id as the key it
passes (``../test_outbox_relay.py``)."""

from __future__ import annotations

import pytest

from scenarios.test_outbox_relay import BROKER, ORDER, no_key_recover, no_key_worker, outbox


@pytest.mark.crashpoints(points="B", faults=["kill"], providers=[BROKER], mode="exhaustive",
                         expect=1, strict_coverage=False)
def test_a_relay_killed_between_publish_and_mark_publishes_twice(crashpoints):
    crashpoints.run(worker=no_key_worker, recover=no_key_recover, messages=[ORDER],
                    ledger_view=outbox)
