"""The harness's hooks in a Python program run as a command (``program_hooks.py``): its
commits, its own fail points and its syncs reach the bridge that started it, armed as the
harness arms it, and the program runs as it would without them.

Each test runs a small bridge in a real worker process, as ``test_protocol.py`` does: it
serves the fail-point protocol and runs a Python program with the variables the bridge gives
a command (``PYTHONPATH`` with the start-up hook first).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_crashpoints._harness.case.program_hooks import (
    PACKAGE,
    STARTUP,
    hooks_of,
    unhooked_reason,
)
from pytest_crashpoints._inject.failpoints import Fault, Kill, Raise
from pytest_crashpoints._inject.remote import exception_from
from pytest_crashpoints._process.outcome import Completed, Killed
from pytest_crashpoints._process.worker import run_worker
from pytest_crashpoints.errors import HarnessError
from pytest_crashpoints.harness import FailpointServer

from .test_worker import wait_gone

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux prctl")

#: Two commits, a point of its own, a deferred one and the point it fires at, a synced file.
PROGRAM = """
import json, os, sqlite3, sys
print("pid", os.getpid(), flush=True)
db = sqlite3.connect(os.path.join(os.environ["CRASHPOINTS_RUN_DIR"], "app.db"))
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA synchronous=NORMAL")
db.execute("CREATE TABLE IF NOT EXISTS t (n INTEGER)")
db.commit()
try:
    with db:
        db.execute("INSERT INTO t VALUES (1)")
except sqlite3.OperationalError as exc:
    print("commit failed:", type(exc).__module__, type(exc).__name__, exc, flush=True)
from pytest_crashpoints import crashpoint
from pytest_crashpoints._inject.failpoints import crashpoint_deferred
crashpoint("mine", k=1)
crashpoint_deferred("later")
crashpoint("next")
with open(os.path.join(os.environ["CRASHPOINTS_RUN_DIR"], "out.jsonl"), "a") as out:
    out.write('{"n": 1}\\n')
    out.flush()
    os.fsync(out.fileno())
left = [entry for entry in sys.path if entry.endswith("python_startup")]
print("done", json.dumps({"argv": sys.argv, "main": __name__, "path0": sys.path[0],
                          "startup_left": left}), flush=True)
"""


def bridge(argv: list[str], run_dir: str, extra: dict[str, str]) -> int:
    """A bridge in small: serve the protocol, run the program with the variables a bridge
    gives a command (in this worker's process group, which a kill takes with it)."""
    with FailpointServer(now=lambda: 7.0) as server:
        env = {
            **os.environ,
            "CRASHPOINTS_URL": server.url,
            "CRASHPOINTS_RUN_DIR": run_dir,
            "CRASHPOINTS_PROCESS": "worker-1",
            "PYTHONPATH": os.pathsep.join([str(STARTUP), *filter(None, [extra.pop("PATH", "")])]),
            "CRASHPOINTS_HOOKS": str(PACKAGE),
            **extra,
        }
        with open(Path(run_dir) / "out", "wb") as out, open(Path(run_dir) / "err", "wb") as err:
            program = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                       stderr=err, cwd=run_dir)
            server.start()
            return program.wait(timeout=60)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    (tmp_path / "logs").mkdir()
    return tmp_path


def _program(run_dir: Path, text: str = PROGRAM) -> list[str]:
    script = run_dir / "program.py"
    script.write_text(text)
    return [sys.executable, str(script)]


def _lines(run_dir: Path, name: str = "out") -> list[str]:
    path = run_dir / name
    return path.read_text().splitlines() if path.exists() else []


def _rows(run_dir: Path) -> list[int]:
    conn = sqlite3.connect(run_dir / "app.db")
    try:
        return [row[0] for row in conn.execute("SELECT n FROM t")]
    finally:
        conn.close()


def _run(run_dir: Path, argv: list[str], faults: list[Fault] | None = None,
         **extra: str) -> object:
    return run_worker(bridge, args=(argv, str(run_dir), extra), faults=faults or [], timeout=60)


def test_a_programs_commits_points_and_syncs_reach_the_bridge(run_dir: Path) -> None:
    outcome = _run(run_dir, _program(run_dir))
    assert isinstance(outcome, Completed), (outcome, _lines(run_dir, "err"))
    assert outcome.value == 0
    hits = [(hit.point, hit.n) for hit in outcome.hits]
    assert hits == [
        ("db.commit", 1), ("db.committed", 1), ("db.commit", 2), ("db.committed", 2),
        ("mine", 1), ("later", 1), ("next", 1), ("file.sync", 1),
    ]
    committed = outcome.hits[1].context
    assert (committed["db"], committed["n"], committed["sync"]) == ("app.db", 1, "wal/1")
    assert outcome.hits[4].context == {"k": 1}
    assert _rows(run_dir) == [1]
    [said] = hooks_of_dir(run_dir)
    assert said["hooked"] is True and said["executable"] == sys.executable
    # Its fsync has its point before it and is logged after it, as a Python worker's is.
    assert outcome.hits[7].context == {"file": "out.jsonl"}
    [log] = (run_dir / "logs").glob("syncs-*.tsv")
    assert log.read_text() == f"{(run_dir / 'out.jsonl').resolve()}\t9\n"


