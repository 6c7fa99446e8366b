"""The run directory: one per case, made in memory where the system has a memory file
system, removed when the case passes, moved to the caller's directory when it fails."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_crashpoints.errors import HarnessUsageError
from pytest_crashpoints.harness import RunDir

ENV = "PYTEST_CRASHPOINTS_RUN_DIR"


def _mount_type(path: Path) -> str | None:
    """The file system type of the mount ``path`` is on (from /proc/mounts)."""
    best, kind = "", None
    for line in Path("/proc/mounts").read_text().splitlines():
        point, fs = line.split()[1:3]
        if (str(path) + "/").startswith(point.rstrip("/") + "/") and len(point) > len(best):
            best, kind = point, fs
    return kind


def _memory_is_usable() -> bool:
    RunDir.place("memory")
    usable = RunDir.placement()[0] is not None
    RunDir.place(None)
    return usable


needs_memory = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _memory_is_usable(),
    reason="no usable memory file system (/dev/shm as a writable tmpfs) on this machine",
)


@pytest.fixture(autouse=True)
def _fresh_placement() -> Iterator[None]:
    RunDir.place(None)
    yield
    RunDir.place(None)


def test_layout_and_removal_after_a_pass(tmp_path: Path) -> None:
    with RunDir.create(tmp_path, "tests/test_a.py::test_x[A-1]") as run_dir:
        assert run_dir.path.name.startswith("tests_test_a.py_test_x_A-1-")
        assert run_dir.journals.is_dir() and run_dir.logs.is_dir()
        run_dir.clock.advance(2)
        run_dir.authority_store()
        assert run_dir.clock_path.exists() and run_dir.authority_path.exists()
    assert not run_dir.path.exists()
    assert list(tmp_path.iterdir()) == []


@needs_memory
def test_made_in_memory_and_moved_to_the_base_when_kept(tmp_path: Path) -> None:
    run_dir = RunDir.create(tmp_path, "case")
    root, why = RunDir.placement()
    assert root is not None and run_dir.path.parent == root
    assert _mount_type(run_dir.path) == "tmpfs"
    assert why == f"run directories in {root.parent.parent} (memory: tmpfs)"
    (run_dir.logs / "worker.log").write_text("sent\n")
    made = run_dir.path
    kept = run_dir.close(passed=False)
    assert kept == tmp_path / made.name == run_dir.path
    assert (kept / "logs" / "worker.log").read_text() == "sent\n"
    assert not made.exists()
    assert run_dir.close(passed=False) == kept  # closing again changes nothing


def test_kept_after_a_failure(tmp_path: Path) -> None:
    with pytest.raises(AssertionError), RunDir.create(tmp_path, "case") as run_dir:
        raise AssertionError("invariant 1 violated")
    assert run_dir.path.is_dir() and run_dir.path.parent == tmp_path
    assert run_dir.close(passed=False) == run_dir.path


def test_two_runs_of_one_case_do_not_collide(tmp_path: Path) -> None:
    first, second = RunDir.create(tmp_path, "case"), RunDir.create(tmp_path, "case")
    assert first.path != second.path
    assert first.close(passed=True) is None
    assert second.close(passed=False) == second.path
    assert [p.name for p in tmp_path.iterdir()] == [second.path.name]


def test_on_disk_when_asked(tmp_path: Path) -> None:
    RunDir.place("disk")
    assert RunDir.placement() == (None, "run directories on disk (--crashpoints-run-dir=disk)")
    run_dir = RunDir.create(tmp_path / "base", "case")
    assert run_dir.path.parent == tmp_path / "base"
    assert run_dir.close(passed=False) == run_dir.path


def test_in_a_directory_given(tmp_path: Path) -> None:
    (tmp_path / "fast").mkdir()
    RunDir.place(str(tmp_path / "fast"))
    run_dir = RunDir.create(tmp_path / "base", "case")
    assert run_dir.path.parent.parent == tmp_path / "fast" / f"crashpoints-{os.getuid()}"
    kept = run_dir.close(passed=False)
    assert kept is not None and kept.parent == tmp_path / "base"


def test_the_environment_chooses_without_pytest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "disk")
    RunDir.place(None)
    assert RunDir.placement()[0] is None


def test_a_bad_choice_says_what_to_write(tmp_path: Path) -> None:
    with pytest.raises(HarnessUsageError, match="--crashpoints-run-dir=memory, =disk, or the"):
        RunDir.place(str(tmp_path / "missing"))


def test_falls_back_to_the_disk_with_the_reason(tmp_path: Path) -> None:
    RunDir.place("memory", memory=tmp_path / "no-shm")
    assert RunDir.placement() == (
        None,
        f"run directories on disk (no memory file system: {tmp_path / 'no-shm'} does not exist)",
    )
    (tmp_path / "no-shm").mkdir()
    RunDir.place("memory", memory=tmp_path / "no-shm")
    if _mount_type(tmp_path) != "tmpfs":
        assert RunDir.placement() == (
            None,
            f"run directories on disk (no memory file system: {tmp_path / 'no-shm'} is not "
            "a tmpfs)",
        )
    assert RunDir.create(tmp_path / "base", "case").path.parent == tmp_path / "base"


def test_the_scratch_root_goes_with_its_process(tmp_path: Path) -> None:
    # A process that exits removes its root; one killed leaves it, and the next removes it.
    code = (
        "import os, sys; from pytest_crashpoints.harness import RunDir\n"
        f"RunDir.place({str(tmp_path)!r}); print(RunDir.placement()[0], flush=True)\n"
        "if sys.argv[1] == 'kill': os.kill(os.getpid(), 9)\n"
    )
    ended = subprocess.run(
        [sys.executable, "-c", code, "exit"], capture_output=True, text=True, timeout=60
    )
    assert not Path(ended.stdout.strip()).exists()
    killed = subprocess.run(
        [sys.executable, "-c", code, "kill"], capture_output=True, text=True, timeout=60
    )
    left = Path(killed.stdout.strip())
    assert killed.returncode == -9 and left.is_dir()
    RunDir.place(str(tmp_path))
    mine = RunDir.placement()[0]
    assert not left.exists() and mine is not None and mine.is_dir()
