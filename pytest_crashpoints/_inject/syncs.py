"""An automatic fail point between each write to a file and its sync: ``file.sync``.

Inside a harness worker, :func:`install_sync_hooks` wraps ``os.fsync`` and ``os.fdatasync``
(the module attributes, looked up at call time; a name imported before the hooks were
installed, ``from os import fsync``, is not seen). For a sync of a regular file under the
case's run directory:

- just before the real sync, ``crashpoint("file.sync", file=<path relative to the run
  directory>)`` fires (:data:`~.failpoints.SYNC_POINT`), unless the file is the harness's own
  (``skip``) or SQLite's (a database, told by its header, or its ``-wal``, ``-shm`` or
  ``-journal``: SQLite syncs those itself, in C, unseen). Here the bytes the worker wrote
  since the file's last sync are in the operating system's page cache and nowhere else: a
  kill keeps them, a power loss takes them, or tears the first record of them
  (``_harness/storage/agentfiles.py``). It is the window between a ``write()`` and its
  ``fsync()``;
- after the real sync returns, ``<path>\\t<size>`` is appended to the process's sync log: what
  the file holds on disk from then on (what a power loss keeps). A sync that raised logs
  nothing.

``os.rename`` and ``os.replace`` (and ``Path.rename``, ``Path.replace``, ``shutil.move`` on
them) of a file under the run directory are logged too, as ``>\\t<old path>\\t<new path>``:
what was synced under the old name is synced under the new one (write, sync, rename: the
atomic replace). The directory's own sync is not seen: the rename counts as durable at once.

``os.sync()`` syncs every file: after it returns, each regular file under the run directory
is logged with its size (no fail point: it names no file). A file opened with ``os.open`` and
``O_SYNC`` or ``O_DSYNC`` (``open(..., opener=...)`` included) has each write synced before the
write returns, with no call to see: it is logged once as ``=\t<path>``, and counts as synced
up to its size whenever a power loss comes.

A directory's descriptor, a pipe, a socket and files outside the run directory pass through
untouched. Not seen: ``mmap.flush()``, a file opened with ``O_SYNC`` by C code, and syncs made
in C (an extension's own).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .failpoints import SYNC_POINT, automatic_crashpoint

__all__ = ["SQLITE_HEADER", "SQLITE_SUFFIXES", "install_sync_hooks"]

#: The first bytes of every SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"
#: The files SQLite keeps beside a database: its WAL, its WAL index, its rollback journal.
SQLITE_SUFFIXES = ("-wal", "-shm", "-journal")

#: The real functions, once the hooks are installed (after a fork too: the child inherits
#: them, and a later call only points the hooks at its own run directory).
_original: dict[str, Callable[..., Any]] = {}


def _nothing(relative: str) -> bool:
    return False


class _Target:
    """Where the hooks look and log: set by each :func:`install_sync_hooks` call."""

    def __init__(self) -> None:
        self.prefix = ""
        self.log: Path | None = None
        self.skip: Callable[[str], bool] = _nothing


_target = _Target()


def _under_root(fd: Any) -> tuple[int, str, str] | None:
    """The descriptor, the path and the path relative to the run directory of a regular file
    under it that ``fd`` (a descriptor, or an object with ``fileno()``) names; else None."""
    if not _target.prefix:
        return None
    try:
        number = fd if isinstance(fd, int) else int(fd.fileno())
        path = os.readlink(f"/proc/self/fd/{number}")
        regular = stat.S_ISREG(os.fstat(number).st_mode)
    except (OSError, AttributeError, TypeError, ValueError):
        return None
    if not regular or not path.startswith(_target.prefix):
        return None
    return number, path, path[len(_target.prefix) :]


def _is_sqlite(number: int, relative: str) -> bool:
    """Read through the same descriptor (``pread``): opening and closing another one would
    drop every POSIX lock this process holds on the file, a SQLite connection's included."""
    if relative.endswith(SQLITE_SUFFIXES):
        return True
    try:
        return os.pread(number, len(SQLITE_HEADER), 0) == SQLITE_HEADER
    except OSError:  # opened for writing only: not a file SQLite opened
        return False


