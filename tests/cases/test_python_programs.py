"""Whole crash cases of Python programs run as commands: what a Python worker gets in its own
process (the points at its commits, the automatic A, storage faults), and how a program says
that its message is done or not (exit status, a ``nack`` line).

The mailer is the bundled one (``scenarios/stdin_mailer/mailer.py``): jobs as JSON lines on
standard input, ``ack``/``nack`` on standard output, its own SQLite table in WAL with
``synchronous=NORMAL``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_crashpoints import ProviderSpec
from pytest_crashpoints.harness import (
    CommandWorker,
    Deliver,
    KillAt,
    Refuse,
    Scenario,
    Schedule,
    run_case,
)
from scenarios.queue_scenarios import JOB, jobs

from .conftest import email_task_scenario

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux prctl")

MAILER = str(Path(__file__).resolve().parents[2] / "scenarios" / "stdin_mailer" / "mailer.py")
#: The mailer's settings, from what the harness gives each process.
ENV = {"MAILER_DB": "${CRASHPOINTS_RUN_DIR}/jobs.db",
       "MAILER_API_URL": "${CRASHPOINTS_EMAIL_URL}", "MAILER_API_KEY": "${CRASHPOINTS_EMAIL_KEY}"}


def _mailer(*argv: str, env: dict[str, str] | None = None) -> Scenario:
    import dataclasses

    worker = CommandWorker([*argv] or [sys.executable, MAILER], env=ENV if env is None else env)
    scenario = email_task_scenario(worker, {**JOB, "task_id": "t-1"})
    return dataclasses.replace(scenario, ledger_view=jobs)


def _run(scenario: Scenario, *steps: Any, tmp_path: Path, expected: Any = None,
         keep: bool = False) -> Any:
    return run_case(scenario, Schedule(tuple(steps)), base_dir=tmp_path, expected=expected,
                    keep=keep)


def test_a_python_program_gets_the_points_of_a_python_worker(tmp_path: Path) -> None:
    mailer = _mailer()
    clean = _run(mailer, Deliver(0), tmp_path=tmp_path)
    assert clean.passed, clean.timeline
    # Its three commits (the table, the pending row, the mark), the automatic A after the
    # pending row (at the relay, before the request leaves), B and C at the relay.
    assert clean.hits == {
        "db.commit": 3, "db.committed": 3, "A": 1, "http.write": 1, "B": 1, "C": 1
    }
    assert clean.delivery_own_a == {0: 0}  # the A is the harness's, not the program's
    assert clean.unhooked == ""
    assert "worker-1 stdout: ack t-1 sent" in clean.timeline

    at_a = _run(mailer, Deliver(0, KillAt("A")), tmp_path=tmp_path,
                expected=clean.expected_effects)
    assert at_a.passed, at_a.timeline
    # Killed with its pending row committed and its mail not sent: the job comes again,
    # finds the row, and is parked; nothing was mailed.
    assert "worker-1 was killed at A (hit 1)" in at_a.timeline
    assert "EFFECT" not in at_a.timeline
    assert "worker-2 stdout: ack t-1 review" in at_a.timeline

    # C, deferred at the relay, fires at the program's next commit: before the mark.
    at_c = _run(mailer, Deliver(0, KillAt("C")), tmp_path=tmp_path,
                expected=clean.expected_effects)
    assert "worker-1 was killed at C (fired at db.commit) (hit 1)" in at_c.timeline


def test_a_failed_commit_reaches_the_program_as_sqlites_own_error(tmp_path: Path) -> None:
    from pytest_crashpoints.harness import FailCommit

    mailer = _mailer()
    clean = _run(mailer, Deliver(0), tmp_path=tmp_path)
    failed = _run(mailer, Deliver(0, fail_commit=FailCommit(2)), tmp_path=tmp_path,
                  expected=clean.expected_effects)
    assert failed.passed, failed.timeline
    assert "worker-1: its 2nd commit fails (disk I/O error)" in failed.timeline
    assert "worker-1 stdout: nack t-1 (OperationalError: disk I/O error)" in failed.timeline
    assert "redeliver unacknowledged message 0 to worker-2" in failed.timeline
    assert "worker-2 stdout: ack t-1 sent" in failed.timeline


def test_a_power_loss_takes_what_the_program_did_not_sync(tmp_path: Path) -> None:
    unsynced = _mailer(sys.executable, MAILER, "--skip-intent-sync")
    clean = _run(unsynced, Deliver(0), tmp_path=tmp_path)
    assert clean.delivery_lossy == {0: (("jobs.db", "wal/1"),)}
    lost = _run(unsynced, Deliver(0, KillAt("B"), power_loss=True), tmp_path=tmp_path,
                expected=clean.expected_effects)
    assert [v.invariant for v in lost.violations] == [1], lost.timeline
    assert "the last 2 commit(s) of jobs.db were not synced" in lost.timeline


#: A program that appends a synced line, then one it does not sync, then mails; in Python,
#: or in shell (whose syncs the harness cannot see).
LINES_PY = """
import os, sys, urllib.request
path = os.path.join(os.environ["CRASHPOINTS_RUN_DIR"], "notes.txt")
with open(path, "a") as notes:
    notes.write("synced line\\n"); notes.flush(); os.fsync(notes.fileno())
    notes.write("unsynced line\\n"); notes.flush()
