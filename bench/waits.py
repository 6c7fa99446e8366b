"""Item 13: the real time each bundled runtime scenario's cases spend waiting, and what share
of it the runtime itself required.

Each passing test of the bundled runtime scenarios (Celery, RQ, Dramatiq, procrastinate: a
queue's worker run as a command on a real broker; Huey, DBOS, the MCP servers and the OpenAI
Agents SDK over MCP: Python workers; the patient mailer, whose worker sleeps 31 s after a
lost answer) runs as one ``pytest -p crashpoints`` command with one job, twice, taking turns:
with every wait real (``PYTEST_CRASHPOINTS_REAL_WAITS=1``) and as shipped. For each: the wall
time, the CPU time of the whole process tree (user + system), and the time nothing computed
(wall less CPU: what the cases spent waiting, for a CPU included), and the JSON report's waits
(seconds skipped at no real cost, seconds waited on a real server, seconds of other real
waits). The share the runtime required: the waiting left as shipped, over the waiting with
every wait real: what skipping could not remove, because something real was on the other
side (a broker, a database server, a program that runs on real time) or the harness itself
waited (its processes starting, its servers answering).

``--quick``: the three cheapest tests, once each way.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import _stats

ROOT = Path(__file__).resolve().parent.parent
#: (name, test node id, what it needs: a program on PATH or a module).
SCENARIOS = [
    ("Celery (command, Redis)",
     "scenarios/celery_worker/test_celery_mailer.py::"
     "test_a_task_that_parks_a_half_done_job_survives_redelivery",
     ("redis-server", "celery")),
    ("RQ (command, Redis)",
     "scenarios/rq_worker/test_rq_mailer.py::"
     "test_a_job_with_retries_is_run_again_by_rq_and_parked",
     ("redis-server", "rq")),
    ("Dramatiq (command, Redis)",
     "scenarios/dramatiq_worker/test_dramatiq_mailer.py::"
     "test_an_actor_that_parks_a_half_done_job_survives_redelivery",
     ("redis-server", "dramatiq")),
    ("procrastinate (command, PostgreSQL)",
     "scenarios/procrastinate_worker/test_procrastinate_mailer.py::"
     "test_stalled_jobs_retried_by_a_periodic_task_survive_a_kill",
     ("initdb", "procrastinate")),
    ("Huey (SQLite, in the worker)",
     "scenarios/test_huey_mailer.py::test_lost_jobs_enqueued_again_at_startup_survive_every_kill",
     ("huey",)),
    ("DBOS (SQLite, in the worker)",
     "scenarios/test_dbos_charger.py::test_a_step_keyed_by_its_workflow_charges_once",
     ("dbos",)),
    ("MCP client (mcp SDK)",
     "scenarios/test_mcp_support.py::test_one_refund_and_one_email_over_mcp", ("mcp",)),
    ("MCP server as the worker (mcp SDK)",
     "scenarios/test_mcp_mailer.py::test_a_server_that_keeps_its_idempotent_hint", ("mcp",)),
    ("OpenAI Agents SDK over MCP",
     "scenarios/test_mcp_support.py::test_the_agents_sdk_refunds_and_emails_once_over_mcp",
     ("agents",)),
    ("patient mailer (sleeps 31 s after a lost answer)",
     "scenarios/test_patient_mailer.py::test_a_mailer_that_waits_out_the_lag_mails_once", ()),
]
QUICK = ("Huey (SQLite, in the worker)", "MCP client (mcp SDK)",
         "patient mailer (sleeps 31 s after a lost answer)")
#: Long enough for a 31 s sleep slept for real.
TIMEOUT = 90


def _there(what: str) -> bool:
    if what == "initdb":
        sys.path.insert(0, str(ROOT))
        from scenarios.postgres_server import POSTGRES_BIN

        return POSTGRES_BIN is not None
    if what == "redis-server":
        return shutil.which(what) is not None
    return importlib.util.find_spec(what) is not None


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(nodeid: str, real: bool, report: Path) -> dict[str, Any]:
    """One pytest command for ``nodeid``: its wall and CPU time, and its report's waits."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTEST_CRASHPOINTS_REAL_WAITS"] = "1" if real else "0"
    command = [sys.executable, "-m", "pytest", "-p", "crashpoints", "-q", "-p",
               "no:cacheprovider", "-p", "no:randomly", nodeid, "--crashpoints-jobs=1",
               f"--crashpoints-timeout={TIMEOUT}", f"--crashpoints-report={report}"]
    before, start = _cpu(), time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=1800)
    wall, cpu = time.perf_counter() - start, _cpu() - before
    [test] = json.loads(report.read_text())["tests"] if report.exists() else [{}]
    return {
        "exit": done.returncode,
        "verdict": test.get("verdict"),
        "cases": test.get("cases"),
        "wall": round(wall, 2),
        "cpu": round(cpu, 2),
        "waiting": round(max(wall - cpu, 0.0), 2),
        "waits": test.get("waits"),
    }


