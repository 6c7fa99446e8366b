"""The package's layers: imports run one way, down the layers, and never in a cycle.

Every ``import`` and ``from ... import`` in ``pytest_crashpoints`` and ``fake_providers`` is
read from the source (inside functions and ``TYPE_CHECKING`` blocks too) and resolved to the
module it names. A module may import only from its own unit and the units its unit stands on
(:data:`LAYERS`); no two modules may import each other, directly or through others.
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("pytest_crashpoints", "fake_providers")

#: Each unit and the units it may import from (transitively: what they stand on, too).
LAYERS: dict[str, tuple[str, ...]] = {
    # How a public module shows its names' public home: under everything, importing nothing.
    "pytest_crashpoints._exports": (),
    "pytest_crashpoints.errors": ("pytest_crashpoints._exports",),
    "pytest_crashpoints._inject": ("pytest_crashpoints.errors",),
    "pytest_crashpoints._ledger": ("pytest_crashpoints._inject",),
    "pytest_crashpoints._agent": ("pytest_crashpoints._ledger",),
    "pytest_crashpoints.ledger": ("pytest_crashpoints._agent",),
    "fake_providers": ("pytest_crashpoints.ledger",),
    "pytest_crashpoints._process": ("pytest_crashpoints._inject",),
    # A test's private servers (Redis, PostgreSQL), and their public names.
    "pytest_crashpoints._servers": (
        "pytest_crashpoints._process",
        "pytest_crashpoints._ledger",  # a case database's ledger view, its held connections
    ),
    "pytest_crashpoints.servers": ("pytest_crashpoints._servers",),
    # The harness, by job: a case's files, then the verdict on them, then one case, then the
    # search over many.
    "pytest_crashpoints._harness.storage": (
        "pytest_crashpoints._agent",
        "pytest_crashpoints._process",
        "pytest_crashpoints._servers",  # the agent's own Redis
        "fake_providers",
    ),
    "pytest_crashpoints._harness.verdict": ("pytest_crashpoints._harness.storage",),
    "pytest_crashpoints._harness.case": ("pytest_crashpoints._harness.verdict",),
    "pytest_crashpoints._harness.search": ("pytest_crashpoints._harness.case",),
    "pytest_crashpoints._harness": ("pytest_crashpoints._harness.search",),
    "pytest_crashpoints.harness": ("pytest_crashpoints._harness",),
    "pytest_crashpoints._plugin": ("pytest_crashpoints._harness",),
    "pytest_crashpoints.plugin": ("pytest_crashpoints._plugin", "pytest_crashpoints.servers"),
    "pytest_crashpoints._cli": ("pytest_crashpoints._plugin",),
    "pytest_crashpoints.cli": ("pytest_crashpoints._cli",),
    # The package's __init__ re-exports (lazily) from every layer: it is the top.
    "pytest_crashpoints": (
        "pytest_crashpoints.harness",
        "pytest_crashpoints.ledger",
        "pytest_crashpoints.plugin",
        "pytest_crashpoints.cli",
        "pytest_crashpoints.servers",
    ),
}


def _allowed(unit: str) -> set[str]:
    seen: set[str] = set()
    todo = [unit]
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo.extend(LAYERS[current])
    return seen


def _unit_of(module: str) -> str | None:
    """The unit a module belongs to: the longest unit name that is it or contains it."""
    best = None
    for unit in LAYERS:
        if (module == unit or module.startswith(unit + ".")) and (
            best is None or len(unit) > len(best)
        ):
            best = unit
    return best


def _modules(root: Path) -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join(parts), path


def _imports(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """Every module of the two packages that ``module`` imports, with its line."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            yield source, node.lineno
            for alias in node.names:  # ``from . import worker`` imports a module
                yield f"{source}.{alias.name}", node.lineno


def check(root: Path) -> list[str]:
    """Every upward import and every import cycle in the packages under ``root``."""
    modules = dict(_modules(root))
    graph: dict[str, set[str]] = {name: set() for name in modules}
    problems = []
    for name, path in modules.items():
        unit = _unit_of(name)
        assert unit is not None, f"{name} belongs to no layer: add it to LAYERS"
        allowed = _allowed(unit)
        for target, line in _imports(name, path):
            if target not in modules:
                continue  # another package, or a name imported from a module
            graph[name].add(target)
            target_unit = _unit_of(target)
            if target_unit not in allowed:
                problems.append(
                    f"{path.relative_to(root)}:{line}: {name} ({unit}) imports {target} "
                    f"({target_unit}), a layer above it"
                )
    problems += [f"import cycle: {' -> '.join(cycle)}" for cycle in _cycles(graph)]
    return problems


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected group of modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for child in sorted(graph[node]):
            if child not in index:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph[node]:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_imports_run_down_the_layers_and_never_in_a_cycle() -> None:
    assert check(ROOT) == []


