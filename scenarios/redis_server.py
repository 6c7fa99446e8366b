"""A private ``redis-server`` for one test: the broker of the queue scenarios.

:func:`redis_server` starts ``redis-server`` on a Unix socket in a temporary directory (no TCP
port, nothing saved to disk), yields the socket's path, and stops and reaps it on the way out,
whatever the test did. :data:`REDIS` is the binary found on ``PATH`` (``None``: the scenarios
that need it are skipped, and say why; CI installs it).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REDIS = shutil.which("redis-server")


@contextlib.contextmanager
def redis_server() -> Iterator[Path]:
    """A ``redis-server`` on a Unix socket, stopped and reaped after the block."""
    assert REDIS is not None
    with tempfile.TemporaryDirectory(prefix="crashpoints-redis-") as folder:
        socket = Path(folder) / "redis.sock"
        argv = [REDIS, "--port", "0", "--unixsocket", str(socket), "--unixsocketperm", "700"]
        argv += ["--save", "", "--appendonly", "no", "--dir", folder]
        server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10.0
            while not socket.exists():
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"redis-server did not start ({' '.join(argv)})")
                time.sleep(0.01)
            yield socket
        finally:
            server.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(timeout=10)
            if server.poll() is None:
                server.kill()
                server.wait(timeout=10)
