"""Crash cases of mailers that speak SMTP with ``smtplib`` to the harness's relay: A, B and C
at the SMTP wire without a line of harness code, the relay's faults, and a correct mailer
that passes every single fault."""

from __future__ import annotations

import smtplib
import sqlite3
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from pytest_crashpoints import Authority, Context, ProviderSpec, SQLiteLedgerView, State
from pytest_crashpoints.harness import (
    CommandWorker,
    CrashSettings,
    Deliver,
    KillAt,
    LoseResponse,
    Refuse,
    Scenario,
    Schedule,
    explore,
    run_case,
)

pytest.importorskip("aiosmtpd", reason="the SMTP relay needs aiosmtpd (pytest-crashpoints[smtp])")

JOB = {"task_id": "job-7", "to": "ada@example.com"}
AUTHORITY = Authority.of(tenant_id="acme", credential_scope="smtp:write", policy_version="p1")
STATES = {"queued": State.INTENT_RECORDED, "sending": State.DISPATCHED,
          "sent": State.OUTCOME_CONFIRMED, "review": State.MANUAL_REVIEW,
          "failed": State.FAILED}


def mail(job: dict[str, Any], ctx: Context) -> None:
    """The invoice, with smtplib as any app sends it: where and who from the context."""
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "billing@example.com", job["to"], "7"
    message.set_content("120 EUR")
    host, port = ctx.smtp_address("smtp")
    with smtplib.SMTP(host, port, timeout=10) as client:
        client.login("apikey", ctx.api_key("smtp", job["task_id"]))
        client.send_message(message)


def table(ctx: Context) -> sqlite3.Connection:
    db = sqlite3.connect(ctx.env.path / "jobs.db", timeout=10)
    with db:
        db.execute("CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, status TEXT)")
    return db


def status(db: sqlite3.Connection, job: dict[str, Any]) -> str | None:
    row = db.execute("SELECT status FROM jobs WHERE id = ?", (job["task_id"],)).fetchone()
    return None if row is None else str(row[0])


def sends_then_marks(job: dict[str, Any], ctx: Context) -> str:
    db = table(ctx)
    if status(db, job) == "sent":
        return "sent"
    with db:
        db.execute("INSERT OR IGNORE INTO jobs VALUES (?, 'queued')", (job["task_id"],))
    mail(job, ctx)
    with db:
        db.execute("UPDATE jobs SET status = 'sent' WHERE id = ?", (job["task_id"],))
    return "sent"


def retries_a_lost_reply(job: dict[str, Any], ctx: Context) -> str:
    """Claims first, but takes a dropped connection for "not sent" and sends again."""
    db = table(ctx)
    with db:
        db.execute("INSERT OR REPLACE INTO jobs VALUES (?, 'sending')", (job["task_id"],))
    try:
        mail(job, ctx)
    except smtplib.SMTPServerDisconnected:
        mail(job, ctx)
    with db:
        db.execute("UPDATE jobs SET status = 'sent' WHERE id = ?", (job["task_id"],))
    return "sent"


def claims_then_sends(job: dict[str, Any], ctx: Context) -> str:
    """Correct over a relay that cannot be asked: claim (committed), send, mark. A claimed job
    found again is parked for review; a reply that refuses means "not taken"."""
    db = table(ctx)
    with db:
        found = status(db, job)
        if found not in (None, "queued"):
            if found == "sending":
                db.execute("UPDATE jobs SET status = 'review' WHERE id = ?", (job["task_id"],))
                return "review"
            return str(found)
        db.execute("INSERT OR REPLACE INTO jobs VALUES (?, 'sending')", (job["task_id"],))
    try:
        mail(job, ctx)
    except smtplib.SMTPResponseException as refused:
        gone = "failed" if refused.smtp_code >= 500 else "queued"
        with db:
            db.execute("UPDATE jobs SET status = ? WHERE id = ?", (gone, job["task_id"]))
        if gone == "queued":
            raise
        return gone
    with db:
        db.execute("UPDATE jobs SET status = 'sent' WHERE id = ?", (job["task_id"],))
    return "sent"


def jobs(ctx: Context) -> SQLiteLedgerView:
    return SQLiteLedgerView(ctx.env.path / "jobs.db", table="jobs",
                            columns={"attempt_id": "id", "state": "status"}, states=STATES)


def scenario(worker: Any) -> Scenario:
    return Scenario(worker=worker, recover=None, messages=(JOB,),
                    providers=(ProviderSpec("smtp"),), authorities={"job-7": AUTHORITY},
                    ledger_view=jobs)


