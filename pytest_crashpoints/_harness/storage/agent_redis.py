"""The agent's Redis: a private ``redis-server`` per case, and what a restart of it keeps.

A crash test whose agent keeps its state in Redis (``crashpoints.run(..., redis=...)``) gets a
``redis-server`` of its own in each case (:class:`AgentRedis`), empty, in a fresh directory,
with the persistence the test declares (:class:`RedisConfig`: the ``redis.conf`` directives of
production, Redis's defaults otherwise). A power loss restarts it (:meth:`AgentRedis.restart`):
the harness kills ``redis-server`` with ``SIGKILL`` once the worker is killed, as a crash of
the machine both run on, and starts it again on the same directory. The server itself reads
back what its files hold; the harness only decides, deterministically, what the files hold:

- **RDB snapshots** (Redis's default persistence, ``save`` rules, no append-only file): the
  last snapshot. Redis's ``save`` rules fire on the wall clock ("after 3600 s if at least one
  key changed"), which no deterministic test can follow; the server runs without them, and
  the harness takes the snapshot (``SAVE``) just before each delivery that it restarts
  Redis in: what that delivery wrote before it was killed is lost, unless the agent took a
  snapshot of its own since (``SAVE``, or a ``BGSAVE`` the harness lets finish). A snapshot is
  synced before Redis renames it into place, and its directory after: a power loss keeps it.
- **An append-only file** (``appendonly yes``) with ``appendfsync everysec`` or ``no``: Redis
  writes each command to the file before it answers, and syncs the file once a second (or
  when the kernel does). A crash of the process loses nothing answered; the machine's loses
  what was not synced. The harness cuts the file's incremental part back to its size just
  before the delivery (the worst case: every write of the delivery within the last second)
  and Redis loads what is left.
- **``appendfsync always``**: every write is synced before Redis answers it; a restart keeps
  everything a kill keeps, and the fault is not applicable (:meth:`AgentRedis.keeps_everything`).
- **no persistence** (``save ""``, no append-only file): a restart keeps nothing.

A restored backup (:meth:`AgentRedis.backup`, :meth:`AgentRedis.restore`) puts back the files
as they were just before the delivery, whatever the server syncs.

The server runs with automatic AOF rewrites off (``auto-aof-rewrite-percentage 0``: a rewrite
runs in the background, when it likes). What the harness runs it with is refused in the
declared directives (:data:`HARNESS_DIRECTIVES`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..._servers.daemon import private_directory
from ..._servers.redis_server import RedisDaemon
from ...errors import CrashpointsError, ServerError

__all__ = ["HARNESS_DIRECTIVES", "AgentRedis", "RedisBackup", "RedisConfig", "lossy_redis"]

#: Redis's default ``save`` rules (Redis 7).
DEFAULT_SAVE = "3600 1 300 100 60 10000"
#: The directives the harness sets itself: where the server listens and keeps its files.
HARNESS_DIRECTIVES = frozenset(
    {"port", "bind", "unixsocket", "unixsocketperm", "dir", "daemonize", "pidfile", "logfile",
     "include", "supervised", "replicaof", "slaveof", "tls-port", "syslog-enabled"}
)
#: How long the harness waits for a background save or rewrite the agent started.
BACKGROUND_PATIENCE = 30.0


@dataclasses.dataclass(frozen=True)
class RedisConfig:
    """The agent's Redis as production runs it: ``redis.conf`` directives, by name
    (``{"appendonly": "yes", "appendfsync": "everysec"}``); Redis's defaults for the rest."""

    directives: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, value: object) -> RedisConfig | None:
        """``redis=`` of ``crashpoints.run``: ``None`` or ``False`` (no Redis), ``True``
        (Redis's defaults), a mapping of directives, or a :class:`RedisConfig`. Raises
        :class:`CrashpointsError` for anything else, a directive that is not text, or one the
        harness sets itself."""
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, RedisConfig):
            return value
        if not isinstance(value, Mapping):
            raise CrashpointsError(
                f"redis={value!r} is not a Redis configuration; pass redis=True (Redis's "
                "defaults: RDB snapshots) or the redis.conf directives of production, e.g. "
                "redis={'appendonly': 'yes', 'appendfsync': 'everysec'}."
            )
        directives = []
        for name, setting in value.items():
            if not isinstance(name, str) or not isinstance(setting, str | int):
                raise CrashpointsError(
                    f"redis={{{name!r}: {setting!r}}}: a directive is a name and its value as "
                    "redis.conf writes them, e.g. {'appendfsync': 'everysec', 'save': ''}."
                )
            if name.lower() in HARNESS_DIRECTIVES:
                raise CrashpointsError(
                    f"redis={{{name!r}: ...}}: the harness sets {name!r} itself (each case's "
                    "server listens on a Unix socket of its own, in a directory of its own); "
                    "leave it out, and reach the server at ctx.redis_url."
                )
            directives.append((name.lower(), str(setting)))
        return cls(tuple(directives))

    def _declared(self, name: str, default: str) -> str:
        found = [value for key, value in self.directives if key == name]
        return found[-1] if found else default

    @property
    def appendonly(self) -> bool:
        return self._declared("appendonly", "no").strip().lower() == "yes"

    @property
    def snapshots(self) -> bool:
        """Whether the declared ``save`` rules take snapshots (Redis's default does)."""
        return bool(self._declared("save", DEFAULT_SAVE).strip().strip('"'))

    def server_directives(self) -> list[tuple[str, str]]:
        """What the server is started with: the declared directives, without the ``save``
        rules (the harness takes the snapshots) and with automatic rewrites off."""
        kept = [(name, value) for name, value in self.directives if name != "save"]
        return [*kept, ("save", ""), ("auto-aof-rewrite-percentage", "0")]

    def describe(self) -> str:
        """The persistence, in Redis's words, for the timeline."""
        if self.appendonly:
            return f"appendonly yes, appendfsync {self._declared('appendfsync', 'everysec')}"
        if self.snapshots:
            return f"RDB snapshots (save {self._declared('save', DEFAULT_SAVE)})"
        return "no persistence (save \"\", appendonly no)"


