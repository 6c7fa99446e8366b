"""A private ``redis-server`` for a test: a queue's broker, a cache, a store of its own.

:func:`redis_server` starts ``redis-server`` on a Unix socket in a temporary directory (no TCP
port, nothing saved to disk, no configuration file read: nothing of a system Redis is used or
touched), yields a :class:`RedisServer`, and stops and reaps it on the way out, whatever the
block did. It runs as the user the tests run as, root included.

:class:`RedisDaemon` is the server under both: ``redis-server`` on a directory of the caller's,
with the caller's configuration directives, that can be killed and started again on the same
files (what the harness does to an agent's Redis to restart it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..errors import ServerError
from . import daemon
from .resp import Reply, call

__all__ = ["RedisDaemon", "RedisServer", "find_redis_server", "redis_server"]

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


class RedisDaemon:
    """``redis-server`` on ``folder`` (its data, its socket ``redis.sock``, its log
    ``redis.log``), started with ``directives`` (``("appendonly", "yes")``, as in
    ``redis.conf``) after the harness's own: no TCP port, the Unix socket, the folder as its
    ``dir``. Killed (:meth:`kill`) and started again (:meth:`start`), it reads the files it
    left, as a restarted Redis does."""

    def __init__(
        self, folder: Path, directives: Sequence[tuple[str, str]] = (), *, timeout: float = 10.0
    ) -> None:
        self.folder = folder
        self.socket = folder / "redis.sock"
        self.log = folder / "redis.log"
        self.directives = tuple(directives)
        self.timeout = timeout
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``unix:///.../redis.sock``."""
        return f"unix://{self.socket}"

    def start(self) -> None:
        """Start the server and return once it answers ``PING`` (its files loaded). Raises
        :class:`ServerError` if ``redis-server`` is not installed (``installed=False``), refuses
        a directive, or is not ready within the timeout (the end of its log in the message)."""
        program = find_redis_server()
        if program is None:
            raise ServerError(f"redis-server is not on PATH; {INSTALL}.", installed=False)
        argv = [program, "--port", "0", "--unixsocket", str(self.socket),
                "--unixsocketperm", "700", "--dir", str(self.folder), "--daemonize", "no"]
        for name, value in self.directives:
            argv += [f"--{name}", value]
        self.socket.unlink(missing_ok=True)  # a killed server's: not a sign of this one
        self._process = daemon.start(argv, log=self.log)
        daemon.wait_until(self._ready, self._process, timeout=self.timeout,
                          what="redis-server", log=self.log)

    def _ready(self) -> bool:
        if not self.socket.exists():
            return False
        try:
            return call(self.socket, "PING", timeout=self.timeout) == "PONG"
        except ServerError:  # LOADING its files, or not listening yet
            return False

    def call(self, *args: object) -> Reply:
        """One command to the server, its reply (:func:`resp.call`)."""
        return call(self.socket, *args, timeout=max(self.timeout, 30.0))

    def kill(self) -> None:
        """``SIGKILL``, as a crash or the OOM killer ends it, and reap it."""
        if self._process is not None:
            daemon.stop(self._process, signal.SIGKILL)
            self._process = None

    def stop(self) -> None:
        """Stop it (it may save on the way out, as its directives say) and reap it."""
        if self._process is not None:
            daemon.stop(self._process)
            self._process = None


@contextlib.contextmanager
def redis_server(*, timeout: float = 10.0) -> Iterator[RedisServer]:
    """A private ``redis-server`` for the block (see the module docstring).

    ``timeout``: seconds it may take to start. Raises :class:`ServerError` if
    ``redis-server`` is not installed (``installed=False``) or does not start in time.
    """
    with daemon.private_directory("crashpoints-redis-") as folder:
        server = RedisDaemon(folder, [("save", ""), ("appendonly", "no")], timeout=timeout)
        server.start()
        try:
            yield RedisServer(server.socket)
        finally:
            server.stop()

