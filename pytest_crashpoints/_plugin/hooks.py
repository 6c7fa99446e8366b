"""The plugin's hook specifications: what a ``conftest.py`` or another plugin can add.

Registered with ``pytest_addhooks``; implement a hook by defining a function of its name in a
``conftest.py`` (it applies to the tests under that directory) or in a plugin.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .._harness.verdict.invariants import Invariant

__all__ = ["pytest_crashpoints_invariants"]


@pytest.hookspec
def pytest_crashpoints_invariants(item: pytest.Item) -> Iterable[Invariant] | None:
    """Return invariants of your own for the crash test ``item`` (or ``None``).

    Each invariant is a function ``check(evidence)`` that returns (or yields) the violations
    it finds in one case: :class:`~pytest_crashpoints.harness.Violation` objects, or plain
    messages. They are checked on every case of the test after the six, and reported, shrunk,
    replayed and counted like them, by the function's name. Every implementation's invariants
    are added to those the test passes to ``crashpoints.run(invariants=...)``.
    """
