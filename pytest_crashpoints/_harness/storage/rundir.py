"""The run directory: everything one case writes, in one place, kept only when the case fails.

Layout (names are stable; tools and reports refer to them)::

    <base>/<case>-XXXXXXXX/
        ledger.sqlite3       the worker's ledger
        journals/            the fake providers' journals (their ground truth)
        authority.sqlite3    the authority store (E)
        clock                the harness clock (+ clock.lock)
        logs/                worker and harness logs

The directory is made in memory where the system allows it (``scratch.py``) and moved to
``base`` only when it is kept; ``base`` is pytest's per-test ``tmp_path`` (already distinct
per xdist worker); the random suffix keeps two cases (or two runs of one case) apart.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from ..._process.clock import HarnessClock
from ...errors import HarnessError
from . import scratch
from .authority_store import AuthorityStore

if TYPE_CHECKING:
    from ..._process.handle import StartMethod

__all__ = ["RunDir"]


class RunDir:
    """One case's directory. Use :meth:`create`; finish with :meth:`close`, or use it as a
    context manager (removed when the block passes, kept when it raises)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._clock: HarnessClock | None = None
        self._closed = False
        #: Where the directory goes if it is kept, when it was made in memory (``scratch``).
        self._keep_in: Path | None = None

    @classmethod
    def create(cls, base: str | Path, case: str) -> RunDir:
        """Make a fresh run directory for ``case`` under ``base`` (created if missing).

        ``case`` may be a pytest node id; it is reduced to a safe file name.
        """
        base = Path(base)
        base.mkdir(parents=True, exist_ok=True)
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", case).strip("._")[-60:] or "case"
        memory = scratch.root()
        path = Path(tempfile.mkdtemp(prefix=f"{stem}-", dir=memory or base))
        (path / "journals").mkdir()
        (path / "logs").mkdir()
        run = cls(path)
        if memory is not None:
            run._keep_in = base
        return run

    @staticmethod
    def place(where: str | None, *, memory: Path = scratch.MEMORY) -> None:
        """Where run directories are made from now on, in this process: ``"memory"`` (the
        default: ``memory``, ``/dev/shm``, when it is a writable tmpfs with room; else the
        disk), ``"disk"`` (the ``base`` given to :meth:`create`), or a directory. ``None``:
        as ``PYTEST_CRASHPOINTS_RUN_DIR`` says (``--crashpoints-run-dir`` sets it for pytest).
        A bad value raises :class:`~pytest_crashpoints.errors.HarnessUsageError`."""
        scratch.configure(where, memory=memory)

    @staticmethod
    def placement() -> tuple[Path | None, str]:
        """The directory run directories are made in (``None``: each ``base``, on disk) and
        why, in words (the session header prints them)."""
        return scratch.root(), scratch.describe()

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

    def copy(
        self, target: str | Path, *, timeout: float = 60.0, start_method: StartMethod = "fork"
    ) -> RunDir:
        """Copy the whole run directory to ``target`` (outside it, or a new folder inside it,
        which is left out of the copy) and return the copy.

        Call it only while no process writes to the run: each SQLite file is then copied
        with its WAL and shared-memory files in a consistent state. The copy is made in a
        worker process, never in this one: POSIX drops all of a process's locks on a file
        when the process closes any descriptor of it, so reading the files of this process's
        open SQLite connections here would silently drop their locks (and a later process
        would take itself for the only user of the database, and reset its WAL under our
        connections). Raises :class:`~pytest_crashpoints.errors.HarnessError` if the copy
        fails.
        """
        from ..._process.outcome import Completed
        from ..._process.worker import run_worker

        outcome = run_worker(
            _copy_tree,
            args=(str(self.path), str(target)),
            timeout=timeout,
            start_method=start_method,
        )
        if not isinstance(outcome, Completed):
            raise HarnessError(
                f"could not copy the run directory {self.path} to {target}: {outcome}"
            )
        return RunDir(Path(target))

    def close(self, *, passed: bool) -> Path | None:
        """Finish the case: remove the directory if it ``passed``; otherwise keep it and return
        its path (print it, so whoever reads the failure can open the evidence)."""
        if self._closed:
            return None if passed else self.path
        self._closed = True
        if passed:
            shutil.rmtree(self.path, ignore_errors=True)
            return None
        if self._keep_in is not None and self.path.exists():
            # Made in memory: the evidence is moved where the caller keeps its files.
            kept = self._keep_in / self.path.name
            shutil.move(self.path, kept)
            self.path, self._clock = kept, None
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


def _copy_tree(source: str, target: str) -> None:
    top, name = Path(source), Path(target).name
    shutil.copytree(top, target, ignore=lambda folder, names: [name] if Path(folder) == top else [])
