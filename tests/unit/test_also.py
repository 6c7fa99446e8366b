"""Every invariant a test breaks: after the failure, the search for the others
(``search/also.py``), and every report that shows what it found (text, summary, JSON, JUnit,
the gate's table and Markdown, ``crashpoints show``, the HTML page, ``crashpoints merge``)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_crashpoints._cli.merge import merge_reports
from pytest_crashpoints._cli.reading import render_markdown, render_table, why
from pytest_crashpoints._harness.case.runner import CaseResult
from pytest_crashpoints._harness.case.steps import INCONCLUSIVE, WORLD_LIMIT
from pytest_crashpoints._harness.search.also import OtherInvariants, also_budget, drawn_rounds
from pytest_crashpoints._harness.search.findings import (
    AlsoBroken,
    ExplorationReport,
    Failure,
    render_failure,
)
from pytest_crashpoints._harness.verdict.history import History
from pytest_crashpoints._harness.verdict.invariants import Violation
from pytest_crashpoints._plugin.html import render_html
from pytest_crashpoints._plugin.results import junit_properties
from pytest_crashpoints._plugin.summary import summary_lines
from pytest_crashpoints.cli import main
from pytest_crashpoints.harness import Deliver, KillAt, Recover, Schedule, read_token
from tests.conftest import assert_follows_the_report_schema

NODEID = "test_two.py::test_two"
AT_B = Schedule((Deliver(0, KillAt("B", 1)), Recover()))
AT_A = Schedule((Deliver(0, KillAt("A", 1)), Recover()))


def case(schedule: Schedule, *broken: int | str, errors: Sequence[str] = ()) -> CaseResult:
    """A case's result that broke ``broken`` (one violation each)."""
    return CaseResult(
        schedule=schedule,
        violations=tuple(
            Violation(n, message=f"broke {n}", evidence=(f"evidence of {n}",), title="own")
            for n in broken
        ),
        errors=tuple(errors),
        history=History(),
        timeline="",
        fingerprint="f" * 64,
        state=(),
        hits={},
        kills=(),
        expected_effects=(),
        run_dir=None,
    )


def search(*failed: int | str, own: Sequence[str] = ()) -> OtherInvariants:
    return OtherInvariants(failed, own, nodeid=NODEID, seed=7)


# -- what the search keeps --------------------------------------------------------------------


def test_a_case_is_kept_for_the_invariants_no_earlier_one_broke() -> None:
    found = search(1, 2)
    assert found.new_in(case(AT_B, 1, 2)) == ()
    assert found.new_in(case(AT_B, 2, 5, 4)) == (4, 5)
    assert found.keep(case(AT_B, 2, 5, 4), index=9)
    [also] = found.found
    assert also.invariants == (4, 5) and also.broken == (2, 4, 5) and also.index == 9
    # Only the violations it is reported for (in the case's order), not the one of 2.
    assert [v.splitlines()[0] for v in also.violations] == [
        "invariant 5 (in-flight work is visible in the queue and has an owner): broke 5",
        "invariant 4 (a retry never widens credentials or crosses a tenant boundary): broke 4",
    ]
    token = read_token(also.token)
    assert token.schedule == AT_B and token.seed == 7 and token.nodeid == NODEID
    assert also.replay_command == f"pytest {NODEID} --crashpoints-replay={also.token}"
    # Seen now: a later case that breaks 4 again is not kept.
    assert not found.keep(case(AT_A, 4), index=10)
    assert found.new_in(case(AT_A, 4, 6)) == (6,)


def test_a_case_that_is_no_verdict_is_never_kept() -> None:
    found = search(1)
    assert found.new_in(case(AT_B)) == ()  # passed
    assert found.new_in(case(AT_B, 5, errors=[f"{INCONCLUSIVE} worker-2 timed out"])) == ()
    assert found.new_in(case(AT_B, 5, errors=[f"{WORLD_LIMIT} GET /v1/x"])) == ()
    assert found.new_in(case(AT_B, 5, errors=["worker-2 died"])) == (5,)


