"""Item 5: what the installed plugin adds to a pytest run that does not use it.

``pytest --collect-only`` of a plain 200-test suite (20 files of 10 tests, in a temporary
directory with its own ``pytest.ini``), with the plugin loaded from its entry point as every
user gets it, against the same run with ``-p no:crashpoints``. The runs alternate; the figure
is the difference between the fastest run of each (other load on the machine only adds
time), with the median of the paired differences beside it. The plugin's own import time
(``-X importtime``, with pytest already imported) is reported alongside.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import _stats

GOAL_MS = 20.0
TEST_FILE = "\n".join(f"def test_{n}():\n    assert {n} == {n}\n" for n in range(10))


def _suite(root: Path) -> None:
    (root / "pytest.ini").write_text("[pytest]\n")
    for n in range(20):
        (root / f"test_plain_{n:02d}.py").write_text(TEST_FILE)


def _collect(root: Path, *extra: str) -> float:
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    start = time.perf_counter()
    done = subprocess.run([*command, *extra], cwd=root, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or "200 tests collected" not in done.stdout:
        raise SystemExit(f"collection failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return elapsed


def _plugin_loaded(root: Path) -> bool:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "--trace-config"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    return "pytest_crashpoints" in done.stdout


def _import_ms() -> float:
    done = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-c",
            "import pytest; import pytest_crashpoints.plugin",
        ],
        capture_output=True,
        text=True,
    )
    # Cumulative microseconds of the top-level import of the plugin module.
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \| pytest_crashpoints\.plugin$", line)
        if match:
            return int(match.group(1)) / 1000
    return float("nan")


def main() -> None:
    reps = 5 if _stats.quick() else 11
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        root = Path(tmp)
        _suite(root)
        loaded = _plugin_loaded(root)
        _collect(root)  # warm the disk cache and the .pyc files
        _collect(root, "-p", "no:crashpoints")
        with_plugin, without = [], []
        for _ in range(reps):
            with_plugin.append(_collect(root))
            without.append(_collect(root, "-p", "no:crashpoints"))
    diffs_ms = [(a - b) * 1e3 for a, b in zip(with_plugin, without, strict=True)]
    diff = _stats.summary(diffs_ms, unit="ms")
    # Other load on the machine only ever adds time: the fastest run of each is the least
    # disturbed estimate, and the verdict uses it; the median of the paired differences and
    # its spread are reported beside it.
    fastest_ms = (min(with_plugin) - min(without)) * 1e3
    imports = sorted(_import_ms() for _ in range(5))
    _stats.emit(
        _stats.result(
            5,
            "start-up",
            goal=f"<= {GOAL_MS:g} ms added to pytest --collect-only (200 tests)",
            met=loaded and fastest_ms <= GOAL_MS,
            figure=(
                f"+{fastest_ms:.1f} ms between the fastest runs, +{diff['median']:.1f} ms "
                f"median of paired runs ({_stats.summary(with_plugin)['median'] * 1e3:.0f} "
                f"vs {_stats.summary(without)['median'] * 1e3:.0f} ms, ratio "
                f"{_stats.ratios(with_plugin, without)['median']:.2f}x); plugin import "
                f"{imports[len(imports) // 2]:.0f} ms"
                + ("" if loaded else "; PLUGIN NOT LOADED from its entry point")
            ),
            command="python -m bench.startup",
            details={
                "plugin loaded by default": loaded,
                "with plugin": _stats.summary(with_plugin),
                "with -p no:crashpoints": _stats.summary(without),
                "difference of the fastest runs (ms)": fastest_ms,
                "difference, paired runs": diff,
                "ratio": _stats.ratios(with_plugin, without),
                "plugin import, pytest already imported (ms)": _stats.summary(imports, unit="ms"),
            },
        )
    )


if __name__ == "__main__":
    main()
