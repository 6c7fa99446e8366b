"""A private PostgreSQL server for the tests of a module: the database of the procrastinate
scenario.

:func:`postgres_server` makes a cluster in a temporary directory (``initdb``, trust
authentication, no fsync: a test's database, not a production one), starts ``postgres`` on a
Unix socket in it (no TCP port), yields a libpq connection string, and stops (fast shutdown)
and reaps it on the way out, whatever the tests did. PostgreSQL refuses to run as root: as
root (CI), the cluster belongs to the ``postgres`` user and the server runs as that user.
:data:`POSTGRES_BIN` is the directory of the binaries (``None``: the scenario is skipped, and
says why; CI installs them: ``apt-get install postgresql``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def _bin() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))  # not on PATH on Debian
    return Path(debian[-1]).parent if debian else None


POSTGRES_BIN = _bin()


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server on a Unix socket; yields its connection string."""
    assert POSTGRES_BIN is not None
    as_root = os.geteuid() == 0
    user = {"user": "postgres", "group": "postgres"} if as_root else {}
    with tempfile.TemporaryDirectory(prefix="crashpoints-postgres-") as folder:
        data, sockets = Path(folder) / "data", Path(folder) / "sockets"
        sockets.mkdir()
        if as_root:
            shutil.chown(folder, "postgres", "postgres")
            shutil.chown(sockets, "postgres", "postgres")
        subprocess.run(
            [str(POSTGRES_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
             "--no-sync", "-E", "UTF8"],
            check=True, capture_output=True, timeout=120, **user,
        )
        argv = [str(POSTGRES_BIN / "postgres"), "-D", str(data), "-k", str(sockets),
                "-c", "listen_addresses=", "-c", "fsync=off", "-c", "full_page_writes=off"]
        server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  **user)
        try:
            deadline = time.monotonic() + 60.0
            while not (sockets / ".s.PGSQL.5432").exists():
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"postgres did not start ({' '.join(argv)})")
                time.sleep(0.05)
            yield f"host={sockets} dbname=postgres user=postgres"
        finally:
            server.send_signal(signal.SIGINT)  # fast shutdown
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(timeout=30)
            if server.poll() is None:
                server.kill()
                server.wait(timeout=30)
