"""An agent that looks "already done?" up and then acts, with nothing durable of its own: two
deliveries at once must meet between the look and the act. The harness places ``http.write``
before every write; a first delivery waits there (or at the C of its lookup's answer, which
fires there) while the second runs."""

from __future__ import annotations

import pytest

from tests.conftest import run_reported

AGENT = '''
import httpx
import pytest
from fake_providers import HttpApi

CRM = HttpApi.recording("crm")
TASK = {"task_id": "call-88", "customer": "cus_12", "summary": "Wants the annual plan."}


def look_then_add(task, ctx):
    auth = {"Authorization": f"Bearer {ctx.api_key('crm', task['task_id'])}"}
    notes = f"{ctx.base_url('crm')}/v2/customers/{task['customer']}/notes"
    found = httpx.get(notes, headers=auth, params={"source": task["task_id"]})
    found.raise_for_status()
    if found.json():
        return found.json()[0]["id"]
    note = {"text": task["summary"], "source": task["task_id"]}
    added = httpx.post(notes, headers=auth, json=note)
    added.raise_for_status()
    return added.json()["id"]


def blind_add(task, ctx):
    auth = {"Authorization": f"Bearer {ctx.api_key('crm', task['task_id'])}"}
    notes = f"{ctx.base_url('crm')}/v2/customers/{task['customer']}/notes"
    httpx.post(notes, headers=auth, json={"text": task["summary"]}).raise_for_status()


@pytest.mark.crashpoints(points="D", providers=[CRM], mode="exhaustive")
def test_look_then_add(crashpoints):
    crashpoints.run(worker=look_then_add, messages=[TASK])


@pytest.mark.crashpoints(points="BC", providers=[CRM], mode="exhaustive")
def test_look_then_add_survives_kills(crashpoints):
    crashpoints.run(worker=look_then_add, messages=[TASK])
'''


def test_check_then_act_without_a_claim_is_caught_by_two_deliveries_at_once(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_crm=AGENT)
    result, tests = run_reported(pytester)
    result.assert_outcomes(passed=1, failed=1)
    raced = tests["test_look_then_add"]
    assert raced["verdict"] == "failed" and raced["failure"]["invariants"] == [1]
    assert "to a second worker while the first waits at" in raced["failure"]["schedule_text"]
    assert raced["coverage"]["http.write"]["reached"]
    assert tests["test_look_then_add_survives_kills"]["verdict"] == "passed"
