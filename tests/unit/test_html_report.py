"""The HTML report: what it draws from a JSON report, and that it marks only what checks named.

The page is read back with the standard library's HTML parser: the timeline's lanes, the cell
each event lands in, its classes, marks and links. (The real browser test is in
tests/acceptance/test_html_report.py.)
"""

from __future__ import annotations

import copy
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from pytest_crashpoints.cli import main


def _row(source: str, at: float, **fields: Any) -> dict[str, Any]:
    return {"source": source, "at": at, "text": fields.pop("text", ""), **fields}


def _harness(at: float, step: int, kind: str, text: str, **data: Any) -> dict[str, Any]:
    return _row("harness", at, step=step, kind=kind, text=text, data=data)


def _ledger(at: float, before: str | None, after: str, actor: str) -> dict[str, Any]:
    return _row(
        "ledger",
        at,
        attempt_id="a-1",
        from_state=before,
        to_state=after,
        actor=actor,
        reason="why",
    )


def _journal(at: float, request_id: str, process: str, **more: Any) -> dict[str, Any]:
    fields = {
        "provider": "email",
        "request_id": request_id,
        "kind": "mail.send",
        "status": 202,
        "effect_applied": True,
        "idempotent": False,
        "operation_key": "inv-7:send",
        "payload_hash": "p" * 64,
        "object_id": None,
        "process": process,
        "message": 0 if process.startswith("worker") else None,
        "task_id": "t-1",
        "tenant_id": "tenant-7",
        "scope": "email:write",
        "attempt_id": "a-1",
        **more,
    }
    return _row("journal", at, **fields)


DUPLICATE = {
    "invariant": 1,
    "title": "no non-idempotent side effect happens twice",
    "message": "message 0's mail.send happened twice at email",
    "attempts": ["a-1"],
    "requests": [
        {"provider": "email", "request_id": "r-1"},
        {"provider": "email", "request_id": "r-2"},
    ],
    "evidence": ["journal: email r-1 ...", "journal: email r-2 ..."],
}

CASE = {
    "version": 1,
    "timeline": [
        _harness(0, 0, "setup", "1 message(s); providers: email"),
        _harness(1, 1, "deliver", "message 0 to worker-1", process="worker-1", message=0),
        _ledger(1, None, "INTENT_RECORDED", "worker-1"),
        _ledger(1, "INTENT_RECORDED", "DISPATCHED", "worker-1"),
        _journal(1, "r-1", "worker-1"),
        _harness(1, 1, "kill", "worker-1 was killed at B (hit 1)", process="worker-1",
                 point="B", hit=1),
        _harness(2, 2, "authority", "E: revoke for t-1: tenant tenant-7 -> revoked",
                 message=0, task="t-1"),
        _harness(1, 2, "quiet", "quiet phase: every fault lifted"),
        _harness(401, 2, "recovery", "recovery-2 starts", process="recovery-2"),
        _journal(401, "r-9", "recovery-2", kind="messages.get", status=200,
                 effect_applied=False),
        _journal(401, "r-2", "recovery-2"),
        _ledger(401, "DISPATCHED", "OUTCOME_CONFIRMED", "recovery-2"),
        _harness(401, 2, "worker", "recovery-2 completed", process="recovery-2"),
    ],
    "attempts": [
        {
            "attempt_id": "a-1",
            "task_id": "t-1",
            "tool_name": "send_email",
            "idempotency_key": "inv-7:send",
            "state": "OUTCOME_CONFIRMED",
            "args_hash": "h" * 64,
            "args": {"to": "a@example.com"},
            "provider_request_id": "r-2",
            "result_ref": "msg-2",
            "tenant_id": "tenant-7",
            "scope": "email:write",
            "policy_version": "p1",
            "owner": "recovery-2",
            "parent_attempt_id": None,
            "attempt_count": 2,
        }
    ],
    "violations": [DUPLICATE],
}

