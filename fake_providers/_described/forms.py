"""Form-encoded bodies and queries as Stripe writes them: ``metadata[key]=value``,
``expand[]=customer``, ``items[0][price]=price_1``, ``created[gte]=1700000000``."""

from __future__ import annotations

import urllib.parse
from typing import Any

__all__ = ["parse_form", "parse_pairs"]


def parse_form(text: str) -> dict[str, Any]:
    """Stripe's form encoding to nested values: ``metadata[k]=v`` and ``expand[0]=x``.

    Raises ValueError on a malformed body.
    """
    pairs = urllib.parse.parse_qsl(text, keep_blank_values=True, strict_parsing=bool(text))
    return parse_pairs(pairs)


def parse_pairs(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Form fields (in order) to nested values, as :func:`parse_form`. Raises ValueError."""
    root: dict[str, Any] = {}
    for name, value in pairs:
        head, _, rest = name.partition("[")
        if not head:
            raise ValueError(f"malformed parameter name {name!r}")
        path = [head]
        while rest:
            inner, sep, rest = rest.partition("]")
            if not sep:
                raise ValueError(f"malformed parameter name {name!r}")
            path.append(inner)
            if rest and not rest.startswith("["):
                raise ValueError(f"malformed parameter name {name!r}")
            rest = rest[1:]
        node = root
        for i, part in enumerate(path[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"parameter {'.'.join(path[: i + 1])} is both a value and a hash")
            node = child
        leaf = path[-1] if path[-1] != "" else str(len(node))
        if isinstance(node.get(leaf), dict):
            raise ValueError(f"parameter {name!r} is both a value and a hash")
        node[leaf] = value
    return _listify(root)


def _listify(node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in node.items():
        if isinstance(v, dict):
            v = _listify(v)
            if v and all(key.isdigit() for key in v):
                v = [v[key] for key in sorted(v, key=int)]
        out[k] = v
    return out
