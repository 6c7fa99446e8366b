"""The incident responder with its two classic bugs put back (``scenarios/ticket_opener.py``).

- PyGithub's default ``GithubRetry`` re-POSTs a create when GitHub's answer is lost (a 502
  from a gateway, a dropped connection): the worker is never killed, yet two issues open.
- Check-then-act: the responder asks "is the issue open already?" and then opens it. A second
  delivery of the incident while the first waits between its question and its create (at A,
  which the harness places before the create) gets the same "no": two issues.

Both are caught by invariant 1 from the tickets provider's own journal: the fault-free run
opens one issue, these runs two. The fixed responder passes (``../test_ticket_opener.py``).
"""

import pytest

pytest.importorskip("github", reason="PyGithub is a dev dependency: pip install --group dev")

from scenarios.test_ticket_opener import INCIDENT, incidents, responder


@pytest.mark.crashpoints(
    points="B", faults=["lose_response"], providers=["tickets"], mode="exhaustive",
    max_faults=1, expect=1,
)
def test_sdk_retries_a_post_whose_answer_was_lost(crashpoints):
    # Only lost answers, no kill: the worker lives, and its SDK's retry alone opens two.
    crashpoints.run(
        worker=responder(sdk_retries=True), messages=[INCIDENT], ledger_view=incidents
    )


@pytest.mark.crashpoints(
    points="D", providers=["tickets"], mode="exhaustive", max_faults=1, expect=1
)
def test_check_then_act_opens_it_twice(crashpoints):
    crashpoints.run(
        worker=responder(claims_first=False), messages=[INCIDENT], ledger_view=incidents
    )
