"""Run a deployment: not idempotent and no lookup at all.

When the answer is lost (a kill at B or C), nothing can ever tell whether the deployment
happened: the only safe end is MANUAL_REVIEW, never a retry. The invariants accept it (a
final state, no second deployment). F (lookup timeouts) does not apply: there is no lookup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_crashpoints import reference_recovery, reference_worker

if TYPE_CHECKING:
    from pytest_crashpoints import CrashpointsFixture

RELEASE = {
    "task_id": "release-142",
    "tenant": "tenant-7",
    "calls": [
        {
            "tool": "deploy",
            "key": "release:tenant-7:api:1.4.2:production",
            "args": {"service": "api", "version": "1.4.2", "environment": "production"},
        }
    ],
}


@pytest.mark.crashpoints(points="ABCDE", providers=["deploy"], mode="exhaustive", max_faults=1)
def test_deployment_is_never_repeated(crashpoints: CrashpointsFixture) -> None:
    report = crashpoints.run(
        worker=reference_worker, recover=reference_recovery, messages=[RELEASE]
    )
    # The lost answers were reached and killed at, and recovery coped with each of them.
    assert report.killed.get("B") and report.killed.get("C")