def _info(server: RedisDaemon, section: str) -> dict[str, str]:
    reply = server.call("INFO", section)
    lines = str(reply or "").splitlines()
    return dict(line.split(":", 1) for line in lines if ":" in line and not line.startswith("#"))


def _config(server: RedisDaemon, name: str) -> str:
    reply: Any = server.call("CONFIG", "GET", name)
    return str(reply[1]) if isinstance(reply, list) and len(reply) == 2 else ""


@dataclasses.dataclass(frozen=True)
class RedisBackup:
    """The files of a Redis's data, by their names in its directory."""

    files: Mapping[str, bytes]


class AgentRedis:
    """One case's Redis (see the module docstring): started empty by :meth:`start`, stopped
    and removed with its files by :meth:`close`."""

    def __init__(self, config: RedisConfig, *, timeout: float = 10.0) -> None:
        self.config = config
        self._stack = contextlib.ExitStack()
        folder = self._stack.enter_context(private_directory("crashpoints-agent-redis-"))
        self.server = RedisDaemon(folder, config.server_directives(), timeout=timeout)
        #: The append-only file's incremental parts and their sizes at the last sync point.
        self._synced: dict[str, int] = {}
        #: Why the last sync point is where it is, for the timeline.
        self._since = "the case began"
        #: Where the server keeps its append-only file (``appenddirname``).
        self._aof_folder = self.server.folder / "appendonlydir"

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> AgentRedis:
        try:
            self.server.start()
        except BaseException:
            self._stack.close()
            raise
        self._aof_folder = self.server.folder / (_config(self.server, "appenddirname")
                                                  or "appendonlydir")
        self._synced = self._incremental_sizes()
        return self

    def close(self) -> None:
        try:
            self.server.kill()  # nothing of it is kept after the case
        finally:
            self._stack.close()

    # -- what a restart keeps ----------------------------------------------------------------

    def keeps_everything(self) -> str | None:
        """Why a restart of this server loses nothing a kill keeps (``appendfsync always``),
        or ``None``: it can lose something."""
        if self._live_appendonly() and _config(self.server, "appendfsync") == "always":
            return (
                "Redis runs with appendonly yes and appendfsync always: every write is synced "
                "to the append-only file before Redis answers it, so a restart keeps every "
                "write a kill keeps"
            )
        return None

    def _live_appendonly(self) -> bool:
        return _config(self.server, "appendonly") == "yes"

    def lose_power(self) -> str:
        """After a power loss: restarted on what its files keep (:meth:`restart`), unless it
        syncs every write (then it keeps what a kill keeps); said in words."""
        kept = self.keeps_everything()
        if kept is not None:
            return f"Redis not restarted: {kept}"
        return self.restart()

    def sync_point(self, why: str) -> None:
        """What the server's files hold now is what a restart from here on brings back (until
        a later sync point or a snapshot of the agent's own): with snapshots, a ``SAVE``; with
        an append-only file, its size. ``why``: when, for the timeline."""
        self._since = why
        if self._live_appendonly():
            self._settle()
            self._synced = self._incremental_sizes()
        elif self.config.snapshots:
            self._settle()
            self.server.call("SAVE")

    def restart(self) -> str:
        """Kill the server and start it again on what its files keep (see the module
        docstring); what was lost, in words."""
        self._settle()
        appendonly = self._live_appendonly()
        if appendonly:
            self.server.kill()
            said = self._cut_unsynced()
        else:
            changes = _info(self.server, "persistence").get("rdb_changes_since_last_save", "?")
            self.server.kill()
            said = self._rdb_words(changes)
        self.server.start()
        return f"Redis restarted: {said}; it holds {self._held()} key(s) now"

    def _rdb_words(self, changes: str) -> str:
        dump = self.server.folder / (_config_file_name(self.server) or "dump.rdb")
        if not dump.exists():
            return (
                f"it had no snapshot ({self.config.describe()}): every key it held is gone"
            )
        return (
            f"it loaded its last snapshot, {dump.name}, taken when {self._since} or later by "
            f"the agent ({self.config.describe()}): the {changes} change(s) made after it "
            "are gone"
        )

    def _settle(self) -> None:
        """Wait until no background save or AOF rewrite is running (one the agent started is
        let finish, as if the restart came just after it: the same files every run)."""
        deadline = time.monotonic() + BACKGROUND_PATIENCE
        while True:
            info = _info(self.server, "persistence")
            busy = [k for k in ("rdb_bgsave_in_progress", "aof_rewrite_in_progress",
                                "aof_rewrite_scheduled") if info.get(k, "0") != "0"]
            if not busy:
                return
            if time.monotonic() > deadline:
                raise ServerError(
                    f"the agent's redis-server still had {', '.join(busy)} after "
                    f"{BACKGROUND_PATIENCE:g} s; its log: {self.server.log}"
                )
            time.sleep(0.01)

    # -- a backup ------------------------------------------------------------------------------

    def backup(self) -> RedisBackup:
        """A copy of what the server holds now, as its files (a snapshot taken with ``SAVE``
        or, with an append-only file, that file): what :meth:`restore` puts back."""
        self._settle()
        if self._live_appendonly():
            files = {path.relative_to(self.server.folder).as_posix(): path.read_bytes()
                     for path in sorted(self._aof_folder.iterdir()) if path.is_file()}
        else:
            dump = self.server.folder / (_config_file_name(self.server) or "dump.rdb")
            existed = dump.exists()
            self.server.call("SAVE")
            files = {dump.name: dump.read_bytes()}
            if not existed and not self.config.snapshots:
                dump.unlink()  # a server that takes no snapshots keeps none of the backup's
        return RedisBackup(files)

    def restore(self, backup: RedisBackup, why: str) -> str:
        """Kill the server, put ``backup``'s files back in place of its own, and start it on
        them; what it holds then, in words (``why``: when the backup was taken)."""
        self._settle()
        self.server.kill()
        shutil.rmtree(self._aof_folder, ignore_errors=True)
        for name in backup.files:
            (self.server.folder / name).unlink(missing_ok=True)
        for name, data in backup.files.items():
            target = self.server.folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        self.server.start()
        self._synced = self._incremental_sizes()
        return f"Redis restored from a backup taken when {why}: it holds {self._held()} key(s)"

    def _held(self) -> int:
        keys = _info(self.server, "keyspace")
        return sum(int(part.split("=", 1)[1]) for db in keys.values()
                   for part in db.split(",") if part.startswith("keys="))

    # -- the append-only file ----------------------------------------------------------------

    def _incremental_sizes(self) -> dict[str, int]:
        """The append-only file's incremental parts (its manifest's ``type i`` files) and
        their sizes; none without an append-only file."""
        return {name: path.stat().st_size if path.exists() else 0
                for name, path in _incremental_parts(self._aof_folder).items()}

    def _cut_unsynced(self) -> str:
        """Cut each incremental part of the (dead) server's append-only file back to its size
        at the last sync point; what was cut, in words."""
        now = _incremental_parts(self._aof_folder)
        cut: list[str] = []
        for name, path in sorted(now.items()):
            keep = self._synced.get(name, 0)
            size = path.stat().st_size if path.exists() else 0
            if size > keep:
                tail = path.read_bytes()[keep:]
                with open(path, "r+b") as out:
                    out.truncate(keep)
                cut.append(f"{name} lost its last {size - keep} byte(s) "
                           f"({_commands(tail)})")
        if not cut:
            return (f"its append-only file was synced ({self.config.describe()}): nothing "
                    "written since " + self._since + " to lose")
        return (
            f"its append-only file kept only what was synced when {self._since} "
            f"({self.config.describe()}): " + "; ".join(cut)
        )

    # -- the killed-recovery replay's copy ---------------------------------------------------

    def clone(self) -> AgentRedis:
        """A server of its own holding what this one holds now (its snapshot, taken with
        ``SAVE``): the killed-recovery replay runs on it. It never restarts: it runs without
        an append-only file."""
        self._settle()
        self.server.call("SAVE")
        dump = self.server.folder / (_config_file_name(self.server) or "dump.rdb")
        plain = RedisConfig(
            tuple((n, v) for n, v in self.config.directives
                  if n not in ("appendonly", "dbfilename"))
        )
        copy = AgentRedis(plain, timeout=self.server.timeout)
        shutil.copyfile(dump, copy.server.folder / "dump.rdb")
        return copy.start()


