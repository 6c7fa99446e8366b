"""Every invariant a test breaks, end to end: a recovery with two bugs, each shown by a
schedule of its own, fails its test with the first failing schedule and reports the other
invariant as found after it, with its own replay command, in the failure text, the summary,
the JSON report and JUnit XML; the same for the same seed on a quiet machine and a busy one;
its replay token replays that schedule; ``expect=`` counts what was found after the
failure."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from tests.conftest import assert_follows_the_report_schema, run_reported
from tests.stress import busy

TWO_BUGS = '''
import pytest
from pytest_crashpoints import reference_worker
from scenarios.broken.agents import tenant_blind_releasing_recovery

MESSAGE = {
    "task_id": "invoice-7",
    "tenant": "tenant-7",
    "calls": [{"tool": "send_email", "key": "invoice:tenant-7:inv-7:send",
               "args": {"to": "billing@example.com", "subject": "Invoice", "body": "100 EUR"}}],
}


@pytest.mark.crashpoints(points="BEF", providers=["email"], mode="{mode}", max_faults=1,
                         max_examples=30{expect})
def test_two_bugs(crashpoints):
    crashpoints.run(worker=reference_worker, recover=tenant_blind_releasing_recovery,
                    messages=[MESSAGE])
'''
NODEID = "test_two.py::test_two_bugs"


def two_bugs(mode: str, expect: str = "") -> str:
    return TWO_BUGS.replace("{mode}", mode).replace("{expect}", expect)


def also_of(test: dict[str, object]) -> list[tuple[object, ...]]:
    failure = test["failure"]
    assert isinstance(failure, dict)
    return [(a["invariants"], a["schedule_text"], a["token"]) for a in failure["also"]]


@pytest.mark.parametrize("mode", ["exhaustive", "hypothesis"])
def test_both_invariants_are_reported_with_a_replay_each_quiet_and_under_load(
    pytester: pytest.Pytester, mode: str
) -> None:
    pytester.makepyfile(test_two=two_bugs(mode))
    junit = pytester.path / "junit.xml"
    quiet, tests = run_reported(pytester, "--crashpoints-seed=11", f"--junitxml={junit}")
    quiet.assert_outcomes(failed=1)
    test = tests["test_two_bugs"]
    assert_follows_the_report_schema(
        {"version": 1, "seed": 11, "interrupted": False, "tests": [test]}
    )
    failure = test["failure"]
    assert failure["invariants"] == [1, 2, 4]  # THE failure: a tenant crossed after E
    [also] = failure["also"]
    assert also["invariants"] == [5] and "F: email lookups time out" in also["schedule_text"]
    assert also["replay_command"] == f"pytest {NODEID} --crashpoints-replay={also['token']}"
    assert also["token"] != failure["token"] and failure["also_cases"] > 0
    quiet.stdout.fnmatch_lines(
        [
            "crashpoints: * violation(s) of invariant(s) 1 (*), 2 (*), 4 (*)",
            f"minimal schedule: {failure['schedule_text']}",
            f"replay: {failure['replay_command']}",
            "",
            "other invariants broken (looked for in * more case(s) after it):",
            "also breaks invariant 5 (in-flight work is visible in the queue and has an "
            f"owner): {also['schedule_text']}",
            "    invariant 5 (in-flight work is visible in the queue and has an owner): *"
            "is UNKNOWN and has no owner.",
            f"    replay: {also['replay_command']}",
            "*= crashpoints =*",
            "violations: invariant 1: 1 test(s), invariant 2: 1 test(s), invariant 4: 1 "
            "test(s), invariant 5: 1 test(s)",
            f"replay {NODEID}: {failure['replay_command']}",
            f"also breaks invariant(s) 5 in {NODEID}: {also['schedule_text']}; replay: "
            f"{also['replay_command']}",
        ]
    )
    [case] = ET.parse(junit).getroot().iter("testcase")
    properties = [(p.attrib["name"], p.attrib["value"]) for p in case.iter("property")]
    assert ("crashpoints.also", f"5 {also['token']}") in properties

    # The same seed on a busy machine: the same failure and the same schedule after it.
    with busy(1):
        loaded, again = run_reported(pytester, "--crashpoints-seed=11", "-n", "2")
    loaded.assert_outcomes(failed=1)
    assert again["test_two_bugs"]["failure"]["schedule_text"] == failure["schedule_text"]
    assert also_of(again["test_two_bugs"]) == also_of(test)

    # Its token replays that schedule alone.
    replayed, by_name = run_reported(pytester, f"--crashpoints-replay={also['token']}")
    replayed.assert_outcomes(failed=1)
    replayed.stdout.fnmatch_lines(
        [
            "crashpoints: 1 violation(s) of invariant(s) 5 (*)",
            f"minimal schedule: {also['schedule_text']}",
        ]
    )
    assert by_name["test_two_bugs"]["cases"] == 2 and by_name["test_two_bugs"]["failure"][
        "also"
    ] == []


@pytest.mark.parametrize(
    ("expect", "outcome"),
    [("[4, 5]", "passed"), ("4", "passed"), ("[4, 6]", "failed")],
    ids=["both found: caught", "one: caught", "one never broken: not caught"],
)
def test_expect_counts_the_invariants_found_after_the_failure(
    pytester: pytest.Pytester, expect: str, outcome: str
) -> None:
    pytester.makepyfile(
        test_two=two_bugs("exhaustive", f", expect={expect}")
    )
    result, tests = run_reported(pytester, "--crashpoints-seed=11")
    assert tests["test_two_bugs"]["outcome"] == outcome
    if outcome == "passed":
        result.stdout.fnmatch_lines(["*0 passed, 1 caught (broken on purpose), 0 failed*"])
    else:
        result.stdout.fnmatch_lines(
            [
                "*was not caught: expected a violation of invariant(s) [[]4, 6], found "
                "[[]1, 2, 4, 5] in * case(s). The failing schedule and the schedules found "
                "after it broke only these*",
                "also breaks invariant 5 (*",
            ]
        )
