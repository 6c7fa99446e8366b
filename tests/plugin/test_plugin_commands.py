"""``crashpoints.run(command=...)``: what it refuses, in one line each, before anything runs."""

from __future__ import annotations

import pytest

from tests.conftest import run_reported

from .test_plugin import run


def test_bad_command_choices_fail_the_test_in_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        MESSAGES = [{"task_id": "t-1"}]
        mark = pytest.mark.crashpoints(providers=["email"])

        @mark
        def test_both(crashpoints):
            crashpoints.run(worker=lambda m, ctx: None, command=["true"], messages=MESSAGES)

        @mark
        def test_neither(crashpoints):
            crashpoints.run(messages=MESSAGES)

        @mark
        def test_empty(crashpoints):
            crashpoints.run(command=[], messages=MESSAGES)

        @mark
        def test_not_found(crashpoints):
            crashpoints.run(command=["no-such-program-here"], messages=MESSAGES)

        @mark
        def test_two_recoveries(crashpoints):
            crashpoints.run(command=["true"], recover=lambda ctx: None, recover_command=["true"],
                            messages=MESSAGES)

        @mark
        def test_not_json(crashpoints):
            crashpoints.run(command=["true"], messages=[{"task_id": "t-1", "at": object()}])
        """
    )
    result = run(pytester)
    result.assert_outcomes(failed=6)
    result.stdout.fnmatch_lines_random(
        [
            # (fnmatch: "[" is written "[[]")
            "*crashpoints: *test_both: pass worker= (a Python function) or command= *not both.",
            "*crashpoints: *test_neither: pass worker= * or command= *nothing to run.",
            "*crashpoints: *test_empty: command=[[]] is empty*",
            "*crashpoints: *test_not_found: command=[[]'no-such-program-here']: program "
            "'no-such-program-here' was not found*",
            "*crashpoints: *test_two_recoveries: pass recover= * or recover_command=*not both.",
            "*crashpoints: *test_not_json: message 0 (*) cannot be sent to a command as JSON*",
        ]
    )
    assert "Traceback" not in result.stdout.str()


#: A mailer program: a row, the mail, the row marked; a row found is parked (no fail points
#: of its own).
PROGRAM = '''
import json, os, sqlite3, sys, urllib.request
job = json.loads(sys.stdin.read())
db = sqlite3.connect(os.path.join(os.environ["CRASHPOINTS_RUN_DIR"], "jobs.db"))
db.execute("CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, status TEXT)")
if db.execute("SELECT 1 FROM jobs WHERE id = ?", (job["task_id"],)).fetchone():
    db.execute("UPDATE jobs SET status = 'review' WHERE id = ?", (job["task_id"],))
    db.commit()
    sys.exit(0)
db.execute("INSERT INTO jobs VALUES (?, 'pending')", (job["task_id"],))
db.commit()
request = urllib.request.Request(os.environ["CRASHPOINTS_EMAIL_URL"] + "/v3/mail/send",
    data=json.dumps({"personalizations": [{"to": [{"email": "a@example.com"}]}],
                     "from": {"email": "b@example.com"}, "subject": "s",
                     "content": [{"type": "text/plain", "value": "v"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["CRASHPOINTS_EMAIL_KEY"],
             "Content-Type": "application/json"})
urllib.request.urlopen(request).read()
db.execute("UPDATE jobs SET status = 'sent' WHERE id = ?", (job["task_id"],))
db.commit()
'''

PROGRAM_TESTS = '''
import sys
from pathlib import Path
import pytest
from pytest_crashpoints import SQLiteLedgerView, State

PROGRAM = str(Path(__file__).with_name("program.py"))
MARK = dict(points=["A", "C", "db.commit"], providers=["email"], mode="exhaustive", faults=["kill"])
STATES = {"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED,
          "review": State.MANUAL_REVIEW}

def jobs(ctx):
    return SQLiteLedgerView(ctx.env.path / "jobs.db", table="jobs", states=STATES,
                            columns={"attempt_id": "id", "state": "status"})

def run(crashpoints, *python):
    crashpoints.run(command=[sys.executable, *python, PROGRAM], messages=[{"task_id": "t-1"}],
                    ledger_view=jobs)

@pytest.mark.crashpoints(**MARK)
def test_hooked(crashpoints):
    run(crashpoints)

@pytest.mark.crashpoints(**MARK, strict_coverage=False)
def test_isolated(crashpoints):
    run(crashpoints, "-I")

@pytest.mark.crashpoints(**MARK, strict_coverage=True)
def test_isolated_strict(crashpoints):
    run(crashpoints, "-I")
'''


def test_the_summary_says_which_points_a_command_without_hooks_cannot_reach(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(program=PROGRAM, test_programs=PROGRAM_TESTS)
    result, tests = run_reported(pytester)
    result.assert_outcomes(passed=2, failed=1)
    why = (
        "a command that runs no Python (or runs it with -I, -E or -S) gets no hooks at its "
        "commits; mark your own fail points (docs/howto-any-language.md) or run it under Python"
    )
    # Run as it is, the Python program is killed at every point: nothing out of reach.
    hooked = tests["test_hooked"]
    assert hooked["verdict"] == "passed" and "out_of_reach" not in hooked
    assert {p for p, row in hooked["coverage"].items() if row["killed"]} == {
        "A", "C", "db.commit"
    }
    # Run with -I, it gets no hooks: no A and no commits; C (at the relay) is never killed.
    isolated = tests["test_isolated"]
    assert isolated["out_of_reach"] == {"A": why, "db.commit": why, "C": why}
    result.stdout.fnmatch_lines([f"OUT OF REACH in *::test_isolated: A, db.commit, C: {why}"])
    # Held to strict coverage, the failure says why too.
    assert tests["test_isolated_strict"]["outcome"] == "failed"
    result.stdout.fnmatch_lines([f"*(strict coverage)*; A, db.commit, C: {why}. A test that*"])
