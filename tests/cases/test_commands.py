"""Whole crash cases of workers that are commands (shell scripts with curl): what the harness
sees of them, and what it refuses.

Each script is a worker as a user would write it in any language: its message on standard
input, the providers and its fail points over HTTP at the addresses in its environment, a
JSON-lines ledger in the run directory.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from pytest_crashpoints import Authority, JSONLinesLedgerView, ProviderSpec, State
from pytest_crashpoints.errors import HarnessUsageError
from pytest_crashpoints.harness import (
    CommandRecovery,
    CommandWorker,
    Deliver,
    KillAt,
    LoseResponse,
    Midway,
    Recover,
    Scenario,
    Schedule,
    run_case,
)

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux prctl"),
    pytest.mark.skipif(shutil.which("curl") is None, reason="the scripts use curl"),
]

AUTHORITY = Authority.of(
    tenant_id="tenant-1", credential_scope="email:read email:write", policy_version="p1"
)

#: Send, then mark: the classic bug, in shell.
MAILER = r"""#!/bin/sh
set -e
ledger="$CRASHPOINTS_RUN_DIR/jobs.jsonl"
id="job:$CRASHPOINTS_TASK_ID"
fail() { curl -sf -X POST "$CRASHPOINTS_URL/failpoint/$1" -d "${2:-}"; }
if [ -f "$ledger" ] && grep -q "\"$id\", \"state\": \"sent\"" "$ledger"; then exit 0; fi
fail ledger.write >/dev/null
echo "{\"attempt_id\": \"$id\", \"state\": \"pending\"}" >> "$ledger"
fail A '{"tool": "send_email"}' >/dev/null
curl -sf -X POST "$CRASHPOINTS_EMAIL_URL/v3/mail/send" \
  -H "Authorization: Bearer $CRASHPOINTS_EMAIL_KEY" -H "Content-Type: application/json" \
  -d '{"personalizations": [{"to": [{"email": "ada@example.com"}]}],
       "from": {"email": "billing@example.com"}, "subject": "Invoice",
       "content": [{"type": "text/plain", "value": "Invoice 7"}]}' >/dev/null
