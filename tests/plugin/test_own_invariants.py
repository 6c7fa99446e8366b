"""Invariants of your own, from the hook and from ``invariants=``: checked on every case,
reported with their evidence and a replay token, counted in the summary, and ``expect=``-able."""

from __future__ import annotations

import json

import pytest

AGENT = '''
import sqlite3

import httpx


def mailer(job, ctx):
    """Broken: a job found 'pending' is mailed again."""
    conn = sqlite3.connect(ctx.env.path / "jobs.db")
    conn.execute("CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, status TEXT)")
    row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job["task_id"],)).fetchone()
    if row and row[0] == "sent":
        return
    with conn:
        conn.execute("INSERT OR IGNORE INTO jobs VALUES (?, 'pending')", (job["task_id"],))
    httpx.post(f"{ctx.base_url('email')}/v3/mail/send",
               headers={"Authorization": f"Bearer {ctx.api_key('email', job['task_id'])}"},
               json={"personalizations": [{"to": [{"email": job["to"]}]}],
                     "from": {"email": "billing@example.com"}, "subject": job["subject"],
                     "content": [{"type": "text/plain", "value": "Attached."}]},
               ).raise_for_status()
    with conn:
        conn.execute("UPDATE jobs SET status = 'sent' WHERE id = ?", (job["task_id"],))
'''

CONFTEST = '''
def one_welcome_per_user(evidence):
    """One welcome e-mail per user, ever."""
    sent = {}
    for effect in evidence.effects:
        if effect.body["subject"] == "Welcome":
            sent.setdefault(effect.body["to_email"], []).append(effect)
    for user, mails in sent.items():
        if len(mails) > 1:
            yield f"{user} got {len(mails)} welcome e-mails: " + ", ".join(
                f"{m.request_id} by {m.sender}" for m in mails)


def pytest_crashpoints_invariants(item):
    return [one_welcome_per_user]
'''

TESTS = '''
import pytest

import agent

WELCOME = {"task_id": "u-1", "to": "ada@example.com", "subject": "Welcome"}


def no_invoice_without_a_job(evidence):
    """Every e-mail is an invoice or a welcome."""
    return [f"unexpected mail {e.request_id}" for e in evidence.effects
            if e.body["subject"] not in ("Welcome", "Invoice")]


@pytest.mark.crashpoints(points="B", providers=["email"], mode="exhaustive",
                         expect=["one_welcome_per_user"])
def test_caught(crashpoints):
    crashpoints.run(worker=agent.mailer, messages=[WELCOME],
                    invariants=[no_invoice_without_a_job])


@pytest.mark.crashpoints(points="B", providers=["email"], mode="exhaustive")
def test_fails(crashpoints):
    crashpoints.run(worker=agent.mailer, messages=[WELCOME])


@pytest.mark.crashpoints(points="B", providers=["email"], mode="exhaustive",
                         expect=["no_such_rule"])
def test_bad_expect(crashpoints):
    crashpoints.run(worker=agent.mailer, messages=[WELCOME])
'''


def test_an_invariant_of_your_own_fires_with_evidence_and_a_replay_token(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(agent=AGENT, conftest=CONFTEST, test_welcome=TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "crashpoints", "-p", "no:randomly", "-p", "no:cacheprovider",
        "--crashpoints-report=report.json",
    )
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "crashpoints: 2 violation(s) of invariant(s) 1 (no non-idempotent side effect "
            "happens twice), one_welcome_per_user (One welcome e-mail per user, ever)",
            "minimal schedule: deliver message 0, kill at B (hit 1)",
            "invariant one_welcome_per_user (One welcome e-mail per user, ever): ada@example.com"
            " got 2 welcome e-mails: sg_req_* by worker-1 (delivering message 0), sg_req_* by "
            "worker-2 (delivering message 0)",
            "replay: pytest test_welcome.py::test_fails --crashpoints-replay=*",
            "crashpoints: test_welcome.py::test_bad_expect: expect=['no_such_rule'] names "
            "'no_such_rule', which is not an invariant of this test (its own: "
            "one_welcome_per_user); pass it in invariants=.",
            "violations: invariant 1: 2 test(s), invariant one_welcome_per_user: 2 test(s)",
        ],
        consecutive=False,
    )
    tests = {t["nodeid"]: t for t in json.loads((pytester.path / "report.json").read_text())[
        "tests"]}
    caught = tests["test_welcome.py::test_caught"]
    assert caught["verdict"] == "caught"
    assert caught["failure"]["invariants"] == [1, "one_welcome_per_user"]
    assert caught["failure"]["titles"] == {
        "one_welcome_per_user": "One welcome e-mail per user, ever"}
    # The replay token reproduces it: same schedule, same verdict.
    token = tests["test_welcome.py::test_fails"]["failure"]["token"]
    again = pytester.runpytest_subprocess(
        "-p", "crashpoints", "-p", "no:randomly", "-p", "no:cacheprovider",
        f"--crashpoints-replay={token}", "test_welcome.py::test_fails",
    )
    again.assert_outcomes(failed=1)
    again.stdout.fnmatch_lines(["invariant one_welcome_per_user (*): ada@example.com got 2 *"])
