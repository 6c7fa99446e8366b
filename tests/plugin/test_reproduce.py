"""``crashpoints reproduce``: the renewal charger's incident of 2026-11-30 as a crash test.

A wrong argument writes nothing and says what to do in one line (exit 2); ``--no-run`` writes
a test that imports the worker, recovery and view it was named and reads the incident's files
from beside itself; run, the test fails on the charger that charges again (exit 1) and passes
on the fixed one (exit 0), even where the user's configuration switches the plugin off.

The in-process tests name functions of a small package of their own (``acme_billing``):
importing the scenarios' test modules would apply the crashpoints marker, which this suite
(plugin off, strict markers) does not know. The end-to-end runs use the scenarios' own.
"""

from __future__ import annotations

import ast
import datetime as dt
import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_crashpoints._cli.main import main

REPO = Path(__file__).parents[2]
INCIDENT = REPO / "scenarios" / "incident"
#: The incident of 2024-06-14: the customer's other subscription's charge in the same export.
INCIDENT_2024 = REPO / "scenarios" / "incident_2024"
TEAM_CHARGE = "ch_3PRa6tKx1Rm8Qw2s1Lq0VnB4"
BROKEN = FIXED = "scenarios.renewal_incident"
#: November's renewal, the message production never acknowledged.
MESSAGE = (INCIDENT / "message.json").read_text(encoding="utf-8").strip()
#: A deadline for one ``crashpoints reproduce`` run that a loaded machine meets.
SLOW = 300

#: The user's crash-test functions, by module (what the command imports and the test names).
PACKAGE = {
    "__init__.py": "",
    "workers.py": (
        "def worker(renewal, ctx):\n    return 'charged'\n\n\n"
        "def recovery(ctx):\n    return None\n"
    ),
    "views.py": "def renewals(ctx):\n    return None\n",
}
#: The command of docs/howto-incident.md, option by option (``None``: left out).
OPTIONS: dict[str, str | None] = {
    "--worker": "acme_billing.workers:worker",
    "--recover": "acme_billing.workers:recovery",
    "--view": "acme_billing.views:renewals",
    "--ledger": "incident/renewals.sql",
    "--export": "payments=incident/charges.json",
    "--message": MESSAGE,
    "-o": "test_november_incident.py",
}


def reproduce_argv(**changes: str | None) -> list[str]:
    """``reproduce ... --no-run`` with ``OPTIONS`` changed (keyword ``o`` is ``-o``, ``at``
    is ``--at``, and so on)."""
    options = dict(OPTIONS)
    for name, value in changes.items():
        options["-o" if name == "o" else "--" + name.replace("_", "-")] = value
    argv = ["reproduce"]
    for flag, value in options.items():
        if value is not None:
            argv += [flag, value]
    return [*argv, "--no-run"]