request = urllib.request.Request(os.environ["CRASHPOINTS_EMAIL_URL"] + "/v3/mail/send",
    data=b'{"personalizations": [{"to": [{"email": "a@example.com"}]}], "subject": "s",'
         b' "from": {"email": "b@example.com"}, "content": [{"type": "text/plain", "value": "v"}]}',
    headers={"Authorization": "Bearer " + os.environ["CRASHPOINTS_EMAIL_KEY"],
             "Content-Type": "application/json"})
urllib.request.urlopen(request).read()
"""


def test_a_power_loss_keeps_what_a_python_program_synced_of_its_other_files(
    tmp_path: Path,
) -> None:
    script = tmp_path / "notes.py"
    script.write_text(LINES_PY)
    scenario = email_task_scenario(CommandWorker([sys.executable, str(script)]), {"task_id": "t-1"})
    clean = _run(scenario, Deliver(0), tmp_path=tmp_path)
    assert clean.delivery_lossy == {0: (("notes.txt", "file"),)}
    lost = _run(scenario, Deliver(0, KillAt("B"), power_loss=True), tmp_path=tmp_path,
                expected=clean.expected_effects, keep=True)
    assert "notes.txt lost its last 14 byte(s), never synced" in lost.timeline
    # What is left of the run: the synced line, then the redelivery's two (the torn half
    # of the unsynced one is at the start of its first).
    notes = (Path(lost.run_dir) / "notes.txt").read_text()
    assert notes.startswith("synced line\nunsync")


@pytest.mark.skipif(shutil.which("curl") is None, reason="the script uses curl")
def test_a_command_that_runs_no_python_says_why_its_files_are_not_modelled(
    tmp_path: Path,
) -> None:
    script = tmp_path / "notes.sh"
    script.write_text(
        "#!/bin/sh\nset -e\necho line >> \"$CRASHPOINTS_RUN_DIR/notes.txt\"\n"
        "curl -sf \"$CRASHPOINTS_EMAIL_URL/v3/mail/send\" -H \"Authorization: Bearer "
        "$CRASHPOINTS_EMAIL_KEY\" -H 'Content-Type: application/json' -d '{\"personalizations\":"
        " [{\"to\": [{\"email\": \"a@example.com\"}]}], \"subject\": \"s\", \"from\": {\"email\":"
        " \"b@example.com\"}, \"content\": [{\"type\": \"text/plain\", \"value\": \"v\"}]}'\n"
    )
    script.chmod(0o755)
    scenario = email_task_scenario(CommandWorker([str(script)]), {"task_id": "t-1"})
    clean = _run(scenario, Deliver(0), tmp_path=tmp_path)
    assert clean.unhooked.startswith("a command that runs no Python (or runs it with -I")
    assert clean.delivery_lossy == {0: ()}  # its syncs are not seen: no power loss tried
    lost = _run(scenario, Deliver(0, KillAt("B"), power_loss=True), tmp_path=tmp_path,
                expected=clean.expected_effects)
    assert "files other than SQLite's not modelled (the worker is a command that ran no " \
        "Python with the harness's hooks" in lost.timeline


#: A job whose mail was refused: the program says so in one of three ways.
SAYS = """
import json, os, sys, urllib.request, urllib.error
job = json.loads(sys.stdin.readline())
request = urllib.request.Request(os.environ["CRASHPOINTS_EMAIL_URL"] + "/v3/mail/send",
    data=b'{"personalizations": [{"to": [{"email": "a@example.com"}]}], "subject": "s",'
         b' "from": {"email": "b@example.com"}, "content": [{"type": "text/plain", "value": "v"}]}',
    headers={"Authorization": "Bearer " + os.environ["CRASHPOINTS_EMAIL_KEY"],
             "Content-Type": "application/json"})
