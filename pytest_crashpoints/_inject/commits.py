"""Automatic fail points at every durable SQLite write: ``db.commit`` and ``db.committed``.

Inside a harness worker, :func:`install_commit_hooks` makes every SQLite connection the process
opens afterwards through ``sqlite3.connect`` (the module attribute, and ``sqlite3.dbapi2``'s,
which SQLAlchemy's pysqlite dialect calls: both are looked up at call time) fire, around the
k-th commit of the process (all databases together):

- ``crashpoint("db.commit", db=<file name>, n=k)`` just before the commit. A kill here happens
  inside the transaction: SQLite rolls it back when the database is next opened.
- ``crashpoint("db.committed", db=<file name>, n=k, sync=<journal mode>/<synchronous>)``
  just after it, not after a commit that raised (``sync``, e.g. ``"wal/1"``, read from the
  connection: what a power loss would take, ``_harness/storage/powerloss.py``). Before it fires,
  the process is marked as having committed since its last write request to a provider
  (what the wire hooks' automatic A looks at, ``wire.py``).

``db`` is the database's file name without its directory; ``n`` counts the commits the process
attempted (a failed one keeps its number). In-memory and temporary databases (``":memory:"``,
``""``, a ``mode=memory`` or ``vfs=memdb`` URI) and databases under an ``exclude`` path fire
nothing.

A commit is, in every way Python code makes one:

- ``Connection.commit()`` with a transaction open (not with Python 3.12's ``autocommit=True``,
  where it does nothing), and leaving ``with conn:`` without an exception;
- an explicit ``COMMIT`` or ``END`` statement (any case, with or without ``TRANSACTION``) while
  a transaction is open, through ``execute``, ``executemany`` or ``executescript`` of the
  connection or of its cursors;
- a writing statement (``INSERT``, ``UPDATE``, ``DELETE``, ``REPLACE``, ``CREATE``, ``DROP``,
  ``ALTER``, or a ``WITH`` that inserts, updates, deletes or replaces) run while no transaction
  is open and none is opened for it, which SQLite commits by itself: in autocommit mode
  (``isolation_level=None``, or Python 3.12's ``autocommit=True``); in the default mode, the
  statements the sqlite3 module opens no transaction for (``CREATE``, ``DROP``, ``ALTER``,
  ``WITH``); every statement of an ``executescript``; and every row of an ``executemany``
  (which then runs row by row, each row its own commit, with ``rowcount`` the total);
- ``executescript`` committing the transaction left open before it (the default mode, and
  every mode before Python 3.12);
- setting ``isolation_level = None`` (or, on Python 3.12, ``autocommit = True``) with a
  transaction open, which commits it (SQLAlchemy's ``AUTOCOMMIT`` isolation does this).

A user's ``factory=`` class (a subclass of ``sqlite3.Connection``) is subclassed with the hooks;
so is a ``Cursor`` subclass passed to ``cursor(factory=...)``. A class that defines ``execute``,
``executemany`` or ``executescript`` itself (Django's SQLite cursor does, to turn its ``%s``
parameters into ``?``) gets the hooks beneath its own methods: they keep their meaning, and
what they pass on to ``super()`` is hooked (a method that calls ``sqlite3.Cursor``'s directly
fires nothing). A factory that is not a class, or a class that cannot be subclassed so
(``__slots__`` layouts), leaves that connection (or cursor) unhooked: it works as it did, and
its commits fire nothing.

Not seen: connections opened before the hooks were installed or through a ``connect`` imported
before them (``from sqlite3 import connect``), cursors made with ``sqlite3.Cursor(conn)``,
``RELEASE`` of a savepoint opened outside a transaction (it commits), ``Connection.backup``
into a database, writes by other libraries than the ``sqlite3`` module (apsw, C extensions), and
statements that write without one of the keywords above (``PRAGMA``, ``VACUUM``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import sqlite3
import sys
import urllib.parse
import warnings
from collections.abc import Callable, Collection, Iterable, Iterator
from types import TracebackType
from typing import Any, Literal, TypeVar

from ..errors import HarnessUsageError
from .failpoints import COMMIT_POINTS, crashpoint, since_last_request

__all__ = ["hooked_subclass", "install_commit_hooks", "next_commit_number"]

_BEFORE, _AFTER = COMMIT_POINTS
# Python 3.12's Connection.autocommit in its default, legacy mode (3.11 has no such attribute).
_LEGACY = getattr(sqlite3, "LEGACY_TRANSACTION_CONTROL", -1)
_DML = frozenset({"INSERT", "UPDATE", "DELETE", "REPLACE"})
_WRITES = _DML | {"CREATE", "DROP", "ALTER"}
_LEADING_WORD = re.compile(r"(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?(?:\*/|\Z))*([A-Za-z]+)", re.DOTALL)
_DML_WORD = re.compile(r"\b(?:INSERT|UPDATE|DELETE|REPLACE)\b", re.IGNORECASE)

_excluded: list[str] = []
_attempts = itertools.count(1)
_original: dict[str, Callable[..., sqlite3.Connection]] = {}


def next_commit_number() -> int:
    """The number of the process's next commit attempt (``n`` of ``db.commit``), counted over
    every database of the process, SQLite's, PostgreSQL's (``pg_commits.py``) and Redis's alike."""
    return next(_attempts)


