"""An agent tested as it is: any HTTP client pointed at the case's servers, its own SQLite
table, no fail point and no harness field of its own. The harness places A, B and C itself,
attributes every request by the credential it issued, and says what it could not check."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_reported

AGENT = '''
import json, os, sqlite3
import httpx
import pytest
from pytest_crashpoints import SQLiteLedgerView, State


def send(job, *, db, url, key, mark_after=True):
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, status TEXT)")
    conn.commit()
    row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job["task_id"],)).fetchone()
    if row and row[0] == "sent":
        return "sent"
    with conn:
        conn.execute("INSERT OR IGNORE INTO jobs VALUES (?, 'pending')", (job["task_id"],))
    mail = {"personalizations": [{"to": [{"email": job["to"]}]}], "from": {"email": "a@b.c"},
            "subject": "Hello", "content": [{"type": "text/plain", "value": "hi"}]}
    httpx.post(f"{url}/v3/mail/send", json=mail,
               headers={"Authorization": f"Bearer {key}"}).raise_for_status()
    if mark_after:
        with conn:
            conn.execute("UPDATE jobs SET status = 'sent' WHERE id = ?", (job["task_id"],))
    return "sent"


def view(ctx):
    return SQLiteLedgerView(ctx.env.path / "jobs.db", table="jobs",
                            columns={"attempt_id": "id", "state": "status"},
                            states={"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED})


JOB = {"task_id": "job-1", "to": "ada@example.com"}
'''


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-p", "crashpoints", "-p", "no:randomly", "-p", "no:cacheprovider", *args
    )


def test_a_c_that_never_meets_a_durable_write_is_never_killed_and_fails_strict(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        AGENT
        + '''
def worker(job, ctx):
    # Charges with a key of the job's own, and writes nothing afterwards: a C deferred to
    # the worker's next fail point never fires.
    key = ctx.api_key("payments", job["task_id"])
    response = httpx.post(f"{ctx.base_url('payments')}/v1/charges",
                          data={"amount": "100", "currency": "eur"},
                          headers={"Authorization": f"Bearer {key}",
                                   "Idempotency-Key": f"job:{job['task_id']}"})
    response.raise_for_status()


@pytest.mark.crashpoints(points="C", providers=["payments"], mode="exhaustive")
def test_c(crashpoints):
    crashpoints.run(worker=worker, messages=[JOB])
'''
    )
    result, tests = run_reported(pytester, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["NEVER KILLED in *test_c: C (reached, but no kill scheduled there took effect)"]
    )
    [test] = tests.values()
    assert test["coverage"]["C"]["reached"] >= 1 and test["coverage"]["C"]["killed"] == 0
    assert test["unkilled"] == ["C"]
    strict = run(pytester, "--crashpoints-strict-coverage")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*point(s) C reached but never killed*"])


def test_c_kills_at_the_next_commit_and_the_bug_is_caught(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        AGENT
        + '''
def worker(job, ctx):
    return send(job, db=ctx.env.path / "jobs.db", url=ctx.base_url("email"),
                key=ctx.api_key("email", job["task_id"]))


@pytest.mark.crashpoints(points="C", providers=["email"], mode="exhaustive", expect=1)
def test_c(crashpoints):
    crashpoints.run(worker=worker, messages=[JOB], ledger_view=view)
'''
    )
    result, tests = run_reported(pytester, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    [test] = tests.values()
    assert test["coverage"]["C"]["killed"] >= 1
    assert test["failure"]["schedule_text"] == "deliver message 0, kill at C (hit 1)"
    assert test["failure"]["invariants"] == [1]


def test_workers_and_recovery_get_urls_keys_and_their_work(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        '''
import json, os
import pytest
from pytest_crashpoints import Authority


def worker(message, ctx):
    seen = {k: v for k, v in os.environ.items() if k.startswith("CRASHPOINTS_")}
    path = ctx.env.path / f"worker-{message['task_id']}.json"
    path.write_text(json.dumps({"env": seen, "key": ctx.api_key("email", message["task_id"])}))
    # One request, read only: a case whose workers never reach a provider fails.
    ctx.client("email", message["task_id"]).get("/v3/messages/msg_none")


def recover(ctx):
    seen = {k: v for k, v in os.environ.items() if k.startswith("CRASHPOINTS_")}
    out = {"env": seen, "tasks": ctx.tasks(), "messages": [dict(m) for m in ctx.messages()]}
    (ctx.env.path / f"{ctx.worker_id}.json").write_text(json.dumps(out))
    # Leave the evidence where the test can read it: the case's directory is removed.
    target = os.environ["EVIDENCE"]
    os.makedirs(target, exist_ok=True)
    for name in os.listdir(ctx.env.path):
        if name.endswith(".json"):
            with open(os.path.join(target, name), "w") as f:
                f.write((ctx.env.path / name).read_text())


SCOPE = "email:read email:write payments:read payments:write"
A = Authority.of(tenant_id="tenant-7", credential_scope=SCOPE, policy_version="p1")
B = Authority.of(tenant_id="tenant-8", credential_scope=SCOPE, policy_version="p1")


@pytest.mark.crashpoints(points="A", providers=["email", "payments"], mode="exhaustive",
                         strict_coverage=False)
def test_env(crashpoints):
    crashpoints.run(worker=worker, recover=recover, authorities={"t-1": A, "t-2": B},
                    messages=[{"task_id": "t-1"}, {"task_id": "t-2"}])
'''
    )
    evidence = pytester.path / "evidence"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EVIDENCE", str(evidence))
        result = run(pytester)
    result.assert_outcomes(passed=1)
    worker = json.loads((evidence / "worker-t-1.json").read_text())
    env = worker["env"]
    assert env["CRASHPOINTS_TASK_ID"] == "t-1"
    assert env["CRASHPOINTS_PROCESS"].startswith("worker-")
    assert env["CRASHPOINTS_EMAIL_URL"].startswith("http://127.0.0.1:")
    assert env["CRASHPOINTS_PAYMENTS_URL"] != env["CRASHPOINTS_EMAIL_URL"]
    assert env["CRASHPOINTS_EMAIL_KEY"] == worker["key"]  # this process's own credential
    assert env["CRASHPOINTS_EMAIL_KEY"].startswith("sk_test_tenant-7_")
    [recovery] = [p for p in evidence.iterdir() if p.name.startswith("recovery-")]
    seen = json.loads(recovery.read_text())
    assert seen["tasks"] == ["t-1", "t-2"]
    assert seen["messages"] == [{"task_id": "t-1"}, {"task_id": "t-2"}]
    # Two tasks under two authorities: no one key would be right for recovery.
    assert "CRASHPOINTS_EMAIL_KEY" not in seen["env"]
    assert seen["env"]["CRASHPOINTS_EMAIL_URL"].startswith("http://127.0.0.1:")
