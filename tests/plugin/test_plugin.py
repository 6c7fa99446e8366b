"""The plugin end to end, through pytester in subprocesses (workers are forked and killed)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_crashpoints.harness import read_token
from tests.conftest import assert_follows_the_report_schema, run_reported

SCENARIO = '''
import pytest
from pytest_crashpoints import State, reference_recovery, reference_worker

MESSAGE = {
    "task_id": "t-1",
    "tenant": "tenant-7",
    "calls": [{"tool": "send_email", "key": "invoice:tenant-7:inv-7:send",
               "args": {"to": "billing@example.com", "subject": "Invoice", "body": "100 EUR"}}],
}


def blind_recovery(ctx):
    """Broken on purpose: re-sends whatever is in flight, without asking the provider."""
    adapters = ctx.adapters()
    for attempt in ctx.ledger.attempts():
        if attempt.state in (State.DISPATCHED, State.UNKNOWN):
            adapters[attempt.tool_name].dispatch(
                attempt.args, idempotency_key=attempt.idempotency_key,
                authority=attempt.authority,
            )
    ctx.recover()
'''

GOOD = """
@pytest.mark.crashpoints(points="AB", providers=["email"], mode="{mode}", max_examples=3)
def test_good(crashpoints):
    crashpoints.run(worker=reference_worker, recover=reference_recovery, messages=[MESSAGE])
"""

BROKEN = """
@pytest.mark.crashpoints(points="B", providers=["email"], mode="exhaustive")
def test_broken(crashpoints):
    crashpoints.run(worker=reference_worker, recover=blind_recovery, messages=[MESSAGE])
"""

CAUGHT = """
@pytest.mark.crashpoints(points="B", providers=["email"], mode="exhaustive", expect=1)
def test_caught(crashpoints):
    crashpoints.run(worker=reference_worker, recover=blind_recovery, messages=[MESSAGE])
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "crashpoints", "-p", "no:randomly", *args)


@pytest.mark.parametrize("mode", ["exhaustive", "hypothesis"])
def test_a_correct_scenario_passes(pytester: pytest.Pytester, mode: str) -> None:
    pytester.makepyfile(SCENARIO + GOOD.replace("{mode}", mode))
    result = run(pytester, "--crashpoints-seed=7")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*Using --crashpoints-seed=7*",
            "*= crashpoints =*",
            "1 crash test(s), * case(s), seed 7: 1 passed, 0 caught*",
            "A * *",
            "B * *",
        ]
    )


def junit_properties(path: Path) -> dict[str, dict[str, str]]:
    """Each test case's properties in a JUnit XML file, by test name."""
    return {
        case.attrib["name"]: {p.attrib["name"]: p.attrib["value"] for p in case.iter("property")}
        for case in ET.parse(path).getroot().iter("testcase")
    }


