"""``crashpoints.run(redis=...)``: what it refuses, in one line each, before anything runs;
and where ``redis-server`` is missing, what to install."""

from __future__ import annotations

import pytest

from .test_plugin import run


def test_a_redis_the_harness_cannot_run_fails_the_test_in_one_line(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import pytest

        MESSAGES = [{"task_id": "t-1"}]
        mark = pytest.mark.crashpoints(providers=["email"])

        @mark
        def test_not_a_config(crashpoints):
            crashpoints.run(worker=lambda m, ctx: None, messages=MESSAGES, redis="yes")

        @mark
        def test_the_harness_s_directive(crashpoints):
            crashpoints.run(worker=lambda m, ctx: None, messages=MESSAGES,
                            redis={"port": 6379})

        @mark
        def test_no_redis_server(crashpoints, monkeypatch):
            monkeypatch.setenv("PATH", "")
            crashpoints.run(worker=lambda m, ctx: None, messages=MESSAGES, redis=True)
        """
    )
    result = run(pytester)
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines_random(
        [
            "*crashpoints: *test_not_a_config: redis='yes' is not a Redis configuration; "
            "pass redis=True*",
            "*crashpoints: *test_the_harness_s_directive: redis={'port': ...}: the harness "
            "sets 'port' itself*",
            "*crashpoints: *test_no_redis_server: redis= needs redis-server, which is not on "
            "PATH; install it*",
        ]
    )
    assert "Traceback" not in result.stdout.str()
