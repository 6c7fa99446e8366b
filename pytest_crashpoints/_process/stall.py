"""How long a worker's processes waited for a CPU: what a busy machine adds to its wall time.

Linux counts, per thread, the time it was runnable but not running (the second field of
``/proc/<pid>/task/<tid>/schedstat``: nanoseconds on a run queue). A worker that took longer
than its timeout on a machine shared with other jobs spent that time waiting for a core, not
hanging; a hung worker (a deadlock, a wait that never ends) sleeps, and accumulates none. The
harness subtracts the wait from a worker's elapsed time before it calls the worker timed out,
so the timeout means the same on a loaded CI runner as on a quiet laptop.
"""

from __future__ import annotations

import os

__all__ = ["STALL_CAP", "group_stall"]

#: A worker is timed out after this many times its timeout, however long it waited for a CPU.
#: (A starved worker still gets its share of a core, so its own time grows and it times out
#: anyway when it hangs; the cap bounds what a miscount could cost.)
STALL_CAP = 20.0


def _thread_wait(pid: int) -> int:
    """The longest run-queue wait, in nanoseconds, of any thread of process ``pid``."""
    longest = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat", "rb") as stat:
                fields = stat.read().split()
        except OSError:
            continue
        if len(fields) >= 2:
            longest = max(longest, int(fields[1]))
    return longest


def group_stall(pgid: int) -> float:
    """Seconds the most delayed thread of process group ``pgid`` spent waiting for a CPU
    (0.0 where the platform does not count it). Every process of a worker's group starts
    with the worker or after it, so their counts are since the worker started."""
    if not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/schedstat"):
        return 0.0
    from .peers import process_groups

    members = process_groups([pgid]) or [pgid]
    return max((_thread_wait(pid) for pid in members), default=0) / 1e9
