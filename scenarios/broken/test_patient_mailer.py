"""The mailer of ``scenarios/patient_mailer.py`` that asks the search at once after a lost
answer: the search lags 30 s behind the send, shows nothing, and the mail goes twice. Caught
by invariant 1 from the e-mail provider's own journal, with ``time.sleep`` and
``asyncio.sleep`` alike."""

import functools

import pytest

from scenarios.patient_mailer import handle, handle_async
from scenarios.test_patient_mailer import JOB


@pytest.mark.crashpoints(points="B", faults=["lose_response"], providers=["email"],
                         mode="exhaustive", expect=1, strict_coverage=False)
def test_a_mailer_that_looks_at_once_mails_twice(crashpoints):
    report = crashpoints.run(worker=functools.partial(handle, look_after=0), messages=[JOB])
    assert "the answer is lost" in str(report.failure.schedule)


@pytest.mark.crashpoints(points="B", faults=["lose_response"], providers=["email"],
                         mode="exhaustive", expect=1, strict_coverage=False)
def test_the_async_mailer_that_looks_at_once_mails_twice(crashpoints):
    report = crashpoints.run(worker=functools.partial(handle_async, look_after=0),
                             messages=[JOB])
    assert "the answer is lost" in str(report.failure.schedule)
