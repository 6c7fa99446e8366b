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
replay token (``search/token.py``); the space of one test's schedules, their enumeration and
the Hypothesis strategy that generates and shrinks them are ``search/space.py``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal, Protocol, TypeAlias

from ..._inject.failpoints import SYNC_POINT, WRITE_POINT
from ...errors import CrashpointsError

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
    "TORN_WRITE",
    "FailCommit",
    "between_calls",
    "fault_kinds",
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
#: The coverage label of a power loss between a write to a file of the agent's and its sync
#: (at ``file.sync``): the file keeps what it synced and a torn part of what was written since.
TORN_WRITE = "torn write"
#: The labels of the coverage table for the kinds of fault that are not a place in a worker.
COVERAGE_KINDS = (
    "D",
    "E",
    "F",
    "lost response",
    "refused",
    "session lost",
    "search lag",
    "racing recovery",
    "failed commit",
    "disk full",
    "duplicated request",
    "power lost",
    TORN_WRITE,
    "backup restored",
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
#: worker fails: comes with ``db.commit``), ``disk_full`` (a commit and every later one of the
#: delivery fail: the disk stays full), ``power_loss`` (a kill at a point of the worker
#: that is a power loss: its SQLite databases in WAL with ``synchronous=NORMAL`` lose their
#: unsynced commits, its other files what they did not sync; generated where the fault-free
#: run committed or wrote so, and between each write to a file of its own and that write's
#: sync, at ``file.sync``: a torn write), ``backup_restore``
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
    "disk_full": frozenset({"db.commit"}),
    "power_loss": frozenset({"A", "B", "C", "db.commit", "db.committed", SYNC_POINT}),
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
    "disk_full": "disk full",
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
    and the worker's own error handling runs. ``lasting``: the disk stays full, every later
    commit of the delivery fails too."""

    hit: int = 1
    variant: CommitFailure = "ioerr"
    lasting: bool = False

    def __post_init__(self) -> None:
        KillAt("db.commit", self.hit)  # the same checks
        _check_variant(self.variant, COMMIT_FAILURES)
        if self.lasting not in (False, True) or (self.lasting and self.variant != "full"):
            raise ValueError("lasting is for a full disk (variant 'full'): True or False")

    def __str__(self) -> str:
        if self.lasting:
            return (
                f"its {_ordinal(self.hit)} commit and every later one fail "
                f"({COMMIT_ERRORS[self.variant]}: the disk stays full)"
            )
        return f"its {_ordinal(self.hit)} commit fails ({COMMIT_ERRORS[self.variant]})"

    @property
    def hits(self) -> range:
        """The commits of the delivery that fail (a lasting one: this and, in practice,
        every later one)."""
        return range(self.hit, self.hit + (LASTING_COMMITS if self.lasting else 1))


#: How many commits a full disk that stays full fails in one delivery (more than any worker
#: makes in one).
LASTING_COMMITS = 1000


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
        if self.kill and self.power_loss and self.kill.point == SYNC_POINT:
            text += (
                f", power lost between a write and its sync ({SYNC_POINT}, hit "
                f"{self.kill.hit}): its files keep what they synced, the next record torn"
            )
        elif self.kill and self.power_loss:
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
class _NthRequest:
    """A fault on a provider's ``nth`` write (a model's ``nth`` call) from now on, in one of
    the ``VARIANTS`` ways."""

    provider: str
    nth: int = 1
    VARIANTS: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        _check_nth(self.nth)
        variant = getattr(self, "variant", None)
        if variant is not None:
            _check_variant(variant, self.VARIANTS)


@dataclasses.dataclass(frozen=True)
class LoseResponse(_NthRequest):
    variant: LostVariant = "reset"
    VARIANTS: ClassVar[tuple[str, ...]] = LOST_VARIANTS

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
class Refuse(_NthRequest):
    variant: RefusalVariant = "500"
    VARIANTS: ClassVar[tuple[str, ...]] = (*REFUSALS, SESSION_REFUSAL)

    def __str__(self) -> str:
        how = {
            "500": "a 500",
            "429": "a 429 with Retry-After",
            "timeout": "a timeout",
            "session": "its session forgotten: 404, the client must initialize again",
        }
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
class DuplicateRequest(_NthRequest):
    """An MCP server gets its ``nth`` write from now on twice (a proxy or a transport that
    sends the same JSON-RPC request again): it handles both, and the client gets the second
    answer. A tool that dedupes answers the first result again; one that does not acts twice."""

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
                f"the clock only moves forward by a finite number of seconds, not {self.seconds!r}"
            )

    def __str__(self) -> str:
        return f"advance the clock {self.seconds:g}s"


#: The steps that switch a fault on in a provider (F and its kin).
ProviderFault: TypeAlias = LookupTimeouts | LoseResponse | Refuse | DuplicateRequest | SearchLag
Step: TypeAlias = Deliver | ChangeAuthority | ProviderFault | Recover | Advance
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
                if step.kill is not None and step.kill.point == SYNC_POINT:
                    kinds.add(TORN_WRITE)
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
                    ("kill", KillAt),
                    ("midway", Midway),
                    ("fail_commit", FailCommit),
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
