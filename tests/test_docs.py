"""Every Python example in docs/ runs, in order, page by page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
PAGES = sorted(p for p in DOCS.glob("*.md") if FENCE.search(p.read_text(encoding="utf-8")))


def test_there_are_examples_to_run() -> None:
    assert PAGES, "no Python examples found in docs/"


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    text = page.read_text(encoding="utf-8")
    for number, block in enumerate(FENCE.findall(text), start=1):
        code = compile(block, f"{page.name}[example {number}]", "exec")
        exec(code, namespace)