def test_an_invariant_of_your_own_counts_and_the_search_knows_when_all_are_seen() -> None:
    found = search(1, 2, 3, 4, 5, own=["refunds_within_charge"])
    assert not found.complete
    assert found.keep(case(AT_B, 6), index=None)
    assert not found.complete
    assert found.keep(case(AT_A, "refunds_within_charge"), index=None)
    assert found.complete
    assert found.found[-1].titles == {"refunds_within_charge": "own"}


def test_each_round_draws_from_a_seed_of_its_own_the_same_on_every_run() -> None:
    found = search(4)
    first, second = found.round_seed(7, 1), found.round_seed(7, 2)
    assert first != second and first == search(4).round_seed(7, 1)
    assert found.round_seed(8, 1) != first and found.round_seed(None, 1) is None
    found.keep(case(AT_B, 5), index=None)
    assert found.round_seed(7, 1) != first  # after 5 was seen, another search


@pytest.mark.parametrize(("examples", "budget"), [(100, 50), (5, 3), (1, 1)])
def test_the_drawn_search_gets_half_the_examples(examples: int, budget: int) -> None:
    assert also_budget(examples) == budget


def scripted(draws: list[list[CaseResult]], calls: list[dict[str, Any]]) -> Callable[..., Any]:
    """A stand-in for Hypothesis: round ``n`` runs ``prop`` on ``draws[n]`` in order, at most
    ``max_examples`` of them, and re-raises what it raised (as Hypothesis re-raises the
    shrunk case); ``calls`` records each round's arguments."""
    rounds = iter(draws)

    def draw(prop: Callable[[Schedule], None], **how: Any) -> Callable[[], None]:
        calls.append(how)
        cases = next(rounds)

        def test() -> None:
            for result in cases[: how["max_examples"]]:
                prop(result.schedule)

        return test

    return draw


def results_by_schedule(*results: CaseResult) -> Callable[[Schedule], CaseResult]:
    table = {str(r.schedule): r for r in results}
    return lambda schedule: table[str(schedule)]


def test_rounds_spend_the_examples_they_drew_until_their_find() -> None:
    plain = [case(Schedule((Deliver(0, KillAt("C", n)),))) for n in range(1, 9)]
    fives = case(Schedule((Deliver(0, KillAt("B", 5)),)), 5)
    sixes = case(Schedule((Deliver(0, KillAt("B", 6)),)), 4, 6)
    calls: list[dict[str, Any]] = []
    found = search(4)
    rounds = drawn_rounds(
        found,
        budget=10,
        seed=7,
        draw=scripted([[*plain[:3], fives], [*plain[:2], sixes], plain], calls),
        run=results_by_schedule(*plain, fives, sixes),
    )
    kept = []
    for result in rounds:
        kept.append(result)
        found.keep(result)
    assert kept == [fives, sixes]
    # 10 examples; the first round found 5 at its 4th, the second 6 at its 3rd; the third
    # found nothing in the 3 left, and ended the search.
    assert [c["max_examples"] for c in calls] == [10, 6, 3]
    assert all(c["key"] is None for c in calls)  # no example database: the same every run
    assert calls[0]["seed"] == search(4).round_seed(7, 1)
    assert len({c["seed"] for c in calls}) == 3


def test_rounds_end_when_every_invariant_is_seen() -> None:
    calls: list[dict[str, Any]] = []
    found = search(1, 2, 3, 4, 5)
    sixes = case(AT_B, 6)
    rounds = drawn_rounds(
        found, budget=10, seed=7, draw=scripted([[sixes], [sixes]], calls),
        run=results_by_schedule(sixes),
    )
    for result in rounds:
        found.keep(result)
    assert len(calls) == 1  # nothing left to find: no second round


