"""Item 12: the absolute cost of a crash test, in CPU time (which load moves far less than
wall time), and how it grows.

- **CPU per case** of the exhaustive single-fault sweep of ``scenarios/test_invoice_email.py``
  and ``scenarios/test_jobs_mailer.py``: the CPU time (user + system) of the whole ``pytest``
  process tree, less that of the same command with ``--collect-only`` measured in the same
  round (pytest's start-up and the imports), divided by the cases the report counts; with run
  directories in memory (the default) and on disk, the two taking turns. Also the processes
  forked per case (a fork hook every forked process inherits, ``-p bench._forkcount``) and
  the floor: a bare fork + SIGKILL + waitpid.
- **Growth in messages**: the exhaustive single-fault sweep of the reference e-mail task with
  1, 4 and 16 messages (``explore`` in this process; CPU of this process and every process
  below it), per message.
- **A small test's fixed cost**: the wall time of a 3-case crash test of a mailer against a
  plain pytest test of the same mailer against a mocked API (respx), each a whole ``pytest``
  command.
- **Shards**: the CPU of the sweep run as two shards (``--crashpoints-shard=1/2`` and ``2/2``,
  summed) against the unsharded run.

Goals (issue 32): at most 60 ms of CPU per case in the sweep; 16 messages at most 5x what 4
cost.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_crashpoints.harness import CrashSettings, explore

from . import _floors, _stats
from ._scenarios import email_scenario

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ("scenarios/test_invoice_email.py", "scenarios/test_jobs_mailer.py")
CPU_GOAL = 0.060
GROWTH_GOAL = 5.0


def _cpu() -> float:
    """CPU seconds of this process's reaped children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _pytest(args: Sequence[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """CPU and wall seconds of one ``pytest`` command (its whole process tree). Bytecode is
    written, as on a user's machine (pytest caches its rewritten test modules)."""
    command = [sys.executable, "-m", "pytest", "-p", "crashpoints", "-q", "-p", "no:cacheprovider"]
    env = {k: v for k, v in (env or os.environ).items() if k != "PYTHONDONTWRITEBYTECODE"}
    before, start = _cpu(), time.perf_counter()
    done = subprocess.run(
        [*command, *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=900
    )
    wall, cpu = time.perf_counter() - start, _cpu() - before
    if done.returncode not in (0,):
        tail = "\n".join(done.stdout.splitlines()[-15:])
        raise SystemExit(f"pytest {' '.join(args)} exited {done.returncode}:\n{tail}")
    return cpu, wall


def _sweep_once(where: str, tmp: Path, extra: Sequence[str] = ()) -> dict[str, float]:
    report, forks = tmp / "report.json", tmp / "forks"
    forks.write_text("")
    env = {**os.environ, "BENCH_FORK_LOG": str(forks)}
    flags = ["--crashpoints-mode=exhaustive", "--crashpoints-max-faults=1"]
    startup, _ = _pytest([*SWEEP, "--collect-only"])
    cpu, wall = _pytest(
        [
            *SWEEP,
            *flags,
            f"--crashpoints-run-dir={where}",
            f"--crashpoints-report={report}",
            "-p",
            "bench._forkcount",
            *extra,
        ],
        env,
    )
    cases = sum(test["cases"] for test in json.loads(report.read_text())["tests"])
    return {
        "cpu": cpu,
        "startup": startup,
        "cases": cases,
        "per_case": (cpu - startup) / cases,
        "forks_per_case": len(forks.read_text().splitlines()) / cases,
        "wall": wall,
    }


def sweep(rounds: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {"memory": [], "disk": []}
    # Untimed: the first command compiles and caches the bytecode of everything it imports.
    # Measured inside the first round, that start-up would be subtracted from the next
    # command, which no longer pays it (the first "memory" figure came out ~50 ms too low).
    _pytest([*SWEEP, "--collect-only"])
    with tempfile.TemporaryDirectory(prefix="bench-absolute-") as name:
        for _ in range(rounds):
            for where in runs:
                runs[where].append(_sweep_once(where, Path(name)))
    out: dict[str, Any] = {}
    for where, samples in runs.items():
        out[where] = {
            "cpu per case": _stats.summary([s["per_case"] for s in samples]),
            "cases": samples[0]["cases"],
            "processes per case": statistics.median(s["forks_per_case"] for s in samples),
            "pytest start-up cpu": _stats.summary([s["startup"] for s in samples]),
        }
    return out


def _explore_cpu(messages: int, base: Path) -> dict[str, float]:
    settings = CrashSettings(points=tuple("ABCDEF"), mode="exhaustive", max_faults=1, seed=1)
    scenario = email_scenario(messages=messages)
    before = resource.getrusage(resource.RUSAGE_SELF)
    children = _cpu()
    report = explore(scenario, settings, base_dir=base, nodeid=f"messages-{messages}")
    after = resource.getrusage(resource.RUSAGE_SELF)
    own = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if report.failure is not None:
        raise SystemExit(f"{messages} messages: the reference task failed: {report.failure}")
    return {"cpu": own + _cpu() - children, "cases": report.cases}


def growth(counts: Sequence[int]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-growth-") as name:
        _explore_cpu(1, Path(name))  # warm: imports, first servers
        return {str(m): _explore_cpu(m, Path(name)) for m in counts}


SMALL_CRASH_TEST = """
import pytest
from pytest_crashpoints import SQLiteLedgerView, State
from scenarios import jobs_mailer

JOB = {"task_id": "job-7", "recipient": "ada@example.com", "body": "Invoice 7"}
STATES = {"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED,
          "review": State.MANUAL_REVIEW}

def worker(job, ctx):
    url, key = ctx.base_url("email"), ctx.api_key("email", job["task_id"])
    return jobs_mailer.handle_parks_the_ambiguous(
        job, db=ctx.env.path / "jobs.db", api_url=url, api_key=key)

def jobs(ctx):
    return SQLiteLedgerView(ctx.env.path / "jobs.db", table="jobs",
                            columns={"attempt_id": "id", "state": "status"}, states=STATES)

@pytest.mark.crashpoints(points="BC", faults=["kill"], providers=["email"],
                         mode="exhaustive", strict_coverage=False)
def test_small(crashpoints):
    crashpoints.run(worker=worker, messages=[JOB], ledger_view=jobs)
"""

PLAIN_TEST = """
import httpx, respx
from scenarios import jobs_mailer

JOB = {"task_id": "job-7", "recipient": "ada@example.com", "body": "Invoice 7"}

@respx.mock
def test_plain(tmp_path):
    route = respx.post("https://api.example/v3/mail/send").mock(httpx.Response(202))
    jobs_mailer.handle_parks_the_ambiguous(
        JOB, db=tmp_path / "jobs.db", api_url="https://api.example", api_key="k")
    assert route.call_count == 1
"""


def small_test(rounds: int) -> dict[str, Any]:
    crash, plain, cases = [], [], 0
    with tempfile.TemporaryDirectory(prefix="bench-small-", dir=ROOT) as name:
        folder = Path(name)
        (folder / "test_small_crash.py").write_text(SMALL_CRASH_TEST)
        (folder / "test_small_plain.py").write_text(PLAIN_TEST)
        report = folder / "report.json"
        for _ in range(rounds):
            crash.append(
                _pytest([str(folder / "test_small_crash.py"), f"--crashpoints-report={report}"])[1]
            )
            plain.append(_pytest([str(folder / "test_small_plain.py")])[1])
        cases = json.loads(report.read_text())["tests"][0]["cases"]
    return {
        "cases": cases,
        "crash test wall": _stats.summary(crash),
        "plain test wall": _stats.summary(plain),
        "ratio": statistics.median(crash) / statistics.median(plain),
    }


def shards(rounds: int) -> dict[str, Any]:
    whole, split = [], []
    flags = ["--crashpoints-mode=exhaustive", "--crashpoints-max-faults=1"]
    test = [SWEEP[0], *flags, "--crashpoints-seed=5"]
    for _ in range(rounds):
        whole.append(_pytest(test)[0])
        split.append(sum(_pytest([*test, f"--crashpoints-shard={k}/2"])[0] for k in (1, 2)))
    return {
        "unsharded cpu": _stats.summary(whole),
        "two shards cpu (sum)": _stats.summary(split),
        "overhead": statistics.median(split) / statistics.median(whole),
    }


def main() -> None:
    quick = _stats.quick()
    rounds = 1 if quick else 3
    floor = _floors.fork_kill_wait()
    swept = sweep(rounds)
    grown = growth((1, 4) if quick else (1, 4, 16))
    small = small_test(2 if quick else 5)
    sharded = shards(1 if quick else 2)
    memory = swept["memory"]["cpu per case"]["median"]
    disk = swept["disk"]["cpu per case"]["median"]
    four = grown["4"]["cpu"]
    sixteen = grown.get("16", {}).get("cpu")
    ratio = None if sixteen is None else sixteen / four
    met = memory <= CPU_GOAL and (ratio is not None and ratio <= GROWTH_GOAL)
    per_message = ", ".join(f"{m}: {v['cpu']:.1f} s ({v['cases']} cases)" for m, v in grown.items())
    figure = (
        f"sweep {memory * 1000:.0f} ms CPU per case in memory, {disk * 1000:.0f} ms on disk "
        f"({swept['memory']['processes per case']:.1f} processes per case; floor "
        f"{floor * 1000:.2f} ms); messages {per_message}"
        + ("" if ratio is None else f": 16 cost {ratio:.1f}x 4")
        + f"; a {small['cases']}-case crash test {small['ratio']:.1f}x a plain test's wall time"
        f"; two shards {sharded['overhead']:.2f}x the CPU of one run"
    )
    _stats.emit(
        _stats.result(
            12,
            "absolute cost",
            goal="sweep <= 60 ms CPU per case; 16 messages <= 5x 4",
            met=met,
            figure=figure,
            command="python -m bench.absolute",
            details={
                "floor (fork+kill+wait)": floor,
                "sweep": swept,
                "messages": grown,
                "small test": small,
                "shards": sharded,
            },
        )
    )


if __name__ == "__main__":
    main()
