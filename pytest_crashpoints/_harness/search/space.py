"""The space of one test's crash schedules, and the ways through it.

:class:`Space` is what a schedule may contain for one test, learned from its fault-free run:
how many messages, which fail points each delivery reached and how often, which providers
can fail a lookup or lag a search, where a worker waits between two tool calls. From it come
every single fault placed where it can act (:func:`enumerate_schedules`, up to a bound of
faults), one schedule of each kind of fault (:func:`covering_schedules`, for strict
coverage), and the Hypothesis strategy that draws schedules and shrinks a failing one
(:func:`schedules`). The steps themselves are ``case/schedule.py``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from ..._inject.failpoints import SYNC_POINT, WRITE_POINT
from ..case.schedule import (
    AUTHORITY_CHANGES,
    COMMIT_FAILURES,
    FAULT_KINDS,
    KIND_LABELS,
    LEASE_WAIT,
    LOST_VARIANTS,
    RACE_POINTS,
    RECOVERY_POINTS,
    REFUSALS,
    SESSION_REFUSAL,
    TORN_WRITE,
    Advance,
    ChangeAuthority,
    Deliver,
    DuplicateRequest,
    FailCommit,
    KillAt,
    LookupTimeouts,
    LoseResponse,
    Midway,
    Recover,
    Refuse,
    Schedule,
    SearchLag,
    Step,
)
from ..storage import powerloss

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

__all__ = [
    "covering_schedules",
    "enumerate_schedules",
    "fault_kind",
    "probe_kills",
    "races_placed",
    "recovery_point",
    "schedules",
    "Space",
    "unplaced_faults",
]


@dataclasses.dataclass(frozen=True)
class Space:
    """What a schedule may contain for one test.

    ``messages`` is how many messages the case delivers; ``reachable`` maps each worker fail
    point to how many times the fault-free run reached it per message (index = message);
    ``points`` the crash points the test declares; ``providers`` the providers whose lookups F
    may time out; ``effects`` per message, how many effects its delivery made at each
    provider in the fault-free run; ``searching`` the providers whose search may lag;
    ``own_a`` per message, how many times the agent marked A itself.
    """

    messages: int
    reachable: tuple[Mapping[str, int], ...]
    points: frozenset[str]
    providers: tuple[str, ...]
    effects: tuple[Mapping[str, int], ...] = ()
    searching: tuple[str, ...] = ()
    own_a: tuple[int, ...] = ()
    #: Whether the scenario has a recovery: without one, faults that only act on a recovery
    #: run (a lookup failing or a search lagging for it, a recovery killed, racing
    #: recoveries) test nothing.
    recovers: bool = True
    #: The kinds of fault chosen (:data:`FAULT_KINDS`); ``None``: every kind the points allow.
    kinds: frozenset[str] | None = None
    #: Per message, where its worker may wait between two of its tool calls when it does not
    #: mark A itself (:func:`between_calls` of the fault-free run): E changes the authority
    #: there.
    between: tuple[tuple[KillAt, ...], ...] = ()
    #: The providers with sessions a fault can make them forget (MCP servers that are not
    #: stateless).
    sessions: tuple[str, ...] = ()
    #: The providers a request to which may arrive twice (MCP servers).
    duplicating: tuple[str, ...] = ()
    #: The kinds of fault left out (the marker's ``faults=["-kind", ...]``): every kind
    #: ``kinds`` allows but these.
    left_out: frozenset[str] = frozenset()
    #: The fail points the test's recovery reaches when work is left in flight (found by
    #: running it); ``None``: not known, every point is tried. A recovery killed, or one of
    #: two racing recoveries waiting, at a point outside it would test nothing.
    recovery_reach: frozenset[str] | None = None
    #: Per message, the databases its worker committed to where a power loss is not a kill,
    #: with their settings (``("jobs.db", "wal/1")``, ``powerloss.lossy_databases``).
    lossy: tuple[tuple[tuple[str, str], ...], ...] = ()
    #: Whether the case delivers no message and its recovery finishes what an incident
    #: left in flight: the faults of recovery come at the start (no kill leaves the work).
    recovery_alone: bool = False

    def chooses(self, kind: str) -> bool:
        """Whether faults of ``kind`` (:data:`FAULT_KINDS`) are tried: chosen, or not left
        out."""
        return (self.kinds is None or kind in self.kinds) and kind not in self.left_out

    def lossy_of(self, message: int) -> tuple[str, ...]:
        """The databases of message ``message`` that a power loss takes commits from (not
        those whose settings could corrupt them: ``powerloss.refusal``)."""
        found = self.lossy[message] if message < len(self.lossy) else ()
        return tuple(name for name, sync in found if powerloss.refusal(sync) is None)

    def kill_sites(self, message: int) -> list[KillAt]:
        """Every (point, hit) a kill can target while message ``message`` is handled: the
        declared points other than D, E, F (which are not places in the worker)."""
        sites: list[KillAt] = []
        for point, hits in sorted(self.reachable[message].items()):
            if point in self.points and point not in ("D", "E", "F"):
                sites.extend(KillAt(point, hit) for hit in range(1, hits + 1))
        return sites

    def torn_write_sites(self, message: int) -> list[KillAt]:
        """Where a power loss of message ``message``'s worker catches a write before its sync:
        each sync of a file of its own (``file.sync``) the fault-free run reached, when the
        points allow a power loss."""
        if not self.points & FAULT_KINDS["power_loss"]:
            return []
        syncs = self.reachable[message].get(SYNC_POINT, 0)
        return [KillAt(SYNC_POINT, hit) for hit in range(1, syncs + 1)]

    def pause_sites(self, message: int) -> list[KillAt]:
        """Where a first delivery may wait while a second one runs (D): every hit of A, B
        and C (an answer to a read as well as to a write), and after its first commit; for an
        agent with no A of its own (nothing durable before it acts), before each write it
        sends, where a check-then-act agent has checked and not yet acted."""
        reached = self.reachable[message]
        sites = [KillAt(p, hit) for p in ("A", "B", "C") for hit in range(1, reached.get(p, 0) + 1)]
        if reached.get("db.committed"):
            sites.append(KillAt("db.committed", 1))
        if not reached.get("A"):
            sites += [KillAt(WRITE_POINT, hit) for hit in range(1, reached.get(WRITE_POINT, 0) + 1)]
        return sites

    def between_of(self, message: int) -> tuple[KillAt, ...]:
        return self.between[message] if message < len(self.between) else ()

    def effects_of(self, message: int) -> Mapping[str, int]:
        return self.effects[message] if message < len(self.effects) else {}


def _base(space: Space) -> list[Step]:
    return [Deliver(i) for i in range(space.messages)]


Part: TypeAlias = tuple[int, str, Any]
#: The position of the parts of a fault that come before any delivery (a recovery alone's).
START = -1


def fault_kind(fault: tuple[Part, ...]) -> str:
    """Which of :data:`FAULT_KINDS` a single fault is (its distinctive part decides: a kill
    that only leaves work in flight for it does not)."""
    kinds = [kind for _, kind, _ in fault]
    values = [value for _, _, value in fault]
    if any(isinstance(value, SearchLag) for value in values):
        return "search_lag"
    if "duplicate" in kinds:
        duplicate = next(value for _, kind, value in fault if kind == "duplicate")
        return "concurrent_delivery" if duplicate[0] == "concurrent" else "duplicate_delivery"
    if "midway" in kinds or any(isinstance(value, ChangeAuthority) for value in values):
        return "authority_change"
    if "fail_commit" in kinds:
        failure = next(value for _, kind, value in fault if kind == "fail_commit")
        return "disk_full" if failure.lasting else "failed_commit"
    if "power_loss" in kinds:
        return "power_loss"
    if "backup_restore" in kinds:
        return "backup_restore"
    last = values[-1]
    if isinstance(last, LookupTimeouts):
        return "lookup_failure"
    if isinstance(last, LoseResponse):
        return "lose_response"
    if isinstance(last, DuplicateRequest):
        return "duplicate_request"
    if isinstance(last, Refuse):
        return "forget_session" if last.variant == SESSION_REFUSAL else "refuse"
    if isinstance(last, Recover):
        return "racing_recovery" if last.racing else "recovery_kill"
    return "kill"


def recovery_point(fault: tuple[Part, ...]) -> str | None:
    """The point a recovery must reach for ``fault`` to test anything: where it is killed,
    or where the first of two racing recoveries waits (``None``: no such point)."""
    last = fault[-1][2]
    if isinstance(last, Recover):
        if last.kill is not None:
            return last.kill.point
        return last.pause_at
    return None


def _placed(space: Space, fault: tuple[Part, ...]) -> bool:
    point = recovery_point(fault)
    return point is None or space.recovery_reach is None or point in space.recovery_reach


def _single_faults(space: Space) -> Iterator[tuple[Part, ...]]:
    """Every single fault the space allows (of the kinds it chooses, if it does), at points
    its recovery reaches."""
    for fault in _every_single_fault(space):
        if space.chooses(fault_kind(fault)) and _placed(space, fault):
            yield fault


def unplaced_faults(space: Space) -> list[str]:
    """The faults of a recovery that :attr:`Space.recovery_reach` leaves out, in words
    (each once): what the summary lists as not applicable."""
    out: dict[str, None] = {}
    for fault in _every_single_fault(space):
        if not space.chooses(fault_kind(fault)):
            continue
        if not _placed(space, fault):
            last = fault[-1][2]
            assert isinstance(last, Recover)
            point = recovery_point(fault)
            what = (
                f"recovery killed at {point}"
                if last.kill is not None
                else f"two racing recoveries, the first waiting at {point}"
            )
            out[what] = None
    return list(out)


def probe_kills(space: Space) -> list[Schedule]:
    """The kills that leave work in flight for a fault of recovery, as schedules, one case
    each: their recovery runs tell which of its points it reaches (``recovery_reach``)."""
    kills: dict[tuple[Part, ...], None] = {}
    for fault in _every_single_fault(space):
        if not space.chooses(fault_kind(fault)):
            continue  # a kind the test did not choose: nothing to learn for it
        if recovery_point(fault) is not None:
            kills[tuple(part for part in fault if part[1] == "kill")] = None
    found = (_apply(space, [kill]) for kill in kills if kill)
    return [schedule for schedule in found if schedule is not None]


def races_placed(space: Space) -> bool:
    """Whether any schedule of ``space`` races two recoveries."""
    return any(
        isinstance(fault[-1][2], Recover) and fault[-1][2].racing for fault in _single_faults(space)
    )


def _every_single_fault(space: Space) -> Iterator[tuple[Part, ...]]:
    """Every single fault, as the parts that make it: (message, kind, value).

    E, F and a kill of recovery only matter while an attempt is in flight, so each comes
    with the kill that leaves one there (at B, else C, else A: the first reachable) and the
    recovery run that must cope with it. Faults at a provider (a lost answer, a refusal, a
    lookup that fails during the worker's own confirmation) come before the delivery whose
    requests they hit. A recovery alone meets its faults at the start.
    """
    if space.recovery_alone:
        yield from _faults_at_start(space)
    for i in range(space.messages):
        yield from _kills(space, i)
        if "D" in space.points:
            yield from _duplicates(space, i)
        if "B" in space.points:
            yield from _lost_responses(space, i)
        if "F" in space.points:
            yield from _refusals(space, i)
        if "db.commit" in space.points:
            yield from _failed_commits(space, i)
        if "E" in space.points:
            yield from _authority_changes_midway(space, i)
        yield from _faults_in_flight(space, i)


def _kills(space: Space, i: int) -> Iterator[tuple[Part, ...]]:
    """A kill of message ``i``'s worker at each place it can be killed; at the same places,
    the power lost instead (when a database or file of its would lose something to it); the
    power lost between each write to a file of its own and that write's sync (a torn write);
    and a backup restored (only when that kind is chosen)."""
    for kill in space.kill_sites(i):
        yield ((i, "kill", kill),)
    powered = space.kill_sites(i) if space.lossy_of(i) else []
    for kill in dict.fromkeys([*powered, *space.torn_write_sites(i)]):
        yield ((i, "power_loss", kill),)
    if space.kinds is not None and "backup_restore" in space.kinds:
        for kill in space.kill_sites(i):
            yield ((i, "backup_restore", kill),)


def _duplicates(space: Space, i: int) -> Iterator[tuple[Part, ...]]:
    """D: message ``i`` delivered again after it was handled, a request sent twice to an MCP
    server, and a second delivery while the first waits at each of its pause sites."""
    yield ((i, "duplicate", ("after", "B", 1)),)
    for provider, count in sorted(space.effects_of(i).items()):
        if provider in space.duplicating:  # an MCP server: a request sent twice
            for nth in range(1, count + 1):
                yield ((i, "before", DuplicateRequest(provider, nth)),)
    gates = space.pause_sites(i) or [KillAt(p, 1) for p in ("D",) if space.reachable[i].get("D")]
    for gate in gates:
        yield ((i, "duplicate", ("concurrent", gate.point, gate.hit)),)


def _lost_responses(space: Space, i: int) -> Iterator[tuple[Part, ...]]:
    """B at the provider: the answer to each write of message ``i`` lost, in each way."""
    for provider, count in sorted(space.effects_of(i).items()):
        for nth in range(1, count + 1):
            for variant in LOST_VARIANTS:
                yield ((i, "before", LoseResponse(provider, nth, variant)),)


def _refusals(space: Space, i: int) -> Iterator[tuple[Part, ...]]:
    """F during the worker's own run: each write of message ``i`` refused (an MCP server's
    session forgotten too), and a provider's lookups failing."""
    for provider, count in sorted(space.effects_of(i).items()):
        sessions = (SESSION_REFUSAL,) if provider in space.sessions else ()
        for nth in range(1, count + 1):
            for refusal in (*REFUSALS, *sessions):
                yield ((i, "before", Refuse(provider, nth, refusal)),)
        if provider in space.providers:
            for failure in ("timeout", "500"):
                yield ((i, "before", LookupTimeouts(provider, None, failure)),)


