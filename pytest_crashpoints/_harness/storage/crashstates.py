"""Crash states: the durable bytes of a run directory at one instant, copied and put back.

A ``SIGKILL`` takes only the process's memory. What a worker killed at a fail point leaves
behind is the bytes of the run directory at that instant (the reference ledger and its WAL,
the providers' journals, the authority store, the clock, the agent's own files): the
operating system's page cache holds every write the process made, and the kill does not
take it away. So instead of killing a worker at each point, the harness can stop it there
(``Stop``: the whole process, every thread, stopped with ``SIGSTOP`` exactly where a kill
would land), copy those bytes (a :class:`DurableState`), and let it go on; putting the bytes
back later (:func:`restore`) recreates what the kill would have left.

What is copied: every regular file under the run directory, except SQLite's ``-shm`` files
(the WAL index, a cache in shared memory that SQLite rebuilds from the WAL when the first
connection opens a database nobody has open, which is how every restored database is
opened) and the harness clock's lock and temporary files. Rollback journals and WAL files
are copied with their databases: they are what SQLite reads on the next open to roll back
or recover.

Copies are read through descriptors kept open until no SQLite connection of this process
is open on the files: POSIX drops every lock a process holds on a file when the process
closes *any* descriptor of it, so opening and closing a database file here while the
harness's own connections hold locks on it would silently release them
(:class:`RunDirReader`). File contents live in a content-addressed store in memory
(:class:`Blobs`): a file that did not change between two crash states is held once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["Blobs", "DurableState", "RunDirReader", "restore"]


#: Files next to the clock that are no state, left where they are when a state is put back.
_KEPT = ("clock.lock", "clock.runner")


def _skipped(relative: str) -> bool:
    """What a crash state leaves out: SQLite's WAL index (rebuilt from the WAL) and the
    harness clock's lock, plan (``busywait``) and temporary files (no state). The wait log
    next to the clock is part of it: a case resumed from the state goes on from the waits
    its processes had made by then."""
    if relative.endswith("-shm") or relative in _KEPT:
        return True
    return relative.startswith("clock.") and relative.endswith(".tmp")


class Blobs:
    """File contents by digest, in memory."""

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        #: Bytes held.
        self.size = 0

    def put(self, data: bytes, *, keep: bool = True) -> str:
        """The digest of ``data``; ``keep``: hold it too."""
        digest = hashlib.blake2b(data, digest_size=16).hexdigest()
        if keep and digest not in self._data:
            self._data[digest] = data
            self.size += len(data)
        return digest

    def get(self, digest: str) -> bytes:
        return self._data[digest]

    def clear(self) -> None:
        self._data.clear()
        self.size = 0


@dataclasses.dataclass(frozen=True)
class DurableState:
    """The files of a run directory at one instant: ``(relative path, content digest)``,
    sorted; ``digest`` names the whole (two states with one digest are byte-identical)."""

    files: tuple[tuple[str, str], ...]
    digest: str

    @classmethod
    def of(cls, files: dict[str, str]) -> DurableState:
        items = tuple(sorted(files.items()))
        text = "\n".join(f"{path}\t{digest}" for path, digest in items)
        return cls(items, hashlib.blake2b(text.encode(), digest_size=16).hexdigest())


def _walk(root: Path) -> Iterator[tuple[str, str]]:
    """``(relative path, absolute path)`` of every regular file under ``root``."""
    for relative, entry in _entries(root):
        if entry.is_file(follow_symlinks=False) and not _skipped(relative):
            yield relative, entry.path


def _entries(root: Path) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """``(relative path, entry)`` of everything under ``root`` that is not a folder; links
    are not followed."""
    stack = [root]
    while stack:
        folder = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                else:
                    yield os.path.relpath(entry.path, root), entry


class RunDirReader:
    """Copies a live run directory into :class:`DurableState` s without ever closing a
    descriptor of its files while the harness may hold SQLite locks on them.

    Each file is opened once (per inode) and kept open until :meth:`close`, which the
    caller runs only once every SQLite connection of this process on those files is closed.
    Call :meth:`capture` only while nothing writes to the directory (every process of the
    case stopped or gone, the harness itself between two writes).
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._open: dict[tuple[int, int], int] = {}

    def capture(self, blobs: Blobs, *, keep: bool = True) -> DurableState:
        """The directory's state now; ``keep=False`` only names it (nothing is held, and it
        cannot be restored)."""
        files: dict[str, str] = {}
        for relative, path in _walk(self.root):
            fd = self._descriptor(path)
            if fd is None:
                continue
            size = os.fstat(fd).st_size
            data = os.pread(fd, size, 0) if size else b""
            files[relative] = blobs.put(data, keep=keep)
        return DurableState.of(files)

    def head(self, path: str | os.PathLike[str], size: int) -> bytes:
        """The first ``size`` bytes of ``path`` (a file under the root), read through a kept
        descriptor (``b""`` if the file is gone)."""
        fd = self._descriptor(path)
        return b"" if fd is None else os.pread(fd, size, 0)

    def _descriptor(self, path: str | os.PathLike[str]) -> int | None:
        """The descriptor of ``path`` this reader keeps (one per file, by device and inode),
        opened now if it has none yet; ``None`` if the file is gone."""
        try:
            info = os.stat(path)
        except FileNotFoundError:
            return None
        key = (info.st_dev, info.st_ino)
        fd = self._open.get(key)
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                return None
            self._open[key] = fd
        return fd

    def close(self) -> None:
        """Close every kept descriptor. Only while this process holds no SQLite connection
        on the directory's files (or their locks go with them)."""
        for fd in self._open.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._open.clear()


def restore(state: DurableState, root: str | os.PathLike[str], blobs: Blobs) -> None:
    """Make the files under ``root`` those of ``state``: files it does not have are
    removed (SQLite's ``-shm`` files too: each database is then opened as after a crash),
    its files written. Only while no process has any of the files open."""
    top = Path(root)
    wanted = dict(state.files)
    for relative, entry in _entries(top):
        if relative not in wanted and relative not in _KEPT:
            os.unlink(entry.path)
    for relative, digest in state.files:
        path = top / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as out:
            out.write(blobs.get(digest))
