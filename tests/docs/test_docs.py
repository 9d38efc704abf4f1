"""The documentation site: its reference pages match the code, it builds with --strict, and every example runs.

Examples are the fenced ``bash``, ``python`` and ``console`` blocks of the pages in ``mkdocs.yml``'s nav, run in
nav order in one scratch directory (so a page can use what an earlier one made), on one worker of ``make test``
(which hands each test file to one worker). The
directory starts as `make demo` leaves it: the suite's one demo run (``runs/demo``, its index) is copied in, so the
pages' `apcir run demo` reuses every stage, as it does for a reader who ran `make demo`. A block whose
first line is ``# needs: ...`` names what it needs that the tests do not have, and is not run. A ``console`` block
holds ``$ command`` lines, each followed by output that must appear in what the command prints (a ``...`` line
skips any lines; ``...`` inside a line matches anything).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from shared import clean_env

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RUNNABLE = ("bash", "python", "console")
pytestmark = pytest.mark.slow


def nav_pages() -> list[Path]:
    import yaml

    def walk(entry: object) -> list[str]:
        if isinstance(entry, str):
            return [entry]
        if isinstance(entry, dict):
            return [page for value in entry.values() for page in walk(value)]
        if isinstance(entry, list):
            return [page for item in entry for page in walk(item)]
        return []

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    return [DOCS / page for page in walk(config["nav"])]


@dataclass(frozen=True)
class Block:
    page: str
    number: int
    language: str
    code: str

    @property
    def needs(self) -> str | None:
        first = self.code.lstrip().splitlines()[0] if self.code.strip() else ""
        return first.removeprefix("# needs:").strip() if first.startswith("# needs:") else None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.number}"


def blocks() -> list[Block]:
    found: list[Block] = []
    for page in nav_pages():
        text = page.read_text(encoding="utf-8")
        for number, match in enumerate(re.finditer(r"^```(\w+)[^\n]*\n(.*?)^```\s*$", text, re.M | re.S), start=1):
            found.append(Block(str(page.relative_to(DOCS)), number, match.group(1), match.group(2)))
    return found


EXAMPLES = [b for b in blocks() if b.language in RUNNABLE]


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory, demo) -> tuple[Path, dict[str, str]]:
    """The scratch directory, holding what `make demo` leaves (the suite's one demo run, tests/shared.py): the
    pages' `apcir run demo` then does what it does after `make demo`, reuse every stage."""
    where = demo.copy_into(tmp_path_factory.mktemp("docs-examples"))
    return where, clean_env(where / ".cache" / "llm")


def test_the_examples_are_counted_and_the_unrun_ones_say_why():
    unrun = [b for b in EXAMPLES if b.needs is not None]
    assert EXAMPLES and all(b.needs for b in unrun)
    print(f"{len(EXAMPLES)} examples, {len(EXAMPLES) - len(unrun)} run, {len(unrun)} not run:")
    for block in unrun:
        print(f"  {block.id}: needs {block.needs}")


def _run(command: str, sandbox: tuple[Path, dict[str, str]], language: str = "bash") -> subprocess.CompletedProcess[str]:
    where, env = sandbox
    argv = [sys.executable, "-c", command] if language == "python" else ["bash", "-e", "-o", "pipefail", "-c", command]
    return subprocess.run(argv, cwd=where, env=env, capture_output=True, text=True, timeout=1500)


def _matches(expected: list[str], output: str) -> bool:
    """Each expected line, in order, in the output's lines (``...`` lines skip, ``...`` in a line is a wildcard)."""
    lines = [line.rstrip() for line in output.splitlines()]
    at = 0
    for want in expected:
        if want.strip() == "...":
            continue
        pattern = re.compile(".*".join(re.escape(part.strip()) for part in want.split("...")))
        while at < len(lines) and not pattern.search(lines[at]):
            at += 1
        if at == len(lines):
            return False
        at += 1
    return True


@pytest.mark.parametrize("block", [b for b in EXAMPLES if b.needs is None], ids=lambda b: b.id)
def test_example_runs(block: Block, sandbox):
    if "apcir.llm.local_server" in block.code and importlib.util.find_spec("llama_cpp") is None \
            and os.environ.get("APCIR_REQUIRE_LOCAL_LLM") != "1":
        pytest.skip("llama.cpp's server is not installed (make setup LOCAL_LLM=0)")
    if block.language != "console":
        done = _run(block.code, sandbox, block.language)
        assert done.returncode == 0, f"{block.id} failed:\n{block.code}\n--- stdout\n{done.stdout[-3000:]}\n" \
                                     f"--- stderr\n{done.stderr[-3000:]}"
        return
    command: str | None = None
    expected: list[str] = []
    steps: list[tuple[str, list[str]]] = []
    for line in block.code.splitlines():
        if line.startswith("$ "):
            if command is not None:
                steps.append((command, expected))
            command, expected = line[2:], []
        elif command is not None and line.strip():
            expected.append(line)
    if command is not None:
        steps.append((command, expected))
    assert steps, f"{block.id}: a console block without a $ command"
    for command, want in steps:
        done = _run(command, sandbox)
        output = done.stdout + done.stderr
        assert _matches(want, output), f"{block.id}: `{command}` printed\n{output[-3000:]}\nexpected:\n" + "\n".join(want)


def test_the_reference_pages_match_the_code():
    sys.path.insert(0, str(DOCS))
    try:
        import gen_reference
    finally:
        sys.path.remove(str(DOCS))
    # in a fresh process: registries as installed (a plugin test may have added entries to this one's)
    check = subprocess.run([sys.executable, str(DOCS / "gen_reference.py"), "--check"], capture_output=True,
                           text=True, timeout=300)
    assert check.returncode == 0, check.stderr
    cli = gen_reference.PAGES["cli"].read_text(encoding="utf-8")
    config = gen_reference.PAGES["config"].read_text(encoding="utf-8")
    # every command `apcir --help` lists, and every option it takes, is on the page
    from typer.testing import CliRunner

    from apcir.cli.main import app

    top = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    listed = [name for name in re.findall(r"^│ (\S+)\s", top, re.M) if not name.startswith("-")]
    assert "run" in listed
    for name in listed:
        assert re.search(rf"^## `apcir {re.escape(name)}( |`)", cli, re.M), f"apcir {name} is not in cli.md"
    for name, command in gen_reference.commands():
        for param in command.params:
            for flag in getattr(param, "opts", []):
                if flag.startswith("-") and flag != "--help":
                    assert f"`{flag}`" in cli.split(f"## `{name}`", 1)[1], f"{name} {flag} is not in cli.md"
    # every field of the settings records is a row
    for key, *_ in gen_reference.config_keys():
        assert f"| `{key}` |" in config, key


def test_the_site_builds_strictly(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    assert mkdocs is not None, "mkdocs is not installed (the docs extra)"
    done = subprocess.run([mkdocs, "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()
