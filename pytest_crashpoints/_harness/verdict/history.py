"""The run history of one case: every step and observation, in order.

The harness records what it did (deliveries, worker starts and ends, kills, authority changes,
fault switches, clock moves, recovery runs); the ledger's event log and the providers'
journals add what the code under test did. :meth:`History.merge` puts the three in one order
(:class:`TimelineRow`, what the HTML report draws); :meth:`History.timeline` is the same order
as readable text; :meth:`History.to_json` serializes the harness's part (versioned).

An entry's ``data`` says what its text says, for readers that draw it: ``process`` (the
process it is about), ``processes`` (both processes of a double delivery or a recovery race),
``paused`` and ``pause_at`` (the process that waits at a gate, and where), ``point`` and
``hit`` (where a kill took effect), ``message`` (the message delivered).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..._ledger.records import Event
from .evidence import ProviderRequest

__all__ = ["HISTORY_VERSION", "Entry", "History", "TimelineRow", "render_timeline"]

HISTORY_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Entry:
    """One thing the harness did or saw. ``step`` is the schedule step (0: set-up; the quiet
    phase continues the numbering)."""

    step: int
    at: float
    kind: str
    text: str
    data: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class History:
    """An append-only list of :class:`Entry`, in the order things happened."""

    entries: list[Entry] = dataclasses.field(default_factory=list)

    def add(self, step: int, at: float, kind: str, text: str, **data: Any) -> Entry:
        entry = Entry(step, at, kind, text, data)
        self.entries.append(entry)
        return entry

    def to_json(self) -> dict[str, Any]:
        return {
            "version": HISTORY_VERSION,
            "entries": [dataclasses.asdict(entry) for entry in self.entries],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> History:
        if data.get("version") != HISTORY_VERSION:
            raise ValueError(
                f"history format version {data.get('version')!r}, expected {HISTORY_VERSION}"
            )
        return cls([Entry(**entry) for entry in data["entries"]])

    def merge(
        self,
        *,
        events: Sequence[Event] = (),
        requests: Iterable[ProviderRequest] = (),
        keys: Mapping[str, str] | None = None,
    ) -> list[TimelineRow]:
        """The harness entries, ledger transitions and provider requests, in one order.

        Within one harness second the three sources have no common clock, so the order is
        reconstructed: what the harness did before a process (a delivery, a recovery start)
        comes first; then the ledger's transitions, each provider request placed after the
        latest DISPATCHED or UNKNOWN transition of its attempt (``keys`` maps what a row
        stored, its idempotency key, request id or result, to its attempt id), and a request
        of no attempt (a model's turn) before the next request of its second that has one;
        then how the process ended. ``requests`` come in the order they happened.
        """
        rows: list[tuple[float, int, float, TimelineRow]] = []
        for seq, entry in enumerate(self.entries):
            rank = 2 if entry.kind in _ENDINGS else 0
            rows.append((entry.at, rank, seq, TimelineRow(entry.at, entry=entry)))
        anchors: dict[str, list[tuple[float, int]]] = {}
        for index, event in enumerate(events):
            rows.append((event.at, 1, index, TimelineRow(event.at, event=event)))
            if event.to_state.value in ("DISPATCHED", "UNKNOWN"):
                anchors.setdefault(event.attempt_id, []).append((event.at, index))
        keys = keys or {}
        requests = list(requests)
        orders, attempts = _anchored_orders(requests, anchors, keys)
        # The first transition of each attempt in each second.
        firsts: dict[tuple[float, str], int] = {}
        for index, event in enumerate(events):
            firsts.setdefault((event.at, event.attempt_id), index)
        for seq, request in enumerate(requests):
            order = orders[seq]
            if order is None:
                order = _unanchored_order(seq, requests, orders, attempts, events, firsts)
                orders[seq] = order
            row = TimelineRow(request.at, request=request, attempt_id=attempts[seq])
            rows.append((request.at, 1, order, row))
        rows.sort(key=lambda row: (row[0], row[1], row[2]))
        return [row for *_, row in rows]

    def timeline(
        self,
        *,
        events: Sequence[Event] = (),
        requests: Iterable[ProviderRequest] = (),
        keys: Mapping[str, str] | None = None,
        epoch: float | None = None,
    ) -> str:
        """The merged order (:meth:`merge`) as readable text, one line per row (times as
        :func:`shown_time` shows them)."""
        rows = self.merge(events=events, requests=requests, keys=keys)
        return render_timeline(rows, epoch=epoch)


def _anchored_orders(
    requests: Sequence[ProviderRequest],
    anchors: Mapping[str, Sequence[tuple[float, int]]],
    keys: Mapping[str, str],
) -> tuple[list[float | None], list[str | None]]:
    """Each request's attempt (its own, else the first of its identifiers ``keys`` names),
    and its place in the ledger's order: just after the latest of the attempt's ``anchors``
    (its DISPATCHED or UNKNOWN transitions, by time and index) not later than the request;
    ``None`` when nothing anchors it."""
    orders: list[float | None] = []
    attempts: list[str | None] = []
    for seq, request in enumerate(requests):
        attempt = request.attempt_id or next(
            (keys[name] for name in sorted(request.identifiers) if name in keys), None
        )
        placed = [i for at, i in anchors.get(attempt or "", []) if at <= request.at]
        orders.append(placed[-1] + 0.5 + seq * 1e-6 if placed else None)
        attempts.append(attempt)
    return orders, attempts


def _unanchored_order(
    seq: int,
    requests: Sequence[ProviderRequest],
    orders: Sequence[float | None],
    attempts: Sequence[str | None],
    events: Sequence[Event],
    firsts: Mapping[tuple[float, str], int],
) -> float:
    """The place of request ``seq``, which no attempt anchors (a model's turn, a request no
    row names), given the places of the requests before it (``orders``) and of the anchored
    ones after it; ``firsts``: the index of each attempt's first transition in each second."""
    request = requests[seq]
    # It comes before the next anchored request of its second (before that attempt's
    # first transition of the second); else before the next new attempt its process
    # records in that second (a model's tool call becomes an intent, even when the
    # process dies before it sends anything); else after everything of its second.
    for later in range(seq + 1, len(requests)):
        anchored = orders[later]
        if anchored is None or requests[later].at != request.at:
            continue
        start = firsts.get((request.at, attempts[later] or ""), anchored)
        return min(start, anchored) - 0.5 + seq * 1e-6
    floor = max(
        (
            placed_at
            for earlier, placed_at in enumerate(orders[:seq])
            if placed_at is not None
            and requests[earlier].at == request.at
            and requests[earlier].process == request.process
        ),
        default=-1.0,
    )
    intent = next(
        (
            index
            for index, event in enumerate(events)
            if index > floor
            and event.at == request.at
            and event.from_state is None
            and event.actor == request.process
        ),
        None,
    )
    if intent is not None:
        return intent - 0.5 + seq * 1e-6
    return len(events) + seq


@dataclasses.dataclass(frozen=True)
class TimelineRow:
    """One row of the merged timeline: exactly one of a harness ``entry``, a ledger ``event``
    or a provider ``request`` (with ``attempt_id``, the ledger attempt it is tied to, if
    any)."""

    at: float
    entry: Entry | None = None
    event: Event | None = None
    request: ProviderRequest | None = None
    attempt_id: str | None = None

    @property
    def source(self) -> str:
        """``harness``, ``ledger`` or ``journal``."""
        if self.entry is not None:
            return "harness"
        return "ledger" if self.event is not None else "journal"

    @property
    def text(self) -> str:
        """The row as the text timeline shows it, without its time."""
        if self.entry is not None:
            return f"[{self.entry.step:>2}] {self.entry.kind:<10} {self.entry.text}"
        if self.event is not None:
            event = self.event
            before = event.from_state.value if event.from_state else "(new)"
            return (
                f"     ledger     {event.attempt_id}: {before} -> {event.to_state.value} "
                f"by {event.actor} ({event.reason})"
            )
        request = self.request
        assert request is not None
        if request.note is not None:
            # A model's turn: what it answered is the story, not a key or an effect.
            text = f"{request.kind} {request.note} status={request.status}"
        else:
            effect = "EFFECT" if request.effect_applied else "no effect"
            text = f"{request.kind} key={request.operation_key} status={request.status} {effect}"
            shown = _fault_shown(request.fault)
            if shown:
                text += f" [{shown}]"
        if request.world_limit is not None:
            text += f" [the world's limit: not served: {request.world_limit}]"
        if request.reading is not None:
            text += f" [from the incident: {request.reading}]"
        return f"     {request.provider:<10} {request.request_id} {text}"


def _fault_shown(fault: str | None) -> str | None:
    """How the timeline marks a request a fault shaped (the journal's ``fault``)."""
    if not fault:
        return None
    kind, _, variant = fault.partition(":")
    if kind == "response_lost":
        seen = {"": "a reset connection", "timeout": "a timeout", "502": "a 502"}
        return f"answer lost: the client saw {seen.get(variant, variant)}"
    return {
        "server_error": "refused by the fault",
        "rate_limit": "refused by the fault",
        "write_timeout": "refused: the client timed out",
        "lookup_timeout": "the lookup timed out",
    }.get(kind)


def render_timeline(rows: Iterable[TimelineRow], *, epoch: float | None = None) -> str:
    """The text timeline: one line per row, with its time (see :func:`shown_time`)."""
    return "\n".join(f"t={shown_time(row.at, epoch):>8} {row.text}" for row in rows)


def shown_time(at: float, epoch: float | None = None) -> str:
    """Harness time ``at`` for a reader: seconds (``402s``), or, in a case whose clock
    starts at an incident (``epoch``: the wall time, Unix seconds, of its harness time 0),
    the workers' wall time (``2024-06-14T09:31:07Z``): the incident's own chronology."""
    if epoch is None:
        return f"{at:g}s"
    import datetime as dt

    wall = dt.datetime.fromtimestamp(round(epoch + at), dt.timezone.utc)
    return wall.strftime("%Y-%m-%dT%H:%M:%SZ")


#: Harness entries that come after what the processes of their second did: how a process
#: ended (and what a command wrote), and the start of the quiet phase.
_ENDINGS = frozenset(
    {"worker", "kill", "power", "raised", "timeout", "died", "error", "output", "quiet"}
)
