"""Item 10: the peer, pytest-obligation's real-child crash harness, on the same buggy worker.

The worker sends an e-mail and only then marks its job sent (``scenarios/jobs_mailer.py``,
``handle_sends_then_marks``): killed between the two, its job is delivered again, still
``pending``, and mailed a second time. Both tools run it in one run, side by side:

- **pytest-crashpoints**: the broken agent of ``scenarios/broken/test_jobs_mailer.py`` (its
  worker, its job table read through ``SQLiteLedgerView``, points A, B and C) through
  ``harness.explore`` with ``CrashSettings(mode="exhaustive", max_faults=1)``, on each engine.
  Its crash cases are the report's schedules with a kill; the processes it forks are counted.
- **pytest-obligation** (the closest peer: https://github.com/gigaverse-app/pytest-obligation),
  installed from the package registry into a throwaway virtual environment made here (never
  this project's). The same worker in its idiom (``bench/_peer_obligation.py``: its own SQLite
  job table, a queue that redelivers unacknowledged messages on restart, the mailbox as the
  external effect) under its real-child harness: a ``ProcessHistory`` whose ``run`` starts the
  application in a child process told to die at a named point, whose ``recover`` starts it
  again, checked by ``assert_process_deaths_converge`` (normal operation twice, then one run
  per death point; the verdict is differential). Its crash cases are the histories its own
  report lists (the ``obligation_histories`` property of its JUnit XML), and the application
  logs each of its starts. The session is timed from outside; the same session on a trivial
  test in the same environment (interpreter, pytest, plugin and conftest) is its floor, and the
  difference is the harness's work.

The figure: crash cases per second for each (cases over the harness's work), the ratio, and
each tool's verdict. Without the package registry the item is skipped and says why.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

from pytest_crashpoints import Authority, ProviderSpec
from pytest_crashpoints.harness import CrashSettings, Scenario, explore
from scenarios.broken.test_jobs_mailer import worker as sends_then_marks
from scenarios.test_jobs_mailer import JOB, jobs

from . import _floors, _forks, _stats

HERE = Path(__file__).resolve().parent
PEER = "pytest-obligation"
ENGINES = ("processes", "states")
#: The broken agent's marker: ``points="ABC", mode="exhaustive"``.
POINTS = ("A", "B", "C")
AUTHORITY = Authority.of(
    tenant_id="tenant-1", credential_scope="email:read email:write", policy_version="p1"
)
INSTALL_TIMEOUT = 600.0
RUN_TIMEOUT = 300.0
COMMAND = "python -m bench.peer"

CONFTEST = """\
from pytest_obligation import Host, configure

# The system under test: bindings must reach code of this package.
configure(Host(production_packages=frozenset({"peer_mailer"})))
"""

TEST = '''\
"""pytest-obligation's real-child harness on the send-then-mark mailer (bench item 10)."""

import os
import sqlite3
import subprocess
import tempfile
from contextlib import closing
from pathlib import Path

from pytest_obligation.process_histories import (
    ProcessHistory,
    assert_process_deaths_converge,
    fault_environment,
)

from peer_mailer import mailer

JOB = {"task_id": "job-7", "recipient": "ada@example.com", "body": "Invoice 7: 120 EUR"}
RUNS = Path(__file__).resolve().parent / "runs"


def run_in_a_child(point):
    # FAULT INJECTION: a fresh application with one message queued, started in a child told
    # to die at ``point`` (None: run normally).
    app = Path(tempfile.mkdtemp(dir=RUNS))
    mailer.enqueue(app, JOB)
    environment = {**os.environ, **fault_environment(point, app / "fault")}
    done = subprocess.run(mailer.command(app), env=environment)
    return app, done.returncode


def observe(app):
    # OBSERVE: the job's status in the application's table, the mails the provider holds.
    with closing(sqlite3.connect(app / "jobs.db")) as db:
        row = db.execute("SELECT status FROM jobs WHERE id = ?", (JOB["task_id"],)).fetchone()
    mails = 0
    if (app / "mailbox.db").exists():
        with closing(sqlite3.connect(app / "mailbox.db")) as mailbox:
            query = "SELECT COUNT(*) FROM sent WHERE recipient = ?"
            mails = mailbox.execute(query, (JOB["recipient"],)).fetchone()[0]
    return (row[0] if row else None, mails)


def restart(app):
    # REAL PRODUCTION: the application started again, as its deployment does after any
    # death; its queue delivers the dead worker's unacknowledged message again.
    subprocess.run(mailer.command(app), check=True)


HISTORY = ProcessHistory(
    name="mail job-7 once",
    initial=(None, 0),
    expected=("sent", 1),
    run=run_in_a_child,
    observe=observe,
    recover=restart,
    death_points=mailer.DEATH_POINTS,
)


def test_each_job_is_mailed_once():
    assert_process_deaths_converge(HISTORY)
