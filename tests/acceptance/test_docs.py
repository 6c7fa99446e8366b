"""Every Python example in docs/ runs.

The info string of a fence says how:

- ``python``: run in-process, in order, page by page, in one namespace per page;
- ``python file=NAME.py``: written to the page's project directory (a later block of the same
  name replaces it), for the page's test files to import;
- ``python test`` (optionally ``file=test_NAME.py``): a pytest test file, run with the plugin
  in a subprocess, next to the page's files written so far; it must pass;
- ``python test-fails``: the same, but it must fail (a broken agent caught);
- any other language with ``file=NAME`` (``sh file=mailer.sh``): a file of the page's project
  directory, like a Python one (executable when it starts with ``#!``), for a worker that is a
  command.

A ``text`` block after a test block (before the next Python block) shows that run's output:
its lines starting with ``crashpoints: ``, ``minimal schedule: ``, ``invariant N (...): ``,
``N crash test(s), N case(s)``, ``faults injected (cases): `` and ``NOT CHECKED in `` must be in
the real output, in order, indented as shown (the seed and the text after an invariant's name
may differ). Shell, console, YAML and Markdown blocks are not run.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# An opening fence of three or more backticks, closed by the same number (so a ````markdown
# block may show a ``` block inside it).
FENCE = re.compile(r"^(`{3,})([^\n`]*)\n(.*?)^\1[ \t]*$", re.MULTILINE | re.DOTALL)


@dataclasses.dataclass(frozen=True)
class Block:
    page: Path
    number: int
    language: str
    flags: frozenset[str]
    file: str | None
    code: str
    output: str | None

    @property
    def kind(self) -> str:
        if self.language != "python":
            return "file" if self.file else "other"
        if "test" in self.flags:
            return "test"
        if "test-fails" in self.flags:
            return "test-fails"
        return "file" if self.file else "exec"

    @property
    def filename(self) -> str:
        if self.file:
            return self.file
        stem = re.sub(r"\W", "_", self.page.stem)
        return f"test_{stem}_{self.number}.py"


def blocks_of(page: Path) -> list[Block]:
    found = FENCE.findall(page.read_text(encoding="utf-8"))
    blocks = []
    for number, (_, info, code) in enumerate(found, start=1):
        words = info.split()
        language = words[0] if words else ""
        options = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        flags = frozenset(w for w in words[1:] if "=" not in w)
        output = None
        for _, later_info, later_code in found[number:]:
            later = later_info.split()[:1]
            if later == ["python"]:
                break
            if later == ["text"]:
                output = later_code
                break
        blocks.append(Block(page, number, language, flags, options.get("file"), code, output))
    return blocks


ALL = [b for page in sorted(DOCS.glob("*.md")) for b in blocks_of(page)]
EXEC_PAGES = sorted({b.page for b in ALL if b.kind == "exec"})
TESTS = [b for b in ALL if b.kind in ("test", "test-fails")]


def test_there_are_examples_to_run() -> None:
    assert EXEC_PAGES, "no Python examples found in docs/"
    assert TESTS, "no test-file examples found in docs/"


def test_every_python_block_says_how_it_runs() -> None:
    unknown = [
        f"{b.page.name}[{b.number}] ```{b.language} {' '.join(sorted(b.flags))}"
        for b in ALL
        if b.language == "python" and b.flags - {"test", "test-fails"}
    ]
    assert not unknown, f"python fences with an unknown flag: {unknown}"


def test_every_example_file_is_used_by_a_test() -> None:
    unused = []
    for b in ALL:
        if b.kind != "file":
            continue
        module = (b.file.removesuffix(".py") if b.language == "python" else b.file) or ""
        later = [t for t in TESTS if t.page == b.page and t.number > b.number]
        if not any(re.search(rf"\b{re.escape(module)}\b", t.code) for t in later):
            unused.append(f"{b.page.name}[{b.number}] {b.file}")
    assert not unused, f"example files no test block imports: {unused}"


@pytest.mark.parametrize("page", EXEC_PAGES, ids=[p.name for p in EXEC_PAGES])
def test_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for block in blocks_of(page):
        if block.kind == "exec":
            code = compile(block.code, f"{page.name}[example {block.number}]", "exec")
            exec(code, namespace)


#: Lines of a shown output that the real output must hold exactly (but for escaping).
SHOWN_AS_IS = (
    "crashpoints: ",
    "minimal schedule: ",
    "faults injected (cases): ",
    "NOT CHECKED in ",
)


def _expected_lines(output: str) -> list[str]:
    """The lines of a shown output that a real run must reproduce, as fnmatch patterns."""
    patterns = []
    for shown in output.splitlines():
        line = shown.strip()
        # A line shown indented (a NOT CHECKED entry) must be indented so in the real output.
        indent = shown[: len(shown) - len(shown.lstrip())]
        escaped = re.sub(r"([\[\]?*])", r"[\1]", line)
        if line.startswith(SHOWN_AS_IS):
            patterns.append(escaped)
        elif re.match(r"invariant \d \(.*?\): ", line):
            head = re.match(r"invariant \d \(.*?\): ", line)
            assert head is not None
            patterns.append(indent + re.sub(r"([\[\]?*])", r"[\1]", head.group(0)) + "*")
        elif re.match(r"\d+ crash test\(s\), \d+ case\(s\)", line):
            patterns.append(re.sub(r"seed \d+", "seed *", escaped))
    return patterns


@pytest.mark.parametrize("block", TESTS, ids=[f"{b.page.name}[{b.number}]" for b in TESTS])
def test_test_examples(block: Block, pytester: pytest.Pytester) -> None:
    for earlier in blocks_of(block.page):
        if earlier.number > block.number:
            break
        if earlier.kind in ("file", "test", "test-fails"):
            path = pytester.path / earlier.filename
            path.write_text(earlier.code, encoding="utf-8")
            if earlier.code.startswith("#!"):
                path.chmod(0o755)
    result = pytester.runpytest_subprocess(
        "-p", "crashpoints", "-p", "no:randomly", "-p", "no:cacheprovider", block.filename
    )
    text = "\n".join(result.outlines)
    if block.kind == "test":
        assert result.ret == 0, f"{block.filename} should pass:\n{text}"
    else:
        outcomes = result.parseoutcomes()
        assert result.ret == 1 and outcomes.get("failed"), f"{block.filename} should fail:\n{text}"
        assert block.output, f"a test-fails example needs its output shown after it: {block}"
    if block.output is not None:
        expected = _expected_lines(block.output)
        if block.kind == "test-fails":
            assert expected, "the shown output names no violation to check"
        result.stdout.fnmatch_lines(expected, consecutive=False)


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of a page: lower case, punctuation dropped, spaces to -."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    headings = re.findall(r"^#+ (.*)$", text, re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_links_between_pages_resolve() -> None:
    broken = []
    for page in sorted(DOCS.glob("*.md")):
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if "://" in target:
                continue
            name, _, anchor = target.partition("#")
            linked = (page.parent / name) if name else page
            if not linked.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_reference_names_every_public_name() -> None:
    import pytest_crashpoints
    from pytest_crashpoints import harness

    text = (DOCS / "reference.md").read_text(encoding="utf-8")
    names = [*pytest_crashpoints.__all__, *harness.__all__]
    missing = [name for name in names if not re.search(rf"`{name}\b", text)]
    assert not missing, f"docs/reference.md does not document: {missing}"


def test_the_architecture_page_names_every_module_and_only_real_ones() -> None:
    """docs/architecture.md maps the package: every module of it, and no module that is gone."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    package = ROOT / "pytest_crashpoints"
    modules = {
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if path.name != "__init__.py"
    }
    named = set(re.findall(r"`((?:_[a-z]+/(?:[a-z_]+/)*)?[a-z_][a-z0-9_]*\.py)`", text))
    named -= {"__init__.py"}
    assert sorted(modules - named) == [], "modules the architecture page does not name"
    assert sorted(named - modules) == [], "the architecture page names modules that do not exist"
    subpackages = {
        str(init.parent.relative_to(package)) for init in package.rglob("*/__init__.py")
    }
    assert sorted(subpackages - set(re.findall(r"`((?:_?[a-z]+/)*_?[a-z]+)/`", text))) == []


def test_the_javascript_helper_shown_is_the_one_the_node_scenario_runs() -> None:
    page = (DOCS / "howto-any-language.md").read_text(encoding="utf-8")
    shown = [code for _, info, code in FENCE.findall(page) if info.strip() == "js"]
    assert shown == [(ROOT / "scenarios" / "node" / "crashpoints.js").read_text(encoding="utf-8")]
