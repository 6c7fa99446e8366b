"""The RQ job of ``mailer.py``: the mailer that parks a job it finds half done
(``scenarios/jobs_mailer.py``). RQ imports it by name in the worker, so it lives in a module."""

from __future__ import annotations

from rq import get_current_job

from scenarios import queue_task


def mail_job(job: dict[str, str]) -> str:
    """Mail one job; print each run, and whether RQ ran it again (a retry)."""
    current = get_current_job()
    retries = int(current.meta.get("retries", 0)) if current is not None else 0
    again = current is not None and current.retries_left is not None and (
        current.retries_left < retries
    )
    print(f"rq job {job['task_id']}: {'run again by RQ (a retry)' if again else 'run'}",
          flush=True)
    status = queue_task.mail(job)
    print(f"rq job {job['task_id']}: {status}", flush=True)
    return status
