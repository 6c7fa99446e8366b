"""justonce 0.2.0, confirmed by hand: a process killed between the effect and its record is
not left UNKNOWN; once the claim's lease runs out the effect runs again.

The README: "When a process dies *between* the effect and recording it, the key is left
`UNKNOWN`", and "Crash *after* effect, before recording | Key left `UNKNOWN`; retries refuse
until reconciled". The sequence:

1. a worker claims ``confirm:v1:order-7`` (``in_progress``, a lease of 15 minutes) and sends
   the mail; it is killed (SIGKILL) before ``complete()``;
2. the key is ``in_progress``, not ``unknown`` (``mark_unknown`` runs only when recording
   raises in a live process);
3. redelivered at once, the message is refused (``OperationInFlightError``): right;
4. redelivered after the lease ran out (16 minutes later: the child's clock is moved with
   time-machine), the claim is taken over (the conditional UPDATE of an expired
   ``in_progress`` row) and the mail is sent again.

Run: ``python -m scenarios.case_studies.confirm_justonce`` (exit 0: confirmed).
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

from scenarios.case_studies.by_hand import effects, kill_after_effect, run

WORKER = """
import sys, time
from pathlib import Path
import justonce
from justonce.stores import SqliteStore

folder, mode = Path(sys.argv[1]), sys.argv[2]
if mode == "later":
    import time_machine
    time_machine.travel(time.time() + 16 * 60, tick=True).start()
justonce.configure(SqliteStore(folder / "effects.db"))

@justonce.idempotent(key=lambda order: justonce.operation_key("confirm", order))
def send_confirmation(order):
    with open(folder / "outbox.txt", "a") as provider:   # the mail is sent
        provider.write(f"mail for {order}\\n")
    if mode == "die":
        time.sleep(60)                                   # killed before the outcome is recorded
    return "sent"

print(send_confirmation("order-7"))
"""


def main() -> int:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        outbox = folder / "outbox.txt"
        kill_after_effect(WORKER, folder, outbox, "die")
        with sqlite3.connect(folder / "effects.db") as db:
            state = db.execute("SELECT state FROM justonce_keys").fetchall()
        print(f"after the kill the key is {state}, mails sent: {len(effects(outbox))}")
        refused = run(WORKER, folder, "now")
        again = run(WORKER, folder, "later")
        sent = effects(outbox)
        print(f"mails sent: {len(sent)}: {sent}")
        confirmed = (state == [("in_progress",)] and refused.returncode != 0
                     and again.returncode == 0 and len(sent) == 2)
        print("CONFIRMED: the mail was sent twice" if confirmed else "NOT REPRODUCED")
        return 0 if confirmed else 1


if __name__ == "__main__":
    raise SystemExit(main())
