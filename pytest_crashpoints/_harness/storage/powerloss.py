"""Power loss: what an agent's SQLite database keeps when the machine, not the process, dies.

A ``SIGKILL`` takes a process's memory and leaves its writes in the operating system's page
cache: every committed transaction survives. A power loss also takes the page cache: a file
keeps what was synced (``fsync``) plus, at best, a prefix of what was written since. SQLite
decides what it syncs by its journal mode and its ``synchronous`` setting, read from the
worker's own connection at each commit (``commits.py`` puts them in the ``db.committed`` hit
as ``sync``, e.g. ``"wal/1"``):

- **WAL with ``synchronous=NORMAL``** (1): a commit appends its frames to the ``-wal`` file
  and syncs nothing; the WAL is synced only before a checkpoint copies it into the database
  (automatically past 1000 pages, and when the last connection closes). After a power loss
  the frames written since the last checkpoint may be gone: :func:`lose_unsynced` cuts the
  WAL back to the frames the last checkpoint backfilled (``nBackfill`` in the WAL index, the
  ``-shm`` file), the worst case of "a prefix", and drops the WAL index, which SQLite rebuilds
  from what is left. The commits lost are counted from the WAL's own frame headers (a commit
  frame carries the database's size).
- **WAL with ``FULL`` or ``EXTRA``** (2, 3), and the rollback-journal modes (``DELETE``,
  ``TRUNCATE``, ``PERSIST``) with ``NORMAL`` or more: every commit is synced before it
  returns, so a power loss keeps what a kill keeps (:func:`equals_a_kill`).
- **``synchronous=OFF``** (0), or ``journal_mode`` ``MEMORY`` or ``OFF``: a power loss may
  leave the file corrupt, which no recovery is expected to survive: such a database is
  refused with the reason (:func:`refusal`), and the test is told to sync or to accept the
  loss.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["Loss", "equals_a_kill", "lose_unsynced", "lossy_databases", "refusal"]

_WAL_MAGIC = (0x377F0682, 0x377F0683)
_WAL_HEADER, _FRAME_HEADER = 32, 24
#: In the WAL index (``-shm``): the header's salts (``aSalt`` of ``WalIndexHdr``, the WAL
#: header's bytes) and ``nBackfill`` of ``WalCkptInfo`` (in the machine's byte order).
_SHM_SALT, _SHM_BACKFILL, _SHM_MIN = 32, 96, 136
_SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def _parse(sync: str) -> tuple[str, int]:
    journal, _, level = sync.partition("/")
    try:
        return journal.lower(), int(level)
    except ValueError:
        return journal.lower(), 2


def describe(sync: str) -> str:
    """``"wal/1"`` as SQLite's own words: ``journal_mode=WAL, synchronous=NORMAL``."""
    journal, level = _parse(sync)
    return f"journal_mode={journal.upper()}, synchronous={_SYNC_NAMES.get(level, level)}"


def refusal(sync: str) -> str | None:
    """Why a power loss cannot be tested on a database with these settings (it may corrupt
    the file), or ``None``."""
    journal, level = _parse(sync)
    if journal in ("memory", "off"):
        return (
            f"{describe(sync)}: a crash or a power loss in a transaction can corrupt the "
            "database (SQLite keeps no journal on disk); use WAL or DELETE"
        )
    if level == 0:
        return (
            f"{describe(sync)}: SQLite syncs nothing, so a power loss can leave the file "
            "corrupt, not just older; use synchronous=NORMAL (with WAL) or FULL"
        )
    return None


def equals_a_kill(sync: str) -> bool:
    """Whether every commit with these settings is synced before it returns."""
    journal, level = _parse(sync)
    return refusal(sync) is None and not (journal == "wal" and level == 1)


def lossy_databases(hits: Iterable[object]) -> dict[str, str]:
    """The databases a worker committed to, by file name, with the settings of its last
    commit to each (``db.committed`` hits, in order), where a power loss is not a kill."""
    seen: dict[str, str] = {}
    for hit in hits:
        if getattr(hit, "point", None) != "db.committed":
            continue
        context: Mapping[str, object] = getattr(hit, "context", {}) or {}
        db, sync = context.get("db"), context.get("sync")
        if isinstance(db, str) and db and isinstance(sync, str):
            seen[db] = sync
    return {db: sync for db, sync in seen.items() if not equals_a_kill(sync)}


@dataclasses.dataclass(frozen=True)
class Loss:
    """What a power loss took from one database."""

    path: Path
    #: Commits written since the last checkpoint and now gone.
    commits: int
    #: WAL bytes cut.
    cut: int

    def __str__(self) -> str:
        if not self.commits:
            return f"{self.path.name}: every commit was synced (checkpointed); nothing lost"
        return (
            f"the last {self.commits} commit(s) of {self.path.name} were not synced "
            f"(WAL, synchronous=NORMAL) and are gone"
        )


def _backfilled(shm: Path, salts: tuple[int, int]) -> int:
    """Frames of the current WAL the last checkpoint copied into the database (synced
    before it did); 0 when the index is missing or describes another generation."""
    try:
        data = shm.read_bytes()[:_SHM_MIN]
    except OSError:
        return 0
    if len(data) < _SHM_MIN:
        return 0
    # The index keeps the salts as the WAL header's bytes (copied, not converted): read them
    # in the header's byte order, as ``lose_unsynced`` does.
    index_salts = struct.unpack_from(">II", data, _SHM_SALT)
    if index_salts != salts:
        return 0
    (backfill,) = struct.unpack_from("=I", data, _SHM_BACKFILL)
    return int(backfill)


def lose_unsynced(db: Path) -> Loss:
    """Cut ``db``'s WAL back to what the last checkpoint synced, as a power loss would
    leave it (the database file itself is only written by checkpoints, and synced by them),
    and drop its WAL index. Call it only while no process has the database open."""
    wal = db.with_name(db.name + "-wal")
    shm = db.with_name(db.name + "-shm")
    try:
        data = wal.read_bytes()
    except FileNotFoundError:
        return Loss(db, 0, 0)
    if len(data) < _WAL_HEADER:
        return Loss(db, 0, 0)
    magic, _version, page_size, _seq, salt1, salt2 = struct.unpack_from(">6I", data, 0)
    if magic not in _WAL_MAGIC or page_size < 512:
        return Loss(db, 0, 0)
    frame = _FRAME_HEADER + page_size
    backfill = _backfilled(shm, (salt1, salt2))
    keep = _WAL_HEADER + backfill * frame if backfill else 0
    commits = 0
    offset = _WAL_HEADER + backfill * frame
    while offset + frame <= len(data):
        _page, size_after, f1, f2 = struct.unpack_from(">4I", data, offset)
        if (f1, f2) != (salt1, salt2):
            break  # a frame of an earlier generation: not part of this WAL
        commits += size_after != 0
        offset += frame
    cut = len(data) - keep
    with open(wal, "r+b") as out:
        out.truncate(keep)
    if shm.exists():
        with open(shm, "r+b") as out:
            out.truncate(0)
    return Loss(db, commits, cut)