@pytest.fixture
def copy_of_the_packages(tmp_path: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package)
    return tmp_path


def _append(path: Path, code: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + code, encoding="utf-8")


def test_an_upward_import_inside_a_function_is_found(copy_of_the_packages: Path) -> None:
    ledger = copy_of_the_packages / "pytest_crashpoints" / "_ledger" / "sqlite.py"
    _append(ledger, "\n\ndef _late():\n    from ..plugin import MARKER_HELP\n    return 1\n")
    problems = check(copy_of_the_packages)
    (problem,) = [p for p in problems if "a layer above it" in p]
    assert any(p.startswith("import cycle:") for p in problems)  # and it closes a cycle
    assert "pytest_crashpoints._ledger.sqlite (pytest_crashpoints._ledger) imports " in problem
    assert "pytest_crashpoints.plugin (pytest_crashpoints.plugin), a layer above it" in problem


def test_a_fake_provider_that_imports_the_harness_is_found(copy_of_the_packages: Path) -> None:
    payments = copy_of_the_packages / "fake_providers" / "_payments.py"
    _append(payments, "\nfrom pytest_crashpoints.harness import run_case  # noqa\n")
    (problem,) = [p for p in check(copy_of_the_packages) if "a layer above it" in p]
    assert "fake_providers._payments (fake_providers) imports pytest_crashpoints.harness" in problem


def test_a_cycle_between_modules_of_one_layer_is_found(copy_of_the_packages: Path) -> None:
    states = copy_of_the_packages / "pytest_crashpoints" / "_ledger" / "states.py"
    _append(states, "\n\ndef _cyclic():\n    from .sqlite import Ledger\n    return Ledger\n")
    problems = check(copy_of_the_packages)
    assert any(p.startswith("import cycle:") and "_ledger.states" in p for p in problems), problems


def test_no_file_outside_the_package_imports_a_private_module() -> None:
    import re

    offenders = [
        f"{page.relative_to(ROOT)}: {match}"
        for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for match in re.findall(r"pytest_crashpoints(?:\.\w+)*\._\w+", page.read_text())
    ]
    # tests/ and bench/ may: they are white-box tests and measurements of the internals.
    # What users read and copy (the docs, the scenarios, the fake providers) may not.
    for folder in ("scenarios", "fake_providers"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                for name in names:
                    parts = name.split(".")
                    if parts[0] == "pytest_crashpoints" and any(p.startswith("_") for p in parts):
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert offenders == []


def shared_names(root: Path) -> dict[str, list[str]]:
    """Every module (or subpackage) name of ``pytest_crashpoints`` under ``root`` that more
    than one module has, with their paths."""
    seen: dict[str, list[str]] = {}
    for path in sorted((root / "pytest_crashpoints").rglob("*.py")):
        name = path.parent.name if path.name == "__init__.py" else path.stem
        seen.setdefault(name, []).append(str(path.relative_to(root)))
    return {name: paths for name, paths in seen.items() if len(paths) > 1}


def test_no_two_modules_of_the_package_share_a_name() -> None:
    """The name alone tells which module a traceback means."""
    assert shared_names(ROOT) == {}


def test_a_second_module_of_one_name_is_found(copy_of_the_packages: Path) -> None:
    harness = copy_of_the_packages / "pytest_crashpoints" / "_harness"
    (harness / "search" / "steps.py").write_text('"""Another steps module."""\n')
    assert shared_names(copy_of_the_packages) == {
        "steps": [
            "pytest_crashpoints/_harness/case/steps.py",
            "pytest_crashpoints/_harness/search/steps.py",
        ]
    }


def test_the_top_level_api_is_small() -> None:
    import pytest_crashpoints

    # What agent code and a crash test need (31 with Incident, a crash test's starting world).
    assert len(pytest_crashpoints.__all__) <= 31
    assert len(set(pytest_crashpoints.__all__)) == len(pytest_crashpoints.__all__)


def test_a_moved_name_still_imports_with_a_warning_naming_its_new_home() -> None:
    import pytest_crashpoints
    from pytest_crashpoints import harness

    with pytest.warns(DeprecationWarning, match=r"moved to pytest_crashpoints\.harness\.run_case"):
        old = pytest_crashpoints.run_case  # type: ignore[attr-defined]
    assert old is harness.run_case
    with pytest.warns(DeprecationWarning, match=r"pytest_crashpoints\.harness\.CRASH_POINTS"):
        assert pytest_crashpoints.SPEC_POINTS == harness.CRASH_POINTS  # type: ignore[attr-defined]


def test_a_withdrawn_name_still_imports_with_a_warning_saying_it_goes_away() -> None:
    import pytest_crashpoints
    from pytest_crashpoints._process.worker import run_worker

    with pytest.warns(DeprecationWarning, match=r"run_worker is no longer public .* 0\.3"):
        assert pytest_crashpoints.run_worker is run_worker  # type: ignore[attr-defined]