# -- statements and transactions ---------------------------------------------------------------


def _leading_word(sql: str) -> str:
    match = _LEADING_WORD.match(sql)
    return match.group(1).upper() if match else ""


def _ends_transaction(sql: str) -> bool:
    return _leading_word(sql) in ("COMMIT", "END")


def _writes(sql: str) -> tuple[bool, bool]:
    """Whether ``sql`` writes, and whether the sqlite3 module's default mode opens a
    transaction for it (it does for a leading INSERT, UPDATE, DELETE or REPLACE only)."""
    word = _leading_word(sql)
    if word in _WRITES:
        return True, word in _DML
    if word == "WITH":
        return _DML_WORD.search(sql) is not None, False
    return False, False


def _legacy(conn: sqlite3.Connection) -> bool:
    return bool(getattr(conn, "autocommit", _LEGACY) == _LEGACY)


def _commit_pending(conn: sqlite3.Connection) -> bool:
    """Whether ``conn.commit()`` would commit now."""
    return conn.in_transaction and getattr(conn, "autocommit", _LEGACY) is not True


def _commits(conn: sqlite3.Connection, sql: str, *, raw: bool) -> bool:
    """Whether running ``sql`` on ``conn`` now commits. ``raw``: run as ``executescript``
    runs statements, without the transaction the default mode opens for a DML statement."""
    if conn.in_transaction:
        return _ends_transaction(sql)
    writes, dml = _writes(sql)
    if not writes:
        return False
    opens_transaction = not raw and dml and _legacy(conn) and conn.isolation_level is not None
    return not opens_transaction


def _split(script: str) -> Iterator[str]:
    """The statements of ``script``, as SQLite reads them (triggers, quotes and comments
    included); pieces with nothing but blanks and comments are left out."""
    start = 0
    end = script.find(";")
    while end >= 0:
        piece = script[start : end + 1]
        if sqlite3.complete_statement(piece):
            if _leading_word(piece):
                yield piece
            start = end + 1
        end = script.find(";", end + 1)
    if _leading_word(script[start:]):
        yield script[start:]


# -- firing ------------------------------------------------------------------------------------


def _database(conn: sqlite3.Connection) -> str:
    name: str = getattr(conn, "_crashpoints_db", "")
    return name


