"""A pytest plugin for the benchmarks: counts every process forked below the pytest process
(``-p bench._forkcount``), one line per fork in the file ``BENCH_FORK_LOG`` names. A callback
of ``os.register_at_fork`` is inherited by every forked child, the fork server's included."""

from __future__ import annotations

import os

_LOG = os.environ.get("BENCH_FORK_LOG")


def _count() -> None:
    if _LOG:
        fd = os.open(_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, b"f\n")
        finally:
            os.close(fd)


os.register_at_fork(after_in_child=_count)
