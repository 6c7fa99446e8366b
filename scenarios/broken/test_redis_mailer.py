"""The Redis mailer (``scenarios/redis_mailer.py``) on Redis as it comes (RDB snapshots, no
append-only file): its ``pending`` mark is in Redis's memory, not in a snapshot, when the mail
goes out. The power goes after the send (B): Redis is restarted on its last snapshot, the job
is gone, the message comes back and the mail is sent again. Caught by invariant 1 from the
email provider's own journal. Its twin on a Redis that syncs each write passes
(``scenarios/test_redis_mailer.py``)."""

import pytest

from scenarios.test_redis_mailer import JOB, jobs, needs_redis, worker


@needs_redis
@pytest.mark.crashpoints(points="B", providers=["email"], mode="exhaustive", expect=1,
                         strict_coverage=False)
def test_a_pending_mark_lost_to_a_restart_from_the_snapshot_is_sent_again(crashpoints):
    report = crashpoints.run(worker=worker, messages=[JOB], ledger_view=jobs, redis=True)
    assert "power lost" in str(report.failure.schedule)
