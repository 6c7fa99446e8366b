"""What installing the plugin costs every pytest session, dependencies included.

Item 5 (``bench.startup``) measures the plugin module against ``-p no:crashpoints`` in this
checkout's environment. This measures whole installations: each VENV is a virtual environment
(made beforehand, from the package registry: see docs/performance.md), and each runs
``python -m pytest -q -p no:cacheprovider test_plain.py`` (one trivial test) in a temporary
folder, the environments taking turns round by round. Printed per environment: the median CPU
time of the session (user + system: steadier than wall time on a shared machine), the median
wall time, how many modules the session imported, and the pytest plugins it loaded.

Not part of ``make bench``: it needs the environments. Usage::

    python -m bench.session_cost [--rounds N] VENV [VENV ...]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

PLAIN = "def test_plain():\n    pass\n"
COUNT_MODULES = (
    "import sys, pytest; pytest.main(['-q', '-p', 'no:cacheprovider', 'test_plain.py']); "
    "print(len(sys.modules), file=sys.stderr)"
)


def _session(python: Path, folder: Path, env: dict[str, str]) -> tuple[float, float]:
    """One session's CPU and wall time, in seconds."""
    command = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_plain.py"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, cwd=folder, env=env, capture_output=True, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall


def _plugins(python: Path, folder: Path, env: dict[str, str]) -> str:
    command = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "test_plain.py"]
    out = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True).stdout
    return next((line for line in out.splitlines() if line.startswith("plugins:")), "plugins: -")


def _modules(python: Path, folder: Path, env: dict[str, str]) -> int:
    command = [str(python), "-c", COUNT_MODULES]
    err = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True).stderr
    return int(err.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.session_cost")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("venvs", nargs="+", type=Path, metavar="VENV")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}
    pythons = {venv.name: venv.resolve() / "bin" / "python" for venv in args.venvs}
    cpu: dict[str, list[float]] = {name: [] for name in pythons}
    wall: dict[str, list[float]] = {name: [] for name in pythons}
    with tempfile.TemporaryDirectory(prefix="bench-session-") as tmp:
        folder = Path(tmp)
        (folder / "test_plain.py").write_text(PLAIN)
        for python in pythons.values():
            _session(python, folder, env)  # warm the disk cache and write the .pyc files
        for _ in range(args.rounds):
            for name, python in pythons.items():
                used, took = _session(python, folder, env)
                cpu[name].append(used)
                wall[name].append(took)
        width = max(len(name) for name in pythons)
        for name, python in pythons.items():
            print(
                f"{name:<{width}}  cpu {statistics.median(cpu[name]) * 1000:4.0f} ms  "
                f"wall {statistics.median(wall[name]) * 1000:5.0f} ms  "
                f"{_modules(python, folder, env):4d} modules  {_plugins(python, folder, env)}"
            )


if __name__ == "__main__":
    main()
