"""Giving the memory a crash test freed back to the operating system.

One crash test runs many cases, and each case's loopback servers answer every request on a
thread of their own: glibc's allocator spreads those threads over several arenas, and what
they free stays mapped in the process, in pieces too small for the next test to reuse. Over
a long session (a deployment gate of many tests in one process) the resident set then grows
by megabytes a minute without a leak. ``malloc_trim(0)`` returns the free pages of every arena
at once; the harness calls it after each test. Elsewhere (another C library, another
platform) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["release_freed_memory"]


def _trim() -> object:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_MALLOC_TRIM = _trim()


def release_freed_memory() -> None:
    """Return the pages this process's allocator holds free to the operating system."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)  # type: ignore[operator]
