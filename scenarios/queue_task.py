"""The task the queue scenarios' workers run: one of the two versions of ``jobs_mailer.py``,
on the job table in the case's run directory, with the e-mail API and key that the harness
gives the worker's process. What is not here is each queue's own (its worker, its retries, what
it prints); ``queue_scenarios.py`` is the test's side."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scenarios import jobs_mailer

#: The two versions of the mailer, by the name a worker's command line gives.
MAILERS = {
    "parks-the-ambiguous": jobs_mailer.handle_parks_the_ambiguous,
    "sends-then-marks": jobs_mailer.handle_sends_then_marks,
}


def mail(job: Mapping[str, Any], *, variant: str = "parks-the-ambiguous") -> str:
    """Mail ``job`` with the mailer ``variant`` names; returns the job's status (``sent``,
    ``review``). Raises what the mailer raises (``httpx.HTTPError`` for a lost answer)."""
    return MAILERS[variant](
        job,
        db=Path(os.environ["CRASHPOINTS_RUN_DIR"]) / "jobs.db",
        api_url=os.environ["CRASHPOINTS_EMAIL_URL"],
        api_key=os.environ["CRASHPOINTS_EMAIL_KEY"],
    )
