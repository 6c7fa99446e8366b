"""The HTML report: one static, self-contained page drawn from the JSON report.

Written by ``--crashpoints-html``, ``crashpoints gate`` and ``crashpoints show --html``. No
network: the CSS and the little JavaScript (the copy buttons, Escape to close a detail) are
inline, and the page reads fine with scripts off. What it shows:

- a summary: the verdict, the tests, the cases and cases per second, the coverage table;
- for each failing test (broken agents caught included) the violations, and a swimlane
  timeline: one row per thing that happened, in the order of the text timeline, and one lane
  (column) for the harness, each process, the ledger and each provider. Kills, pauses,
  authority changes and clock moves are marks; ledger transitions and provider requests are
  events, each opening to its journal entry or ledger row. What a check named (the journal
  entries in ``violations[].requests``, the attempts in ``violations[].attempts``) is
  highlighted and linked to that invariant's explanation: nothing is highlighted that the
  check did not use;
- for every test, the schedules it ran, collapsed.

Accessible: landmarks and headings, tables with header cells, native ``<details>`` for what
opens, every mark and highlight in words and symbols as well as colour.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._harness.invariants import INVARIANTS, invariant_key
from .._harness.schedule import COVERAGE_KINDS
from .summary import verdict_of

__all__ = ["render_html"]

#: What each invariant means, for the page's explanations (the headings are INVARIANTS).
EXPLANATIONS: dict[int, str] = {
    1: (
        "Effects are counted in the providers' journals, the ground truth, and attributed to "
        "the process whose credential made them. The fault-free run of the same messages is "
        "the baseline: an effect beyond it that repeats another one (the same operation at "
        "the same provider, for the same message or with the same payload) is a duplicate, "
        "whatever keys the agent used or recorded. Idempotent replays are not effects."
    ),
    2: (
        "Every attempt ends OUTCOME_CONFIRMED, FAILED or MANUAL_REVIEW after the quiet phase, "
        "and the ledger agrees with the provider: a CONFIRMED row names exactly one effect "
        "with its arguments, a FAILED row none, and every effect is recorded by a row. An "
        "effect of the fault-free run that never happened, with no row in review or failed "
        "to account for it, is work silently dropped."
    ),
    3: (
        "For every attempt the operator can read the arguments and their hash (and the hash "
        "matches), and a CONFIRMED attempt names a request id the provider really issued."
    ),
    4: (
        "Every provider request is made under the tenant and a scope no wider than its "
        "attempt's authority, and never under authority that was revoked or changed by then. "
        "Checked against the credentials the harness issued, and against the authority each "
        "row recorded when the ledger has it."
    ),
    5: (
        "Between steps, every in-flight attempt (INTENT_RECORDED, DISPATCHED, UNKNOWN, "
        "FAILED_RETRYABLE, RECONCILED) is in the ledger's queue and has an owner: nobody's "
        "work is invisible."
    ),
    6: (
        "Recovery is safe to run twice: a second run after the quiet phase changes nothing "
        "and causes no provider effect, and a recovery killed midway and run again ends "
        "where an uninterrupted one ends."
    ),
}

_ORDER = {"error": 0, "failed": 1, "caught": 2, "passed": 3}


def render_html(document: Mapping[str, Any]) -> str:
    """The HTML page of a JSON report (``version`` 1, as ``load_report`` returns it)."""
    tests = sorted(
        document.get("tests", []), key=lambda t: (_ORDER.get(verdict_of(t), 3), t["nodeid"])
    )
    verdicts = [verdict_of(t) for t in tests]
    status = "FAILED" if "failed" in verdicts or "error" in verdicts else "passed"
    if document.get("interrupted"):
        status = "interrupted"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>crashpoints report: {status}, {len(tests)} crash test(s)</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        '<a class="skip" href="#main">Skip to the report</a>',
        _header(document, tests, status),
        '<main id="main">',
        _summary(tests),
        *(_test(f"t{index}", test) for index, test in enumerate(tests, start=1)),
        _invariants(_own_invariants(tests)),
        "</main>",
        f"<script>{_JS}</script>",
        "</body>",
        "</html>",
    ]
    return "\n".join(parts) + "\n"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _anchor(invariant: object) -> str:
    """The id of an invariant's explanation: ``inv-1`` ... ``inv-6``, ``inv-own-NAME``."""
    if isinstance(invariant, int):
        return f"inv-{invariant}"
    return "inv-own-" + re.sub(r"[^A-Za-z0-9_-]", "-", str(invariant))


