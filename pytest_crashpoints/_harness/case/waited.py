"""What the processes of a case waited: their wait log read into the timeline, and the totals.

Every wait a worker makes is a line of the run's wait log (``_process/waits.py``). After each
process ends, the harness reads what was added and writes one timeline line per run of waits
of one process that went the same way, at the harness time they ended:

    t=33.0  worker-1 waited 31s (time.sleep) in no real time
    t=45.2  worker-2 waited 12.2s for real (12 waits, time.sleep): a connection to pid 4242
            (redis-server)

and adds them to the case's totals (:class:`Waited`): the seconds skipped, the seconds waited
for real because something real could act (a server, a child, a thread, another process of
the case: what the runtime needed), and the seconds of real waits that moved the clock only by
their length (on the case's own providers, or with skipping switched off).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..._process.waits import WaitRecord, log_path, read_log, records_by_run
from ..verdict.history import History

__all__ = ["Waited", "read_waits"]


@dataclasses.dataclass
class Waited:
    """The waits of a case's processes, in seconds: ``skipped`` (harness time that cost no
    real time), ``real`` (real time waited because something real could act), ``world``
    (waits on the case's own providers, or with skipping off: real time, the clock moved by
    their length only), and how many waits in all."""

    skipped: float = 0.0
    real: float = 0.0
    world: float = 0.0
    waits: int = 0

    def add(self, records: Sequence[WaitRecord]) -> None:
        for record in records:
            self.waits += 1
            seconds = float(record["seconds"])
            if record["why"] is None:
                self.skipped += seconds
            elif record["real"]:
                self.real += seconds
            else:
                self.world += seconds

    def merge(self, other: Waited) -> None:
        """Add another case's totals to these."""
        self.skipped += other.skipped
        self.real += other.real
        self.world += other.world
        self.waits += other.waits

    def to_json(self) -> dict[str, float]:
        return {
            "skipped": round(self.skipped, 3),
            "real": round(self.real, 3),
            "world": round(self.world, 3),
            "waits": self.waits,
        }


def read_waits(
    clock_path: str, start: int, history: History, step: int, waited: Waited
) -> int:
    """Add to ``history`` (at ``step``) and ``waited`` the waits logged from byte ``start`` of
    the run's wait log; return where the next read starts."""
    records, end = read_log(log_path(clock_path), start)
    for run in records_by_run(records):
        who = run[0]["process"] or f"pid {run[0]['pid']}"
        history.add(step, float(run[-1]["at"]), "wait", _text(who, run), process=who)
    waited.add(records)
    return end


def _text(who: str, run: Sequence[WaitRecord]) -> str:
    seconds = sum(float(r["seconds"]) for r in run)
    how = run[0]["what"] if len(run) == 1 else f"{len(run)} waits, {run[0]['what']}"
    why = run[0]["why"]
    if why is None:
        return f"{who} waited {seconds:.4g}s ({how}) in no real time"
    if run[0]["real"]:
        return f"{who} waited {seconds:.4g}s for real ({how}): {why}"
    return f"{who} waited {seconds:.4g}s ({how}), really waited: {why}"
