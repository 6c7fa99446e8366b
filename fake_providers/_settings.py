"""Per-provider settings a test configures: idempotency support, search lag, key retention.

Stored in the journal (not in memory), so a change made by the harness between steps is seen by
the handler running inside a forked worker on its next request.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

from ._journal import Journal

__all__ = ["ProviderSettings", "Settings"]


@dataclass(frozen=True)
class ProviderSettings:
    """How a provider behaves.

    ``idempotency``: honour ``Idempotency-Key`` (payments only; False simulates a provider
    without idempotency support: every request applies its effect).
    ``search_lag``: harness seconds a search lags behind writes (a search sees only effects
    committed at or before ``now - search_lag``). Lookups by id are always consistent.
    ``retention``: harness seconds an idempotency key is remembered (payments; Stripe: 24 h).
    """

    idempotency: bool = True
    search_lag: float = 0.0
    retention: float = 24 * 3600.0

    def __post_init__(self) -> None:
        if not isinstance(self.idempotency, bool):
            raise ValueError(f"idempotency must be True or False, not {self.idempotency!r}.")
        for name in ("search_lag", "retention"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(
                    f"{name} must be a finite number of harness seconds >= 0, not {value!r}."
                )


class Settings:
    """Read and change a provider's settings; changes apply to the next request, everywhere."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal

    def get(self) -> ProviderSettings:
        """The settings in force now."""
        with self._journal.connection() as conn:
            row = conn.execute("SELECT value FROM settings WHERE name='provider'").fetchone()
        if row is None:
            return ProviderSettings()
        return ProviderSettings(**json.loads(row[0]))

    def update(self, **changes: Any) -> ProviderSettings:
        """Change some settings (keyword names as in :class:`ProviderSettings`); returns the new
        settings. An unknown name raises TypeError and changes nothing."""
        known = {f.name for f in dataclasses.fields(ProviderSettings)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise TypeError(
                f"unknown provider setting(s) {', '.join(unknown)}; "
                f"the settings are {', '.join(sorted(known))}."
            )
        with self._journal.transaction() as conn:
            row = conn.execute("SELECT value FROM settings WHERE name='provider'").fetchone()
            current = ProviderSettings(**json.loads(row[0])) if row else ProviderSettings()
            new = dataclasses.replace(current, **changes)
            self._store(conn, new)
        return new

    def replace(self, settings: ProviderSettings) -> None:
        """Put ``settings`` in force, whatever was set before."""
        with self._journal.transaction() as conn:
            self._store(conn, settings)

    @staticmethod
    def _store(conn: Any, settings: ProviderSettings) -> None:
        conn.execute(
            "INSERT INTO settings(name, value) VALUES ('provider', ?) "
            "ON CONFLICT(name) DO UPDATE SET value=excluded.value",
            (json.dumps(dataclasses.asdict(settings)),),
        )
