"""Run as ``sitecustomize`` by every Python process of a command the harness runs: its bridge
puts this directory first on the command's ``PYTHONPATH`` (``program_hooks.py``).

It installs the harness's hooks from the harness's own copy of the package (where
``CRASHPOINTS_HOOKS`` says), then gets out of the way: this directory leaves ``sys.path``, and
a ``sitecustomize`` of the program's own, if it has one, runs as it would have. Whatever goes
wrong here, the program still runs: without the hooks, with one line on its standard error and
one in the run directory that say why (the harness reads it, and the summary says which points
the program could not reach). Written for any Python from 3.6, so that an old one gets that
far.
"""

import json
import os
import sys

PACKAGE = "pytest_crashpoints"


def _load_package(where: str) -> None:
    """The harness's copy of the package as ``pytest_crashpoints``, found at ``where`` only
    (nothing else of the harness's environment joins the program's ``sys.path``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        PACKAGE, os.path.join(where, "__init__.py"), submodule_search_locations=[where]
    )
    if spec is None or spec.loader is None:
        raise ImportError("no package at " + where)
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[PACKAGE]
        raise


def _install() -> None:
    where = os.environ.get("CRASHPOINTS_HOOKS")
    if not where:
        return
    if PACKAGE not in sys.modules:
        _load_package(where)
    from pytest_crashpoints._harness.case.program_hooks import install

    install()


def _said_why(exc: BaseException) -> None:
    why = f"{type(exc).__name__}: {exc}"
    sys.stderr.write(f"crashpoints: no hooks in this Python process ({why})\n")
    run_dir, process = os.environ.get("CRASHPOINTS_RUN_DIR"), os.environ.get("CRASHPOINTS_PROCESS")
    if not run_dir or not process:
        return
    line = {
        "pid": os.getpid(),
        "python": ".".join(str(part) for part in sys.version_info[:3]),
        "executable": sys.executable,
        "hooked": False,
        "why": why,
    }
    try:
        with open(os.path.join(run_dir, "logs", process + ".python"), "a") as file:
            file.write(json.dumps(line, sort_keys=True) + "\n")
    except OSError:
        pass


def _start() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    try:
        _install()
    except Exception as exc:  # the program runs, hooked or not; the harness reads why
        _said_why(exc)
    # The program's own sitecustomize, found as if this one had never been there. The import
    # system reads this name back from sys.modules once this module has run: it must hold a
    # module, this one if there is no other.
    this = sys.modules.pop(__name__)
    try:
        import sitecustomize  # type: ignore[import-not-found]  # noqa: F401
    except ImportError as exc:
        if exc.name != "sitecustomize":
            raise
        sys.modules[__name__] = this


if __name__ == "sitecustomize":
    _start()
