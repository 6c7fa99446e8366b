"""Crash schedules: what the harness does to one case, step by step.

A schedule is a tuple of steps, run in order, then the quiet phase (faults lifted, lookups
answered, recovery until nothing changes, the final checks). Every message of the case is
delivered once, in order, by a :class:`Deliver` step; faults ride on those steps or come
between them:

=====================  ====================================================================
step                   what the harness does
=====================  ====================================================================
``Deliver``            run the worker on message ``message`` in a fresh subprocess, with a
                       kill at ``kill`` (A, B, C or a named point, on its n-th hit) if given;
                       ``duplicate`` delivers it twice (D): ``"after"`` once more when the
                       first run ended, ``"concurrent"`` to a second worker while the first
                       is paused at ``pause_at``
``ChangeAuthority``    E: revoke, narrow the scope, bump the policy version or move the task
                       of message ``message`` to another tenant
``LookupTimeouts``     F: the provider's lookups time out for the next ``calls`` calls
                       (``None``: until the quiet phase lifts it)
``Recover``            run recovery in a fresh subprocess, killed at ``kill`` if given
``Advance``            move the harness clock
=====================  ====================================================================

Schedules are plain frozen data: they serialize to JSON (:meth:`Schedule.to_dict`) for the
replay token (``token``), and Hypothesis strategies (:func:`schedules`) generate and shrink
them.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from ..errors import CrashpointsError

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

__all__ = [
    "Advance",
    "ChangeAuthority",
    "Deliver",
    "KillAt",
    "LookupTimeouts",
    "Recover",
    "Schedule",
    "Step",
    "enumerate_schedules",
    "schedules",
]

AuthorityChangeKind: TypeAlias = Literal["revoke", "narrow", "bump_policy", "move_tenant"]
AUTHORITY_CHANGES: tuple[AuthorityChangeKind, ...] = (
    "revoke",
    "narrow",
    "bump_policy",
    "move_tenant",
)
RECOVERY_POINTS = ("recovery.claimed", "recovery.looked_up")
#: Harness seconds a schedule waits before a recovery run, so that a dead worker's lease
#: (60 s in the reference) and the intent grace period (30 s) have run out.
LEASE_WAIT = 120.0


@dataclasses.dataclass(frozen=True)
class KillAt:
    """SIGKILL at fail point ``point`` on its ``hit``-th call."""

    point: str
    hit: int = 1

    def __str__(self) -> str:
        return f"kill at {self.point} (hit {self.hit})"


@dataclasses.dataclass(frozen=True)
class Deliver:
    message: int
    kill: KillAt | None = None
    duplicate: Literal["after", "concurrent"] | None = None
    pause_at: str = "B"

    def __str__(self) -> str:
        text = f"deliver message {self.message}"
        if self.kill:
            text += f", {self.kill}"
        if self.duplicate == "after":
            text += ", then deliver it again (D)"
        elif self.duplicate == "concurrent":
            text += f", and to a second worker while the first waits at {self.pause_at} (D)"
        return text


@dataclasses.dataclass(frozen=True)
class ChangeAuthority:
    message: int
    change: AuthorityChangeKind

    def __str__(self) -> str:
        return f"E: {self.change.replace('_', ' ')} for the task of message {self.message}"


@dataclasses.dataclass(frozen=True)
class LookupTimeouts:
    provider: str
    calls: int | None = None

    def __str__(self) -> str:
        until = "until lifted" if self.calls is None else f"for {self.calls} call(s)"
        return f"F: {self.provider} lookups time out {until}"


@dataclasses.dataclass(frozen=True)
class Recover:
    kill: KillAt | None = None

    def __str__(self) -> str:
        return "run recovery" + (f", {self.kill}" if self.kill else "")


@dataclasses.dataclass(frozen=True)
class Advance:
    seconds: float

    def __str__(self) -> str:
        return f"advance the clock {self.seconds:g}s"


Step: TypeAlias = Deliver | ChangeAuthority | LookupTimeouts | Recover | Advance
_STEP_TYPES: dict[str, type[Any]] = {
    cls.__name__: cls for cls in (Deliver, ChangeAuthority, LookupTimeouts, Recover, Advance)
}


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The steps of one case, in order."""

    steps: tuple[Step, ...]

    def __str__(self) -> str:
        return "; ".join(str(step) for step in self.steps) or "no steps"

    @property
    def faults(self) -> int:
        """How many faults the schedule injects (kills, duplicates, E and F changes)."""
        count = 0
        for step in self.steps:  # Advance steps are not faults
            if isinstance(step, Deliver):
                count += (step.kill is not None) + (step.duplicate is not None)
            elif isinstance(step, Recover):
                count += step.kill is not None
            elif isinstance(step, ChangeAuthority | LookupTimeouts):
                count += 1
        return count

    def to_dict(self) -> dict[str, Any]:
        def encode(step: Step) -> dict[str, Any]:
            fields = dataclasses.asdict(step)
            return {"step": type(step).__name__, **fields}

        return {"version": 1, "steps": [encode(step) for step in self.steps]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Schedule:
        """Rebuild a schedule from :meth:`to_dict`; a malformed one raises CrashpointsError."""
        try:
            if data["version"] != 1:
                raise ValueError(f"schedule format version {data['version']!r}")
            steps: list[Step] = []
            for item in data["steps"]:
                fields = dict(item)
                kind = _STEP_TYPES[fields.pop("step")]
                if fields.get("kill") is not None:
                    fields["kill"] = KillAt(**fields["kill"])
                steps.append(kind(**fields))
        except (KeyError, TypeError, ValueError) as exc:
            raise CrashpointsError(
                f"not a crashpoints schedule ({type(exc).__name__}: {exc}); copy the replay "
                "token again from the failure report, whole."
            ) from exc
        return cls(tuple(steps))


# -- generation -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Space:
    """What a schedule may contain for one test.

    ``messages`` is how many messages the case delivers; ``reachable`` maps each worker fail
    point to how many times the fault-free run reached it per message (index = message);
    ``points`` the crash points the test declares; ``providers`` the providers whose lookups F
    may time out.
    """

    messages: int
    reachable: tuple[Mapping[str, int], ...]
    points: frozenset[str]
    providers: tuple[str, ...]

    def kill_sites(self, message: int) -> list[KillAt]:
        """Every (point, hit) a kill can target while message ``message`` is handled: the
        declared points other than D, E, F (which are not places in the worker)."""
        sites: list[KillAt] = []
        for point, hits in sorted(self.reachable[message].items()):
            if point in self.points and point not in ("D", "E", "F"):
                sites.extend(KillAt(point, hit) for hit in range(1, hits + 1))
        return sites


def _base(space: Space) -> list[Step]:
    return [Deliver(i) for i in range(space.messages)]


Part: TypeAlias = tuple[int, str, Any]


def _single_faults(space: Space) -> Iterator[tuple[Part, ...]]:
    """Every single fault, as the parts that make it: (message, kind, value).

    E, F and a kill of recovery only matter while an attempt is in flight, so each comes
    with the kill that leaves one there (at B, else C, else A: the first reachable) and the
    recovery run that must cope with it.
    """
    for i in range(space.messages):
        sites = space.kill_sites(i)
        for kill in sites:
            yield ((i, "kill", kill),)
        if "D" in space.points:
            yield ((i, "duplicate", ("after", "B")),)
            gate = next((p for p in ("B", "A", "D") if space.reachable[i].get(p)), None)
            if gate is not None:
                yield ((i, "duplicate", ("concurrent", gate)),)
        in_flight = next((KillAt(p, 1) for p in ("B", "C", "A") if space.reachable[i].get(p)), None)
        if in_flight is None:
            continue
        if "E" in space.points:
            # While the attempt may have taken effect (after B), and before it was sent.
            before_send = KillAt("A", 1) if space.reachable[i].get("A") else None
            for kill in dict.fromkeys(k for k in (in_flight, before_send) if k is not None):
                for change in AUTHORITY_CHANGES:
                    yield ((i, "kill", kill), (i, "after", ChangeAuthority(i, change)))
        if "F" in space.points:
            for provider in space.providers:
                yield ((i, "kill", in_flight), (i, "after", LookupTimeouts(provider, None)))
        if space.points & {"A", "B", "C"}:
            for point in RECOVERY_POINTS:
                yield ((i, "kill", in_flight), (i, "after", Recover(KillAt(point, 1))))


def _apply(space: Space, faults: Sequence[tuple[Part, ...]]) -> Schedule | None:
    delivers: list[Deliver] = [Deliver(i) for i in range(space.messages)]
    after: list[list[Step]] = [[] for _ in range(space.messages)]
    for position, kind, value in (part for fault in faults for part in fault):
        if kind == "kill":
            current = delivers[position].kill
            if current is not None and current != value:
                return None
            delivers[position] = dataclasses.replace(delivers[position], kill=value)
        elif kind == "duplicate":
            if delivers[position].duplicate is not None:
                return None
            duplicate, gate = value
            delivers[position] = dataclasses.replace(
                delivers[position], duplicate=duplicate, pause_at=gate
            )
        else:
            after[position].append(value)
    steps: list[Step] = []
    for deliver, extra in zip(delivers, after, strict=True):
        steps.append(deliver)
        # A fault that acts on what recovery will find (E, F) is followed by a recovery run
        # under it, so it acts while the attempt is still in flight.
        for step in extra:
            # Recovery only takes over work whose owner's lease ran out: let it run out first.
            if isinstance(step, Recover):
                steps.append(Advance(LEASE_WAIT))
            steps.append(step)
            if isinstance(step, ChangeAuthority | LookupTimeouts):
                steps += [Advance(LEASE_WAIT), Recover()]
    return Schedule(tuple(steps))


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


def covering_schedules(space: Space) -> list[tuple[str, Schedule]]:
    """One single-fault schedule for each kind of fault the space allows, with the point it
    exercises: a kill at each declared point that is reached (the point's name), a
    duplicate delivery ("D"), an authority change ("E"), a lookup timeout ("F"), a recovery
    killed ("recovery.claimed"). After a generated exploration, those whose point the draw
    never reached are run too: coverage must not depend on luck."""
    seen: set[str] = set()
    chosen: list[tuple[str, Schedule]] = []
    for fault in _single_faults(space):
        kinds = [kind for _, kind, _ in fault]
        last = fault[-1][2]
        if "duplicate" in kinds:
            what = "D"
        elif isinstance(last, ChangeAuthority):
            what = "E"
        elif isinstance(last, LookupTimeouts):
            what = "F"
        elif isinstance(last, Recover):
            what = last.kill.point if last.kill else "recovery"
        else:
            what = last.point
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
