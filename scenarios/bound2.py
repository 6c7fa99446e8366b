"""Every schedule of up to two faults, on the charge-then-receipt message: the reference worker
and recovery must pass all of them (1,146 schedules, five to ten minutes on two cores).

The gate draws 20 of them (``test_order_receipt.py``); this runs them all::

    make bound2            # or: python -m scenarios.bound2

Exit status 0 when every schedule passed, 1 with the failure report otherwise.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from pytest_crashpoints import Authority, ProviderSpec, reference_recovery, reference_worker
from pytest_crashpoints.harness import CrashSettings, Scenario, explore, render_failure
from scenarios.broken.test_broken_agents import ORDER_WITH_RECEIPT

PROVIDERS = ("payments", "email")


def main() -> int:
    scope = " ".join(f"{p}:{access}" for p in PROVIDERS for access in ("read", "write"))
    scenario = Scenario(
        worker=reference_worker,
        recover=reference_recovery,
        messages=(ORDER_WITH_RECEIPT,),
        providers=tuple(ProviderSpec(name) for name in PROVIDERS),
        authorities={
            str(ORDER_WITH_RECEIPT["task_id"]): Authority.of(
                tenant_id=str(ORDER_WITH_RECEIPT["tenant"]),
                credential_scope=scope,
                policy_version="p1",
            )
        },
    )
    settings = CrashSettings(points=tuple("ABCDEF"), mode="exhaustive", max_faults=2, seed=0)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="crashpoints-bound2-") as base:
        report = explore(scenario, settings, base_dir=Path(base), nodeid="scenarios/bound2.py")
        seconds = time.monotonic() - started
        if report.failure is not None:
            print(render_failure(report))
            return 1
    print(
        f"bound 2, charge then receipt: {report.cases} schedule(s), all passed, "
        f"in {seconds:.0f} s; killed at {', '.join(sorted(report.killed))}; "
        f"points and faults reached: {', '.join(sorted(report.reached))}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
