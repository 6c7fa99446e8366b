"""The renewal charger with the fix, tested two ways: the usual crash test from an empty world,
and from the incident production left on 2026-11-30 (``scenarios/incident/``): November's
renewal stuck ``charging``, and Stripe holding its charge. Settling a stuck row by asking
Stripe confirms the charge that was made, and never charges again (docs/howto-incident.md).
Its twin that charges again is in ``broken/test_renewal_charger.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from scenarios.renewal_incident import INCIDENT, RENEWAL, recovery, renewals, worker

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
