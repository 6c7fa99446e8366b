"""A Celery worker that mails jobs, run by the harness as a command, as your supervisor runs it.

``python mailer.py VARIANT BROKER_URL`` (``VARIANT``: ``parks-the-ambiguous`` or
``sends-then-marks``, the two versions of ``scenarios/jobs_mailer.py``). Each start:

1. publishes the job it is given (standard input) as a Celery task, once per job: a restarted
   worker does not publish it again, as a producer publishes a job once;
2. runs a real Celery worker on it: the Redis transport, one process (``--pool=solo``), the
   task ``acks_late``. Redis keeps a delivered message in its ``unacked`` set until the task
   returns; a worker killed mid-task never acknowledges it, and kombu's own restore puts it
   back on the queue once it is older than the visibility timeout, for the next worker. That
   redelivery is the broker's: the harness only restarts the worker process. The task prints
   each delivery, ``redelivered`` as the broker marks it, so the timeline shows it;
3. stops the worker (a warm shutdown, as on ``SIGTERM``) once the job's task has run to its
   end in some worker, and exits 0.

The visibility timeout is one second and the restore runs every 0.1 s (production values are
an hour and ten seconds) so that a case takes a second, not an hour; nothing else is tuned.
Every key of a case carries its run directory's name (kombu's ``global_keyprefix``), so the
cases of a test share one ``redis-server`` and nothing else.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import httpx
import redis
from celery import Celery
from celery.signals import task_postrun

# The scenarios package (``scenarios/queue_task.py``) from a checkout: this file runs as a
# script, not as a module of an installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scenarios import queue_task

VARIANT, BROKER = sys.argv[1], sys.argv[2]
RUN_DIR = Path(os.environ["CRASHPOINTS_RUN_DIR"])
PREFIX = f"crashpoints:{RUN_DIR.name}:"
QUEUE = "mail"

app = Celery("mailer", broker=BROKER)
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    task_ignore_result=True,
    worker_prefetch_multiplier=1,
    worker_enable_remote_control=False,
    worker_hijack_root_logger=False,
    worker_redirect_stdouts=False,
    broker_connection_retry_on_startup=True,
    task_default_queue=QUEUE,
    broker_transport_options={
        "global_keyprefix": PREFIX,
        "visibility_timeout": 1,
        "unacked_restore_interval": 0.1,
        "unacked_restore_throttle": 1,
    },
)


#: What this worker did, printed when it stops (after Celery's own shutdown lines, so that
#: the timeline's last lines of its output are these).
SAID: list[str] = []


@app.task(
    name="mailer.mail_job",
    # A lost answer raises; without a retry, acks_late acknowledges the failed task and the
    # job is dropped half done (the harness catches that as invariant 2). Retried, the task
    # runs again from the broker and finds its own row.
    autoretry_for=(httpx.HTTPError,),
    max_retries=3,
    default_retry_delay=0,
)
def mail_job(job: dict[str, str]) -> str:
    request = mail_job.request
    info = request.delivery_info or {}
    how = "redelivered by the broker" if info.get("redelivered") else "delivered"
    retry = f" (retry {request.retries})" if request.retries else ""
    SAID.append(f"celery task {request.id}{retry}: job {job['task_id']} {how}")
    status = queue_task.mail(job, variant=VARIANT)
    SAID.append(f"celery task {request.id}{retry}: job {job['task_id']} {status}")
    return status


def _store() -> redis.Redis:
    return redis.Redis.from_url(BROKER.replace("redis+socket://", "unix://"))


def _done_key(task_id: str) -> str:
    return f"{PREFIX}done:{task_id}"


@task_postrun.connect
def _stop_when_done(task_id: str, args: tuple[object, ...], state: str, **_: object) -> None:
    if state == "RETRY":  # its retry is on the queue: this worker runs it too
        return
    # Before the ack (acks_late acknowledges when this returns): the warm shutdown that
    # SIGTERM starts waits for it, as it waits for any task in progress.
    job = args[0]
    assert isinstance(job, dict)
    _store().set(_done_key(job["task_id"]), task_id)
    os.kill(os.getpid(), signal.SIGTERM)


def main() -> None:
    job = json.loads(sys.stdin.read())
    store = _store()
    if store.get(_done_key(job["task_id"])) is not None:
        print(f"job {job['task_id']} was done before: nothing to do", flush=True)
        return
    if store.set(f"{PREFIX}published:{job['task_id']}", 1, nx=True):
        mail_job.apply_async(args=[job], queue=QUEUE)
    app.worker_main(
        [
            "--quiet",
            "worker",
            "--pool=solo",
            "--concurrency=1",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel=WARNING",
            f"--queues={QUEUE}",
        ]
    )
    print("\n".join(SAID), flush=True)


if __name__ == "__main__":
    main()