def files_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder holding a copy of the incident and the user's package, where the command
    runs."""
    shutil.copytree(INCIDENT, tmp_path / "incident")
    (tmp_path / "acme_billing").mkdir()
    for name, source in PACKAGE.items():
        (tmp_path / "acme_billing" / name).write_text(source)
    monkeypatch.chdir(tmp_path)
    # The command puts its folder on sys.path and imports from it: undo both after the test.
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    yield tmp_path
    for name in [n for n in sys.modules if n.split(".")[0] == "acme_billing"]:
        del sys.modules[name]


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"worker": "acme_billing/workers.py"},
         r"--worker 'acme_billing/workers\.py': give MODULE:FUNCTION, e\.g\. "),
        ({"worker": "billing_agent:worker"},
         r"--worker billing_agent:worker: cannot import billing_agent \(No module named "
         r"'stripe_billing_sdk'\)"),
        ({"worker": "acme_payroll.agents:worker"},
         r"--worker acme_payroll\.agents:worker: cannot import acme_payroll\.agents \(No module "
         r"named 'acme_payroll'\)"),
        ({"view": "acme_billing.views:ledger_view"},
         r"--view acme_billing\.views:ledger_view: acme_billing\.views has no 'ledger_view'"),
        ({"o": "november_incident.py"},
         r"-o november_incident\.py: name the test file test_<something>\.py"),
        ({"o": "regression/test_november_incident.py"},
         r"-o regression/test_november_incident\.py: its folder does not exist"),
        ({"ledger": "incident/renewals.db"}, r"incident/renewals\.db: no such file"),
        ({"ledger": None, "export": None}, r"give the incident's --ledger and/or --export"),
        ({"export": "stripe=incident/charges.json"},
         r"provider 'stripe' is not a bundled one "
         r"\(deploy, email, model, payments, smtp, tickets\)"),
        ({"export": "incident/charges.json"}, r"--export 'incident/charges\.json': give "
         r"PROVIDER=FILE, e\.g\. payments=charges\.json"),
        # The message given where the charges belong: an object that is no Stripe object.
        ({"export": "payments=incident/message.json"},
         r"incident/message\.json: object 0 is not a charge, payment intent or refund"),
        ({"message": "task_id=ren-2026-11"}, r"--message 'task_id=ren-2026-11' is not JSON"),
        ({"message": '{"renewal": "ren-2026-11"}'},
         r"message 0 \(\{'renewal': 'ren-2026-11'\}\) is not an object with a 'task_id' string"),
        ({"at": "30/11/2026 14:20"},
         r"--at '30/11/2026 14:20' is not an ISO 8601 time, e\.g\. 2026-11-30T14:20:00Z"),
        ({"message": None, "recover": None},
         r"no message to redeliver and no --recover: nothing would run; give --message"),
        ({"ledger": "incident/broken.sql"},
         r"incident/broken\.sql is not an SQL dump SQLite runs .*\.dump > incident\.sql"),
        ({"worker": None},
         r"--message given but no --worker to deliver it to: give --worker MODULE:FUNCTION, "
         r"or leave the messages out to run the recovery alone"),
        ({"message": None, "ledger": None},
         r"no message to redeliver: the recovery alone runs, from the work the ledger holds; "
         r"give the incident's --ledger"),
    ],
    ids=["worker-not-module-function", "module-does-not-import", "no-such-module",
         "attribute-missing", "output-not-test-py", "output-folder-missing", "ledger-missing",
         "no-incident-file", "unknown-provider", "export-not-pair", "malformed-export",
         "message-not-json", "message-without-task-id", "at-not-a-time",
         "nothing-to-run", "dump-sqlite-cannot-run", "message-without-worker",
         "recovery-alone-without-ledger"],
)
def test_a_wrong_argument_writes_nothing_and_says_what_to_do(
    workdir: Path, changes: dict[str, str | None], says: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (workdir / "billing_agent.py").write_text(
        "import stripe_billing_sdk\n\n\ndef worker(message, ctx):\n    pass\n"
    )
    (workdir / "incident" / "broken.sql").write_text("CREATE TABLE renewals (id TEXT;\n")
    before = files_in(workdir)
    assert main(reproduce_argv(**changes)) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("crashpoints reproduce: error: ") and err.count("\n") == 1, err
    assert re.search(says, err), err
    assert files_in(workdir) == before  # no test file, and no temporary file either


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("def worker(message, ctx)\n    pass\n"),
        pytest.param("import os\n\nDSN = os.environ['BILLING_DSN']\n"),
    ],
    ids=["syntax-error", "raises-at-import"],
)
def test_a_worker_module_that_fails_to_import_is_a_usage_error(
    workdir: Path, source: str, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    module = f"billing_agent_{request.node.callspec.id.replace('-', '_')}"
    (workdir / f"{module}.py").write_text(source)
    before = files_in(workdir)
    assert main(reproduce_argv(worker=f"{module}:worker")) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    said = {"syntax_error": "SyntaxError", "raises_at_import": "KeyError: 'BILLING_DSN'"}
    assert err.startswith(f"crashpoints reproduce: error: --worker {module}:worker: importing "
                          f"{module} raised {said[module.removeprefix('billing_agent_')]}")
    assert files_in(workdir) == before


@pytest.mark.parametrize("output", ["test_november_incident.py", "regression/test_november.py"])
def test_no_run_writes_a_test_that_starts_from_the_incident(
    workdir: Path, output: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (workdir / "regression").mkdir()
    argv = reproduce_argv(o=output, at="2026-11-30T14:20:00", points="CD")
    assert main(argv) == 0
    assert capsys.readouterr() == (f"crashpoints reproduce: wrote {output}\n", "")
    path = workdir / output
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []
    source = path.read_text(encoding="utf-8")
    compile(source, str(path), "exec")
    assert "\nimport acme_billing.workers as agent\n" in source
    assert "\nimport acme_billing.views as agent_2\n" in source
    # The docstring holds the command that wrote it, quoted so that it can be run again.
    assert shlex.split(source[source.index("    crashpoints reproduce"):].split('"""')[0]) == [
        "crashpoints", *argv]

    # The marker, read from the source (applying it needs the plugin, off in this suite).
    tree = ast.parse(source, str(path))
    [test] = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert test.name == Path(output).stem  # the test is named as its file
    [marker] = test.decorator_list
    assert isinstance(marker, ast.Call) and ast.unparse(marker.func) == "pytest.mark.crashpoints"
    assert not marker.args
    assert {k.arg: ast.literal_eval(k.value) for k in marker.keywords} == {
        "points": "CD", "providers": ["payments"], "mode": "exhaustive", "max_faults": 1,
        "strict_coverage": False}
    test.decorator_list = []

    # Run from another folder, the rest still finds the incident: beside itself, not in cwd.
    monkeypatch.chdir(workdir / "incident")
    namespace: dict[str, Any] = {"__file__": str(path), "__name__": "test_november"}
    exec(compile(tree, str(path), "exec"), namespace)
    incident = namespace["INCIDENT"]
    assert Path(incident.ledger).resolve() == workdir / "incident" / "renewals.sql"
    assert {name: Path(p).resolve() for name, p in incident.exports.items()} == {
        "payments": workdir / "incident" / "charges.json"}
    assert incident.at == dt.datetime(2026, 11, 30, 14, 20, tzinfo=dt.timezone.utc)
    assert namespace["MESSAGES"] == [json.loads(MESSAGE)]

    runs: list[dict[str, Any]] = []

    class Recorder:
        def run(self, **arguments: Any) -> None:
            runs.append(arguments)

    namespace[Path(output).stem](Recorder())
    workers = importlib.import_module("acme_billing.workers")
    views = importlib.import_module("acme_billing.views")
    assert runs == [{"worker": workers.worker, "recover": workers.recovery,
                     "ledger_view": views.renewals, "messages": namespace["MESSAGES"],
                     "incident": incident}]


