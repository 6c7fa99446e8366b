"""In-memory stand-ins shared by the ledger, tool-call and recovery tests, and the authority
and arguments of the e-mail their tool calls send."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from pytest_crashpoints import Absent, Attempt, Authority, Found, Ledger, Receipt, State, args_hash
from pytest_crashpoints.ledger import JSONValue, LookupResult

#: The authority a task of tenant-7 sends its e-mail under.
AUTH = Authority.of(tenant_id="tenant-7", credential_scope="email:send", policy_version="p1")
#: The arguments of that e-mail.
ARGS = {"to": "a@example.com", "invoice": "inv-7"}


@dataclasses.dataclass
class FakeMailer:
    """An in-memory provider and adapter; `sent` is its journal."""

    ledger_path: Path
    idempotent: bool = False
    has_lookup: bool = True
    tool_name: str = "send_email"
    durable: bool = False
    fail_with: BaseException | None = None
    lookup_answer: LookupResult | None = None
    sent: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    state_seen_at_dispatch: list[State] = dataclasses.field(default_factory=list)

    def dispatch(
        self, args: Mapping[str, JSONValue], *, idempotency_key: str, authority: Authority
    ) -> Receipt:
        # What another process would read at the moment the request leaves.
        observer = Ledger(self.ledger_path)
        attempt = observer.find(idempotency_key)
        observer.close()
        assert attempt is not None
        self.state_seen_at_dispatch.append(attempt.state)
        if self.fail_with is not None:
            raise self.fail_with
        self.sent.append((idempotency_key, args_hash(args)))
        return Receipt(
            request_id=f"req_{len(self.sent)}",
            result_ref=f"msg_{len(self.sent)}",
            durable=self.durable,
            payload_hash=args_hash(args) if self.durable else None,
        )

    def lookup(self, attempt: Attempt) -> LookupResult:
        if self.lookup_answer is not None:
            return self.lookup_answer
        for key, digest in self.sent:
            if key == attempt.idempotency_key:
                return Found(payload_hash=digest, result_ref=f"msg-of-{key}")
        return Absent()
