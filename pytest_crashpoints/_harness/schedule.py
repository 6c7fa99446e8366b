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
                       waits at ``pause_at`` (its ``pause_hit``-th call); ``midway`` changes
                       the task's authority (E) while the worker waits at a fail point
``ChangeAuthority``    E: revoke, narrow the scope, bump the policy version or move the task
                       of message ``message`` to another tenant
``LookupTimeouts``     F: the provider's lookups time out (or answer 500) for the next
                       ``calls`` calls (``None``: until the quiet phase lifts it)
``LoseResponse``       the provider applies its ``nth`` write from now on, and its answer is
                       lost: the client sees a reset connection, a timeout or a 502 (the
                       worker lives on); a model makes its ``nth`` answer, which is lost
``Refuse``             the provider refuses its ``nth`` write from now on before applying
                       anything: a 500, a 429 with ``Retry-After``, or a timeout (a model:
                       its ``nth`` call, before answering)
``SearchLag``          the provider's searches lag ``seconds`` behind its writes from now on
``Recover``            run recovery in a fresh subprocess, killed at ``kill`` if given;
                       ``racing``: two recoveries at once, free or with the first waiting at
                       ``pause_at`` while the second runs to its end
``Advance``            move the harness clock
=====================  ====================================================================

Schedules are plain frozen data: they serialize to JSON (:meth:`Schedule.to_dict`) for the
replay token (``token``), and Hypothesis strategies (:func:`schedules`) generate and shrink
them.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

from .._inject.failpoints import WRITE_POINT
from ..errors import CrashpointsError

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

__all__ = [
    "Advance",
    "ChangeAuthority",
    "Deliver",
    "DuplicateRequest",
    "KillAt",
    "LookupTimeouts",
    "LoseResponse",
    "Midway",
    "Recover",
    "Refuse",
    "Schedule",
    "SearchLag",
    "Step",
    "FAULT_KINDS",
    "KIND_LABELS",
    "FailCommit",
    "between_calls",
    "enumerate_schedules",
    "fault_kind",
    "fault_kinds",
    "probe_kills",
    "races_placed",
    "recovery_point",
    "unplaced_faults",
    "schedules",
]

AuthorityChangeKind: TypeAlias = Literal["revoke", "narrow", "bump_policy", "move_tenant"]
AUTHORITY_CHANGES: tuple[AuthorityChangeKind, ...] = (
    "revoke",
    "narrow",
    "bump_policy",
    "move_tenant",
)
LostVariant: TypeAlias = Literal["reset", "timeout", "502"]
LOST_VARIANTS: tuple[LostVariant, ...] = ("reset", "timeout", "502")
RefusalVariant: TypeAlias = Literal["500", "429", "timeout", "session"]
#: The refusals every provider can make; an MCP server also forgets a session (``"session"``).
REFUSALS: tuple[RefusalVariant, ...] = ("500", "429", "timeout")
SESSION_REFUSAL: RefusalVariant = "session"
LookupFailure: TypeAlias = Literal["timeout", "500"]
RECOVERY_POINTS = ("recovery.claimed", "recovery.looked_up")
#: Where the first of two racing recoveries waits while the second runs: recovery's own
#: points, and the automatic ones any recovery passes (its first commit, an answer).
RACE_POINTS = ("recovery.claimed", "recovery.looked_up", "db.committed", "C")
#: Harness seconds a schedule waits before a recovery run, so that a dead worker's lease
#: (60 s in the reference) and the intent grace period (30 s) have run out.
LEASE_WAIT = 120.0
#: A search lag that still hides an effect when a recovery after ``LEASE_WAIT`` asks.
LAG_THAT_MATTERS = 2 * LEASE_WAIT + 1
#: The labels of the coverage table for the kinds of fault that are not a place in a worker.
COVERAGE_KINDS = (
    "D", "E", "F", "lost response", "refused", "session lost", "search lag", "racing recovery",
    "failed commit", "duplicated request", "power lost", "backup restored",
)