def test_no_message_writes_a_test_of_the_recovery_alone_at_any_date(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The worker long dead, nothing to redeliver: the test runs the recovery alone (the
    worker given is not needed, and left out), from an incident of 2024."""
    argv = reproduce_argv(message=None, at="2024-06-14T09:31:05Z")
    assert main(argv) == 0, capsys.readouterr()
    path = workdir / str(OPTIONS["-o"])
    source = path.read_text(encoding="utf-8")
    assert "runs the recovery alone (there is no message to redeliver)" in source
    assert "MESSAGES" not in source and "acme_billing.workers:worker" in source  # the command
    tree = ast.parse(source, str(path))
    [test] = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    test.decorator_list = []
    namespace: dict[str, Any] = {"__file__": str(path), "__name__": "test_november"}
    exec(compile(tree, str(path), "exec"), namespace)
    assert namespace["INCIDENT"].at == dt.datetime(2024, 6, 14, 9, 31, 5, tzinfo=dt.timezone.utc)
    runs: list[dict[str, Any]] = []

    class Recorder:
        def run(self, **arguments: Any) -> None:
            runs.append(arguments)

    namespace[path.stem](Recorder())
    workers = importlib.import_module("acme_billing.workers")
    views = importlib.import_module("acme_billing.views")
    assert runs == [{"recover": workers.recovery, "ledger_view": views.renewals,
                     "incident": namespace["INCIDENT"]}]


def test_an_existing_test_file_is_kept_without_force_and_replaced_with_it(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = workdir / OPTIONS["-o"]  # type: ignore[operator]
    assert main(reproduce_argv()) == 0
    first = path.read_text(encoding="utf-8")
    december = '{"task_id": "ren-2026-12", "customer": "cus_QxT4m2", "amount": 2900}'
    capsys.readouterr()

    before = files_in(workdir)
    assert main(reproduce_argv(message=december)) == 2
    assert capsys.readouterr().err == (
        f"crashpoints reproduce: error: {path.name} exists; give another -o, or --force to "
        "replace it.\n")
    assert path.read_text(encoding="utf-8") == first
    assert files_in(workdir) == before

    assert main([*reproduce_argv(message=december), "--force"]) == 0
    replaced = path.read_text(encoding="utf-8")
    assert "'task_id': 'ren-2026-12'" in replaced and "ren-2026-11'" not in replaced
    assert files_in(workdir) == before


def test_the_written_test_file_has_the_mode_of_any_file_written_there(workdir: Path) -> None:
    umask = os.umask(0o022)  # the usual one, whatever this machine's is
    try:
        assert main(reproduce_argv()) == 0
        other = workdir / "other.py"
        other.write_text("")
    finally:
        os.umask(umask)
    assert oct((workdir / str(OPTIONS["-o"])).stat().st_mode) == oct(other.stat().st_mode)


# -- end to end ----------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project: the incident's files, a module with the crash tests' functions, and
    a configuration that switches the plugin off for its ordinary test runs."""
    shutil.copytree(INCIDENT, tmp_path / "incident")
    shutil.copytree(INCIDENT_2024, tmp_path / "incident_2024")
    (tmp_path / "renewal_agents.py").write_text(
        f"from {BROKEN} import recovery_that_retries, worker_that_retries\n"
        f"from {FIXED} import recovery, recovery_that_does_nothing, renewals, worker\n"
    )
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\naddopts = ["-p", "no:crashpoints"]\n'
    )
    return tmp_path


