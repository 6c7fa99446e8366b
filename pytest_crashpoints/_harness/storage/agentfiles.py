"""The agent's own files in a run directory: what a backup holds, what a restore and a power
loss act on.

Everything a case's worker and recovery wrote under the run directory is the agent's (its
SQLite databases, the reference ledger, JSON lines, plain files), except what the harness
keeps there: the providers' journals (the world: a restore or a power loss of the agent never
touches them), the authority store, the clock and the logs. SQLite's ``-shm`` files are left
out too: the WAL index is a cache in shared memory that SQLite rebuilds when the first
connection opens a database nobody has open.

:class:`Backup` is the agent's files at one instant (taken while no process of the case
runs); :meth:`Backup.restore` puts them back, removing what was written since.
:func:`lose_unsynced_file` is a power loss for a file that is not SQLite's: it keeps what was
synced (``os.fsync``, ``os.fdatasync``: the worker's calls are logged by
:func:`install_sync_log`, which also places ``file.sync`` before each) and loses what was
written since, its first record torn.

The model of what the power takes is the simplest one a strict reader must survive, on any
file system: a file keeps every byte of its last sync (and what it held before the delivery
began, long enough on disk to have been written back) and loses the bytes written since, but
for a prefix of them that ends inside their first record (line): the first half of that
record. That is the data a machine wrote back in part before it died (a page of it, or one of
the ``write()`` calls a record was written with), as ext4 (``data=ordered``) and XFS leave a
file extended since its last sync: a prefix of what was appended, cut where writeback
stopped. Not modelled: a later part kept without an earlier one (a hole read as zeros), a
size kept without its data (a tail of NUL bytes), writes kept out of order.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..._inject.syncs import SQLITE_HEADER, SQLITE_SUFFIXES, install_sync_hooks

if TYPE_CHECKING:
    from .crashstates import RunDirReader

__all__ = [
    "Backup",
    "FileLoss",
    "agent_files",
    "install_sync_log",
    "is_sqlite",
    "lose_unsynced_file",
    "synced_sizes",
]

_HARNESS_DIRS = ("journals", "logs")
#: The log of the worker's syncs, one per process: ``<path>\t<size>`` per line (a rename
#: ``>\t<old>\t<new>``, a file whose every write is synced ``=\t<path>``).
SYNC_LOG = "logs/syncs-{pid}.tsv"


def _harness_owned(relative: str) -> bool:
    top = relative.split("/", 1)[0]
    if top in _HARNESS_DIRS or relative.endswith("-shm"):
        return True
    if top.startswith("authority.sqlite3"):
        return True
    return top == "clock" or top.startswith("clock.")


def agent_files(root: Path) -> Iterator[Path]:
    """The agent's regular files under ``root`` (a run directory), sorted."""
    found = []
    for directory, _dirs, files in os.walk(root):
        for name in files:
            path = Path(directory) / name
            relative = path.relative_to(root).as_posix()
            if not _harness_owned(relative) and path.is_file() and not path.is_symlink():
                found.append(path)
    return iter(sorted(found))


def is_sqlite(path: Path, reader: RunDirReader | None = None) -> bool:
    """A SQLite database, or one of its journals (a WAL, a rollback journal). With
    ``reader``, the header is read through its kept descriptors: a file this process may
    hold SQLite connections on must never be opened and closed here (closing any descriptor
    of a file drops every POSIX lock the process holds on it, the connections' included)."""
    if path.name.endswith(SQLITE_SUFFIXES):
        return True
    if reader is not None:
        return reader.head(path, len(SQLITE_HEADER)) == SQLITE_HEADER
    try:
        with open(path, "rb") as file:
            return file.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


@dataclasses.dataclass(frozen=True)
class Backup:
    """The agent's files at one instant, by path relative to the run directory."""

    files: Mapping[str, bytes]

    @classmethod
    def take(cls, root: Path) -> Backup:
        """The agent's files now. Only while no process writes them and this process holds
        no SQLite connection on them: closing a descriptor of a file drops every POSIX lock
        the process holds on it (the caller closes the harness's connections first)."""
        return cls({p.relative_to(root).as_posix(): p.read_bytes() for p in agent_files(root)})

    def restore(self, root: Path) -> list[str]:
        """Put the files back as they were, remove the agent's files written since, and drop
        the WAL index of every database (SQLite rebuilds it). Returns what changed, sorted."""
        changed = []
        for path in agent_files(root):
            relative = path.relative_to(root).as_posix()
            if relative not in self.files:
                path.unlink()
                changed.append(relative)
        for relative, data in sorted(self.files.items()):
            path = root / relative
            if not path.exists() or path.read_bytes() != data:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                changed.append(relative)
        for directory, _dirs, files in os.walk(root):
            for name in files:
                path = Path(directory) / name
                if name.endswith("-shm") and path.relative_to(root).parts[0] != "journals":
                    path.unlink()
        return sorted(set(changed))


