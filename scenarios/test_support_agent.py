"""The support agent (``support_agent.py``): a scripted model decides a refund and an e-mail,
the openai SDK's tool loop runs them, the reference ledger keeps them safe. One refund and one
e-mail whatever the crash: a kill after the model chose (``model.tool_call``), at A, B or C of
either tool, a second delivery, a lost or refused answer of the model or of a provider, and a
model that picks another amount when it is asked again.

The broken variants are in ``broken/test_support_agent.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

pytest.importorskip("openai", reason="the openai SDK is an agents extra: pip install -e .[agents]")

from scenarios.support_agent import (  # noqa: E402
    TICKET,
    create_charge,
    handle_ticket,
    recover,
    support_script,
)

if TYPE_CHECKING:
    from pytest_crashpoints import CrashpointsFixture


@pytest.mark.crashpoints(
    points=["A", "B", "C", "D", "model.tool_call"],
    providers=["model", "payments", "email"],
    mode="exhaustive",
    max_faults=1,
)
def test_one_refund_and_one_email(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=handle_ticket,
        recover=recover,
        messages=[TICKET],
        model=support_script(reask_amount=2000),
        setup=create_charge,
    )
