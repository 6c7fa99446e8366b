"""BUG: the installment charger reads its API key once per order. An operator revokes the
integration while the deposit is being charged; the balance still goes out under the old key
(invariant 4). The agent has no fail point of its own: the harness waits between its two
charges at the answer to the first. Its twin that asks before each charge passes
(``scenarios/test_installments.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from scenarios.test_installments import ORDER, charges, installments

if TYPE_CHECKING:
    from pytest_crashpoints import CrashpointsFixture


@pytest.mark.crashpoints(
    points="E", providers=["payments"], mode="exhaustive", expect=4, strict_coverage=False
)
def test_credentials_read_once_per_order(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(worker=installments("once"), messages=[ORDER], ledger_view=charges)
