"""The procrastinate app and task of ``mailer.py``, in a module (procrastinate finds tasks by
name): the mailer that parks a job it finds half done (``scenarios/jobs_mailer.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import procrastinate

from scenarios import jobs_mailer

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ.get("PROCRASTINATE_DSN", ""))
)


@app.task(name="mail_job", retry=3)
def mail_job(job: dict[str, str]) -> None:
    """Mail one job (a lost answer raises, and the retry finds its own row)."""
    print(f"procrastinate job {job['task_id']}: run", flush=True)
    status = jobs_mailer.handle_parks_the_ambiguous(
        job,
        db=Path(os.environ["CRASHPOINTS_RUN_DIR"]) / "jobs.db",
        api_url=os.environ["CRASHPOINTS_EMAIL_URL"],
        api_key=os.environ["CRASHPOINTS_EMAIL_KEY"],
    )
    print(f"procrastinate job {job['task_id']}: {status}", flush=True)
