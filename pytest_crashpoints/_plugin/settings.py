"""One resolver for a crash test's settings: the marker over the session's options.

Precedence, highest first: the test's marker > command line > environment > ini > default
(the session's options already combine the last four, in ``options``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._harness.search.explore import CrashSettings
    from .marker import CrashMarker
    from .options import SessionOptions

__all__ = ["AUTO_JOBS_LIMIT", "auto_jobs", "resolve"]


def resolve(marker: CrashMarker, options: SessionOptions, *, seed: int | None) -> CrashSettings:
    """The settings a crash test runs with."""
    from .._harness.search.explore import CrashSettings

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
        jobs=_jobs(marker, options),
        jobs_auto=options.jobs == "auto",
        faults=marker.faults,
        faults_left_out=marker.faults_left_out,
        # A replay is one schedule: there is nothing to split.
        shard=None if options.replay is not None else options.shard,
    )


def _jobs(marker: CrashMarker, options: SessionOptions) -> int:
    """A test marked ``engine="processes"`` keeps its durable state outside its run directory
    (a broker, a database server): two of its cases at once would share it. One job."""
    if marker.engine == "processes":
        return 1
    return auto_jobs() if options.jobs == "auto" else int(options.jobs)


#: Most jobs ``auto`` chooses: each job's harness work shares this process's interpreter.
AUTO_JOBS_LIMIT = 4


def auto_jobs() -> int:
    """The cores this process may use, divided among the xdist workers of the session (each
    worker is one such process), at most :data:`AUTO_JOBS_LIMIT`; at least 1."""
    import os

    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    except ValueError:
        workers = 1
    return max(1, min(AUTO_JOBS_LIMIT, cores // workers))