def _measure(nodeid: str, rounds: int, folder: Path) -> dict[str, Any]:
    # Untimed first: bytecode written, imports warm, for the two timed runs alike.
    subprocess.run([sys.executable, "-m", "pytest", "-p", "crashpoints", "-q", "--collect-only",
                    "-p", "no:cacheprovider", nodeid], cwd=ROOT, capture_output=True,
                   timeout=600)
    runs: dict[str, list[dict[str, Any]]] = {"every wait real": [], "as shipped": []}
    for n in range(rounds):
        for name, real in (("every wait real", True), ("as shipped", False)):
            runs[name].append(_run(nodeid, real, folder / f"{n}-{real}.json"))
    summary: dict[str, Any] = {"runs": runs}
    for name, done in runs.items():
        summary[name] = {key: _stats.summary([r[key] for r in done])["median"]
                         for key in ("wall", "cpu", "waiting")}
    real, shipped = summary["every wait real"]["waiting"], summary["as shipped"]["waiting"]
    # Less than a second of waiting is the harness's own start and stop: nothing to share.
    summary["share required"] = round(min(shipped / real, 1.0), 3) if real >= 1.0 else None
    summary["same verdicts"] = len({(r["verdict"], r["cases"]) for d in runs.values()
                                    for r in d}) == 1
    summary["waits as shipped"] = runs["as shipped"][-1]["waits"]
    return summary


def main() -> None:
    quick = _stats.quick()
    details: dict[str, Any] = {"load average (1 min) before": os.getloadavg()[0]}
    parts, agree = [], True
    with tempfile.TemporaryDirectory(prefix="bench-waits-") as tmp:
        for name, nodeid, needs in SCENARIOS:
            if quick and name not in QUICK:
                continue
            missing = [what for what in needs if not _there(what)]
            if missing:
                details[name] = {"skipped": f"needs {', '.join(missing)}"}
                continue
            folder = Path(tmp) / str(len(details))
            folder.mkdir()
            measured = details[name] = _measure(nodeid, 1 if quick else 2, folder)
            agree = agree and measured["same verdicts"]
            real, shipped = measured["every wait real"], measured["as shipped"]
            waits = measured["waits as shipped"] or {}
            share = measured["share required"]
            required = "no waiting to speak of" if share is None else f"required: {share:.0%}"
            parts.append(
                f"{name}: waiting {real['waiting']:.1f} s of {real['wall']:.1f} s with every "
                f"wait real, {shipped['waiting']:.1f} s of {shipped['wall']:.1f} s as shipped "
                f"({required}; skipped {waits.get('skipped', 0):g} s of harness time, on real "
                f"servers {waits.get('real', 0):g} s)"
            )
    details["load average (1 min) after"] = os.getloadavg()[0]
    if not agree:
        parts.insert(0, "THE VERDICTS DIFFER WITH EVERY WAIT REAL")
    _stats.emit(
        _stats.result(
            13,
            "waits of the runtime scenarios",
            goal="(a measurement: what each runtime's cases wait, and what the runtime needs)",
            met=None,
            status="measured" if agree else "missed",
            figure="; ".join(parts),
            command="python -m bench.waits",
            details=details,
        )
    )


if __name__ == "__main__":
    main()
