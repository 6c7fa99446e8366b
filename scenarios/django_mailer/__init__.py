"""A Django app that mails jobs over SMTP: a ``Job`` table in the ORM (on SQLite, or on PostgreSQL
with ``settings_postgres.py``, the app unchanged), the mail sent
with Django's own mail API (``EmailMessage.send()``, the SMTP backend), nothing of the harness in
its code: the settings read where the database and the relay are from the environment the harness
sets for each worker process (``settings.py``), as a deployment reads its own.

Django is set up in each worker process, never in the test process: a worker is forked from the
test process, and a Django set up there would hand every worker the test process's settings.
The job table is migrated once per test by ``python -m django migrate`` in a subprocess
(:func:`migrated_database`); each case starts from a copy with its jobs ``queued``
(:func:`add_jobs`), as a producer would have left them. On PostgreSQL the migrations are run
once into a template database (:func:`migrated_template`) that the harness clones for each case,
and a worker is pointed at its case's database by its environment (:func:`use_postgres`).
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
#: Its settings on PostgreSQL (the database named by ``JOBS_DATABASE_DSN``).
SETTINGS_POSTGRES = "scenarios.django_mailer.settings_postgres"
#: The template database the PostgreSQL cases are cloned from.
TEMPLATE = "django_mailer_template"
#: The job table's file, in the case's run directory.
DATABASE = "jobs.sqlite3"
#: Where the repository's ``scenarios`` package is importable from.
_ROOT = Path(__file__).resolve().parents[2]


def start_django() -> None:
    """Set Django up in this process, from its environment (a worker's, once per process):
    the settings module ``DJANGO_SETTINGS_MODULE`` names, :data:`SETTINGS` if none.

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
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS)
    django.setup()


def use_postgres(dsn: str) -> None:
    """Point this process's Django at the PostgreSQL database ``dsn`` (before
    :func:`start_django`): the environment a deployment on PostgreSQL gives its workers."""
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS_POSTGRES
    os.environ["JOBS_DATABASE_DSN"] = dsn


def migrated_database(directory: Path) -> Path:
    """The job table migrated into ``directory`` (``python -m django migrate``, in a
    subprocess so that the test process never sets Django up)."""
    _migrate(SETTINGS, CRASHPOINTS_RUN_DIR=str(directory))
    return directory / DATABASE


def migrated_template(server: Any) -> Any:
    """A :class:`~pytest_crashpoints.servers.PostgresCaseDatabase` of ``server`` (a
    ``PostgresServer``) cloned for each case from :data:`TEMPLATE`, the job table migrated into
    it by ``python -m django migrate`` (once per server; built under another name and renamed
    once migrated, so a half-migrated template is never cloned)."""
    if not server.execute(f"SELECT 1 FROM pg_database WHERE datname = '{TEMPLATE}'").strip():
        building = f"{TEMPLATE}_new"
        server.drop_database(building)
        server.create_database(building)
        try:
            _migrate(SETTINGS_POSTGRES, JOBS_DATABASE_DSN=server.dsn(building))
        except BaseException:
            server.drop_database(building)
            raise
        server.execute(f'ALTER DATABASE "{building}" RENAME TO "{TEMPLATE}"')
    return server.case_database(template=TEMPLATE)


def _migrate(settings: str, **env: str) -> None:
    """Run the app's migrations with ``settings`` and ``env`` in a subprocess; its output in
    the error when they fail."""
    env = {
        **os.environ,
        **env,
        "DJANGO_SETTINGS_MODULE": settings,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--verbosity", "0"],
        env=env, cwd=_ROOT, timeout=120, capture_output=True, text=True, check=False,
    )
    if done.returncode:
        raise RuntimeError(f"python -m django migrate failed ({settings}):\n{done.stderr}")


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


def add_jobs_postgres(dsn: str, jobs: Iterable[Mapping[str, Any]]) -> None:
    """Queue ``jobs`` in the PostgreSQL database ``dsn`` (a case's, cloned from the
    migrated template)."""
    import psycopg

    with psycopg.connect(dsn) as db:
        db.cursor().executemany(
            "INSERT INTO jobs_job (id, recipient, subject, body, status, message_id) "
            "VALUES (%(task_id)s, %(recipient)s, %(subject)s, %(body)s, 'queued', '')",
            list(jobs),
        )
