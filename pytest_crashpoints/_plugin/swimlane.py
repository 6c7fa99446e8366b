"""The swimlane timeline of a failing case, for the HTML report.

One row per thing that happened, in the order of the text timeline, and one lane (column)
for the harness, each process, the ledger and each provider. Kills, pauses, authority
changes and clock moves are marks; ledger transitions and provider requests are events, each
opening to its journal entry or ledger row. What a check named (the journal entries in
``violations[].requests``, the attempts in ``violations[].attempts``) is highlighted and
linked to that invariant's explanation: nothing is highlighted that the check did not use.

Drawn from a failing case's record (``failure.case`` of the JSON report) when
:func:`readable` says it can be.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._harness.verdict.history import shown_time
from .._harness.verdict.invariants import INVARIANTS, invariant_key
from .markup import anchor, escape

__all__ = ["readable", "swimlane"]

#: How a process ended, by the kind of the harness's row that says so.
_ENDS = {"worker": "✓ completed", "raised": "! raised", "timeout": "⧗ timed out", "died": "† died"}


def swimlane(tid: str, case: Mapping[str, Any]) -> list[str]:
    """The timeline section of the failing test ``tid``, from its readable ``case`` record."""
    grid = _grid(tid, case)
    body = []
    previous: float | None = None
    epoch = case.get("epoch")
    epoch = float(epoch) if isinstance(epoch, int | float) else None
    for index, row in enumerate(grid.rows):
        body.append(_row(grid, index, row, previous, epoch))
        previous = float(row.get("at", 0.0))
    return [
        f'<h3 id="{tid}-timeline">Timeline</h3>',
        '<p class="legend">One row per thing that happened, in order; one column (lane) per '
        "process, for the ledger and per provider. In a process's lane: ▶ it starts, "
        "‖ it waits at a gate, ✕ KILLED (a real SIGKILL), ✓ it completed, • it writes the "
        "ledger or sends a request; the bar is its lifetime. In the harness's lane: authority "
        "changes, clock moves, provider faults. ⚠ marks what a check named, linked to the "
        "invariant. A double line above a row: the clock jumped. Open any event for its "
        "journal entry or ledger row.</p>",
        f'<div class="scroll" role="region" aria-label="Timeline, {len(grid.rows)} rows" '
        'tabindex="0">',
        f'<table class="timeline" data-lanes="{len(grid.lanes)}">',
        "<caption>Swimlane timeline of the failing case (time in "
        + ("the incident's wall time" if epoch is not None else "harness seconds")
        + ")</caption>",
        f"<thead><tr>{_head(grid)}</tr></thead>",
        "<tbody>",
        *body,
        "</tbody></table></div>",
    ]


def readable(case: object) -> bool:
    """Whether a failure's ``case`` is a record the timeline can be drawn from (version 1,
    every field it reads of the right type); otherwise the page shows the text timeline."""
    if not isinstance(case, Mapping) or case.get("version") != 1:
        return False
    rows, attempts, violations = (case.get(k) for k in ("timeline", "attempts", "violations"))
    if not (isinstance(rows, list) and isinstance(attempts, list)):
        return False
    if not isinstance(violations, list):
        return False
    # What each kind of row must name to be drawn in its lane.
    names = {"harness": (), "ledger": ("attempt_id",), "journal": ("provider", "request_id")}
    for row in rows:
        if not isinstance(row, Mapping) or row.get("source") not in names:
            return False
        if not all(isinstance(row.get(name), str) for name in names[row["source"]]):
            return False
        if not isinstance(row.get("at"), int | float) or not isinstance(row.get("data", {}), dict):
            return False
    if not all(isinstance(a, Mapping) and isinstance(a.get("attempt_id"), str) for a in attempts):
        return False
    for violation in violations:
        if not isinstance(violation, Mapping):
            return False
        invariant = violation.get("invariant")
        if invariant not in INVARIANTS and not (isinstance(invariant, str) and invariant):
            return False
        if not isinstance(violation.get("message"), str):
            return False
        refs = violation.get("requests", [])
        if not isinstance(refs, list) or not all(isinstance(r, Mapping) for r in refs):
            return False
        if not isinstance(violation.get("attempts", []), list):
            return False
    return True


# -- what the rows are drawn from ------------------------------------------------------------


@dataclass(frozen=True)
class _Grid:
    """One case's timeline, ready to draw: its lanes, and what its checks named."""

    tid: str
    rows: list[Mapping[str, Any]]
    lanes: list[str]
    processes: list[str]
    providers: list[str]
    #: Each lane's column.
    column: dict[str, int]
    #: Each process's first and last row.
    spans: dict[str, tuple[int, int]]
    violations: list[Mapping[str, Any]]
    #: The journal entries (provider, request id) and attempts each violation named, by the
    #: violation's place in the list (from 1).
    named_requests: dict[tuple[str, str], list[int]]
    named_attempts: dict[str, list[int]]
    #: The ledger's rows at the end, by attempt id.
    attempts: dict[str, Mapping[str, Any]]
    #: Each attempt's last transition: where a named row took the state the checks read.
    last_event: dict[str, int]


