"""Automatic fail points at every write a process makes to Redis through redis-py.

Inside a harness worker, :func:`install_redis_hooks` makes every write command of redis-py's
clients, sync (``redis.Redis``) and asyncio (``redis.asyncio.Redis``), fire the points SQLite's
commits fire (``commits.py``), as one commit each:

- ``crashpoint("db.commit", db="redis:<n>", n=k, server=..., command=...)`` just before the
  command leaves for the server (a kill here: the server never got it);
- ``crashpoint("db.committed", ...)`` just after its reply arrived (the server applied it), not
  after a command that raised. Before it fires, the process is marked as having committed
  since its last write request to a provider: the wire hooks' automatic A (``wire.py``).

``db`` names the Redis database (``"redis:0"``), ``server`` the server (``unix:///path`` or
``host:port``), ``command`` the command's name (``"HSET"``); ``n`` counts the process's commits,
SQLite's and Redis's together. A write is a command Redis flags ``write`` (``SET``, ``HSET``,
``DEL``, ``XADD``, the popping ``BLPOP`` ...; :data:`WRITES`), a Lua script or function that may
write (``EVAL``, ``EVALSHA``, ``FCALL``: not their ``_RO`` forms) and the ``FUNCTION`` and
``XGROUP`` subcommands that change data. A pipeline, with ``MULTI``/``EXEC`` (redis-py's
default) or without, is one commit when any command in it writes: it is sent at once. Reads
(``GET``, ``HGETALL``, ``WAIT``...) fire nothing.

A commit the harness makes fail (``failed_commit``, ``disk_full``: the fault raises SQLite's
error at ``db.commit``) raises what redis-py raises for the server's own refusal, before the
command is sent (nothing applied): for an I/O error, the ``MISCONF`` refusal Redis answers
every write with once it cannot persist (``ResponseError``); for a full disk, Redis full:
``OOM command not allowed when used memory > 'maxmemory'`` (``OutOfMemoryError``).

Installing imports nothing: redis-py's client modules are hooked when the process imports
them (or at once, if it already did). Not seen: ``RedisCluster`` and other clients that do not
go through ``redis.Redis.execute_command`` or a ``Pipeline``'s ``execute``, commands sent on a
raw connection, and writes in a ``MULTI`` sent as separate ``execute_command`` calls.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import sqlite3
import sys
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from .commits import next_commit_number
from .failpoints import COMMIT_POINTS, crashpoint, since_last_request

__all__ = ["WRITES", "install_redis_hooks", "is_write"]

_BEFORE, _AFTER = COMMIT_POINTS

#: The commands Redis 7 flags ``write`` (``COMMAND INFO``), and those of later versions that
#: change hashes (7.4, 8.0), lower case.
WRITES = frozenset(
    {
        "append", "bitfield", "bitop", "blmove", "blmpop", "blpop", "brpop", "brpoplpush",
        "bzmpop", "bzpopmax", "bzpopmin", "copy", "decr", "decrby", "del", "expire", "expireat",
        "flushall", "flushdb", "geoadd", "georadius", "georadiusbymember", "geosearchstore",
        "getdel", "getex", "getset", "hdel", "hincrby", "hincrbyfloat", "hmset", "hset",
        "hsetnx", "incr", "incrby", "incrbyfloat", "linsert", "lmove", "lmpop", "lpop", "lpush",
        "lpushx", "lrem", "lset", "ltrim", "migrate", "move", "mset", "msetnx", "persist",
        "pexpire", "pexpireat", "pfadd", "pfdebug", "pfmerge", "psetex", "rename", "renamenx",
        "restore", "restore-asking", "rpop", "rpoplpush", "rpush", "rpushx", "sadd",
        "sdiffstore", "set", "setbit", "setex", "setnx", "setrange", "sinterstore", "smove",
        "sort", "spop", "srem", "sunionstore", "swapdb", "unlink", "xack", "xadd", "xautoclaim",
        "xclaim", "xdel", "xreadgroup", "xsetid", "xtrim", "zadd", "zdiffstore", "zincrby",
        "zinterstore", "zmpop", "zpopmax", "zpopmin", "zrangestore", "zrem", "zremrangebylex",
        "zremrangebyrank", "zremrangebyscore", "zunionstore", "hexpire", "hpexpire",
        "hexpireat", "hpexpireat", "hpersist", "hgetdel", "hgetex", "hsetex", "eval", "evalsha",
        "fcall",
    }
)
#: Container commands whose subcommands change data.
_WRITING_SUBCOMMANDS = {
    "function": frozenset({"load", "delete", "flush", "restore"}),
    "xgroup": frozenset({"create", "createconsumer", "delconsumer", "destroy", "setid"}),
}

#: What Redis answers a write with when it cannot persist, and when it is full (Redis 7's own
#: words), by the SQLite error the harness's fault raises at ``db.commit``.
_REFUSALS = {
    "disk I/O error": (
        "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to "
        "persist to disk. Commands that may modify the data set are disabled, because this "
        "instance is configured to report errors during writes if RDB snapshotting fails "
        "(stop-writes-on-bgsave-error option). Please check the Redis logs for details about "
        "the RDB error."
    ),
    "database or disk is full": "OOM command not allowed when used memory > 'maxmemory'.",
}


def _text(value: object) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def _words(args: Sequence[object]) -> list[str]:
    """The command's name and first argument, lower case (redis-py may pass ``"FUNCTION
    LOAD"`` as one argument, and splits it on the wire)."""
    words = _text(args[0]).lower().split() if args else []
    if len(words) < 2 and len(args) > 1:
        words.append(_text(args[1]).lower())
    return words