def test_a_b_and_c_fire_at_the_smtp_wire_and_b_catches_send_then_mark(tmp_path: Path) -> None:
    broken = scenario(sends_then_marks)
    clean = run_case(broken, Schedule((Deliver(0),)), base_dir=tmp_path)
    assert clean.passed, clean.timeline
    # A and http.write before MAIL FROM (the commit before it), B and C at the data's reply.
    assert {p: clean.hits.get(p) for p in ("A", "http.write", "B", "C")} == {
        "A": 1, "http.write": 1, "B": 1, "C": 1}
    at_b = run_case(broken, Schedule((Deliver(0, kill=KillAt("B")),)), base_dir=tmp_path,
                    expected=clean.expected_effects)
    assert at_b.kills == ("B#1",)
    assert [v.invariant for v in at_b.violations] == [1], at_b.timeline
    assert "mail.send happened twice at smtp" in at_b.violations[0].message
    at_c = run_case(broken, Schedule((Deliver(0, kill=KillAt("C")),)), base_dir=tmp_path,
                    expected=clean.expected_effects)
    assert "worker-1 was killed at C (fired at db.commit)" in at_c.timeline
    assert [v.invariant for v in at_c.violations] == [1]
    at_a = run_case(broken, Schedule((Deliver(0, kill=KillAt("A")),)), base_dir=tmp_path,
                    expected=clean.expected_effects)
    assert at_a.passed, at_a.timeline  # nothing had left: the redelivery sends it once


def test_a_lost_reply_with_the_worker_alive_catches_a_retry_on_disconnect(
    tmp_path: Path,
) -> None:
    retrying = scenario(retries_a_lost_reply)
    clean = run_case(retrying, Schedule((Deliver(0),)), base_dir=tmp_path)
    assert clean.passed, clean.timeline
    lost = run_case(retrying, Schedule((LoseResponse("smtp"), Deliver(0))), base_dir=tmp_path,
                    expected=clean.expected_effects)
    assert [v.invariant for v in lost.violations] == [1], lost.timeline


def test_a_refusal_is_retried_by_the_queue_and_sent_once(tmp_path: Path) -> None:
    correct = scenario(claims_then_sends)
    clean = run_case(correct, Schedule((Deliver(0),)), base_dir=tmp_path)
    refused = run_case(correct, Schedule((Refuse("smtp", variant="500"), Deliver(0))),
                       base_dir=tmp_path, expected=clean.expected_effects)
    assert refused.passed, refused.timeline
    assert "status=451" in refused.timeline and "worker-1 raised" in refused.timeline


def test_a_correct_mailer_over_smtp_passes_every_single_fault(tmp_path: Path) -> None:
    settings = CrashSettings(points=("A", "B", "C", "D", "E", "F"), mode="exhaustive",
                             max_faults=1)
    report = explore(scenario(claims_then_sends), settings, base_dir=tmp_path,
                     nodeid="t::correct")
    assert report.failure is None, report.failure
    assert report.killed.get("A") and report.killed.get("B") and report.killed.get("C")


COMMAND = """
import os, smtplib
from email.message import EmailMessage
message = EmailMessage()
message["From"], message["To"], message["Subject"] = "billing@example.com", "ada@example.com", "7"
message.set_content("120 EUR")
with smtplib.SMTP(os.environ["CRASHPOINTS_SMTP_HOST"], int(os.environ["CRASHPOINTS_SMTP_PORT"]),
                  timeout=10) as client:
    client.login("apikey", os.environ["CRASHPOINTS_SMTP_KEY"])
    client.send_message(message)
"""


def test_a_command_mails_through_the_bridges_relay_and_b_fires_there(tmp_path: Path) -> None:
    import sys

    command = Scenario(worker=CommandWorker([sys.executable, "-c", COMMAND]), recover=None,
                       messages=(JOB,), providers=(ProviderSpec("smtp"),),
                       authorities={"job-7": AUTHORITY})
    result = run_case(command, Schedule((Deliver(0),)), base_dir=tmp_path)
    assert result.passed, result.timeline
    assert "smtp_req_00000000000001 mail.send key=None status=250 EFFECT" in result.timeline
    assert {p: result.hits.get(p) for p in ("http.write", "B", "C")} == {
        "http.write": 1, "B": 1, "C": 1}  # in the bridge, through its relay
    at_b = run_case(command, Schedule((Deliver(0, kill=KillAt("B")),)), base_dir=tmp_path,
                    expected=result.expected_effects)
    assert at_b.kills == ("B#1",)
    assert [v.invariant for v in at_b.violations] == [1], at_b.timeline  # it mails blindly
