"""The public namespaces: small, and every name in them shows its public home.

A class or function re-exported from a private module carries the public module in
``__module__`` (reprs, tracebacks and documentation name it there), still pickles by reference
(the fork server sends callables and classes by ``module.qualname``) and still resolves its
annotations (a replay token checks its steps' fields against them).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pickle
import sys
import typing
from typing import Any

import pytest

PUBLIC_MODULES = (
    "pytest_crashpoints",
    "pytest_crashpoints.harness",
    "pytest_crashpoints.ledger",
    "pytest_crashpoints.mcp",
    "pytest_crashpoints.servers",
)


def _exported() -> list[tuple[str, str, Any]]:
    found = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                found.append((module_name, name, value))
    return found


EXPORTED = _exported()
EXPORTED_IDS = [f"{module}.{name}" for module, name, _ in EXPORTED]


def test_the_harness_namespace_fits_on_one_screen() -> None:
    from pytest_crashpoints import harness

    assert len(harness.__all__) <= 40
    assert len(set(harness.__all__)) == len(harness.__all__)


def test_the_process_plumbing_is_private() -> None:
    from pytest_crashpoints import harness

    for name in ("run_worker", "start_worker", "Worker", "Fault", "Kill", "fork_server"):
        assert name not in harness.__all__
        assert not hasattr(harness, name)


@pytest.mark.parametrize(("module", "name", "value"), EXPORTED, ids=EXPORTED_IDS)
def test_every_exported_name_shows_a_public_home(module: str, name: str, value: Any) -> None:
    import pytest_crashpoints

    assert "._" not in value.__module__ and not value.__module__.startswith("_")
    if value.__module__ != "pytest_crashpoints.errors":  # a public module of its own
        home = "pytest_crashpoints" if name in pytest_crashpoints.__all__ else module
        assert value.__module__ == home
    assert getattr(importlib.import_module(value.__module__), value.__qualname__) is value


@pytest.mark.parametrize(("module", "name", "value"), EXPORTED, ids=EXPORTED_IDS)
def test_every_exported_name_pickles_by_reference(module: str, name: str, value: Any) -> None:
    assert pickle.loads(pickle.dumps(value)) is value


def test_a_schedule_step_resolves_its_annotations_at_its_new_home() -> None:
    from pytest_crashpoints import harness

    hints = typing.get_type_hints(harness.Deliver)
    assert hints["kill"] == harness.KillAt | None
    step = harness.Deliver(0, kill=harness.KillAt("B"))
    assert pickle.loads(pickle.dumps(step)) == step
    schedule = harness.Schedule((step, harness.Recover()))
    assert harness.read_token(harness.replay_token(schedule)).schedule == schedule


@pytest.mark.parametrize(
    "cls",
    [v for _, _, v in EXPORTED if dataclasses.is_dataclass(v)],
    ids=lambda v: v.__qualname__,
)
def test_every_exported_dataclass_resolves_its_annotations(cls: type) -> None:
    try:
        typing.get_type_hints(cls)
    except NameError as error:
        # A name only a type checker imports (under TYPE_CHECKING) resolves nowhere at run
        # time, at any home; any other name must resolve, in the module that wrote the class.
        written_in = {
            hint.__forward_module__
            for hint in inspect.get_annotations(cls).values()
            if isinstance(hint, typing.ForwardRef)
        }
        assert written_in
        assert all(error.name not in vars(sys.modules[m]) for m in written_in), error