#: The kinds of fault a test may choose (the marker's ``faults=``), each with the crash points
#: that allow it and the coverage labels it reaches: ``kill`` (a kill at a point of the
#: worker), ``lose_response`` (applied, the answer lost), ``refuse`` (refused before applying),
#: ``forget_session`` (an MCP server forgets the session of a call), ``duplicate_request`` (an
#: MCP server gets a request twice: comes with D), ``lookup_failure`` (lookups
#: fail or time out), ``search_lag`` (a search that lags),
#: ``duplicate_delivery`` (the message again, after the first), ``concurrent_delivery`` (two
#: workers at once), ``authority_change`` (E), ``recovery_kill`` (recovery killed midway),
#: ``racing_recovery`` (two recoveries at once), ``failed_commit`` (a SQLite commit of the
#: worker fails: comes with ``db.commit``), ``power_loss`` (a kill at a point of the worker
#: that is a power loss: its SQLite databases in WAL with ``synchronous=NORMAL`` lose their
#: unsynced commits; generated where the fault-free run committed so), ``backup_restore``
#: (a kill, then the agent's files restored from a backup taken before the delivery: only
#: when chosen).
FAULT_KINDS: dict[str, frozenset[str]] = {
    "kill": frozenset({"A", "B", "C"}),
    "lose_response": frozenset({"B"}),
    "refuse": frozenset({"F"}),
    "forget_session": frozenset({"F"}),
    "duplicate_request": frozenset({"D"}),
    "lookup_failure": frozenset({"F"}),
    "search_lag": frozenset({"F"}),
    "duplicate_delivery": frozenset({"D"}),
    "concurrent_delivery": frozenset({"D"}),
    "authority_change": frozenset({"E"}),
    "recovery_kill": frozenset({"A", "B", "C"}),
    "racing_recovery": frozenset({"D"}),
    "failed_commit": frozenset({"db.commit"}),
    "power_loss": frozenset({"A", "B", "C", "db.commit", "db.committed"}),
    "backup_restore": frozenset({"A", "B", "C", "db.commit", "db.committed"}),
}
#: The coverage label of each kind of fault that is not a kill at a point (a kill is labelled
#: by its point).
KIND_LABELS: dict[str, str] = {
    "lose_response": "lost response",
    "refuse": "refused",
    "forget_session": "session lost",
    "lookup_failure": "F",
    "search_lag": "search lag",
    "duplicate_delivery": "D",
    "concurrent_delivery": "D",
    "duplicate_request": "duplicated request",
    "authority_change": "E",
    "racing_recovery": "racing recovery",
    "failed_commit": "failed commit",
    "power_loss": "power lost",
    "backup_restore": "backup restored",
}


def _is_model(provider: str) -> bool:
    """Whether ``provider`` is a model (its faults act on its answers, not on writes)."""
    from fake_providers import PROVIDERS

    found = PROVIDERS.get(provider)
    return found is not None and found.is_model


def _check_nth(nth: object) -> None:
    if isinstance(nth, bool) or not isinstance(nth, int) or nth < 1:
        raise ValueError(f"nth must be 1 or more, not {nth!r}")


def _check_variant(variant: str, variants: Sequence[str]) -> None:
    if variant not in variants:
        raise ValueError(f"variant must be one of {', '.join(variants)}")


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclasses.dataclass(frozen=True)
class KillAt:
    """SIGKILL at fail point ``point`` on its ``hit``-th call."""

    point: str
    hit: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.point, str) or not self.point:
            raise ValueError(f"a kill needs a fail point name, not {self.point!r}")
        if isinstance(self.hit, bool) or not isinstance(self.hit, int) or self.hit < 1:
            raise ValueError(f"kill at {self.point!r}: hit must be 1 or more, not {self.hit!r}")

    def __str__(self) -> str:
        return f"kill at {self.point} (hit {self.hit})"


