"""Canonical JSON for tool arguments and the hash that names them (``args_hash``)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any, TypeAlias

from ..errors import ArgumentsError

__all__ = ["JSONValue", "args_hash", "canonical_json", "normalize_args"]

JSONValue: TypeAlias = "bool | int | float | str | list[JSONValue] | dict[str, JSONValue] | None"


def _normalize(value: Any, path: str) -> JSONValue:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ArgumentsError(
                f"argument {path} is {value!r}: NaN and Infinity have no canonical JSON form; "
                "pass a finite number, a string, or None."
            )
        # 1.0 and 1 name the same amount; canonical JSON writes integral floats as integers.
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if isinstance(value, Mapping):
        out: dict[str, JSONValue] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ArgumentsError(
                    f"argument {path} has the key {key!r} of type {type(key).__name__}; "
                    "JSON object keys must be strings: convert the key with str() first."
                )
            out[key] = _normalize(item, f"{path}.{key}")
        return out
    if isinstance(value, (list, tuple)):
        return [_normalize(item, f"{path}[{i}]") for i, item in enumerate(value)]
    raise ArgumentsError(
        f"argument {path} is {value!r} of type {type(value).__name__}, which has no canonical "
        "JSON form; pass only None, bool, int, float, str, lists and str-keyed mappings "
        "(convert dates, decimals and objects to strings first)."
    )


def normalize_args(args: Mapping[str, Any]) -> dict[str, JSONValue]:
    """Return ``args`` as plain JSON values, or raise :class:`ArgumentsError` naming the bad part.

    Tuples become lists and integral floats become integers, so arguments that mean the same
    thing normalize the same way.
    """
    if not isinstance(args, Mapping):
        raise ArgumentsError(
            f"tool arguments must be a mapping of names to values, not {type(args).__name__}."
        )
    normalized = _normalize(args, "args")
    assert isinstance(normalized, dict)
    return normalized


def canonical_json(args: Mapping[str, Any]) -> str:
    """Canonical JSON: sorted keys, no insignificant whitespace, UTF-8 text, no NaN/Infinity."""
    return json.dumps(
        normalize_args(args),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def args_hash(args: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of ``args``, encoded as UTF-8."""
    return text_hash(canonical_json(args))


def text_hash(text: str) -> str:
    """SHA-256 (hex) of ``text`` encoded as UTF-8: :func:`args_hash` of arguments whose
    :func:`canonical_json` is ``text``."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
