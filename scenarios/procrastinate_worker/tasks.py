"""The procrastinate app and task of ``mailer.py``, in a module (procrastinate finds tasks by
name): the mailer that parks a job it finds half done (``scenarios/jobs_mailer.py``)."""

from __future__ import annotations

import os

import procrastinate

from scenarios import queue_task

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ.get("PROCRASTINATE_DSN", ""))
)


@app.task(name="mail_job", retry=3)
def mail_job(job: dict[str, str]) -> None:
    """Mail one job (a lost answer raises, and the retry finds its own row)."""
    print(f"procrastinate job {job['task_id']}: run", flush=True)
    status = queue_task.mail(job)
    print(f"procrastinate job {job['task_id']}: {status}", flush=True)
