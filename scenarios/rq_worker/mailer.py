"""An RQ worker that mails jobs, run by the harness as a command, as your supervisor runs it.

``python mailer.py RETRIES REDIS_URL`` (``RETRIES``: the job's ``Retry(max=...)``, ``0`` for
RQ's default of none). Each start:

1. enqueues the job it is given (standard input) as an RQ job, once per job: a restarted
   worker does not enqueue it again, as a producer enqueues a job once;
2. runs RQ's own registry maintenance and a burst of an RQ ``SimpleWorker`` (the job runs in
   this process), until the job is finished or failed. A worker killed mid-job leaves it
   ``started`` in the queue's ``StartedJobRegistry``; once its heartbeat runs out, RQ's
   maintenance (``StartedJobRegistry.cleanup``) finds it abandoned and, as RQ decides,
   requeues it if it has retries left, or moves it to the ``FailedJobRegistry`` for good.
   That decision is RQ's: the harness only restarts the worker process. The job prints each
   run (``run again by RQ`` after a retry), and the worker prints the job's end as RQ
   records it (``failed: ... AbandonedJobError``), so the timeline shows both;
3. exits 0 when the job's end is known.

Two things are tuned so a case takes a second, not ten minutes: the heartbeat of a running
job is one second (RQ: the job's timeout or its monitoring interval, plus 60 s), and the
maintenance that finds abandoned jobs runs every 0.2 s (RQ: when a worker starts, then every
10 minutes). Every queue and job id of a case carries its run directory's name, so the cases
of a test share one ``redis-server`` and nothing else. The task is the mailer that parks a
job it finds half done (``scenarios/jobs_mailer.py``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import redis
from rq import Queue, Retry, SimpleWorker
from rq.job import Job, JobStatus
from rq.registry import StartedJobRegistry

# The scenarios package (the job, ``tasks.py``) from a checkout: this file runs as a script,
# not as a module of an installed package. RQ imports the job by name, so it is in a module.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scenarios.rq_worker.tasks import mail_job

RETRIES, REDIS_URL = int(sys.argv[1]), sys.argv[2]
RUN_DIR = Path(os.environ["CRASHPOINTS_RUN_DIR"])
QUEUE = f"mail-{RUN_DIR.name}"
#: How long a job's end may take to become known before the worker gives up and says so.
PATIENCE = 30.0


class QuickHeartbeatWorker(SimpleWorker):
    """RQ's ``SimpleWorker`` with a one-second heartbeat for the job it runs (RQ's own: the
    job's timeout or its monitoring interval, plus 60 s), and no command channel."""

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        return 1

    def subscribe(self) -> None:
        """Not subscribed to RQ's command channel (``send_kill_horse_command`` and the like),
        which nothing sends here. Its listener thread made a burst's end wait up to a minute:
        redis-py's ``PubSubWorkerThread.stop()`` joins the thread with no timeout, and when
        the thread reads the unsubscribe confirmation before ``stop()`` clears its running
        flag, it goes back to wait 60 s (RQ's ``sleep_time``) for a subscription that never
        comes. A busy machine makes that order likely (seen: an RQ case timed out at 60 s
        beside the other queue scenarios; py-spy showed the main thread in ``stop()`` and the
        listener in ``subscribed_event.wait``)."""


def _ended(job: Job) -> str | None:
    status = job.get_status(refresh=True)
    if status == JobStatus.FINISHED:
        return f"finished ({job.return_value()})"
    if status == JobStatus.FAILED:
        result = job.latest_result()
        why = (result.exc_string or "").strip().splitlines()[-1:] if result else []
        return f"failed, in RQ's FailedJobRegistry for good: {' '.join(why) or 'no reason'}"
    return None


def main() -> None:
    message: dict[str, Any] = json.loads(sys.stdin.read())
    connection = redis.Redis.from_url(REDIS_URL)
    queue = Queue(QUEUE, connection=connection)
    job_id = f"{RUN_DIR.name}-{message['task_id']}"
    if not Job.exists(job_id, connection=connection):
        retry = Retry(max=RETRIES) if RETRIES else None
        queue.enqueue(mail_job, message, job_id=job_id, retry=retry, result_ttl=3600,
                      failure_ttl=3600, meta={"retries": RETRIES})
    job = Job.fetch(job_id, connection=connection)
    deadline = time.monotonic() + PATIENCE
    while (ended := _ended(job)) is None:
        if time.monotonic() > deadline:
            print(f"rq job {message['task_id']}: still {job.get_status()} after "
                  f"{PATIENCE:g} s", flush=True)
            sys.exit(1)
        # RQ's own maintenance: an abandoned job is retried or failed, as RQ decides.
        StartedJobRegistry(queue=queue).cleanup()
        QuickHeartbeatWorker([queue], connection=connection).work(
            burst=True, logging_level="WARNING", with_scheduler=False
        )
        time.sleep(0.2)
    print(f"rq job {message['task_id']}: {ended}", flush=True)


if __name__ == "__main__":
    main()
