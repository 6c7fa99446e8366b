"""BUG: a DBOS step that charges without an idempotency key (``../dbos_charger.py`` with
``keyed=False``). Killed after the charge and before DBOS checkpointed the step, the workflow
is recovered by DBOS (``DBOS.launch()`` in the next process) from its last checkpoint, and
the step runs again: a second charge (invariant 1). DBOS runs steps at least once; the key
derived from the workflow's id makes it once at the provider (``../test_dbos_charger.py``)."""

from __future__ import annotations

import pytest

pytest.importorskip("dbos", reason="the DBOS scenario needs dbos (pip install dbos)")

from scenarios.test_dbos_charger import ORDER, unkeyed_recovery, unkeyed_worker, workflows


@pytest.mark.crashpoints(points="B", faults=["kill"], providers=["payments"], mode="exhaustive",
                         expect=1, strict_coverage=False)
def test_a_step_without_a_key_charges_again_when_dbos_recovers_it(crashpoints):
    crashpoints.run(worker=unkeyed_worker, recover=unkeyed_recovery, messages=[ORDER],
                    ledger_view=workflows)