def _failed_commits(space: Space, i: int) -> Iterator[tuple[Part, ...]]:
    """A commit of message ``i``'s worker fails, each commit in each way; from each commit on,
    the disk stays full (where that kind is chosen)."""
    for hit in range(1, space.reachable[i].get("db.commit", 0) + 1):
        for failure in COMMIT_FAILURES:
            yield ((i, "fail_commit", FailCommit(hit, failure)),)
        if space.kinds is not None and "disk_full" in space.kinds:
            yield ((i, "fail_commit", FailCommit(hit, "full", lasting=True)),)


def _authority_changes_midway(space: Space, i: int) -> Iterator[tuple[Part, ...]]:
    """E between two tool calls of message ``i``: at each of its own A but the first, or,
    without them, where its worker waits between two calls."""
    own = space.own_a[i] if i < len(space.own_a) else 0
    sites = (
        [KillAt("A", hit) for hit in range(2, own + 1)] if own >= 2 else list(space.between_of(i))
    )
    for site in sites:
        for change in AUTHORITY_CHANGES:
            yield ((i, "midway", Midway(site.point, site.hit, change)),)


def _faults_in_flight(space: Space, i: int) -> Iterator[tuple[Part, ...]]:
    """The faults that need work left in flight by a kill of message ``i``'s worker: at its
    first tool call, and at its last (a row that holds two calls recovers the second its
    own way)."""
    reached = space.reachable[i]
    point = next((p for p in ("B", "C", "A") if reached.get(p)), None)
    if point is None:
        return
    in_flights = list(dict.fromkeys((KillAt(point, 1), KillAt(point, reached[point]))))
    if "E" in space.points:
        yield from _authority_changes_in_flight(space, i, in_flights)
    if "F" in space.points and point in ("B", "C"):
        yield from _redeliveries_while_search_lags(space, i, in_flights)
    if not space.recovers:
        return
    yield from _recovery_faults(space, i, in_flights)
    if "D" in space.points:
        yield from _racing_recoveries(space, i, in_flights)


