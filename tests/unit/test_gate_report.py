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


RUNS = [
    {"phase": "fault-free", "schedule_text": "deliver message 0", "verdict": "passed",
     "invariants": [], "fingerprint": "a" * 64, "seconds": 0.512},
    {"phase": "exhaustive", "schedule_text": "deliver message 0, kill at B (hit 1)",
     "verdict": "failed", "invariants": [1, 2], "fingerprint": "b" * 64, "seconds": 1.25},
]


def write(tmp_path: Path, *tests: dict[str, Any]) -> Path:
    path = tmp_path / "report.json"
    document = {"version": 1, "seed": 1, "interrupted": False, "tests": list(tests)}
    path.write_text(json.dumps(document))
    return path


def test_show_lists_the_schedules_one_test_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        entry("t.py::test_ok", schedules=[RUNS[0]]),
        entry("t.py::test_broken", outcome="failed", failure=FAILURE, schedules=RUNS),
    )
    assert main(["show", str(path), "--schedules", "test_broken"]) == 0  # a part of the id
    assert capsys.readouterr().out.splitlines() == [
        "t.py::test_broken (failed): 2 schedule(s) run, 1 passed, 1 failed",
        "#  verdict   time  from        fingerprint   schedule",
        "1  passed   0.51s  fault-free  aaaaaaaaaaaa  deliver message 0",
        "2  failed   1.25s  exhaustive  bbbbbbbbbbbb  deliver message 0, kill at B (hit 1) "
        "(broke invariant(s) 1, 2)",
    ]
    assert main(["show", str(path), "--schedules", "t.py::test_ok"]) == 0
    assert "1 schedule(s) run, 1 passed, 0 failed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("tests", "argv", "message"),
    [
        ([entry("t.py::a"), entry("t.py::b")], ["--schedules", "t.py"],
         "2 tests in * match 't.py' (t.py::a, t.py::b); give more of the node id"),
        ([entry("t.py::a")], ["--schedules", "nothing"],
         "no test in * matches 'nothing'; `crashpoints show *` lists them"),
        ([entry("t.py::a")], ["--schedules", "t.py::a"],
         "does not list the schedules t.py::a ran (a report written before they were "
         "recorded)"),
        ([entry("t.py::a", schedules=[{"seconds": "soon"}])], ["--schedules", "a"],
         "is a damaged crashpoints report (tests?0?.schedules?0? has no 'phase')"),
    ],
    ids=["ambiguous", "unknown", "older-report", "damaged"],
)
def test_show_schedules_errors_are_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    tests: list[dict[str, Any]],
    argv: list[str],
    message: str,
) -> None:
    import fnmatch

    assert main(["show", str(write(tmp_path, *tests)), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert fnmatch.fnmatch(err, f"crashpoints show: error: *{message}*"), err


def test_show_html_writes_next_to_the_report_or_where_told(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, entry("t.py::a", schedules=RUNS))
    assert main(["show", "--html", str(path)]) == 0
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert capsys.readouterr().out == f"wrote {tmp_path / 'report.html'}\n"
    elsewhere = tmp_path / "site" / "index.html"
    assert main(["show", "--html", str(path), "-o", str(elsewhere)]) == 0
    assert "t.py::a" in elsewhere.read_text()
    # Never over the report itself, and nothing written for what is not a report.
    same = tmp_path / "same.html"
    same.write_text(path.read_text())
    assert main(["show", "--html", str(same)]) == 2
    assert "would overwrite the report itself" in capsys.readouterr().err
    missing = str(tmp_path / "missing.json")
    assert main(["show", "--html", missing, "-o", str(tmp_path / "m.html")]) == 2
    assert not (tmp_path / "m.html").exists()
    with pytest.raises(SystemExit):
        main(["show", str(path), "-o", str(tmp_path / "x.html")])
    assert "-o/--output goes with --html" in capsys.readouterr().err