# -- what a failure says of them --------------------------------------------------------------


def failure(
    *, also: Sequence[AlsoBroken] = (), cases: int = 0, stopped: str | None = None
) -> Failure:
    return Failure(
        schedule=Schedule((Deliver(0, KillAt("B", 1)), Recover())),
        token="T1",
        replay_command=f"pytest {NODEID} --crashpoints-replay=T1",
        violations=("invariant 4 (a retry ...): crossed",),
        invariants=(4,),
        errors=(),
        timeline="t=0s setup",
        run_dir=None,
        fingerprint="a" * 64,
        deterministic=True,
        rerun_fingerprint="a" * 64,
        also=tuple(also),
        also_cases=cases,
        also_stopped=stopped,
    )


def also_five() -> AlsoBroken:
    found = search(4)
    found.keep(case(AT_A, 5), index=7)
    return found.found[0]


def report_of(found: Failure) -> ExplorationReport:
    report = ExplorationReport(NODEID, 7, "exhaustive", cases=23)
    report.failure = found
    return report


def test_the_failure_text_shows_each_other_invariant_with_its_own_replay() -> None:
    also = also_five()
    text = render_failure(report_of(failure(also=[also], cases=9)))
    lines = text.splitlines()
    assert lines[0].startswith("crashpoints: 1 violation(s) of invariant(s) 4 (")  # THE failure
    start = lines.index(f"replay: pytest {NODEID} --crashpoints-replay=T1")
    assert lines[start + 1 :] == [
        "",
        "other invariants broken (looked for in 9 more case(s) after it):",
        "also breaks invariant 5 (in-flight work is visible in the queue and has an owner): "
        "deliver message 0, kill at A (hit 1); run recovery",
        "    invariant 5 (in-flight work is visible in the queue and has an owner): broke 5",
        "        evidence of 5",
        f"    replay: {also.replay_command}",
    ]


def test_the_failure_text_says_when_nothing_else_was_found_and_nothing_when_not_looked() -> None:
    text = render_failure(report_of(failure(cases=12)))
    assert text.splitlines()[-1] == "no other invariant broken in 12 more case(s) after it"
    assert "other invariant" not in render_failure(report_of(failure()))


def document(*tests: dict[str, Any]) -> dict[str, Any]:
    return {"version": 1, "seed": 7, "interrupted": False, "shard": None, "tests": list(tests)}


def entry_of(found: Failure, **fields: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(report_of(found).to_json()))
    data.update({"outcome": "failed", **fields})
    return data


def test_the_json_report_has_them_and_follows_its_schema() -> None:
    also = also_five()
    data = entry_of(failure(also=[also], cases=9))
    assert_follows_the_report_schema(document(data))
    [entry] = data["failure"]["also"]
    assert entry["invariants"] == [5] and entry["broken"] == [5] and entry["index"] == 7
    assert entry["schedule_text"] == "deliver message 0, kill at A (hit 1); run recovery"
    assert Schedule.from_dict(entry["schedule"]) == AT_A
    assert entry["token"] == also.token and entry["replay_command"] == also.replay_command
    assert data["failure"]["also_cases"] == 9 and data["failure"]["also_stopped"] is None
    broken = json.loads(json.dumps(data))
    del broken["failure"]["also"][0]["token"]
    with pytest.raises(Exception, match="token"):
        assert_follows_the_report_schema(document(broken))


def test_the_summary_and_junit_name_them() -> None:
    also = also_five()
    data = entry_of(failure(also=[also], cases=9))
    lines = summary_lines([data], seed=7)
    assert "violations: invariant 4: 1 test(s), invariant 5: 1 test(s)" in lines
    assert lines[-2] == f"replay {NODEID}: pytest {NODEID} --crashpoints-replay=T1"
    assert lines[-1] == (
        f"also breaks invariant(s) 5 in {NODEID}: deliver message 0, kill at A (hit 1); run "
        f"recovery; replay: {also.replay_command}"
    )
    properties = junit_properties(data, outcome="failed")
    assert ("crashpoints.invariants", "4") in properties
    assert ("crashpoints.also", f"5 {also.token}") in properties


