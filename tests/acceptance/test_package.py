"""The released artifacts: the sdist and the wheel are built, checked, and the wheel, installed
alone in a fresh virtual environment, runs the quickstart.

Everything is written under the test's tmp_path (pip runs with --no-cache-dir). The wheel's
dependencies come from the package registry; where it cannot be reached, the install test is
skipped and says so.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import venv
import xml.etree.ElementTree as ET
import zipfile
from importlib.metadata import version
from pathlib import Path

import jsonschema
import pytest

from tests.acceptance.test_docs import blocks_of

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
VERSION = version("pytest-crashpoints")
#: What pip says when it cannot reach the registry at all (as opposed to a bad requirement).
UNREACHABLE = re.compile(
    r"NewConnectionError|Max retries exceeded|Temporary failure in name resolution|"
    r"Network is unreachable|Name or service not known|ConnectTimeout|ReadTimeout|ProxyError"
)


def _run(*argv: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{argv} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
    return done.stdout


def _build(out: Path) -> tuple[Path, Path]:
    """Build the sdist, then the wheel from the sdist (as a release does); return both."""
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT)
    [sdist] = out.glob("*.tar.gz")
    [wheel] = out.glob("*.whl")
    return sdist, wheel


def test_the_sdist_and_the_wheel_hold_the_licence_and_pass_the_release_checks(
    tmp_path: Path,
) -> None:
    sdist, wheel = _build(tmp_path)
    assert sdist.name == f"pytest_crashpoints-{VERSION}.tar.gz"
    with tarfile.open(sdist) as archive:
        sdist_names = set(archive.getnames())
    top = f"pytest_crashpoints-{VERSION}"
    assert {f"{top}/LICENSE", f"{top}/README.pypi.md", f"{top}/CHANGELOG.md"} <= sdist_names
    leftovers = (".ci/run", "bench/results.json")
    assert not [n for n in sdist_names if n.removeprefix(f"{top}/") in leftovers]
    assert not [n for n in sdist_names if n.startswith(f"{top}/docs/images/")]
    with zipfile.ZipFile(wheel) as archive:
        wheel_names = set(archive.namelist())
        metadata = archive.read(f"{top}.dist-info/METADATA").decode()
    assert f"{top}.dist-info/licenses/LICENSE" in wheel_names
    assert "pytest_crashpoints/schemas/report-v1.json" in wheel_names
    # The HTML report's page is drawn from these files, inlined into the one page it writes.
    page = {f"pytest_crashpoints/_plugin/page/report.{ext}" for ext in ("html", "css", "js")}
    assert page <= wheel_names
    assert {f"{top}/{name}" for name in page} <= sdist_names
    assert {"pytest_crashpoints/py.typed", "fake_providers/py.typed"} <= wheel_names
    assert "License-File: LICENSE" in metadata
    # twine: the description renders on the package index; check-wheel-contents: no stray,
    # duplicate or missing files, and exactly the two top-level packages we mean to ship.
    _run(BIN / "twine", "check", "--strict", sdist, wheel)
    _run(BIN / "check-wheel-contents", "--config", ROOT / "pyproject.toml", wheel)


def _clean_env(venv_bin: Path) -> dict[str, str]:
    """The environment of a user's shell with the fresh venv active: nothing of this suite."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "PYTHON", "COV_", "VIRTUAL_ENV"))
    }
    env["PATH"] = f"{venv_bin}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv_bin.parent)
    return env


def _quickstart_files() -> tuple[dict[str, str], dict[str, str]]:
    """The quickstart's files: the first mailer with its failing test, then the fixed pair."""
    first: dict[str, str] = {}
    fixed: dict[str, str] = {}
    for block in blocks_of(ROOT / "docs" / "quickstart.md"):
        if block.file in ("mailer.py", "test_mailer.py"):
            first.setdefault(block.file, block.code)
            fixed[block.file] = block.code
    assert len(first) == 2 and "review" in fixed["mailer.py"] != first["mailer.py"]
    return first, fixed


def test_the_wheel_installed_alone_in_a_fresh_venv_runs_the_quickstart(tmp_path: Path) -> None:
    _, wheel = _build(tmp_path / "dist")
    home = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(home)
    env = _clean_env(home / "bin")
    pip = [home / "bin" / "python", "-m", "pip", "--no-cache-dir", "--disable-pip-version-check"]
    wheelhouse = tmp_path / "wheelhouse"
    download = subprocess.run(
        [*map(str, pip), "download", "--timeout", "30", "--retries", "2", "--dest",
         str(wheelhouse), str(wheel)],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if download.returncode != 0 and UNREACHABLE.search(download.stdout + download.stderr):
        pytest.skip(
            "the package registry is unreachable, and the wheel's dependencies come from it: "
            + (download.stderr.strip().splitlines() or ["(no output)"])[-1]
        )
    assert download.returncode == 0, download.stdout + download.stderr
    # The wheel alone, no extras, nothing from the network or this checkout.
    _run(*pip, "install", "--no-index", "--find-links", wheelhouse, wheel, env=env)
    installed = _run(*pip, "list", "--format=json", env=env)
    names = {entry["name"].lower() for entry in json.loads(installed)}
    assert "pytest-crashpoints" in names
    assert not names & {"pytest-xdist", "respx"}, "an extra came with the plain install"

    assert _run(home / "bin" / "crashpoints", "--version", env=env) == (
        f"crashpoints (pytest-crashpoints) {VERSION}\n"
    )

    # The quickstart's first mailer and its failing test, and the fixed pair, side by side.
    first, fixed = _quickstart_files()
    runs = {}
    for label, files in (("first", first), ("fixed", fixed)):
        folder = tmp_path / label
        folder.mkdir()
        for name, code in files.items():
            (folder / name).write_text(code)
        runs[label] = subprocess.Popen(
            [str(home / "bin" / "python"), "-m", "pytest", "-p", "no:cacheprovider",
             "test_mailer.py", "--junitxml=junit.xml", "--crashpoints-report=report.json"],
            cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    outputs = {label: run.communicate(timeout=300)[0] for label, run in runs.items()}
    project = tmp_path / "first"
    out = outputs["first"]
    assert runs["first"].returncode == 1, out
    assert re.search(rf"^plugins: .*\bcrashpoints-{re.escape(VERSION)}\b", out, re.MULTILINE), out
    assert "minimal schedule: deliver message 0, kill at B (hit 1)" in out
    assert runs["fixed"].returncode == 0, outputs["fixed"]
    assert re.search(r"1 crash test\(s\), \d+ case\(s\), seed \d+: 1 passed", outputs["fixed"])
    # The plugin that ran is the installed one, not this checkout's.
    where = _run(home / "bin" / "python", "-c", "import pytest_crashpoints as p; print(p.__file__)",
                 cwd=project, env=env)  # fmt: skip
    assert Path(where.strip()).is_relative_to(home)

    report = json.loads((project / "report.json").read_text())
    [site] = (home / "lib").glob("python*/site-packages")
    schema = json.loads((site / "pytest_crashpoints" / "schemas" / "report-v1.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(report)
    [test] = report["tests"]
    properties = {
        p.attrib["name"]: p.attrib["value"]
        for p in ET.parse(project / "junit.xml").getroot().iter("property")
    }
    assert properties["crashpoints.replay"] == test["failure"]["token"]
    assert properties["crashpoints.verdict"] == "failed"
    shown = subprocess.run(
        [str(home / "bin" / "crashpoints"), "show", "report.json"],
        cwd=project, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 1 and f"replay: {test['failure']['replay_command']}" in shown.stdout
