"""A PostgreSQL database per crash-test case, cloned from a template: what a PostgreSQL-backed
agent's case starts from, and what its crash states are.

A case's durable state is its run directory, plus, for an agent that keeps its jobs in
PostgreSQL, a database of its own. :class:`PostgresCaseDatabase` (made by
``PostgresServer.case_database(schema=...)``) is given to ``crashpoints.run(databases=[db])``;
the harness then, for each case:

- creates the case's database as a copy of the template (``CREATE DATABASE ... TEMPLATE``:
  PostgreSQL copies the template's files, so a schema applied once costs nothing per case)
  before the case's set-up and first step. A copy takes PostgreSQL a few hundred
  milliseconds (its catalogs are copied too), so the next case's is made while a case runs
  (a ``psql`` started and waited for at the next case, no thread): a case renames it;
- copies it along with the run directory when the harness copies the case (the replay of a
  killed recovery starts from a copy of the case: its database is cloned then, from the
  state the case's processes left, all of them ended);
- drops it, and its copies, when the case ends (a failing case's run directory is kept for
  debugging; its database is not), in a ``psql`` it waits for before it makes the next.

Its name comes from the case's run directory, so any process of the case finds it:
``db.dsn(ctx)`` in a worker, recovery, a ledger view or ``setup(ctx)``. What a case's crash
states hold is what was committed when a process died: PostgreSQL rolls back the open
transaction of a connection whose process was killed.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import threading
from pathlib import Path
from typing import Any, Protocol

from .._ledger.postgres_view import release_connections
from ..errors import HarnessUsageError, ServerError

__all__ = ["CaseLedgerView", "PostgresCaseDatabase"]

#: The prefix of every case database's name, so a person looking at the server knows them.
PREFIX = "crashpoints_case_"
#: The prefix of a database made ahead for the next case.
SPARE = "crashpoints_spare_"


def case_path(ctx_or_path: Any) -> Path:
    """The run directory of a case: a context's (``ctx.env.path``) or a path given as is."""
    env = getattr(ctx_or_path, "env", None)
    if env is not None:
        return Path(env.path)
    if isinstance(ctx_or_path, str | Path):
        return Path(ctx_or_path)
    raise HarnessUsageError(
        f"{ctx_or_path!r} is not a case's context; pass the ctx the harness gives your worker, "
        "recovery, setup or ledger view."
    )


class _Server(Protocol):
    """What of a :class:`~pytest_crashpoints.servers.PostgresServer` the cases use."""

    @property
    def socket_dir(self) -> Path: ...

    def dsn(self, database: str = ...) -> str: ...

    def url(self, database: str = ...) -> str: ...

    def execute(self, sql: str, *, database: str = ...) -> str: ...

    def create_database(self, name: str, *, template: str | None = ...) -> str: ...

    def drop_database(self, name: str) -> None: ...

    def start_statements(self, *statements: str) -> subprocess.Popen[bytes]: ...