def test_a_broken_agent_fails_with_a_replayable_report(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SCENARIO + BROKEN)
    report = pytester.path / "report.json"
    page = pytester.path / "html" / "report.html"
    junit = pytester.path / "junit.xml"
    result = run(
        pytester,
        "--crashpoints-seed=3",
        f"--crashpoints-report={report}",
        f"--junitxml={junit}",
        f"--crashpoints-html={page}",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*crashpoints: * violation(s) of invariant(s) 1 (no non-idempotent side effect*",
            "minimal schedule: deliver message 0, kill at B (hit 1)",
            "*message 0's mail.send happened twice at email (the fault-free run*): sg_req_* at "
            "t=1s by worker-1 (delivering message 0) and sg_req_* at t=*s by recovery-*",
            "*journal: email sg_req_* mail.send by worker-1*key=invoice:tenant-7:inv-7:send*"
            "effect applied",
            "timeline:",
            "*kill       worker-1 was killed at B (hit 1)",
            "cases run: *; seed: 3",
            "run directory (kept): *test_broken*",
            "replay: pytest test_a_broken_agent_fails_with_a_replayable_report.py::test_broken"
            " --crashpoints-replay=*",
        ]
    )
    document = json.loads(report.read_text())
    assert_follows_the_report_schema(document)
    assert document["version"] == 1 and document["seed"] == 3
    [test] = document["tests"]
    assert test["verdict"] == "failed" and test["outcome"] == "failed"
    assert 1 in test["failure"]["invariants"]
    assert test["failure"]["deterministic"] is True
    assert Path(test["failure"]["run_dir"]).is_dir()
    token = read_token(test["failure"]["token"])
    schedule, seed = token.schedule, token.seed
    assert str(schedule) == "deliver message 0, kill at B (hit 1)" and seed == 3
    # The JUnit XML carries what a CI system needs to act on it, the replay token included.
    assert junit_properties(junit)["test_broken"] == {
        "crashpoints.seed": "3",
        "crashpoints.cases": str(test["cases"]),
        "crashpoints.verdict": "failed",
        "crashpoints.invariants": " ".join(map(str, test["failure"]["invariants"])),
        "crashpoints.replay": test["failure"]["token"],
    }

    # Every schedule run is listed: the fault-free one first, the first failing one, then the
    # rest of the enumeration, run looking for the other invariants.
    runs = test["schedules"]
    assert len(runs) == test["cases"] and test["seconds"] >= sum(r["seconds"] for r in runs)
    assert runs[0]["phase"] == "fault-free" and runs[0]["verdict"] == "passed"
    [first] = [r for r in runs if r["verdict"] == "failed"][:1]
    assert first["schedule_text"] == "deliver message 0, kill at B (hit 1)"
    assert 1 in first["invariants"] and first["fingerprint"] == test["failure"]["fingerprint"]
    assert runs.index(first) + 1 + test["failure"]["also_cases"] == len(runs)
    # The failing case as data: the duplicate the check found is two effects in the journal.
    case = test["failure"]["case"]
    assert case["version"] == 1
    [duplicate] = [v for v in case["violations"] if v["invariant"] == 1]
    named = {(r["provider"], r["request_id"]) for r in duplicate["requests"]}
    effects = {
        (row["provider"], row["request_id"])
        for row in case["timeline"]
        if row["source"] == "journal" and row["effect_applied"]
    }
    assert len(named) == 2 and named <= effects
    [kill] = [row for row in case["timeline"] if row.get("kind") == "kill"]
    assert kill["data"] == {"process": "worker-1", "point": "B", "hit": 1}
    assert page.read_text().startswith("<!DOCTYPE html>")

    # The replay command reproduces exactly that schedule.
    token = test["failure"]["token"]
    replayed = run(pytester, f"--crashpoints-replay={token}", "--crashpoints-seed=3")
    replayed.assert_outcomes(failed=1)
    replayed.stdout.fnmatch_lines(["minimal schedule: deliver message 0, kill at B (hit 1)"])
    assert "cases run: 2;" in replayed.stdout.str()  # the fault-free run and the replay
    # The printed command, as it is (no seed option): the token's seed, said where it is from.
    printed = run(pytester, f"--crashpoints-replay={token}")
    printed.assert_outcomes(failed=1)
    printed.stdout.fnmatch_lines(["Using --crashpoints-seed=3 (from the replay token)"])


def test_a_broken_agent_marked_expect_is_caught(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SCENARIO + CAUGHT)
    result = run(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["1 crash test(s), * 0 passed, 1 caught (broken on purpose)*"])


def test_expect_fails_when_the_bug_is_not_caught(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        SCENARIO
        + GOOD.replace("{mode}", "exhaustive").replace(
            "max_examples=3)", "max_examples=3, expect=1)"
        )
    )
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the deliberately broken agent of *test_good was not caught*"])


def test_expect_of_more_than_one_schedule_breaks_says_why_it_was_not_met(
    pytester: pytest.Pytester,
) -> None:
    """The failing schedule broke invariant 1 (and 2 and 6), none after it 4, and the test
    also expects 4: the message says what the failing schedule and those found after it
    broke, and what to do."""
    pytester.makepyfile(SCENARIO + CAUGHT.replace("expect=1", "expect=[1, 4]"))
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*was not caught: expected a violation of invariant(s) [[]1, 4], found [[]1, 2, 6] *"
         "The failing schedule and the schedules found after it broke only these: a larger "
         "budget*give each other bug a test of its own."]
    )


