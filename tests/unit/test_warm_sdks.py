"""The model SDKs' response parsers are built in the parent, once, before it forks."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("openai")
pytest.importorskip("anthropic")


def _run(code: str) -> str:
    """``code`` in a fresh interpreter (nothing imported by this test session leaks in)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    return done.stdout.strip()


def test_the_parsers_of_the_imported_sdks_are_built() -> None:
    # pydantic builds a model's validator on its first use (until then a placeholder, and
    # ``__pydantic_complete__`` is false): that build is what a worker would pay on its
    # first answer, and what the parent does once instead.
    out = _run(
        "import openai, anthropic\n"
        "from openai.types.chat import ChatCompletion\n"
        "from openai.types.responses import Response\n"
        "from anthropic.types import Message\n"
        "from pytest_crashpoints._process.warm_sdks import warm_sdk_caches\n"
        "models = (Response, ChatCompletion, Message)\n"
        "before = [m.__pydantic_complete__ for m in models]\n"
        "parsed = warm_sdk_caches()\n"
        "print(parsed, before, [m.__pydantic_complete__ for m in models])\n"
    )
    assert out == "3 [False, False, False] [True, True, True]"


def test_an_sdk_not_imported_is_neither_imported_nor_warmed() -> None:
    out = _run(
        "import sys\n"
        "from pytest_crashpoints._process.warm_sdks import warm_sdk_caches\n"
        "print(warm_sdk_caches(), 'openai' in sys.modules, 'anthropic' in sys.modules)\n"
    )
    assert out == "0 False False"
