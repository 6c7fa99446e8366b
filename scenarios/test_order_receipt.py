"""Charge an order, then e-mail the receipt: one message, two tool calls, two providers.

The reference worker asks the task's authority before each call; when it changes between the
charge and the receipt (E midway: revoked, narrowed, another tenant or policy), the receipt is
not sent and is recorded in MANUAL_REVIEW with the reason, so nothing is dropped without a
trace. Every single fault passes, and every pair of faults (``make bound2``; the gate draws 20).
The worker that reads the authority once per message is caught in
``broken/test_broken_agents.py::test_authority_read_once_per_message``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_crashpoints import reference_recovery, reference_worker
from scenarios.broken.test_broken_agents import ORDER_WITH_RECEIPT

if TYPE_CHECKING:
    from pytest_crashpoints import CrashpointsFixture


@pytest.mark.crashpoints(
    points="ABCDEF", providers=["payments", "email"], mode="exhaustive", max_faults=1
)
def test_charge_then_receipt(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=reference_worker, recover=reference_recovery, messages=[ORDER_WITH_RECEIPT]
    )


@pytest.mark.crashpoints(
    points="ABCDEF",
    providers=["payments", "email"],
    mode="hypothesis",
    max_examples=20,
    max_faults=2,
)
def test_charge_then_receipt_under_two_faults(crashpoints: CrashpointsFixture) -> None:
    # Every pair of faults (1,146 schedules) passes too; that takes five minutes, so the gate
    # draws 20 of them. Run them all with: make bound2
    crashpoints.run(
        worker=reference_worker, recover=reference_recovery, messages=[ORDER_WITH_RECEIPT]
    )
