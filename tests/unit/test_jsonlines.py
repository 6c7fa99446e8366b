"""The JSON-lines ledger view: a file of state changes, merged per attempt."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_crashpoints import JSONLinesLedgerView, State, args_hash
from pytest_crashpoints.errors import LedgerError
from pytest_crashpoints.harness import unchecked

STATES = {
    "pending": State.DISPATCHED,
    "sent": State.OUTCOME_CONFIRMED,
    "review": State.MANUAL_REVIEW,
}


def write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_each_attempt_is_its_lines_merged_and_each_state_change_an_event(tmp_path: Path):
    path = write(
        tmp_path / "jobs.jsonl",
        '{"id": "j-1", "task": "t-1", "state": "pending", "args": "{\\"to\\": \\"ada\\"}",'
        ' "owner": "worker-1", "updated_at": 1.0, "created_at": 1.0}',
        '{"id": "j-2", "task": "t-2", "state": "pending", "owner": "worker-1", "updated_at": 2.0,'
        ' "created_at": 2.0}',
        '{"id": "j-1", "state": "sent", "request": "sg_1", "owner": "worker-1", "updated_at": 3.0}',
        '{"id": "j-2", "state": "review", "owner": "worker-2", "updated_at": 4.0,'
        ' "reason": "maybe sent"}',
    )
    view = JSONLinesLedgerView(
        path,
        fields={
            "attempt_id": "id",
            "task_id": "task",
            "args_json": "args",
            "provider_request_id": "request",
        },
        states=STATES,
    )
    one, two = view.attempts()
    assert (one.attempt_id, one.state, one.provider_request_id) == (
        "j-1",
        State.OUTCOME_CONFIRMED,
        "sg_1",
    )
    assert one.args == {"to": "ada"} and one.args_hash == args_hash({"to": "ada"})
    assert (two.state, two.owner, two.args, two.provider_request_id) == (
        State.MANUAL_REVIEW,
        "worker-2",
        {},
        None,
    )
    assert [
        (e.attempt_id, e.from_state, e.to_state, e.at, e.actor, e.reason) for e in view.events()
    ] == [
        ("j-1", None, State.DISPATCHED, 1.0, "worker-1", "jobs.jsonl:1"),
        ("j-2", None, State.DISPATCHED, 2.0, "worker-1", "jobs.jsonl:2"),
        ("j-1", State.DISPATCHED, State.OUTCOME_CONFIRMED, 3.0, "worker-1", "jobs.jsonl:3"),
        ("j-2", State.DISPATCHED, State.MANUAL_REVIEW, 4.0, "worker-2", "maybe sent"),
    ]
    assert view.queue() == []
    assert "invariant 3 (arguments): no args_json column" not in unchecked(view.provides)
    assert "invariant 5 (an owner): no owner column" not in unchecked(view.provides)


def test_a_missing_file_is_an_empty_ledger_and_a_torn_last_line_is_ignored(tmp_path: Path):
    path = tmp_path / "jobs.jsonl"
    view = JSONLinesLedgerView(path, states=STATES)
    assert view.attempts() == [] and view.queue() == [] and view.events() == []
    write(path, '{"attempt_id": "j-1", "state": "pending"}')
    with path.open("a") as file:
        file.write('{"attempt_id": "j-1", "sta')  # a writer killed between two writes
    [attempt] = view.attempts()
    assert attempt.state is State.DISPATCHED
    assert [entry.attempt_id for entry in view.queue()] == ["j-1"]  # in flight: queued
    with path.open("a") as file:
        file.write('te": "sent"}')  # ...and one that finished its line without the newline
    assert view.attempts()[0].state is State.OUTCOME_CONFIRMED


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('{"attempt_id": "j-1", "sta', "is not JSON"),
        ('["j-1", "pending"]', "is list JSON, not an object"),
        ('{"state": "pending"}', "has no 'attempt_id'"),
        ('{"attempt_id": "j-1", "state": "lost"}', "map it with states="),
    ],
)
def test_a_line_it_cannot_read_is_an_error_that_names_it(tmp_path: Path, line: str, says: str):
    path = write(tmp_path / "jobs.jsonl", line, '{"attempt_id": "j-2", "state": "sent"}')
    with pytest.raises(LedgerError, match=says):
        JSONLinesLedgerView(path, states=STATES).attempts()


def test_fields_of_no_line_and_rowid_ids_are_refused(tmp_path: Path):
    path = write(tmp_path / "jobs.jsonl", '{"id": "j-1", "status": "sent"}')
    with pytest.raises(LedgerError, match=r"no line of .* has the field"):
        JSONLinesLedgerView(path, fields={"attempt_id": "id"}, states=STATES).attempts()
    with pytest.raises(LedgerError, match="no row ids"):
        JSONLinesLedgerView(path, fields={"attempt_id": "rowid"})
