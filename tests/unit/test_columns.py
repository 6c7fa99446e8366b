"""The one plain-text table printer (the summary's schedules, the gate's table, the queue)."""

from __future__ import annotations

from pytest_crashpoints._plugin.columns import columns


def test_every_column_is_as_wide_as_its_widest_cell() -> None:
    assert columns([("test", "cases"), ("a", "12"), ("long name", "3")], right={1}) == [
        "test       cases",
        "a             12",
        "long name      3",
    ]


def test_a_free_last_column_is_written_as_it_is_and_trailing_blanks_are_cut() -> None:
    rows = [("1", "passed", "kill at B (hit 1)"), ("10", "", "")]
    assert columns(rows, right={0}, free_last=True) == [" 1  passed  kill at B (hit 1)", "10"]
    assert columns(rows) == [
        "1   passed  kill at B (hit 1)",
        "10",
    ]


def test_no_rows_no_lines() -> None:
    assert columns([]) == []
