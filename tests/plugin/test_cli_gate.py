"""``crashpoints gate``, ``replay`` and ``show``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_crashpoints.cli import main
from tests.conftest import assert_follows_the_report_schema

SUITE = """
import pytest
from pytest_crashpoints import State, reference_recovery, reference_worker

MESSAGE = {"task_id": "t-1", "calls": [{"tool": "send_email", "key": "inv-7:send",
           "args": {"to": "a@example.com", "subject": "Invoice", "body": "100 EUR"}}]}


def blind_recovery(ctx):
    adapters = ctx.adapters()
    for attempt in ctx.ledger.attempts():
        if attempt.state is State.DISPATCHED:
            adapters[attempt.tool_name].dispatch(
                attempt.args, idempotency_key=attempt.idempotency_key,
                authority=attempt.authority,
            )
    ctx.recover()


@pytest.mark.crashpoints(points="AB", providers=["email"], mode="exhaustive")
def test_good(crashpoints):
    crashpoints.run(worker=reference_worker, recover=reference_recovery, messages=[MESSAGE])


@pytest.mark.crashpoints(points="B", providers=["email"], mode="exhaustive", expect={expect})
def test_broken(crashpoints):
    crashpoints.run(worker=reference_worker, recover=blind_recovery, messages=[MESSAGE])
