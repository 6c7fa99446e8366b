"""``crashpoints.run(command=...)``: what it refuses, in one line each, before anything runs."""

from __future__ import annotations

import pytest

from .test_plugin import run


def test_bad_command_choices_fail_the_test_in_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        MESSAGES = [{"task_id": "t-1"}]
        mark = pytest.mark.crashpoints(providers=["email"])

        @mark
        def test_both(crashpoints):
            crashpoints.run(worker=lambda m, ctx: None, command=["true"], messages=MESSAGES)

        @mark
        def test_neither(crashpoints):
            crashpoints.run(messages=MESSAGES)

        @mark
        def test_empty(crashpoints):
            crashpoints.run(command=[], messages=MESSAGES)

        @mark
        def test_not_found(crashpoints):
            crashpoints.run(command=["no-such-program-here"], messages=MESSAGES)

        @mark
        def test_two_recoveries(crashpoints):
            crashpoints.run(command=["true"], recover=lambda ctx: None, recover_command=["true"],
                            messages=MESSAGES)

        @mark
        def test_not_json(crashpoints):
            crashpoints.run(command=["true"], messages=[{"task_id": "t-1", "at": object()}])
        """
    )
    result = run(pytester)
    result.assert_outcomes(failed=6)
    result.stdout.fnmatch_lines_random(
        [
            # (fnmatch: "[" is written "[[]")
            "*crashpoints: *test_both: pass worker= (a Python function) or command= *not both.",
            "*crashpoints: *test_neither: pass worker= * or command= *nothing to run.",
            "*crashpoints: *test_empty: command=[[]] is empty*",
            "*crashpoints: *test_not_found: command=[[]'no-such-program-here']: program "
            "'no-such-program-here' was not found*",
            "*crashpoints: *test_two_recoveries: pass recover= * or recover_command=*not both.",
            "*crashpoints: *test_not_json: message 0 (*) cannot be sent to a command as JSON*",
        ]
    )
    assert "Traceback" not in result.stdout.str()
