"""What a worker leaves behind: the processes it started that left its process group.

A worker leads its own process group, and the harness kills that group when the worker ends.
A helper started with ``start_new_session=True``, or a daemon made by a double fork and
``setsid``, leaves the group and would outlive the worker, holding the worker's pipes. So
every worker and the fork server are child subreapers (``PR_SET_CHILD_SUBREAPER``, Linux): a
process orphaned below them is re-parented to them instead of to init, and
:func:`end_children` kills and reaps it.

- A worker that ends by itself (returned or raised) kills what is left below it before it
  reports, and reports each process that was still running (a harness error in the case).
- A worker killed at a fail point cannot: its orphans go to the fork server, which kills them
  when the harness has it reap the worker, as the worker's group is killed.
"""

from __future__ import annotations

import contextlib
import os
import signal

from . import prctl

__all__ = ["become_subreaper", "end_children", "live_children"]



def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux); return whether it is one."""
    return prctl.set_option(prctl.PR_SET_CHILD_SUBREAPER, 1)


def live_children() -> dict[int, bool]:
    """This process's children (its own and those re-parented to it): pid -> still running
    (``False`` for a zombie)."""
    me = os.getpid()
    pids: set[int] = set()
    try:
        for task in os.listdir(f"/proc/{me}/task"):
            with open(f"/proc/{me}/task/{task}/children") as file:
                pids.update(int(pid) for pid in file.read().split())
    except OSError:  # no /proc/.../children (a kernel without it): read every process
        for entry in os.listdir("/proc"):
            if entry.isdigit() and _stat(int(entry))[1] == me:
                pids.add(int(entry))
    return {pid: _stat(pid)[0] not in ("Z", "X", "") for pid in pids}


def end_children(*, keep: frozenset[int] = frozenset()) -> list[str]:
    """Kill and reap every child of this process but ``keep``, and what they leave (their
    orphans come to this subreaper in turn). Returns a description of each one that was
    still running, e.g. ``"pid 4242 (sleep 30)"``."""
    running: list[str] = []
    seen: set[int] = set()
    for _ in range(100):  # each round reaps one generation; a fork bomb must not hang us
        children = {pid: alive for pid, alive in live_children().items() if pid not in keep}
        if not children:
            break
        for pid, alive in children.items():
            if alive and pid not in seen:
                seen.add(pid)
                running.append(f"pid {pid} ({_command(pid)})")
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
    return running


def _stat(pid: int) -> tuple[str, int]:
    """The state letter and parent pid of ``pid`` (``("", 0)`` if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            fields = file.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return "", 0
    return fields[0], int(fields[1])


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            words = file.read().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(w.decode(errors="replace") for w in words if w) or "?"
    return text if len(text) <= 80 else text[:77] + "..."