'''

FLOOR = """\
def test_nothing():
    pass
"""


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would leak this project into the peer's."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS", "PYTHONHOME")
        and not key.startswith(("PYTEST_CRASHPOINTS", "DUE_WORK"))
    }
    return {**env, **extra}


def _install(base: Path) -> tuple[Path | None, dict[str, Any]]:
    """A throwaway virtual environment with the peer and pytest, or why there is none."""
    venv = base / "venv"
    python = venv / "bin" / "python"
    start = time.perf_counter()
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    steps = {
        "python -m venv": [sys.executable, "-m", "venv", str(venv)],
        f"pip install {PEER} pytest": [*pip, PEER, "pytest"],
    }
    for name, step in steps.items():
        try:
            done = subprocess.run(
                step, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, env=_clean_env()
            )
        except subprocess.TimeoutExpired:
            return None, {"note": f"`{name}` timed out after {INSTALL_TIMEOUT:.0f} s"}
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return None, {"note": f"`{name}` failed (exit {done.returncode}): {tail}"}
    versions = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m, sys; "
            f"print(m.version({PEER!r}), m.version('pytest'), m.version('pydantic'), "
            "sys.version.split()[0])",
        ],
        capture_output=True,
        text=True,
        env=_clean_env(),
    ).stdout.split()
    return python, {
        "install seconds": round(time.perf_counter() - start, 1),
        "versions": dict(zip((PEER, "pytest", "pydantic", "python"), versions, strict=False)),
    }


def _write_app(app: Path) -> None:
    (app / "peer_mailer").mkdir(parents=True)
    (app / "peer_mailer" / "__init__.py").write_text("")
    shutil.copyfile(HERE / "_peer_obligation.py", app / "peer_mailer" / "mailer.py")
    (app / "conftest.py").write_text(CONFTEST)
    (app / "test_peer_mailer.py").write_text(TEST)
    (app / "test_floor.py").write_text(FLOOR)
    (app / "runs").mkdir()


def _session(python: Path, app: Path, test: str) -> dict[str, Any]:
    """One pytest session of the peer in ``app``, timed from outside, and what it reported."""
    junit = app / "junit.xml"
    runs = app / "runs"
    command = [
        str(python),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--due-work-summary",
        f"--junitxml={junit}",
        test,
    ]
    start = time.perf_counter()
    done = subprocess.run(
        command,
        cwd=app,
        env=_clean_env(PYTHONPATH=str(app)),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    wall = time.perf_counter() - start
    case = ElementTree.parse(junit).getroot().find(".//testcase")
    assert case is not None, f"the peer's session reported no test: {done.stdout[-2000:]}"
    properties = {p.get("name"): p.get("value") for p in case.iter("property")}
    stages = json.loads(properties.get("obligation_histories") or "[]")
    failure = case.find("failure")
    history_runs = [d for d in runs.iterdir() if d.is_dir()]
    starts = sum(
        len((d / "starts.log").read_text().split())
        for d in history_runs
        if (d / "starts.log").exists()
    )
    for directory in history_runs:
        shutil.rmtree(directory)
    junit.unlink()
    return {
        "wall": wall,
        "test time (its JUnit)": float(case.get("time") or 0.0),
        "exit": done.returncode,
        "stages": stages,
        "failure": (failure.get("message") or "")[:300] if failure is not None else None,
        "history runs": len(history_runs),
        "application starts": starts,
    }


def _peer(python: Path, app: Path) -> dict[str, Any]:
    session = _session(python, app, "test_peer_mailer.py")
    deaths = [s for s in session["stages"] if s["stage"].startswith("died at")]
    crashes = [s for s in deaths if s["status"] != "fault not reached"]
    diverged = [s["stage"] for s in crashes if s["status"].startswith("diverged")]
    failure = session["failure"] or ""
    session["crash cases"] = len(crashes)
    session["caught"] = session["exit"] == 1 and "HistoriesDiverged" in failure and bool(diverged)
    session["caught by"] = diverged
    return session


def _crashpoints(engine: str, base: Path) -> dict[str, Any]:
    scenario = Scenario(
        worker=sends_then_marks,
        recover=None,
        messages=(JOB,),
        providers=(ProviderSpec("email"),),
        authorities={JOB["task_id"]: AUTHORITY},
        ledger_view=jobs,
    )
    settings = CrashSettings(points=POINTS, mode="exhaustive", max_faults=1, engine=engine)  # type: ignore[arg-type]
    box: dict[str, Any] = {}

    def work() -> None:
        box["report"] = explore(scenario, settings, base_dir=base, nodeid="bench::peer")

    start = time.perf_counter()
    processes = _forks.forks(work)
    elapsed = time.perf_counter() - start
    report = box["report"]
    crashes = [s for s in report.schedules if "kill at" in s.schedule_text]
    failure = report.failure
    return {
        "wall": elapsed,
        "cases": report.cases,
        "crash cases": len(crashes),
        "processes": processes,
        "verdict": report.verdict,
        "caught": failure is not None and 1 in failure.invariants,
        "caught by": [str(failure.schedule)] if failure is not None else [],
        "invariants": list(failure.invariants) if failure is not None else [],
        "schedules": [f"{s.schedule_text}: {s.verdict}" for s in report.schedules],
        "engine": report.engine,
    }


def _emit(status: str, figure: str, details: dict[str, Any]) -> None:
    _stats.emit(
        _stats.result(
            10,
            "the peer: pytest-obligation",
            goal="(comparison, no goal)",
            met=None,
            status=status,
            figure=figure,
            command=COMMAND,
            details=details,
        )
    )


def _skipped(note: str, details: dict[str, Any]) -> None:
    _emit("skipped", f"not measured: {note}", details)


def _per_second(cases: list[int], seconds: list[float]) -> float:
    return statistics.median(c / s for c, s in zip(cases, seconds, strict=True))


def main() -> None:
    reps = 2 if _stats.quick() else 5
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="bench-peer-") as tmp:
        base = Path(tmp)
        python, install = _install(base)
        if python is None:
            _skipped(f"{PEER} could not be installed ({install['note']})", install)
            return
        app = base / "app"
        _write_app(app)
        _session(python, app, "test_floor.py")  # first use: bytecode, the page cache
        peer: list[dict[str, Any]] = []
        floor_sessions: list[float] = []
        ours: dict[str, list[dict[str, Any]]] = {engine: [] for engine in ENGINES}
        forks: list[float] = []
        _crashpoints("processes", base / "warm-up")
        for rep in range(reps):
            forks.append(_floors.fork_kill_wait())
            # The order alternates, so load on the machine hits both alike.
            for side in ("peer", "ours") if rep % 2 == 0 else ("ours", "peer"):
                if side == "peer":
                    floor_sessions.append(_session(python, app, "test_floor.py")["wall"])
                    peer.append(_peer(python, app))
                else:
                    for engine in ENGINES:
                        ours[engine].append(_crashpoints(engine, base / f"{engine}-{rep}"))
        load.append(os.getloadavg()[0])
    floor = statistics.median(forks)
    session_floor = statistics.median(floor_sessions)
    peer_work = [max(p["wall"] - f, 1e-3) for p, f in zip(peer, floor_sessions, strict=True)]
    peer_rate = _per_second([p["crash cases"] for p in peer], peer_work)
    details: dict[str, Any] = {
        "install": install,
        "floor (fork+SIGKILL+waitpid)": _stats.summary(forks),
        "load average (1 min) before and after": load,
        PEER: {
            "session": _stats.summary([p["wall"] for p in peer]),
            "session floor (a trivial test, same environment)": _stats.summary(floor_sessions),
            "work (session - floor)": _stats.summary(peer_work),
            "test time (its JUnit)": _stats.summary([p["test time (its JUnit)"] for p in peer]),
            "crash cases per second": peer_rate,
            "last run": peer[-1],
            "every run caught it": all(p["caught"] for p in peer),
        },
    }
    last = peer[-1]
    peer_case = statistics.median(peer_work) / max(last["crash cases"], 1)
    caught = "caught" if all(p["caught"] for p in peer) else "NOT caught"
    versions = install.get("versions", {})
    parts = [
        f"{PEER} {versions.get(PEER, '?')}: {peer_rate:.1f} crash cases/s ({last['crash cases']} "
        f"deaths, {statistics.median(peer_work):.2f} s of work: session "
        f"{statistics.median(p['wall'] for p in peer):.2f} s less {session_floor:.2f} s for a "
        f"trivial test; {last['application starts']} processes; {peer_case / floor:.0f}x the "
        "fork floor per case; the child calls os._exit(1) at a point its own code names, no "
        f"signal), {caught} ({', '.join(last['caught by'])}: mailed twice)"
    ]
    how = {
        "processes": "a real SIGKILL each",
        "states": "crash states from a stopped worker, the failure confirmed by a real SIGKILL",
    }
    for engine in ENGINES:
        runs = ours[engine]
        rate = _per_second([r["crash cases"] for r in runs], [r["wall"] for r in runs])
        wall = statistics.median(r["wall"] for r in runs)
        case = wall / max(runs[-1]["crash cases"], 1)
        ratio = rate / peer_rate if peer_rate else float("nan")
        details[f"pytest-crashpoints ({engine} engine)"] = {
            "explore": _stats.summary([r["wall"] for r in runs]),
            "crash cases per second": rate,
            "ratio to the peer": ratio,
            "per crash case / fork floor": case / floor,
            "last run": runs[-1],
            "every run caught it": all(r["caught"] for r in runs),
        }
        caught = "caught" if all(r["caught"] for r in runs) else "NOT caught"
        where = runs[-1]["caught by"][0].split(", ")[-1] if runs[-1]["caught by"] else "-"
        parts.append(
            f"pytest-crashpoints, {engine} engine: {rate:.1f} crash cases/s "
            f"({runs[-1]['crash cases']} of {runs[-1]['cases']} cases, {wall:.2f} s, "
            f"{runs[-1]['processes']} processes, {how[engine]}; {case / floor:.0f}x the fork "
            f"floor per case), {ratio:.1f}x the peer, {caught} (invariant 1, {where})"
        )
    _emit("measured", "; ".join(parts), details)


if __name__ == "__main__":
    main()
