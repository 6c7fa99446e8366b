"""A mailer in plain Node.js (``mailer.js``), crash-tested as a command: the harness runs
``node mailer.js`` for each delivery, kills it with its bridge at A (its own fail point),
B and C (at the relay in front of the email provider), and reads its JSON-lines ledger.

The bug ("send, then mark the row sent") is caught by invariant 1 with a kill at B, from the
email provider's own journal; the fix (a job found half done is parked for review) passes
every single fault, with every check its ledger supports. Skipped where ``node`` is missing.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_crashpoints import JSONLinesLedgerView, State


def _node_version() -> tuple[int, ...] | None:
    node = shutil.which("node")
    if node is None:
        return None
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return tuple(int(part) for part in out.stdout.strip().lstrip("v").split(".")[:2])


NODE = _node_version()
pytestmark = pytest.mark.skipif(
    NODE is None or NODE < (18,),
    reason=f"the Node.js scenario needs node 18 or later on PATH (found: {NODE or 'none'}); "
    "install it, e.g. apt-get install nodejs",
)

MAILER = str(Path(__file__).with_name("mailer.js"))
JOB = {"task_id": "job-7", "recipient": "ada@example.com", "body": "Invoice 7: 120 EUR"}
STATES = {
    "pending": State.DISPATCHED,
    "sent": State.OUTCOME_CONFIRMED,
    "review": State.MANUAL_REVIEW,
}


def jobs(ctx):
    return JSONLinesLedgerView(
        ctx.env.path / "jobs.jsonl", states=STATES, authority_of=ctx.authority_at
    )


@pytest.mark.crashpoints(points="ABC", providers=["email"], mode="exhaustive")
def test_a_half_done_job_is_parked_not_sent_again(crashpoints):
    report = crashpoints.run(
        command=["node", MAILER, "parks-the-ambiguous"], messages=[JOB], ledger_view=jobs
    )
    assert report.killed["B"] and report.killed["C"] and report.killed["A"]


@pytest.mark.crashpoints(points="B", providers=["email"], mode="exhaustive", expect=1)
def test_a_job_sent_then_marked_is_sent_twice(crashpoints):
    report = crashpoints.run(
        command=["node", MAILER, "sends-then-marks"], messages=[JOB], ledger_view=jobs
    )
    assert str(report.failure.schedule) == "deliver message 0, kill at B (hit 1)"
