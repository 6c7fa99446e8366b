"""``make stress``: the same verdicts on a busy machine as on a quiet one.

For each seed, the crash gate runs once on a quiet machine, then again under load: several
busy processes per core, more xdist workers and ``--crashpoints-jobs`` than there are cores,
and two or three crash-test sessions at once on the same machine (as parallel CI jobs are).
Every test's verdict, the list of schedules it ran with each one's verdict and fingerprint,
and its failure (invariants, minimal schedule, fingerprint) must be the same in both runs;
any difference fails, showing both runs. Timings and the states engine's statistics are not
compared (they depend on the load by design).

    python -m tests.stress                 # 5 seeds, every bundled scenario (make stress)
    python -m tests.stress --short         # 1 seed, a few scenarios (CI)
    python -m tests.stress --seeds 11,12 --busy 4 --sessions 3

Each session runs in a directory of its own (its own Hypothesis example database and
reports), and every process it starts is ended when it returns, however it returns.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
#: The scenarios of the short run: every kind of agent the gate holds, in a few minutes.
SHORT = (
    "test_invoice_email.py",
    "test_order_charger.py",
    "test_jobs_mailer.py",
    "test_async_notifier.py",
    "test_patient_mailer.py",
    "test_ticket_opener.py",
    "broken/test_fresh_keys.py",
    "broken/test_jobs_mailer.py",
    "broken/test_broken_agents.py::test_two_bugs_each_shown_by_a_schedule_of_its_own",
)
#: Seconds one gate run may take before it is ended (a hang is a failure, not a wait).
GATE_TIMEOUT = 3600.0

SPIN = "while True:\n    pass\n"


@dataclasses.dataclass(frozen=True)
class Run:
    """One gate run: its seed, its report (None if it wrote none), exit status and output."""

    seed: int
    label: str
    report: dict[str, Any] | None
    status: int
    output: str


def _gate(seed: int, paths: Sequence[str], pytest_args: Sequence[str], label: str) -> Run:
    """Run the gate in a directory of its own and read its report."""
    folder = Path(tempfile.mkdtemp(prefix=f"crashpoints-stress-{label}-"))
    try:
        command = [
            sys.executable,
            "-m",
            "pytest_crashpoints.cli",
            "gate",
            *paths,
            "--",
            f"--crashpoints-seed={seed}",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            *pytest_args,
        ]
        with _started(command, cwd=folder) as process:
            try:
                output, _ = process.communicate(timeout=GATE_TIMEOUT)
            except subprocess.TimeoutExpired:
                output = f"the gate did not end within {GATE_TIMEOUT:g}s"
        report_path = folder / "crashpoints-report.json"
        report = json.loads(report_path.read_text()) if report_path.is_file() else None
        return Run(seed, label, report, process.returncode or 0, output)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _started(command: Sequence[str], *, cwd: Path) -> Iterator[subprocess.Popen[str]]:
    """A process in a group of its own, whose whole group is killed when the block ends."""
    process = subprocess.Popen(
        command,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextlib.contextmanager
def busy(per_core: int) -> Iterator[int]:
    """``per_core`` CPU-bound processes per core, for as long as the block runs."""
    count = per_core * (os.cpu_count() or 1)
    spinners = [
        subprocess.Popen([sys.executable, "-c", SPIN], start_new_session=True)
        for _ in range(count)
    ]
    try:
        yield count
    finally:
        for spinner in spinners:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(spinner.pid, signal.SIGKILL)
            spinner.wait()


def summary(report: dict[str, Any] | None) -> list[str]:
    """What must not change with the load: per test, its verdict and what it found, and
    every schedule it ran with its verdict and final state, in order."""
    if report is None:
        return ["no report"]
    lines = []
    for test in sorted(report["tests"], key=lambda t: t["nodeid"]):
        lines.append(f"{test['nodeid']}: {test['verdict']}, {test['cases']} case(s)")
        if test.get("error"):
            lines.append(f"  error: {test['error']}")
        failure = test.get("failure") or {}
        if failure:
            lines.append(
                f"  failure: invariants {failure.get('invariants')} at "
                f"{failure.get('schedule_text')} ({str(failure.get('fingerprint'))[:12]}, "
                f"deterministic {failure.get('deterministic')})"
            )
            # And what was found after it, for the other invariants.
            lines += [
                f"  also: invariants {also.get('invariants')} at {also.get('schedule_text')}"
                for also in failure.get("also") or []
            ]
        for number, run in enumerate(test.get("schedules") or [], start=1):
            lines.append(
                f"  {number} {run['phase']} {run['verdict']} {run['fingerprint'][:12]} "
                f"{run['schedule_text']}"
            )
    return lines


def compare(quiet: Run, loaded: Run) -> list[str]:
    """The differences between two runs of one seed (empty when there are none)."""
    return list(
        difflib.unified_diff(
            summary(quiet.report),
            summary(loaded.report),
            f"quiet (seed {quiet.seed})",
            f"{loaded.label} (seed {loaded.seed})",
            lineterm="",
            n=2,
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.stress", description=__doc__)
    parser.add_argument("--seeds", help="comma-separated seeds (default: 5 fixed seeds)")
    parser.add_argument("--short", action="store_true", help="1 seed, a few scenarios (CI)")
    parser.add_argument("--busy", type=int, default=4, help="busy processes per core")
    parser.add_argument("--sessions", type=int, default=2, help="gate sessions at once")
    args = parser.parse_args(argv)
    cores = os.cpu_count() or 1
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else [11, 12, 13, 14, 15]
    paths = [str(SCENARIOS)]
    if args.short:
        seeds = seeds[:1] if args.seeds else [11]
        paths = [str(SCENARIOS / name) for name in SHORT]
    quiet_args = ["-n", str(cores), "--crashpoints-jobs=1"]
    loaded_args = ["-n", str(2 * cores), f"--crashpoints-jobs={cores + 1}"]
    print(f"stress: seeds {seeds}, {len(paths)} path(s), {cores} core(s)", flush=True)
    quiet: dict[int, Run] = {}
    for seed in seeds:
        started = time.monotonic()
        quiet[seed] = _gate(seed, paths, quiet_args, "quiet")
        print(f"quiet seed {seed}: exit {quiet[seed].status} in "
              f"{time.monotonic() - started:.0f}s", flush=True)
    differences: list[str] = []
    # Under load: the seeds in groups of ``sessions``, each group's sessions at once.
    with busy(args.busy) as spinners:
        print(f"loaded: {spinners} busy processes, {args.sessions} sessions at once, "
              f"{' '.join(loaded_args)}", flush=True)
        # Every group holds ``sessions`` sessions: the last one is filled up with seeds run
        # again (compared too).
        total = -(-len(seeds) // args.sessions) * args.sessions
        order = [seeds[i % len(seeds)] for i in range(total)]
        for at in range(0, len(order), args.sessions):
            group = order[at : at + args.sessions]
            started = time.monotonic()
            runs = _together(group, paths, loaded_args)
            load = os.getloadavg()[0]
            print(f"loaded seeds {group}: exits {[r.status for r in runs]} in "
                  f"{time.monotonic() - started:.0f}s, load {load:.1f}", flush=True)
            for run in runs:
                found = compare(quiet[run.seed], run)
                if found or run.status != quiet[run.seed].status:
                    differences += [
                        f"seed {run.seed}: quiet exit {quiet[run.seed].status}, "
                        f"{run.label} exit {run.status}",
                        *found,
                    ]
                    if run.report is None:
                        differences.append(run.output[-4000:])
    if differences:
        print("\n".join(differences))
        print("stress: FAILED: the verdicts under load differ from the quiet runs")
        return 1
    print(f"stress: passed: {len(order)} loaded run(s), the same verdicts, schedules and "
          "fingerprints as the quiet runs")
    return 0


def _together(
    seeds: Sequence[int], paths: Sequence[str], pytest_args: Sequence[str]
) -> list[Run]:
    """One gate session per seed, all at once."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(seeds)) as pool:
        futures = [
            pool.submit(_gate, seed, paths, pytest_args, f"loaded session {n}")
            for n, seed in enumerate(seeds, start=1)
        ]
        return [future.result() for future in futures]


if __name__ == "__main__":
    sys.exit(main())