try:
    urllib.request.urlopen(request).read()
except urllib.error.HTTPError as refused:
    how = sys.argv[1]
    if how == "exit":
        sys.exit(f"refused: {refused.code}")
    print(f"{how} {job['task_id']}")
    sys.exit(0)
print(f"ack {job['task_id']}")
"""


@pytest.mark.parametrize(
    ("how", "said", "again"),
    [
        # A status other than 0: not done, delivered again (and mailed then).
        ("exit", "exited with status 1; its stderr ends: refused: 500", True),
        # Status 0 with a line that begins with "nack": not done either.
        ("nack", "exited with status 0 but printed 'nack t-1'", True),
        # Status 0 and "ack": done. The mail never went out: dropped (invariant 2).
        ("ack", None, False),
    ],
)
def test_a_program_says_done_by_its_exit_status_and_not_done_by_nack(
    tmp_path: Path, how: str, said: str | None, again: bool
) -> None:
    script = tmp_path / "says.py"
    script.write_text(SAYS)
    scenario = email_task_scenario(CommandWorker([sys.executable, str(script), how]),
                                   {"task_id": "t-1"})
    clean = _run(scenario, Deliver(0), tmp_path=tmp_path)
    assert clean.passed, clean.timeline
    refused = _run(scenario, Refuse("email"), Deliver(0), tmp_path=tmp_path,
                   expected=clean.expected_effects)
    assert ("redeliver unacknowledged message 0" in refused.timeline) is again
    assert refused.passed is again, refused.timeline
    if said is not None:
        assert f"CommandFailed: the command {sys.executable} {script} {how} {said}" in (
            refused.timeline
        )
    else:
        assert [v.invariant for v in refused.violations] == [2]
        assert "silently dropped" in refused.violations[0].message


def test_a_nack_in_the_fault_free_run_is_its_error(tmp_path: Path) -> None:
    script = tmp_path / "nacks.py"
    script.write_text("import json, sys\nprint('nack', json.loads(sys.stdin.read())['task_id'])\n")
    scenario = email_task_scenario(CommandWorker([sys.executable, str(script)]),
                                   {"task_id": "t-1"})
    clean = _run(scenario, Deliver(0), tmp_path=tmp_path)
    assert not clean.passed
    assert "printed 'nack t-1': the message is not done" in clean.errors[0]
    assert "in the fault-free run, where nothing was injected" in clean.errors[0]


#: A Python program that asks the model (the OpenAI chat API, over urllib: the variables the
#: SDKs read) and prints the tool it chose.
ASKS = """
import json, os, urllib.request
request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}],
                     "tools": [{"type": "function", "function": {"name": "send_email",
                                "parameters": {"type": "object", "properties": {}}}}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"})
answer = json.load(urllib.request.urlopen(request))
print("chose", answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"])
"""


def test_a_programs_sdk_variables_lead_to_the_relay_not_the_server(tmp_path: Path) -> None:
    from fake_providers import Script, call
    from pytest_crashpoints import Authority

    script = tmp_path / "asks.py"
    script.write_text(ASKS)
    scenario = Scenario(
        worker=CommandWorker([sys.executable, str(script)]),
        recover=None,
        messages=({"task_id": "t-1"},),
        providers=(ProviderSpec("model"),),
        authorities={"t-1": Authority.of(tenant_id="tenant-1", credential_scope="model:read",
                                         policy_version="p1")},
        model=Script([call("send_email")]),
    )
    clean = _run(scenario, Deliver(0), tmp_path=tmp_path)
    # The model's server writes a line for the harness before an answer that calls a tool;
    # through the relay, the point fires in the bridge and the program reads plain HTTP.
    assert "worker-1 stdout: chose send_email" in clean.timeline, clean.timeline
    assert clean.hits.get("model.tool_call") == 1
