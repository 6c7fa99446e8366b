"""What the HTML report's page and its swimlane timeline both write: text escaped for HTML,
and the anchor of an invariant's explanation (the page defines it, the timeline links to it)."""

from __future__ import annotations

import html
import re

__all__ = ["anchor", "escape"]


def escape(value: object) -> str:
    """``value`` as text in HTML, quotes escaped too: safe in an element and in an attribute."""
    return html.escape(str(value), quote=True)


def anchor(invariant: object) -> str:
    """The id of an invariant's explanation: ``inv-1`` ... ``inv-6``, ``inv-own-NAME``."""
    if isinstance(invariant, int):
        return f"inv-{invariant}"
    return "inv-own-" + re.sub(r"[^A-Za-z0-9_-]", "-", str(invariant))