"""


@pytest.fixture
def suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "crash").mkdir()
    return tmp_path / "crash"


def write(suite: Path, expect: str) -> None:
    (suite / "test_suite.py").write_text(SUITE.replace("{expect}", expect))


def gate(capfd: pytest.CaptureFixture[str], *pytest_args: str, exits: int) -> str:
    """Run ``crashpoints gate crash`` (pytest-randomly off, then ``pytest_args``), check that it
    exits with ``exits``: what it printed."""
    assert main(["gate", "crash", "--", "-p", "no:randomly", *pytest_args]) == exits
    return capfd.readouterr().out


def gate_report() -> dict[str, Any]:
    """The JSON report the gate wrote."""
    return json.loads(Path("crashpoints-report.json").read_text())


def test_gate_passes_good_and_caught_and_writes_every_report(
    suite: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    write(suite, "1")
    step_summary = suite.parent / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    out = gate(capfd, exits=0)
    assert "crash/test_suite.py::test_good    passed" in out
    assert "crash/test_suite.py::test_broken  caught   " in out
    assert "2 tests, " in out and "1 passed, 1 broken agents caught, 0 failed" in out
    assert "crashpoints gate: passed" in out
    document = gate_report()
    assert {t["nodeid"] for t in document["tests"]} == {
        "crash/test_suite.py::test_good",
        "crash/test_suite.py::test_broken",
    }
    assert "<testsuite" in Path("crashpoints-junit.xml").read_text()
    markdown = Path("crashpoints-summary.md").read_text()
    assert markdown.startswith("## crashpoints gate: passed")
    assert step_summary.read_text() == markdown
    page = Path("crashpoints-report.html").read_text()
    assert "<title>crashpoints report: passed, 2 crash test(s)</title>" in page
    assert "html: crashpoints-report.html" in out
    assert "crashpoints test_good:" not in out  # no live progress into a pipe


def test_gate_fails_on_a_violation_and_show_and_replay_explain_it(
    suite: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    write(suite, "()")  # the broken agent is not marked as expected: a real failure
    out = gate(capfd, exits=1)
    assert "crashpoints gate: FAILED" in out
    assert "### `crash/test_suite.py::test_broken`" in Path("crashpoints-summary.md").read_text()

    assert main(["show", "crashpoints-report.json"]) == 1
    shown = capfd.readouterr().out
    assert "minimal schedule: deliver message 0, kill at B (hit 1)" in shown
    assert "invariant 1 (no non-idempotent side effect happens twice)" in shown
    assert "worker-1 was killed at B (hit 1)" in shown
    [token] = [
        line.rpartition("--crashpoints-replay=")[2]
        for line in shown.splitlines()
        if line.startswith("replay: ")
    ]
    assert main(["replay", token, "--", "-p", "no:randomly"]) == 1
    assert "minimal schedule: deliver message 0, kill at B (hit 1)" in capfd.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["gate", "nowhere"], "crashpoints gate: error: no such path: nowhere"),
        (["show", "missing.json"], "no report at missing.json"),
        (["replay", "not-a-token"], "replay token 'not-a-token'… is damaged"),
    ],
)
def test_clear_errors(
    suite: Path, argv: list[str], message: str, capfd: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capfd.readouterr().err
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not a crashpoints report (not JSON"),
        ('{"version": 1}', "is JSON but not a crashpoints report"),
        ('{"version": 9, "tests": []}', "format version 9; this release reads version 1"),
        ('{"version": true, "tests": []}', "format version True; this release reads version 1"),
        (
            '{"version": 1, "seed": 1, "interrupted": false, "tests": [{"nodeid": "t.py::x"}]}',
            "is a damaged crashpoints report (tests[0] has no 'outcome')",
        ),
        (
            '{"version": 1, "seed": 1, "interrupted": false, "tests": [{"nodeid": "t",'
            ' "outcome": "failed", "verdict": "failed", "cases": "3", "coverage": {},'
            ' "failure": null}]}',
            "(tests[0].cases is '3', not an integer)",
        ),
        (
            '{"version": 1, "seed": 1, "interrupted": false, "tests": [{"nodeid": "t",'
            ' "outcome": "failed", "verdict": "failed", "cases": 1, "coverage": {},'
            ' "failure": {"schedule_text": 3}}]}',
            "(tests[0].failure has no 'schedule')",
        ),
        (
            '{"version": 1, "seed": 1, "interrupted": false, "tests": [{"nodeid": "t",'
            ' "outcome": "passed", "verdict": "fine", "cases": 1, "coverage": {"A": {}},'
            ' "failure": null}]}',
            "(tests[0].verdict is 'fine', not one of 'passed', 'failed', 'caught', 'error')",
        ),
        (
            '{"version": 1, "seed": 1, "interrupted": false, "tests": [{"nodeid": "t",'
            ' "outcome": "passed", "verdict": "passed", "cases": 1, "coverage": {"A": 2},'
            ' "failure": null}]}',
            "(tests[0].coverage['A'] is 2, not an object)",
        ),
        (
            '{"version": 1, "seed": -1, "interrupted": false, "tests": []}',
            "(seed is -1, less than 0)",
        ),
        (
            '{"version": 1, "seed": 1, "interrupted": false, "tests": [{"nodeid": "t",'
            ' "outcome": "failed", "verdict": "failed", "cases": 1, "coverage": {},'
            ' "failure": "boom"}]}',
            "(tests[0].failure is 'boom', not null or an object)",
        ),
        pytest.param(
            "[" * 200_000 + "]" * 200_000,
            "is not a crashpoints report (nested too deep)",
            id="nested-200000-deep",
        ),
        pytest.param(
            '{"version": 1, "seed": ' + "9" * 5_000 + "}",
            "is not a crashpoints report (Exceeds",
            id="a-number-of-5000-digits",
        ),
    ],
)
def test_show_refuses_what_is_not_a_report(
    suite: Path, content: str, message: str, capfd: pytest.CaptureFixture[str]
) -> None:
    Path("report.json").write_text(content)
    assert main(["show", "report.json"]) == 2
    err = capfd.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_gate_without_crash_tests_is_an_error(
    suite: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (suite / "test_plain.py").write_text("def test_plain():\n    pass\n")
    assert main(["gate", "crash"]) == 2
    assert "no crash tests ran" in capfd.readouterr().err
    # No report file at all: not the JSON, the JUnit XML, the Markdown, nor a partial one.
    assert list(suite.parent.glob("crashpoints-*")) == []


def test_a_collection_error_is_an_error_not_an_interruption(
    suite: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (suite / "test_broken_import.py").write_text("import no_such_module_here\n")
    assert main(["gate", "crash"]) == 2
    err = capfd.readouterr().err
    assert "crashpoints gate: error: pytest stopped (exit 2) before any crash test ran: an " in err
    assert "interrupted" not in err
    assert list(suite.parent.glob("crashpoints-*")) == []


def test_gate_without_paths_runs_what_pytest_collects_here(
    suite: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (suite / "test_plain.py").write_text("def test_plain():\n    pass\n")
    assert main(["gate"]) == 2
    err = capfd.readouterr().err
    assert "no such path" not in err  # there is no default folder a wheel lacks
    # pytest ran, and found the plain test under the current folder (exit 0), but no crash test.
    assert f"no crash tests ran under {Path.cwd()} (pytest's testpaths" in err
    assert "(pytest exit 0)" in err


DIES = """

