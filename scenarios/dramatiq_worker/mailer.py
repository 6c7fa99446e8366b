"""A Dramatiq worker that mails jobs, run by the harness as a command, as your supervisor runs it.

``python mailer.py VARIANT REDIS_URL`` (``VARIANT``: ``parks-the-ambiguous`` or
``sends-then-marks``, the two versions of ``scenarios/jobs_mailer.py``). Each start:

1. sends the job it is given (standard input) to the actor once: a restarted worker does not
   send it again, as your producer would not;
2. runs a real Dramatiq worker (the Redis broker, one worker thread) until the job is done.
   The broker keeps a message a worker took in that worker's set of unacknowledged messages;
   a worker killed mid-message never acknowledges it, and once the worker's heartbeat is
   older than the broker's ``heartbeat_timeout``, the broker's own maintenance puts the
   message back on the queue for the next worker. That redelivery is Dramatiq's: the harness
   only restarts the worker process.

Tuned so a case takes a second: the heartbeat timeout is one second (Dramatiq: 60 s) and
maintenance runs on every broker command (Dramatiq: one in a thousand). Every key of a case is
in a namespace named for its run directory, so the cases of a test share one
``redis-server``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import CurrentMessage

# The scenarios package from a checkout: this file runs as a script.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

VARIANT, REDIS_URL = sys.argv[1], sys.argv[2]
RUN_DIR = Path(os.environ["CRASHPOINTS_RUN_DIR"])
broker = RedisBroker(url=REDIS_URL, namespace=f"dramatiq-{RUN_DIR.name}",
                     heartbeat_timeout=1000, maintenance_chance=1_000_000)
broker.add_middleware(CurrentMessage())
dramatiq.set_broker(broker)

from scenarios.dramatiq_worker.tasks import done_key, mail_job  # noqa: E402  (after the broker)

#: How long the job may take to be done before the worker gives up and says so.
PATIENCE = 30.0


def main() -> None:
    job = json.loads(sys.stdin.read())
    store = redis.Redis.from_url(REDIS_URL)
    if store.get(done_key(RUN_DIR.name, job["task_id"])) is not None:
        print(f"job {job['task_id']} was done before: nothing to do", flush=True)
        return
    if store.set(f"crashpoints:{RUN_DIR.name}:sent:{job['task_id']}", 1, nx=True):
        mail_job.send(job, VARIANT, REDIS_URL)
    worker = dramatiq.Worker(broker, worker_threads=1, worker_timeout=100)
    worker.start()
    try:
        deadline = time.monotonic() + PATIENCE
        while store.get(done_key(RUN_DIR.name, job["task_id"])) is None:
            if time.monotonic() > deadline:
                print(f"job {job['task_id']}: not done after {PATIENCE:g} s", flush=True)
                sys.exit(1)
            time.sleep(0.05)
    finally:
        worker.stop()


if __name__ == "__main__":
    main()