SCHEDULES = [
    {"phase": "fault-free", "schedule_text": "deliver message 0", "verdict": "passed",
     "invariants": [], "fingerprint": "f" * 64, "seconds": 0.5},
    {"phase": "exhaustive", "schedule_text": "deliver message 0, kill at B (hit 1)",
     "verdict": "failed", "invariants": [1], "fingerprint": "e" * 64, "seconds": 0.7},
]


def document(**failure_changes: Any) -> dict[str, Any]:
    failure = {
        "schedule": {"version": 1, "steps": [{"step": "Deliver", "message": 0}]},
        "schedule_text": "deliver message 0, kill at B (hit 1)",
        "violations": ["invariant 1 (...): message 0's mail.send happened twice at email"],
        "invariants": [1],
        "errors": [],
        "timeline": "t=      1s [ 1] kill       worker-1 was killed at B (hit 1)",
        "replay_command": "pytest test_x.py::test_broken --crashpoints-replay=TOKEN",
        "token": "TOKEN",
        "run_dir": None,
        "fingerprint": "e" * 64,
        "deterministic": True,
        "rerun_fingerprint": "e" * 64,
        "case": copy.deepcopy(CASE),
        **failure_changes,
    }
    return {
        "version": 1,
        "seed": 7,
        "interrupted": False,
        "tests": [
            {
                "nodeid": "test_x.py::test_broken",
                "outcome": "failed",
                "verdict": "failed",
                "expect": [],
                "cases": 2,
                "seconds": 1.2,
                "coverage": {"A": {"reached": 2, "killed": 0}, "B": {"reached": 2, "killed": 1}},
                "failure": failure,
                "schedules": copy.deepcopy(SCHEDULES),
            },
            {
                "nodeid": "test_x.py::test_good <script>",
                "outcome": "passed",
                "verdict": "passed",
                "expect": [],
                "cases": 2,
                "seconds": 0.8,
                "coverage": {"A": {"reached": 2, "killed": 1}},
                "failure": None,
                "schedules": [dict(SCHEDULES[0]), {**SCHEDULES[1], "verdict": "passed",
                                                   "invariants": []}],
            },
        ],
    }


def render(doc: dict[str, Any], tmp_path: Path) -> str:
    """The page ``crashpoints show --html`` writes for ``doc``."""
    report = tmp_path / "report.json"
    report.write_text(json.dumps(doc), encoding="utf-8")
    out = tmp_path / "report.html"
    assert main(["show", "--html", str(report), "-o", str(out)]) == 0
    return out.read_text(encoding="utf-8")


