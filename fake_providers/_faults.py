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
``write_timeouts``        requests that would apply an effect time out *before* anything is
                          applied (a request that never reached the provider's database):
                          in-process ``httpx.ReadTimeout``; over loopback the connection is
                          closed without a response.
``server_errors``         a 5xx in the provider's format, *before* anything is applied.
``lose_responses``        the effect is applied and committed, then the response is lost. The
                          variant says how the client sees it: ``"reset"`` (in-process
                          ``httpx.RemoteProtocolError``), ``"timeout"`` (``httpx.ReadTimeout``)
                          or, over loopback, the connection closed without a response;
                          ``"502"``: a gateway answers 502 Bad Gateway. Counts only requests
                          that applied an effect.
``rate_limits``           429 with ``Retry-After``, nothing applied.
``latency``               the answer takes ``seconds`` of harness time: the provider's notion of
                          "now" for the rest of the request (effect commit time, recorded time)
                          moves forward, and the provider's ``sleep`` callable (if any, e.g. the
                          harness clock's advance) is called. Never a real sleep.
``search_misses``         searches return no hits, as a lagging index would, even for effects
                          old enough to be visible.
``lose_sessions``         (an MCP server) a write finds its session forgotten: 404, nothing
                          applied, and the client must initialize a new session.
``duplicate_requests``    (an MCP server) a write arrives twice: the server handles both, the
                          client gets the second answer.
========================  ===================================================================

``on`` selects the requests a switch applies to: ``"all"``, ``"writes"`` (requests that may apply
an effect) or ``"lookups"`` (reads that tell whether an effect happened). ``after`` lets that
many matching requests through first: ``lose_responses(1, after=2)`` loses the third.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass
from typing import Literal, get_args

from ._journal import Journal

__all__ = [
    "LOST_RESPONSES",
    "ActiveFault",
    "FaultKind",
    "Faults",
    "LostResponse",
    "RequestKind",
    "Target",
]

FaultKind = Literal[
    "lookup_timeout",
    "write_timeout",
    "server_error",
    "response_lost",
    "rate_limit",
    "latency",
    "search_miss",
    "session_lost",
    "request_duplicated",
]
#: How a lost response reaches the client.
LostResponse = Literal["reset", "timeout", "502"]
LOST_RESPONSES: tuple[LostResponse, ...] = ("reset", "timeout", "502")
Target = Literal["all", "writes", "lookups"]
RequestKind = Literal["write", "lookup", "read"]

FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)


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

    def lookup_timeouts(self, n: int | None = None, *, after: int = 0) -> None:
        """Time out the next ``n`` lookups (crash point F), or every lookup until lifted."""
        self._set("lookup_timeout", n, "lookups", None, after)

    def write_timeouts(self, n: int | None = None, *, after: int = 0) -> None:
        """Time out the next ``n`` requests that would apply an effect, before applying it."""
        self._set("write_timeout", n, "writes", None, after)

    def server_errors(
        self, n: int | None = None, *, on: Target = "all", status: int = 500, after: int = 0
    ) -> None:
        """Answer the next ``n`` requests with ``status`` (a 5xx) before applying anything."""
        if not 500 <= status <= 599:
            raise ValueError(f"server_errors status must be a 5xx, not {status!r}.")
        self._set("server_error", n, on, float(status), after)

    def lose_responses(
        self, n: int | None = None, *, after: int = 0, variant: LostResponse = "reset"
    ) -> None:
        """Apply the next ``n`` effects, then lose their responses (crash point B's reality,
        with the worker alive): the client sees a reset connection, a timeout, or a 502."""
        if variant not in LOST_RESPONSES:
            raise ValueError(
                f"lose_responses variant must be one of {', '.join(LOST_RESPONSES)}, not "
                f"{variant!r}."
            )
        self._set("response_lost", n, "writes", float(LOST_RESPONSES.index(variant)), after)

    def rate_limits(
        self,
        n: int | None = None,
        *,
        on: Target = "all",
        retry_after: float = 1.0,
        after: int = 0,
    ) -> None:
        """Answer the next ``n`` requests with 429 and ``Retry-After: retry_after``."""
        _check_seconds("retry_after", retry_after)
        self._set("rate_limit", n, on, retry_after, after)

    def latency(self, seconds: float, n: int | None = None, *, on: Target = "all") -> None:
        """Make the next ``n`` requests take ``seconds`` of harness time."""
        _check_seconds("seconds", seconds)
        self._set("latency", n, on, seconds)

    def lose_sessions(self, n: int | None = None, *, after: int = 0) -> None:
        """(An MCP server.) The next ``n`` writes find their session forgotten, as after a
        restart: 404 before anything is applied, and the session is gone for good."""
        self._set("session_lost", n, "writes", None, after)

    def duplicate_requests(self, n: int | None = None, *, after: int = 0) -> None:
        """(An MCP server.) The next ``n`` writes arrive twice, as a proxy or a transport that
        sends a request again does: both are handled, and the client gets the second answer."""
        self._set("request_duplicated", n, "writes", None, after)

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

    def _set(
        self, kind: FaultKind, n: int | None, on: Target, value: float | None, after: int = 0
    ) -> None:
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(
                f"{kind}: n must be a positive number of calls, or None for 'until lifted', "
                f"not {n!r}; use faults.lift({kind!r}) to switch it off."
            )
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise ValueError(
                f"{kind}: after must be how many matching requests pass first (0 or more), "
                f"not {after!r}."
            )
        if on not in ("all", "writes", "lookups"):
            raise ValueError(f"{kind}: on must be 'all', 'writes' or 'lookups', not {on!r}.")
        with self._journal.transaction() as conn:
            conn.execute(
                "INSERT INTO faults(kind, remaining, applies_to, value, skip) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(kind) DO UPDATE SET "
                "remaining=excluded.remaining, applies_to=excluded.applies_to, "
                "value=excluded.value, skip=excluded.skip",
                (kind, n, on, value, after),
            )


def take(
    conn: sqlite3.Connection, kind: FaultKind, request_kind: RequestKind
) -> ActiveFault | None:
    """Consume one unit of fault ``kind`` if it is on and applies to this request.

    Call inside a write transaction: the decrement is atomic across processes.
    """
    row = conn.execute(
        "SELECT remaining, applies_to, value, skip FROM faults WHERE kind=?", (kind,)
    ).fetchone()
    if row is None or not _applies(row[1], request_kind):
        return None
    if row[3] > 0:  # let this one through: the switch acts on a later request
        conn.execute("UPDATE faults SET skip=skip-1 WHERE kind=?", (kind,))
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
