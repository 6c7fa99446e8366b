"""What a process of a case runs first: its context, its environment and the automatic crash
points, then the worker or the recovery to completion.
"""

from __future__ import annotations

import os
import urllib.parse
from typing import Any

from ..._inject.commits import install_commit_hooks
from ..._inject.failpoints import crashpoint
from ..._inject.pg_hooks import install_postgres_hooks
from ..._inject.redis_commits import install_redis_hooks
from ..._inject.wire import install_wire_hooks
from ..._process import waits
from ..._process.calling import call_to_completion
from ..storage.agentfiles import install_sync_log
from .context import CaseEnv, Context
from .scenario import Recovery, WorkerFn

__all__ = ["RACE_START", "deliver_entry", "recover_entry", "race_entry"]


def _enter(env: CaseEnv, worker_id: str, task_id: str | None) -> Context:
    """Set up a worker or recovery process of a case: its context, its environment (the
    providers' URLs and this process's keys, for any SDK), and the automatic crash points
    (at its SQLite and PostgreSQL commits, and at the wire of its requests to the case's
    servers)."""

    ctx = Context(env, worker_id, task_id=task_id)
    waits.name(worker_id)
    if env.urls:
        os.environ.update(ctx.sdk_env())
        addresses: list[tuple[str, int]] = []
        models: list[tuple[str, int]] = []  # a model's POSTs only ask: no automatic A
        relays: list[tuple[str, int]] = []  # SMTP: a transaction's MAIL FROM is its write
        for name, url in env.urls:
            parts = urllib.parse.urlsplit(url)
            spec = env.spec(name)
            where = models if spec.is_model else relays if spec.speaks_smtp else addresses
            where.append((parts.hostname or "127.0.0.1", parts.port or 80))
        install_wire_hooks(addresses, reads=models, smtp=relays)
        waits.world([*addresses, *models, *relays])  # a connection to them is no real server
    install_commit_hooks(exclude=[env.run_dir.journals, env.authority_path])
    install_postgres_hooks()
    install_redis_hooks()
    install_sync_log(env.path)
    return ctx


def deliver_entry(worker: WorkerFn, env: CaseEnv, worker_id: str, message: Any) -> object:
    """What a worker process of the case runs: ``worker(message, ctx)`` to completion."""
    ctx = _enter(env, worker_id, str(message["task_id"]))
    try:
        return call_to_completion(worker, (message, ctx), {}, role="worker")
    finally:
        ctx.close()


def recover_entry(recovery: Recovery, env: CaseEnv, worker_id: str) -> object:
    """What a recovery process of the case runs: ``recovery(ctx)`` to completion."""
    ctx = _enter(env, worker_id, None)
    try:
        return call_to_completion(recovery, (ctx,), {}, role="recovery")
    finally:
        ctx.close()


#: The fail point a racing recovery passes before it starts: where the second one is held.
RACE_START = "recovery.starts"


def race_entry(recovery: Recovery, env: CaseEnv, worker_id: str) -> object:
    crashpoint(RACE_START)
    return recover_entry(recovery, env, worker_id)