@dataclasses.dataclass(frozen=True)
class Midway:
    """E while a delivery's worker waits at fail point ``point`` (its ``hit``-th call):
    ``change`` the task's authority, then let the worker go on."""

    point: str
    hit: int
    change: AuthorityChangeKind

    def __post_init__(self) -> None:
        KillAt(self.point, self.hit)  # the same checks
        if self.change not in AUTHORITY_CHANGES:
            raise ValueError(f"{self.change!r} is not one of {', '.join(AUTHORITY_CHANGES)}")

    def __str__(self) -> str:
        return (
            f"E: {self.change.replace('_', ' ')} for its task while it waits at {self.point} "
            f"(hit {self.hit})"
        )


CommitFailure: TypeAlias = Literal["ioerr", "full"]
COMMIT_FAILURES: tuple[CommitFailure, ...] = ("ioerr", "full")
#: What SQLite says of each commit failure (``sqlite3.OperationalError``'s message).
COMMIT_ERRORS: dict[str, str] = {"ioerr": "disk I/O error", "full": "database or disk is full"}


@dataclasses.dataclass(frozen=True)
class FailCommit:
    """The worker's ``hit``-th SQLite commit fails (point ``db.commit``): ``sqlite3.Operational
    Error`` with SQLite's own message, ``"ioerr"`` a disk I/O error (``SQLITE_IOERR``),
    ``"full"`` a full disk (``SQLITE_FULL``); the transaction is rolled back, as SQLite does,
    and the worker's own error handling runs."""

    hit: int = 1
    variant: CommitFailure = "ioerr"

    def __post_init__(self) -> None:
        KillAt("db.commit", self.hit)  # the same checks
        _check_variant(self.variant, COMMIT_FAILURES)

    def __str__(self) -> str:
        return f"its {_ordinal(self.hit)} commit fails ({COMMIT_ERRORS[self.variant]})"


@dataclasses.dataclass(frozen=True)
class Deliver:
    message: int
    kill: KillAt | None = None
    duplicate: Literal["after", "concurrent"] | None = None
    pause_at: str = "B"
    pause_hit: int = 1
    midway: Midway | None = None
    fail_commit: FailCommit | None = None
    #: The kill is a power loss: the worker's databases lose what they did not sync.
    power_loss: bool = False
    #: After the kill, the agent's files are restored from a backup taken just before this
    #: delivery; the providers keep what was done since.
    backup_restore: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.message, bool) or not isinstance(self.message, int) or self.message < 0:
            raise ValueError(f"message must be a message index (0 or more), not {self.message!r}")
        if self.duplicate not in (None, "after", "concurrent"):
            raise ValueError(f"duplicate must be 'after' or 'concurrent', not {self.duplicate!r}")
        if self.power_loss not in (False, True) or (self.power_loss and self.kill is None):
            raise ValueError("power_loss needs a kill: the point where the power goes")
        if self.backup_restore not in (False, True) or (
            self.backup_restore and (self.kill is None or self.power_loss)
        ):
            raise ValueError(
                "backup_restore needs a kill (the point where the machine is lost) and no "
                "power_loss"
            )
        KillAt(self.pause_at, self.pause_hit)

    def __str__(self) -> str:
        text = f"deliver message {self.message}"
        if self.kill and self.power_loss:
            text += (
                f", power lost at {self.kill.point} (hit {self.kill.hit}): its files keep "
                "only what they synced"
            )
        elif self.kill:
            text += f", {self.kill}"
        if self.backup_restore:
            text += ", then the agent's files restored from a backup taken before this delivery"
        if self.midway:
            text += f", {self.midway}"
        if self.fail_commit:
            text += f", {self.fail_commit}"
        if self.duplicate == "after":
            text += ", then deliver it again (D)"
        elif self.duplicate == "concurrent":
            where = self.pause_at + (f" (hit {self.pause_hit})" if self.pause_hit > 1 else "")
            text += f", and to a second worker while the first waits at {where} (D)"
        return text