fail ledger.write >/dev/null
echo "{\"attempt_id\": \"$id\", \"state\": \"sent\"}" >> "$ledger"
echo "mailed $id"
"""


def script(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


def scenario(worker: object, *, recover: object = None, timeout: float = 30.0) -> Scenario:
    def jobs(ctx: object) -> JSONLinesLedgerView:
        path = ctx.env.path / "jobs.jsonl"  # type: ignore[attr-defined]
        return JSONLinesLedgerView(
            path, states={"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED}
        )

    return Scenario(
        worker=worker,  # type: ignore[arg-type]
        recover=recover,  # type: ignore[arg-type]
        messages=({"task_id": "job-7"},),
        providers=(ProviderSpec("email"),),
        authorities={"job-7": AUTHORITY},
        ledger_view=jobs,
        timeout=timeout,
    )


def test_a_shell_mailer_killed_at_b_sends_twice_and_c_lands_before_the_mark(tmp_path: Path):
    mailer = scenario(CommandWorker([script(tmp_path, "mailer.sh", MAILER)]))
    clean = run_case(mailer, Schedule((Deliver(0),)), base_dir=tmp_path)
    assert clean.passed, clean.timeline
    # http.write: the bridge's relay, before it forwards the command's POST.
    assert clean.hits == {"ledger.write": 2, "A": 1, "http.write": 1, "B": 1, "C": 1}
    assert "worker-1 stdout: mailed job:job-7" in clean.timeline

    at_b = run_case(
        mailer,
        Schedule((Deliver(0, kill=KillAt("B")),)),
        base_dir=tmp_path,
        expected=clean.expected_effects,
    )
    assert [v.invariant for v in at_b.violations] == [1], at_b.timeline

    # C is deferred at the relay to the command's next fail point: the one before its mark.
    at_c = run_case(
        mailer,
        Schedule((Deliver(0, kill=KillAt("C")),)),
        base_dir=tmp_path,
        expected=clean.expected_effects,
    )
    assert "worker-1 was killed at C (fired at ledger.write) (hit 1)" in at_c.timeline


def test_a_command_that_fails_is_a_worker_that_raised_with_its_stderr(tmp_path: Path):
    failing = script(tmp_path, "fails.sh", "#!/bin/sh\necho 'no such table: jobs' >&2\nexit 3\n")
    result = run_case(
        scenario(CommandWorker([failing])), Schedule((Deliver(0),)), base_dir=tmp_path
    )
    assert not result.passed
    (error,) = result.errors[:1]
    assert "worker-1 raised pytest_crashpoints.errors.CommandFailed: the command" in error
    assert "exited with status 3; its stderr ends: no such table: jobs" in error
    assert "Traceback" not in error  # the harness's own frames are left out
    assert "worker-1 stderr: no such table: jobs" in result.timeline


def test_a_python_traceback_is_shown_without_its_markers(tmp_path: Path):
    failing = script(
        tmp_path,
        "fails.py",
        f"#!{sys.executable}\nimport sys\njob = {{}}\nsys.stdin.read()\nprint(job['to'])\n",
    )
    result = run_case(
        scenario(CommandWorker([failing])), Schedule((Deliver(0),)), base_dir=tmp_path
    )
    (error,) = result.errors[:1]
    assert "its stderr ends: " in error and "KeyError: 'to'" in error
    assert "^^" not in error and "~~" not in error
    assert "^^" not in result.timeline


def test_the_providers_lost_answer_is_lost_to_the_command_too(tmp_path: Path):
    mailer = scenario(CommandWorker([script(tmp_path, "mailer.sh", MAILER)]))
    clean = run_case(mailer, Schedule((Deliver(0),)), base_dir=tmp_path)
    lost = run_case(
        mailer,
        Schedule((LoseResponse("email"), Deliver(0))),
        base_dir=tmp_path,
        expected=clean.expected_effects,
    )
    # curl's "empty reply from server": the relay hung up as the server did.
    assert "CommandFailed: the command" in lost.timeline
    assert "exited with status 52" in lost.timeline
    assert [v.invariant for v in lost.violations] == [1]  # and the redelivery sent it again


def test_what_a_command_leaves_running_is_killed_and_named(tmp_path: Path):
    leaves = script(tmp_path, "leaves.sh", "#!/bin/sh\nsetsid sleep 30 &\necho started\n")
    result = run_case(scenario(CommandWorker([leaves])), Schedule((Deliver(0),)), base_dir=tmp_path)
    # Named as it was when killed: "sleep 30", or the shell still on its way to exec it.
    assert any("process(es) it started still running: pid " in e for e in result.errors)


def test_a_command_that_hangs_times_out_and_is_killed(tmp_path: Path):
    hangs = script(tmp_path, "hangs.sh", f"#!/bin/sh\necho $$ > {tmp_path}/pid\nexec sleep 30\n")
    result = run_case(
        scenario(CommandWorker([hangs]), timeout=1.0), Schedule((Deliver(0),)), base_dir=tmp_path
    )
    assert any("timed out" in e for e in result.errors)
    from tests.process.test_worker import wait_gone

    assert wait_gone(int((tmp_path / "pid").read_text()), timeout=10)


RECOVERY = r"""#!/bin/sh
set -e
test -z "$CRASHPOINTS_TASK_ID"
curl -sf -X POST "$CRASHPOINTS_URL/failpoint/recovery.claimed" >/dev/null
echo "recovered as $CRASHPOINTS_PROCESS with key ${CRASHPOINTS_EMAIL_KEY:+set}"
"""

#: Asks for its task's authority between two fail points: a midway E lands in between.
ASKS = r"""#!/bin/sh
set -e
curl -sf "$CRASHPOINTS_URL/tasks/$CRASHPOINTS_TASK_ID"; echo
curl -sf -X POST "$CRASHPOINTS_URL/failpoint/between" >/dev/null
curl -sf "$CRASHPOINTS_URL/tasks/$CRASHPOINTS_TASK_ID"; echo
"""


def test_recovery_commands_and_authority_changes_while_a_command_waits(tmp_path: Path):
    asks = scenario(
        CommandWorker([script(tmp_path, "asks.sh", ASKS)]),
        recover=CommandRecovery([script(tmp_path, "recovery.sh", RECOVERY)]),
    )
    result = run_case(
        asks,
        Schedule((Deliver(0, midway=Midway("between", 1, "revoke")), Recover())),
        base_dir=tmp_path,
        keep=True,
    )
    assert result.run_dir is not None
    before, after = (result.run_dir / "logs" / "worker-1.stdout").read_text().splitlines()
    assert '"tenant_id": "tenant-1"' in before and '"keys": {"email": "' in before
    assert '"authority": null' in after and '"keys": {}' in after
    # Recovery has no task: it gets a key only while every task holds one authority, and
    # this one's was revoked.
    assert "recovery-2 stdout: recovered as recovery-2 with key \n" in result.timeline + "\n"
    assert result.hits["recovery.claimed"] == 1


def test_bad_commands_are_refused_in_one_line(tmp_path: Path):
    with pytest.raises(HarnessUsageError, match=r"command=\[\] is empty"):
        CommandWorker([])
    with pytest.raises(HarnessUsageError, match=r"program 'no-such-program' was not found"):
        CommandWorker(["no-such-program", "x"])
    with pytest.raises(HarnessUsageError, match="not a list of strings"):
        CommandWorker("node worker.js")  # type: ignore[arg-type]
    with pytest.raises(HarnessUsageError, match="recover_command="):
        CommandRecovery([str(tmp_path / "missing.sh")])
