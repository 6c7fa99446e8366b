"""The harness's hooks in a Python program run as a command: what a Python worker gets.

The bridge that runs a command (``bridge.py``) puts :data:`STARTUP` first on the command's
``PYTHONPATH`` (:func:`hook_variables`). Every Python process the command starts (``python
agent.py``, ``python -m agent``, a console script, a Python a shell script starts) imports the
``sitecustomize`` module there as it starts, before any code of its own, and that calls
:func:`install`, which gives the process what a Python worker gets in its own process:

- its fail point calls (its own ``crashpoint()`` calls, and the commit hooks') go to the
  bridge over the fail-point protocol (``_inject/remote.py``), which fires them armed with
  the schedule's faults: a kill there kills the bridge's process group, the program in it;
- every SQLite commit fires ``db.commit`` and ``db.committed`` (``_inject/commits.py``), and
  every PostgreSQL commit of psycopg, psycopg2 or asyncpg (``_inject/pg_hooks.py``): kills
  and failed commits there, the connection's settings for a power loss, and, through the
  bridge, the automatic A before the next write request the relay forwards; so does every
  write to Redis through redis-py (``_inject/redis_commits.py``);
- its ``os.fsync`` and ``os.fdatasync`` calls are logged (``storage/agentfiles.py``): a power
  loss keeps what it synced of its other files;
- one line in ``logs/<process>.python`` in the run directory says that it did, or why it
  could not (:func:`hooks_of`): how the harness knows whether the program's commits and syncs
  are seen, and what the summary says of the points it could not reach.

The program itself is left as it would run: its ``sys.argv``, ``__main__`` and ``sys.path``
(``STARTUP`` leaves it), and its own ``sitecustomize`` (which runs after). Not reached: Python
run with ``-I``, ``-E`` or ``-S`` (they skip ``PYTHONPATH`` or ``site``), and a Python that
cannot import this package (one older than it supports): the program runs without the hooks,
and the summary says so.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..._inject.commits import install_commit_hooks
from ..._inject.failpoints import install_plan
from ..._inject.pg_hooks import install_postgres_hooks
from ..._inject.redis_commits import install_redis_hooks
from ..._inject.remote import RemotePlan
from ..storage.agentfiles import install_sync_log

if TYPE_CHECKING:  # the program imports this module: only what the hooks need
    from .context import CaseEnv

__all__ = ["STARTUP", "hook_variables", "hooks_of", "install", "record", "unhooked_reason"]

#: The directory the bridge puts first on a command's ``PYTHONPATH``: its ``sitecustomize``.
STARTUP = Path(__file__).resolve().with_name("python_startup")
#: The package the hooks are loaded from in the program (the harness's own copy).
PACKAGE = Path(__file__).resolve().parents[2]
#: Each Python process of a command writes a line here (``logs/<process>.python``).
EVIDENCE = "{process}.python"


def hook_variables(env: CaseEnv, inherited: Mapping[str, str]) -> dict[str, str]:
    """The variables that install the hooks in every Python process of a command:
    ``PYTHONPATH`` with :data:`STARTUP` first (``inherited``'s after it), where the package
    is, and the harness's own databases, whose commits fire nothing."""
    path = [str(STARTUP)]
    if inherited.get("PYTHONPATH"):
        path.append(inherited["PYTHONPATH"])
    return {
        "PYTHONPATH": os.pathsep.join(path),
        "CRASHPOINTS_HOOKS": str(PACKAGE),
        "CRASHPOINTS_HOOKS_EXCLUDE": os.pathsep.join(
            [str(env.run_dir.journals), str(env.authority_path)]
        ),
    }


def install() -> None:
    """In a Python process of a command, at start-up: the hooks (see the module docstring),
    then a line that says so. Does nothing outside a bridge's command (no
    ``CRASHPOINTS_URL``)."""
    url = os.environ.get("CRASHPOINTS_URL")
    run_dir = os.environ.get("CRASHPOINTS_RUN_DIR")
    if not url or not run_dir:
        return
    install_plan(RemotePlan(url))
    excluded = [p for p in os.environ.get("CRASHPOINTS_HOOKS_EXCLUDE", "").split(os.pathsep) if p]
    install_commit_hooks(exclude=excluded)
    install_postgres_hooks()
    install_redis_hooks()
    install_sync_log(Path(run_dir))
    record(hooked=True)


def record(*, hooked: bool, why: str = "") -> None:
    """Append this process's line to its evidence file (nothing outside a bridge's command)."""
    run_dir, process = os.environ.get("CRASHPOINTS_RUN_DIR"), os.environ.get("CRASHPOINTS_PROCESS")
    if not run_dir or not process:
        return
    line = {
        "pid": os.getpid(),
        "python": ".".join(str(part) for part in sys.version_info[:3]),
        "executable": sys.executable,
        "hooked": hooked,
    }
    if why:
        line["why"] = why
    path = Path(run_dir) / "logs" / EVIDENCE.format(process=process)
    with open(path, "a", encoding="utf-8") as file:  # one write: one line
        file.write(json.dumps(line, sort_keys=True) + "\n")


def hooks_of(logs: Path, process: str) -> list[dict[str, object]]:
    """What each Python process that process ``process`` of a case ran said of its hooks,
    in order, from the case's ``logs`` directory (nothing: it ran no Python that could import
    the start-up hook)."""
    path = logs / EVIDENCE.format(process=process)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    lines = []
    for raw in text.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue  # a line cut by a kill
        if isinstance(line, dict):
            lines.append(line)
    return lines


def unhooked_reason(lines: list[dict[str, object]]) -> str:
    """Why a command's process got no hooks, from what its Python processes said
    (:func:`hooks_of`); ``""`` if one of them got them."""
    if any(line.get("hooked") is True for line in lines):
        return ""
    for line in lines:
        if line.get("why"):
            return f"the command's Python could not load the harness's hooks ({line['why']})"
    return (
        "a command that runs no Python (or runs it with -I, -E or -S) gets no hooks at its "
        "commits"
    )
