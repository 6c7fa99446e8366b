"""Linux's ``prctl(2)``, for the two settings the harness asks of a process: to be killed
when its parent dies (``PR_SET_PDEATHSIG``) and to adopt the orphans below it
(``PR_SET_CHILD_SUBREAPER``).

The C function is looked up once per process tree: a fork inherits it. Built anew in each
worker, it cost the worker about half a millisecond, most of it pages copied on write. A
process between fork and exec (``preexec_fn``) must not build it at all: :func:`load` it
before the fork.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

__all__ = ["PR_SET_CHILD_SUBREAPER", "PR_SET_PDEATHSIG", "load", "set_option"]

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

_function: Callable[..., int] | None = None


def load() -> Callable[..., int] | None:
    """libc's ``prctl`` (looked up on the first call), or None where there is none."""
    global _function
    if _function is None and sys.platform.startswith("linux"):
        import ctypes

        _function = ctypes.CDLL(None, use_errno=True).prctl
    return _function


def set_option(option: int, value: int) -> bool:
    """Set ``option`` to ``value`` for this process; whether it took (False off Linux)."""
    prctl = load()
    return prctl is not None and prctl(option, value, 0, 0, 0) == 0
