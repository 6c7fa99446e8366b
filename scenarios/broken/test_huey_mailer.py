"""BUG (Huey's default): a worker killed mid-task takes the task with it. Huey deletes a task
from its queue when a worker takes it and keeps no record of it in progress, so the
restarted worker finds an empty queue and no result: the job is stuck half done (invariant
2; the worker's return says what Huey has left). The fix is in ``../test_huey_mailer.py``."""

from __future__ import annotations

import pytest

pytest.importorskip("huey", reason="the Huey scenario needs huey (pip install huey)")

from scenarios.test_huey_mailer import JOB, default_worker, jobs


@pytest.mark.crashpoints(points="B", faults=["kill"], providers=["email"], mode="exhaustive",
                         expect=2, strict_coverage=False)
def test_hueys_default_loses_the_task_of_a_killed_worker(crashpoints):
    crashpoints.run(worker=default_worker, messages=[JOB], ledger_view=jobs)