class PostgresCaseDatabase:
    """A fresh database per case of a crash test, cloned from ``template`` on ``server``.

    Pass it to ``crashpoints.run(..., databases=[db])`` and connect with :meth:`dsn` (or
    :meth:`url`) of the case's context. Make one with
    :meth:`~pytest_crashpoints.servers.PostgresServer.case_database`.
    """

    def __init__(self, server: _Server, template: str) -> None:
        self.server = server
        self.template = template
        #: The databases cloned from each case's, by the case's database (dropped with it).
        self._copies: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        #: The database being made ahead for the next case, and the psql making it.
        self._spare: tuple[str, subprocess.Popen[bytes]] | None = None
        self._numbers = itertools.count(1)
        #: The psql processes dropping databases of ended cases.
        self._dropping: list[subprocess.Popen[bytes]] = []
        #: The connection (psycopg 3's, when installed) the harness's own statements run on,
        #: and the process it belongs to: a statement on it takes a millisecond, ``psql``
        #: (a process, and a connection) some twenty.
        self._admin: Any = None
        self._admin_pid = 0
        self._admin_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        """What a worker process gets of it (a worker's function that uses it is pickled
        to the fork server): where the databases are; the harness's own work stays here."""
        return {"server": self.server, "template": self.template}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["server"], state["template"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"PostgresCaseDatabase(template={self.template!r}, socket={self.server.socket_dir})"

    def name(self, ctx: Any) -> str:
        """The database of the case of ``ctx`` (a context, or a case's run directory)."""
        digest = hashlib.sha256(str(case_path(ctx).resolve()).encode()).hexdigest()
        return PREFIX + digest[:32]

    def dsn(self, ctx: Any) -> str:
        """A libpq connection string for the case's database (psycopg, psycopg2, asyncpg's
        ``dsn``, procrastinate)."""
        return self.server.dsn(self.name(ctx))

    def url(self, ctx: Any) -> str:
        """A ``postgresql://`` URL for the case's database (SQLAlchemy: replace the scheme
        with ``postgresql+psycopg``, ``postgresql+psycopg2`` or ``postgresql+asyncpg``)."""
        return self.server.url(self.name(ctx))

    def ledger_view(self, **view: Any) -> CaseLedgerView:
        """The ledger view of the case's database, for ``crashpoints.run(ledger_view=...)``:
        ``view`` are :class:`~pytest_crashpoints.ledger.PostgresLedgerView`'s arguments
        (``table=``, ``columns=``, ``states=``...), and each case reads its own database.
        A run given it makes this database for each case (``databases=`` may leave it out).
        Raises :class:`HarnessUsageError` for an argument the view does not take."""
        return CaseLedgerView(self, view)

    # -- what the harness does with it -----------------------------------------------------------

    def create(self, run_dir: Path) -> None:
        """Create the database of the case in ``run_dir`` from the template (a database left
        over from an earlier run of the same directory is dropped and made again)."""
        name = self.name(run_dir)
        self._wait_background()
        spare = self._take_spare()
        try:
            self._make(name, spare)
        except ServerError:  # the name is taken (a directory made again): drop, then make
            self._execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            self._make(name, spare)
        self._make_spare()

    def _make(self, name: str, spare: str | None) -> None:
        """Make the database ``name``: rename ``spare`` to it, or copy the template."""
        if spare is None:
            self._execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        else:
            self._execute(f'ALTER DATABASE "{spare}" RENAME TO "{name}"')

    def _make_spare(self) -> None:
        """Start making a copy of the template for the next case."""
        with self._lock:
            if self._spare is not None:
                return
            spare = f"{SPARE}{os.getpid()}_{next(self._numbers)}"
            process = self.server.start_statements(
                f'CREATE DATABASE "{spare}" TEMPLATE "{self.template}"'
            )
            self._spare = (spare, process)

    def _take_spare(self) -> str | None:
        """The copy made ahead, once made; ``None`` if there is none or it failed (the
        case's copy is then made as it waits)."""
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is None:
            return None
        name, process = spare
        if _waited(process) != 0:
            self._execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            return None
        return name

    def copy(self, source: Path, target: Path) -> None:
        """Clone the database of the case in ``source`` as that of its copy in ``target``.
        Every process of the case has ended; PostgreSQL waits (up to 5 s) for the server
        processes of their connections to exit before it copies."""
        original, clone = self.name(source), self.name(target)
        release_connections()  # the ledger views' (PostgreSQL copies a database unused)
        self._wait_background()
        self._execute(f'DROP DATABASE IF EXISTS "{clone}" WITH (FORCE)')
        self._execute(_no_connections(original))
        try:
            self._execute(f'CREATE DATABASE "{clone}" TEMPLATE "{original}"')
        except ServerError as exc:
            raise ServerError(
                f"could not copy the case's PostgreSQL database along with its run directory "
                f"({exc}); every connection to it must be closed when its processes end (is a "
                "connection of the harness's process, a setup's or a ledger view's, left open?)"
            ) from None
        with self._lock:
            self._copies.setdefault(original, set()).add(clone)

    def drop(self, run_dir: Path) -> None:
        """Start dropping the database of the case in ``run_dir``, and the copies made of
        it, while the harness goes on (:meth:`settle` waits for it; a database of the same
        name is never made before it is done)."""
        name = self.name(run_dir)
        release_connections()  # the ledger views' connections, not ended by force
        with self._lock:
            copies = self._copies.pop(name, set())
        statements = []
        for each in (*sorted(copies), name):
            statements += [_no_connections(each), f'DROP DATABASE IF EXISTS "{each}" WITH (FORCE)']
        with self._lock:
            self._dropping.append(self.server.start_statements(*statements))

    def settle(self) -> None:
        """Wait until the databases being dropped are gone and the one made ahead is made,
        and close the harness's connection (the harness calls it after a test's cases: no
        ``psql`` is left running). Raises :class:`ServerError` if PostgreSQL refused to drop
        one."""
        try:
            self._wait_background()
        finally:
            with self._admin_lock:
                admin, self._admin = self._admin, None
                if admin is not None and self._admin_pid == os.getpid():
                    admin.close()

    def _wait_background(self) -> None:
        """Wait for the ``psql`` processes started for ended cases and the next case."""
        with self._lock:
            dropping, self._dropping = self._dropping, []
            if self._spare is not None:
                _waited(self._spare[1])
        failed = sum(1 for process in dropping if _waited(process) != 0)
        if failed:
            raise ServerError(
                f"PostgreSQL could not drop {failed} case database(s) of ended cases; look "
                f"at the server's log in {self.server.socket_dir.parent}."
            )

    def lock_waits(self, run_dir: Path) -> bool:
        """Whether a connection to the database of the case in ``run_dir`` waits for a lock
        (a row another connection of the case holds in an open transaction): the harness
        asks while it holds one worker of the case at a gate and runs another."""
        return self._execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = "
            f"'{self.name(run_dir)}' AND wait_event_type = 'Lock'"
        ) not in (None, 0)

    def _execute(self, sql: str) -> Any:
        """Run ``sql`` in the server's ``postgres`` database on the harness's connection
        (with ``psql`` where psycopg 3 is not installed); the first value of its first row,
        if it returns one. Raises :class:`ServerError` with PostgreSQL's message if it
        refuses."""
        try:
            import psycopg
        except ImportError:
            said = self.server.execute(sql).strip()
            return int(said) if said.isdigit() else None
        with self._admin_lock:
            if self._admin is None or self._admin_pid != os.getpid() or self._admin.broken:
                try:
                    self._admin = psycopg.connect(
                        self.server.dsn(), autocommit=True, connect_timeout=30
                    )
                except psycopg.Error as exc:
                    raise ServerError(f"could not connect to PostgreSQL: {exc}") from None
                self._admin_pid = os.getpid()
            try:
                cursor = self._admin.execute(sql)
                row = cursor.fetchone() if cursor.description else None
            except psycopg.Error as exc:
                said = str(exc).strip().replace("\n", " | ")
                raise ServerError(f"PostgreSQL refused {sql[:80]!r}: {said}") from None
        return None if row is None else row[0]