def lossy_redis(redis: AgentRedis | None, hits: Iterable[Any]) -> tuple[tuple[str, str], ...]:
    """``(("redis", "redis"),)`` when a delivery whose fail point hits are ``hits`` wrote to
    the agent's Redis (a ``db.committed`` of a ``redis:`` database) and a restart of it can
    lose a write: a power loss is then tried on that delivery; ``()`` otherwise."""
    wrote = any(
        getattr(hit, "point", None) == "db.committed"
        and str((getattr(hit, "context", None) or {}).get("db", "")).startswith("redis:")
        for hit in hits
    )
    if redis is None or not wrote or redis.keeps_everything() is not None:
        return ()
    return (("redis", "redis"),)


def _config_file_name(server: RedisDaemon) -> str:
    with contextlib.suppress(ServerError):
        return _config(server, "dbfilename")
    return ""


def _incremental_parts(folder: Path) -> dict[str, Path]:
    """The incremental parts of the append-only file in ``folder``, as its manifest lists
    them (``file <name> seq <n> type i``)."""
    parts: dict[str, Path] = {}
    for manifest in folder.glob("*.manifest"):
        for line in manifest.read_text(encoding="utf-8").splitlines():
            fields = line.split()
            pairs = dict(zip(fields[::2], fields[1::2], strict=False))
            if pairs.get("type") == "i" and "file" in pairs:
                parts[pairs["file"]] = folder / pairs["file"]
    return parts


def _commands(data: bytes) -> str:
    """The commands a piece of an append-only file holds (RESP arrays), named."""
    names: list[str] = []
    pos = 0
    while pos < len(data) and data[pos:pos + 1] == b"*":
        end = data.find(b"\r\n", pos)
        if end < 0:
            break
        try:
            count = int(data[pos + 1:end])
        except ValueError:
            break
        pos = end + 2
        for index in range(count):
            end = data.find(b"\r\n", pos)
            if end < 0 or data[pos:pos + 1] != b"$":
                return _named(names)
            size = int(data[pos + 1:end])
            if index == 0:
                names.append(data[end + 2:end + 2 + size].decode("utf-8", "replace").upper())
            pos = end + 2 + size + 2
    return _named(names)


def _named(names: list[str]) -> str:
    shown = [n for n in names if n not in ("MULTI", "EXEC", "SELECT")]
    return f"{len(shown)} command(s): {', '.join(shown)}" if shown else "no whole command"
