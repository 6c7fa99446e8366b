"""One test across machines: ``--crashpoints-shard=K/N`` and ``crashpoints merge``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_crashpoints.cli import main
from pytest_crashpoints.harness import read_token
from tests.conftest import assert_follows_the_report_schema
from tests.plugin.test_plugin import SCENARIO as PLUGIN_SCENARIO

# The scenario of the plugin's own tests (the reference worker, a recovery broken on purpose),
# with two exhaustive tests to split.
SCENARIO = (
    PLUGIN_SCENARIO
    + """

@pytest.mark.crashpoints(points="AB", providers=["email"], mode="exhaustive")
def test_good(crashpoints):
    crashpoints.run(worker=reference_worker, recover=reference_recovery, messages=[MESSAGE])


@pytest.mark.crashpoints(points="AB", providers=["email"], mode="exhaustive")
def test_broken(crashpoints):
    crashpoints.run(worker=reference_worker, recover=blind_recovery, messages=[MESSAGE])


@pytest.mark.crashpoints(points="BEF", providers=["email"], mode="exhaustive", max_faults=1)
def test_two_bugs(crashpoints):
    from scenarios.broken.agents import tenant_blind_releasing_recovery

    crashpoints.run(worker=reference_worker, recover=tenant_blind_releasing_recovery,
                    messages=[MESSAGE])
"""
)


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-p", "crashpoints", "-p", "no:randomly", "--crashpoints-seed=5", *args
    )


def by_nodeid(path: Path) -> dict[str, dict[str, Any]]:
    document = json.loads(path.read_text())
    assert_follows_the_report_schema(document)
    return {test["nodeid"].split("::")[-1]: test for test in document["tests"]}


def cases(test: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((run["schedule_text"], run["fingerprint"]) for run in test["schedules"])


def test_two_shards_merged_are_the_unsharded_run(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makepyfile(test_shop=SCENARIO)
    run(pytester, "--crashpoints-report=whole.json").assert_outcomes(passed=1, failed=2)
    for k in (1, 2):
        shard = run(pytester, f"--crashpoints-shard={k}/2", f"--crashpoints-report=s{k}.json")
        # Every failing schedule of test_two_bugs has an even index: shard 2 passes it.
        shard.assert_outcomes(passed=k, failed=3 - k)
        assert json.loads((pytester.path / f"s{k}.json").read_text())["shard"] == {
            "index": k,
            "total": 2,
        }
    # Each shard ran a part of the faulted schedules, and the fault-free one.
    halves = [by_nodeid(pytester.path / f"s{k}.json")["test_good"] for k in (1, 2)]
    assert all(half["schedules"][0]["phase"] == "fault-free" for half in halves)
    assert {r["index"] for r in halves[0]["schedules"][1:]} == {0, 2, 4, 6}
    assert {r["index"] for r in halves[1]["schedules"][1:]} == {1, 3, 5}

    merge = main(
        [
            "merge",
            str(pytester.path / "s2.json"),
            str(pytester.path / "s1.json"),
            "-o",
            str(pytester.path / "out" / "merged.json"),
        ]
    )
    assert merge == 0
    assert "wrote" in capsys.readouterr().out
    whole = by_nodeid(pytester.path / "whole.json")
    merged = by_nodeid(pytester.path / "out" / "merged.json")
    assert json.loads((pytester.path / "out" / "merged.json").read_text())["shard"] is None
    for name in ("test_good", "test_broken", "test_two_bugs"):
        one, both = whole[name], merged[name]
        assert cases(both) == cases(one) and both["cases"] == one["cases"] == len(cases(one))
        # In one machine's order: the fault-free case once, then by enumeration index.
        assert [r["schedule_text"] for r in both["schedules"]] == [
            r["schedule_text"] for r in one["schedules"]
        ]
        for field in ("verdict", "outcome", "coverage", "unreached", "unkilled", "recovered"):
            assert both[field] == one[field], field
    assert merged["test_good"]["verdict"] == "passed"
    # The failure one machine finds first, found by shard 2 (shard 1 failed at index 2).
    broken = merged["test_broken"]
    assert broken["verdict"] == "failed" and 1 in broken["failure"]["invariants"]
    assert broken["failure"]["token"] == whole["test_broken"]["failure"]["token"]
    assert next(r["index"] for r in broken["schedules"] if r["verdict"] == "failed") == 1
    # What one machine found after its failure, from what each shard found after its own.
    for name in ("test_broken", "test_two_bugs"):
        one, both = whole[name]["failure"], merged[name]["failure"]
        assert both["token"] == one["token"]
        assert [(a["invariants"], a["token"]) for a in both["also"]] == [
            (a["invariants"], a["token"]) for a in one["also"]
        ]
        assert both["also_cases"] == one["also_cases"]
    assert [a["invariants"] for a in merged["test_two_bugs"]["failure"]["also"]] == [[5]]
    # The gate's readers take it: show fails on the failed test, and draws the HTML.
    assert main(["show", str(pytester.path / "out" / "merged.json")]) == 1
    html = pytester.path / "merged.html"
    assert (
        main(["show", str(pytester.path / "out" / "merged.json"), "--html", "-o", str(html)]) == 0
    )
    assert html.read_text().startswith("<!DOCTYPE html>")
    refuses_shards_that_are_not_one_run(pytester.path, capsys)


def refuses_shards_that_are_not_one_run(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Shards of different selections or code, an output over an input, a missing file."""
    s1, s2 = folder / "s1.json", folder / "s2.json"
    before = s1.read_bytes()

    def refused(*paths: Path, output: Path) -> str:
        assert main(["merge", *map(str, paths), "-o", str(output)]) == 2
        return capsys.readouterr().err

    assert "-o " in refused(s1, s2, output=s1) and "is one of the reports to merge" in (
        refused(s1, s2, output=folder / "." / "s1.json")
    )
    assert s1.read_bytes() == before
    document = json.loads(s2.read_text())
    selected = dict(document, tests=[t for t in document["tests"] if "test_good" in t["nodeid"]])
    (folder / "fewer.json").write_text(json.dumps(selected))
    err = refused(s1, folder / "fewer.json", output=folder / "m.json")
    assert "test_broken is in the report of shard 1 but not in that of shard 2" in err
    assert "the same tests selected" in err
    for test in document["tests"]:
        test["declared"] = ["A"]
    (folder / "drift.json").write_text(json.dumps(document))
    err = refused(s1, folder / "drift.json", output=folder / "m.json")
    assert "differs between shards: shard 1 has declared ['A', 'B'], shard 2 ['A']" in err
    assert "Run every shard from the same commit" in err
    err = refused(s1, folder / "nope.json", output=folder / "m.json")
    assert "no report at" in err and "--crashpoints-report=PATH" in err
    assert not (folder / "m.json").exists()