class CaseLedgerView:
    """``ctx -> PostgresLedgerView(database.dsn(ctx), **view)``: the ledger view a case
    database makes (:meth:`PostgresCaseDatabase.ledger_view`)."""

    def __init__(self, database: PostgresCaseDatabase, view: dict[str, Any]) -> None:
        import inspect

        from .._ledger.postgres_view import PostgresLedgerView

        taken = set(inspect.signature(PostgresLedgerView).parameters) - {"dsn"}
        unknown = sorted(set(view) - taken)
        if unknown:
            raise HarnessUsageError(
                f"ledger_view() got {', '.join(unknown)}, which PostgresLedgerView does not "
                f"take; pass some of {', '.join(sorted(taken))} (the dsn is the case's)."
            )
        #: The database it reads (the harness makes it for each case of a run given the view).
        self.case_database = database
        self.view = view

    def __call__(self, ctx: Any) -> Any:
        from .._ledger.postgres_view import PostgresLedgerView

        return PostgresLedgerView(self.case_database.dsn(ctx), **self.view)

    def __repr__(self) -> str:
        args = ", ".join(f"{name}={value!r}" for name, value in self.view.items())
        return f"{self.case_database!r}.ledger_view({args})"


def _no_connections(name: str) -> str:
    """SQL that waits (at most 5 s) until no server process is connected to the database
    ``name``. A closed connection's server process exits a moment after its client is gone,
    and ``CREATE DATABASE ... TEMPLATE`` and ``DROP DATABASE`` wait for it in steps of
    100 ms; this waits in steps of 2 ms."""
    return (
        "DO $$ DECLARE deadline timestamptz := clock_timestamp() + interval '5 s'; BEGIN "
        "WHILE clock_timestamp() < deadline AND EXISTS (SELECT 1 FROM pg_stat_activity "
        f"WHERE datname = '{name}' AND pid <> pg_backend_pid()) LOOP "
        "PERFORM pg_sleep(0.002); PERFORM pg_stat_clear_snapshot(); END LOOP; END $$"
    )


def _waited(process: subprocess.Popen[bytes]) -> int:
    """The exit status of ``process``, once it has ended (killed after 120 s)."""
    try:
        return process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()
