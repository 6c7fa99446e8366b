"""One resolver for a crash test's settings: the marker over the session's options.

Precedence, highest first: the test's marker > command line > environment > ini > default
(the session's options already combine the last four, in ``options``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._harness.explore import CrashSettings
    from .marker import CrashMarker
    from .options import SessionOptions

__all__ = ["resolve"]


def resolve(marker: CrashMarker, options: SessionOptions, *, seed: int | None) -> CrashSettings:
    """The settings a crash test runs with."""
    from .._harness.explore import CrashSettings

    mode = marker.mode or options.mode
    max_faults = marker.max_faults or options.max_faults
    if max_faults is None:
        max_faults = 1 if mode == "exhaustive" else 2
    return CrashSettings(
        points=marker.points,
        mode=mode,  # type: ignore[arg-type]
        max_examples=marker.max_examples or options.max_examples,
        max_faults=max_faults,
        seed=seed,
        strict_coverage=bool(
            options.strict_coverage if marker.strict_coverage is None else marker.strict_coverage
        ),
        replay=options.replay,
        engine=marker.engine or options.engine,  # type: ignore[arg-type]
    )
