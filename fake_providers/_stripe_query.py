"""Stripe's search query language, as far as the fake reads it: ``field:'value'`` and
``metadata['key']:'value'`` clauses (a number unquoted: ``amount:1000``) joined by ``AND``."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["parse_query", "query_matches"]

_CLAUSE = re.compile(
    r"""\s*(?:metadata\[(?P<mq>['"])(?P<mkey>[^'"]+)(?P=mq)\]|(?P<field>[a-z_]+))"""
    r"""\s*:\s*(?:(?P<vq>['"])(?P<value>[^'"]*)(?P=vq)|(?P<number>-?\d+))\s*"""
)


def parse_query(query: str) -> list[tuple[str, str]]:
    """The clauses of a search query, ``(field, value)`` each (``metadata.key`` for a
    metadata clause). Raises ``ValueError`` for a query the fake cannot read."""
    parts = re.split(r"\s+AND\s+", query.strip(), flags=re.IGNORECASE)
    clauses: list[tuple[str, str]] = []
    for part in parts:
        found = _CLAUSE.fullmatch(part)
        if not found:
            raise ValueError(
                f"cannot parse {part!r}; this fake supports field:'value' and "
                "metadata['key']:'value' clauses joined by AND"
            )
        value = found["value"] if found["value"] is not None else found["number"]
        if found["mkey"] is not None:
            clauses.append((f"metadata.{found['mkey']}", value))
        else:
            clauses.append((found["field"], value))
    return clauses


def query_matches(obj: dict[str, Any], clauses: list[tuple[str, str]]) -> bool:
    """Whether ``obj`` meets every clause."""
    for field, value in clauses:
        if field.startswith("metadata."):
            actual = obj.get("metadata", {}).get(field[len("metadata."):])
        else:
            actual = obj.get(field)
        if actual is None or str(actual) != value:
            return False
    return True
