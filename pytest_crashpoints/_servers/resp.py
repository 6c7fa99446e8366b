"""The harness's own word with a Redis server: one command, one reply, over its Unix socket.

The harness asks its private servers a few things (``PING``, ``SAVE``, ``CONFIG GET``,
``INFO persistence``) and needs no client library for it: :func:`call` speaks RESP2, Redis's
wire protocol, the way ``redis-cli`` does. An error reply raises :class:`RedisReplyError` with
the server's words.
"""

from __future__ import annotations

import socket
from pathlib import Path

from ..errors import ServerError

__all__ = ["RedisReplyError", "Reply", "call", "encode"]

#: A reply: a status or bulk string (text), an integer, ``None`` or a list of replies.
Reply = str | int | None | list["Reply"]


class RedisReplyError(ServerError):
    """The server answered a command with an error (``-ERR ...``, ``-LOADING ...``)."""


def encode(*args: object) -> bytes:
    """A command as RESP2 sends it: an array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def call(path: str | Path, *args: object, timeout: float = 30.0) -> Reply:
    """Send one command to the Redis listening on the Unix socket ``path`` and return its
    reply. Raises :class:`RedisReplyError` for an error reply and :class:`ServerError` when the
    server cannot be reached or hangs up."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall(encode(*args))
            with sock.makefile("rb") as stream:
                return _read(stream)
    except OSError as exc:
        raise ServerError(f"redis-server at {path} did not answer {args[0]!s}: {exc}") from exc


def _read(stream: object) -> Reply:
    line: bytes = stream.readline()  # type: ignore[attr-defined]
    if not line.endswith(b"\r\n"):
        raise ServerError("redis-server hung up before it answered")
    kind, rest = line[:1], line[1:-2].decode("utf-8", "replace")
    if kind == b"+":
        return rest
    if kind == b"-":
        raise RedisReplyError(rest)
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        if size < 0:
            return None
        data: bytes = stream.read(size + 2)  # type: ignore[attr-defined]
        return data[:-2].decode("utf-8", "replace")
    if kind == b"*":
        count = int(rest)
        return None if count < 0 else [_read(stream) for _ in range(count)]
    raise ServerError(f"redis-server answered what is not RESP2: {line[:40]!r}")
