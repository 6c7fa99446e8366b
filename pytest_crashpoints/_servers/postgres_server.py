"""A private PostgreSQL server for a test session: its own cluster, its own databases.

:func:`postgres_server` makes a cluster in a temporary directory (``initdb``: trust
authentication for local connections, no fsync, no autovacuum: a test's databases live for a
case, and an autovacuum worker in a database being copied or dropped delays it),
starts ``postgres`` on a Unix socket in it (no TCP port: nothing of a system PostgreSQL is used
or touched), yields a :class:`PostgresServer` once it accepts connections, and stops it (fast
shutdown) and reaps it on the way out, whatever the block did.

PostgreSQL refuses to run as root: as root (a CI container), the cluster belongs to the
``postgres`` user (Debian's package creates it) and the server runs as that user; clients
connect as ``postgres`` either way.

A database made from a template (:meth:`PostgresServer.create_database`) is a file copy of
it: a schema applied once to a template is cloned into a fresh database as fast as the server
copies files, which is how a test gets a database of its own per case.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import os
import re
import shutil
import subprocess
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

from ..errors import HarnessUsageError, ServerError
from . import daemon
from .postgres_cases import PostgresCaseDatabase

__all__ = ["PostgresServer", "find_postgres_bin", "postgres_server"]

#: What to install where PostgreSQL is missing.
INSTALL = "install it (apt-get install postgresql, brew install postgresql)"
#: The names this module creates and clones databases under (PostgreSQL's own limit: 63).
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_PORT = 5432


def find_postgres_bin() -> Path | None:
    """The directory of PostgreSQL's programs (``initdb``, ``postgres``, ``psql``): where
    ``initdb`` is on ``PATH``, else the newest of Debian's ``/usr/lib/postgresql/*/bin``
    (not on ``PATH`` there); ``None`` if there is none."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = glob.glob("/usr/lib/postgresql/*/bin/initdb")

    def version(path: str) -> tuple[int, ...]:
        number = Path(path).parents[1].name
        return tuple(int(part) for part in number.split(".") if part.isdigit())

    return Path(max(versions, key=version)).parent if versions else None


def _check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise HarnessUsageError(
            f"{what} {name!r} is not a database name this server makes: use letters, digits "
            "and underscores, starting with a letter or an underscore, at most 63."
        )
    return name


@dataclasses.dataclass(frozen=True)
class PostgresServer:
    """A running private PostgreSQL: where to connect, and its databases.

    Every database is reached on the Unix socket in ``socket_dir`` as the user ``postgres``,
    with no password.
    """

    #: The directory of its Unix socket (libpq's ``host``).
    socket_dir: Path
    #: The directory of PostgreSQL's programs it runs (``psql`` included).
    bin_dir: Path
    user: str = "postgres"
    port: int = _PORT

    def dsn(self, database: str = "postgres") -> str:
        """A libpq connection string for ``database`` (psycopg, asyncpg's ``dsn``,
        procrastinate): ``host=/tmp/... port=5432 dbname=... user=postgres``."""
        return f"host={self.socket_dir} port={self.port} dbname={database} user={self.user}"

    def url(self, database: str = "postgres") -> str:
        """A ``postgresql://`` URL for ``database`` (SQLAlchemy with ``postgresql+psycopg``,
        Django's ``dj-database-url``), the socket directory in its ``host`` parameter."""
        host = urllib.parse.quote(str(self.socket_dir), safe="")
        return f"postgresql://{self.user}@/{database}?host={host}&port={self.port}"

    def execute(self, sql: str, *, database: str = "postgres") -> str:
        """Run ``sql`` (one or more statements) in ``database`` with ``psql``; its output.
        Raises :class:`ServerError` with PostgreSQL's message if a statement fails (those
        before it stay done, as in ``psql``)."""
        argv, env = self._psql(sql, database=database)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ServerError(f"psql could not run {sql[:80]!r}: {exc}") from exc
        if done.returncode != 0:
            said = done.stderr.strip().replace("\n", " | ") or f"exit status {done.returncode}"
            raise ServerError(f"PostgreSQL refused {sql[:80]!r} in {database!r}: {said}")
        return done.stdout

    def _psql(self, *statements: str, database: str) -> tuple[list[str], dict[str, str]]:
        """The command and environment that run ``statements`` in ``database`` with
        ``psql``, each in a transaction of its own."""
        argv = [str(self.bin_dir / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                "-h", str(self.socket_dir), "-p", str(self.port), "-U", self.user,
                "-d", database]
        for sql in statements:
            argv += ["-c", sql]
        # The caller's PG* variables (PGHOST, PGSERVICE, PGPASSWORD...) must not redirect it.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        return argv, env

    def start_statements(self, *statements: str) -> subprocess.Popen[bytes]:
        """Start running ``statements`` (each in a transaction of its own) in the
        ``postgres`` database with ``psql``, not waiting for them: wait for the process (its
        exit status says whether PostgreSQL did them all)."""
        argv, env = self._psql(*statements, database="postgres")
        return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

    def create_database(self, name: str, *, template: str | None = None) -> str:
        """Create the database ``name`` (empty, or a copy of the database ``template``, which
        must have no open connection: PostgreSQL refuses to copy one in use); its
        :meth:`dsn`. Raises :class:`HarnessUsageError` for a name that is not letters, digits
        and underscores, :class:`ServerError` if PostgreSQL refuses (the name is taken, the
        template is in use)."""
        sql = f'CREATE DATABASE "{_check_name(name, "database")}"'
        if template is not None:
            sql += f' TEMPLATE "{_check_name(template, "template")}"'
        self.execute(sql)
        return self.dsn(name)

    def case_database(
        self, *, schema: str | None = None, template: str | None = None
    ) -> PostgresCaseDatabase:
        """A database per crash-test case, cloned from a template (pass it to
        ``crashpoints.run(databases=[...])``; connect with its ``dsn(ctx)``). ``schema`` (SQL
        statements: the tables the agent expects) is applied once to a template made for it,
        reused by every test with the same schema; or ``template`` names a database of this
        server you made (it must have no open connection while cases run). Raises
        :class:`HarnessUsageError` unless exactly one is given, :class:`ServerError` with
        PostgreSQL's message for a schema it refuses (no template is left behind then)."""
        from .postgres_cases import PostgresCaseDatabase

        if (schema is None) == (template is None):
            raise HarnessUsageError(
                "case_database() needs one of schema= (SQL that creates the agent's tables) "
                "or template= (a database of this server to clone for each case)."
            )
        if template is None:
            assert schema is not None
            digest = hashlib.sha256(schema.encode()).hexdigest()[:24]
            template = f"crashpoints_template_{digest}"
            listed = self.execute(f"SELECT 1 FROM pg_database WHERE datname = '{template}'")
            if not listed.strip():
                building = f"{template}_new"
                self.drop_database(building)
                self.create_database(building)
                try:
                    self.execute(schema, database=building)
                except ServerError:
                    self.drop_database(building)
                    raise
                # Renamed once complete: a template is never seen half-made.
                self.execute(f'ALTER DATABASE "{building}" RENAME TO "{template}"')
        return PostgresCaseDatabase(self, _check_name(template, "template"))

    def drop_database(self, name: str) -> None:
        """Drop the database ``name`` if it exists, ending its connections first."""
        self.execute(f'DROP DATABASE IF EXISTS "{_check_name(name, "database")}" WITH (FORCE)')


def _run_as() -> str | None:
    """The user PostgreSQL runs as: none to change to, or ``postgres`` under root."""
    if os.geteuid() != 0:
        return None
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        raise ServerError(
            "PostgreSQL refuses to run as root, and there is no postgres user to run it as: "
            "create one (useradd --system postgres), or run the tests as another user."
        ) from None
    return "postgres"


def _ready(data: Path) -> bool:
    """Whether the postmaster says it accepts connections (``postmaster.pid``'s status)."""
    try:
        lines = (data / "postmaster.pid").read_text(encoding="utf-8").splitlines()
    except OSError:
        return False
    return len(lines) >= 8 and lines[7].strip() == "ready"


@contextlib.contextmanager
def postgres_server(*, timeout: float = 60.0) -> Iterator[PostgresServer]:
    """A private PostgreSQL server for the block (see the module docstring).

    ``timeout``: seconds ``initdb`` and the start may each take. Raises :class:`ServerError`
    if PostgreSQL is not installed (``installed=False``), cannot run as root (no
    ``postgres`` user), or does not start in time, with the end of its log.
    """
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        raise ServerError(
            f"PostgreSQL's initdb is neither on PATH nor in /usr/lib/postgresql; {INSTALL}.",
            installed=False,
        )
    user = _run_as()
    with daemon.private_directory("crashpoints-postgres-") as root:
        data, sockets, log = root / "data", root / "sockets", root / "postgres.log"
        sockets.mkdir()
        log.touch()
        if user is not None:
            for path in (root, sockets, log):
                shutil.chown(path, user, user)
        initdb = [str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                  "--no-sync", "-E", "UTF8", "--locale=C"]
        done = subprocess.run(initdb, capture_output=True, text=True, timeout=timeout,
                              user=user, group=user)
        if done.returncode != 0:
            raise ServerError(f"initdb failed: {done.stderr.strip() or done.stdout.strip()}")
        argv = [str(bin_dir / "postgres"), "-D", str(data), "-k", str(sockets),
                "-c", "listen_addresses=", "-c", f"port={_PORT}", "-c", "fsync=off",
                "-c", "full_page_writes=off", "-c", "synchronous_commit=off",
                "-c", "autovacuum=off"]
        server = daemon.start(argv, log=log, user=user)
        try:
            daemon.wait_until(lambda: _ready(data), server, timeout=timeout, what="postgres",
                              log=log)
            yield PostgresServer(socket_dir=sockets, bin_dir=bin_dir)
        finally:
            daemon.stop(server, daemon.FAST_SHUTDOWN)
