"""A private ``redis-server`` for a test: a queue's broker, a cache, a store of its own.

:func:`redis_server` starts ``redis-server`` on a Unix socket in a temporary directory (no TCP
port, nothing saved to disk, no configuration file read: nothing of a system Redis is used or
touched), yields a :class:`RedisServer`, and stops and reaps it on the way out, whatever the
block did. It runs as the user the tests run as, root included.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path

from ..errors import ServerError
from . import daemon

__all__ = ["RedisServer", "find_redis_server", "redis_server"]

#: What to install where ``redis-server`` is missing.
INSTALL = "install it (apt-get install redis-server, brew install redis)"


def find_redis_server() -> str | None:
    """The ``redis-server`` program on ``PATH``, or ``None``."""
    return shutil.which("redis-server")


@dataclasses.dataclass(frozen=True)
class RedisServer:
    """A running private Redis: where its Unix socket is, and the URL clients take."""

    #: The Unix socket it listens on (it has no TCP port).
    socket: Path

    @property
    def url(self) -> str:
        """``unix:///path/redis.sock``, the URL redis-py, RQ and Dramatiq take (Celery's
        kombu: ``redis+socket:///path/redis.sock``)."""
        return f"unix://{self.socket}"


@contextlib.contextmanager
def redis_server(*, timeout: float = 10.0) -> Iterator[RedisServer]:
    """A private ``redis-server`` for the block (see the module docstring).

    ``timeout``: seconds it may take to start. Raises :class:`ServerError` if
    ``redis-server`` is not installed (``installed=False``) or does not start in time.
    """
    program = find_redis_server()
    if program is None:
        raise ServerError(f"redis-server is not on PATH; {INSTALL}.", installed=False)
    with daemon.private_directory("crashpoints-redis-") as folder:
        socket, log = folder / "redis.sock", folder / "redis.log"
        argv = [program, "--port", "0", "--unixsocket", str(socket), "--unixsocketperm", "700",
                "--save", "", "--appendonly", "no", "--dir", str(folder), "--daemonize", "no"]
        server = daemon.start(argv, log=log)
        try:
            daemon.wait_until(socket.exists, server, timeout=timeout, what="redis-server",
                              log=log)
            yield RedisServer(socket)
        finally:
            daemon.stop(server)
