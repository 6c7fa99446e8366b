"""Objects brought in from outside: what a real provider holds, for a fake to start from.

An incident in production left objects at a provider (a charge, an e-mail, an issue); to
reproduce it, a fake starts with those objects, as if the agent had made them. Two formats:

- The provider's own export, as its API or dashboard gives it: each provider reads its own
  (:meth:`~fake_providers.Provider.exported_objects`; e.g. :class:`Payments` reads Stripe's
  list JSON of charges, payment intents and refunds).
- The fakes' own format, for any provider (an ``HttpApi``, an ``openapi`` one, a recorded
  one)::

      {"format": "crashpoints-export/1", "provider": "payments",
       "objects": [{"object_type": "charge", "object_id": "ch_1", "operation": "charges.create",
                    "body": {...}, "idempotency_key": "order-7", "created": 1764500000}]}

  :meth:`~fake_providers.Provider.export` writes it from a journal.

``created`` is Unix seconds (when the object was made, if known); ``idempotency_key`` is the
key the request that made it carried, where the export knows it (then a retry with that key
gets the saved answer back, as it would from the real provider within its retention).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["EXPORT_FORMAT", "IMPORTED", "ExportError", "Exported", "read_export"]

#: The ``format`` of the fakes' own export.
EXPORT_FORMAT = "crashpoints-export/1"
#: The parameters hash of an idempotency key brought in with an object (``Provider.seed``):
#: what the request that made it sent is unknown, so any request with the key is taken as it.
IMPORTED = "*"


class ExportError(ValueError):
    """An export file that cannot be read; the message says what is wrong and what to do."""


@dataclasses.dataclass(frozen=True)
class Exported:
    """One object a provider held, as a fake stores it.

    ``operation`` is the fake's operation that makes such an object (``charges.create``);
    ``aliases`` every name the API gives it (its id, a number, a URL); ``task_id`` the task it
    belongs to, where the export says so.
    """

    object_type: str
    object_id: str
    operation: str
    body: Mapping[str, Any]
    created: float | None = None
    idempotency_key: str | None = None
    aliases: tuple[str, ...] = ()
    task_id: str | None = None

    @property
    def names(self) -> frozenset[str]:
        """Every string a ledger row may have stored to name this object."""
        names = {self.object_id, self.idempotency_key, *self.aliases}
        return frozenset(name for name in names if name)


def read_export(path: str | os.PathLike[str]) -> Any:
    """The JSON document in ``path``; raises :class:`ExportError` saying what is wrong."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ExportError(f"{path}: no such export file; give the path of the JSON file "
                          "the provider's API or dashboard exported.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ExportError(f"{path}: cannot be read as UTF-8 text ({exc}).") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ExportError(
            f"{path} is not JSON ({exc}); an export is the JSON a provider's API gives "
            "(e.g. Stripe's list of charges) or the fakes' own format "
            f"({{\"format\": {EXPORT_FORMAT!r}, ...}})."
        ) from None


def own_format(data: Any, *, provider: str, where: str) -> list[Exported] | None:
    """The objects of a document in the fakes' own format, or ``None`` for another format."""
    if not isinstance(data, Mapping) or data.get("format") != EXPORT_FORMAT:
        return None
    named = data.get("provider")
    if named is not None and named != provider:
        raise ExportError(
            f"{where} is an export of provider {named!r}, not {provider!r}; give it as "
            f"{named}=<file>."
        )
    objects = data.get("objects")
    if not isinstance(objects, list):
        raise ExportError(f"{where}: 'objects' must be a list of objects.")
    out = []
    for index, item in enumerate(objects):
        at = f"{where}: objects[{index}]"
        if not isinstance(item, Mapping):
            raise ExportError(f"{at} is {type(item).__name__}, not an object.")
        missing = [k for k in ("object_type", "object_id", "operation", "body") if k not in item]
        if missing:
            raise ExportError(f"{at} has no {', '.join(missing)}; each object names its "
                              "object_type, object_id, operation and body.")
        body = item["body"]
        if not isinstance(body, Mapping):
            raise ExportError(f"{at}: body must be an object.")
        out.append(
            Exported(
                object_type=_text(item["object_type"], f"{at}.object_type"),
                object_id=_text(item["object_id"], f"{at}.object_id"),
                operation=_text(item["operation"], f"{at}.operation"),
                body=dict(body),
                created=_seconds(item.get("created"), f"{at}.created"),
                idempotency_key=_optional_text(item.get("idempotency_key"),
                                               f"{at}.idempotency_key"),
                aliases=tuple(_text(a, f"{at}.aliases") for a in item.get("aliases") or ()),
                task_id=_optional_text(item.get("task_id"), f"{at}.task_id"),
            )
        )
    return out


def _text(value: Any, where: str) -> str:
    if not isinstance(value, (str, int)) or isinstance(value, bool) or value == "":
        raise ExportError(f"{where} must be a non-empty string, not {value!r}.")
    return str(value)


def _optional_text(value: Any, where: str) -> str | None:
    return None if value is None else _text(value, where)


def _seconds(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ExportError(f"{where} must be Unix seconds (a number), not {value!r}.")
    return float(value)


def listed(data: Any, *, where: str) -> list[Any]:
    """The items of a list export: a JSON array, or an object holding one under ``data``
    (Stripe's lists and search results), ``items`` (GitHub's search) or ``messages``
    (SendGrid's activity); a single object is a list of one."""
    if isinstance(data, list):
        return data
    if isinstance(data, Mapping):
        for name in ("data", "items", "messages"):
            if isinstance(data.get(name), list):
                return list(data[name])
        return [data]
    raise ExportError(f"{where} holds {type(data).__name__} JSON, not a list or an object.")
