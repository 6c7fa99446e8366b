"""The run history of one case: every step and observation, in order (SPEC section 4).

The harness records what it did (deliveries, worker starts and ends, kills, authority changes,
fault switches, clock moves, recovery runs); the ledger's event log and the providers'
journals add what the code under test did. :meth:`History.timeline` merges the three into one
readable text timeline; :meth:`History.to_json` serializes the harness's part (versioned).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._evidence import ProviderRequest
from ._ledger import Event

__all__ = ["HISTORY_VERSION", "Entry", "History"]

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

    def timeline(
        self, *, events: Sequence[Event] = (), requests: Iterable[ProviderRequest] = ()
    ) -> str:
        """The harness entries, ledger transitions and provider requests, merged by time."""
        rows: list[tuple[float, int, int, str]] = []
        for seq, entry in enumerate(self.entries):
            rows.append((entry.at, 0, seq, f"[{entry.step:>2}] {entry.kind:<10} {entry.text}"))
        for seq, event in enumerate(events):
            before = event.from_state.value if event.from_state else "(new)"
            rows.append(
                (
                    event.at,
                    1,
                    seq,
                    f"     ledger     {event.attempt_id}: {before} -> {event.to_state.value} "
                    f"by {event.actor} ({event.reason})",
                )
            )
        for seq, request in enumerate(requests):
            effect = "EFFECT" if request.effect_applied else "no effect"
            rows.append(
                (
                    request.at,
                    2,
                    seq,
                    f"     {request.provider:<10} {request.request_id} {request.kind} "
                    f"key={request.operation_key} status={request.status} {effect}",
                )
            )
        rows.sort(key=lambda row: (row[0], row[1], row[2]))
        return "\n".join(f"t={at:>7g}s {text}" for at, _, _, text in rows)