def _authority_changes_in_flight(
    space: Space, i: int, in_flights: Sequence[KillAt]
) -> Iterator[tuple[Part, ...]]:
    """E after a kill: while the attempt may have taken effect (after B), and before it was
    sent (at A)."""
    reached = space.reachable[i]
    before_sends = [KillAt("A", 1), KillAt("A", reached["A"])] if reached.get("A") else []
    for kill in dict.fromkeys([*in_flights, *before_sends]):
        for change in AUTHORITY_CHANGES:
            yield ((i, "kill", kill), (i, "after", ChangeAuthority(i, change)))


def _redeliveries_while_search_lags(
    space: Space, i: int, in_flights: Sequence[KillAt]
) -> Iterator[tuple[Part, ...]]:
    """The queue delivers the dead worker's message again once its lease ran out, while the
    search still lags (before any recovery runs, or with none): a worker that takes "not in
    the search" for "never done" acts a second time."""
    writes = space.effects_of(i)
    for provider in space.searching:
        if provider in writes:
            for in_flight in in_flights:
                yield (
                    (i, "before", SearchLag(provider)),
                    (i, "kill", in_flight),
                    (i, "after", Advance(LEASE_WAIT)),
                    (i, "after", Deliver(i)),
                )


def _recovery_faults(
    space: Space, i: int, in_flights: Sequence[KillAt]
) -> Iterator[tuple[Part, ...]]:
    """After each kill that leaves work in flight, the recovery that must cope with it:
    its lookups failing or its search lagging (F), or itself killed at each of its points."""
    writes = space.effects_of(i)
    for in_flight in in_flights:
        if "F" in space.points:
            for provider in space.providers:
                yield ((i, "kill", in_flight), (i, "after", LookupTimeouts(provider, None)))
            for provider in space.searching:
                if provider in writes:
                    yield ((i, "kill", in_flight), (i, "after", SearchLag(provider)))
        if space.points & {"A", "B", "C"}:
            for point in RECOVERY_POINTS:
                yield ((i, "kill", in_flight), (i, "after", Recover(KillAt(point, 1))))