def test_verdicts_agree_under_xdist_and_the_summary_aggregates(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SCENARIO + GOOD.replace("{mode}", "exhaustive") + CAUGHT)
    serial = run(pytester, "--crashpoints-seed=5")
    junit = pytester.path / "junit.xml"
    parallel = run(pytester, "--crashpoints-seed=5", "-n", "2", f"--junitxml={junit}")
    serial.assert_outcomes(passed=2)
    parallel.assert_outcomes(passed=2)
    for result in (serial, parallel):
        result.stdout.fnmatch_lines(
            ["2 crash test(s), * case(s), seed 5: 1 passed, 1 caught (broken on purpose)*"]
        )

    def cases(result: pytest.RunResult) -> str:
        [line] = [x for x in result.outlines if x.startswith("2 crash test(s)")]
        return line

    assert cases(serial) == cases(parallel)
    # The JUnit XML properties come back from the xdist workers too.
    properties = junit_properties(junit)
    assert properties["test_good"]["crashpoints.verdict"] == "passed"
    assert properties["test_caught"]["crashpoints.verdict"] == "caught"
    assert properties["test_caught"]["crashpoints.seed"] == "5"
    assert "1" in properties["test_caught"]["crashpoints.invariants"].split()


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ('points="G", providers=["email"]', "point 'G' is not a crash point"),
        ('providers=["fax"]', "provider 'fax' is not one of payments, email, tickets, deploy"),
        ('providers=["email"], mode="random"', "mode='random' is not one of"),
        ('providers=["email"], max_examples=0', "max_examples=0 is not a whole number"),
        ('providers=["email"], expect=9', "9 is not an invariant (1 to 6)"),
        ('providers=["email"], colour="red"', "unknown keyword(s) colour"),
        ('providers=["email"], timeout=float("inf")', "timeout=inf is not a positive, finite"),
        ('providers=["email"], timeout=float("nan")', "timeout=nan is not a positive, finite"),
        ('providers=["email"], engine="fast"', "engine='fast' is not one of states, processes"),
        ('providers=["email"], faults=["lose"]', "'lose' is not a kind of fault; the kinds are"),
        (
            'points="AD", providers=["email"], faults="lose_response"',
            "'lose_response' needs point(s) B in points, which are AD",
        ),
        ('providers=["email"], faults=[]', "faults is empty; name at least one kind"),
        ('providers=["email"], faults=3', "faults=3 is not a list of fault kinds"),
        (
            'providers=["email"], faults=["kill", "-refuse"]',
            "mixes kinds to try with kinds to leave out ('-kind'); name only the kinds to try",
        ),
        (
            'providers=["email"], faults="-forget_sesion"',
            "'-forget_sesion' is not a kind of fault; the kinds are kill, * (each may be left "
            "out as '-kind')",
        ),
        (
            'points="BCD", providers=["email"], faults="-forget_session"',
            "'-forget_session' leaves out forget_session, which points BCD never try (it needs "
            "point(s) F); drop '-forget_session'",
        ),
        (
            'providers=["email"], faults=["-backup_restore"]',
            "backup_restore is tried only when chosen, so there is nothing to leave out",
        ),
        (
            'points="B", providers=["email"], faults=["-kill", "-lose_response", "-power_loss",'
            ' "-recovery_kill"]',
            "leaves out every kind of fault points B allow",
        ),
    ],
)
def test_bad_marker_arguments_give_one_clear_error(
    pytester: pytest.Pytester, marker: str, message: str
) -> None:
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.crashpoints({marker})
        def test_x(crashpoints):
            pass
        """
    )
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"crashpoints: bad marker on *test_x: *{message}*"])
    assert "Traceback" not in result.stdout.str()


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--crashpoints-mode=random"], {}, "--crashpoints-mode has the value 'random'"),
        (["--crashpoints-seed=-1"], {}, "--crashpoints-seed has the value '-1'"),
        ([], {"PYTEST_CRASHPOINTS_MAX_EXAMPLES": "many"}, "PYTEST_CRASHPOINTS_MAX_EXAMPLES has"),
        (["--crashpoints-timeout=0"], {}, "must be a positive, finite number of seconds"),
        (["--crashpoints-timeout=inf"], {}, "'inf': it must be a positive, finite number"),
        (["--crashpoints-timeout=nan"], {}, "'nan': it must be a positive, finite number"),
        ([], {"PYTEST_CRASHPOINTS_MAX_FAULTS": "2.5"}, "'2.5': it must be a whole number of 1"),
        (["--crashpoints-seed=x"], {}, "'x': it must be a whole number of 0 or more, or 'last'"),
        (["--crashpoints-report=."], {}, "--crashpoints-report has the value '.': it is a dir"),
        (["--crashpoints-jobs=0"], {}, "'0': it must be a whole number of 1 or more, or 'auto'"),
        ([], {"PYTEST_CRASHPOINTS_JOBS": "all"}, "PYTEST_CRASHPOINTS_JOBS has the value 'all'"),
        (
            [],
            {"PYTEST_CRASHPOINTS_REAL_BUSY_WAITS": "sometimes"},
            "PYTEST_CRASHPOINTS_REAL_BUSY_WAITS has the value 'sometimes': it must be true or "
            "false",
        ),
        (
            [],
            {"PYTEST_CRASHPOINTS_REAL_WAITS": "later"},
            "PYTEST_CRASHPOINTS_REAL_WAITS has the value 'later': it must be true or false "
            "(or yes/no, on/off, 1/0). "
            "Set it to 1 to wait out every wait of a worker in real time",
        ),
        (
            ["--crashpoints-run-dir=no/such/dir"],
            {},
            "'no/such/dir': it must be memory, disk, or the path of a directory that exists",
        ),
        (
            ["--crashpoints-report=a-file/report.json"],
            {},
            "'a-file/report.json': 'a-file' is not a folder this process can write to",
        ),
        (
            ["--crashpoints-replay=garbage"],
            {},
            "--crashpoints-replay has the value 'garbage': replay token 'garbage'… is damaged "
            "(not the text of a replay token)",
        ),
        (
            ["--crashpoints-replay=eJwrSS0uAQAEXQHB"],  # zlib of "test": not a token
            {},
            "is damaged (not the text of a replay token)",
        ),
    ],
)
def test_bad_option_values_are_usage_errors(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    message: str,
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    pytester.makepyfile("def test_plain():\n    pass\n")
    pytester.path.joinpath("a-file").write_text("")
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])
    err = result.stderr.str()
    assert "Traceback" not in err and "invalid literal" not in err and ", which" not in err


def test_the_header_says_where_run_directories_are(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = run(pytester, "--crashpoints-run-dir=disk")
    result.stdout.fnmatch_lines(
        [
            "crashpoints: run directories on disk (--crashpoints-run-dir=disk); a failing "
            "case's files are kept under pytest's tmp_path (--basetemp)"
        ]
    )
    pytester.mkdir("fast")
    result = run(pytester, "--crashpoints-run-dir=fast")
    result.stdout.fnmatch_lines(
        ["crashpoints: run directories in fast (--crashpoints-run-dir=fast); *"]
    )
    # Saying where they would go makes nothing: a session without a crash case leaves none.
    assert list((pytester.path / "fast").iterdir()) == []


def test_a_bad_ini_boolean_names_its_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ncrashpoints_strict_coverage = maybe\n")
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*ini crashpoints_strict_coverage has the value 'maybe': it must be true or false*"]
    )
    assert "Traceback" not in result.stderr.str()


def test_an_unpicklable_worker_under_spawn_is_one_line_naming_it(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        SCENARIO
        + """