@dataclasses.dataclass(frozen=True)
class ChangeAuthority:
    message: int
    change: AuthorityChangeKind

    def __post_init__(self) -> None:
        if self.change not in AUTHORITY_CHANGES:
            raise ValueError(f"{self.change!r} is not one of {', '.join(AUTHORITY_CHANGES)}")

    def __str__(self) -> str:
        return f"E: {self.change.replace('_', ' ')} for the task of message {self.message}"


@dataclasses.dataclass(frozen=True)
class LookupTimeouts:
    provider: str
    calls: int | None = None
    variant: LookupFailure = "timeout"

    def __post_init__(self) -> None:
        if self.calls is not None and (isinstance(self.calls, bool) or self.calls < 1):
            raise ValueError(f"calls must be 1 or more, or None, not {self.calls!r}")
        if self.variant not in ("timeout", "500"):
            raise ValueError(f"variant must be 'timeout' or '500', not {self.variant!r}")

    def __str__(self) -> str:
        until = "until lifted" if self.calls is None else f"for {self.calls} call(s)"
        how = "time out" if self.variant == "timeout" else "answer 500"
        return f"F: {self.provider} lookups {how} {until}"


@dataclasses.dataclass(frozen=True)
class LoseResponse:
    provider: str
    nth: int = 1
    variant: LostVariant = "reset"

    def __post_init__(self) -> None:
        _check_nth(self.nth)
        _check_variant(self.variant, LOST_VARIANTS)

    def __str__(self) -> str:
        seen = {"reset": "a reset connection", "timeout": "a timeout", "502": "a 502"}
        if _is_model(self.provider):
            return (
                f"{self.provider} makes its {_ordinal(self.nth)} answer from now on and the "
                f"answer is lost ({seen[self.variant]})"
            )
        return (
            f"{self.provider} applies its {_ordinal(self.nth)} write from now on and the "
            f"answer is lost ({seen[self.variant]})"
        )


@dataclasses.dataclass(frozen=True)
class Refuse:
    provider: str
    nth: int = 1
    variant: RefusalVariant = "500"

    def __post_init__(self) -> None:
        _check_nth(self.nth)
        _check_variant(self.variant, (*REFUSALS, SESSION_REFUSAL))

    def __str__(self) -> str:
        how = {"500": "a 500", "429": "a 429 with Retry-After", "timeout": "a timeout",
               "session": "its session forgotten: 404, the client must initialize again"}
        if _is_model(self.provider):
            return (
                f"{self.provider} refuses its {_ordinal(self.nth)} call from now on before "
                f"answering ({how[self.variant]})"
            )
        return (
            f"{self.provider} refuses its {_ordinal(self.nth)} write from now on before "
            f"applying anything ({how[self.variant]})"
        )


@dataclasses.dataclass(frozen=True)
class DuplicateRequest:
    """An MCP server gets its ``nth`` write from now on twice (a proxy or a transport that
    sends the same JSON-RPC request again): it handles both, and the client gets the second
    answer. A tool that dedupes answers the first result again; one that does not acts twice."""

    provider: str
    nth: int = 1

    def __post_init__(self) -> None:
        _check_nth(self.nth)

    def __str__(self) -> str:
        return (
            f"{self.provider} gets its {_ordinal(self.nth)} write from now on twice (the same "
            "request sent again)"
        )


@dataclasses.dataclass(frozen=True)
class SearchLag:
    provider: str
    seconds: float = LAG_THAT_MATTERS

    def __post_init__(self) -> None:
        if (
            isinstance(self.seconds, bool)
            or not isinstance(self.seconds, int | float)
            or not math.isfinite(self.seconds)
            or self.seconds < 0
        ):
            raise ValueError(f"seconds must be finite and 0 or more, not {self.seconds!r}")

    def __str__(self) -> str:
        return f"{self.provider}'s search lags {self.seconds:g}s behind its writes"