def _own_invariants(tests: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The invariants of your own that some failure names, with what each says."""
    own: dict[str, str] = {}
    for test in tests:
        failure = test.get("failure") or {}
        titles = failure.get("titles")
        if not isinstance(titles, Mapping):
            titles = {}
        for name in failure.get("invariants") or []:
            if isinstance(name, str):
                own.setdefault(name, str(titles.get(name, "")))
        case = failure.get("case") if _readable(failure.get("case")) else None
        for violation in (case or {}).get("violations", []):
            if isinstance(violation["invariant"], str) and not own.get(violation["invariant"]):
                own[violation["invariant"]] = str(violation.get("title") or "")
    return own


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _seconds(value: object) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "-"
    return f"{value:.1f} s" if value >= 1 else f"{value:.2f} s"


def _rate(cases: int, seconds: object) -> str:
    if not isinstance(seconds, int | float) or not seconds:
        return "-"
    return f"{cases / seconds:.1f}"


def _verdict(verdict: str) -> str:
    symbol = {"passed": "✓", "caught": "◎", "failed": "✕", "error": "⚠"}.get(verdict, "")
    words = "caught (broken on purpose)" if verdict == "caught" else verdict
    return f'<span class="v v-{_e(verdict)}">{symbol} {_e(words)}</span>'


# -- the header and the summary --------------------------------------------------------------


def _header(document: Mapping[str, Any], tests: Sequence[Mapping[str, Any]], status: str) -> str:
    verdicts = [verdict_of(t) for t in tests]
    cases = sum(int(t.get("cases", 0)) for t in tests)
    timed = [t for t in tests if isinstance(t.get("seconds"), int | float)]
    seconds = sum(float(t["seconds"]) for t in timed)
    facts = [
        ("crash tests", str(len(tests))),
        (
            "verdicts",
            f"{verdicts.count('passed')} passed, {verdicts.count('caught')} broken agents "
            f"caught, {verdicts.count('failed')} failed, {verdicts.count('error')} error(s)",
        ),
        ("cases", str(cases)),
        ("seed", str(document.get("seed", "-"))),
    ]
    if timed:
        facts.append(
            (
                "cases per second of crash-test time",
                _rate(sum(int(t["cases"]) for t in timed), seconds),
            )
        )
        facts.append(("crash-test time, summed over tests", _seconds(seconds)))
    lines = [
        "<header>",
        "<h1>crashpoints report</h1>",
        f'<p class="status s-{_e(status.lower())}">{_e(status)}</p>',
        '<dl class="facts">',
        *(f"<div><dt>{_e(name)}</dt><dd>{_e(value)}</dd></div>" for name, value in facts),
        "</dl>",
    ]
    if verdicts.count("caught"):
        lines.append(
            f'<p class="caught-note">◎ <strong>{verdicts.count("caught")} caught</strong>: '
            "deliberately broken agents (marked <code>expect=</code>), each kept to prove "
            "that the crash tests find its bug. Their invariants were broken, as intended: "
            "that is a pass. A broken agent <em>not</em> caught is a failure.</p>"
        )
    if timed:
        lines.append(
            '<p class="legend">A case is one schedule run in real processes (the worker, '
            "recovery and the queue's redelivery, each killed or let run as the schedule "
            "says); a few per second on a busy machine is normal, a small agent runs tens "
            "on a quiet one (what to expect: <code>docs/performance.md</code> of "
            "pytest-crashpoints). The time is summed over tests: with <code>-n</code> it "
            "exceeds the run's wall time.</p>"
        )
    if document.get("interrupted"):
        lines.append(
            "<p>The run was interrupted: only the crash tests that finished are listed.</p>"
        )
    lines.append("</header>")
    return "\n".join(lines)


def _summary(tests: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for index, test in enumerate(tests, start=1):
        failure = test.get("failure") or {}
        found = ", ".join(str(n) for n in failure.get("invariants", [])) or "-"
        expected = ", ".join(str(n) for n in test.get("expect", [])) or "-"
        cases = int(test.get("cases", 0))
        rows.append(
            "<tr>"
            f'<th scope="row"><a href="#t{index}"><code>{_e(test["nodeid"])}</code></a></th>'
            f"<td>{_verdict(verdict_of(test))}{_limits(test)}</td>"
            f"<td>{_e(expected)}</td><td>{_e(found)}</td>"
            f'<td class="n">{cases}</td>'
            f'<td class="n">{_seconds(test.get("seconds"))}</td>'
            f'<td class="n">{_rate(cases, test.get("seconds"))}</td>'
            "</tr>"
        )
    return "\n".join(
        [
            '<section id="summary" aria-labelledby="summary-h">',
            '<h2 id="summary-h">Summary</h2>',
            '<div class="scroll" role="region" aria-label="Crash tests" tabindex="0">',
            '<table class="tests">',
            "<caption>Crash tests: errors first, then failed, then broken agents caught, then "
            "passed"
            "</caption>",
            "<thead><tr>"
            '<th scope="col">test</th><th scope="col">verdict</th>'
            '<th scope="col">invariants expected</th><th scope="col">invariants broken</th>'
            '<th scope="col">cases</th><th scope="col">time</th><th scope="col">cases/s</th>'
            "</tr></thead>",
            "<tbody>",
            *rows,
            "</tbody></table></div>",
            _legend(),
            _coverage(tests),
            "</section>",
        ]
    )


def _limits(test: Mapping[str, Any]) -> str:
    """What a verdict does not cover, in a few words under it (the test's section says more)."""
    if test.get("failure"):
        return ""
    said = []
    if test.get("unchecked"):
        said.append(_plural(len(test["unchecked"]), "check") + " not possible")
    if test.get("unreached"):
        said.append(_plural(len(test["unreached"]), "point") + " never reached")
    if not said:
        return ""
    return f'<br><span class="limits">⚠ {_e(", ".join(said))}</span>'


def _legend() -> str:
    items = "".join(
        f'<li><a href="#{_anchor(n)}">{n}</a>: {_e(title)}</li>' for n, title in INVARIANTS.items()
    )
    return f'<p class="legend">The invariants, by number:</p><ul class="legend inv">{items}</ul>'


#: What each point of the coverage table is, for a reader who has never seen one.
POINTS: dict[str, str] = {
    "A": "crash point A: after the intent is durable, before the request leaves",
    "B": "crash point B: the provider applied the request, its answer not yet read",
    "C": "crash point C: the answer read, the outcome not yet recorded",
    "D": "the same message delivered twice, or to two workers at once",
    "E": "the task's authority changed (revoked, narrowed, policy, tenant)",
    "F": "the provider's lookups fail or time out",
    "db.commit": "placed by the harness: just before a SQLite commit of the agent",
    "db.committed": "placed by the harness: just after a SQLite commit of the agent",
    "http.write": "placed by the harness: before every write request (POST, PUT, PATCH, "
    "DELETE) to a provider",
    "model.tool_call": "the model's answer that calls a tool has arrived, nothing of it "
    "recorded yet",
    "recovery.starts": "a recovery process started",
    "recovery.claimed": "the reference recovery claimed an attempt (an owner and a lease)",
    "recovery.looked_up": "the reference recovery asked the provider what happened",
    "ledger.write": "the reference ledger wrote a row",
    "lost response": "a fault: the provider applied a request and its answer was lost",
    "refused": "a fault: the provider refused a request before applying anything",
    "session lost": "a fault: an MCP server forgot the session of a call (the client must "
    "initialize again)",
    "duplicated request": "a fault: an MCP server got the same request twice",
    "failed commit": "a fault: a SQLite commit of the worker failed",
    "search lag": "a fault: the provider's search lagged behind its writes",
    "racing recovery": "a fault: two recoveries at once, one waiting while the other runs",
}


def _coverage(tests: Sequence[Mapping[str, Any]]) -> str:
    points: dict[str, list[int]] = {}
    for test in tests:
        for point, row in (test.get("coverage") or {}).items():
            total = points.setdefault(point, [0, 0])
            total[0] += int(row.get("reached", 0))
            total[1] += int(row.get("killed", 0))
    if not points:
        return ""
    # Duplicate deliveries, authority changes, lookup timeouts, lost answers...: faults the
    # harness injects, never a place a process is killed at.
    faults = {p for p in points if p in COVERAGE_KINDS}
    rows = []
    for point in sorted(points, key=lambda p: (p in faults and len(p) > 1, len(p) > 1, p)):
        reached, killed = points[point]
        shown = "a fault, not a kill point" if point in faults else str(killed)
        what = POINTS.get(point, "a fail point of your own")
        rows.append(
            f'<tr><th scope="row">{_e(point)}</th><td>{_e(what)}</td>'
            f'<td class="n">{reached}</td><td class="n">{_e(shown)}</td></tr>'
        )
    return "\n".join(
        [
            '<h3 id="coverage">Coverage</h3>',
            '<table class="coverage">',
            "<caption>Per point, the cases of all tests that reached it (or, for a fault, "
            "had it injected), and those in which a process was killed there. A point "
            "reached but never killed is one the schedules only pause at, or one the tests "
            "did not declare as a kill point (the harness places db.commit, db.committed and "
            "http.write in every case)</caption>",
            '<thead><tr><th scope="col">point</th><th scope="col">what it is</th>'
            '<th scope="col">cases reached</th>'
            '<th scope="col">cases killed</th></tr></thead>',
            "<tbody>",
            *rows,
            "</tbody></table>",
        ]
    )


# -- one test --------------------------------------------------------------------------------


def _test(tid: str, test: Mapping[str, Any]) -> str:
    verdict = verdict_of(test)
    failure = test.get("failure")
    cases = int(test.get("cases", 0))
    about = [f"{_plural(cases, 'case')}"]
    if isinstance(test.get("seconds"), int | float):
        about[0] += f" in {_seconds(test['seconds'])}"
    if test.get("mode"):
        about.append(f"mode {test['mode']}")
    if test.get("seed") is not None:
        about.append(f"seed {test['seed']}")
    if test.get("expect"):
        about.append(
            "a broken agent, expected to break invariant(s) "
            + ", ".join(str(n) for n in test["expect"])
        )
    lines = [
        f'<section id="{tid}" class="test" aria-labelledby="{tid}-h">',
        f'<h2 id="{tid}-h"><code>{_e(test["nodeid"])}</code> {_verdict(verdict)}</h2>',
        f"<p>{_e('; '.join(about))}.</p>",
    ]
    if test.get("error"):
        origin = test.get("error_origin")
        where = f" at {test['error_at']}" if test.get("error_at") else ""
        said = f"Error in {origin}{where}: " if origin else "Error: "
        lines.append(f'<p class="error">{_e(said)}<code>{_e(test["error"])}</code></p>')
    if not failure:
        lines += _gaps(test)
    else:
        lines += _failure(tid, failure)
    lines.append(_schedules(tid, test))
    lines.append('<p class="top"><a href="#summary">Back to the summary</a></p>')
    lines.append("</section>")
    return "\n".join(lines)


def _gaps(test: Mapping[str, Any]) -> list[str]:
    lines = []
    for field, words in (
        ("unreached", "Declared but never reached (it proves nothing about them)"),
        ("unkilled", "Reached but never killed (no kill scheduled there took effect)"),
        ("not_applicable", "Not applicable (left out: nothing would be tested)"),
    ):
        if test.get(field):
            lines.append(f"<p>{_e(words)}: {_e('; '.join(test[field]))}.</p>")
    if test.get("unchecked"):
        lines.append("<p>Not checked (the ledger view reads too little):</p><ul>")
        lines += [f"<li>{_e(line)}</li>" for line in test["unchecked"]]
        lines.append("</ul>")
    return lines


def _readable(case: object) -> bool:
    """Whether a failure's ``case`` is a record this page can draw (version 1, every field
    it reads of the right type); otherwise the text timeline is shown."""
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


def _failure(tid: str, failure: Mapping[str, Any]) -> list[str]:
    case = failure.get("case") if _readable(failure.get("case")) else None
    lines = [
        "<h3>Minimal schedule</h3>",
        f'<p class="schedule">{_e(failure.get("schedule_text", ""))}</p>',
        '<p class="legend">The smallest set of faults found that breaks an invariant, in the '
        "order the harness applied them. \"Kill at B (hit 1)\": the process was killed the "
        "1st time it reached point B. Times (t=) are the harness's clock, which jumps ahead "
        "when the harness waits out a dead worker's lease before recovery runs.</p>",
    ]
    violations = list(case["violations"]) if case else []
    if violations:
        lines += _violations(tid, violations)
    elif failure.get("violations"):
        lines.append("<h3>Violations</h3>")
        lines += [f"<pre>{_e(text)}</pre>" for text in failure["violations"]]
    if failure.get("errors"):
        lines.append("<h3>Harness errors</h3>")
        lines += [f'<pre class="error">{_e(text)}</pre>' for text in failure["errors"]]
    if failure.get("deterministic") is False:
        lines.append(
            '<p class="error">NONDETERMINISM: the same schedule run again ended in another '
            "state (fingerprints "
            f"{_e(str(failure.get('fingerprint', ''))[:12])} and "
            f"{_e(str(failure.get('rerun_fingerprint', ''))[:12])}).</p>"
        )
    if case:
        lines += _timeline(tid, case)
        lines += _attempts(tid, case)
    else:
        recorded = failure.get("case")
        version = recorded.get("version") if isinstance(recorded, Mapping) else None
        if recorded is None:
            why = "This report was written by a release that kept the timeline as text only."
        elif isinstance(version, int) and version > 1:
            why = (
                f"This report keeps the timeline's data in a later format (version {version}) "
                "than this release draws; here is its text."
            )
        else:
            why = "The timeline's data in this report is damaged; here is its text."
        lines += [
            f'<h3 id="{tid}-timeline">Timeline</h3>',
            f"<p>{why}</p>",
            f'<pre class="timeline-text">{_e(failure.get("timeline", ""))}</pre>',
        ]
    lines += _replay(tid, failure)
    return lines


def _violations(tid: str, violations: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [f'<h3 id="{tid}-violations">Violations</h3>', '<ol class="violations">']
    for number, violation in enumerate(violations, start=1):
        n = violation["invariant"]
        evidence = violation.get("evidence") or []
        says = violation.get("title") or (INVARIANTS.get(n, "") if isinstance(n, int) else "")
        lines.append(
            f'<li id="{tid}-v{number}"><a href="#{_anchor(n)}">invariant {_e(n)}</a>'
            + (f" ({_e(says)})" if says else "")
            + f": {_e(violation['message'])}"
        )
        if evidence:
            lines.append(
                f"<details><summary>evidence ({_plural(len(evidence), 'line')})</summary>"
                f"<pre>{_e(chr(10).join(evidence))}</pre></details>"
            )
        lines.append("</li>")
    lines.append("</ol>")
    return lines


# -- the swimlane timeline -------------------------------------------------------------------

_ENDS = {"worker": "✓ completed", "raised": "! raised", "timeout": "⧗ timed out", "died": "† died"}


def _processes_of(row: Mapping[str, Any]) -> list[str]:
    data = row.get("data") or {}
    named = list(data.get("processes") or [])
    if data.get("process") and data["process"] not in named:
        named.insert(0, data["process"])
    return [str(p) for p in named]


def _lanes(timeline: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str], bool]:
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


def _timeline(tid: str, case: Mapping[str, Any]) -> list[str]:
    timeline = list(case.get("timeline") or [])
    violations = list(case.get("violations") or [])
    processes, providers, has_ledger = _lanes(timeline)
    lanes = ["harness", *processes] + (["ledger"] if has_ledger else []) + providers
    column = {lane: i for i, lane in enumerate(lanes)}
    # What each check named, by the violation's place in the list.
    named_requests: dict[tuple[str, str], list[int]] = {}
    named_attempts: dict[str, list[int]] = {}
    for number, violation in enumerate(violations, start=1):
        for ref in violation.get("requests") or []:
            key = (str(ref.get("provider")), str(ref.get("request_id")))
            named_requests.setdefault(key, []).append(number)
        for attempt in violation.get("attempts") or []:
            named_attempts.setdefault(str(attempt), []).append(number)
    attempt_rows = {a["attempt_id"]: a for a in case.get("attempts") or []}
    spans = _lifetimes(timeline)
    # A named row is marked where it took the state it ended in (what the checks read).
    last_event = {
        str(row.get("attempt_id")): index
        for index, row in enumerate(timeline)
        if row["source"] == "ledger"
    }

    head = ['<th scope="col" class="time">time</th>']
    for lane in lanes:
        kind = "proc" if lane in processes else ("prov" if lane in providers else lane)
        title = {"harness": "harness: what the harness did", "ledger": "ledger: transitions"}.get(
            lane, f"provider {lane}: its journal" if kind == "prov" else f"process {lane}"
        )
        shown = f"{lane} (provider)" if kind == "prov" else lane
        head.append(
            f'<th scope="col" class="lane l-{kind}" data-lane="{_e(lane)}" title="{_e(title)}">'
            f"{_e(shown)}</th>"
        )
    body = []
    previous: float | None = None
    for index, row in enumerate(timeline):
        cells: list[list[str]] = [[] for _ in lanes]
        classes: list[set[str]] = [set() for _ in lanes]
        for process, (start, end) in spans.items():
            if start < index < end:
                classes[column[process]].add("alive")
        eid = f"{tid}-e{index + 1}"
        source = row["source"]
        if source == "harness":
            _harness_cell(row, cells, classes, column, spans, index)
        elif source == "ledger":
            col = column["ledger"]
            cells[col].append(_ledger_event(row, attempt_rows, tid))
            actor = str(row.get("actor"))
            if actor in column and actor in processes:
                cells[column[actor]].append(_tick(f"writes the ledger ({row.get('to_state')})"))
            attempt_id = str(row.get("attempt_id"))
            numbers = named_attempts.get(attempt_id, [])
            if numbers and last_event.get(attempt_id) == index:
                classes[col].add("hl")
                cells[col].append(
                    _named([violations[n - 1] for n in numbers], "the ledger row a check named")
                )
        else:
            col = column[str(row.get("provider"))]
            key = (str(row.get("provider")), str(row.get("request_id")))
            numbers = named_requests.get(key, [])
            # Invariant 1 names the effect and its repeat, in the order they happened.
            pairs = [
                _place(violations[n - 1]["requests"], key)
                for n in numbers
                if violations[n - 1]["invariant"] == 1
            ]
            duplicate = any(pairs)
            first_of_two = bool(pairs) and not duplicate
            cells[col].append(
                _journal_event(row, duplicate, first_of_two, attempt_rows, tid)
            )
            sender = str(row.get("process"))
            if sender in column and sender in processes:
                cells[column[sender]].append(_tick(f"sends {row.get('kind')}"))
            if numbers:
                classes[col].add("hl")
                if duplicate:
                    classes[col].add("dup")
                what = "named by the check of"
                if duplicate:
                    what = "the repeat of an effect (invariant 1)"
                elif first_of_two:
                    what = "an effect that was then made again (invariant 1)"
                cells[col].append(_named([violations[n - 1] for n in numbers], what))
        at = float(row.get("at", 0.0))
        jump = "" if previous is None or at == previous else f" (+{at - previous:g} s)"
        row_class = "jump" if previous is not None and at - previous > 1 else ""
        time_class = ' class="same"' if previous is not None and at == previous else ""
        previous = at
        tds = "".join(
            f'<td class="{" ".join(sorted(c))}">{"".join(content)}</td>'
            if c
            else f"<td>{''.join(content)}</td>"
            for content, c in zip(cells, classes, strict=True)
        )
        body.append(
            f'<tr id="{eid}"'
            + (f' class="{row_class}"' if row_class else "")
            + f'><th scope="row"{time_class}>t={at:g}s{_e(jump)}</th>{tds}</tr>'
        )
    return [
        f'<h3 id="{tid}-timeline">Timeline</h3>',
        '<p class="legend">One row per thing that happened, in order; one column (lane) per '
        "process, for the ledger and per provider. In a process's lane: ▶ it starts, "
        "‖ it waits at a gate, ✕ KILLED (a real SIGKILL), ✓ it completed, • it writes the "
        "ledger or sends a request; the bar is its lifetime. In the harness's lane: authority "
        "changes, clock moves, provider faults. ⚠ marks what a check named, linked to the "
        "invariant. A double line above a row: the clock jumped. Open any event for its "
        "journal entry or ledger row.</p>",
        f'<div class="scroll" role="region" aria-label="Timeline, {len(timeline)} rows" '
        'tabindex="0">',
        f'<table class="timeline" data-lanes="{len(lanes)}">',
        "<caption>Swimlane timeline of the failing case (time in harness seconds)</caption>",
        f"<thead><tr>{''.join(head)}</tr></thead>",
        "<tbody>",
        *body,
        "</tbody></table></div>",
    ]


def _place(requests: Sequence[Mapping[str, Any]], key: tuple[str, str]) -> int:
    """Where the journal entry ``key`` (provider, request id) is among ``requests``."""
    return next(
        i
        for i, ref in enumerate(requests)
        if (str(ref.get("provider")), str(ref.get("request_id"))) == key
    )


def _tick(what: str) -> str:
    return f'<span class="act" title="{_e(what)}">•</span>'


def _named(violations: Sequence[Mapping[str, Any]], what: str) -> str:
    """The mark of what checks named: each invariant, linked to its explanation."""
    numbers = sorted({v["invariant"] for v in violations}, key=invariant_key)
    links = []
    for n in numbers:
        message = next(v["message"] for v in violations if v["invariant"] == n)
        links.append(f'<a href="#{_anchor(n)}" title="{_e(message)}">{_e(n)}</a>')
    word = "invariant" if len(numbers) == 1 else "invariants"
    return (
        f'<span class="named" title="{_e(what)}">⚠ {word} {", ".join(links)}</span>'
    )


def _mark(kind: str, label: str, title: str, body: str) -> str:
    return (
        f'<details class="mark m-{kind}"><summary title="{_e(title)}">{_e(label)}</summary>'
        f'<div class="pop">{body}</div></details>'
    )


def _fields(pairs: Iterable[tuple[str, object]]) -> str:
    items = "".join(
        f"<dt>{_e(name)}</dt><dd>{_e(value)}</dd>"
        for name, value in pairs
        if value is not None and value != ""
    )
    return f"<dl>{items}</dl>"


def _harness_cell(
    row: Mapping[str, Any],
    cells: list[list[str]],
    classes: list[set[str]],
    column: Mapping[str, int],
    spans: Mapping[str, tuple[int, int]],
    index: int,
) -> None:
    kind = str(row.get("kind", ""))
    text = str(row.get("text", ""))
    data = row.get("data") or {}
    processes = [p for p in _processes_of(row) if p in column]
    body = _fields([("step", row.get("step")), ("what", text)])
    if kind in ("deliver", "recovery") and processes:
        for process in processes:
            if spans.get(process, (index, index))[0] != index:
                continue
            label = "▶ recovery" if kind == "recovery" else "▶ message"
            if kind == "deliver" and data.get("message") is not None:
                again = " again" if text.startswith("redeliver") else ""
                label = f"▶ message {data['message']}{again}"
            lane = column[process]
            cells[lane].append(_mark("start", label, text, body))
            classes[lane].add("start")
            if data.get("paused") == process:
                cells[lane].append(
                    _mark(
                        "pause",
                        f"‖ then waits at {data.get('pause_at')}",
                        f"{process} waits at {data.get('pause_at')} while the harness acts",
                        body,
                    )
                )
        return
    if kind == "kill" and processes:
        lane = column[processes[0]]
        cells[lane].append(_mark("kill", f"✕ KILLED at {data.get('point', '?')}", text, body))
        classes[lane].add("end")
        return
    if kind in _ENDS and processes:
        lane = column[processes[0]]
        cells[lane].append(_mark(kind, _ENDS[kind], text, body))
        classes[lane].add("end")
        return
    if kind in ("note", "error", "output") and processes:
        label = {"error": "⚠ error", "output": "output"}.get(kind, "note")
        cells[column[processes[0]]].append(_mark(kind, label, text, body))
        return
    label = {
        "authority": "authority " + text.split(": tenant", 1)[0],
        "clock": f"clock +{data.get('seconds', '?')}s",
        "fault": "fault " + text,
        "power": "⚡ " + text.split(":", 1)[0],
        "quiet": "quiet phase",
        "setup": "set-up",
    }.get(kind, f"{kind}: {text}")
    cells[column["harness"]].append(_mark(kind, label, text, body))


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
    if attempt_id in attempts:
        body += f'<p><a href="#{tid}-a-{_e(attempt_id)}">the ledger row of {_e(attempt_id)}</a></p>'
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
            ("key", row.get("operation_key")),
            ("payload hash", row.get("payload_hash")),
            ("object", row.get("object_id")),
            ("tenant", row.get("tenant_id")),
            ("scope", row.get("scope")),
            ("idempotent provider", "yes" if row.get("idempotent") else "no"),
            ("ledger attempt", row.get("attempt_id")),
        ]
    )
    attempt_id = row.get("attempt_id")
    if attempt_id and attempt_id in attempts:
        body += f'<p><a href="#{tid}-a-{_e(attempt_id)}">the ledger row of {_e(attempt_id)}</a></p>'
    title = f"{row.get('provider')} {row.get('request_id')} {row.get('kind')} by {sender}: {effect}"
    if note:
        title = f"{row.get('provider')} {row.get('request_id')} by {sender}: {note}"
    return _mark("dup" if duplicate else "journal", label, title, body)


