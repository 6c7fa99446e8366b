"""A procrastinate worker that mails jobs, run by the harness as a command, as your supervisor
runs it.

``python mailer.py VARIANT DSN`` (``VARIANT``: ``default``, or ``retry-stalled``). The jobs live
in PostgreSQL (``procrastinate_jobs``). Each start:

1. defers the job it is given (standard input) once, on a queue named for the case: a
   restarted worker finds it there and does not defer it again;
2. with ``retry-stalled`` only, runs the fix (in production, a periodic task): every job left
   ``doing`` by a worker whose heartbeat stopped (procrastinate's own
   ``get_stalled_jobs``) is put back to ``todo`` (``retry_job``);
3. runs a real procrastinate worker (``run_worker_async(wait=False)``: it stops when the queue
   has nothing to do), then prints the job's status as procrastinate recorded it.

A worker killed mid-job leaves its job ``doing``; procrastinate does not take it back by
itself: a restarted worker finds nothing to do, and the job is stuck. Tuned: the worker's
heartbeat every 0.2 s and a stalled worker after 1 s (procrastinate: 10 s and 30 s).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

# The scenarios package from a checkout: this file runs as a script.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

VARIANT, DSN = sys.argv[1], sys.argv[2]
os.environ["PROCRASTINATE_DSN"] = DSN
RUN_DIR = Path(os.environ["CRASHPOINTS_RUN_DIR"])
QUEUE = f"mail-{RUN_DIR.name}"

from scenarios.procrastinate_worker.tasks import app, mail_job  # noqa: E402  (after the DSN)


async def _statuses() -> list[str]:
    jobs = await app.job_manager.list_jobs_async(queue=QUEUE)
    return [str(job.status) for job in jobs]


async def _retry_stalled() -> None:
    """The fix: put back the jobs of a dead worker (its heartbeat older than 1 s)."""
    deadline = time.monotonic() + 10.0
    while "doing" in await _statuses() and time.monotonic() < deadline:
        stalled = list(await app.job_manager.get_stalled_jobs(
            queue=QUEUE, seconds_since_heartbeat=1))
        for job in stalled:
            print(f"procrastinate: job {job.id} stalled in doing: retried", flush=True)
            await app.job_manager.retry_job(job)
        if stalled:
            return
        await asyncio.sleep(0.2)


async def main() -> None:
    job = json.loads(sys.stdin.read())
    async with app.open_async():
        if not await _statuses():
            await mail_job.configure(queue=QUEUE).defer_async(job=job)
        if VARIANT == "retry-stalled":
            await _retry_stalled()
        await app.run_worker_async(queues=[QUEUE], wait=False, install_signal_handlers=False,
                                   update_heartbeat_interval=0.2, stalled_worker_timeout=1)
        print(f"procrastinate: job {job['task_id']}: {', '.join(await _statuses())}",
              flush=True)


if __name__ == "__main__":
    asyncio.run(main())
