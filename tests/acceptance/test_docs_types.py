"""The docs' examples pass ``mypy --strict``: what a user copies type-checks as it is.

Each page is laid out as its test blocks see it (``file=`` blocks and test files written so
far; a later block of the same name replaces an earlier one), and every state just before a
file is replaced, and the last one, is checked. The pages listed in :data:`TYPED` are checked;
the others are not typed yet.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .test_docs import DOCS, blocks_of

#: The pages whose examples are typed (and must stay so).
TYPED = ("quickstart.md", "howto-own-provider.md", "howto-own-invariants.md", "howto-async.md")


def _states(page: Path) -> list[dict[str, str]]:
    """The directories the page's test blocks run in, enough to see every version of a file."""
    states: list[dict[str, str]] = []
    files: dict[str, str] = {}
    for block in blocks_of(page):
        if block.kind not in ("file", "test", "test-fails"):
            continue
        if block.filename in files and files[block.filename] != block.code:
            states.append(dict(files))
        files[block.filename] = block.code
    states.append(dict(files))
    return states


def _exec_module(page: Path) -> str:
    return "\n\n".join(b.code for b in blocks_of(page) if b.kind == "exec")


@pytest.mark.parametrize("name", TYPED)
def test_the_examples_pass_mypy_strict(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    page = DOCS / name
    cache = request.config.cache
    cache_dir = cache.mkdir("mypy-docs") if cache is not None else tmp_path / "mypy-cache"
    problems = []
    for number, files in enumerate(_states(page)):
        where = tmp_path / f"state-{number}"
        where.mkdir()
        for filename, code in files.items():
            (where / filename).write_text(code, encoding="utf-8")
        module = _exec_module(page)
        if module:
            (where / "page_examples.py").write_text(module, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
             "--cache-dir", str(cache_dir), "--ignore-missing-imports", "."],
            cwd=where, capture_output=True, text=True, timeout=600,
        )
        if done.returncode != 0:
            problems.append(f"{name} (as its test block {number + 1} sees it):\n{done.stdout}")
    assert not problems, "\n".join(problems)