def _attempts(tid: str, case: Mapping[str, Any]) -> list[str]:
    attempts = list(case.get("attempts") or [])
    if not attempts:
        return []
    named: dict[str, list[int]] = {}
    invariant_of: dict[int, object] = {}
    for number, violation in enumerate(case.get("violations") or [], start=1):
        invariant_of[number] = violation.get("invariant")
        for attempt in violation.get("attempts") or []:
            named.setdefault(str(attempt), []).append(number)
    columns = [
        ("attempt", "attempt_id"),
        ("state", "state"),
        ("task", "task_id"),
        ("tool", "tool_name"),
        ("idempotency key", "idempotency_key"),
        ("provider request id", "provider_request_id"),
        ("result", "result_ref"),
        ("owner", "owner"),
        ("tenant", "tenant_id"),
        ("scope", "scope"),
        ("policy", "policy_version"),
        ("args hash", "args_hash"),
        ("parent", "parent_attempt_id"),
    ]
    head = "".join(f'<th scope="col">{_e(name)}</th>' for name, _ in columns)
    rows = []
    for attempt in attempts:
        attempt_id = str(attempt.get("attempt_id"))
        numbers = named.get(attempt_id, [])
        links = " ".join(
            f'<a href="#{tid}-v{n}">⚠ violation #{n} (invariant {_e(invariant_of[n])})</a>'
            for n in numbers
        )
        cells = []
        for _, field in columns[1:]:
            value = attempt.get(field)
            text = "-" if value is None else str(value)
            if field == "args_hash" and value:
                text = text[:12] + "…"
            cells.append(f"<td>{_e(text)}</td>")
        rows.append(
            f'<tr id="{tid}-a-{_e(attempt_id)}"' + (' class="hl"' if numbers else "") + ">"
            f'<th scope="row"><code>{_e(attempt_id)}</code> {links}</th>{"".join(cells)}</tr>'
        )
    return [
        f'<h3 id="{tid}-ledger">Ledger rows at the end</h3>',
        '<div class="scroll" role="region" aria-label="Ledger rows" tabindex="0">',
        '<table class="attempts">',
        "<caption>Every attempt as the ledger held it after the quiet phase; ⚠ rows a check "
        "named</caption>",
        f"<thead><tr>{head}</tr></thead>",
        "<tbody>",
        *rows,
        "</tbody></table></div>",
    ]


