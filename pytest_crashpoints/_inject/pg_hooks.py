"""Install the PostgreSQL commit hooks in this process, driver by driver, when it is imported.

:func:`install_postgres_hooks` hooks each PostgreSQL driver the process has imported already
(psycopg 3, psycopg2, asyncpg: ``pg_psycopg.py``, ``pg_psycopg2.py``, ``pg_asyncpg.py``),
and puts a finder first on ``sys.meta_path`` that hooks each of the others right after the
process imports it. Nothing is imported here: a process that never uses PostgreSQL pays
nothing, and a driver that is not installed is never looked for. A driver whose hooks cannot
be installed (a version that lacks what they need) works as it did, unhooked, and
:data:`unhooked` says why.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType

from . import pg_asyncpg, pg_psycopg, pg_psycopg2

__all__ = ["install_postgres_hooks", "unhooked"]

#: Each driver's module, and its hooks.
_DRIVERS = {"psycopg": pg_psycopg, "psycopg2": pg_psycopg2, "asyncpg": pg_asyncpg}
#: Drivers whose hooks could not be installed, and why.
unhooked: dict[str, str] = {}
_hooked: set[str] = set()
_finding: set[str] = set()


def _hook(name: str, module: ModuleType) -> None:
    if name in _hooked or name in unhooked:
        return
    try:
        _DRIVERS[name].patch(module)
    except Exception as exc:  # an unknown version: it runs unhooked, and says why
        unhooked[name] = f"{type(exc).__name__}: {exc}"
        return
    _hooked.add(name)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds a driver as the rest of ``sys.meta_path`` would, and hooks it once its module
    has run."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _DRIVERS or fullname in _hooked or fullname in _finding:
            return None
        _finding.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            _finding.discard(fullname)
        loader = None if spec is None else spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return None  # the import goes on without us
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            _hook(fullname, module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install_postgres_hooks() -> None:
    """Hook the PostgreSQL drivers of this process, now or when they are imported (see the
    module docstring). A second call changes nothing."""
    for name in _DRIVERS:
        module = sys.modules.get(name)
        if module is not None:
            _hook(name, module)
    if not any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