@pytest.mark.crashpoints(points="A", providers=["email"])
def test_dies(crashpoints):
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)  # the xdist worker running it dies hard
"""


def test_a_test_whose_xdist_worker_crashed_is_listed_as_an_error(
    suite: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (suite / "test_suite.py").write_text(SUITE.replace("{expect}", "1") + DIES)
    out = gate(capfd, "-n", "2", exits=1)
    assert "crash/test_suite.py::test_dies    error    0" in out
    assert "1 passed, 1 broken agents caught, 0 failed, 1 error(s)" in out
    assert "crashpoints gate: FAILED" in out
    document = gate_report()
    assert_follows_the_report_schema(document)  # the died test, a caught one, a passed one
    [died] = [t for t in document["tests"] if t["nodeid"].endswith("::test_dies")]
    assert died["verdict"] == "error" and "crashed while running" in died["error"]
    assert died["error_origin"] == "harness"
    assert "crashed while running" in Path("crashpoints-summary.md").read_text()
    assert main(["show", "crashpoints-report.json"]) == 1
    assert "crashed while running 'crash/test_suite.py::test_dies'" in capfd.readouterr().out


def test_a_pytest_option_before_the_double_dash_says_where_it_goes(
    suite: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["gate", "crash", "-p", "no:cacheprovider"])
    assert exited.value.code == 2
    err = capfd.readouterr().err
    assert (
        "unrecognized arguments: -p no:cacheprovider; pytest's own options go after --: "
        "crashpoints gate ... -- -p no:cacheprovider" in err
    )
    assert list(suite.parent.glob("crashpoints-*")) == []


RAISES = """
import httpx, pytest

def worker(message, ctx):
    httpx.post(ctx.base_url("email") + "/v3/mail/send",
               headers={"Authorization": f"Bearer {ctx.api_key('email', message['task_id'])}"},
               json={"personalizations": [{"to": [{"email": "a@example.com"}]}],
                     "from": {"email": "b@example.com"}, "subject": "s",
                     "content": [{"type": "text/plain", "value": "v"}]}).raise_for_status()

def view(ctx):
    raise RuntimeError("the view could not be built")

@pytest.mark.crashpoints(points="B", providers=["email"], mode="exhaustive")
def test_view_raises(crashpoints):
    crashpoints.run(worker=worker, messages=[{"task_id": "t-1"}], ledger_view=view)

@pytest.mark.crashpoints(points="B", providers=["email"], mode="exhaustive")
def test_plain(crashpoints):
    crashpoints.run(worker=worker, messages=[{"task_id": "t-1"}])

@pytest.mark.crashpoints(points="B", providers=["email"], nonsense=1)
def test_bad_marker(crashpoints):
    crashpoints.run(worker=worker, messages=[{"task_id": "t-1"}])

@pytest.mark.crashpoints(points="B", providers=["email"])
def test_never_runs(crashpoints):
    pass
"""


def test_a_crash_test_that_raises_is_in_every_report_as_an_error(
    suite: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (suite / "test_suite.py").write_text(RAISES)
    out = gate(capfd, exits=1)
    document = gate_report()
    assert_follows_the_report_schema(document)
    tests = {t["nodeid"].rpartition("::")[2]: t for t in document["tests"]}
    assert sorted(tests) == ["test_bad_marker", "test_never_runs", "test_plain", "test_view_raises"]
    assert tests["test_plain"]["verdict"] == "failed"  # a send-then-nothing mailer, caught at B
    raised = tests["test_view_raises"]
    assert raised["verdict"] == "error"
    assert raised["error"] == "RuntimeError: the view could not be built"
    assert raised["error_origin"] == "user code"
    assert raised["error_at"].endswith("test_suite.py:12 in view")
    bad = tests["test_bad_marker"]
    assert bad["verdict"] == "error" and bad["error_phase"] == "setup"
    assert "nonsense" in bad["error"] and bad["error_origin"] == "user code"
    never = tests["test_never_runs"]
    assert never["verdict"] == "error" and "never called crashpoints.run" in never["error"]
    # The gate's table, the Markdown summary and the HTML page count and name each one.
    assert "0 passed, 0 broken agents caught, 1 failed, 3 error(s)" in out
    assert "error in user code at " in out and "RuntimeError: the view could not be built" in out
    assert "crashpoints gate: FAILED" in out
    markdown = Path("crashpoints-summary.md").read_text()
    assert "3 error(s)" in markdown and "the view could not be built" in markdown
    page = Path("crashpoints-report.html").read_text()
    assert page.count("v-error") >= 3 and "the view could not be built" in page
    assert main(["show", "crashpoints-report.json"]) == 1
    assert "the view could not be built" in capfd.readouterr().out


HARNESS_DIES = """
import pytest