@pytest.mark.crashpoints(points="A", providers=["email"], start_method="spawn")
def test_spawn(crashpoints):
    numbers = (n for n in range(3))  # a generator: dill cannot pickle it

    def locked_worker(message, ctx):
        next(numbers)
        return reference_worker(message, ctx)

    crashpoints.run(worker=locked_worker, recover=reference_recovery, messages=[MESSAGE])
"""
    )
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "crashpoints: *test_spawn: could not start a spawn worker: "
            "test_*.test_spawn.<locals>.locked_worker cannot be pickled*"
        ]
    )
    out = result.stdout.str()
    assert "deliver_entry" not in out and "Traceback" not in out


def test_option_precedence_marker_over_cli_over_env_over_ini(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini("[pytest]\ncrashpoints_mode = both\ncrashpoints_timeout = 11\n")
    monkeypatch.setenv("PYTEST_CRASHPOINTS_MODE", "hypothesis")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.crashpoints(providers=["email"], timeout=5)
        def test_marker(crashpoints):
            assert crashpoints.settings().mode == "exhaustive"  # the CLI's
            assert crashpoints.options.timeout == 11  # ini; no CLI, no env
            assert crashpoints.marker.timeout == 5  # the marker wins for its test

        @pytest.mark.crashpoints(providers=["email"], mode="both")
        def test_marker_mode(crashpoints):
            assert crashpoints.settings().mode == "both"
        """
    )
    run(pytester, "--crashpoints-mode=exhaustive").assert_outcomes(passed=2)
    # Without the CLI option the environment wins over the ini file.
    pytester.makepyfile(
        test_env="""
        import pytest

        @pytest.mark.crashpoints(providers=["email"])
        def test_env(crashpoints):
            assert crashpoints.settings().mode == "hypothesis"
        """
    )
    run(pytester, "test_env.py").assert_outcomes(passed=1)


