"""What a user of the released package meets: its metadata, its description, its help texts.

Read from the installed distribution's metadata (``make`` reinstalls when pyproject.toml
changes), so these are the values a package index and pip see. The built sdist and wheel
themselves are checked in tests/acceptance/test_package.py.
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import metadata, requires, version
from pathlib import Path

import pytest

from pytest_crashpoints.cli import main
from pytest_crashpoints.plugin import MARKER_HELP
from tests.acceptance.test_docs import _anchors, blocks_of

ROOT = Path(__file__).resolve().parents[2]
META = metadata("pytest-crashpoints")
URLS = dict(entry.split(", ", 1) for entry in META.get_all("Project-URL") or [])
SOURCE = URLS["Source"]
#: A link to a file of the repository: the path, and the anchor if any.
REPO_LINK = re.compile(re.escape(SOURCE) + r"/blob/main/([\w./-]+)(?:#([\w-]+))?")


def _broken_repo_links(text: str) -> list[str]:
    broken = []
    for match in REPO_LINK.finditer(text):
        path, anchor = ROOT / match.group(1), match.group(2)
        if not path.is_file():
            broken.append(f"{match.group(0)} (no such file)")
        elif anchor and anchor not in _anchors(path):
            broken.append(f"{match.group(0)} (no such heading)")
    return broken


def test_the_metadata_names_the_source_docs_changelog_and_issues() -> None:
    assert set(URLS) >= {"Source", "Documentation", "Changelog", "Issues"}
    assert URLS["Documentation"].startswith(SOURCE + "/blob/main/docs/")
    assert _broken_repo_links("\n".join(URLS.values())) == []
    assert META["License-Expression"] == "MIT"
    assert META.get_all("License-File") == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_installing_the_plugin_adds_no_pytest_plugin_the_harness_does_not_need() -> None:
    hard = {
        re.split(r"[<>=!~; \[]", line)[0].lower()
        for line in requires("pytest-crashpoints") or []
        if "extra ==" not in line
    }
    # Each is loaded into every pytest session of every user: what the harness runs on.
    assert hard == {"pytest", "hypothesis", "httpx", "time-machine", "multiprocess"}
    floor = next(r for r in requires("pytest-crashpoints") or [] if r.startswith("pytest>="))
    assert floor != "pytest>=8.1.0" and floor != "pytest>=8.1"  # 8.1.0 was yanked


def test_fake_providers_mock_without_respx_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fake_providers import mock

    monkeypatch.setitem(sys.modules, "respx", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"pip install 'pytest-crashpoints\[respx\]'"):
        mock()


def test_crashpoints_version_prints_the_installed_release(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"crashpoints (pytest-crashpoints) {version(META['Name'])}\n"


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        main(argv)
    return capsys.readouterr().out


def test_help_texts_link_the_docs_by_url_and_name_no_file_a_wheel_lacks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    texts = {
        "marker": MARKER_HELP,
        "crashpoints --help": _help(["--help"], capsys),
        "crashpoints gate --help": _help(["gate", "--help"], capsys),
    }
    for name, text in texts.items():
        flat = " ".join(text.split())  # argparse wraps long lines
        assert REPO_LINK.search(flat), f"{name} links no documentation page"
        assert _broken_repo_links(flat) == [], name
        bare = [m for m in re.findall(r"\S*docs/\S*", flat) if not m.startswith(SOURCE)]
        assert bare == [], f"{name} names a docs/ path a wheel does not have: {bare}"
        assert "scenarios" not in flat, f"{name} names the repository's scenarios/"


def test_the_package_description_is_its_own_with_absolute_links() -> None:
    description = META["Description"]
    assert META["Description-Content-Type"] == "text/markdown"
    assert description.strip() == (ROOT / "README.pypi.md").read_text().strip()
    assert "make " not in description  # the repository's set-up is not a user's
    links = re.findall(r"\]\(([^)\s]+)\)", description)
    assert links and all(link.startswith("https://") for link in links), links
    assert _broken_repo_links(description) == []
    # Its first test is the quickstart's, which tests/acceptance runs (from a wheel, too).
    [shown] = [b.code for b in blocks_of(ROOT / "README.pypi.md") if b.language == "python"]
    quickstart = [b for b in blocks_of(ROOT / "docs" / "quickstart.md") if b.kind == "test-fails"]
    assert shown == quickstart[0].code


def test_the_repository_readme_keeps_its_two_commands_at_the_top() -> None:
    head = (ROOT / "README.md").read_text().split("---", 1)[0]
    assert "make gate" in head and "make test" in head