def clobbering_worker(message, ctx):
    # Destroys the provider's journal under the harness: the harness itself then fails
    # inside (as a torn crash-state copy once made it fail), not the user's code.
    journal = ctx.env.path / "journals" / "email.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        path = journal.with_name(journal.name + suffix)
        if path.exists():
            path.write_bytes(b"this is not a database" * 512)

@pytest.mark.crashpoints(points="A", providers=["email"], mode="exhaustive", engine="processes")
def test_harness_dies(crashpoints):
    crashpoints.run(worker=clobbering_worker, messages=[{"task_id": "t-1"}])
"""


def test_an_error_inside_the_harness_is_told_from_the_users(
    suite: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (suite / "test_suite.py").write_text(HARNESS_DIES)
    out = gate(capfd, exits=1)
    [test] = gate_report()["tests"]
    assert test["verdict"] == "error", test
    assert test["error_origin"] == "harness" and "fake_providers" in test["error_at"]
    assert "DatabaseError" in test["error"]
    assert "error in harness at fake_providers" in out


def test_a_symlink_at_a_report_name_leaves_its_target_untouched(
    suite: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Someone who can write to the folder plants links at the reports' names, final and
    temporary (the names earlier releases used): the gate writes through none of them."""
    write(suite, "1")
    victims = suite.parent / "victims"
    victims.mkdir()
    names = [
        "crashpoints-report.json", "crashpoints-junit.xml", "crashpoints-summary.md",
        "crashpoints-report.html", "crashpoints-summary.md.partial",
        "crashpoints-junit.xml.new", "crashpoints-report.json.new",
        "crashpoints-report.html.partial",
    ]
    for name in names:
        victim = victims / name
        victim.write_text("precious")
        Path(name).symlink_to(victim)
    assert main(["gate", "crash", "--", "-p", "no:randomly"]) == 0
    err = capfd.readouterr().err
    assert "crashpoints-report.json was a symbolic link" in err
    assert all((victims / name).read_text() == "precious" for name in names)
    for name in names[:4]:  # the reports: written, as files of their own
        assert not Path(name).is_symlink() and Path(name).stat().st_size > 0
    gate_report()


HOSTILE = r'''
import pytest
from pytest_crashpoints import crashpoint, reference_recovery, reference_worker

MESSAGE = {"task_id": "t-1", "calls": [{"tool": "send_email", "key": "inv-7:send",
           "args": {"to": "a@example.com", "subject": "Invoice", "body": "100 EUR"}}]}
NAME = "<img src=x onerror=alert(1)>\r\x1b[2Kcrashpoints gate: passed|`"


def worker(message, ctx):
    crashpoint(NAME)
    return reference_worker(message, ctx)


@pytest.mark.crashpoints(points="B", providers=["email"], mode="exhaustive")
def test_hostile(crashpoints):
    crashpoints.run(worker=worker, recover=reference_recovery, messages=[MESSAGE])
'''


def test_what_the_agent_names_is_printed_escaped(
    suite: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A fail point name with a carriage return, an escape sequence, a tag and Markdown's own
    characters: no control character reaches the terminal, no markup the summary."""
    (suite / "test_suite.py").write_text(HOSTILE)
    out = gate(capfd, exits=0)
    table = out[out.index("test  ") :]  # the gate's own table and lines
    assert "\r" not in table and "\x1b" not in table
    assert "\\r\\x1b[2Kcrashpoints gate: passed" in table
    markdown = Path("crashpoints-summary.md").read_text()
    assert "<img" not in markdown and "&lt;img src=x onerror=alert\\(1\\)&gt;" in markdown
    assert "\r" not in markdown and "\x1b" not in markdown
    assert main(["show", "crashpoints-report.json"]) == 0
    shown = capfd.readouterr().out
    assert "\r" not in shown and "\x1b" not in shown
