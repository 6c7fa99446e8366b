"""The run directory: one per case, removed when the case passes, kept when it fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_crashpoints.harness import RunDir


def test_layout_and_removal_after_a_pass(tmp_path: Path) -> None:
    with RunDir.create(tmp_path, "tests/test_a.py::test_x[A-1]") as run_dir:
        assert run_dir.path.parent == tmp_path
        assert run_dir.path.name.startswith("tests_test_a.py_test_x_A-1-")
        assert run_dir.journals.is_dir() and run_dir.logs.is_dir()
        run_dir.clock.advance(2)
        run_dir.authority_store()
        assert run_dir.clock_path.exists() and run_dir.authority_path.exists()
    assert list(tmp_path.iterdir()) == []


def test_kept_after_a_failure(tmp_path: Path) -> None:
    with pytest.raises(AssertionError), RunDir.create(tmp_path, "case") as run_dir:
        raise AssertionError("invariant 1 violated")
    assert run_dir.path.is_dir()
    assert run_dir.close(passed=False) == run_dir.path


def test_two_runs_of_one_case_do_not_collide(tmp_path: Path) -> None:
    first, second = RunDir.create(tmp_path, "case"), RunDir.create(tmp_path, "case")
    assert first.path != second.path
    assert first.close(passed=True) is None
    assert second.close(passed=False) == second.path
    assert [p.name for p in tmp_path.iterdir()] == [second.path.name]