def _faults_at_start(space: Space) -> Iterator[tuple[Part, ...]]:
    """The faults of a recovery alone, which finds an incident's work in flight from the
    start: its lookups failing or its search lagging (F), itself killed at each point of
    the declared ones (A, B, C) and of its own, and two recoveries at once (D)."""
    if "F" in space.points:
        for provider in space.providers:
            yield ((START, "after", LookupTimeouts(provider, None)),)
        for provider in space.searching:
            yield ((START, "after", SearchLag(provider)),)
    if space.points & {"A", "B", "C"}:
        kills = [p for p in ("A", "B", "C") if p in space.points] + list(RECOVERY_POINTS)
        for point in kills:
            yield ((START, "after", Recover(KillAt(point, 1))),)
    if "D" in space.points:
        for race_point in RACE_POINTS:
            yield ((START, "after", Recover(racing=True, pause_at=race_point)),)


def _racing_recoveries(
    space: Space, i: int, in_flights: Sequence[KillAt]
) -> Iterator[tuple[Part, ...]]:
    """D: two recoveries at once, the first waiting at each race point. They matter most
    when the dead worker never sent (killed at A): both find nothing at the provider, and
    only a claim keeps both from sending."""
    before_send = KillAt("A", 1) if space.reachable[i].get("A") else None
    for kill in dict.fromkeys(k for k in (before_send, *in_flights) if k is not None):
        # Only forced interleavings: a free race is not the same race twice, and a verdict
        # must be (a generated schedule is shrunk and replayed).
        for race_point in RACE_POINTS:
            yield ((i, "kill", kill), (i, "after", Recover(racing=True, pause_at=race_point)))


