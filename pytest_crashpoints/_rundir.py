"""The run directory: everything one case writes, in one place, kept only when the case fails.

Layout (names are stable; tools and reports refer to them)::

    <base>/<case>-XXXXXXXX/
        ledger.sqlite3       the worker's ledger
        journals/            the fake providers' journals (their ground truth)
        authority.sqlite3    the authority store (E)
        clock                the harness clock (+ clock.lock)
        logs/                worker and harness logs

``base`` is pytest's per-session tmp path (``tmp_path_factory.getbasetemp()``), which is
already distinct per xdist worker; the random suffix keeps two cases (or two runs of one case)
apart inside it.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from ._authority_store import AuthorityStore
from ._clock import HarnessClock

__all__ = ["RunDir"]


class RunDir:
    """One case's directory. Use :meth:`create`; finish with :meth:`close`, or use it as a
    context manager (removed when the block passes, kept when it raises)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._clock: HarnessClock | None = None
        self._closed = False

    @classmethod
    def create(cls, base: str | Path, case: str) -> RunDir:
        """Make a fresh run directory for ``case`` under ``base`` (created if missing).

        ``case`` may be a pytest node id; it is reduced to a safe file name.
        """
        base = Path(base)
        base.mkdir(parents=True, exist_ok=True)
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", case).strip("._")[-60:] or "case"
        path = Path(tempfile.mkdtemp(prefix=f"{stem}-", dir=base))
        (path / "journals").mkdir()
        (path / "logs").mkdir()
        return cls(path)

    @property
    def ledger_path(self) -> Path:
        return self.path / "ledger.sqlite3"

    @property
    def journals(self) -> Path:
        return self.path / "journals"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def authority_path(self) -> Path:
        return self.path / "authority.sqlite3"

    @property
    def clock_path(self) -> Path:
        return self.path / "clock"

    @property
    def clock(self) -> HarnessClock:
        """The run's harness clock (created at 0.0 on first use)."""
        if self._clock is None:
            self._clock = HarnessClock(self.clock_path)
        return self._clock

    def authority_store(self) -> AuthorityStore:
        """The run's authority store, stamped with the run's clock."""
        return AuthorityStore(self.authority_path, clock=self.clock.now)

    def close(self, *, passed: bool) -> Path | None:
        """Finish the case: remove the directory if it ``passed``; otherwise keep it and return
        its path (print it, so whoever reads the failure can open the evidence)."""
        if self._closed:
            return None if passed else self.path
        self._closed = True
        if passed:
            shutil.rmtree(self.path, ignore_errors=True)
            return None
        return self.path

    def __enter__(self) -> RunDir:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(passed=exc_type is None)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"