@contextlib.contextmanager
def _committing(conn: sqlite3.Connection) -> Iterator[None]:
    """Fire db.commit, run the block (the commit), then db.committed if it did not raise."""
    db = _database(conn)
    n = next_commit_number()
    try:
        crashpoint(_BEFORE, db=db, n=n)
    except sqlite3.Error:
        # A commit that fails (a fault: a full disk, an I/O error) leaves nothing of its
        # transaction, as SQLite rolls back on SQLITE_FULL and SQLITE_IOERR.
        conn.rollback()
        raise
    yield
    since_last_request.committed = True
    crashpoint(_AFTER, db=db, n=n, sync=_durability(conn))


def _durability(conn: sqlite3.Connection) -> str:
    """The connection's journal mode and ``synchronous`` level (``"wal/1"``): what a power
    loss would take from its last commit (``_harness/storage/powerloss.py``). Read through a
    cursor of the base class, so no hook and no ``row_factory`` of the user's is involved."""
    try:
        cursor = sqlite3.Cursor(conn)
        cursor.row_factory = None
        try:
            journal = cursor.execute("PRAGMA journal_mode").fetchone()[0]
            level = cursor.execute("PRAGMA synchronous").fetchone()[0]
        finally:
            cursor.close()
    except (sqlite3.Error, TypeError, IndexError):
        return "unknown/2"
    return f"{str(journal).lower()}/{level}"


# -- the hooked classes ------------------------------------------------------------------------


class _HookedCursor(sqlite3.Cursor):
    """A cursor whose statements fire the commit points (see the module docstring)."""

    _crashpoints_rowcount: int | None = None

    @property
    def rowcount(self) -> int:
        total = self._crashpoints_rowcount
        return super().rowcount if total is None else total

    def execute(self, sql: str, parameters: Any = (), /) -> _HookedCursor:
        self._crashpoints_rowcount = None
        return self._execute(sql, parameters, raw=False)

    def _execute(self, sql: str, parameters: Any, *, raw: bool) -> _HookedCursor:
        if not _commits(self.connection, sql, raw=raw):
            super().execute(sql, parameters)
            return self
        with _committing(self.connection):
            super().execute(sql, parameters)
        return self

    def executemany(self, sql: str, seq_of_parameters: Iterable[Any], /) -> _HookedCursor:
        self._crashpoints_rowcount = None
        conn = self.connection
        if not _commits(conn, sql, raw=False):
            super().executemany(sql, seq_of_parameters)
            return self
        rows = iter(seq_of_parameters)
        first = next(rows, _NO_ROW)
        if first is _NO_ROW:
            super().executemany(sql, ())
            return self
        # Each row is a commit of its own: run them one by one, each between its two points.
        total: int | None = 0
        for row in itertools.chain((first,), rows):
            if _commits(conn, sql, raw=False):
                with _committing(conn):
                    super().executemany(sql, (row,))
            else:
                super().executemany(sql, (row,))
            count = super().rowcount
            total = None if total is None or count < 0 else total + count
        self._crashpoints_rowcount = -1 if total is None else total
        return self

    def executescript(self, sql_script: str, /) -> _HookedCursor:
        self._crashpoints_rowcount = None
        conn = self.connection
        if _legacy(conn) and _commit_pending(conn):
            conn.commit()  # what executescript does first; the hooked commit fires the points
        statements = list(_split(sql_script))
        if not any(_ends_transaction(s) or _writes(s)[0] for s in statements):
            super().executescript(sql_script)
            return self
        # Statement by statement, so that each commit runs between its two points. With no
        # isolation level, execute() opens no transaction of its own, as executescript.
        level = conn.isolation_level if _legacy(conn) else None
        if level is not None:
            conn.isolation_level = None  # no transaction is open: nothing is committed
        try:
            for statement in statements:
                self._execute(statement, (), raw=True)
        finally:
            if level is not None:
                conn.isolation_level = level
        return self


_NO_ROW = object()

_Base = TypeVar("_Base", bound=type)
_subclasses: dict[tuple[type, type], type | None] = {}


# The methods the hooks run statements through instead of calling the class's own.
_REPLACED = ("execute", "executemany", "executescript")


