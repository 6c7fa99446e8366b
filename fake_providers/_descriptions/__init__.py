"""The published API descriptions the bundled fakes serve, vendored in this folder.

Each is a cut-down copy of its owner's OpenAPI description (``SOURCES.json`` says which, of
which version; ``LICENSES.md`` their licences; ``refresh.py`` makes them anew from the
sources): Stripe's (payments), GitHub's (tickets) and SendGrid's (email).
"""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path
from typing import Any

__all__ = ["NAMES", "load", "source"]

_HERE = Path(__file__).resolve().parent
#: The descriptions vendored here.
NAMES = ("github", "sendgrid", "stripe")


@functools.cache
def load(name: str) -> dict[str, Any]:
    """The vendored description ``name`` (one of :data:`NAMES`), parsed. Treat it as read-only:
    it is shared by every provider of the process."""
    if name not in NAMES:
        raise ValueError(f"no vendored API description {name!r}; there are {', '.join(NAMES)}")
    data: dict[str, Any] = json.loads(gzip.decompress((_HERE / f"{name}.json.gz").read_bytes()))
    return data


def source(name: str) -> dict[str, Any]:
    """What ``SOURCES.json`` records of description ``name``: its source, version, licence,
    and how many operations and paths were kept."""
    found: dict[str, Any] = json.loads((_HERE / "SOURCES.json").read_text())[name]
    return found
