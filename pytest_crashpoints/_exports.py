"""A public name shows its public home: ``__module__`` set on what a public module re-exports.

Reprs, tracebacks, pickles and documentation tools then name
``pytest_crashpoints.harness.Scenario``, not the private module that defines it (httpx does the
same for every public name). A name the top-level package exports too shows the top level,
whichever public module sets it first.

Annotations still resolve where the class was written: :func:`typing.get_type_hints` looks a
class's string annotations up in ``sys.modules[cls.__module__]``, so each one is kept as a
:class:`typing.ForwardRef` bound to the defining module (a schedule token checks its fields
against these hints).
"""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Iterable
from typing import Any

__all__ = ["is_private", "show_public_home"]


def is_private(module: str) -> bool:
    """Whether ``module`` is a private module: one part of its dotted name starts with ``_``."""
    return any(part.startswith("_") for part in module.split("."))


def show_public_home(module: str, names: Iterable[str]) -> None:
    """Set ``__module__`` to ``module`` (or the top-level package, when it exports the name too)
    on each class and function among ``names`` of the public ``module`` whose ``__module__`` is
    private; constants, type aliases and names already at a public home are left alone."""
    namespace = vars(sys.modules[module])
    top = module.partition(".")[0]
    top_names = set(getattr(sys.modules.get(top), "__all__", ()))
    for name in names:
        _rehome(namespace[name], top if name in top_names else module)


def _rehome(value: Any, home: str) -> None:
    if not (inspect.isclass(value) or inspect.isfunction(value)):
        return
    defined_in = value.__module__
    if not is_private(defined_in):
        return
    if inspect.isclass(value):
        value.__annotations__ = {
            field: typing.ForwardRef(hint, is_argument=False, module=defined_in, is_class=True)
            if isinstance(hint, str)
            else hint
            for field, hint in inspect.get_annotations(value).items()
        }
    value.__module__ = home