def hooked_subclass(
    base: _Base, hooks: _Base, *, replaced: Collection[str] = _REPLACED
) -> _Base | None:
    """``base`` with ``hooks`` (a direct subclass of a driver's class that ``base`` derives
    from) mixed in, or None if its layout does not allow it. A class that defines one of the
    ``replaced`` methods gets the hooks beneath its own (its own keep their meaning, and what
    they pass on to ``super()`` is hooked); any other gets them above."""
    if issubclass(base, hooks):
        return base
    if base in hooks.__mro__:
        return hooks
    key = (base, hooks)
    if key not in _subclasses:
        driver_base = hooks.__mro__[1]
        own = [k for k in base.__mro__[: base.__mro__.index(driver_base)] if k is not object]
        defines = any(name in vars(k) for k in own for name in replaced)
        bases = (base, hooks) if defines else (hooks, base)
        try:
            _subclasses[key] = type(base.__name__, bases, {"__module__": base.__module__})
        except TypeError:
            _subclasses[key] = None
    return _subclasses[key]  # type: ignore[return-value]


# The attributes whose setters may commit, as the C type defines them.
_ISOLATION_LEVEL: Any = vars(sqlite3.Connection)["isolation_level"]
_AUTOCOMMIT: Any = vars(sqlite3.Connection).get("autocommit")


class _HookedConnection(sqlite3.Connection):
    """A connection whose commits fire the commit points (see the module docstring)."""

    _crashpoints_db = ""

    def cursor(self, factory: Any = None) -> Any:
        if factory is None:
            factory = _HookedCursor
        elif isinstance(factory, type) and issubclass(factory, sqlite3.Cursor):
            factory = hooked_subclass(factory, _HookedCursor) or factory
        return super().cursor(factory)

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        cursor: sqlite3.Cursor = self.cursor()
        return cursor.execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
        cursor: sqlite3.Cursor = self.cursor()
        return cursor.executemany(sql, parameters)

    def executescript(self, sql_script: str, /) -> sqlite3.Cursor:
        cursor: sqlite3.Cursor = self.cursor()
        return cursor.executescript(sql_script)

    def commit(self) -> None:
        if not _commit_pending(self):
            return super().commit()
        with _committing(self):
            super().commit()

    def __exit__(
        self,
        type: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> Literal[False]:
        if type is not None or not _commit_pending(self):
            return super().__exit__(type, value, traceback)
        with _committing(self):
            result = super().__exit__(type, value, traceback)
        return result

    @property  # type: ignore[override]
    def isolation_level(self) -> str | None:
        level: str | None = _ISOLATION_LEVEL.__get__(self)
        return level

    @isolation_level.setter
    def isolation_level(self, value: str | None) -> None:
        if value is None and _commit_pending(self):  # it commits
            with _committing(self):
                _ISOLATION_LEVEL.__set__(self, value)
        else:
            _ISOLATION_LEVEL.__set__(self, value)

    if sys.version_info >= (3, 12):

        @property  # type: ignore[override]
        def autocommit(self) -> int:
            value: int = _AUTOCOMMIT.__get__(self)
            return value

        @autocommit.setter
        def autocommit(self, value: int) -> None:
            if value is True and self.in_transaction:  # it commits
                with _committing(self):
                    _AUTOCOMMIT.__set__(self, value)
            else:
                _AUTOCOMMIT.__set__(self, value)


# -- connecting --------------------------------------------------------------------------------


def _file_of(database: Any, uri: bool) -> str | None:
    """The path of an on-disk database, or None for an in-memory or temporary one."""
    try:
        path = os.fsdecode(database)
    except TypeError:
        return None
    if uri and path.startswith("file:"):
        parts = urllib.parse.urlsplit(path)
        query = urllib.parse.parse_qs(parts.query)
        if "memory" in query.get("mode", ()) or "memdb" in query.get("vfs", ()):
            return None
        path = urllib.parse.unquote(parts.path)
    if path in ("", ":memory:"):
        return None
    return path


def _is_excluded(path: str) -> bool:
    real = os.path.realpath(path)
    return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in _excluded)


