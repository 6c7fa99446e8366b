"""Thread pools that a fork copied without their threads, made whole again.

A fork copies only the thread that calls it. A ``concurrent.futures.ThreadPoolExecutor`` that
ran in the harness's process before a fork server was forked from it (a library's module-level
pool that a crash test's ``setup`` used, in the pytest process) is copied with its set of
threads and its count of idle ones: in the copy the pool believes its threads exist and are
idle, starts none, and what a worker submits never runs. The pool's owner did nothing wrong;
the process it runs in was made by a fork it never saw.

:func:`reset_forked_pools` runs once in each fork server, before any worker is forked from it:
a pool whose threads all died with the fork forgets them, so the first ``submit`` in a worker
starts a thread of the worker's own, as in a process of its own. A pool with a live thread
(one the fork server itself started) is left alone.
"""

from __future__ import annotations

import gc
import sys
import threading

__all__ = ["reset_forked_pools"]


def reset_forked_pools() -> int:
    """Make every thread pool whose threads did not survive the fork start afresh; return how
    many were reset. Nothing to do (and nothing imported) where no pool module was loaded."""
    pools = sys.modules.get("concurrent.futures.thread")
    kind = getattr(pools, "ThreadPoolExecutor", None)
    if kind is None:
        return 0
    reset = 0
    for obj in gc.get_objects():
        if not isinstance(obj, kind):
            continue
        threads = getattr(obj, "_threads", None)
        if not threads or any(t.is_alive() for t in threads):
            continue
        obj._threads = set()
        obj._idle_semaphore = threading.Semaphore(0)
        reset += 1
    return reset
