"""A Django app that mails jobs over SMTP: a ``Job`` table in the ORM on SQLite, the mail sent
with Django's own mail API (``EmailMessage.send()``, the SMTP backend), nothing of the harness in
its code: the settings read where the database and the relay are from the environment the harness
sets for each worker process (``settings.py``), as a deployment reads its own.

Django is set up in each worker process, never in the test process: a worker is forked from the
test process, and a Django set up there would hand every worker the test process's settings.
The job table is migrated once per test by ``python -m django migrate`` in a subprocess
(:func:`migrated_database`); each case starts from a copy with its jobs ``queued``
(:func:`add_jobs`), as a producer would have left them.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: The Django settings module of the app.
SETTINGS = "scenarios.django_mailer.settings"
#: The job table's file, in the case's run directory.
DATABASE = "jobs.sqlite3"
#: Where the repository's ``scenarios`` package is importable from.
_ROOT = Path(__file__).resolve().parents[2]


def start_django() -> None:
    """Set Django up in this process, from its environment (a worker's, once per process).

    Raises RuntimeError when the process this one was forked from had set Django up already:
    its settings were read there, with another process's database and key."""
    import django
    from django.apps import apps
    from django.conf import settings

    if apps.ready:
        return
    if settings.configured:
        raise RuntimeError(
            "Django's settings were read before this worker started (in the test process it "
            "was forked from): set Django up only inside the worker, or run the test with "
            "start_method='spawn'."
        )
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    django.setup()


def migrated_database(directory: Path) -> Path:
    """The job table migrated into ``directory`` (``python -m django migrate``, in a
    subprocess so that the test process never sets Django up)."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "CRASHPOINTS_RUN_DIR": str(directory),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")])),
    }
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--verbosity", "0"],
        env=env, cwd=_ROOT, check=True, timeout=120, capture_output=True,
    )
    return directory / DATABASE


def add_jobs(template: Path, run_dir: Path, jobs: Iterable[Mapping[str, Any]]) -> None:
    """Copy the migrated ``template`` into ``run_dir`` and queue ``jobs`` in it (what the
    producer did before it enqueued them)."""
    target = run_dir / DATABASE
    shutil.copyfile(template, target)
    db = sqlite3.connect(target)
    try:
        with db:
            db.executemany(
                "INSERT INTO jobs_job (id, recipient, subject, body, status, message_id) "
                "VALUES (:task_id, :recipient, :subject, :body, 'queued', '')",
                list(jobs),
            )
    finally:
        db.close()