def _hooked(real: Callable[[Any], None]) -> Callable[[Any], None]:
    def sync(fd: Any) -> None:
        found = _under_root(fd)
        if found is not None:
            number, _path, relative = found
            if not _target.skip(relative) and not _is_sqlite(number, relative):
                automatic_crashpoint(SYNC_POINT, file=relative)
        real(fd)
        if found is not None and _target.log is not None:
            number, path, _relative = found
            try:
                size = os.fstat(number).st_size
                with open(_target.log, "a", encoding="utf-8") as log:
                    log.write(f"{path}\t{size}\n")
            except OSError:
                return

    sync.__doc__ = real.__doc__
    sync.__name__ = getattr(real, "__name__", "sync")
    return sync


def _log(*lines: str) -> None:
    if _target.log is None or not lines:
        return
    try:
        with open(_target.log, "a", encoding="utf-8") as log:
            log.writelines(f"{line}\n" for line in lines)
    except OSError:
        return


def _synced_all(real: Callable[[], None]) -> Callable[[], None]:
    def sync() -> None:
        real()
        if not _target.prefix:
            return
        found = []
        for folder, _dirs, files in os.walk(_target.prefix):
            for name in files:
                path = os.path.join(folder, name)
                try:
                    info = os.lstat(path)
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode):
                    found.append(f"{path}\t{info.st_size}")
        _log(*found)

    sync.__doc__ = real.__doc__
    sync.__name__ = getattr(real, "__name__", "sync")
    return sync


_SYNC_FLAGS = getattr(os, "O_SYNC", 0) | getattr(os, "O_DSYNC", 0)


def _synced_open(real: Callable[..., int]) -> Callable[..., int]:
    def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = real(path, flags, *args, **kwargs)
        if flags & _SYNC_FLAGS and _target.prefix:
            found = _under_root(fd)
            if found is not None:
                _log(f"=\t{found[1]}")
        return fd

    open_.__doc__ = real.__doc__
    open_.__name__ = getattr(real, "__name__", "open")
    return open_


def _logged_rename(real: Callable[..., None]) -> Callable[..., None]:
    def rename(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        real(src, dst, *args, **kwargs)
        if args or kwargs or _target.log is None:  # relative to directory descriptors
            return
        try:
            old, new = (
                os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(p))),
                             os.path.basename(os.fsdecode(p)))
                for p in (src, dst)
            )
        except (TypeError, ValueError, OSError):
            return
        if old.startswith(_target.prefix) and new.startswith(_target.prefix):
            _log(f">\t{old}\t{new}")

    rename.__doc__ = real.__doc__
    rename.__name__ = getattr(real, "__name__", "rename")
    return rename


def install_sync_hooks(
    root: str | os.PathLike[str],
    *,
    log: str | os.PathLike[str],
    skip: Callable[[str], bool] = _nothing,
) -> None:
    """Fire ``file.sync`` before each ``os.fsync`` / ``os.fdatasync`` of a file under ``root``
    and log each one after it (see the module docstring). ``log``: this process's sync log;
    ``skip(relative path)``: the files that are the harness's own (no fail point; logged).
    A second call points the hooks at another directory and log."""
    _target.prefix = str(Path(root).resolve()) + os.sep
    _target.log = Path(log)
    _target.skip = skip
    if _original:
        return
    for name in ("fsync", "fdatasync"):
        _original[name] = real = getattr(os, name)
        setattr(os, name, _hooked(real))
    for name in ("rename", "replace"):
        _original[name] = moved = getattr(os, name)
        setattr(os, name, _logged_rename(moved))
    if hasattr(os, "sync"):
        _original["sync"] = everything = os.sync
        os.sync = _synced_all(everything)
    _original["open"] = opened = os.open
    os.open = _synced_open(opened)
