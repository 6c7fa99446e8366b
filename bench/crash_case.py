"""Item 1: the cost of one crash case against a bare fork + SIGKILL + waitpid.

One case: the reference worker on one message, killed with SIGKILL at point B (the provider
applied the request, the worker never saw the answer), then the quiet phase (recovery until
nothing changes), the second recovery run, the killed-recovery replay on a copy of the run
directory, and the six checks. The floor is a bare fork + SIGKILL + waitpid from the same
process, measured between the cases. A and C kills and the fault-free case are reported too,
as is the same case with the parent warmed up as recommendation R1 asks.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

import pytest_crashpoints._worker as worker_module
from pytest_crashpoints._case import run_case
from pytest_crashpoints._schedule import Deliver, Schedule

from . import _floors, _stats
from ._scenarios import KillAt, email_scenario, warm_parent

GOAL = 4.0


def processes_per_case(scenario: Any, schedule: Schedule, base: Path) -> int:
    """How many worker and recovery processes one run of the case starts."""
    started = []
    original = worker_module.start_worker

    def counting(*args: Any, **kwargs: Any) -> Any:
        started.append(args[0])
        return original(*args, **kwargs)

    worker_module.start_worker = counting
    try:
        run_case(scenario, schedule, base_dir=base)
    finally:
        worker_module.start_worker = original
    return len(started)


def _measure(scenario: Any, schedule: Schedule, base: Path, reps: int) -> dict[str, Any]:
    cases, floors, fingerprints = [], [], set()
    for _ in range(reps):
        floors.append(_floors.fork_kill_wait())
        elapsed, case = _stats.timed_case(
            functools.partial(run_case, scenario, schedule, base_dir=base)
        )
        cases.append(elapsed)
        if not case.passed:
            raise SystemExit(f"the benchmark case failed: {case.violations}")
        fingerprints.add(case.fingerprint)
    return {
        "schedule": str(schedule),
        "case": _stats.summary(cases),
        "floor": _stats.summary(floors),
        "ratio": _stats.ratios(cases, floors),
        "processes": processes_per_case(scenario, schedule, base),
        "fingerprints": len(fingerprints),
        "fingerprint": sorted(fingerprints)[0],
    }


def main() -> None:
    reps = 4 if _stats.quick() else 15
    side_reps = 3 if _stats.quick() else 7
    scenario = email_scenario()
    crash = Schedule((Deliver(0, KillAt("B")),))
    with tempfile.TemporaryDirectory(prefix="bench-case-") as tmp:
        base = Path(tmp)
        run_case(scenario, crash, base_dir=base)  # first-use imports in the parent
        headline = _measure(scenario, crash, base, reps)
        others = {
            label: _measure(scenario, schedule, base, side_reps)
            for label, schedule in (
                ("kill at A", Schedule((Deliver(0, KillAt("A")),))),
                ("kill at C", Schedule((Deliver(0, KillAt("C")),))),
                ("fault-free", Schedule((Deliver(0),))),
            )
        }
        # Last: the warm-up changes this process for good.
        warm_parent()
        warm = _measure(scenario, crash, base, reps)
    ratio = headline["ratio"]["median"]
    per_process = ratio / headline["processes"]
    warm["same_end_state"] = warm["fingerprint"] == headline["fingerprint"]
    _stats.emit(
        _stats.result(
            1,
            "crash-case cost",
            goal=f"<= {GOAL:g}x a bare fork+SIGKILL+waitpid",
            met=ratio <= GOAL,
            figure=(
                f"{ratio:.0f}x ({headline['case']['median'] * 1e3:.0f} ms vs "
                f"{headline['floor']['median'] * 1e3:.2f} ms); {headline['processes']} "
                f"processes per case, {per_process:.0f}x the floor per process; "
                f"parent warmed (R1): {warm['ratio']['median']:.0f}x "
                f"({warm['case']['median'] * 1e3:.0f} ms)"
            ),
            command="python -m bench.crash_case",
            details={"kill at B": headline, **others, "kill at B, parent warmed (R1)": warm},
        )
    )


if __name__ == "__main__":
    main()
