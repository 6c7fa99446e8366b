"""Item 7: how a case's cost grows with the tool calls of a task and the faults of a schedule.

Tool calls: one message making 1, 4 and 16 ``send_email`` calls, the worker killed at B of
the last call (so it did all the work), then recovery and the checks. Faults: four
messages, the first 1, 2 and 4 of them killed at B (so recovery has as many attempts to settle).
Each point is the median of several cases, and each case is divided by a bare fork + SIGKILL +
waitpid measured just before it. "Linear, not worse" means the marginal cost of the last step
(per call, per fault) is at most 1.5 times that of the first step.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from pytest_crashpoints.harness import Deliver, Schedule, run_case

from . import _stats
from ._scenarios import KillAt, email_scenario
from .crash_case import processes_per_case, timed_cases

SLACK = 1.5


def _point(scenario: Any, schedule: Schedule, base: Path, reps: int) -> dict[str, Any]:
    run_case(scenario, schedule, base_dir=base)
    cases, floors, _ = timed_cases(scenario, schedule, base, reps)
    return {
        "schedule": str(schedule),
        "case": _stats.summary(cases),
        "ratio": _stats.ratios(cases, floors),
        "processes": processes_per_case(scenario, schedule, base),
    }


def _linear(sizes: list[int], points: dict[int, dict[str, Any]]) -> tuple[bool, list[float]]:
    medians = [points[n]["case"]["median"] for n in sizes]
    slopes = [
        (medians[i + 1] - medians[i]) / (sizes[i + 1] - sizes[i]) for i in range(len(sizes) - 1)
    ]
    # A slope at or below zero is noise around a flat cost: nothing to scale against.
    ok = slopes[0] <= 0 or slopes[-1] <= SLACK * slopes[0]
    return ok, slopes


def main() -> None:
    reps = 3 if _stats.quick() else 4
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp:
        base = Path(tmp)
        calls = {
            n: _point(
                email_scenario(calls=n),
                Schedule((Deliver(0, KillAt("B", n)),)),
                base,
                reps,
            )
            for n in (1, 4, 16)
        }
        scenario = email_scenario(messages=4)
        faults = {
            k: _point(
                scenario,
                Schedule(tuple(Deliver(m, KillAt("B") if m < k else None) for m in range(4))),
                base,
                reps,
            )
            for k in (1, 2, 4)
        }
    calls_ok, call_slopes = _linear([1, 4, 16], calls)
    faults_ok, fault_slopes = _linear([1, 2, 4], faults)

    def ms(points: dict[int, dict[str, Any]]) -> str:
        return ", ".join(
            f"{n}: {p['case']['median'] * 1e3:.0f} ms/{p['processes']} proc"
            for n, p in points.items()
        )

    _stats.emit(
        _stats.result(
            7,
            "scaling",
            goal=f"linear: the last step's marginal cost <= {SLACK:g}x the first step's",
            met=calls_ok and faults_ok,
            figure=(
                f"calls {ms(calls)} ({call_slopes[0] * 1e3:.0f} then "
                f"{call_slopes[1] * 1e3:.0f} ms per call); faults {ms(faults)} "
                f"({fault_slopes[0] * 1e3:.0f} then {fault_slopes[1] * 1e3:.0f} ms per fault)"
            ),
            command="python -m bench.scaling",
            details={
                "tool calls per task": {str(n): p for n, p in calls.items()},
                "marginal cost per call (s)": call_slopes,
                "faults per schedule (4 messages)": {str(k): p for k, p in faults.items()},
                "marginal cost per fault (s)": fault_slopes,
            },
        )
    )


if __name__ == "__main__":
    main()
