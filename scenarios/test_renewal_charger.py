"""The renewal charger with the fix, tested three ways: the usual crash test from an empty
world; from the incident production left on 2026-11-30 (``scenarios/incident/``): November's
renewal stuck ``charging``, and Stripe holding its charge; and from the incident of
2024-06-14 (``scenarios/incident_2024/``), with its message and by the recovery alone (the
worker long dead), Stripe's list also holding the charge of the customer's other
subscription. Settling a stuck row by asking Stripe confirms the charge that was made, and
never charges again (docs/howto-incident.md). Its twin that charges again is in
``broken/test_renewal_charger.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from scenarios.renewal_incident import (
    INCIDENT,
    INCIDENT_2024,
    RENEWAL,
    RENEWAL_2024,
    recovery,
    renewals,
    worker,
)

if TYPE_CHECKING:
    from pytest_crashpoints import CrashpointsFixture


# Its own table has no columns for arguments, request ids or owners (strict_coverage=False:
# the checks it cannot support are listed as NOT CHECKED).
@pytest.mark.crashpoints(providers=["payments"], mode="exhaustive", strict_coverage=False)
def test_each_renewal_is_charged_once(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(worker=worker, recover=recovery, messages=[RENEWAL], ledger_view=renewals)


# Settled right, the incident never charges: A and B stay unreached.
@pytest.mark.crashpoints(providers=["payments"], mode="exhaustive", max_faults=1,
                         strict_coverage=False)
def test_the_november_incident_is_settled_without_a_second_charge(
    crashpoints: CrashpointsFixture,
) -> None:
    crashpoints.run(worker=worker, recover=recovery, messages=[RENEWAL], ledger_view=renewals,
                    incident=INCIDENT)


# The clock starts at the incident, in 2024; the other subscription's charge is its history.
@pytest.mark.crashpoints(providers=["payments"], mode="exhaustive", max_faults=1,
                         strict_coverage=False)
def test_the_june_2024_incident_is_settled_without_a_second_charge(
    crashpoints: CrashpointsFixture,
) -> None:
    crashpoints.run(worker=worker, recover=recovery, messages=[RENEWAL_2024],
                    ledger_view=renewals, incident=INCIDENT_2024)


# No message: the recovery alone settles June's row, killed at each point it reaches, twice
# at once, and with Stripe's lookups failing.
@pytest.mark.crashpoints(providers=["payments"], mode="exhaustive", max_faults=1,
                         strict_coverage=False)
def test_the_june_2024_incident_is_settled_by_the_recovery_alone(
    crashpoints: CrashpointsFixture,
) -> None:
    crashpoints.run(recover=recovery, ledger_view=renewals, incident=INCIDENT_2024)