def _apply(space: Space, faults: Sequence[tuple[Part, ...]]) -> Schedule | None:
    """The schedule of ``faults`` together (``None``: they do not go together)."""
    delivers: list[Deliver] = [Deliver(i) for i in range(space.messages)]
    before: list[list[Step]] = [[] for _ in range(space.messages)]
    after: list[list[Step]] = [[] for _ in range(space.messages)]
    start: list[Step] = []
    for position, kind, value in (part for fault in faults for part in fault):
        if position == START:
            if any(isinstance(step, type(value)) for step in start):
                return None  # one fault of a kind at the start: the rest are its twins
            start.append(value)
        elif kind in _OF_A_DELIVERY:
            deliver = _with_fault(delivers[position], kind, value)
            if deliver is None:
                return None
            delivers[position] = deliver
        elif kind == "before":
            # One switch of a kind per provider: two faults of one kind would overwrite.
            ahead: list[Any] = before[position]
            if any(type(s) is type(value) and s.provider == value.provider for s in ahead):
                return None
            ahead.append(value)
        else:
            after[position].append(value)
    if not all(_faults_go_together(deliver) for deliver in delivers):
        return None
    return Schedule(tuple(_extra_steps(space, start) + _steps(space, delivers, before, after)))


#: The kinds of part that are a delivery's own fault (its fields), not a step of their own.
_OF_A_DELIVERY = frozenset(
    {"kill", "duplicate", "midway", "fail_commit", "power_loss", "backup_restore"}
)


