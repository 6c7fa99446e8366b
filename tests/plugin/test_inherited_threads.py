"""A worker does not inherit a thread pool without its threads: a pool that an earlier crash
test's ``setup`` started in the pytest process (a library's module-level
``ThreadPoolExecutor``, as agent-runloop's ``agent_loop.sqlite_io``) is copied by the fork
that makes the next test's fork server, without its thread; the pool counted it as idle and
never ran what a worker submitted, so the second test's correct agent timed out. The fork
server makes such pools start afresh (``_process/forked_pools.py``)."""

from __future__ import annotations

import pytest

TESTS = """
import concurrent.futures

import httpx
import pytest

POOL = concurrent.futures.ThreadPoolExecutor(max_workers=1)   # a library's, module-level


def setup(ctx):
    POOL.submit(lambda: None).result()        # the harness process starts the pool's thread


def worker(message, ctx):
    POOL.submit(lambda: None).result(timeout=5)
    httpx.post(f"{ctx.base_url('email')}/v3/mail/send",
               headers={"Authorization": f"Bearer {ctx.api_key('email', message['task_id'])}"},
               json={"personalizations": [{"to": [{"email": "ada@example.com"}]}],
                     "from": {"email": "b@example.com"}, "subject": "Hi",
                     "content": [{"type": "text/plain", "value": "Hi"}]}).raise_for_status()


@pytest.mark.crashpoints(points="B", faults=["kill"], providers=["email"], mode="exhaustive",
                         expect=1, strict_coverage=False)
def test_first(crashpoints):
    crashpoints.run(worker=worker, messages=[{"task_id": "t-1"}], setup=setup)


@pytest.mark.crashpoints(points="B", faults=["kill"], providers=["email"], mode="exhaustive",
                         expect=1, strict_coverage=False)
def test_second(crashpoints):
    crashpoints.run(worker=worker, messages=[{"task_id": "t-1"}], setup=setup)
"""


def test_a_setup_leaves_nothing_the_next_tests_workers_inherit(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_pool=TESTS)
    result = pytester.runpytest_subprocess("-p", "crashpoints", "-p", "no:randomly",
                                           "--crashpoints-timeout=30")
    result.assert_outcomes(passed=2)


def test_the_first_test_of_a_process_is_not_affected(pytester: pytest.Pytester) -> None:
    # The same file, the second test alone: caught as the send-then-die it is.
    pytester.makepyfile(test_pool=TESTS)
    result = pytester.runpytest_subprocess("-p", "crashpoints", "-p", "no:randomly",
                                           "--crashpoints-timeout=30", "-k", "second")
    result.assert_outcomes(passed=1, deselected=1)
