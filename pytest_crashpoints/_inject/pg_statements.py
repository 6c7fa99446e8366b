"""What a PostgreSQL statement string does to the transaction it runs in: commit it, or write.

The PostgreSQL commit hooks (``pg_psycopg.py``, ``pg_psycopg2.py``, ``pg_asyncpg.py``) read
each statement string a driver sends and, with the connection's transaction status, decide
whether running it commits:

- inside a transaction (or where the driver opens one for it), a string commits when one of
  its statements is ``COMMIT`` or ``END`` (``COMMIT AND CHAIN`` too, which commits and opens
  the next);
- outside one, with the driver in autocommit mode (asyncpg always is there), a string that
  writes commits by itself: PostgreSQL runs a string of statements sent at once as one
  implicit transaction, committed when it ends. Writing means a statement led by ``INSERT``,
  ``UPDATE``, ``DELETE``, ``MERGE``, ``CREATE``, ``DROP``, ``ALTER``, ``TRUNCATE``,
  ``COPY ... FROM``, ``GRANT``, ``REVOKE``, ``COMMENT``, ``CALL``, ``DO``, ``REFRESH``,
  ``SECURITY LABEL`` or ``IMPORT``, or a ``WITH`` whose body inserts, updates, deletes or
  merges; a string with an explicit ``COMMIT`` commits too;
- ``COMMIT PREPARED`` (the second phase of a two-phase commit) commits wherever it runs.

A statement that writes without one of those words (``SELECT`` of a function that writes,
``SELECT ... INTO``) is not seen. Statements are split at semicolons outside quotes
(``'...'``, ``"..."``, ``E'...'``, dollar quotes ``$tag$...$tag$``) and comments (``--``
and nested ``/* */``), as PostgreSQL's own lexer splits them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

__all__ = ["commits_in_transaction", "commits_outside", "query_text", "statements"]

_WRITES = frozenset({
    "INSERT", "UPDATE", "DELETE", "MERGE", "CREATE", "DROP", "ALTER", "TRUNCATE", "GRANT",
    "REVOKE", "COMMENT", "CALL", "DO", "REFRESH", "SECURITY", "IMPORT",
})
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")
_DML = re.compile(r"\b(?:INSERT|UPDATE|DELETE|MERGE)\b", re.IGNORECASE)
_FROM = re.compile(r"\bFROM\b", re.IGNORECASE)


def _skip_quoted(sql: str, at: int, quote: str) -> int:
    """The index after the quoted text that starts at ``at`` (a doubled quote is one)."""
    end = at + 1
    while True:
        end = sql.find(quote, end)
        if end < 0:
            return len(sql)
        if sql.startswith(quote * 2, end):
            end += 2
            continue
        return end + 1


def _skip_escaped(sql: str, at: int) -> int:
    """The index after an ``E'...'`` string whose quote is at ``at`` (backslash escapes)."""
    end = at + 1
    while end < len(sql):
        if sql[end] == "\\" or sql.startswith("''", end):
            end += 2
        elif sql[end] == "'":
            return end + 1
        else:
            end += 1
    return len(sql)


def _skip_block_comment(sql: str, at: int) -> int:
    """The index after the (possibly nested) ``/* */`` comment that starts at ``at``."""
    depth, end = 0, at
    while end < len(sql):
        if sql.startswith("/*", end):
            depth, end = depth + 1, end + 2
        elif sql.startswith("*/", end):
            depth, end = depth - 1, end + 2
            if depth == 0:
                return end
        else:
            end += 1
    return len(sql)


def _skip(sql: str, at: int) -> int | None:
    """Where the quoted text or comment starting at ``at`` ends; ``None``: none starts there."""
    char = sql[at]
    if char in "'\"":
        escaped = char == "'" and at > 0 and sql[at - 1] in "eE" and (
            at == 1 or not (sql[at - 2].isalnum() or sql[at - 2] == "_")
        )
        return _skip_escaped(sql, at) if escaped else _skip_quoted(sql, at, char)
    if sql.startswith("--", at):
        end = sql.find("\n", at)
        return len(sql) if end < 0 else end + 1
    if sql.startswith("/*", at):
        return _skip_block_comment(sql, at)
    if char == "$" and (at == 0 or not (sql[at - 1].isalnum() or sql[at - 1] == "_")):
        tag = _DOLLAR.match(sql, at)
        if tag:
            end = sql.find(tag.group(0), tag.end())
            return len(sql) if end < 0 else end + len(tag.group(0))
    return None


def statements(sql: str) -> Iterator[str]:
    """The statements of ``sql``, split at the semicolons outside quotes and comments, each
    without its comments; empty ones left out."""
    piece: list[str] = []
    at = start = 0
    while at < len(sql):
        char = sql[at]
        if char == ";":
            piece.append(sql[start:at])
            text = "".join(piece).strip()
            if text:
                yield text
            piece, at = [], at + 1
            start = at
            continue
        end = _skip(sql, at)
        if end is None:
            at += 1
            continue
        if sql.startswith(("--", "/*"), at):
            piece.append(sql[start:at] + " ")  # a comment separates words, as a blank does
            start = end
        at = end
    piece.append(sql[start:])
    text = "".join(piece).strip()
    if text:
        yield text


def _words(statement: str, count: int) -> list[str]:
    return [word.upper() for word in _WORD.findall(statement, 0, 200)[:count]]


def _commits(statement: str) -> bool:
    first = _words(statement, 2)
    return bool(first) and first[0] in ("COMMIT", "END") and first[1:2] != ["PREPARED"]


def _commits_prepared(statement: str) -> bool:
    return _words(statement, 2) == ["COMMIT", "PREPARED"]


def _writes(statement: str) -> bool:
    first = _words(statement, 1)
    if not first:
        return False
    if first[0] == "WITH":
        return _DML.search(_unquoted(statement)) is not None
    if first[0] == "COPY":
        return _FROM.search(_unquoted(statement)) is not None
    return first[0] in _WRITES


def _unquoted(statement: str) -> str:
    """``statement`` with its quoted text blanked (a word inside a string is no keyword)."""
    out, at, start = [], 0, 0
    while at < len(statement):
        end = _skip(statement, at)
        if end is None:
            at += 1
            continue
        out.append(statement[start:at] + " ")
        at = start = end
    out.append(statement[start:])
    return "".join(out)


def commits_in_transaction(sql: str) -> bool:
    """Whether running ``sql`` inside a transaction commits it (a ``COMMIT`` or ``END`` among
    its statements, or a ``COMMIT PREPARED``)."""
    return any(_commits(s) or _commits_prepared(s) for s in statements(sql))


def commits_outside(sql: str) -> bool:
    """Whether running ``sql`` outside a transaction, in autocommit mode, commits: it writes,
    or commits explicitly."""
    return any(_writes(s) or _commits(s) or _commits_prepared(s) for s in statements(sql))


def query_text(query: object, context: Any) -> str:
    """A query as the driver is given it, as text: a string, bytes, or a composed SQL object
    (psycopg's and psycopg2's ``sql`` objects render with ``as_string(context)``, a
    connection or a cursor). ``""`` for what the driver itself will refuse: no commit of
    ours."""
    if isinstance(query, str):
        return query
    if isinstance(query, bytes | bytearray | memoryview):
        return bytes(query).decode("utf-8", "replace")
    as_string = getattr(query, "as_string", None)
    if as_string is None:
        return ""
    try:
        return str(as_string(context))
    except Exception:  # an object the driver will refuse: not a commit of ours
        return ""
