"""agent-ledger 0.2.1 on PostgreSQL, confirmed by hand: an effect whose process was killed
mid-execution is never taken over, however old it is.

The README: "Process crashed mid-execution | **Crash recovery**: new process reads the
ledger, resumes safely", and ``StaleOptions(after_ms=60_000)``: "Take over PROCESSING effects
older than this". The sequence:

1. a worker runs ``stripe.charge`` for ``order-123``: ``begin()`` inserts the effect
   ``processing``; the handler charges; the worker is killed (SIGKILL) before the commit;
2. ten minutes later (the child's clock moved with time-machine: the stale threshold is 60 s)
   a new process runs the same call with ``StaleOptions(after_ms=60_000)``;
3. its ``begin()`` upserts the row: ``ON CONFLICT (idem_key) DO UPDATE SET ...
   updated_at = EXCLUDED.updated_at`` for every status but the immutable ones, and
   ``processing`` is not one, so the row is ten minutes *younger* than the crash; then
   ``increment_dedup_count`` writes ``updated_at`` again;
4. ``_is_effect_stale`` sees an age of about zero: no takeover; the process waits
   ``effect_timeout_s`` and raises ``EffectTimeoutError``. Every later try does the same.

Run: ``python -m scenarios.case_studies.confirm_agent_ledger`` (starts a private PostgreSQL;
exit 0: confirmed).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import psycopg

from scenarios.case_studies.by_hand import effects, kill_after_effect, run

WORKER = """
import asyncio, sys, time
from pathlib import Path
from agent_ledger import (ConcurrencyOptions, EffectLedger, EffectLedgerOptions, RunOptions,
                          StaleOptions, ToolCall)
from agent_ledger.stores.postgres import PostgresStore
from psycopg_pool import AsyncConnectionPool

folder, mode, dsn = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
if mode == "later":
    import time_machine
    time_machine.travel(time.time() + 10 * 60, tick=True).start()

async def charge_customer(effect):
    with open(folder / "outbox.txt", "a") as provider:     # the charge is made
        provider.write(f"charge {effect.idem_key[:12]}\\n")
    if mode == "die":
        await asyncio.sleep(60)                            # killed before the commit
    return {"id": "ch_1"}

async def main():
    async with AsyncConnectionPool(dsn, min_size=1, open=False) as pool:
        ledger = EffectLedger(EffectLedgerOptions(store=PostgresStore(pool=pool)))
        call = ToolCall(workflow_id="order-123", tool="stripe.charge", args={"amount": 1000})
        options = RunOptions(stale=StaleOptions(after_ms=60_000),
                             concurrency=ConcurrencyOptions(effect_timeout_s=2.0))
        print(await ledger.run(call, handler=charge_customer, run_options=options))

asyncio.run(main())
"""


def row(dsn: str) -> tuple[object, ...]:
    with psycopg.connect(dsn) as db:
        found = db.execute("SELECT status, updated_at FROM effects").fetchone()
    assert found is not None
    return tuple(found)


def main(server: str) -> int:
    from agent_ledger.stores.postgres import SCHEMA_SQL
    from psycopg.conninfo import make_conninfo

    with psycopg.connect(server, autocommit=True) as db:
        db.execute("DROP DATABASE IF EXISTS confirm_agent_ledger")
        db.execute("CREATE DATABASE confirm_agent_ledger")
    dsn = make_conninfo(server, dbname="confirm_agent_ledger")
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(SCHEMA_SQL)
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        outbox = folder / "outbox.txt"
        kill_after_effect(WORKER, folder, outbox, "die", dsn)
        killed = row(dsn)
        print(f"after the kill: {killed}, charges made: {len(effects(outbox))}")
        later = run(WORKER, folder, "later", dsn)
        after = row(dsn)
        print(f"ten minutes later: {after}, charges made: {len(effects(outbox))}")
        confirmed = (killed[0] == after[0] == "processing" and after[1] > killed[1]
                     and "EffectTimeoutError" in later.stderr and len(effects(outbox)) == 1)
        print("CONFIRMED: the crashed effect is never taken over, its updated_at renewed"
              if confirmed else "NOT REPRODUCED")
        return 0 if confirmed else 1


if __name__ == "__main__":
    from scenarios.postgres_server import POSTGRES_BIN, postgres_server

    if POSTGRES_BIN is None:
        sys.exit("needs PostgreSQL (apt-get install postgresql)")
    with postgres_server() as server_dsn:
        status = main(server_dsn)
    sys.exit(status)
