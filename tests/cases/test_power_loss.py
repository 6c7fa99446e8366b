"""A power loss, through the harness: a worker killed at B whose SQLite database in WAL with
``synchronous=NORMAL`` loses the commits since its last checkpoint, while the provider keeps
its effect; the same with settings where a power loss keeps what a kill keeps, or where it
cannot be modelled (the file could be corrupt) and is refused with the reason."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_crashpoints.harness import Deliver, KillAt, Scenario, Schedule, run_case

from .conftest import email_task_scenario

MESSAGE = {"task_id": "t-1", "to": "ada@example.com"}


def send_email(message: dict[str, Any], ctx: Any) -> None:
    httpx.post(
        ctx.base_url("email") + "/v3/mail/send",
        headers={"Authorization": f"Bearer {ctx.api_key('email', message['task_id'])}"},
        json={"personalizations": [{"to": [{"email": message["to"]}]}],
              "from": {"email": "a@example.com"}, "subject": "s",
              "content": [{"type": "text/plain", "value": "b"}]},
        timeout=30,
    ).raise_for_status()


def worker(message: dict[str, Any], ctx: Any, *, journal: str, synchronous: str) -> str:
    """Row 1, a checkpoint, rows 2 and 3, then the e-mail (B), then row 4."""
    conn = sqlite3.connect(ctx.env.path / "app.db", isolation_level=None)
    conn.execute(f"PRAGMA journal_mode={journal}")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE IF NOT EXISTS t (n INTEGER)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    conn.execute("INSERT INTO t VALUES (2)")
    conn.execute("INSERT INTO t VALUES (3)")
    send_email(message, ctx)
    conn.execute("INSERT INTO t VALUES (4)")
    conn.close()
    return "done"


def scenario(journal: str, synchronous: str) -> Scenario:
    import functools

    return email_task_scenario(
        functools.partial(worker, journal=journal, synchronous=synchronous), MESSAGE
    )


def rows_after(result: Any) -> list[int]:
    with closing(sqlite3.connect(Path(result.run_dir) / "app.db")) as conn:
        return [r[0] for r in conn.execute("SELECT n FROM t ORDER BY rowid")]


@pytest.mark.parametrize(
    ("journal", "synchronous", "kept", "said"),
    [
        # The checkpointed row survives; rows 2 and 3 (never synced) are gone; the message
        # delivered again writes 1..4 after what is left.
        ("WAL", "NORMAL", [1, 1, 2, 3, 4],
         "power lost: the last 2 commit(s) of app.db were not synced"),
        ("WAL", "FULL", [1, 2, 3, 1, 2, 3, 4], "syncs each commit: nothing more lost"),
        ("DELETE", "NORMAL", [1, 2, 3, 1, 2, 3, 4], "syncs each commit: nothing more lost"),
        ("WAL", "OFF", [1, 2, 3, 1, 2, 3, 4], "SQLite syncs nothing"),
    ],
)
def test_a_power_loss_takes_what_the_settings_never_synced(
    tmp_path: Path, journal: str, synchronous: str, kept: list[int], said: str
) -> None:
    schedule = Schedule((Deliver(0, KillAt("B", 1), power_loss=True),))
    result = run_case(scenario(journal, synchronous), schedule, base_dir=tmp_path, keep=True)
    assert rows_after(result) == kept
    assert said in result.timeline
    assert "power lost at B (hit 1)" in str(schedule)


def test_a_plain_kill_keeps_every_commit(tmp_path: Path) -> None:
    schedule = Schedule((Deliver(0, KillAt("B", 1)),))
    result = run_case(scenario("WAL", "NORMAL"), schedule, base_dir=tmp_path, keep=True)
    assert rows_after(result) == [1, 2, 3, 1, 2, 3, 4]
    assert "power lost" not in result.timeline


def test_a_power_loss_needs_a_kill() -> None:
    with pytest.raises(ValueError, match="power_loss needs a kill"):
        Deliver(0, power_loss=True)


def jsonl_worker(message: dict[str, Any], ctx: Any, *, sync: bool) -> str:
    """A JSON-lines ledger: skip a task with an intent line, else write the intent (synced
    or not), send the e-mail (B), and write the outcome."""
    import json
    import os

    path = ctx.env.path / "ledger.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                if json.loads(line)["task"] == message["task_id"]:
                    return "seen"
            except ValueError:
                continue  # a torn line: the write the power cut
    with open(path, "a") as out:
        out.write(json.dumps({"task": message["task_id"], "state": "sending"}) + "\n")
        out.flush()
        if sync:
            os.fsync(out.fileno())
    send_email(message, ctx)
    with open(path, "a") as out:
        out.write(json.dumps({"task": message["task_id"], "state": "sent"}) + "\n")
    return "sent"


def jsonl_scenario(sync: bool) -> Scenario:
    import dataclasses
    import functools

    return dataclasses.replace(
        scenario("WAL", "FULL"), worker=functools.partial(jsonl_worker, sync=sync)
    )


@pytest.mark.parametrize(("sync", "sent", "said"), [
    (False, 2, "ledger.jsonl lost its last 36 byte(s), never synced (the first 17 of them kept"),
    (True, 1, "every database it committed to syncs each commit"),
])
def test_a_json_lines_ledger_keeps_only_what_it_synced(
    tmp_path: Path, sync: bool, sent: int, said: str
) -> None:
    schedule = Schedule((Deliver(0, KillAt("B", 1), power_loss=True),))
    result = run_case(jsonl_scenario(sync), schedule, base_dir=tmp_path, keep=True)
    assert said in result.timeline, result.timeline
    assert len(result.expected_effects) == sent  # unsynced: the intent lost, sent again


def test_a_backup_restore_forgets_what_was_synced_since(tmp_path: Path) -> None:
    schedule = Schedule((Deliver(0, KillAt("B", 1), backup_restore=True),))
    result = run_case(jsonl_scenario(True), schedule, base_dir=tmp_path, keep=True)
    assert "backup restored: the agent's files as they were before message 0" in result.timeline
    assert "(ledger.jsonl)" in result.timeline
    assert len(result.expected_effects) == 2  # the synced intent went with the backup
    assert "restored from a backup taken before this delivery" in str(schedule)


def test_a_ledger_left_unreadable_by_a_torn_write_is_a_violation_of_the_case(
    tmp_path: Path,
) -> None:
    """The unsynced intent line is torn by the power; the redelivery appends after it, and
    the file no longer parses: the case fails with invariant 2 and the reason, never as a
    set-up error (the fault-free run's ledger read)."""
    import dataclasses

    from pytest_crashpoints import JSONLinesLedgerView, State

    def view(ctx: Any) -> JSONLinesLedgerView:
        return JSONLinesLedgerView(
            ctx.env.path / "ledger.jsonl", fields={"attempt_id": "task"},
            states={"sending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED},
        )

    scenario = dataclasses.replace(jsonl_scenario(False), ledger_view=view)
    schedule = Schedule((Deliver(0, KillAt("B", 1), power_loss=True),))
    result = run_case(scenario, schedule, base_dir=tmp_path)
    unreadable = [v for v in result.violations if "cannot be read" in v.message]
    assert [v.invariant for v in unreadable] == [2]
    assert "ledger.jsonl:1 is not JSON" in unreadable[0].message
    assert result.errors == ()
    clean = run_case(scenario, Schedule((Deliver(0),)), base_dir=tmp_path)
    assert clean.violations == () and clean.errors == ()


# -- between a write and its sync --------------------------------------------------------------

JOB = {"task_id": "t-1", "recipient": "ada@example.com", "body": "Invoice 1: 120 EUR"}
#: The first line the journal mailer writes for JOB, synced before its mail goes out.
SENDING = b'{"job": "t-1", "state": "sending", "to": "ada@example.com"}'


def journal_worker(message: dict[str, Any], ctx: Any, *, repair: bool) -> str:
    from scenarios import journal_mailer

    return journal_mailer.handle(
        message, journal=ctx.env.path / "journal.jsonl", api_url=ctx.base_url("email"),
        api_key=ctx.api_key("email", message["task_id"]), repair=repair,
    )


def journal_scenario(*, repair: bool) -> Scenario:
    import functools

    return email_task_scenario(functools.partial(journal_worker, repair=repair), JOB)


def torn_at(hit: int) -> Schedule:
    return Schedule((Deliver(0, KillAt("file.sync", hit), power_loss=True),))


def test_a_power_loss_between_a_write_and_its_sync_tears_that_write(tmp_path: Path) -> None:
    """A writer that syncs each line: the power goes after the first line's write, before its
    sync. The journal keeps half of it, and the reader that refuses a line that is not JSON
    never starts again: the mail is never sent."""
    result = run_case(journal_scenario(repair=False), torn_at(1), base_dir=tmp_path, keep=True)
    assert (Path(result.run_dir) / "journal.jsonl").read_bytes() == SENDING[: len(SENDING) // 2]
    said = f"journal.jsonl lost its last {len(SENDING) + 1} byte(s), never synced (the first "
    assert said + f"{len(SENDING) // 2} of them kept: a torn write)" in result.timeline
    assert "CorruptJournal: journal.jsonl:1 is not JSON" in result.timeline
    assert result.expected_effects == ()
    assert "power lost between a write and its sync (file.sync, hit 1)" in str(result.schedule)


@pytest.mark.parametrize(("hit", "lines"), [
    (1, [b'"sending"', b'"sent"']),  # the torn intent cut off: the job mailed as new
    (2, [b'"sending"', b'"review"']),  # the torn mark cut off: sent, maybe: parked
])
def test_a_reader_that_cuts_a_torn_line_goes_on(tmp_path: Path, hit: int, lines: list[bytes]):
    result = run_case(journal_scenario(repair=True), torn_at(hit), base_dir=tmp_path, keep=True)
    assert "a torn write" in result.timeline
    journal = (Path(result.run_dir) / "journal.jsonl").read_bytes().splitlines()
    assert [line.split(b'"state": ')[1].split(b",")[0].rstrip(b"}") for line in journal] == lines
    assert len(result.expected_effects) == 1


def test_a_power_loss_needs_a_write_past_a_sync_or_a_sync(tmp_path: Path) -> None:
    """With ``faults=["power_loss"]``: a writer that syncs each line gets the power lost
    between each write and its sync (not listed as not applicable); a worker that writes
    nothing of its own has nothing to lose, and the report says so."""
    from pytest_crashpoints.harness import CrashSettings, explore

    settings = CrashSettings(points=("B",), mode="exhaustive", max_faults=1,
                             faults=("power_loss",))
    syncing = explore(journal_scenario(repair=True), settings, base_dir=tmp_path, nodeid="t::s")
    assert syncing.failure is None
    assert syncing.reached["torn write"] == 2 and syncing.killed["file.sync"] == 2
    assert not [line for line in syncing.not_applicable if line.startswith("power loss")]
    mailing = email_task_scenario(send_email, MESSAGE)
    nothing = explore(mailing, settings, base_dir=tmp_path, nodeid="t::n")
    (said,) = [line for line in nothing.not_applicable if line.startswith("power loss")]
    assert "nor synced with os.fsync or os.fdatasync" in said