def _replay(tid: str, failure: Mapping[str, Any]) -> list[str]:
    command = failure.get("replay_command")
    lines = []
    if command:
        lines += [
            f'<h3 id="{tid}-replay-h">Replay</h3>',
            '<div class="replay">',
            f'<code id="{tid}-replay">{_e(command)}</code>',
            f'<button type="button" data-copy="{tid}-replay">Copy the command</button>',
            '<span class="copied" role="status" aria-live="polite"></span>',
            "</div>",
        ]
    if failure.get("run_dir"):
        lines.append(f"<p>Run directory (kept): <code>{_e(failure['run_dir'])}</code></p>")
    return lines


def _schedules(tid: str, test: Mapping[str, Any]) -> str:
    schedules = test.get("schedules")
    if schedules is None and verdict_of(test) == "error":
        return "<p>No schedule ran: the test ended in the error above first.</p>"
    if not isinstance(schedules, list) or not all(isinstance(s, Mapping) for s in schedules):
        return "<p>The schedules run are not in this report (written by an older release).</p>"
    failed = sum(1 for s in schedules if s.get("verdict") != "passed")
    rows = []
    for number, run in enumerate(schedules, start=1):
        broken = ", ".join(str(n) for n in run.get("invariants") or []) or "-"
        rows.append(
            f'<tr><td class="n">{number}</td><td>{_e(run.get("phase", ""))}</td>'
            f"<td>{_e(run.get('schedule_text', ''))}</td>"
            f"<td>{_verdict(str(run.get('verdict', '')))}</td><td>{_e(broken)}</td>"
            f'<td class="n">{_seconds(run.get("seconds"))}</td>'
            f"<td><code>{_e(str(run.get('fingerprint', ''))[:12])}</code></td></tr>"
        )
    return "\n".join(
        [
            f'<details class="schedules" id="{tid}-schedules">',
            f"<summary>{_plural(len(schedules), 'schedule')} run: "
            f"{len(schedules) - failed} passed, {failed} failed</summary>",
            '<div class="scroll" role="region" aria-label="Schedules run" tabindex="0">',
            "<table>",
            "<caption>Every case, in the order it ran. From: the phase that chose it "
            "(fault-free: no fault; exhaustive: every schedule up to the bound; hypothesis: "
            "drawn). The fingerprint is a hash of the state the case ended in (the ledger and "
            "the providers' effects): two cases with one fingerprint ended alike</caption>",
            '<thead><tr><th scope="col">#</th><th scope="col">from</th>'
            '<th scope="col">schedule</th><th scope="col">verdict</th>'
            '<th scope="col">invariants broken</th><th scope="col">time</th>'
            '<th scope="col">fingerprint</th></tr></thead>',
            "<tbody>",
            *rows,
            "</tbody></table></div></details>",
        ]
    )


