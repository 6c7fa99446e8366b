"""Item 6: the parent's memory over many cases stays flat.

Two measurements of the parent's resident set (``VmRSS``) and its peak (``VmHWM``), from
``/proc/self/status``:

* the per-case harness machinery that could leak, 10,000 times: a worker process started,
  killed with SIGKILL at a fail point and reaped (``run_worker``), the reference ledger opened,
  read and closed, and (every tenth iteration, they are the slow part) a fake provider opened
  and closed over its journal and the harness clock advanced; reported at 1k and 10k
  iterations;
* whole crash cases (kill at B, quiet phase, second recovery, killed-recovery replay, checks)
  through ``run_case``: fewer of them (each takes about half a second), reported at 25 and 100.

"Flat" means the peak at the end is within 2 MiB or 5% of the peak after the first
thousand iterations (the first 25 cases), whichever is larger.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from fake_providers import PROVIDERS
from pytest_crashpoints import Ledger, ProviderSpec, crashpoint
from pytest_crashpoints._harness.case.context import CaseEnv
from pytest_crashpoints._inject.failpoints import Fault, Kill
from pytest_crashpoints._process.outcome import Killed
from pytest_crashpoints._process.worker import run_worker
from pytest_crashpoints.harness import Deliver, HarnessClock, Schedule, run_case

from . import _stats
from ._scenarios import KillAt, email_scenario


def _status() -> dict[str, float]:
    values = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024  # MiB
    return {"rss_mib": values["VmRSS"], "peak_mib": values["VmHWM"]}


def _die_at_a() -> None:
    crashpoint("A", tool="send_email")


def _machinery(iterations: int, checkpoints: set[int], root: Path) -> dict[str, Any]:
    env = CaseEnv(str(root), (ProviderSpec("email"),))
    (root / "journals").mkdir(parents=True)
    clock = HarnessClock(env.clock_path)
    samples = {}
    for n in range(1, iterations + 1):
        outcome = run_worker(_die_at_a, faults=[Fault("A", Kill())], timeout=30.0)
        if not isinstance(outcome, Killed):
            raise SystemExit(f"iteration {n}: the worker was not killed: {outcome!r}")
        ledger = Ledger(env.ledger_path, clock=clock.now)
        ledger.queue()
        ledger.close()
        if n % 10 == 0:  # the slow ones (journal schema check, rename): every tenth time
            spec = env.providers[0]
            provider = PROVIDERS[spec.name](env.journal_path(spec.name), clock=clock.now)
            provider.close()
            clock.advance(1.0)
        if n in checkpoints:
            samples[n] = _status()
    return samples


def _cases(count: int, checkpoints: set[int], base: Path) -> dict[int, dict[str, float]]:
    scenario = email_scenario()
    schedule = Schedule((Deliver(0, KillAt("B")),))
    samples = {}
    for n in range(1, count + 1):
        result = run_case(scenario, schedule, base_dir=base)
        if not result.passed:
            raise SystemExit(f"case {n} failed: {result.violations}")
        if n in checkpoints:
            samples[n] = _status()
    return samples


def _flat(first: float, last: float) -> bool:
    return last - first <= max(2.0, 0.05 * first)


def main() -> None:
    iterations, cases = (1_000, 20) if _stats.quick() else (10_000, 100)
    marks = {1, 1_000, 2_500, 5_000, 7_500, 10_000} & set(range(1, iterations + 1))
    case_marks = {1, 10, 25, 50, 100, cases} & set(range(1, cases + 1))
    start = _status()
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        machinery = _machinery(iterations, marks, Path(tmp) / "machinery")
        whole = _cases(cases, case_marks, Path(tmp) / "cases")
    first_k = machinery[min(1_000, iterations)]["peak_mib"]
    last_k = machinery[iterations]["peak_mib"]
    first_c = whole[min(25, cases)]["peak_mib"]
    last_c = whole[cases]["peak_mib"]
    flat = _flat(first_k, last_k) and _flat(first_c, last_c)
    _stats.emit(
        _stats.result(
            6,
            "memory",
            goal="peak RSS of the parent flat over 10,000 iterations",
            met=flat,
            figure=(
                f"harness machinery: peak {first_k:.1f} MiB at 1k, {last_k:.1f} MiB at "
                f"{iterations // 1000}k; whole cases: {first_c:.1f} MiB at "
                f"{min(25, cases)}, {last_c:.1f} MiB at {cases} "
                f"(ratio {last_k / first_k:.3f}x and {last_c / first_c:.3f}x)"
            ),
            command="python -m bench.memory",
            details={
                "at start": start,
                "harness machinery (iterations)": {str(k): v for k, v in sorted(machinery.items())},
                "whole crash cases": {str(k): v for k, v in sorted(whole.items())},
                "flat means": (
                    "peak grows by at most max(2 MiB, 5%) after the first 1k iterations / 25 cases"
                ),
            },
        )
    )


if __name__ == "__main__":
    main()
