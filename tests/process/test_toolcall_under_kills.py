"""The safe-order call killed at C, with the provider's record outliving the worker."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

from pytest_crashpoints import Authority, Found, Ledger, Receipt, State, recover
from pytest_crashpoints._inject.failpoints import Fault, Kill
from pytest_crashpoints._process.outcome import Killed
from pytest_crashpoints._process.worker import run_worker
from pytest_crashpoints.harness import CRASH_POINTS
from pytest_crashpoints.ledger import JSONValue
from tests.conftest import ManualClock
from tests.fakes import FakeMailer
from tests.unit.test_toolcall import call, states


@dataclasses.dataclass
class JournaledMailer(FakeMailer):
    """A FakeMailer whose journal is also a file, so the provider's record outlives a killed
    worker."""

    journal: Path | None = None

    def dispatch(
        self, args: Mapping[str, JSONValue], *, idempotency_key: str, authority: Authority
    ) -> Receipt:
        receipt = super().dispatch(args, idempotency_key=idempotency_key, authority=authority)
        assert self.journal is not None
        self.journal.write_text(json.dumps(self.sent))
        return receipt


def test_killed_at_c_after_a_durable_receipt_recovery_confirms_it(
    ledger: Ledger, clock: ManualClock, tmp_path: Path
) -> None:
    journal = tmp_path / "provider-journal.json"
    worker = JournaledMailer(ledger.path, durable=True, journal=journal)
    outcome = run_worker(call, args=(ledger, worker), faults=[Fault("C", Kill())])
    assert isinstance(outcome, Killed)
    assert [h.point for h in outcome.hits if h.point in CRASH_POINTS] == ["A", "B", "C"]
    # The response (with its request id) arrived; nothing of it reached the ledger.
    (left,) = ledger.attempts()
    assert (left.state, left.provider_request_id, left.result_ref) == (
        State.DISPATCHED,
        None,
        None,
    )
    assert states(ledger, left) == [State.INTENT_RECORDED, State.DISPATCHED]

    sent = [(key, digest) for key, digest in json.loads(journal.read_text())]
    provider = FakeMailer(ledger.path, durable=True, sent=sent)
    provider.lookup_answer = Found(
        payload_hash=left.args_hash, result_ref="msg_1", request_id="req_1"
    )
    clock.advance(61)  # the dead worker's lease ran out
    actions = recover(ledger, {"send_email": provider}, owner="recovery-1")
    assert [(a.from_state, a.to_state) for a in actions] == [
        (State.DISPATCHED, State.OUTCOME_CONFIRMED)
    ]
    done = ledger.get(left.attempt_id)
    assert (done.provider_request_id, done.result_ref) == ("req_1", "msg_1")
    assert len(provider.sent) == 1
