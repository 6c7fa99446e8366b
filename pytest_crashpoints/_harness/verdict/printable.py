"""Text the agent controls, made safe to print: on a terminal and in Markdown.

Fail point names, a command's standard error, exception messages and node ids come from code
under test and reach the terminal and the CI step summary. On a terminal, a carriage return or
an escape sequence could rewrite what was printed before it (a forged ``crashpoints gate:
passed``); in Markdown, a tag or a table bar could change what the summary shows. The HTML
page escapes everything already.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["for_terminal", "markdown_code", "markdown_fence", "markdown_text"]

#: Line breaks and tabs keep their meaning; every other control or format character (C0,
#: DEL, C1, bidirectional overrides, zero-width characters) is written as an escape.
_KEEP = frozenset("\n\t")


def _escape(char: str) -> str:
    if char == "\r":
        return "\\r"
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def for_terminal(text: str) -> str:
    """``text`` with every control and format character but newline and tab escaped
    (``\\x1b``, ``\\r``, ``\\u202e``)."""
    if text.isprintable():
        return text
    return "".join(
        char
        if char in _KEEP or unicodedata.category(char) not in ("Cc", "Cf", "Cs", "Co", "Cn")
        else _escape(char)
        for char in text
    )


_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+!|~>])")


def markdown_text(text: str) -> str:
    """``text`` as literal Markdown inline text: on one line, HTML characters as entities,
    Markdown's own characters escaped (a table cell's ``|`` too)."""
    text = for_terminal(" ".join(text.splitlines()))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN.sub(r"\\\1", text)


def markdown_code(text: str) -> str:
    """``text`` as a Markdown code span, however many backticks it holds."""
    text = for_terminal(" ".join(text.splitlines())).replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def markdown_fence(lines: list[str]) -> list[str]:
    """``lines`` as a fenced code block whose fence no line can close."""
    body = [for_terminal(line) for line in lines]
    longest = max((len(run) for line in body for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence, *body, fence]
