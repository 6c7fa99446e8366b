"""BUG (the incident of 2026-11-30): the renewal charger settles a row left ``charging`` by
charging again with a new key. Production left November's renewal stuck after Stripe had
charged it (``scenarios/incident/``); from that state, the redelivered renewal and the
start-up recovery charge the customer a second time (invariant 1). Its fixed twin asks
Stripe first (``scenarios/test_renewal_charger.py``); docs/howto-incident.md reproduces the
incident with ``crashpoints reproduce``.

The same code had the incident of 2024-06-14 (``scenarios/incident_2024/``): its recovery
alone, with no message to redeliver, charges June's renewal again (invariant 1, with June's
charge only: the customer's other subscription's charge, in the same export, is no one's
duplicate)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from scenarios.renewal_incident import (
    INCIDENT,
    INCIDENT_2024,
    RENEWAL,
    recovery_that_retries,
    renewals,
    worker_that_retries,
)

if TYPE_CHECKING:
    from pytest_crashpoints import CrashpointsFixture


@pytest.mark.crashpoints(providers=["payments"], mode="exhaustive", max_faults=1, expect=1,
                         strict_coverage=False)
def test_the_november_incident_charges_again(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(worker=worker_that_retries, recover=recovery_that_retries,
                    messages=[RENEWAL], ledger_view=renewals, incident=INCIDENT)


@pytest.mark.crashpoints(providers=["payments"], mode="exhaustive", max_faults=1, expect=1,
                         strict_coverage=False)
def test_the_june_2024_incident_recovered_alone_charges_again(
    crashpoints: CrashpointsFixture,
) -> None:
    crashpoints.run(recover=recovery_that_retries, ledger_view=renewals, incident=INCIDENT_2024)