@dataclasses.dataclass(frozen=True)
class Recover:
    """Run recovery in a fresh subprocess, killed at ``kill`` if given.

    ``racing=True`` runs two recoveries at once. With ``pause_at`` (a fail point) the race is
    forced and reproducible: the first waits there while the second runs to its end. Without
    it they race freely and the operating system picks the interleaving, so the same
    schedule may end differently: generated schedules only use forced races; a free race is
    for a hand-written soak test.
    """

    kill: KillAt | None = None
    racing: bool = False
    pause_at: str | None = None

    def __post_init__(self) -> None:
        if self.pause_at is not None and not self.racing:
            raise ValueError("pause_at is for racing recoveries: set racing=True")

    def __str__(self) -> str:
        if self.racing:
            text = "run two recoveries at once"
            if self.pause_at:
                text += f", the first waiting at {self.pause_at} while the second runs"
            return text + (f", {self.kill}" if self.kill else "")
        return "run recovery" + (f", {self.kill}" if self.kill else "")


@dataclasses.dataclass(frozen=True)
class Advance:
    seconds: float

    def __post_init__(self) -> None:
        if (
            isinstance(self.seconds, bool)
            or not isinstance(self.seconds, int | float)
            or not math.isfinite(self.seconds)
            or self.seconds < 0
        ):
            raise ValueError(
                f"the clock only moves forward by a finite number of seconds, not "
                f"{self.seconds!r}"
            )

    def __str__(self) -> str:
        return f"advance the clock {self.seconds:g}s"


Step: TypeAlias = (
    Deliver
    | ChangeAuthority
    | LookupTimeouts
    | LoseResponse
    | Refuse
    | DuplicateRequest
    | SearchLag
    | Recover
    | Advance
)
_STEP_TYPES: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        Deliver,
        ChangeAuthority,
        LookupTimeouts,
        LoseResponse,
        Refuse,
        DuplicateRequest,
        SearchLag,
        Recover,
        Advance,
    )
}


