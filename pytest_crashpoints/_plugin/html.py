"""The HTML report: one static, self-contained page drawn from the JSON report.

Written by ``--crashpoints-html``, ``crashpoints gate`` and ``crashpoints show --html``. The
page's skeleton, its CSS and its little JavaScript (the copy buttons, Escape to close a
detail) are files of the package (``_plugin/page/``), inlined into the one file written: no
network, and the page reads fine with scripts off. What it shows:

- a summary: the verdict, the tests, the cases and cases per second, the coverage table;
- for each failing test (broken agents caught included) the violations, a swimlane timeline
  (``swimlane.py``) and the ledger's rows at the end, what a check named highlighted;
- for every test, the schedules it ran, collapsed.

Accessible: landmarks and headings, tables with header cells, native ``<details>`` for what
opens, every mark and highlight in words and symbols as well as colour.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib.resources import files
from string import Template
from typing import Any

from .._harness.case.schedule import COVERAGE_KINDS
from .._harness.verdict.invariants import INVARIANTS
from .markup import anchor, escape
from .summary import broken_invariants, verdict_of
from .swimlane import readable, swimlane

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
    sections = [
        _summary(tests),
        *(_test(f"t{index}", test) for index, test in enumerate(tests, start=1)),
        _invariants(_own_invariants(tests)),
    ]
    return Template(_page_file("report.html")).substitute(
        status=status,
        count=len(tests),
        style=_page_file("report.css").strip(),
        script=_page_file("report.js").strip(),
        header=_header(document, tests, status),
        main="\n".join(sections),
    )


def _page_file(name: str) -> str:
    """A file of the page's (``_plugin/page/``), as shipped in the package."""
    return files("pytest_crashpoints._plugin").joinpath(f"page/{name}").read_text(encoding="utf-8")


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
        for also in failure.get("also") or []:
            for name in also.get("invariants") or []:
                if isinstance(name, str):
                    own.setdefault(name, str((also.get("titles") or {}).get(name, "")))
        case = failure.get("case") if readable(failure.get("case")) else None
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
    return f'<span class="v v-{escape(verdict)}">{symbol} {escape(words)}</span>'


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
        f'<p class="status s-{escape(status.lower())}">{escape(status)}</p>',
        '<dl class="facts">',
        *(f"<div><dt>{escape(name)}</dt><dd>{escape(value)}</dd></div>" for name, value in facts),
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
        also = [n for n in broken_invariants(failure) if n not in failure.get("invariants", [])]
        if also:  # broken by schedules found after the failure
            found += f"; also {', '.join(str(n) for n in also)}"
        expected = ", ".join(str(n) for n in test.get("expect", [])) or "-"
        cases = int(test.get("cases", 0))
        rows.append(
            "<tr>"
            f'<th scope="row"><a href="#t{index}"><code>{escape(test["nodeid"])}</code></a></th>'
            f"<td>{_verdict(verdict_of(test))}{_limits(test)}</td>"
            f"<td>{escape(expected)}</td><td>{escape(found)}</td>"
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
    return f'<br><span class="limits">⚠ {escape(", ".join(said))}</span>'


def _legend() -> str:
    items = "".join(
        f'<li><a href="#{anchor(n)}">{n}</a>: {escape(title)}</li>'
        for n, title in INVARIANTS.items()
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
            f'<tr><th scope="row">{escape(point)}</th><td>{escape(what)}</td>'
            f'<td class="n">{reached}</td><td class="n">{escape(shown)}</td></tr>'
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
        f'<h2 id="{tid}-h"><code>{escape(test["nodeid"])}</code> {_verdict(verdict)}</h2>',
        f"<p>{escape('; '.join(about))}.</p>",
    ]
    if test.get("error"):
        origin = test.get("error_origin")
        where = f" at {test['error_at']}" if test.get("error_at") else ""
        said = f"Error in {origin}{where}: " if origin else "Error: "
        lines.append(f'<p class="error">{escape(said)}<code>{escape(test["error"])}</code></p>')
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
            lines.append(f"<p>{escape(words)}: {escape('; '.join(test[field]))}.</p>")
    if test.get("unchecked"):
        lines.append("<p>Not checked (the ledger view reads too little):</p><ul>")
        lines += [f"<li>{escape(line)}</li>" for line in test["unchecked"]]
        lines.append("</ul>")
    return lines


def _failure(tid: str, failure: Mapping[str, Any]) -> list[str]:
    case = failure.get("case") if readable(failure.get("case")) else None
    lines = [
        "<h3>Minimal schedule</h3>",
        f'<p class="schedule">{escape(failure.get("schedule_text", ""))}</p>',
        '<p class="legend">The smallest set of faults found that breaks an invariant, in the '
        'order the harness applied them. "Kill at B (hit 1)": the process was killed the '
        "1st time it reached point B. Times (t=) are the harness's clock, which jumps ahead "
        "when the harness waits out a dead worker's lease before recovery runs.</p>",
    ]
    violations = list(case["violations"]) if case else []
    if violations:
        lines += _violations(tid, violations)
    elif failure.get("violations"):
        lines.append("<h3>Violations</h3>")
        lines += [f"<pre>{escape(text)}</pre>" for text in failure["violations"]]
    if failure.get("errors"):
        lines.append("<h3>Harness errors</h3>")
        lines += [f'<pre class="error">{escape(text)}</pre>' for text in failure["errors"]]
    if failure.get("deterministic") is False:
        lines.append(
            '<p class="error">NONDETERMINISM: the same schedule run again ended in another '
            "state (fingerprints "
            f"{escape(str(failure.get('fingerprint', ''))[:12])} and "
            f"{escape(str(failure.get('rerun_fingerprint', ''))[:12])}).</p>"
        )
    if case:
        lines += swimlane(tid, case)
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
            f'<pre class="timeline-text">{escape(failure.get("timeline", ""))}</pre>',
        ]
    lines += _replay(tid, failure)
    lines += _also(tid, failure)
    return lines