def is_write(args: Sequence[object]) -> bool:
    """Whether the command ``args`` (as given to ``execute_command``) changes data."""
    words = _words(args)
    if not words:
        return False
    if words[0] in WRITES:
        return True
    subcommands = _WRITING_SUBCOMMANDS.get(words[0])
    return subcommands is not None and len(words) > 1 and words[1] in subcommands


def _command_name(args: Sequence[object]) -> str:
    words = _words(args)
    if words and words[0] in _WRITING_SUBCOMMANDS:
        return " ".join(words[:2]).upper()
    return words[0].upper() if words else ""


def _where(client: Any) -> tuple[str, str]:
    """``(db, server)`` of a redis-py client: ``"redis:0"``, ``"unix:///path"`` or
    ``"host:port"``."""
    kwargs: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        kwargs = dict(client.connection_pool.connection_kwargs)
    db = f"redis:{kwargs.get('db', 0) or 0}"
    if kwargs.get("path"):
        return db, f"unix://{kwargs['path']}"
    return db, f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def _refusal(error: sqlite3.OperationalError) -> Exception:
    """The exception redis-py raises for the server's refusal that stands for ``error``."""
    text = _REFUSALS.get(str(error), _REFUSALS["disk I/O error"])
    for module in ("redis._parsers.base", "redis.connection"):
        parser = getattr(sys.modules.get(module), "BaseParser", None)
        with contextlib.suppress(Exception):
            found = parser.parse_error(text)  # type: ignore[union-attr]
            if isinstance(found, Exception):
                return found
    import redis.exceptions

    return redis.exceptions.ResponseError(text)


@contextlib.contextmanager
def _committing(client: Any, command: str) -> Iterator[None]:
    """Fire db.commit, run the block (the command), then db.committed if it did not raise."""
    db, server = _where(client)
    n = next_commit_number()
    context = {"db": db, "n": n, "server": server, "command": command}
    try:
        crashpoint(_BEFORE, **context)
    except sqlite3.OperationalError as exc:  # the harness failed this commit: Redis refuses
        raise _refusal(exc) from None
    yield
    since_last_request.committed = True
    crashpoint(_AFTER, **context)


def _stack_writes(pipeline: Any) -> bool:
    """Whether a pipeline's queued commands change data."""
    stack: Iterable[Any] = getattr(pipeline, "command_stack", ()) or ()
    with contextlib.suppress(Exception):
        return any(is_write(entry[0]) for entry in stack)
    return False


def _pipeline_name(pipeline: Any) -> str:
    transaction = getattr(pipeline, "transaction", False)
    return "MULTI/EXEC" if transaction or getattr(pipeline, "explicit_transaction", False) else (
        "PIPELINE"
    )


# -- the hooked methods ------------------------------------------------------------------------


def _sync_command(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def execute_command(self: Any, *args: Any, **options: Any) -> Any:
        if not is_write(args):
            return original(self, *args, **options)
        with _committing(self, _command_name(args)):
            return original(self, *args, **options)

    execute_command._crashpoints_hooked = True  # type: ignore[attr-defined]
    return execute_command


def _sync_execute(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _stack_writes(self):
            return original(self, *args, **kwargs)
        with _committing(self, _pipeline_name(self)):
            return original(self, *args, **kwargs)

    execute._crashpoints_hooked = True  # type: ignore[attr-defined]
    return execute


def _async_command(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def execute_command(self: Any, *args: Any, **options: Any) -> Any:
        if not is_write(args):
            return await original(self, *args, **options)
        with _committing(self, _command_name(args)):
            return await original(self, *args, **options)

    execute_command._crashpoints_hooked = True  # type: ignore[attr-defined]
    return execute_command


def _async_execute(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _stack_writes(self):
            return await original(self, *args, **kwargs)
        with _committing(self, _pipeline_name(self)):
            return await original(self, *args, **kwargs)

    execute._crashpoints_hooked = True  # type: ignore[attr-defined]
    return execute


#: Per module: (class, method, wrapper) to put in place.
_PATCHES: dict[str, tuple[tuple[str, str, Callable[..., Any]], ...]] = {
    "redis.client": (
        ("Redis", "execute_command", _sync_command),
        ("Pipeline", "immediate_execute_command", _sync_command),
        ("Pipeline", "execute", _sync_execute),
    ),
    "redis.asyncio.client": (
        ("Redis", "execute_command", _async_command),
        ("Pipeline", "immediate_execute_command", _async_command),
        ("Pipeline", "execute", _async_execute),
    ),
}


def _patch(module: types.ModuleType) -> None:
    """Put the hooks on ``module``'s clients (once; a class or method it lacks is left)."""
    for class_name, method, wrap in _PATCHES.get(module.__name__, ()):
        cls = getattr(module, class_name, None)
        original = vars(cls).get(method) if isinstance(cls, type) else None
        if original is None or getattr(original, "_crashpoints_hooked", False):
            continue
        setattr(cls, method, wrap(original))


class _PatchingLoader(importlib.abc.Loader):
    """A module's own loader, then the hooks on what it defined."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        module: types.ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        self._loader.exec_module(module)
        _patch(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Hooks redis-py's client modules as they are imported (nothing is imported here)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec: importlib.machinery.ModuleSpec | None = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


_finder = _PatchOnImport()


def install_redis_hooks() -> None:
    """Fire ``db.commit`` and ``db.committed`` around every write of this process to Redis
    through redis-py from now on (see the module docstring). Imports nothing: a client module
    already imported is hooked now, one imported later as it is. Calling it again does
    nothing more."""
    for name in _PATCHES:
        module = sys.modules.get(name)
        if module is not None:
            _patch(module)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
