"""API keys: which credentials exist, whose tenant they act for, and what they may do.

The harness configures keys; a provider derives tenant and credential scope of every request from
the key it presents. Keys live in the provider's journal, so the harness can revoke or narrow a key
between steps while a forked worker holds the provider (crash point E).

Scopes are plain strings, ``"<provider>:read"`` and ``"<provider>:write"`` (``payments``,
``email``, ``tickets``, ``deploy``). A ``write`` scope covers the ``read`` scope of the same
provider; ``"*"`` covers everything.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from ._journal import Journal

__all__ = ["ApiKey", "Keys", "covers"]


@dataclass(frozen=True)
class ApiKey:
    """One credential: its ``secret`` (what the client sends), its tenant and its scopes.

    ``key_id`` names the key in the journal (the secret itself is never recorded there); it
    defaults to a short hash of the secret.
    """

    secret: str
    tenant_id: str
    scopes: frozenset[str]
    key_id: str = field(default="")

    def __post_init__(self) -> None:
        if not self.secret or not isinstance(self.secret, str):
            raise ValueError(f"ApiKey secret must be a non-empty string, not {self.secret!r}.")
        if not self.tenant_id:
            raise ValueError(
                f"ApiKey {self.secret[:4]}…: tenant_id must be a non-empty string; every key "
                "acts for exactly one tenant."
            )
        if isinstance(self.scopes, str):  # type: ignore[unreachable]
            raise ValueError(
                f"ApiKey scopes must be a collection of strings, not the string {self.scopes!r}; "
                f"write scopes=frozenset({{{self.scopes!r}}})."
            )
        object.__setattr__(self, "scopes", frozenset(self.scopes))
        if not self.key_id:
            digest = hashlib.sha256(self.secret.encode("utf-8")).hexdigest()[:10]
            object.__setattr__(self, "key_id", f"key_{digest}")


def covers(scopes: Iterable[str], required: str) -> bool:
    """True when a key with ``scopes`` may perform an operation that needs ``required``."""
    granted = set(scopes)
    if "*" in granted or required in granted:
        return True
    provider, _, access = required.partition(":")
    return access == "read" and f"{provider}:write" in granted


class Keys:
    """The keys a provider accepts; changes take effect on the next request, in every process."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal

    def add(self, *keys: ApiKey) -> None:
        """Accept these keys (replacing tenant and scopes of a key with the same secret)."""
        with self._journal.transaction() as conn:
            for key in keys:
                conn.execute(
                    "INSERT INTO keys(secret, key_id, tenant_id, scopes, revoked) "
                    "VALUES (?, ?, ?, ?, 0) ON CONFLICT(secret) DO UPDATE SET "
                    "key_id=excluded.key_id, tenant_id=excluded.tenant_id, "
                    "scopes=excluded.scopes, revoked=0",
                    (key.secret, key.key_id, key.tenant_id, json.dumps(sorted(key.scopes))),
                )

    def revoke(self, secret: str) -> None:
        """Refuse this key from now on (401), as a provider does with a revoked credential."""
        with self._journal.transaction() as conn:
            cur = conn.execute("UPDATE keys SET revoked=1 WHERE secret=?", (secret,))
            if cur.rowcount == 0:
                raise KeyError(
                    f"no key {secret[:4]}… is configured on this provider; add it with "
                    "provider.keys.add(ApiKey(...)) before revoking it."
                )

    def find(self, secret: str | None) -> ApiKey | None:
        """The active key with this secret, or None if it is unknown or revoked."""
        if not secret:
            return None
        with self._journal.connection() as conn:
            row = conn.execute(
                "SELECT key_id, tenant_id, scopes FROM keys WHERE secret=? AND revoked=0",
                (secret,),
            ).fetchone()
        if row is None:
            return None
        return ApiKey(secret, row[1], frozenset(json.loads(row[2])), key_id=row[0])

    def presented(self, secret: str | None) -> ApiKey | None:
        """The key with this secret, revoked or not (for the journal: a refused request is
        still recorded under the tenant and scopes of the key it presented)."""
        if not secret:
            return None
        with self._journal.connection() as conn:
            row = conn.execute(
                "SELECT key_id, tenant_id, scopes FROM keys WHERE secret=?", (secret,)
            ).fetchone()
        if row is None:
            return None
        return ApiKey(secret, row[1], frozenset(json.loads(row[2])), key_id=row[0])

    def active(self) -> list[ApiKey]:
        """Every key that is accepted now."""
        with self._journal.connection() as conn:
            rows = conn.execute(
                "SELECT secret, key_id, tenant_id, scopes FROM keys WHERE revoked=0 ORDER BY secret"
            ).fetchall()
        return [ApiKey(r[0], r[2], frozenset(json.loads(r[3])), key_id=r[1]) for r in rows]