def test_seed_last_reuses_the_previous_seed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain():\n    pass\n")
    first = run(pytester)
    [header] = [line for line in first.outlines if "Using --crashpoints-seed=" in line]
    again = run(pytester, "--crashpoints-seed=last")
    again.stdout.fnmatch_lines([f"*{header.strip()}*"])


def test_the_crashpoints_seed_wins_over_the_hypothesis_seed_and_any_hypothesis_seed_works(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile("def test_plain():\n    pass\n")
    both = run(pytester, "--crashpoints-seed=4", "--hypothesis-seed=9")
    assert "Using --crashpoints-seed=4" in both.outlines
    words = run(pytester, "--hypothesis-seed=not-a-number")
    words.stdout.fnmatch_lines(["Using --crashpoints-seed=* (from --hypothesis-seed)"])
    again = run(pytester, "--hypothesis-seed=not-a-number")
    [header] = [line for line in words.outlines if line.startswith("Using")]
    assert header in again.outlines  # the same words give the same seed


def test_a_declared_point_never_reached_is_reported_and_fails_strict(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        SCENARIO
        + """
@pytest.mark.crashpoints(points=["A", "never.reached"], providers=["email"], mode="exhaustive")
def test_unreached(crashpoints):
    crashpoints.run(worker=reference_worker, recover=reference_recovery, messages=[MESSAGE])
"""
    )
    result = run(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["UNREACHED in *test_unreached: never.reached*"])
    strict = run(pytester, "--crashpoints-strict-coverage")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*point(s) never.reached declared but never reached*"])


def test_the_unused_plugin_imports_nothing_heavy(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import sys

        def test_plain():
            heavy = {"hypothesis", "httpx", "respx", "multiprocess", "dill", "fake_providers"}
            loaded = sorted(name for name in heavy if name in sys.modules)
            assert loaded == [], loaded
        """
    )
    # -p no:hypothesispytest: Hypothesis's own plugin would import hypothesis itself.
    run(
        pytester, "-p", "no:hypothesispytest", "-p", "no:anyio", "-p", "no:respx", "-p", "no:xdist"
    ).assert_outcomes(passed=1)


def test_a_cautious_design_passes_and_the_differential_check_shows_where_it_differs(
    pytester: pytest.Pytester,
) -> None:
    # Parking every ambiguous send in MANUAL_REVIEW is correct: it breaks no invariant, so
    # the test passes; the differential check only reports that the reference confirms them.
    pytester.makepyfile(
        SCENARIO
        + """
def cautious_recovery(ctx):
    for attempt in ctx.ledger.attempts():
        path = {State.DISPATCHED: [State.UNKNOWN, State.MANUAL_REVIEW],
                State.UNKNOWN: [State.MANUAL_REVIEW]}.get(attempt.state, [])
        for to in path:
            ctx.ledger.transition(attempt.attempt_id, to, actor=ctx.worker_id,
                                  reason="ambiguous: a person decides")
    ctx.recover()


@pytest.mark.crashpoints(points="B", providers=["email"], mode="exhaustive")
def test_cautious(crashpoints):
    report = crashpoints.run(worker=reference_worker, recover=cautious_recovery,
                             messages=[MESSAGE], reference_messages=[MESSAGE])
    difference = report.differences[0]
    assert difference["schedule"] == "deliver message 0, kill at B (hit 1)"
    assert any("MANUAL_REVIEW" in line for line in difference["worker_only"])
    assert any("OUTCOME_CONFIRMED" in line for line in difference["reference_only"])
"""
    )
    result = run(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["differs from the reference in *test_cautious: * schedule(s); e.g. deliver message 0,*"]
    )


HYPOTHESIS_BROKEN = """
@pytest.mark.crashpoints(points="B", providers=["email"], mode="hypothesis", max_examples=20)
def test_broken_generated(crashpoints):
    crashpoints.run(worker=reference_worker, recover=blind_recovery, messages=[MESSAGE])
"""


def test_hypothesis_profile_seed_and_example_database(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        from hypothesis import settings
        from hypothesis.database import DirectoryBasedExampleDatabase

        # Explicit, so that the CI profile (no database) of the outer run does not leak in.
        settings.register_profile(
            "tiny", max_examples=3, database=DirectoryBasedExampleDatabase(".hypothesis/examples")
        )
        """
    )
    pytester.makepyfile(
        SCENARIO
        + GOOD.replace("{mode}", "hypothesis").replace(", max_examples=3", "")
        + HYPOTHESIS_BROKEN
    )
    report = pytester.path / "report.json"
    result = run(
        pytester,
        "--hypothesis-profile=tiny",
        "--hypothesis-seed=11",
        "--hypothesis-show-statistics",
        f"--crashpoints-report={report}",
    )
    result.assert_outcomes(passed=1, failed=1)
    # The seed shown is the seed used: --hypothesis-seed seeds the crash schedules too.
    result.stdout.fnmatch_lines(["Using --crashpoints-seed=11 (from --hypothesis-seed)"])
    document = json.loads(report.read_text())
    assert document["seed"] == 11
    assert {t["seed"] for t in document["tests"]} == {11}
    tests = {t["nodeid"].rpartition("::")[2]: t for t in document["tests"]}
    assert read_token(tests["test_broken_generated"]["failure"]["token"]).seed == 11
    # Hypothesis's statistics section shows the crash tests' exploration.
    result.stdout.fnmatch_lines(
        ["*= Hypothesis Statistics =*", "*::test_good:", "*- during generate phase*"]
    )
    # The profile's max_examples bounds the generated schedules, on top of the fault-free
    # run and, for a point the draw never reached, one covering schedule (A, B, recovery).
    assert tests["test_good"]["cases"] <= 1 + 3 + 3
    failure = tests["test_broken_generated"]["failure"]
    assert failure["schedule_text"] == "deliver message 0, kill at B (hit 1)"  # shrunk
    # Hypothesis's example database remembers the failing schedule.
    assert any((pytester.path / ".hypothesis" / "examples").rglob("*"))


def test_a_setup_mistake_in_run_is_one_clear_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        SCENARIO
        + """
@pytest.mark.crashpoints(points="A")
def test_no_providers(crashpoints):
    crashpoints.run(worker=reference_worker, recover=reference_recovery, messages=[MESSAGE])


@pytest.mark.crashpoints(points="A", providers=["email"])
def test_no_task_id(crashpoints):
    crashpoints.run(worker=reference_worker, recover=reference_recovery, messages=[{"x": 1}])
"""
    )
    result = run(pytester)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "crashpoints: *test_no_providers: the crashpoints marker names no providers; add*",
            "crashpoints: *test_no_task_id: message 0 ({'x': 1}) has no task_id*",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_a_replay_token_naming_a_message_the_test_lacks_is_one_line(
    pytester: pytest.Pytester,
) -> None:
    from pytest_crashpoints.harness import Deliver, Schedule, replay_token

    pytester.makepyfile(SCENARIO + GOOD.replace("{mode}", "exhaustive"))
    token = replay_token(Schedule((Deliver(99),)), seed=1, nodeid="x.py::test_good")
    result = run(pytester, f"--crashpoints-replay={token}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "crashpoints: *test_good: the replay token's schedule names message 99, but this "
            "test has 1 message(s) (0 to 0)*"
        ]
    )
    assert "Traceback" not in result.stdout.str() and "IndexError" not in result.stdout.str()


