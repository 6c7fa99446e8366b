"""Async workers and recoveries run to their end; code that never ran never passes; time moves.

The agents here are asyncio code as teams write it: ``httpx.AsyncClient`` against the case's
loopback server (B and C at the wire, inside the event loop's reads), a job table of their
own in SQLite, timeouts and backoff on the real clocks.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from pytest_crashpoints import (
    Authority,
    Context,
    ProviderSpec,
    SQLiteLedgerView,
    State,
    crashpoint,
    reference_recovery_async,
    reference_worker_async,
)
from pytest_crashpoints.errors import HarnessUsageError
from pytest_crashpoints.harness import (
    CrashSettings,
    Deliver,
    KillAt,
    Scenario,
    Schedule,
    explore,
    run_case,
)

AUTHORITY = Authority.of(
    tenant_id="tenant-1", credential_scope="email:read email:write", policy_version="p1"
)
JOB = {"task_id": "job-1", "to": "ada@example.com", "body": "Invoice 1"}
STATES = {"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED,
          "review": State.MANUAL_REVIEW}


def _mail(job: dict[str, Any]) -> dict[str, Any]:
    return {
        "personalizations": [{"to": [{"email": job["to"]}]}],
        "from": {"email": "billing@example.com"},
        "subject": "Your invoice",
        "content": [{"type": "text/plain", "value": job["body"]}],
    }


async def _send(ctx: Context, job: dict[str, Any]) -> None:
    async with httpx.AsyncClient(base_url=ctx.base_url("email")) as client:
        response = await client.post(
            "/v3/mail/send",
            headers={"Authorization": f"Bearer {ctx.api_key('email', job['task_id'])}"},
            json=_mail(job),
        )
        response.raise_for_status()


def _jobs(ctx: Context) -> sqlite3.Connection:
    conn = sqlite3.connect(ctx.env.path / "jobs.db")
    conn.execute("CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, status TEXT)")
    return conn


async def _send_and_mark_sent(conn: sqlite3.Connection, ctx: Context, job: dict[str, Any]) -> str:
    """The e-mail of a job marked 'pending', then the job marked 'sent'."""
    await _send(ctx, job)
    with conn:
        conn.execute("UPDATE jobs SET status = 'sent' WHERE id = ?", (job["task_id"],))
    return "sent"


async def blind_mailer(job: dict[str, Any], ctx: Context) -> str:
    """Broken: a job found 'pending' is mailed again (a kill at B sends it twice)."""
    conn = _jobs(ctx)
    row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job["task_id"],)).fetchone()
    if row and row[0] == "sent":
        return "sent"
    with conn:
        conn.execute("INSERT OR IGNORE INTO jobs VALUES (?, 'pending')", (job["task_id"],))
    return await _send_and_mark_sent(conn, ctx, job)


async def careful_mailer(job: dict[str, Any], ctx: Context) -> str:
    """Fixed: a job found 'pending' may have been sent: park it for review, never resend."""
    conn = _jobs(ctx)
    row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job["task_id"],)).fetchone()
    if row and row[0] in ("sent", "review"):
        return str(row[0])
    if row:
        with conn:
            conn.execute("UPDATE jobs SET status = 'review' WHERE id = ?", (job["task_id"],))
        return "review"
    with conn:
        conn.execute("INSERT INTO jobs VALUES (?, 'pending')", (job["task_id"],))
    return await _send_and_mark_sent(conn, ctx, job)


def jobs_view(ctx: Context) -> SQLiteLedgerView:
    return SQLiteLedgerView(ctx.env.path / "jobs.db", table="jobs", states=STATES,
                            columns={"attempt_id": "id", "state": "status"})


def scenario(worker: Any, recover: Any = None, **changes: Any) -> Scenario:
    fields: dict[str, Any] = {"ledger_view": jobs_view, "timeout": 15.0, **changes}
    return Scenario(
        worker=worker,
        recover=recover,
        messages=(JOB,),
        providers=(ProviderSpec("email"),),
        authorities={"job-1": AUTHORITY},
        **fields,
    )


def test_an_async_worker_with_a_bug_is_caught_killed_inside_an_await(tmp_path: Path) -> None:
    result = run_case(scenario(blind_mailer), Schedule((Deliver(0, KillAt("B")),)),
                      base_dir=tmp_path)
    assert result.kills == ("B#1",)  # at the wire, while the coroutine awaited the answer
    assert {v.invariant for v in result.violations} == {1}
    assert not result.errors


def test_its_fixed_twin_passes_every_single_fault(tmp_path: Path) -> None:
    settings = CrashSettings(points=("A", "B", "C", "D"), mode="exhaustive", max_faults=1)
    report = explore(scenario(careful_mailer), settings, base_dir=tmp_path, nodeid="t::fixed")
    assert report.failure is None, report.failure
    assert report.killed.get("B") and report.cases >= 5


async def forgets_to_await(job: dict[str, Any], ctx: Context) -> str:
    _send(ctx, job)  # type: ignore[unused-coroutine]  # the bug: no await
    return "sent"


async def fires_and_forgets(job: dict[str, Any], ctx: Context) -> str:
    asyncio.get_running_loop().create_task(_send(ctx, job))  # never awaited
    return "sent"


@pytest.mark.parametrize(
    ("worker", "line"),
    [
        (forgets_to_await, "coroutine _send() was never awaited in this worker"),
        (fires_and_forgets, "returned while 1 asyncio task(s) it started were still running"),
    ],
)
def test_an_async_worker_that_never_reaches_its_tool_call_fails(
    worker: Any, line: str, tmp_path: Path
) -> None:
    report = explore(scenario(worker), CrashSettings(points=("A", "B"), mode="exhaustive"),
                     base_dir=tmp_path, nodeid="t::never")
    assert report.failure is not None
    errors = "\n".join(report.failure.errors)
    assert line in errors
    assert "the fault-free run made no request to any provider" in errors
    assert report.cases == 1  # the fault-free run failed: nothing else was run


def test_a_worker_that_sends_nothing_never_passes(tmp_path: Path) -> None:
    def idle(job: dict[str, Any], ctx: Context) -> str:
        return "nothing to do"

    result = run_case(scenario(idle), Schedule((Deliver(0),)), base_dir=tmp_path)
    assert not result.passed
    assert result.errors == (
        "the fault-free run made no request to any provider: no worker reached a tool call, "
        "so no schedule can test one. Check that the worker calls the providers of the "
        "marker (an async def worker's calls awaited, its tasks awaited) and that each "
        "message reaches its work.",
    )


class Handler:
    async def __call__(self, job: dict[str, Any], ctx: Context) -> str:
        return await careful_mailer(job, ctx)


async def not_a_worker(job: dict[str, Any]) -> None:
    return None


def generates(job: dict[str, Any], ctx: Context) -> Any:
    yield "never runs"


@pytest.mark.parametrize(
    ("worker", "line"),
    [
        (generates, "worker=generates is a generator function: calling it runs none of its body"),
        (careful_mailer(JOB, None), "is an awaitable, not a function: pass the async def function"),  # type: ignore[arg-type]
        (not_a_worker, "worker=not_a_worker cannot be called as worker(message, ctx)"),
        ("handle", "worker='handle' is not callable"),
    ],
)
def test_what_is_not_a_plain_or_async_function_is_refused_in_one_line(
    worker: Any, line: str
) -> None:
    with pytest.raises(HarnessUsageError) as refused:
        scenario(worker)
    assert line in str(refused.value) and "\n" not in str(refused.value)
    if asyncio.iscoroutine(worker):
        worker.close()


def test_an_async_callable_object_and_the_async_reference_twins_run(tmp_path: Path) -> None:
    assert run_case(scenario(Handler()), Schedule((Deliver(0, KillAt("A")),)),
                    base_dir=tmp_path).passed
    message = {
        "task_id": "job-1",
        "calls": [{"tool": "send_email", "key": "job-1:mail",
                   "args": {"to": "ada@example.com", "subject": "Invoice", "body": "1"}}],
    }
    twins = Scenario(
        worker=reference_worker_async,
        recover=reference_recovery_async,
        messages=(message,),
        providers=(ProviderSpec("email"),),
        authorities={"job-1": AUTHORITY},
    )
    result = run_case(twins, Schedule((Deliver(0, KillAt("B")),)), base_dir=tmp_path)
    assert result.passed, result.violations
    assert result.kills == ("B#1",)


async def patient_mailer(job: dict[str, Any], ctx: Context) -> str:
    """Waits on a 200 ms monotonic() deadline and retries with backoff (anyio and asyncio)."""
    # The agent's own deadline loop and backoff: time passing is the behaviour under test.
    deadline = time.monotonic() + 0.2
    while time.monotonic() < deadline:
        await anyio.sleep(0.02)
    started = time.time()
    crashpoint("mailer.waited", waited=round(time.time() - started, 3))
    delay = 0.01
    for attempt in range(3):  # the first two tries "fail"
        if attempt == 2:
            with anyio.fail_after(5):
                await _send(ctx, job)
            break
        await asyncio.sleep(delay)
        delay *= 2
    assert time.time() - started >= 0.03  # wall time moved with the backoff
    return "sent"


def test_deadlines_and_backoff_finish_and_replays_stay_identical(tmp_path: Path) -> None:
    case = scenario(patient_mailer, ledger_view=None, timeout=10.0)
    fingerprints = set()
    for _ in range(3):
        result = run_case(case, Schedule((Deliver(0),)), base_dir=tmp_path)
        assert result.passed, (result.errors, result.violations)
        fingerprints.add(result.fingerprint)
    assert len(fingerprints) == 1
