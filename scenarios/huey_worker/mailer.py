"""A Huey worker that mails jobs, run by the harness as a command, as your supervisor runs it.

``python mailer.py VARIANT`` (``VARIANT``: ``default``, or ``requeue-pending``). Huey keeps its
queue in SQLite here (``SqliteHuey``: the file ``huey.db`` in the case's run directory, no
server). Each start:

1. enqueues the job it is given (standard input) once: a restarted worker finds the job's
   mark in Huey's own key-value store and does not enqueue it again;
2. with ``requeue-pending`` only, runs the fix (in production, a startup hook of Huey's,
   ``@huey.on_startup()``): every job its table holds ``pending`` with no result in Huey is
   enqueued again (a worker died with it);
3. runs Huey's own worker loop (``huey.dequeue()``, then ``huey.execute(task)``, as Huey's
   consumer does) until the queue is empty, and prints the job's end as Huey knows it.

Huey takes a task off its queue (a ``DELETE`` in the same transaction as its read) before it
runs it, and keeps no record of a task in progress: a worker killed mid-task takes the task
with it. What the restarted worker then finds is Huey's doing, observed: an empty queue and no
result. The task is the mailer that parks a job it finds half done (``scenarios/jobs_mailer.py``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

from huey import SqliteHuey
from huey.exceptions import TaskException

# The scenarios package from a checkout: this file runs as a script.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scenarios import jobs_mailer

VARIANT = sys.argv[1]
RUN_DIR = Path(os.environ["CRASHPOINTS_RUN_DIR"])
huey = SqliteHuey("mail", filename=str(RUN_DIR / "huey.db"))


# A lost answer raises: retried, the task finds its own row (without retries, Huey records
# the exception as the task's result and the job is dropped half done).
@huey.task(name="mail_job", retries=3)
def mail_job(job: dict[str, str]) -> str:
    print(f"huey task for job {job['task_id']}: run", flush=True)
    status = jobs_mailer.handle_parks_the_ambiguous(
        job,
        db=RUN_DIR / "jobs.db",
        api_url=os.environ["CRASHPOINTS_EMAIL_URL"],
        api_key=os.environ["CRASHPOINTS_EMAIL_KEY"],
    )
    print(f"huey task for job {job['task_id']}: {status}", flush=True)
    return status


def requeue_pending() -> None:
    """The fix: a job left ``pending`` in the mailer's table with no result in Huey died with
    its worker; enqueue it again (the mailer then parks it, as it may have been sent)."""
    db = RUN_DIR / "jobs.db"
    if not db.exists():
        return
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT id, recipient, body FROM jobs WHERE status = 'pending'"
        ).fetchall()
    except sqlite3.OperationalError:  # no table yet
        rows = []
    finally:
        conn.close()
    for job_id, recipient, body in rows:
        task_id = huey.get(f"task:{job_id}", peek=True)
        try:
            ended = task_id is None or huey.result(task_id, preserve=True) is not None
        except TaskException:
            ended = True  # failed for good: Huey has its record
        if not ended:
            print(f"huey: job {job_id} is pending with no result: enqueued again", flush=True)
            task = mail_job.s({"task_id": job_id, "recipient": recipient, "body": body})
            huey.put(f"task:{job_id}", task.id)
            huey.enqueue(task)


def main() -> None:
    job: dict[str, Any] = json.loads(sys.stdin.read())
    if huey.put_if_empty(f"enqueued:{job['task_id']}", "1"):
        task = mail_job.s(job)
        huey.put(f"task:{job['task_id']}", task.id)
        huey.enqueue(task)
    if VARIANT == "requeue-pending":  # in production: an @huey.on_startup() hook
        requeue_pending()
    while (task := huey.dequeue()) is not None:
        huey.execute(task)
    task_id = huey.get(f"task:{job['task_id']}", peek=True)
    try:
        result = huey.result(task_id, preserve=True) if task_id is not None else None
    except TaskException as exc:
        result = f"failed for good: {exc}"
    if result is None:
        print(f"huey: job {job['task_id']}: not in the queue and no result (Huey took the "
              "task off its queue before it ran, and the worker that ran it died)", flush=True)
    else:
        print(f"huey: job {job['task_id']}: {result}", flush=True)


if __name__ == "__main__":
    main()