def _also(tid: str, failure: Mapping[str, Any]) -> list[str]:
    """Each schedule found after the failure for invariants it did not break: what it
    breaks, its schedule, violations and replay command."""
    lines = []
    for number, also in enumerate(failure.get("also") or [], start=1):
        broken = ", ".join(str(n) for n in also.get("invariants", []))
        aid = f"{tid}-also{number}"
        lines += [
            f'<h3 id="{aid}-h">Also breaks invariant(s) {escape(broken)}</h3>',
            f'<p class="schedule">{escape(also.get("schedule_text", ""))}</p>',
            *(f"<pre>{escape(text)}</pre>" for text in also.get("violations", [])),
            '<div class="replay">',
            f'<code id="{aid}-replay">{escape(also.get("replay_command", ""))}</code>',
            f'<button type="button" data-copy="{aid}-replay">Copy the command</button>',
            '<span class="copied" role="status" aria-live="polite"></span>',
            "</div>",
        ]
    if failure.get("also_stopped"):
        lines.append(
            '<p class="error">The search for other invariants stopped early: '
            f"{escape(failure['also_stopped'])}</p>"
        )
    return lines


def _violations(tid: str, violations: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [f'<h3 id="{tid}-violations">Violations</h3>', '<ol class="violations">']
    for number, violation in enumerate(violations, start=1):
        n = violation["invariant"]
        evidence = violation.get("evidence") or []
        says = violation.get("title") or (INVARIANTS.get(n, "") if isinstance(n, int) else "")
        lines.append(
            f'<li id="{tid}-v{number}"><a href="#{anchor(n)}">invariant {escape(n)}</a>'
            + (f" ({escape(says)})" if says else "")
            + f": {escape(violation['message'])}"
        )
        if evidence:
            lines.append(
                f"<details><summary>evidence ({_plural(len(evidence), 'line')})</summary>"
                f"<pre>{escape(chr(10).join(evidence))}</pre></details>"
            )
        lines.append("</li>")
    lines.append("</ol>")
    return lines


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
    head = "".join(f'<th scope="col">{escape(name)}</th>' for name, _ in columns)
    rows = []
    for attempt in attempts:
        attempt_id = str(attempt.get("attempt_id"))
        numbers = named.get(attempt_id, [])
        links = " ".join(
            f'<a href="#{tid}-v{n}">⚠ violation #{n} (invariant {escape(invariant_of[n])})</a>'
            for n in numbers
        )
        cells = []
        for _, field in columns[1:]:
            value = attempt.get(field)
            text = "-" if value is None else str(value)
            if field == "args_hash" and value:
                text = text[:12] + "…"
            cells.append(f"<td>{escape(text)}</td>")
        rows.append(
            f'<tr id="{tid}-a-{escape(attempt_id)}"' + (' class="hl"' if numbers else "") + ">"
            f'<th scope="row"><code>{escape(attempt_id)}</code> {links}</th>{"".join(cells)}</tr>'
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
            f'<code id="{tid}-replay">{escape(command)}</code>',
            f'<button type="button" data-copy="{tid}-replay">Copy the command</button>',
            '<span class="copied" role="status" aria-live="polite"></span>',
            "</div>",
        ]
    if failure.get("run_dir"):
        lines.append(f"<p>Run directory (kept): <code>{escape(failure['run_dir'])}</code></p>")
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
            f'<tr><td class="n">{number}</td><td>{escape(run.get("phase", ""))}</td>'
            f"<td>{escape(run.get('schedule_text', ''))}</td>"
            f"<td>{_verdict(str(run.get('verdict', '')))}</td><td>{escape(broken)}</td>"
            f'<td class="n">{_seconds(run.get("seconds"))}</td>'
            f"<td><code>{escape(str(run.get('fingerprint', ''))[:12])}</code></td></tr>"
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
            f'<dt id="{anchor(n)}">Invariant {n}: {escape(title)}</dt>'
            f"<dd>{escape(EXPLANATIONS[n])}</dd>"
        )
    for name, title in sorted(own.items()):
        items.append(
            f'<dt id="{anchor(name)}">Invariant {escape(name)}'
            + (f": {escape(title)}" if title else "")
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