def _grid(tid: str, case: Mapping[str, Any]) -> _Grid:
    rows = list(case.get("timeline") or [])
    violations = list(case.get("violations") or [])
    processes, providers, has_ledger = _lanes(rows)
    lanes = ["harness", *processes] + (["ledger"] if has_ledger else []) + providers
    named_requests: dict[tuple[str, str], list[int]] = {}
    named_attempts: dict[str, list[int]] = {}
    for number, violation in enumerate(violations, start=1):
        for ref in violation.get("requests") or []:
            key = (str(ref.get("provider")), str(ref.get("request_id")))
            named_requests.setdefault(key, []).append(number)
        for attempt in violation.get("attempts") or []:
            named_attempts.setdefault(str(attempt), []).append(number)
    return _Grid(
        tid=tid,
        rows=rows,
        lanes=lanes,
        processes=processes,
        providers=providers,
        column={lane: i for i, lane in enumerate(lanes)},
        spans=_lifetimes(rows),
        violations=violations,
        named_requests=named_requests,
        named_attempts=named_attempts,
        attempts={a["attempt_id"]: a for a in case.get("attempts") or []},
        last_event={
            str(row.get("attempt_id")): index
            for index, row in enumerate(rows)
            if row["source"] == "ledger"
        },
    )


def _processes_of(row: Mapping[str, Any]) -> list[str]:
    data = row.get("data") or {}
    named = list(data.get("processes") or [])
    if data.get("process") and data["process"] not in named:
        named.insert(0, data["process"])
    return [str(p) for p in named]


def _lanes(timeline: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str], bool]:
    """The processes and the providers in the order they first appear; whether the ledger
    changed at all."""
    processes: list[str] = []
    providers: list[str] = []
    ledger = False
    for row in timeline:
        if row["source"] == "harness":
            processes += [p for p in _processes_of(row) if p not in processes]
        elif row["source"] == "ledger":
            ledger = True
        elif row.get("provider") and row["provider"] not in providers:
            providers.append(row["provider"])
    return processes, providers, ledger