def test_a_worker_that_raises_on_every_message_fails_with_its_traceback(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        SCENARIO
        + """
def parse(message):
    raise ValueError(f"cannot parse {message['task_id']}")


def raising_worker(message, ctx):
    return parse(message)


@pytest.mark.crashpoints(points="AB", providers=["email"], mode="exhaustive")
def test_raises(crashpoints):
    crashpoints.run(worker=raising_worker, recover=reference_recovery, messages=[MESSAGE])
"""
    )
    result = run(pytester)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*worker-1 raised builtins.ValueError: cannot parse t-1 in the fault-free run*",
            "*in raising_worker",
            "*return parse(message)*",
            "*in parse",
            "*ValueError: cannot parse t-1",
        ]
    )
    # The user's frames, not the harness's.
    assert "child_main" not in out and "deliver_entry" not in out


def test_a_timeout_is_an_inconclusive_case_naming_the_slow_process(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        SCENARIO
        + """
import subprocess


def slow_worker(message, ctx):
    # A program that runs ten times the worker's timeout: the slowness under test. Real time
    # that no clock skips (a time.sleep of the worker's own would be skipped: nothing but
    # the worker could act during it).
    subprocess.run(["sleep", "5"], check=True)


@pytest.mark.crashpoints(points="A", providers=["email"], timeout=0.5)
def test_slow(crashpoints):
    crashpoints.run(worker=slow_worker, messages=[MESSAGE])
"""
    )
    result, tests = run_reported(pytester)
    result.assert_outcomes(failed=1)
    # Run again twice, with twice the deadline each time, before it counts as inconclusive.
    result.stdout.fnmatch_lines(
        [
            "crashpoints: inconclusive: worker-1 timed out after *s (timeout 2s*) and was killed*",
            "cases run again after a process timed out (a longer deadline each time): 1, "
            "0 of them then finished in time",
        ]
    )
    assert "violation(s) of invariant(s)" not in result.stdout.str()
    [test] = tests.values()
    assert test["verdict"] == "error" and test["error_origin"] == "timeout"
    assert test["failure"]["invariants"] == []  # never an invariant violation
    assert test["timeout_reruns"] == {"cases": 1, "finished": 0}


