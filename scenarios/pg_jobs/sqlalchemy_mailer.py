"""The job mailer through SQLAlchemy (Core, on psycopg 3): the same two versions as
:mod:`scenarios.pg_jobs.psycopg_mailer`, each ``engine.begin()`` block one commit.

- :func:`handle_sends_then_marks` (the bug): record ``pending``, send, mark ``sent``;
  a redelivered ``pending`` job is sent again.
- :func:`handle_parks_the_ambiguous` (the fix): a job found ``pending`` is parked
  (``review``), never sent again; a row another delivery holds fails it at once
  (``with_for_update(nowait=True)``), and the message comes back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from scenarios.jobs_mailer import _send

JOBS = sa.Table(
    "jobs", sa.MetaData(),
    sa.Column("id", sa.Text, primary_key=True), sa.Column("recipient", sa.Text),
    sa.Column("body", sa.Text), sa.Column("status", sa.Text),
)


def engine_for(url: str) -> sa.Engine:
    """An engine on psycopg 3 for a ``postgresql://`` URL; no pool: a worker process is
    short-lived, and its connections close with it."""
    return sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1),
                            poolclass=sa.NullPool)


def _status(engine: sa.Engine, job_id: str) -> str | None:
    with engine.connect() as conn:
        return conn.execute(sa.select(JOBS.c.status).where(JOBS.c.id == job_id)).scalar()


def _record_send_mark(
    engine: sa.Engine, job: Mapping[str, Any], *, api_url: str, api_key: str
) -> str:
    from sqlalchemy.dialects.postgresql import insert

    with engine.begin() as conn:
        conn.execute(insert(JOBS).values(
            id=job["task_id"], recipient=job["recipient"], body=job["body"], status="pending",
        ).on_conflict_do_nothing())
    _send(job, api_url=api_url, api_key=api_key)
    with engine.begin() as conn:
        conn.execute(sa.update(JOBS).where(JOBS.c.id == job["task_id"]).values(status="sent"))
    return "sent"


def handle_sends_then_marks(
    job: Mapping[str, Any], *, url: str, api_url: str, api_key: str
) -> str:
    """BUG: record, send, mark. A redelivery of a job left ``pending`` sends it again."""
    engine = engine_for(url)
    try:
        if _status(engine, job["task_id"]) == "sent":
            return "sent"
        return _record_send_mark(engine, job, api_url=api_url, api_key=api_key)
    finally:
        engine.dispose()


def handle_parks_the_ambiguous(
    job: Mapping[str, Any], *, url: str, api_url: str, api_key: str
) -> str:
    """The fix: a job found ``pending`` may have been sent; park it for review."""
    engine = engine_for(url)
    try:
        status = _status(engine, job["task_id"])
        if status in ("sent", "review"):
            return str(status)
        if status == "pending":
            with engine.begin() as conn:
                # Another delivery at work holds the row: fail now, the message comes back.
                mine = JOBS.c.id == job["task_id"]
                conn.execute(sa.select(JOBS.c.id).where(mine).with_for_update(nowait=True))
                conn.execute(sa.update(JOBS).where(mine, JOBS.c.status == "pending")
                             .values(status="review"))
            return "review"
        return _record_send_mark(engine, job, api_url=api_url, api_key=api_key)
    finally:
        engine.dispose()
