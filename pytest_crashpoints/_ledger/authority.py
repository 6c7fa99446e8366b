"""The authority an attempt is made under: tenant, credential scope and policy version."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

__all__ = ["Authority", "format_scope", "parse_scope"]


def parse_scope(scope: str | Iterable[str]) -> frozenset[str]:
    """A credential scope as a set of permissions; a string is split on whitespace."""
    items = scope.split() if isinstance(scope, str) else list(scope)
    return frozenset(item.strip() for item in items if item.strip())


def format_scope(scope: Iterable[str]) -> str:
    """The canonical text of a scope: sorted permissions joined by single spaces."""
    return " ".join(sorted(set(scope)))


@dataclasses.dataclass(frozen=True)
class Authority:
    """Who an effect is performed for, with which permissions, under which policy.

    An attempt records the authority it was created under; recovery must never apply
    yesterday's authority to today's task.
    """

    tenant_id: str
    credential_scope: frozenset[str]
    policy_version: str

    @classmethod
    def of(
        cls, *, tenant_id: str, credential_scope: str | Iterable[str], policy_version: str
    ) -> Authority:
        """Build an authority, accepting a scope as ``"a b"`` or any iterable of permissions."""
        return cls(tenant_id, parse_scope(credential_scope), policy_version)

    @property
    def scope_text(self) -> str:
        return format_scope(self.credential_scope)

    def covers(self, other: Authority) -> bool:
        """Whether a request under ``other`` stays within this authority (same tenant and
        policy version, scope no wider)."""
        return (
            other.tenant_id == self.tenant_id
            and other.policy_version == self.policy_version
            and other.credential_scope <= self.credential_scope
        )