def run_reproduce(command: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``command`` in ``cwd``, where ``scenarios`` imports, with no pytest settings of ours."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    clean["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run(command, cwd=cwd, env={**clean, **env}, capture_output=True,
                          text=True, timeout=SLOW)


def test_the_incident_reproduces_with_the_charger_that_charges_again(project: Path) -> None:
    script = Path(sys.executable).with_name("crashpoints")
    assert script.exists(), f"install the package (pip install -e .): no {script}"
    run = run_reproduce([
        str(script), "reproduce",
        "--worker", "renewal_agents:worker_that_retries",
        "--recover", "renewal_agents:recovery_that_retries",
        "--view", "renewal_agents:renewals",
        "--ledger", "incident/renewals.sql", "--export", "payments=incident/charges.json",
        "--messages", "incident/message.json",
        "-o", "test_november_incident.py", "--", "-p", "no:cacheprovider",
    ], project)
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert "configfile: pyproject.toml" in out  # the run read the addopts that switch it off
    assert "invariant 1 (no non-idempotent side effect happens twice): message 0's " \
           "charges.create happened twice at payments" in out
    assert "FAILED test_november_incident.py::test_november_incident" in out
    assert ("crashpoints reproduce: the incident reproduces (invariant(s) 1, 2): "
            "test_november_incident.py fails" in out)
    assert (project / "test_november_incident.py").is_file()
    assert not (project / ".pytest_cache").exists()  # the arguments after -- reached pytest


def test_the_fixed_charger_does_not_reproduce_it(project: Path) -> None:
    run = run_reproduce([
        sys.executable, "-m", "pytest_crashpoints._cli.main", "reproduce",
        "--worker", f"{FIXED}:worker", "--recover", f"{FIXED}:recovery",
        "--view", "renewal_agents:renewals",
        "--ledger", "incident/renewals.sql", "--export", "payments=incident/charges.json",
        "--messages", "incident/message.json", "--points", "CD",
        "-o", "test_november_incident.py",
    ], project, PYTEST_ADDOPTS="-p no:crashpoints")
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    assert "configfile: pyproject.toml" in out
    summary = re.search(r"1 crash test\(s\), (\d+) case\(s\), seed \d+: 1 passed", out)
    assert summary is not None and int(summary[1]) > 1, out  # kills at C and D, not one case
    assert ("crashpoints reproduce: not reproduced: from the incident's state, every schedule "
            "of test_november_incident.py passes." in out)
    assert (project / "test_november_incident.py").is_file()


def test_a_test_that_reaches_no_verdict_is_no_reproduction(project: Path) -> None:
    """A worker that raises in the fault-free case (here: a configuration it lacks) fails the
    written test, but breaks no invariant: exit 2, never "the incident reproduces"."""
    (project / "needs_config.py").write_text(
        "import os\n\n\ndef worker(renewal, ctx):\n    return os.environ['BILLING_DSN']\n"
    )
    run = run_reproduce([
        sys.executable, "-m", "pytest_crashpoints._cli.main", "reproduce",
        "--worker", "needs_config:worker", "--view", "renewal_agents:renewals",
        "--ledger", "incident/renewals.sql", "--export", "payments=incident/charges.json",
        "--messages", "incident/message.json", "--points", "C",
        "-o", "test_november_incident.py",
    ], project)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "reproduces" not in run.stdout
    assert "KeyError" in run.stdout  # the test's own report of what went wrong
    assert ("crashpoints reproduce: test_november_incident.py reached no verdict on the "
            "incident" in run.stderr)


# -- the incident of 2024 ----------------------------------------------------------------------

JUNE = ["--view", "renewal_agents:renewals", "--ledger", "incident_2024/renewals.sql",
        "--export", "payments=incident_2024/charges.json"]


def test_a_2024_incident_reproduces_with_the_real_duplicate_only(project: Path) -> None:
    run = run_reproduce([
        sys.executable, "-m", "pytest_crashpoints._cli.main", "reproduce",
        "--worker", "renewal_agents:worker_that_retries",
        "--recover", "renewal_agents:recovery_that_retries", *JUNE,
        "--messages", "incident_2024/message.json", "--points", "C",
        "-o", "test_june_incident.py",
    ], project)
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    duplicates = [line for line in out.splitlines() if line.startswith("invariant 1 ")]
    # The real duplicate is reported: production's charge of the renewal, charged again.
    assert any(
        "message 0's charges.create happened twice at payments (production had made it "
        "before the case)" in line
        and "at t=2024-06-14T09:30:02Z by production (in the incident" in line
        for line in duplicates
    ), out
    # The other order's charge for the same customer is history, never a duplicate.
    assert duplicates and not any(TEAM_CHARGE in line for line in duplicates), out
    assert f"{TEAM_CHARGE}: history of ren-team-2024-06 (metadata renewal_id)" in out
    assert "crashpoints reproduce: the incident reproduces (invariant(s) 1, 2)" in out


def test_the_fixed_charger_passes_the_2024_incident(project: Path) -> None:
    run = run_reproduce([
        sys.executable, "-m", "pytest_crashpoints._cli.main", "reproduce",
        "--worker", "renewal_agents:worker", "--recover", "renewal_agents:recovery", *JUNE,
        "--messages", "incident_2024/message.json", "--points", "CD",
        "-o", "test_june_incident.py",
    ], project)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "crashpoints reproduce: not reproduced" in run.stdout


@pytest.mark.parametrize(
    ("recovery", "status", "invariants"),
    [("recovery", 0, None), ("recovery_that_does_nothing", 1, "2"),
     ("recovery_that_retries", 1, "1, 2")],
    ids=["fixed", "does-nothing", "charges-again"],
)
def test_a_recovery_only_incident_is_reproduced_by_its_recovery_alone(
    project: Path, recovery: str, status: int, invariants: str | None
) -> None:
    """No message, no worker: the recovery alone, killed at its points, twice at once, its
    lookups failing. One that does nothing causes no duplicate: it is caught only for the
    row it leaves in flight (invariant 2), never for the charges production made."""
    run = run_reproduce([
        sys.executable, "-m", "pytest_crashpoints._cli.main", "reproduce",
        "--recover", f"renewal_agents:{recovery}", *JUNE, "--points", "CDF",
        "-o", "test_june_alone.py",
    ], project)
    out = run.stdout
    assert run.returncode == status, out + run.stderr
    if invariants is None:
        assert "crashpoints reproduce: not reproduced" in out
        summary = re.search(r"1 crash test\(s\), (\d+) case\(s\)", out)
        assert summary is not None and int(summary[1]) > 3, out
    else:
        assert (f"crashpoints reproduce: the incident reproduces (invariant(s) {invariants})"
                in out)
        assert "minimal schedule: no steps" in out
        assert "setup      0 message(s); providers: payments; from the incident" in out
