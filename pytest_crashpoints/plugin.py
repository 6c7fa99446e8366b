"""The pytest plugin (entry point ``pytest11: crashpoints``).

Kept thin and cheap to import: every pytest run of every user imports it, so heavy modules
(hypothesis, httpx, respx, multiprocess) are imported only inside the hooks that need them.
"""

from __future__ import annotations

import pytest

MARKER_HELP = (
    "crashpoints(points='ABCDEF', *, providers=(), mode='hypothesis', max_examples=None, "
    "max_faults=1, timeout=None, start_method='fork'): run this test's worker under crash "
    "schedules: real SIGKILLs at the points, recovery, and the six invariants. "
    "See docs/reference.md#marker"
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
