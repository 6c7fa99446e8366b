"""Plain-text tables: every column padded to its widest cell, two spaces between columns.

The one table printer of the terminal summary's schedule list, the gate's table and
``crashpoints queue``::

    >>> columns([("test", "cases"), ("a", "12")], right={1})
    ['test  cases', 'a        12']
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

__all__ = ["columns"]


def columns(
    rows: Sequence[Sequence[str]], *, right: Collection[int] = (), free_last: bool = False
) -> list[str]:
    """``rows`` as lines of aligned columns, trailing blanks cut. The columns whose index is
    in ``right`` are aligned right, the others left. ``free_last``: the last column is written
    as it is, its width not counted (a long text after the aligned ones)."""
    if not rows:
        return []
    padded = len(rows[0]) - 1 if free_last else len(rows[0])
    widths = [max(len(row[i]) for row in rows) for i in range(padded)]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row[:padded])
        ]
        lines.append("  ".join([*cells, *row[padded:]]).rstrip())
    return lines
