"""The JSON report's schema: shipped in the package, versioned, and what ``crashpoints show``
holds a file to. Real reports are validated against it in tests/plugin (and from an installed
wheel in tests/acceptance/test_package.py)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pytest_crashpoints.cli import main
from tests.conftest import assert_follows_the_report_schema

SCHEMA_FILE = files("pytest_crashpoints").joinpath("schemas/report-v1.json")

#: A report as the plugin writes it: a passing test, a failing one, one whose worker died.
REPORT: dict[str, Any] = {
    "version": 1,
    "seed": 7,
    "interrupted": False,
    "tests": [
        {
            "nodeid": "t.py::test_broken",
            "outcome": "failed",
            "verdict": "failed",
            "expect": [],
            "seed": 7,
            "mode": "exhaustive",
            "cases": 2,
            "coverage": {"B": {"reached": 1, "killed": 1}},
            "recovered": 0,
            "unreached": [],
            "unkilled": [],
            "unchecked": [],
            "strict_coverage": False,
            "differences": [],
            "failure": {
                "schedule": {
                    "version": 1,
                    "steps": [{"step": "Deliver", "message": 0, "kill": {"point": "B", "hit": 1}}],
                },
                "schedule_text": "deliver message 0, kill at B (hit 1)",
                "token": "eNo1",
                "replay_command": "pytest t.py::test_broken --crashpoints-replay=eNo1",
                "violations": ["invariant 1 (...): twice"],
                "invariants": [1],
                "errors": [],
                "timeline": "t=0s setup",
                "run_dir": None,
                "fingerprint": "ab",
                "deterministic": True,
                "rerun_fingerprint": "ab",
            },
        },
        {
            "nodeid": "t.py::test_dies",
            "outcome": "failed",
            "verdict": "failed",
            "cases": 0,
            "coverage": {},
            "failure": None,
            "error": "worker 'gw0' crashed while running 't.py::test_dies'",
        },
    ],
}


def _set(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    def change(document: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        target: Any = document
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[last] = value

    return change


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def change(document: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        target: Any = document
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        del target[last]

    return change


DAMAGE = {
    "no seed": _drop("seed"),
    "interrupted not a bool": _set("interrupted", "no"),
    "a test without a verdict": _drop("tests/0/verdict"),
    "an unknown verdict": _set("tests/0/verdict", "fine"),
    "cases as text": _set("tests/0/cases", "2"),
    "cases true": _set("tests/0/cases", True),
    "negative cases": _set("tests/0/cases", -1),
    "coverage without killed": _set("tests/0/coverage", {"B": {"reached": 1}}),
    "an unknown mode": _set("tests/0/mode", "random"),
    "invariant 7": _set("tests/0/failure/invariants", [7]),
    "a failure without a token": _drop("tests/0/failure/token"),
    "a failure that is a string": _set("tests/0/failure", "boom"),
    "a step without its kind": _set("tests/0/failure/schedule/steps", [{"message": 0}]),
    "run_dir a number": _set("tests/0/failure/run_dir", 3),
    "error not text": _set("tests/1/error", ["crashed"]),
}


def test_the_shipped_schema_is_a_valid_json_schema_of_format_version_1() -> None:
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["version"] == {"const": 1, "description": "the format version"}
    assert schema["$id"].endswith("/pytest_crashpoints/schemas/report-v1.json")


def test_a_report_as_written_follows_the_schema_and_shows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_follows_the_report_schema(REPORT)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(REPORT))
    assert main(["show", str(path)]) == 1  # a failed test: shown, not refused
    assert "minimal schedule: deliver message 0, kill at B (hit 1)" in capsys.readouterr().out


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_show_refuses_what_the_schema_refuses_with_one_line(
    damage: Callable[[dict[str, Any]], None],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = copy.deepcopy(REPORT)
    damage(document)
    with pytest.raises(jsonschema.ValidationError):
        assert_follows_the_report_schema(document)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(document))
    assert main(["show", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"crashpoints show: error: {path} is a damaged crashpoints ")
    assert captured.err.count("\n") == 1


def test_fields_the_schema_does_not_name_are_read_past(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = copy.deepcopy(REPORT)
    document["written_by"] = "a later release"
    document["tests"][0]["duration"] = 1.5
    assert_follows_the_report_schema(document)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(document))
    assert main(["show", str(path)]) == 1
