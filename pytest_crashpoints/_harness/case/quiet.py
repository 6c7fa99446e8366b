"""The quiet phase of a case, and the killed-recovery replay (invariant 6).

After the schedule's steps, the quiet phase lifts every fault, then runs recovery (advancing
the clock past leases, backoff and search lag) and delivers again every message whose worker
died, until a recovery run changes nothing. When recovery had work, the same quiet phase is
replayed on a copy of the run directory taken before it, with recovery killed at its own
fail point, and the two ends are compared: a recovery killed midway and run again must end
where an uninterrupted one ends.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Sequence
from pathlib import Path

from .context import CaseEnv
from .schedule import RECOVERY_POINTS, KillAt
from .steps import INCONCLUSIVE, CaseRun
from .world import World

__all__ = [
    "QUIET_ROUNDS",
    "replay_error",
    "QUIET_STEP",
    "killed_recovery_diff",
    "needs_recovery",
    "quiet",
    "snapshot",
]

#: Harness seconds the quiet phase moves the clock before each recovery run: past leases,
#: backoff and search lag of the reference policy.
QUIET_STEP = 400.0
#: Recovery runs the quiet phase allows before it stops waiting for the ledger to settle.
QUIET_ROUNDS = 24
#: How long (harness seconds) the quiet phase waits, at most, for work that backs off: past
#: the reference recovery's ``review_after`` (an hour), when unanswered work goes to review.
QUIET_HORIZON = 2 * 3600.0


def quiet(run: CaseRun) -> bool:
    """Lift every fault, then run recovery until the state stops changing.

    A run that changes nothing, while work is still in flight and waiting for a backoff to
    pass, is not the end: the clock moves to when that work is due (within
    :data:`QUIET_HORIZON`) and recovery runs again. Nor, once, while a message is still
    unacknowledged: the clock moves to the horizon and the queue delivers it again. Returns
    whether it settled: its last recovery run changed nothing (the ledger and the providers'
    effects alike) and nothing is left waiting. That run is then the "second run" of
    invariant 6.
    """
    run.world.lift_faults()
    run.history.add(run.step, run.clock.now(), "quiet", "quiet phase: every fault lifted")
    start = run.clock.now()
    step = QUIET_STEP
    late = False
    for round_ in range(QUIET_ROUNDS):
        run.clock.advance(step)
        before = run.world.state_lines()
        # A restarted worker runs recovery first; then, at least once, the queue delivers
        # again every message whose worker died (its visibility timeout has passed).
        outcome = run.recover()
        if round_ == 0:
            run.first_quiet_points = frozenset(hit.point for hit in getattr(outcome, "hits", ()))
        for index in list(run.unacked):
            run.clock.advance(1.0)  # one process per harness second keeps the timeline clear
            run.deliver(index, None, again=True)
        if run.world.state_lines() != before:
            step = QUIET_STEP
            continue
        waiting = _next_due(run)
        if waiting is None and run.unacked and not late:
            # A queue keeps delivering a message its workers never acknowledged until its
            # dead-letter policy gives up, long after any lease a worker waits out (a claim
            # it refuses while the dead holder's lease runs, kept in its own clock and
            # columns the harness cannot read): once more at the horizon.
            late = True
            waiting = start + QUIET_HORIZON
        if waiting is None or waiting - start > QUIET_HORIZON:
            # Settled. A message still unacknowledged now fails the same way every time
            # (e.g. its task was revoked): the queue would dead-letter it.
            return True
        step = max(waiting - run.clock.now(), 1.0)
    return False


def _next_due(run: CaseRun) -> float | None:
    """When the earliest in-flight attempt that backs off is due again, if any."""
    due = [
        a.next_attempt_at
        for a in run.world.view().attempts()
        if a.in_flight and a.next_attempt_at is not None
    ]
    return min(due) if due else None


def needs_recovery(run: CaseRun) -> bool:
    return any(a.in_flight for a in run.world.view().attempts())


def snapshot(run: CaseRun, target: Path) -> CaseEnv:
    """A copy of the whole run directory (the reference ledger, a user's own ledger files,
    journals, authority store, clock) and of the agent's Redis, if it has one, as a new env
    under ``target``. Every worker is dead and
    the parent writes nothing meanwhile, so the copy is consistent."""
    copy = run.env.run_dir.copy(
        target, timeout=run.scenario.timeout, start_method=run.scenario.start_method
    )
    # Its databases in a server are copied with it, for the replay of a killed recovery,
    # which only a scenario with a recovery runs (each copy costs the server a file copy).
    for database in run.scenario.databases if run.scenario.recover is not None else ():
        database.copy(run.env.path, copy.path)
    env = dataclasses.replace(run.env, root=str(copy.path))
    if run.world.redis is not None:  # the agent's Redis is copied too: a server of its own
        redis = run.world.redis.clone()
        run.world.redis_copies.append(redis)
        env = dataclasses.replace(env, redis_url=redis.url)
    return env


def replay_error(error: str) -> str:
    """An error of the killed-recovery replay, as the case reports it (an inconclusive one
    stays inconclusive: its marker first)."""
    if error.startswith(INCONCLUSIVE):
        return f"{INCONCLUSIVE}killed-recovery replay: {error.removeprefix(INCONCLUSIVE)}"
    return f"killed-recovery replay: {error}"


def killed_recovery_diff(
    run: CaseRun,
    copy_env: CaseEnv,
    unacked: Sequence[int],
    final: list[str],
    *,
    runs: int = 0,
) -> tuple[tuple[str, ...], str | None]:
    """Run the quiet phase on the copy with recovery killed midway; compare the ends.

    ``runs`` is how many processes the case had started when the copy was taken: the copy's
    processes are numbered on from there, so the killed recovery is named as the quiet
    phase's first recovery run (the one it stands for), and no name is used twice.

    Recovery is killed at the latest of its fail points that the quiet phase's first
    recovery run reached: that run started from the very state of the copy, at the same
    harness time, so this one reaches the point too. (Trying a point on the copy to see
    whether it is reached would let the try's recovery change the copy first.)
    """
    reached = [point for point in RECOVERY_POINTS if point in run.first_quiet_points]
    if not reached:
        return (), None  # recovery passed no fail point of its own: nothing to kill it at
    point = reached[-1]
    world = World(run.scenario, copy_env, fresh=False)
    copy = CaseRun(world, fresh=False)
    try:
        copy.step = run.step
        copy.processes = runs
        copy.unacked = dict.fromkeys(unacked)
        world.lift_faults()
        copy.clock.advance(QUIET_STEP)
        copy.recover(KillAt(point, 1))
        if not copy.kills:
            run.errors.append(
                f"killed-recovery replay: recovery did not reach {point!r} on a copy of the "
                "case, though the same recovery reached it from the same state: the recovery "
                "is not deterministic"
            )
            return (), None
        quiet(copy)
        ended = world.state_lines()
    finally:
        run.errors += [replay_error(error) for error in copy.errors]
        world.close()
    diff = tuple(
        difflib.unified_diff(final, ended, "uninterrupted", "killed+rerun", n=0, lineterm="")
    )
    return diff, point