def _with_fault(deliver: Deliver, kind: str, value: Any) -> Deliver | None:
    """``deliver`` with the fault of a part of kind ``kind`` (``None``: it already has one
    that does not go with it)."""
    if kind == "kill":
        if deliver.kill is not None and deliver.kill != value:
            return None
        return dataclasses.replace(deliver, kill=value)
    if kind == "duplicate":
        if deliver.duplicate is not None:
            return None
        duplicate, gate, hit = value
        return dataclasses.replace(deliver, duplicate=duplicate, pause_at=gate, pause_hit=hit)
    if kind == "midway":
        if deliver.midway is not None:
            return None
        return dataclasses.replace(deliver, midway=value)
    if kind == "fail_commit":
        if deliver.fail_commit is not None:
            return None
        return dataclasses.replace(deliver, fail_commit=value)
    if kind == "power_loss":
        if (deliver.kill is not None and deliver.kill != value) or deliver.backup_restore:
            return None
        return dataclasses.replace(deliver, kill=value, power_loss=True)
    assert kind == "backup_restore", kind
    if (deliver.kill is not None and deliver.kill != value) or deliver.power_loss:
        return None
    return dataclasses.replace(deliver, kill=value, backup_restore=True)


def _faults_go_together(deliver: Deliver) -> bool:
    """Whether the faults of one delivery can happen in one run."""
    if deliver.midway is not None and (deliver.kill or deliver.duplicate):
        return False  # the worker waits at one gate: no kill, no second worker with it
    if deliver.fail_commit is not None and (
        deliver.duplicate or deliver.midway or deliver.power_loss or deliver.backup_restore
    ):
        # A failed commit goes with a kill of the same worker (the commit fails, the worker
        # goes on, and dies later); a second worker or a lost machine is another story.
        return False
    # Two workers at once: the machine goes for both, not one.
    return not (
        (deliver.power_loss or deliver.backup_restore) and deliver.duplicate == "concurrent"
    )


