"""Where run directories live while their case runs: in memory where the system has a memory
file system, on disk otherwise.

A run directory is written by every process of a case (the ledger, the providers' journals,
the agent's own files) and synced by SQLite at every commit. A SIGKILL keeps what a process
wrote in the page cache, so a kill leaves the same files on a memory file system as on a disk,
and power losses are modelled from what the processes synced (SQLite's WAL index, the fsync
log of ``agentfiles.py``), not from what the disk kept: the verdicts do not depend on where the
files are. What a memory file system saves is the disk's own cost: each sync of a commit, each
file the harness puts back between crash states.

``where`` (``--crashpoints-run-dir``, or ``PYTEST_CRASHPOINTS_RUN_DIR`` for the harness used
without pytest):

- ``"memory"`` (the default): ``/dev/shm`` when it is a writable ``tmpfs`` with room; else the
  disk, with the reason (:func:`describe`).
- ``"disk"``: the base directory the caller gives (pytest's ``tmp_path``), as before.
- a path: that directory (an agent that needs a particular file system).

A case's run directory is created in the scratch root and moved to the caller's base
directory only when it is kept (its case failed): the evidence outlives the session, the
scratch root does not (it is removed when the process that made it exits, and a root left by
a process that died is removed by the next one).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from ...errors import HarnessUsageError

__all__ = ["ENV", "configure", "describe", "root"]

#: The environment variable the harness reads when pytest's option does not set ``where``.
ENV = "PYTEST_CRASHPOINTS_RUN_DIR"
#: The memory file system looked for, and the room it must have left.
MEMORY = Path("/dev/shm")
MIN_FREE = 256 * 1024 * 1024

_where: str | None = None
_memory = MEMORY
#: (pid, root, reason): the root made by process ``pid``; a forked child makes its own.
_made: tuple[int, Path | None, str] | None = None


def configure(where: str | None, *, memory: Path = MEMORY) -> None:
    """Set where run directories go (``"memory"``, ``"disk"`` or a directory); ``None`` reads
    the environment again. ``memory``: the memory file system ``"memory"`` looks for. Takes
    effect for the run directories created after it."""
    global _where, _made, _memory
    if where is not None:
        check(where)
    _where, _made, _memory = where, None, memory


def check(where: str) -> str:
    """``where`` if it is ``"memory"``, ``"disk"`` or an existing directory; else a usage error
    that says what to write."""
    if where in ("memory", "disk") or Path(where).is_dir():
        return where
    raise HarnessUsageError(
        f"run directories: {where!r} is neither 'memory', 'disk' nor an existing directory "
        "(write --crashpoints-run-dir=memory, =disk, or the path of a directory that exists)"
    )


def root() -> Path | None:
    """The directory run directories are created in, or ``None`` for the caller's base
    directory (the disk)."""
    return _scratch()[1]


def describe() -> str:
    """Where run directories go, and why, in one line (the session header shows it). Makes
    nothing: a session that runs no crash case creates no directory."""
    parent, reason = _choose(_where or os.environ.get(ENV) or "memory")
    if parent is None:
        return f"run directories on disk ({reason})"
    return f"run directories in {parent} ({reason})"


def _scratch() -> tuple[int, Path | None, str]:
    global _made
    if _made is None or _made[0] != os.getpid():
        _made = _make(_where or os.environ.get(ENV) or "memory")
    return _made


def _choose(where: str) -> tuple[Path | None, str]:
    """The directory the scratch roots go in (``None``: the disk), and why."""
    if where == "disk":
        return None, "--crashpoints-run-dir=disk"
    if where == "memory":
        unusable = _unusable(_memory)
        if unusable is not None:
            return None, f"no memory file system: {unusable}"
        return _memory, "memory: tmpfs"
    return Path(check(where)), f"--crashpoints-run-dir={where}"


def _make(where: str) -> tuple[int, Path | None, str]:
    pid = os.getpid()
    parent, reason = _choose(where)
    if parent is None:
        return pid, None, reason
    top = parent / f"crashpoints-{os.getuid()}"
    top.mkdir(mode=0o700, exist_ok=True)
    _remove_dead(top)
    path = Path(tempfile.mkdtemp(prefix=f"{pid}-", dir=top))
    atexit.register(_remove, pid, path)
    return pid, path, reason


def _unusable(path: Path) -> str | None:
    if not path.is_dir():
        return f"{path} does not exist"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{path} is not writable"
    if _fs_type(path) != "tmpfs":
        return f"{path} is not a tmpfs"
    stats = os.statvfs(path)
    free = stats.f_bavail * stats.f_frsize
    if free < MIN_FREE:
        return f"{path} has {free // (1024 * 1024)} MiB free, under {MIN_FREE // (1024 * 1024)}"
    return None


def _fs_type(path: Path) -> str | None:
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    best, kind = "", None
    target = str(path.resolve())
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best, kind = point, fields[2]
    return kind


def _remove_dead(top: Path) -> None:
    """Remove the roots of processes that no longer exist (killed before their exit ran)."""
    for entry in top.iterdir():
        owner = entry.name.split("-", 1)[0]
        if owner.isdigit() and not _alive(int(owner)):
            shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(pid: int, path: Path) -> None:
    if os.getpid() == pid:
        shutil.rmtree(path, ignore_errors=True)