def fault_kinds(steps: Sequence[Step]) -> set[str]:
    """The coverage labels of the faults in ``steps`` that are not a place in a worker."""
    kinds: set[str] = set()
    for step in steps:
        if isinstance(step, Deliver):
            if step.duplicate:
                kinds.add("D")
            if step.midway:
                kinds.add("E")
            if step.fail_commit:
                kinds.add("failed commit")
            if step.power_loss:
                kinds.add("power lost")
            if step.backup_restore:
                kinds.add("backup restored")
        elif isinstance(step, ChangeAuthority):
            kinds.add("E")
        elif isinstance(step, LookupTimeouts):
            kinds.add("F")
        elif isinstance(step, LoseResponse):
            kinds.add("lost response")
        elif isinstance(step, Refuse):
            kinds.add("session lost" if step.variant == SESSION_REFUSAL else "refused")
        elif isinstance(step, SearchLag):
            kinds.add("search lag")
        elif isinstance(step, DuplicateRequest):
            kinds.add("duplicated request")
        elif isinstance(step, Recover) and step.racing:
            kinds.add("racing recovery")
    return kinds


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The steps of one case, in order."""

    steps: tuple[Step, ...]

    def __str__(self) -> str:
        return "; ".join(str(step) for step in self.steps) or "no steps"

    @property
    def faults(self) -> int:
        """How many faults the schedule injects (kills, duplicates, E and F changes, lost
        answers, refusals, lags, racing recoveries)."""
        count = 0
        for step in self.steps:  # Advance steps are not faults
            if isinstance(step, Deliver):
                count += (step.kill is not None) + (step.duplicate is not None)
                count += (step.midway is not None) + (step.fail_commit is not None)
            elif isinstance(step, Recover):
                count += (step.kill is not None) + step.racing
            elif not isinstance(step, Advance):
                count += 1
        return count

    def to_dict(self) -> dict[str, Any]:
        def encode(step: Step) -> dict[str, Any]:
            fields = dataclasses.asdict(step)
            return {"step": type(step).__name__, **fields}

        return {"version": 1, "steps": [encode(step) for step in self.steps]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Schedule:
        """Rebuild a schedule from :meth:`to_dict`; a malformed one raises CrashpointsError
        naming the step and what is wrong."""
        if not isinstance(data, Mapping) or data.get("version") != 1:
            raise CrashpointsError(
                "not a crashpoints schedule (no format version 1); copy the replay token again "
                "from the failure report, whole."
            )
        raw = data.get("steps")
        if not isinstance(raw, list):
            raise CrashpointsError("not a crashpoints schedule (its steps are not a list).")
        steps: list[Step] = []
        for index, item in enumerate(raw):
            try:
                fields = dict(item)
                kind = _STEP_TYPES[fields.pop("step")]
                for name, nested in (
                    ("kill", KillAt), ("midway", Midway), ("fail_commit", FailCommit)
                ):
                    if fields.get(name) is not None:
                        fields[name] = nested(**fields[name])
                steps.append(kind(**fields))
            except (KeyError, TypeError, ValueError) as exc:
                raise CrashpointsError(
                    f"step {index} of the schedule ({item!r}) is not a schedule step "
                    f"({type(exc).__name__}: {exc}); copy the replay token again from the "
                    "failure report, whole."
                ) from None
        return cls(tuple(steps))


# -- generation -------------------------------------------------------------------------------


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
    #: The providers with sessions a fault can make them forget (MCP servers).
    sessions: tuple[str, ...] = ()
    #: The fail points the test's recovery reaches when work is left in flight (found by
    #: running it); ``None``: not known, every point is tried. A recovery killed, or one of
    #: two racing recoveries waiting, at a point outside it would test nothing.
    recovery_reach: frozenset[str] | None = None
    #: Per message, the databases its worker committed to where a power loss is not a kill,
    #: with their settings (``("jobs.db", "wal/1")``, ``powerloss.lossy_databases``).
    lossy: tuple[tuple[tuple[str, str], ...], ...] = ()

    def lossy_of(self, message: int) -> tuple[str, ...]:
        """The databases of message ``message`` that a power loss takes commits from (not
        those whose settings could corrupt them: ``powerloss.refusal``)."""
        from .powerloss import refusal

        found = self.lossy[message] if message < len(self.lossy) else ()
        return tuple(name for name, sync in found if refusal(sync) is None)

    def kill_sites(self, message: int) -> list[KillAt]:
        """Every (point, hit) a kill can target while message ``message`` is handled: the
        declared points other than D, E, F (which are not places in the worker)."""
        sites: list[KillAt] = []
        for point, hits in sorted(self.reachable[message].items()):
            if point in self.points and point not in ("D", "E", "F"):
                sites.extend(KillAt(point, hit) for hit in range(1, hits + 1))
        return sites

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


class _Reached(Protocol):
    point: str
    n: int


def between_calls(hits: Sequence[_Reached]) -> tuple[KillAt, ...]:
    """Where a worker waits between two of its tool calls, from the fail points one delivery
    reached, in order: after each write request but the last (``http.write``), at the first
    answer that comes back (``B``: the provider has applied it, the worker has not seen it),
    or, with no answer seen, at the first commit after it (``db.committed``). Whatever the
    worker asks before its next call (its credentials, its authority) it asks after that."""
    writes = [i for i, hit in enumerate(hits) if hit.point == WRITE_POINT]
    sites: list[KillAt] = []
    for here, there in itertools.pairwise(writes):
        window = hits[here + 1 : there]
        site = next((hit for hit in window if hit.point == "B"), None) or next(
            (hit for hit in window if hit.point == "db.committed"), None
        )
        if site is not None:
            sites.append(KillAt(site.point, site.n))
    return tuple(dict.fromkeys(sites))


def _base(space: Space) -> list[Step]:
    return [Deliver(i) for i in range(space.messages)]


Part: TypeAlias = tuple[int, str, Any]


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
        return "failed_commit"
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
        if (space.kinds is None or fault_kind(fault) in space.kinds) and _placed(space, fault):
            yield fault


def unplaced_faults(space: Space) -> list[str]:
    """The faults of a recovery that :attr:`Space.recovery_reach` leaves out, in words
    (each once): what the summary lists as not applicable."""
    out: dict[str, None] = {}
    for fault in _every_single_fault(space):
        if space.kinds is not None and fault_kind(fault) not in space.kinds:
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
        if space.kinds is not None and fault_kind(fault) not in space.kinds:
            continue  # a kind the test did not choose: nothing to learn for it
        if recovery_point(fault) is not None:
            kills[tuple(part for part in fault if part[1] == "kill")] = None
    found = (_apply(space, [kill]) for kill in kills if kill)
    return [schedule for schedule in found if schedule is not None]


def races_placed(space: Space) -> bool:
    """Whether any schedule of ``space`` races two recoveries."""
    return any(
        isinstance(fault[-1][2], Recover) and fault[-1][2].racing
        for fault in _single_faults(space)
    )


def _every_single_fault(space: Space) -> Iterator[tuple[Part, ...]]:
    """Every single fault, as the parts that make it: (message, kind, value).

    E, F and a kill of recovery only matter while an attempt is in flight, so each comes
    with the kill that leaves one there (at B, else C, else A: the first reachable) and the
    recovery run that must cope with it. Faults at a provider (a lost answer, a refusal, a
    lookup that fails during the worker's own confirmation) come before the delivery whose
    requests they hit.
    """
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
    the power lost instead (when a database of its would lose commits to it) and a backup
    restored (only when that kind is chosen)."""
    for kill in space.kill_sites(i):
        yield ((i, "kill", kill),)
    if space.lossy_of(i):
        for kill in space.kill_sites(i):
            yield ((i, "power_loss", kill),)
    if space.kinds is not None and "backup_restore" in space.kinds:
        for kill in space.kill_sites(i):
            yield ((i, "backup_restore", kill),)


def _duplicates(space: Space, i: int) -> Iterator[tuple[Part, ...]]:
    """D: message ``i`` delivered again after it was handled, a request sent twice to an MCP
    server, and a second delivery while the first waits at each of its pause sites."""
    yield ((i, "duplicate", ("after", "B", 1)),)
    for provider, count in sorted(space.effects_of(i).items()):
        if provider in space.sessions:  # an MCP server: a request sent twice
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
    """A commit of message ``i``'s worker fails, each commit in each way."""
    for hit in range(1, space.reachable[i].get("db.commit", 0) + 1):
        for failure in COMMIT_FAILURES:
            yield ((i, "fail_commit", FailCommit(hit, failure)),)


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
    for position, kind, value in (part for fault in faults for part in fault):
        if kind in _OF_A_DELIVERY:
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
    return Schedule(tuple(_steps(space, delivers, before, after)))


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
    if deliver.fail_commit is not None and (deliver.kill or deliver.duplicate or deliver.midway):
        return False  # a failed commit is a delivery's one fault
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
        # A fault that acts on what recovery will find (E, F) is followed by a recovery run
        # under it, so it acts while the attempt is still in flight (when there is a recovery:
        # without one, the redelivery of the quiet phase meets it).
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
    """What a single fault exercises, as the coverage table names it: its kind's label, or
    the point a kill (of the worker or of recovery) lands at."""
    kind = fault_kind(fault)
    if kind in KIND_LABELS:
        return KIND_LABELS[kind]
    last = fault[-1][2]
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