def test_the_gate_counts_them_for_expect_and_shows_them() -> None:
    also = also_five()
    caught = entry_of(failure(also=[also], cases=9), outcome="passed", expect=[4, 5])
    missed = entry_of(failure(also=[also], cases=9), expect=[4, 6])
    failed = entry_of(failure(also=[also], cases=9))
    assert why(caught) == "" and why(missed) == "broken agent not caught"
    # Failed for another reason (the engines disagreed): what it expected was found.
    disagreed = entry_of(failure(also=[also], cases=9), expect=[4, 5])
    assert why(disagreed) == "invariant violated"
    table = render_table(document(caught, missed, failed))
    assert table.splitlines()[2].split("  ")[0] == NODEID
    assert "4; also 5" in table.splitlines()[2]
    markdown = render_markdown(document(failed), passed=False)
    # Literal Markdown: the schedule's parentheses escaped.
    assert r"Also breaks invariant(s) 5: deliver message 0, kill at A \(hit 1\); run" in (
        markdown
    )
    assert f"Replay: `{also.replay_command}`" in markdown


def test_show_and_the_html_page_show_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    also = also_five()
    path = tmp_path / "report.json"
    path.write_text(json.dumps(document(entry_of(failure(also=[also], cases=9)))))
    assert main(["show", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    start = out.index(
        "also breaks invariant(s) 5: deliver message 0, kill at A (hit 1); run recovery"
    )
    assert out[start + 1].startswith("invariant 5 (in-flight work")
    assert out[start + 3] == f"replay: {also.replay_command}"
    page = render_html(document(entry_of(failure(also=[also], cases=9))))
    assert "Also breaks invariant(s) 5</h3>" in page
    assert f'<code id="t1-also1-replay">{also.replay_command}</code>' in page
    assert 'data-copy="t1-also1-replay"' in page
    stopped = failure(also=[also], cases=4, stopped="a case raised RuntimeError: no")
    path.write_text(json.dumps(document(entry_of(stopped))))
    assert main(["show", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    said = "the search for other invariants stopped early: a case raised RuntimeError: no"
    assert out[-1] == said
    assert "stopped early: a case raised RuntimeError: no</p>" in render_html(
        document(entry_of(stopped))
    )
    assert render_failure(report_of(stopped)).splitlines()[-1] == out[-1]


# -- crashpoints merge ----------------------------------------------------------------------


def run_entry(index: int, *broken: int) -> dict[str, Any]:
    return {
        "phase": "exhaustive",
        "schedule_text": f"schedule {index}",
        "verdict": "failed" if broken else "passed",
        "invariants": list(broken),
        "fingerprint": f"{index:064d}",
        "seconds": 0.1,
        "index": index,
    }


def also_entry(index: int, new: Sequence[int], broken: Sequence[int]) -> dict[str, Any]:
    return {
        "invariants": list(new),
        "broken": list(broken),
        "schedule": {"version": 1, "steps": []},
        "schedule_text": f"schedule {index}",
        "token": f"token-{index}",
        "replay_command": f"pytest x --crashpoints-replay=token-{index}",
        "violations": [f"invariant {n} (what {n} says): at {index}" for n in new],
        "titles": {},
        "index": index,
    }


def shard(
    k: int, runs: list[dict[str, Any]], failed_at: int, broken: list[int],
    also: list[dict[str, Any]], *, expect: list[int] | None = None,
) -> tuple[Path, dict[str, Any]]:
    failure = {
        "schedule": {"version": 1, "steps": []},
        "schedule_text": f"schedule {failed_at}",
        "token": f"token-{failed_at}",
        "replay_command": f"pytest x --crashpoints-replay=token-{failed_at}",
        "violations": [f"invariant {n} (what {n} says): at {failed_at}" for n in broken],
        "invariants": broken,
        "timeline": "",
        "also": also,
        "also_cases": len(runs),
        "also_stopped": None,
    }
    fault_free = {**run_entry(0), "phase": "fault-free", "index": None, "schedule_text": "ff"}
    test = {
        "nodeid": "t.py::x", "outcome": "failed", "verdict": "failed", "cases": len(runs) + 1,
        "coverage": {}, "mode": "exhaustive", "declared": [], "failure": failure,
        "schedules": [fault_free, *runs],
    }
    if expect is not None:
        test["expect"] = expect
    report = {
        "version": 1, "seed": 7, "interrupted": False,
        "shard": {"index": k, "total": 2}, "tests": [test],
    }
    return Path(f"s{k}.json"), report


def two_shards(expect: list[int] | None = None) -> list[tuple[Path, dict[str, Any]]]:
    # One machine: schedule 3 fails first (4); 4 breaks 1, 2 and 4; 7 breaks 5 and 6; 9
    # breaks 5. Shard 1 runs the odd indices, shard 2 the even ones.
    one = shard(
        1, [run_entry(1), run_entry(3, 4), run_entry(5), run_entry(7, 5, 6), run_entry(9, 5)],
        3, [4], [also_entry(7, [5, 6], [5, 6])], expect=expect,
    )
    two = shard(
        2, [run_entry(2), run_entry(4, 1, 2, 4), run_entry(6), run_entry(8, 5)],
        4, [1, 2, 4], [also_entry(8, [5], [5])], expect=expect,
    )
    return [two, one]


def test_merge_keeps_what_one_machine_would_find_after_the_failure() -> None:
    [test] = merge_reports(two_shards())["tests"]
    failure = test["failure"]
    assert failure["schedule_text"] == "schedule 3" and failure["invariants"] == [4]
    # 1 and 2 first by schedule 4 (shard 2's own failure), then 5 by schedule 7 (shard 2's
    # 8, and shard 1's 9, come after it), 6 with it.
    assert [(a["index"], a["invariants"]) for a in failure["also"]] == [
        (4, [1, 2]), (7, [5, 6])
    ]
    assert failure["also"][0]["violations"] == [
        "invariant 1 (what 1 says): at 4", "invariant 2 (what 2 says): at 4"
    ]
    assert failure["also"][0]["token"] == "token-4"
    # Every case is kept: one machine goes on after its failure.
    assert test["cases"] == 10 and failure["also_cases"] == 6
    assert_follows_the_report_schema({**merge_reports(two_shards()), "tests": [test]})


def test_merge_judges_a_broken_agent_on_everything_found() -> None:
    # Neither shard alone broke 4 and 6 in the schedules it reported...
    reports = two_shards(expect=[4, 6])
    for _, report in reports:
        report["tests"][0]["failure"]["also"] = [
            a for a in report["tests"][0]["failure"]["also"] if 6 not in a["broken"]
        ]
    reports[1][1]["tests"][0]["failure"]["also"] = [also_entry(7, [5, 6], [5, 6])]
    [test] = merge_reports(reports)["tests"]
    assert test["outcome"] == "passed"  # ...together they did: caught
    missed = copy.deepcopy(two_shards(expect=[4, 3]))
    [test] = merge_reports(missed)["tests"]
    assert test["outcome"] == "failed"


def test_merge_stops_where_one_machine_stops_when_no_shard_looked_further() -> None:
    reports = two_shards()
    for _, report in reports:
        del report["tests"][0]["failure"]["also"]  # a release before the search
    [test] = merge_reports(reports)["tests"]
    assert [run["schedule_text"] for run in test["schedules"]] == [
        "ff", "schedule 1", "schedule 2", "schedule 3"
    ]
