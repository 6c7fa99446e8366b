"""``crashpoints merge`` keeps what each shard said of the points a command could not reach,
for the points the merged run leaves unreached or unkilled, and drops it for the others."""

from __future__ import annotations

from typing import Any

from pytest_crashpoints._cli.merge import _counted

WHY = "a command that runs no Python ... gets no hooks at its commits; ..."


def _shard(reached: list[str], killed: list[str], out_of_reach: dict[str, str]) -> Any:
    run = {"phase": "exhaustive", "index": 0, "schedule_text": "s", "fingerprint": "f",
           "verdict": "passed", "reached": reached, "killed": killed}
    return {"declared": ["A", "B", "C"], "schedules": [run], "out_of_reach": out_of_reach,
            "seconds": 1.0}


def test_a_point_another_shard_killed_is_no_longer_out_of_reach() -> None:
    # Shard 1 reached C and never killed it; shard 2 killed it. A was reached by neither.
    one = _shard(["B", "C"], ["B"], {"A": WHY, "C": WHY})
    two = _shard(["B", "C"], ["C"], {"A": WHY})
    runs = [*one["schedules"], {**two["schedules"][0], "index": 1}]
    merged = _counted([(1, one), (2, two)], runs)
    assert (merged["unreached"], merged["unkilled"]) == (["A"], [])
    assert merged["out_of_reach"] == {"A": WHY}