def _steps(
    space: Space,
    delivers: Sequence[Deliver],
    before: Sequence[Sequence[Step]],
    after: Sequence[Sequence[Step]],
) -> list[Step]:
    """Each delivery in order, the faults at a provider before it and the steps after it."""
    steps: list[Step] = []
    for deliver, ahead, extra in zip(delivers, before, after, strict=True):
        steps += ahead
        steps.append(deliver)
        steps += _extra_steps(space, extra)
    return steps


def _extra_steps(space: Space, extra: Sequence[Step]) -> list[Step]:
    """The steps after a delivery (or at the start): a fault that acts on what recovery will
    find (E, F) is followed by a recovery run under it, so it acts while the attempt is
    still in flight (when there is a recovery: without one, the redelivery of the quiet
    phase meets it)."""
    steps: list[Step] = []
    for step in extra:
        # Recovery only takes over work whose owner's lease ran out: let it run out first.
        if isinstance(step, Recover):
            steps.append(Advance(LEASE_WAIT))
        steps.append(step)
        if isinstance(step, ChangeAuthority | LookupTimeouts | SearchLag) and space.recovers:
            steps += [Advance(LEASE_WAIT), Recover()]
    return steps


def enumerate_schedules(space: Space, *, max_faults: int = 1) -> Iterator[Schedule]:
    """Every schedule with up to ``max_faults`` faults, fewest first (a bounded search:
    the small schedules, where most recovery bugs show, all of them).

    With ``max_faults=1``: every single fault at every reachable hit; with 2, also every pair.
    """
    singles = list(_single_faults(space))
    base = Schedule(tuple(_base(space)))
    yield base
    seen: set[Schedule] = {base}
    for size in range(1, max_faults + 1):
        for combo in itertools.combinations(singles, size):
            schedule = _apply(space, combo)
            if schedule is not None and schedule not in seen:
                seen.add(schedule)
                yield schedule


def _label(fault: tuple[Part, ...]) -> str:
    """What a single fault exercises, as the coverage table names it: its kind's label (a
    power loss between a write and its sync: a torn write), or the point a kill (of the worker
    or of recovery) lands at."""
    kind = fault_kind(fault)
    last = fault[-1][2]
    if kind == "power_loss" and isinstance(last, KillAt) and last.point == SYNC_POINT:
        return TORN_WRITE
    if kind in KIND_LABELS:
        return KIND_LABELS[kind]
    if isinstance(last, Recover):
        return last.kill.point if last.kill else "recovery"
    assert isinstance(last, KillAt)
    return last.point


def covering_schedules(space: Space) -> list[tuple[str, Schedule]]:
    """One single-fault schedule for each kind of fault the space allows, with the label the
    coverage table gives it: a kill at each declared point that is reached (the point's
    name), a duplicate delivery ("D"), an authority change ("E"), a lookup failure ("F"), a
    lost answer, a refusal, a search lag, racing recoveries, a recovery killed
    ("recovery.claimed"). After a generated exploration, those whose label the draw never
    reached are run too: coverage must not depend on luck."""
    seen: set[str] = set()
    chosen: list[tuple[str, Schedule]] = []
    for fault in _single_faults(space):
        what = _label(fault)
        if what not in seen:
            seen.add(what)
            schedule = _apply(space, [fault])
            if schedule is not None:
                chosen.append((what, schedule))
    return chosen


def schedules(space: Space, *, max_faults: int = 2) -> SearchStrategy[Schedule]:
    """A Hypothesis strategy of schedules with up to ``max_faults`` faults.

    It draws a set of single faults (see :func:`enumerate_schedules`) and applies them; it
    shrinks towards fewer faults, earlier messages and earlier hits.
    """
    from hypothesis import strategies as st

    singles = list(_single_faults(space))
    if not singles:
        return st.just(Schedule(tuple(_base(space))))
    picked = st.lists(
        st.integers(min_value=0, max_value=len(singles) - 1),
        max_size=max_faults,
        unique=True,
    )
    return picked.map(lambda idx: _apply(space, [singles[i] for i in sorted(idx)])).filter(
        lambda s: s is not None
    )  # type: ignore[return-value]