def test_a_request_beyond_the_simulated_world_is_an_error_of_origin_world(
    pytester: pytest.Pytester,
) -> None:
    """The agent is never blamed for what the simulator cannot do, whatever the test
    expected: the verdict is an error of origin ``world`` naming the request."""
    pytester.makepyfile(
        SCENARIO
        + """
def curious_worker(message, ctx):
    with ctx.client("email", message["task_id"]) as client:
        client.get("/v3/no_such_resources")
    return reference_worker(message, ctx)


@pytest.mark.crashpoints(points="B", providers=["email"], mode="exhaustive", expect=1)
def test_beyond(crashpoints):
    crashpoints.run(worker=curious_worker, recover=reference_recovery, messages=[MESSAGE])
"""
    )
    result, tests = run_reported(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "crashpoints: the world's limit: the fake email provider does not serve what "
            "worker-1 sent: GET /v3/no_such_resources: no such route*",
            "ERROR in *test_beyond (world): the world's limit: *",
        ]
    )
    assert "violation(s) of invariant(s)" not in result.stdout.str()
    [test] = tests.values()
    assert test["verdict"] == "error" and test["error_origin"] == "world"
    assert test["failure"]["invariants"] == []
    assert test["cases"] == 1  # the fault-free run stops there
    report = json.loads((pytester.path / "crashpoints-report.json").read_text())
    assert_follows_the_report_schema(report)


def test_a_case_slow_only_once_is_run_again_and_gets_its_verdict(
    pytester: pytest.Pytester,
) -> None:
    """A machine busy for a moment is no verdict: the case whose worker timed out runs
    again, with a longer deadline, and its verdict is the one that counts."""
    pytester.makepyfile(
        SCENARIO
        + """
import pathlib
import subprocess


def slow_once_worker(message, ctx):
    slowed = pathlib.Path(__file__).with_name("slowed")
    if not slowed.exists():  # the first run of the first case only
        slowed.touch()
        subprocess.run(["sleep", "3"], check=True)  # a real wait past the timeout
    return reference_worker(message, ctx)


@pytest.mark.crashpoints(points="B", providers=["email"], mode="exhaustive", timeout=1)
def test_slow_once(crashpoints):
    crashpoints.run(worker=slow_once_worker, recover=reference_recovery, messages=[MESSAGE])
"""
    )
    result, tests = run_reported(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "cases run again after a process timed out (a longer deadline each time): 1, "
            "1 of them then finished in time",
        ]
    )
    [test] = tests.values()
    assert test["verdict"] == "passed"
    assert test["timeout_reruns"] == {"cases": 1, "finished": 1}
    report = json.loads((pytester.path / "crashpoints-report.json").read_text())
    assert_follows_the_report_schema(report)


