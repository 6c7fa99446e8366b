from __future__ import annotations

import pytest

from pytest_crashpoints.cli import main


def test_marker_is_registered_with_signature_and_help(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("-p", "crashpoints", "--markers")
    result.stdout.fnmatch_lines(
        ["@pytest.mark.crashpoints(points='ABCDEF', [*], providers=(),*See https://*/docs/reference.md#the-marker"]
    )
    assert result.ret == 0


def test_marker_is_known_to_strict_markers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.crashpoints(points="A")
        def test_marked():
            pass
        """
    )
    pytester.runpytest("-p", "crashpoints", "--strict-markers").assert_outcomes(passed=1)


def test_command_without_arguments_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "usage: crashpoints" in out
    assert "gate" in out
