"""The gate's table (as ``crashpoints show`` prints it): why each test failed, and whose
coverage gaps hold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_crashpoints.cli import main

FAILURE = {
    "schedule": {"version": 1, "steps": [{"step": "Deliver", "message": 0}]},
    "token": "T",
    "invariants": [1],
    "schedule_text": "kill at B",
    "violations": ["invariant 1 ..."],
    "timeline": "",
    "replay_command": "pytest t.py::x --crashpoints-replay=T",
}


def entry(nodeid: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "nodeid": nodeid,
        "cases": 3,
        "coverage": {},
        "outcome": "passed",
        "failure": None,
    }
    test = {**base, **fields}
    test.setdefault("verdict", "failed" if test["failure"] else "passed")
    return test


def table(tmp_path: Path, capsys: pytest.CaptureFixture[str], *tests: dict[str, Any]) -> str:
    path = tmp_path / "report.json"
    document = {"version": 1, "seed": 1, "interrupted": False, "tests": list(tests)}
    path.write_text(json.dumps(document))
    main(["show", str(path)])
    return capsys.readouterr().out


def test_each_failed_test_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = table(
        tmp_path,
        capsys,
        entry("t.py::ok"),
        entry("t.py::v", outcome="failed", failure=FAILURE),
        entry("t.py::caught", expect=[1], failure=FAILURE),
        entry("t.py::missed", outcome="failed", expect=[4], failure=FAILURE),
        entry("t.py::gaps", outcome="failed", unreached=["E"], unkilled=["C"], unchecked=["x"]),
        entry("t.py::died", outcome="failed", error="node down: worker 'gw1' crashed"),
    )
    text = text.split("\n\n")[0]  # the table; each failure's details follow it
    rows = {line.split()[0]: line for line in text.splitlines()[2:]}
    assert text.splitlines()[0].split() == [
        "test", "verdict", "cases", "expected", "violations", "why"
    ]
    assert rows["t.py::ok"].split()[1:] == ["passed", "3", "-", "-"]
    assert rows["t.py::v"].endswith("invariant violated")
    assert rows["t.py::caught"].split()[1] == "caught"
    assert rows["t.py::caught"].endswith("1")  # no reason: it did what it should
    assert rows["t.py::missed"].endswith("broken agent not caught")
    assert rows["t.py::gaps"].endswith(
        "never reached: E; never killed: C; not checked: the ledger view reads too little"
    )
    assert rows["t.py::died"].endswith("error: node down: worker 'gw1' crashed")


def test_a_test_that_is_not_strict_keeps_its_gaps_to_itself(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    strict = entry("t.py::s", unkilled=["C"])
    lenient = entry("t.py::l", unreached=["E"], unkilled=["B"], strict_coverage=False)
    text = table(tmp_path, capsys, strict, lenient)
    assert "reached but never killed: C" in text
    assert "never reached" not in text and "killed: B" not in text
