"""A mailer that waits 31 s after a lost answer before it asks the lagging search again
(``patient_mailer.py``): one mail whatever the kill or the lost answer, with ``time.sleep``
and with ``asyncio.sleep``. The harness skips each wait and moves the case's clock by it, so
the search shows the mail and the case costs no 31 s of real time. The twin that asks at once
is caught in ``broken/test_patient_mailer.py``."""

from __future__ import annotations

import pytest

from scenarios.patient_mailer import handle, handle_async

JOB = {"task_id": "inv-31", "to": "ada@example.com", "subject": "Invoice 31",
       "body": "Due: 310 EUR"}


@pytest.mark.crashpoints(points="B", providers=["email"], mode="exhaustive",
                         strict_coverage=False)  # no ledger: the providers' journals only
def test_a_mailer_that_waits_out_the_lag_mails_once(crashpoints):
    report = crashpoints.run(worker=handle, messages=[JOB])
    assert report.waited.waits == 3 and report.waited.real == 0  # one per lost answer


@pytest.mark.crashpoints(points="B", providers=["email"], mode="exhaustive",
                         strict_coverage=False)
def test_the_async_mailer_that_waits_out_the_lag_mails_once(crashpoints):
    report = crashpoints.run(worker=handle_async, messages=[JOB])
    assert report.waited.waits == 3 and report.waited.real == 0
