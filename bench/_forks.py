"""Count the processes a piece of work forks, wherever they are forked from.

A callback registered with ``os.register_at_fork`` is inherited by every forked child (the
fork server included), so each fork anywhere below this process appends one line to a file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

_log: list[str] = []  # the current counting file, if any (a list so the hook sees changes)


def _count() -> None:
    if _log:
        fd = os.open(_log[0], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, b"f\n")
        finally:
            os.close(fd)


os.register_at_fork(after_in_child=_count)


def forks(work: Callable[[], Any]) -> int:
    """How many processes ``work()`` forked (directly or from processes it forked)."""
    with tempfile.TemporaryDirectory(prefix="bench-forks-") as tmp:
        path = Path(tmp) / "forks"
        path.touch()
        _log.append(str(path))
        try:
            work()
        finally:
            _log.clear()
        return len(path.read_text().splitlines())