@dataclasses.dataclass(frozen=True)
class FileLoss:
    """What a power loss took from a file that is not SQLite's."""

    relative: str
    #: Bytes kept (synced, or there before the process started), and bytes lost.
    kept: int
    lost: int
    #: A torn write: the first bytes of what was lost were kept (a record cut in two).
    torn: int = 0

    def __str__(self) -> str:
        text = f"{self.relative} lost its last {self.lost} byte(s), never synced"
        if self.torn:
            text += f" (the first {self.torn} of them kept: a torn write)"
        return text


def synced_sizes(root: Path) -> dict[str, int]:
    """The size of each agent file at the last sync any process of the case made of it
    (their sync logs, in the order of the lines of each); a file renamed since takes what was
    synced under its old name; a file opened with ``O_SYNC`` or ``O_DSYNC``, its size now."""
    sizes: dict[str, int] = {}
    lines: list[str] = []
    for log in sorted((root / "logs").glob("syncs-*.tsv")):
        try:
            lines += log.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
    top = root.resolve()

    def relative(path: str) -> str | None:
        try:
            return Path(path).resolve().relative_to(top).as_posix()
        except ValueError:
            return None

    always: set[str] = set()  # opened with O_SYNC or O_DSYNC: every write synced
    for line in lines:
        if line.startswith(">\t"):  # renamed: what was synced under the old name moves
            _, old, new = line.split("\t", 2)
            moved, to = relative(old), relative(new)
            if moved is not None and to is not None:
                synced = sizes.pop(moved, None)
                if synced is None:
                    sizes.pop(to, None)
                else:
                    sizes[to] = synced
                if moved in always:
                    always.discard(moved)
                    always.add(to)
                else:
                    always.discard(to)
            continue
        if line.startswith("=\t"):
            if (name := relative(line[2:])) is not None:
                always.add(name)
            continue
        path, _, size = line.rpartition("\t")
        if path and size.isdigit() and (name := relative(path)) is not None:
            sizes[name] = int(size)
    for name in always:
        try:
            sizes[name] = (top / name).stat().st_size
        except OSError:
            continue
    return sizes


def lose_unsynced_file(
    root: Path, relative: str, before: bytes | None, synced: int | None, *, torn: bool = True
) -> FileLoss | None:
    """A power loss of one file: it keeps the larger of what was there before the process
    started (``before``, on disk long enough to be written back) and what was synced
    (``synced`` bytes), as far as both are still a prefix of it; ``torn`` keeps the first
    half of the first record (line) lost too, as a write cut by the power does. ``None``:
    nothing to lose."""
    path = root / relative
    data = path.read_bytes()
    keep = 0
    if before is not None and data.startswith(before):
        keep = len(before)
    if synced is not None:
        keep = max(keep, min(synced, len(data)))
    if before is not None and not data.startswith(before) and synced is None:
        # Rewritten in place, never synced: the old content comes back.
        path.write_bytes(before)
        return FileLoss(relative, len(before), len(data))
    if keep >= len(data):
        return None
    cut = 0
    if torn:
        record = data[keep:].split(b"\n", 1)[0]
        cut = len(record) // 2  # a record of 1 byte is lost whole
    with open(path, "r+b") as file:
        file.truncate(keep + cut)
    return FileLoss(relative, keep, len(data) - keep, cut)


def install_sync_log(root: Path) -> None:
    """In a worker process: fire ``file.sync`` before each ``os.fsync`` / ``os.fdatasync`` of
    an agent file under ``root`` (a run directory), and log each sync of a file under it (its
    path and size after the sync) to this process's sync log (``_inject/syncs.py``)."""
    install_sync_hooks(root, log=root / SYNC_LOG.format(pid=os.getpid()), skip=_harness_owned)
