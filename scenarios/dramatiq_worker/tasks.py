"""The Dramatiq actor of ``mailer.py``, in a module (Dramatiq's broker is set before it is
imported): it mails a job with one of the two versions of ``scenarios/jobs_mailer.py`` and
marks the job done in Redis for the worker's command to see."""

from __future__ import annotations

import os
from pathlib import Path

import dramatiq
import redis

from scenarios import queue_task


def done_key(run_dir: str, task_id: str) -> str:
    return f"crashpoints:{run_dir}:done:{task_id}"


# A lost answer raises; Dramatiq's Retries middleware runs the message again (after 0.1 s, not
# its default 15 s and up), and the retry finds the job's own row.
@dramatiq.actor(queue_name="mail", max_retries=3, min_backoff=100, max_backoff=500)
def mail_job(job: dict[str, str], variant: str, redis_url: str) -> None:
    message = dramatiq.middleware.CurrentMessage.get_current_message()
    retries = message.options.get("retries", 0) if message is not None else 0
    how = f"retry {retries}" if retries else "run"
    print(f"dramatiq message for job {job['task_id']}: {how}", flush=True)
    status = queue_task.mail(job, variant=variant)
    print(f"dramatiq message for job {job['task_id']}: {status}", flush=True)
    run_dir = Path(os.environ["CRASHPOINTS_RUN_DIR"])
    redis.Redis.from_url(redis_url).set(done_key(run_dir.name, job["task_id"]), status)