def _lifetimes(timeline: Sequence[Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    """Each process's first and last row (its start and how it ended)."""
    spans: dict[str, tuple[int, int]] = {}
    for index, row in enumerate(timeline):
        if row["source"] != "harness":
            continue
        for process in _processes_of(row):
            start, _ = spans.get(process, (index, index))
            spans[process] = (start, index)
    return spans


# -- the table -------------------------------------------------------------------------------


@dataclass
class _Cells:
    """One row's cells, a column per lane: what each holds, and its classes."""

    content: list[list[str]]
    classes: list[set[str]]

    @classmethod
    def empty(cls, lanes: int) -> _Cells:
        return cls([[] for _ in range(lanes)], [set() for _ in range(lanes)])

    def add(self, column: int, fragment: str, *classes: str) -> None:
        self.content[column].append(fragment)
        self.classes[column].update(classes)

    def html(self) -> str:
        return "".join(
            f'<td class="{" ".join(sorted(c))}">{"".join(content)}</td>'
            if c
            else f"<td>{''.join(content)}</td>"
            for content, c in zip(self.content, self.classes, strict=True)
        )


def _head(grid: _Grid) -> str:
    head = ['<th scope="col" class="time">time</th>']
    for lane in grid.lanes:
        kind = "proc" if lane in grid.processes else ("prov" if lane in grid.providers else lane)
        title = {"harness": "harness: what the harness did", "ledger": "ledger: transitions"}.get(
            lane, f"provider {lane}: its journal" if kind == "prov" else f"process {lane}"
        )
        shown = f"{lane} (provider)" if kind == "prov" else lane
        head.append(
            f'<th scope="col" class="lane l-{kind}" data-lane="{escape(lane)}" '
            f'title="{escape(title)}">{escape(shown)}</th>'
        )
    return "".join(head)


def _row(
    grid: _Grid, index: int, row: Mapping[str, Any], previous: float | None, epoch: float | None
) -> str:
    """The table row of the timeline's row ``index``; ``previous`` is the time of the row
    before it; ``epoch`` the wall time of harness time 0 in a case from an incident."""
    cells = _Cells.empty(len(grid.lanes))
    for process, (start, end) in grid.spans.items():
        if start < index < end:
            cells.classes[grid.column[process]].add("alive")
    if row["source"] == "harness":
        _harness_cell(grid, index, row, cells)
    elif row["source"] == "ledger":
        _ledger_cells(grid, index, row, cells)
    else:
        _journal_cells(grid, row, cells)
    at = float(row.get("at", 0.0))
    jump = "" if previous is None or at == previous else f" (+{at - previous:g} s)"
    row_class = ' class="jump"' if previous is not None and at - previous > 1 else ""
    time_class = ' class="same"' if previous is not None and at == previous else ""
    return (
        f'<tr id="{grid.tid}-e{index + 1}"{row_class}>'
        f'<th scope="row"{time_class}>t={shown_time(at, epoch)}{escape(jump)}</th>'
        f"{cells.html()}</tr>"
    )


def _harness_cell(grid: _Grid, index: int, row: Mapping[str, Any], cells: _Cells) -> None:
    """What the harness did: in the lane of the process it concerns, or in its own."""
    kind = str(row.get("kind", ""))
    text = str(row.get("text", ""))
    data = row.get("data") or {}
    processes = [p for p in _processes_of(row) if p in grid.column]
    body = _fields([("step", row.get("step")), ("what", text)])
    if kind in ("deliver", "recovery") and processes:
        for process in processes:
            if grid.spans.get(process, (index, index))[0] == index:
                _start(grid.column[process], process, kind, text, data, body, cells)
    elif kind == "kill" and processes:
        label = f"✕ KILLED at {data.get('point', '?')}"
        cells.add(grid.column[processes[0]], _mark("kill", label, text, body), "end")
    elif kind in _ENDS and processes:
        cells.add(grid.column[processes[0]], _mark(kind, _ENDS[kind], text, body), "end")
    elif kind in ("note", "error", "output", "wait") and processes:
        label = {"error": "⚠ error", "output": "output", "wait": "⏱ waited"}.get(kind, "note")
        cells.add(grid.column[processes[0]], _mark(kind, label, text, body))
    else:
        cells.add(grid.column["harness"], _mark(kind, _harness_label(kind, text, data), text, body))


def _start(
    lane: int,
    process: str,
    kind: str,
    text: str,
    data: Mapping[str, Any],
    body: str,
    cells: _Cells,
) -> None:
    """A process starts (and, paused at a gate, waits there while the harness acts)."""
    label = "▶ recovery" if kind == "recovery" else "▶ message"
    if kind == "deliver" and data.get("message") is not None:
        again = " again" if text.startswith("redeliver") else ""
        label = f"▶ message {data['message']}{again}"
    cells.add(lane, _mark("start", label, text, body), "start")
    if data.get("paused") == process:
        at = data.get("pause_at")
        title = f"{process} waits at {at} while the harness acts"
        cells.add(lane, _mark("pause", f"‖ then waits at {at}", title, body))


def _harness_label(kind: str, text: str, data: Mapping[str, Any]) -> str:
    """What the harness's own lane says of a row (a kind it does not know: "kind: text")."""
    if kind == "authority":
        return "authority " + text.split(": tenant", 1)[0]
    if kind == "clock":
        return f"clock +{data.get('seconds', '?')}s"
    if kind == "fault":
        return "fault " + text
    if kind == "power":
        return "⚡ " + text.split(":", 1)[0]
    return {"quiet": "quiet phase", "setup": "set-up"}.get(kind, f"{kind}: {text}")


def _ledger_cells(grid: _Grid, index: int, row: Mapping[str, Any], cells: _Cells) -> None:
    """A ledger transition: in the ledger's lane, and a tick in the writer's."""
    col = grid.column["ledger"]
    cells.add(col, _ledger_event(row, grid.attempts, grid.tid))
    actor = str(row.get("actor"))
    if actor in grid.column and actor in grid.processes:
        cells.add(grid.column[actor], _tick(f"writes the ledger ({row.get('to_state')})"))
    attempt_id = str(row.get("attempt_id"))
    numbers = grid.named_attempts.get(attempt_id, [])
    if numbers and grid.last_event.get(attempt_id) == index:
        named = [grid.violations[n - 1] for n in numbers]
        cells.add(col, _named(named, "the ledger row a check named"), "hl")


def _journal_cells(grid: _Grid, row: Mapping[str, Any], cells: _Cells) -> None:
    """A provider's journal entry: in the provider's lane, and a tick in the sender's."""
    col = grid.column[str(row.get("provider"))]
    key = (str(row.get("provider")), str(row.get("request_id")))
    numbers = grid.named_requests.get(key, [])
    named = [grid.violations[n - 1] for n in numbers]
    # Invariant 1 names the effect and its repeat, in the order they happened.
    pairs = [_place(v["requests"], key) for v in named if v["invariant"] == 1]
    duplicate = any(pairs)
    first_of_two = bool(pairs) and not duplicate
    cells.add(col, _journal_event(row, duplicate, first_of_two, grid.attempts, grid.tid))
    sender = str(row.get("process"))
    if sender in grid.column and sender in grid.processes:
        cells.add(grid.column[sender], _tick(f"sends {row.get('kind')}"))
    if numbers:
        what = "named by the check of"
        if duplicate:
            what = "the repeat of an effect (invariant 1)"
        elif first_of_two:
            what = "an effect that was then made again (invariant 1)"
        cells.add(col, _named(named, what), "hl", *(["dup"] if duplicate else []))


def _place(requests: Sequence[Mapping[str, Any]], key: tuple[str, str]) -> int:
    """Where the journal entry ``key`` (provider, request id) is among ``requests``."""
    return next(
        i
        for i, ref in enumerate(requests)
        if (str(ref.get("provider")), str(ref.get("request_id"))) == key
    )


# -- the marks in a cell ---------------------------------------------------------------------


def _tick(what: str) -> str:
    return f'<span class="act" title="{escape(what)}">•</span>'


def _named(violations: Sequence[Mapping[str, Any]], what: str) -> str:
    """The mark of what checks named: each invariant, linked to its explanation."""
    numbers = sorted({v["invariant"] for v in violations}, key=invariant_key)
    links = []
    for n in numbers:
        message = next(v["message"] for v in violations if v["invariant"] == n)
        links.append(f'<a href="#{anchor(n)}" title="{escape(message)}">{escape(n)}</a>')
    word = "invariant" if len(numbers) == 1 else "invariants"
    return f'<span class="named" title="{escape(what)}">⚠ {word} {", ".join(links)}</span>'


def _mark(kind: str, label: str, title: str, body: str) -> str:
    """A mark that opens to ``body``: native ``<details>``, usable with scripts off."""
    return (
        f'<details class="mark m-{kind}"><summary title="{escape(title)}">{escape(label)}'
        f'</summary><div class="pop">{body}</div></details>'
    )


def _fields(pairs: Iterable[tuple[str, object]]) -> str:
    items = "".join(
        f"<dt>{escape(name)}</dt><dd>{escape(value)}</dd>"
        for name, value in pairs
        if value is not None and value != ""
    )
    return f"<dl>{items}</dl>"


def _ledger_link(attempt_id: str, attempts: Mapping[str, Any], tid: str) -> str:
    """A link to the ledger row of ``attempt_id`` at the end, if the ledger still has it."""
    if attempt_id not in attempts:
        return ""
    return (
        f'<p><a href="#{tid}-a-{escape(attempt_id)}">the ledger row of {escape(attempt_id)}</a></p>'
    )


def _ledger_event(
    row: Mapping[str, Any], attempts: Mapping[str, Mapping[str, Any]], tid: str
) -> str:
    attempt_id = str(row.get("attempt_id"))
    before = row.get("from_state") or "(new)"
    title = f"{attempt_id}: {before} → {row.get('to_state')} by {row.get('actor')}"
    body = _fields(
        [
            ("attempt", attempt_id),
            ("from", before),
            ("to", row.get("to_state")),
            ("by", row.get("actor")),
            ("why", row.get("reason")),
        ]
    )
    body += _ledger_link(attempt_id, attempts, tid)
    return _mark("ledger", f"{attempt_id[:10]} → {row.get('to_state')}", title, body)


def _journal_event(
    row: Mapping[str, Any],
    duplicate: bool,
    first_of_two: bool,
    attempts: Mapping[str, Mapping[str, Any]],
    tid: str,
) -> str:
    effect = "EFFECT" if row.get("effect_applied") else "no effect"
    label = f"{row.get('kind')} {row.get('status')} {effect}"
    note = row.get("note")
    if note:  # a model's turn: what it answered (a tool call and its arguments) is the story
        label = f"{'↻ ' if 'asked again' in str(note) else ''}{row.get('kind')}: {note}"
    if duplicate:
        label = "⚠ DUPLICATE " + label
    elif first_of_two:
        label = "⚠ 1st of 2: " + label
    sender = row.get("process")
    if sender and row.get("message") is not None:
        sender = f"{sender} (delivering message {row['message']})"
    body = _fields(
        [
            ("request", row.get("request_id")),
            ("operation", row.get("kind")),
            ("the model answered", note),
            ("status", row.get("status")),
            ("effect", "applied" if row.get("effect_applied") else "none"),
            ("by", sender),
            ("from the incident", row.get("reading")),
            ("key", row.get("operation_key")),
            ("payload hash", row.get("payload_hash")),
            ("object", row.get("object_id")),
            ("tenant", row.get("tenant_id")),
            ("scope", row.get("scope")),
            ("idempotent provider", "yes" if row.get("idempotent") else "no"),
            ("ledger attempt", row.get("attempt_id")),
        ]
    )
    if row.get("attempt_id"):
        body += _ledger_link(row["attempt_id"], attempts, tid)
    title = f"{row.get('provider')} {row.get('request_id')} {row.get('kind')} by {sender}: {effect}"
    if note:
        title = f"{row.get('provider')} {row.get('request_id')} by {sender}: {note}"
    return _mark("dup" if duplicate else "journal", label, title, body)
