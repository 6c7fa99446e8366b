"""What a power loss or a restore from a backup does to the agent's files (and its Redis)
after a kill: the storage faults of a delivery, as :class:`~.steps.CaseRun` does them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._process.outcome import Killed
from ..storage.agentfiles import (
    Backup,
    agent_files,
    is_sqlite,
    lose_unsynced_file,
    synced_sizes,
)
from ..storage.powerloss import lose_unsynced, lossy_databases, refusal
from ..verdict.evidence import Incident
from .bridge import CommandWorker
from .case_record import CaseRecord
from .context import Context
from .program_hooks import hooks_of, unhooked_reason

if TYPE_CHECKING:
    from ..storage.agent_redis import RedisBackup


__all__ = ["StorageSteps"]


class StorageSteps(CaseRecord):
    """The storage faults of a delivery: the agent's files before it, and what a power
    loss or a backup restore leaves of them after a kill."""

    def _fresh_context(self) -> None:
        """Close every connection this process holds on the run directory's files (a fresh
        harness context opens them again when next needed): a copy or a rewrite of the
        agent's files then drops no lock of ours, and no cached page outlives a rewrite."""
        self.world.ctx.close()
        self.world.files.close()
        self.world.ctx = Context(self.world.env, "harness")

    def _agent_files(self) -> Backup:
        with self.world.still():
            self._fresh_context()
            return Backup.take(self.env.path)

    def _unsynced_files(self, who: str) -> tuple[tuple[str, str], ...]:
        """The agent's files (not SQLite's) that hold more than their last sync (by size; a
        file never synced counts): a power loss would take something from them."""
        if not self._syncs_seen(who):
            return ()
        synced = synced_sizes(self.env.path)
        out = []
        for path in agent_files(self.env.path):
            relative = path.relative_to(self.env.path).as_posix()
            if is_sqlite(path, self.world.files):
                continue
            size = path.stat().st_size
            if size and size > synced.get(relative, -1):
                out.append((relative, "file"))
        return tuple(out)

    def unhooked(self) -> str:
        """For a worker that is a command: why its deliveries ran no Python with the
        harness's hooks (``""``: one did, or the worker is a Python function)."""
        if not isinstance(self.scenario.worker, CommandWorker) or not self.deliveries:
            return ""
        logs = self.env.run_dir.logs
        reasons = [unhooked_reason(hooks_of(logs, who)) for who in self.deliveries]
        return "" if not all(reasons) else reasons[0]

    def _syncs_seen(self, who: str) -> bool:
        """Whether process ``who``'s syncs are seen: a Python worker, or a command whose
        Python ran with the harness's hooks (``program_hooks.py``)."""
        if not isinstance(self.scenario.worker, CommandWorker):
            return True
        return any(line.get("hooked") is True for line in hooks_of(self.env.run_dir.logs, who))

    def _restore_backup(
        self,
        who: str,
        index: int,
        outcome: object,
        before: Backup,
        redis_backup: RedisBackup | None = None,
    ) -> None:
        """After a kill: the agent's files (and its Redis) put back from the backup taken
        before this delivery (the providers keep everything); said in the timeline."""

        if not isinstance(outcome, Killed):
            said = f"no backup restored: {who} ended before its point"
        else:
            with self.world.still():
                self._fresh_context()
                changed = before.restore(self.env.path)
            names = ", ".join(changed) if changed else "nothing had changed"
            said = (
                f"backup restored: the agent's files as they were before message {index} was "
                f"delivered ({names}); the providers keep what was done since"
            )
            if self.world.redis is not None and redis_backup is not None:
                when = f"message {index} was about to be delivered"
                said += "; " + self.world.redis.restore(redis_backup, when)
            self.incidents.append(
                Incident(
                    self.clock.now(),
                    f"the agent's files were restored from a backup "
                    f"taken before message {index} ({names})",
                )
            )
        self.history.add(self.step, self.clock.now(), "power", said, process=who)

    def _lose_unsynced_files(self, who: str, before: Backup) -> list[str]:
        """A power loss of the agent's files that are not SQLite's: each keeps what was
        synced or there before the delivery, and the first half of the next record."""
        if not self._syncs_seen(who):
            return [
                "files other than SQLite's not modelled (the worker is a command that ran no "
                "Python with the harness's hooks: its syncs are not seen)"
            ]
        synced = synced_sizes(self.env.path)
        out = []
        with self.world.still():
            self._fresh_context()
            for path in agent_files(self.env.path):
                relative = path.relative_to(self.env.path).as_posix()
                if is_sqlite(path):
                    continue
                old = before.files.get(relative)
                if old is not None and path.read_bytes() == old:
                    continue
                loss = lose_unsynced_file(self.env.path, relative, old, synced.get(relative))
                if loss is not None:
                    out.append(str(loss))
        return out

    def _lose_power(self, who: str, outcome: object, before: Backup) -> None:
        """After a kill that is a power loss: each database the worker committed to without
        syncing loses what it did not sync (``powerloss.py``); said in the timeline."""

        if not isinstance(outcome, Killed):
            said = f"no power loss: {who} ended before its point"
            self.history.add(self.step, self.clock.now(), "power", said, process=who)
            return
        lossy = lossy_databases(getattr(outcome, "hits", ()))
        parts: list[str] = []
        with self.world.still():
            self._fresh_context()
            for name, sync in sorted(lossy.items()):
                reason = refusal(sync)
                if reason is not None:
                    parts.append(f"not modelled on {name} ({reason})")
                    continue
                for path in sorted(self.env.path.rglob(name)):
                    if path.is_file() and "journals" not in path.relative_to(self.env.path).parts:
                        parts.append(str(lose_unsynced(path)))
        parts += self._lose_unsynced_files(who, before)
        if self.world.redis is not None:
            parts.append(self.world.redis.lose_power())
        if not parts:
            parts.append(
                "every database it committed to syncs each commit: nothing more lost than by a kill"
            )
        said = "; ".join(parts)
        self.history.add(self.step, self.clock.now(), "power", f"power lost: {said}", process=who)
        self.incidents.append(Incident(self.clock.now(), f"the power was lost ({said})"))