class Timeline(HTMLParser):
    """The first timeline table of a page: its lanes, and per row the cells' text, classes
    and links."""

    def __init__(self) -> None:
        super().__init__()
        self.lanes: list[str] = []
        self.rows: list[list[dict[str, Any]]] = []
        self._depth = 0  # inside the timeline table
        self._done = False
        self._cell: dict[str, Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if self._done:
            return
        if tag == "table" and "timeline" in (a.get("class") or ""):
            self._depth = 1
            return
        if not self._depth:
            return
        if tag == "th" and a.get("data-lane"):
            self.lanes.append(a["data-lane"] or "")
        elif tag == "tr" and self.lanes:
            self.rows.append([])
        elif tag == "td":
            self._cell = {"classes": set((a.get("class") or "").split()), "text": "",
                          "links": [], "marks": []}
            self.rows[-1].append(self._cell)
        elif tag == "a" and self._cell is not None:
            self._cell["links"].append(a.get("href"))
        elif tag == "details" and self._cell is not None:
            self._cell["marks"].append(a.get("class"))

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._cell = None
        elif tag == "table" and self._depth:
            self._depth = 0
            self._done = True

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell["text"] += data


def timeline(page: str) -> Timeline:
    parser = Timeline()
    parser.feed(page)
    return parser


@pytest.fixture
def page(tmp_path: Path) -> str:
    """The page of the example report, :func:`document`."""
    return render(document(), tmp_path)


@pytest.fixture
def parsed(page: str) -> Timeline:
    """The timeline of the example report's page."""
    return timeline(page)


def cell(parsed: Timeline, lane: str, fragment: str) -> dict[str, Any]:
    """The one cell of ``lane`` whose text has ``fragment``."""
    column = parsed.lanes.index(lane)
    found = [row[column] for row in parsed.rows if fragment in row[column]["text"]]
    assert len(found) == 1, (lane, fragment, found)
    return found[0]


def test_the_page_is_self_contained_and_escapes_what_it_shows(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "<link" not in page and "<script src" not in page
    assert "test_good <script>" not in page and "test_good &lt;script&gt;" in page
    assert '<html lang="en">' in page and '<main id="main">' in page


def test_the_summary_counts_and_links_each_test(page: str) -> None:
    assert "<title>crashpoints report: FAILED, 2 crash test(s)</title>" in page
    assert "1 passed, 0 broken agents caught, 1 failed" in page
    # 4 cases in 2.0 s, and each test's row links to its section.
    assert "<dt>cases per second of crash-test time</dt><dd>2.0</dd>" in page
    assert '<a href="#t1"><code>test_x.py::test_broken</code></a>' in page
    assert '<section id="t1" class="test"' in page and '<section id="t2" class="test"' in page
    # The coverage table adds the tests up.
    assert re.search(
        r'<th scope="row">A</th><td>crash point A: [^<]*</td><td class="n">4</td>'
        r'<td class="n">1</td>',
        page,
    )


def test_one_lane_per_process_the_ledger_and_each_provider(parsed: Timeline) -> None:
    assert parsed.lanes == ["harness", "worker-1", "recovery-2", "ledger", "email"]
    assert len(parsed.rows) == len(CASE["timeline"])


def test_kills_starts_and_authority_changes_are_marks_in_their_lane(parsed: Timeline) -> None:
    kill = cell(parsed, "worker-1", "KILLED at B")
    assert kill["marks"] == ["mark m-kill"] and "end" in kill["classes"]
    assert cell(parsed, "worker-1", "▶ message 0")["marks"] == ["mark m-start"]
    assert cell(parsed, "recovery-2", "✓ completed")["marks"] == ["mark m-worker"]
    assert cell(parsed, "harness", "authority E: revoke for t-1")["marks"] == ["mark m-authority"]
    # The recovery lives from its start to its end: the rows between show its bar.
    column = parsed.lanes.index("recovery-2")
    alive = ["alive" in row[column]["classes"] for row in parsed.rows]
    assert alive == [False] * 9 + [True, True, True, False]


def test_the_duplicate_is_marked_where_the_check_found_it_and_nothing_else(
    parsed: Timeline,
) -> None:
    first = cell(parsed, "email", "1st of 2: mail.send 202 EFFECT")
    repeat = cell(parsed, "email", "DUPLICATE mail.send 202 EFFECT")
    assert {"hl"} <= first["classes"] and {"hl", "dup"} <= repeat["classes"]
    assert "#inv-1" in repeat["links"] and "⚠" in repeat["text"]  # not by colour alone
    lookup = cell(parsed, "email", "messages.get 200 no effect")
    assert not lookup["classes"] & {"hl", "dup"} and "#inv-1" not in lookup["links"]
    # The row the check named is marked once, where it took the state it ended in.
    ledger = parsed.lanes.index("ledger")
    marked = [row[ledger]["text"] for row in parsed.rows if "hl" in row[ledger]["classes"]]
    assert len(marked) == 1 and "OUTCOME_CONFIRMED" in marked[0]


def test_what_no_check_named_is_not_marked(tmp_path: Path) -> None:
    doc = document()
    doc["tests"][0]["failure"]["case"]["violations"][0]["requests"] = []
    parsed = timeline(render(doc, tmp_path))
    email = parsed.lanes.index("email")
    assert not any("hl" in row[email]["classes"] for row in parsed.rows)
    assert "DUPLICATE" not in "".join(row[email]["text"] for row in parsed.rows)


def test_events_open_to_their_journal_entry_and_ledger_row(page: str) -> None:
    # A journal entry's fields, and a link to the row it is tied to.
    assert "<dt>request</dt><dd>r-2</dd>" in page
    assert "<dt>by</dt><dd>recovery-2</dd>" in page
    assert '<a href="#t1-a-a-1">the ledger row of a-1</a>' in page
    assert '<tr id="t1-a-a-1" class="hl">' in page
    # Every in-page link lands somewhere.
    ids = set(re.findall(r'id="([^"]+)"', page))
    targets = set(re.findall(r'href="#([^"]+)"', page))
    assert targets and targets <= ids, targets - ids


def test_the_replay_command_has_a_copy_button(page: str) -> None:
    assert (
        '<code id="t1-replay">pytest test_x.py::test_broken --crashpoints-replay=TOKEN</code>'
        in page
    )
    assert '<button type="button" data-copy="t1-replay">Copy the command</button>' in page


def test_each_test_lists_its_schedules_collapsed(page: str) -> None:
    assert page.count('<details class="schedules"') == 2
    assert "<details open" not in page
    assert "<summary>2 schedules run: 1 passed, 1 failed</summary>" in page
    assert "<summary>2 schedules run: 2 passed, 0 failed</summary>" in page
    assert "deliver message 0, kill at B (hit 1)</td>" in page


def test_a_report_without_the_data_shows_the_text_timeline(tmp_path: Path) -> None:
    old = document(case=None)
    del old["tests"][0]["schedules"]
    page = render(old, tmp_path)
    assert "kept the timeline as text only" in page
    assert "worker-1 was killed at B (hit 1)</pre>" in page
    assert "not in this report (written by an older release)" in page
    later = document()
    later["tests"][0]["failure"]["case"]["version"] = 2
    assert "timeline's data in a later format (version 2)" in render(later, tmp_path)
    # A damaged record: the report is refused (its schema), with one line.
    damaged = document()
    damaged["tests"][0]["failure"]["case"]["timeline"][1]["source"] = "elsewhere"
    (tmp_path / "damaged.json").write_text(json.dumps(damaged))
    assert main(["show", "--html", str(tmp_path / "damaged.json")]) == 2
    assert not (tmp_path / "damaged.html").exists()


@pytest.mark.parametrize(
    ("expect", "counts"),
    [([1], "0 passed, 1 broken agents caught, 0 failed"), ([], "1 passed, 0 broken")],
    ids=["caught", "passed"],
)
def test_the_page_says_passed_when_nothing_failed(
    expect: list[int], counts: str, tmp_path: Path
) -> None:
    doc = document()
    doc["tests"][0].update(outcome="passed", expect=expect)
    del doc["tests"][1]
    page = render(doc, tmp_path)
    assert '<p class="status s-passed">passed</p>' in page
    assert counts in page


def test_an_invariant_of_your_own_is_named_and_explained(tmp_path: Path) -> None:
    doc = document()
    failure = doc["tests"][0]["failure"]
    failure["invariants"] = [1, "refund_within_charge"]
    failure["titles"] = {"refund_within_charge": "a refund never exceeds its charge"}
    failure["case"]["violations"].append(
        {
            "invariant": "refund_within_charge",
            "title": "a refund never exceeds its charge",
            "message": "refund r-2 of 50 EUR exceeds its charge of 42 EUR",
            "attempts": [],
            "requests": [{"provider": "email", "request_id": "r-9"}],
            "evidence": [],
        }
    )
    page = render(doc, tmp_path)
    assert (
        '<a href="#inv-own-refund_within_charge">invariant refund_within_charge</a> '
        "(a refund never exceeds its charge): refund r-2" in page
    )
    assert (
        '<dt id="inv-own-refund_within_charge">Invariant refund_within_charge: a refund never '
        "exceeds its charge</dt>" in page
    )
    parsed = timeline(page)
    lookup = cell(parsed, "email", "messages.get 200 no effect")
    assert "hl" in lookup["classes"] and lookup["links"][-1] == "#inv-own-refund_within_charge"