def test_the_marker_engine_wins_over_the_session_option(pytester: pytest.Pytester) -> None:
    """A worker whose durable state lives in a server asks for the processes engine; the
    session's ``--crashpoints-engine`` does not override it, and the others still follow it."""
    pytester.makepyfile(
        SCENARIO
        + GOOD.replace("{mode}", "exhaustive").replace(
            'max_examples=3)', 'max_examples=3, engine="processes")'
        )
        + GOOD.replace("{mode}", "exhaustive").replace("test_good", "test_default")
    )
    result, tests = run_reported(pytester, "--crashpoints-engine=compare")
    result.assert_outcomes(passed=2)
    engines = {name: test["engine"]["name"] for name, test in tests.items()}
    assert engines == {"test_good": "processes", "test_default": "compare"}


def test_jobs_reach_the_exhaustive_phase(pytester: pytest.Pytester) -> None:
    """``--crashpoints-jobs=2`` runs an exhaustive test's cases on two jobs (the report says
    so) with the verdict and cases of one job; ``1`` keeps one; a test marked
    ``engine="processes"`` (state outside its run directory) keeps one whatever it says."""
    pytester.makepyfile(
        SCENARIO
        + GOOD.replace("{mode}", "exhaustive")
        + GOOD.replace("{mode}", "exhaustive")
        .replace("test_good", "test_outside")
        .replace("max_examples=3)", 'max_examples=3, engine="processes")')
    )
    reports = {}
    for jobs in ("1", "2"):
        result, tests = run_reported(pytester, f"--crashpoints-jobs={jobs}")
        result.assert_outcomes(passed=2)
        for name, test in tests.items():
            reports[jobs, name] = test
    assert reports["2", "test_good"]["engine"]["jobs"] == 2
    assert "jobs" not in reports["1", "test_good"]["engine"]
    assert "jobs" not in reports["2", "test_outside"]["engine"]
    assert reports["1", "test_good"]["cases"] == reports["2", "test_good"]["cases"] > 1


def test_a_case_that_raises_once_under_hypothesis_shows_its_schedule(
    pytester: pytest.Pytester,
) -> None:
    """Hypothesis's own determinism check fires when a case raised and its replay did not:
    the report shows the first exception and the schedule that raised it, with a replay
    command, instead of "Hypothesis stopped the exploration" alone."""
    pytester.makepyfile(
        SCENARIO
        + """
seen = []


def view_that_fails_once(ctx):
    # Not in the first case that leaves work in flight (the harness runs it before Hypothesis
    # to learn what recovery reaches, and reads the view a few times in it): later, once.
    ledger = ctx.ledger
    if any(a.state is State.DISPATCHED for a in ledger.attempts()):
        seen.append(True)
        if len(seen) == 5:
            raise RuntimeError("a view that fails once")
    return ledger


@pytest.mark.crashpoints(points="B", providers=["email"], mode="hypothesis", max_examples=8)
def test_once(crashpoints):
    crashpoints.run(worker=reference_worker, recover=reference_recovery, messages=[MESSAGE],
                    ledger_view=view_that_fails_once)
"""
    )
    result, tests = run_reported(pytester, "--crashpoints-seed=3")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*a case raised RuntimeError: a view that fails once (schedule: *kill at B*; "
         "replay: pytest *--crashpoints-replay=*"]
    )
    [test] = tests.values()
    assert test["verdict"] == "error" and test["error_origin"] == "user code"
    assert "view_that_fails_once" in test["error_at"]
    assert test["error"].startswith("a case raised RuntimeError: a view that fails once")
    assert "Hypothesis then stopped the exploration" in test["error"]  # its own path
