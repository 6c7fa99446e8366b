"""A Huey worker that mails jobs, its queue in SQLite (``SqliteHuey``: no server).

Each start of the worker (:func:`handle`, one message: one job) enqueues the job once (a
restarted worker finds the job's mark in Huey's own key-value store), then runs Huey's worker
loop (``huey.dequeue()``, then ``huey.execute(task)``, as Huey's consumer does) until the
queue is empty, and says how the job ended as Huey knows it.

Huey takes a task off its queue (a ``DELETE`` in the same transaction as its read) before it
runs it, and keeps no record of a task in progress: a worker killed mid-task takes the task
with it. What the restarted worker then finds is Huey's doing: an empty queue and no result.

``requeue_lost=True`` is the fix, the application's since Huey cannot do it: the producer
records the job ``queued`` in the mailer's table before it enqueues it, and at startup (under
Huey's consumer, an ``@huey.on_startup()`` hook; this loop is not the consumer, so it calls it
itself) every job the table holds ``queued`` or ``pending`` that is neither on Huey's queue nor
has a result is enqueued again. The task is the mailer that runs a queued job and parks a
pending one, which may have been sent (``jobs_mailer.handle_parks_the_ambiguous``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from huey import SqliteHuey
from huey.exceptions import TaskException

from scenarios import jobs_mailer


def _huey(run_dir: Path, api_url: str, api_key: str) -> tuple[SqliteHuey, Callable[..., Any]]:
    huey = SqliteHuey("mail", filename=str(run_dir / "huey.db"))

    # A lost answer raises: retried, the task finds its own row (without retries, Huey
    # records the exception as the task's result and the job is dropped half done).
    @huey.task(name="mail_job", retries=3)
    def mail_job(job: dict[str, str]) -> str:
        return jobs_mailer.handle_parks_the_ambiguous(
            job, db=run_dir / "jobs.db", api_url=api_url, api_key=api_key)

    return huey, mail_job


def _ended(huey: SqliteHuey, task_id: str | None) -> str | None:
    """How Huey recorded the task's end (``None``: it has no result)."""
    if task_id is None:
        return None
    try:
        result = huey.result(task_id, preserve=True)
    except TaskException as exc:
        return f"failed for good: {exc}"
    return None if result is None else str(result)


def _requeue_lost(huey: SqliteHuey, mail_job: Callable[..., Any], run_dir: Path) -> list[str]:
    db = run_dir / "jobs.db"
    if not db.exists():
        return []
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT id, recipient, body FROM jobs WHERE status IN ('queued', 'pending')"
        ).fetchall()
    except sqlite3.OperationalError:  # no table yet
        rows = []
    finally:
        conn.close()
    on_queue = {task.id for task in huey.pending()}
    again = []
    for job_id, recipient, body in rows:
        task_id = huey.get(f"task:{job_id}", peek=True)
        if task_id not in on_queue and _ended(huey, task_id) is None:
            task = mail_job.s({"task_id": job_id, "recipient": recipient, "body": body})
            huey.put(f"task:{job_id}", task.id)
            huey.enqueue(task)
            again.append(job_id)
    return again


def handle(job: dict[str, Any], *, run_dir: Path, api_url: str, api_key: str,
           requeue_lost: bool = False) -> str:
    """One start of the worker for ``job``; returns what Huey knows of its end."""
    huey, mail_job = _huey(run_dir, api_url, api_key)
    if requeue_lost:  # the producer records the job before anything else (once)
        jobs_mailer.record_queued(job, db=run_dir / "jobs.db")
    if huey.put_if_empty(f"enqueued:{job['task_id']}", "1"):
        task = mail_job.s(job)
        huey.put(f"task:{job['task_id']}", task.id)
        huey.enqueue(task)
    if requeue_lost:
        _requeue_lost(huey, mail_job, run_dir)
    while (task := huey.dequeue()) is not None:
        huey.execute(task)
    ended = _ended(huey, huey.get(f"task:{job['task_id']}", peek=True))
    if ended is None:
        return ("lost: not on Huey's queue and no result (Huey took the task off its queue "
                "before it ran, and the worker that ran it died)")
    return ended