def _invariants(own: Mapping[str, str]) -> str:
    items = []
    for n, title in INVARIANTS.items():
        items.append(
            f'<dt id="{_anchor(n)}">Invariant {n}: {_e(title)}</dt>'
            f"<dd>{_e(EXPLANATIONS[n])}</dd>"
        )
    for name, title in sorted(own.items()):
        items.append(
            f'<dt id="{_anchor(name)}">Invariant {_e(name)}'
            + (f": {_e(title)}" if title else "")
            + "</dt><dd>An invariant of your own, checked on the same evidence after the "
            "quiet phase.</dd>"
        )
    heading = "The six invariants" + (" and your own" if own else "")
    return "\n".join(
        [
            '<section id="invariants" aria-labelledby="invariants-h">',
            f'<h2 id="invariants-h">{heading}</h2>',
            "<p>Checked after every step of a schedule and after the quiet phase (faults "
            "lifted, recovery run until nothing changes), against the providers' journals.</p>",
            '<dl class="invariants">',
            *items,
            "</dl>",
            "</section>",
        ]
    )


_CSS = """
:root{--fg:#1b1f24;--muted:#57606a;--line:#d0d7de;--bg:#fff;--soft:#f6f8fa;--bad:#b3261e;
--badbg:#ffebe9;--good:#1a7f37;--goodbg:#dafbe1;--warn:#7d4e00;--warnbg:#fff8c5;--link:#0550ae}
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--fg);
background:var(--bg)}
header,main{max-width:1400px;margin:0 auto;padding:0 1.5rem}
header{padding-top:1rem;border-bottom:1px solid var(--line)}
h1{font-size:1.6rem;margin:.2rem 0}
h2{font-size:1.25rem;margin:2rem 0 .5rem;padding-top:.5rem;border-top:2px solid var(--line)}
h3{font-size:1.05rem;margin:1.2rem 0 .4rem}
a{color:var(--link)}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.85em}
pre{background:var(--soft);padding:.6rem;overflow:auto;white-space:pre-wrap;word-break:break-word}
:focus-visible{outline:3px solid #0969da;outline-offset:2px}
.skip{position:absolute;left:-999px}.skip:focus{left:1rem;top:1rem;background:#fff;padding:.4rem}
.status{display:inline-block;font-weight:700;padding:.1rem .6rem;border:2px solid}
.s-failed,.s-interrupted{color:var(--bad);background:var(--badbg)}
.s-passed{color:var(--good);background:var(--goodbg)}
.facts{display:flex;flex-wrap:wrap;gap:.4rem 2rem;margin:.6rem 0 1rem}
.facts dt{font-size:.8rem;color:var(--muted)}.facts dd{margin:0;font-weight:600}
table{border-collapse:collapse;margin:.4rem 0}
caption{text-align:left;color:var(--muted);font-size:.85rem;padding:.2rem 0}
th,td{border:1px solid var(--line);padding:.25rem .5rem;text-align:left;vertical-align:top}
thead th{background:var(--soft)}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.v{font-weight:700;white-space:nowrap}.v-failed,.v-error{color:var(--bad)}
.v-passed{color:var(--good)}.v-caught{color:var(--warn)}
.limits{font-size:.75rem;color:var(--warn)}
table.tests th code{word-break:break-all}
.m-journal summary,.m-dup summary{white-space:normal}
.caught-note{background:var(--warnbg);color:var(--warn);padding:.3rem .6rem;max-width:75em}
ul.inv{margin:.2rem 0 .8rem;padding-left:1.2rem;columns:2 28em}
.scroll{overflow:auto;max-width:100%}
.error{color:var(--bad)}
.violations li{margin:.4rem 0}
.legend{color:var(--muted);font-size:.85rem;max-width:75em}
.timeline{font-size:.8rem}
.timeline th.time{min-width:6.5rem}
.timeline tbody th{font-weight:400;white-space:nowrap;color:var(--fg);background:var(--soft);
position:sticky;left:0;z-index:1}
.timeline tbody th.same{color:#8c959f}
.timeline thead th{position:sticky;top:0;z-index:2}
.timeline tr.jump th,.timeline tr.jump td{border-top:3px double var(--muted)}
.timeline td{min-width:5.5rem;max-width:22rem;padding:.1rem .3rem}
.timeline .l-ledger,.timeline .l-prov{min-width:14rem}
.timeline td.alive{background:linear-gradient(90deg,transparent 0 .55rem,#8c959f .55rem .8rem,
transparent .8rem)}
.mark summary{cursor:pointer;white-space:nowrap;overflow:hidden;text-overflow:ellipsis;
max-width:22rem;list-style:none;padding:0 .2rem;border-radius:3px}
.mark summary::-webkit-details-marker{display:none}
.mark[open] summary{background:var(--soft)}
.pop{white-space:normal;background:var(--bg);border:1px solid var(--line);padding:.2rem .4rem;
margin:.1rem 0 .3rem;min-width:14rem}
.pop dl{display:grid;grid-template-columns:auto 1fr;gap:0 .5rem;margin:0}
.pop dt{color:var(--muted)}.pop dd{margin:0;word-break:break-all}
.m-kill summary{color:#fff;background:var(--bad);font-weight:700}
.m-pause summary{border:1px dashed var(--warn);color:var(--warn)}
.m-start summary{font-weight:600}
.m-authority summary,.m-fault summary,.m-clock summary{background:var(--warnbg);color:var(--warn)}
.m-dup summary{font-weight:700;color:var(--bad)}
td.hl{outline:2px solid var(--bad);outline-offset:-2px;background:var(--badbg)}
td.dup{outline-width:3px}
.named{display:block;font-size:.75rem;color:var(--bad);font-weight:600;white-space:nowrap}
.named a{color:var(--bad)}
.act{color:var(--muted);padding-left:.9rem}
.attempts tr.hl th,.attempts tr.hl td{background:var(--badbg)}
.attempts th code{white-space:nowrap}.attempts th a{display:block}
.attempts a{color:var(--bad);font-weight:600}
.replay{display:flex;flex-wrap:wrap;gap:.5rem;align-items:center}
.replay code{background:var(--soft);padding:.3rem .5rem;word-break:break-all;max-width:100%}
button{font:inherit;padding:.2rem .7rem;cursor:pointer}
.copied{color:var(--good)}
.schedules{margin:1rem 0}.schedules summary{cursor:pointer;font-weight:600}
.invariants dt{font-weight:700;margin-top:.6rem}.invariants dd{margin:0 0 0 1rem;max-width:60em}
.top{font-size:.85rem}
@media print{.scroll{overflow:visible}.skip,button{display:none}}
"""

_JS = """
(function () {
  "use strict";
  function copy(button) {
    var source = document.getElementById(button.getAttribute("data-copy"));
    var status = button.parentNode.querySelector(".copied");
    var text = source ? source.textContent : "";
    function said(words) { if (status) { status.textContent = words; } }
    function fallback() {
      var range = document.createRange();
      range.selectNodeContents(source);
      var selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      var ok = false;
      try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
      said(ok ? "Copied." : "Selected: press Ctrl+C (Cmd+C) to copy.");
    }
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(function () { said("Copied."); }, fallback);
    } else {
      fallback();
    }
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button[data-copy]") : null;
    if (button) { copy(button); }
  });
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") { return; }
    var open = document.querySelectorAll("details.mark[open]");
    for (var i = 0; i < open.length; i++) {
      open[i].open = false;
      if (open[i].contains(document.activeElement)) { open[i].querySelector("summary").focus(); }
    }
  });
})();
"""
