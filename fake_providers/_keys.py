"""API keys: which credentials exist, whose tenant they act for, and what they may do.

The harness configures keys; a provider derives tenant and credential scope of every request from
the key it presents. Keys live in the provider's journal, so the harness can revoke or narrow a key
between steps while a forked worker holds the provider (crash point E).

Scopes are plain strings, ``"<provider>:read"`` and ``"<provider>:write"`` (``payments``,
``email``, ``tickets``, ``deploy``). A ``write`` scope covers the ``read`` scope of the same
provider; ``"*"`` covers everything.

Derived keys name the process that sends a request without anything being written per process.
The harness sets one signing secret in every provider of a case
(``keys.set_signing_secret(...)``) and hands each process its own credential,
``derive_key(base_secret, label, signing_secret=...)``: ``"<base>~<label>~<mac>"``, where the mac
is the first 16 hex digits of HMAC-SHA256 over ``"<base>\\x00<label>"`` keyed with the signing
secret. A provider accepts a derived key whose mac verifies and whose base key is active, as the
base key (same tenant and scopes), and journals its label with the request: the label comes from
the credential, which the process cannot forge, not from anything in the payload. A wrong mac, an
unknown base key or a journal without a signing secret make it an unknown key (401); revoking the
base key refuses every key derived from it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field

from ._journal import Journal

__all__ = ["ApiKey", "Keys", "covers", "derive_key", "derived_label"]

_LABEL = re.compile(r"[A-Za-z0-9_.-]{1,80}")
_MAC = re.compile(r"[0-9a-f]{16}")
_SIGNING_SECRET = "signing_secret"


def _check_label(label: object) -> str:
    if not isinstance(label, str) or not _LABEL.fullmatch(label):
        raise ValueError(
            f"a key label must be 1 to 80 characters of A-Z, a-z, 0-9, '_', '.' and '-', not "
            f"{label!r}; name the process with such a label (e.g. 'worker-3' or 'recovery.1')."
        )
    return label


def _mac(base_secret: str, label: str, signing_secret: str) -> str:
    message = f"{base_secret}\x00{label}".encode()
    return hmac.new(signing_secret.encode(), message, "sha256").hexdigest()[:16]


def derive_key(base_secret: str, label: str, *, signing_secret: str) -> str:
    """The secret of the key derived from ``base_secret`` for ``label``.

    Returns ``f"{base_secret}~{label}~{mac}"``, where ``mac`` is the first 16 hex digits of
    HMAC-SHA256 over ``f"{base_secret}\\x00{label}"`` keyed with ``signing_secret``. A provider
    whose journal holds the same signing secret (``keys.set_signing_secret``) accepts it as the
    base key and journals ``label`` with every request that presents it.

    Raises ValueError if ``label`` is not 1 to 80 characters of ``[A-Za-z0-9_.-]``, or if
    ``base_secret`` or ``signing_secret`` is empty.
    """
    if not isinstance(base_secret, str) or not base_secret:
        raise ValueError(f"derive_key needs a base key secret (a non-empty string), not "
                         f"{base_secret!r}.")
    _check_label(label)
    if not isinstance(signing_secret, str) or not signing_secret:
        raise ValueError(
            "derive_key needs the signing secret the providers hold (a non-empty string); set "
            "it with provider.keys.set_signing_secret(...) and derive keys with the same one."
        )
    return f"{base_secret}~{label}~{_mac(base_secret, label, signing_secret)}"


def derived_label(secret: str | None, *, signing_secret: str) -> str | None:
    """The label of ``secret`` if it is a key derived with ``signing_secret`` (its mac
    verifies), else None: a plain key, no key, or a key signed with another secret (another
    run's). Whether its base key is known or active is not checked here."""
    derived = _split_derived(secret or "")
    if derived is None or not signing_secret:
        return None
    base, label, mac = derived
    return label if hmac.compare_digest(mac, _mac(base, label, signing_secret)) else None


@dataclass(frozen=True)
class ApiKey:
    """One credential: its ``secret`` (what the client sends), its tenant and its scopes.

    ``key_id`` names the key in the journal (the secret itself is never recorded there); it
    defaults to a short hash of the secret.

    ``label`` is set only on the keys :meth:`Keys.find` and :meth:`Keys.presented` return for a
    derived key: then ``secret`` is the derived secret the client presented, and ``key_id``,
    ``tenant_id`` and ``scopes`` are the base key's. A key you add is a plain key (no label).
    """

    secret: str
    tenant_id: str
    scopes: frozenset[str]
    key_id: str = field(default="")
    label: str | None = None

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
        if self.label is not None:
            _check_label(self.label)
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
        """Accept these keys (replacing tenant and scopes of a key with the same secret).

        Raises ValueError for a key with a label: derived keys are never added, they are
        accepted through their base key (see :func:`derive_key`).
        """
        for key in keys:
            if key.label is not None:
                raise ValueError(
                    f"ApiKey {key.key_id} has the label {key.label!r}: add its base key, and "
                    "hand the process derive_key(base_secret, label, signing_secret=...) instead."
                )
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
        """Refuse this key from now on (401), as a provider does with a revoked credential.

        Every key derived from it is refused too.
        """
        with self._journal.transaction() as conn:
            cur = conn.execute("UPDATE keys SET revoked=1 WHERE secret=?", (secret,))
            if cur.rowcount == 0:
                raise KeyError(
                    f"no key {secret[:4]}… is configured on this provider; add it with "
                    "provider.keys.add(ApiKey(...)) before revoking it."
                )

    def set_signing_secret(self, secret: str) -> None:
        """Accept keys derived with ``secret`` (see :func:`derive_key`) from the next request on.

        Replaces the signing secret set before: keys derived with the old one become unknown.
        Raises ValueError for an empty secret.
        """
        if not isinstance(secret, str) or not secret:
            raise ValueError(f"the signing secret must be a non-empty string, not {secret!r}.")
        with self._journal.transaction() as conn:
            conn.execute(
                "INSERT INTO meta(name, value) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value=excluded.value",
                (_SIGNING_SECRET, secret),
            )

    def find(self, secret: str | None) -> ApiKey | None:
        """The active key with this secret, or None if it is unknown or revoked.

        A derived key is found as its base key, with its label, when its mac verifies against
        the journal's signing secret and the base key is active.
        """
        return self._lookup(secret, active_only=True)

    def presented(self, secret: str | None) -> ApiKey | None:
        """The key with this secret, revoked or not (for the journal: a refused request is
        still recorded under the tenant and scopes of the key it presented). A derived key
        whose mac verifies is returned as its base key, with its label, also when the base key
        was revoked."""
        return self._lookup(secret, active_only=False)

    def active(self) -> list[ApiKey]:
        """Every key that is accepted now (plain keys; each also accepts the keys derived from
        it)."""
        with self._journal.connection() as conn:
            rows = conn.execute(
                "SELECT secret, key_id, tenant_id, scopes FROM keys WHERE revoked=0 ORDER BY secret"
            ).fetchall()
        return [ApiKey(r[0], r[2], frozenset(json.loads(r[3])), key_id=r[1]) for r in rows]

    def _lookup(self, secret: str | None, *, active_only: bool) -> ApiKey | None:
        if not secret:
            return None
        with self._journal.connection() as conn:
            found = _row(conn, secret, active_only)
            if found is not None:
                return ApiKey(secret, found[1], frozenset(json.loads(found[2])), key_id=found[0])
            derived = _split_derived(secret)
            if derived is None:
                return None
            base, label, mac = derived
            signing = conn.execute(
                "SELECT value FROM meta WHERE name=?", (_SIGNING_SECRET,)
            ).fetchone()
            if signing is None or not hmac.compare_digest(mac, _mac(base, label, signing[0])):
                return None
            found = _row(conn, base, active_only)
        if found is None:
            return None
        return ApiKey(
            secret, found[1], frozenset(json.loads(found[2])), key_id=found[0], label=label
        )


def _row(conn: sqlite3.Connection, secret: str, active_only: bool) -> sqlite3.Row | None:
    sql = "SELECT key_id, tenant_id, scopes FROM keys WHERE secret=?"
    row: sqlite3.Row | None = conn.execute(
        sql + " AND revoked=0" if active_only else sql, (secret,)
    ).fetchone()
    return row


def _split_derived(secret: str) -> tuple[str, str, str] | None:
    """``(base, label, mac)`` if ``secret`` has the shape of a derived key, else None."""
    parts = secret.rsplit("~", 2)  # from the right: a base secret may itself contain "~"
    if len(parts) != 3:
        return None
    base, label, mac = parts
    if not base or not _LABEL.fullmatch(label) or not _MAC.fullmatch(mac):
        return None
    return base, label, mac