# sqlite3.connect's parameters after the database, in their positional order.
_PARAMETERS = ("timeout", "detect_types", "isolation_level", "check_same_thread", "factory",
               "cached_statements", "uri")
_FACTORY_ARG = _PARAMETERS.index("factory")
_URI_ARG = _PARAMETERS.index("uri")
# Python 3.13 deprecates passing them positionally; sqlite3.connect warns with this text.
_POSITIONAL_DEPRECATED = sys.version_info >= (3, 13)
_POSITIONAL_WARNING = (
    "Passing more than 1 positional argument to sqlite3.connect() is deprecated. Parameters "
    "'timeout', 'detect_types', 'isolation_level', 'check_same_thread', 'factory', "
    "'cached_statements' and 'uri' will become keyword-only parameters in Python 3.15."
)


def _by_name(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """``args`` (after the database) and ``kwargs`` as keyword arguments only; None when they
    cannot be (too many, or one given both ways), for sqlite3.connect to raise its TypeError."""
    if len(args) > len(_PARAMETERS):
        return None
    named = dict(zip(_PARAMETERS[: len(args)], args, strict=True))
    return None if named.keys() & kwargs.keys() else {**named, **kwargs}


def _connect_with(original: Callable[..., sqlite3.Connection]) -> Callable[..., Any]:
    def connect(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        if args and _POSITIONAL_DEPRECATED and (named := _by_name(args, kwargs)) is not None:
            # Warned at the caller's line, as sqlite3.connect itself warns; passed on by name,
            # so the connection class does not warn again from here.
            warnings.warn(_POSITIONAL_WARNING, DeprecationWarning, stacklevel=2)
            args, kwargs = (), named
        uri = kwargs.get("uri", args[_URI_ARG] if len(args) > _URI_ARG else False)
        path = _file_of(database, bool(uri))
        if path is None or _is_excluded(path):
            return original(database, *args, **kwargs)
        if len(args) > _FACTORY_ARG:
            factory = args[_FACTORY_ARG]
        else:
            factory = kwargs.get("factory") or sqlite3.Connection
        hooked = (
            hooked_subclass(factory, _HookedConnection)
            if isinstance(factory, type) and issubclass(factory, sqlite3.Connection)
            else None
        )
        if hooked is None:  # a factory function, or a class that cannot take the hooks
            return original(database, *args, **kwargs)
        if len(args) > _FACTORY_ARG:
            args = (*args[:_FACTORY_ARG], hooked, *args[_FACTORY_ARG + 1 :])
        else:
            kwargs["factory"] = hooked
        conn = original(database, *args, **kwargs)
        conn._crashpoints_db = os.path.basename(path)  # type: ignore[attr-defined]
        return conn

    connect.__doc__ = original.__doc__
    return connect


def install_commit_hooks(*, exclude: Collection[str | os.PathLike[str]] = ()) -> None:
    """Fire ``db.commit`` and ``db.committed`` around every durable SQLite commit of this
    process from now on (see the module docstring).

    ``exclude``: files and directories whose databases fire nothing (the harness's own). A
    second call adds to them. Raises :class:`HarnessUsageError` for an ``exclude`` item that is
    not a path.
    """
    for item in exclude:
        if not isinstance(item, str | os.PathLike) or not os.fspath(item):
            raise HarnessUsageError(
                f"commit hook exclusion {item!r} is not a path; pass the files or directories "
                "whose databases must fire nothing."
            )
        _excluded.append(os.path.realpath(os.fspath(item)))
    if _original:
        return
    for module in (sqlite3, sqlite3.dbapi2):
        _original[module.__name__] = original = getattr(module, "connect")  # noqa: B009
        setattr(module, "connect", _connect_with(original))  # noqa: B010