def hooks_of_dir(run_dir: Path) -> list[dict[str, object]]:
    return hooks_of(run_dir / "logs", "worker-1")


def test_a_kill_at_a_commit_kills_the_program_before_it_commits(run_dir: Path) -> None:
    outcome = _run(run_dir, _program(run_dir), [Fault("db.commit", Kill(), hit=2)])
    assert isinstance(outcome, Killed), outcome
    assert (outcome.point, outcome.context["db"]) == ("db.commit", "app.db")
    assert _rows(run_dir) == []  # the INSERT's transaction never committed
    assert wait_gone(int(_lines(run_dir)[0].split()[1]), timeout=10)  # killed with the bridge


def test_a_failed_commit_raises_sqlites_own_error_in_the_program(run_dir: Path) -> None:
    error = sqlite3.OperationalError("disk I/O error")
    outcome = _run(run_dir, _program(run_dir), [Fault("db.commit", Raise(error), hit=2)])
    assert isinstance(outcome, Completed), (outcome, _lines(run_dir, "err"))
    assert "commit failed: sqlite3 OperationalError disk I/O error" in _lines(run_dir)
    assert _rows(run_dir) == []
    # The commit failed, so no db.committed followed it.
    assert ("db.committed", 2) not in [(hit.point, hit.n) for hit in outcome.hits]


def test_a_deferred_point_fires_at_the_programs_next_point(run_dir: Path) -> None:
    outcome = _run(run_dir, _program(run_dir), [Fault("later", Kill())])
    assert isinstance(outcome, Killed), outcome
    assert (outcome.point, outcome.fired_at) == ("later", "next")


def test_the_program_runs_as_it_would_without_the_hooks(run_dir: Path) -> None:
    # Its own sitecustomize, on its own PYTHONPATH, still runs, after the hooks.
    own = run_dir / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import sys\nsys.stdout.write('own sitecustomize\\n')\n")
    argv = [*_program(run_dir), "--flag"]
    outcome = _run(run_dir, argv, PATH=str(own))
    assert isinstance(outcome, Completed), (outcome, _lines(run_dir, "err"))
    lines = _lines(run_dir)
    assert lines[0] == "own sitecustomize"
    done = json.loads(lines[-1].removeprefix("done "))
    assert done == {
        "argv": [argv[1], "--flag"], "main": "__main__", "path0": str(run_dir), "startup_left": [],
    }


def test_a_module_run_with_dash_m_is_hooked_too(run_dir: Path) -> None:
    (run_dir / "agent.py").write_text(PROGRAM)
    outcome = _run(run_dir, [sys.executable, "-m", "agent"])
    assert isinstance(outcome, Completed), (outcome, _lines(run_dir, "err"))
    assert [hit.point for hit in outcome.hits][:2] == ["db.commit", "db.committed"]


def test_python_run_isolated_gets_no_hooks_and_the_reason_says_so(run_dir: Path) -> None:
    script = _program(run_dir, "import sqlite3\nsqlite3.connect(':memory:').close()\n")
    outcome = _run(run_dir, [script[0], "-I", script[1]])
    assert isinstance(outcome, Completed), outcome
    assert outcome.hits == () and hooks_of_dir(run_dir) == []
    assert unhooked_reason(hooks_of_dir(run_dir)).startswith(
        "a command that runs no Python (or runs it with -I, -E or -S)"
    )


def test_a_python_that_cannot_load_the_hooks_runs_without_them_and_says_why(
    run_dir: Path,
) -> None:
    broken = run_dir / "broken" / "pytest_crashpoints"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise RuntimeError('too old for this package')\n")
    outcome = _run(run_dir, _program(run_dir), CRASHPOINTS_HOOKS=str(broken))
    assert isinstance(outcome, Completed), (outcome, _lines(run_dir, "err"))
    assert outcome.hits == ()
    assert _lines(run_dir)[-1].startswith("done ")  # it ran, unhooked
    [said] = hooks_of_dir(run_dir)
    assert said["hooked"] is False
    why = "RuntimeError: too old for this package"
    assert unhooked_reason([said]) == (
        f"the command's Python could not load the harness's hooks ({why})"
    )
    assert f"crashpoints: no hooks in this Python process ({why})" in _lines(run_dir, "err")


def test_a_raise_answer_names_the_class_to_raise() -> None:
    made = exception_from({"type": "sqlite3.OperationalError", "message": "database is locked"})
    assert type(made) is sqlite3.OperationalError and str(made) == "database is locked"
    for name in ("no.such.Module", "builtins.len", "sqlite3.version_info", ""):
        made = exception_from({"type": name, "error": "X: y"})
        assert isinstance(made, HarnessError), name
        assert str(made) == "the harness raised X: y at a fail point"
