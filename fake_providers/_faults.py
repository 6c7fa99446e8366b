"""Fault switches the harness sets between steps.

Every switch lives in the journal's ``faults`` table, so it reaches handlers running in forked
workers, and its counter ("the next N calls") is decremented inside a write transaction, so two
processes never consume the same unit. ``n=None`` means "until lifted".

========================  ===================================================================
switch                    what the client sees
========================  ===================================================================
``lookup_timeouts``       lookups (retrieve by id, message lookup, searches, consistent lists)
                          time out: in-process ``httpx.ReadTimeout``; over loopback the
                          connection is closed without a response (no real waiting). Nothing
                          is applied (lookups apply nothing anyway).
``server_errors``         a 5xx in the provider's format, *before* anything is applied.
``lose_responses``        the effect is applied and committed, then the response is lost:
                          in-process ``httpx.RemoteProtocolError``; over loopback the connection
                          is closed without a response. Counts only requests that applied an
                          effect.
``rate_limits``           429 with ``Retry-After``, nothing applied.
``latency``               the answer takes ``seconds`` of harness time: the provider's notion of
                          "now" for the rest of the request (effect commit time, recorded time)
                          moves forward, and the provider's ``sleep`` callable (if any, e.g. the
                          harness clock's advance) is called. Never a real sleep.
``search_misses``         searches return no hits, as a lagging index would, even for effects
                          old enough to be visible.
========================  ===================================================================

``on`` selects the requests a switch applies to: ``"all"``, ``"writes"`` (requests that may apply
an effect) or ``"lookups"`` (reads that tell whether an effect happened).
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass
from typing import Literal

from ._journal import Journal

__all__ = ["ActiveFault", "FaultKind", "Faults", "RequestKind", "Target"]

FaultKind = Literal[
    "lookup_timeout", "server_error", "response_lost", "rate_limit", "latency", "search_miss"
]
Target = Literal["all", "writes", "lookups"]
RequestKind = Literal["write", "lookup", "read"]

FAULT_KINDS: tuple[FaultKind, ...] = (
    "lookup_timeout",
    "server_error",
    "response_lost",
    "rate_limit",
    "latency",
    "search_miss",
)


@dataclass(frozen=True)
class ActiveFault:
    """A switch that is on: how many calls it still affects (None: until lifted), to which
    requests, and its value (latency seconds, Retry-After seconds, 5xx status)."""

    kind: FaultKind
    remaining: int | None
    on: Target
    value: float | None


def _applies(target: str, kind: RequestKind) -> bool:
    if target == "all":
        return True
    if target == "writes":
        return kind == "write"
    return kind == "lookup"


class Faults:
    """The fault switches of one provider."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal

    # -- switches ------------------------------------------------------------------------------

    def lookup_timeouts(self, n: int | None = None) -> None:
        """Time out the next ``n`` lookups (crash point F), or every lookup until lifted."""
        self._set("lookup_timeout", n, "lookups", None)

    def server_errors(self, n: int | None = None, *, on: Target = "all", status: int = 500) -> None:
        """Answer the next ``n`` requests with ``status`` (a 5xx) before applying anything."""
        if not 500 <= status <= 599:
            raise ValueError(f"server_errors status must be a 5xx, not {status!r}.")
        self._set("server_error", n, on, float(status))

    def lose_responses(self, n: int | None = None) -> None:
        """Apply the next ``n`` effects, then lose their responses (crash point B's reality)."""
        self._set("response_lost", n, "writes", None)

    def rate_limits(
        self, n: int | None = None, *, on: Target = "all", retry_after: float = 1.0
    ) -> None:
        """Answer the next ``n`` requests with 429 and ``Retry-After: retry_after``."""
        _check_seconds("retry_after", retry_after)
        self._set("rate_limit", n, on, retry_after)

    def latency(self, seconds: float, n: int | None = None, *, on: Target = "all") -> None:
        """Make the next ``n`` requests take ``seconds`` of harness time."""
        _check_seconds("seconds", seconds)
        self._set("latency", n, on, seconds)

    def search_misses(self, n: int | None = None) -> None:
        """Make the next ``n`` searches find nothing (an index that missed the write)."""
        self._set("search_miss", n, "lookups", None)

    def lift(self, *kinds: FaultKind) -> None:
        """Switch off the given faults, or every fault when none is named."""
        for kind in kinds:
            if kind not in FAULT_KINDS:
                known = ", ".join(FAULT_KINDS)
                raise ValueError(f"unknown fault {kind!r}; the faults are {known}.")
        with self._journal.transaction() as conn:
            if kinds:
                conn.executemany("DELETE FROM faults WHERE kind=?", [(k,) for k in kinds])
            else:
                conn.execute("DELETE FROM faults")

    def active(self) -> dict[FaultKind, ActiveFault]:
        """The switches that are on now."""
        with self._journal.connection() as conn:
            rows = conn.execute("SELECT kind, remaining, applies_to, value FROM faults").fetchall()
        return {r[0]: ActiveFault(r[0], r[1], r[2], r[3]) for r in rows}

    def _set(self, kind: FaultKind, n: int | None, on: Target, value: float | None) -> None:
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(
                f"{kind}: n must be a positive number of calls, or None for 'until lifted', "
                f"not {n!r}; use faults.lift({kind!r}) to switch it off."
            )
        if on not in ("all", "writes", "lookups"):
            raise ValueError(f"{kind}: on must be 'all', 'writes' or 'lookups', not {on!r}.")
        with self._journal.transaction() as conn:
            conn.execute(
                "INSERT INTO faults(kind, remaining, applies_to, value) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(kind) DO UPDATE SET remaining=excluded.remaining, "
                "applies_to=excluded.applies_to, value=excluded.value",
                (kind, n, on, value),
            )


def take(
    conn: sqlite3.Connection, kind: FaultKind, request_kind: RequestKind
) -> ActiveFault | None:
    """Consume one unit of fault ``kind`` if it is on and applies to this request.

    Call inside a write transaction: the decrement is atomic across processes.
    """
    row = conn.execute(
        "SELECT remaining, applies_to, value FROM faults WHERE kind=?", (kind,)
    ).fetchone()
    if row is None or not _applies(row[1], request_kind):
        return None
    remaining = row[0]
    if remaining is not None:
        if remaining <= 1:
            conn.execute("DELETE FROM faults WHERE kind=?", (kind,))
        else:
            conn.execute("UPDATE faults SET remaining=remaining-1 WHERE kind=?", (kind,))
    return ActiveFault(kind, remaining, row[1], row[2])


def _check_seconds(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number of harness seconds >= 0, not {value!r}.")