def test_the_token_of_a_failure_found_in_shard_2_replays_without_the_shard(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_shop=SCENARIO)
    report = pytester.path / "s2.json"
    run(pytester, "--crashpoints-shard=2/2", f"--crashpoints-report={report}", "-k", "broken")
    failure = by_nodeid(report)["test_broken"]["failure"]
    assert failure["schedule_text"] == "deliver message 0, kill at B (hit 1)"
    token = read_token(failure["token"])
    assert token.seed == 5 and str(token.schedule) == failure["schedule_text"]
    replayed = run(pytester, f"--crashpoints-replay={failure['token']}", "-k", "broken")
    replayed.assert_outcomes(failed=1)
    replayed.stdout.fnmatch_lines(["minimal schedule: deliver message 0, kill at B (hit 1)"])


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("3/2", "K must be between 1 and N (2), as in 1/2"),
        ("0/4", "K must be between 1 and N (4), as in 1/4"),
        ("2", "it must be K/N, two whole numbers, as in 1/4"),
        ("one/two", "it must be K/N"),
        ("1/0", "N must be 1 or more"),
    ],
)
def test_a_bad_shard_is_a_usage_error(pytester: pytest.Pytester, value: str, says: str) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "crashpoints", f"--crashpoints-shard={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--crashpoints-shard has the value {value!r}: {says}*"])


def test_a_shard_needs_a_seed_and_says_it_is_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "crashpoints", "--crashpoints-shard=2/3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--crashpoints-shard=2/3 needs --crashpoints-seed=N, the same on every shard*"]
    )
    result = run(pytester, "--crashpoints-shard=2/3")
    result.stdout.fnmatch_lines(["crashpoints: shard 2 of 3 of each crash test's schedules; *"])


def test_a_bad_shard_in_the_environment_names_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    monkeypatch.setenv("PYTEST_CRASHPOINTS_SHARD", "5/4")
    result = pytester.runpytest_subprocess("-p", "crashpoints")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*PYTEST_CRASHPOINTS_SHARD has the value '5/4': K must*"])


def shard_report(path: Path, index: int | None, total: int, *, seed: int = 5) -> Path:
    shard = None if index is None else {"index": index, "total": total}
    document = {"version": 1, "seed": seed, "interrupted": False, "shard": shard, "tests": []}
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize(
    ("reports", "says"),
    [
        ([(1, 3), (3, 3)], "shard(s) 2 of 3 missing: the merge needs the report of every shard"),
        ([(1, 3)], "shard(s) 2, 3 of 3 missing"),
        ([(1, 2), (2, 2), (2, 2)], "shard 2 of 2 is given twice (r1.json and r2.json)"),
        ([(1, 2), (2, 3)], "split the run differently: r0.json is shard 1/2, r1.json shard 2/3"),
        ([(1, 2), (None, 2)], "r1.json is not the report of a shard"),
    ],
)
def test_merge_refuses_shards_that_are_not_one_run_and_writes_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    reports: list[tuple[int | None, int]],
    says: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    paths = [
        shard_report(Path(f"r{n}.json"), index, total) for n, (index, total) in enumerate(reports)
    ]
    assert main(["merge", *map(str, paths), "-o", "merged.json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("crashpoints merge: error: ") and says in err, err
    assert err.count("\n") == 1
    assert sorted(tmp_path.iterdir()) == sorted(tmp_path / path for path in paths)


def test_merge_refuses_other_seeds_versions_and_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = shard_report(tmp_path / "one.json", 1, 2)
    merged = tmp_path / "merged.json"

    def refused(other: Path) -> str:
        assert main(["merge", str(one), str(other), "-o", str(merged)]) == 2
        assert not merged.exists()
        return capsys.readouterr().err

    err = refused(shard_report(tmp_path / "two.json", 2, 2, seed=6))
    assert "different runs: " in err and "seed 5" in err and "seed 6" in err
    assert "same --crashpoints-seed" in err
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"version": 0, "seed": 5, "interrupted": False, "tests": []}))
    assert "format version 0" in refused(old)
    text = tmp_path / "notes.json"
    text.write_text("not json")
    assert "is not a crashpoints report" in refused(text)
