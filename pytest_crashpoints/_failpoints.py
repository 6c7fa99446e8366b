"""Fail points: the places where the harness may kill, raise or pause a worker (SPEC section 3).

Outside a harness run :func:`crashpoint` does nothing, so it can stay in production code.
"""

from __future__ import annotations

__all__ = ["crashpoint"]


def crashpoint(name: str, /, **context: object) -> None:
    """Mark a place where the harness may crash this process.

    ``name`` is one of the SPEC points (``"A"``, ``"B"``, ``"C"``...) or a name of your own;
    ``context`` (e.g. ``tool="send_email"``) lets a schedule target one call among many.
    Outside a harness run this returns at once and does nothing.
    """
    return None
