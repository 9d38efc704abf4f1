"""The documentation's examples: the fenced ``bash``, ``python`` and ``console`` blocks of the pages in
``mkdocs.yml``'s nav.

They run in groups (:data:`GROUPS`), each group's pages in nav order in one scratch directory of its own (so a
page can use what an earlier page of its group made), one test module per group (tests/docs/test_examples_*.py;
``make test`` hands each test file to one worker, so the groups run side by side). The directory starts as
`make demo` leaves it: the suite's one demo run (``runs/demo``, its index) is copied in, so the pages' `apcir run
demo` reuses every stage, as it does for a reader who ran `make demo`. A block whose first line is
``# needs: ...`` names what it needs that the tests do not have, and is not run. A ``console`` block holds
``$ command`` lines, each followed by output that must appear in what the command prints (a ``...`` line skips
any lines; ``...`` inside a line matches anything). The group's ``apcir`` commands run through a pre-imported
process (tests/docs/zygote.py), each still a process of its own.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from shared import DemoRun, clean_env
from zygote import Zygote

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RUNNABLE = ("bash", "python", "console")


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


def make_sandbox(demo: DemoRun, where: Path) -> tuple[Path, dict[str, str]]:
    """A group's scratch directory, holding what `make demo` leaves (a copy of the suite's one demo run,
    tests/shared.py): the pages' `apcir run demo` then does what it does after `make demo`, reuse every stage."""
    demo.copy_into(where)
    return where, clean_env(where / ".cache" / "llm")


def check_example(block: Block, sandbox: tuple[Path, dict[str, str]]) -> None:
    """Run one example in the sandbox: a ``bash``/``python`` block must exit 0; each ``$ command`` of a ``console``
    block must print its expected lines."""
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


GROUPS: dict[str, tuple[str, ...]] = {
    "indexes": ("guide/retrieval.md", "how-to/sharding.md", "how-to/gpus.md"),
    "tutorials": ("tutorials/", "guide/reformulation.md", "guide/evaluate.md", "guide/report.md"),
    "guides": ("",),  # every other page: the other guides, the how-to pages, the reference
}
"""The examples run in groups, each in its own copy of the demo, one test module per group (so the groups run
on different workers): a group holds the pages that use what another of its pages made (the tutorials write
``theirs.tsv``, ``runs/theirs`` and ``qrels-apply.txt``, which the reformulation, evaluation and report guides
use). A page goes to the first group with a prefix of its path; every run example is in exactly one group
(tests/docs/test_docs.py checks)."""


def group_of(page: str) -> str:
    for name, prefixes in GROUPS.items():
        if any(page.startswith(prefix) for prefix in prefixes):
            return name
    raise KeyError(f"{page} is in no group of tests/docs/doc_examples.py")


def examples_of(group: str) -> list[Block]:
    """The run examples of a group, in the site's page order."""
    return [b for b in EXAMPLES if b.needs is None and group_of(b.page) == group]


def group_tests(group: str) -> tuple[Any, Any]:
    """The module-scoped ``sandbox`` fixture and the parametrized ``test_example_runs`` of one group's module::

        sandbox, test_example_runs = group_tests("indexes")
    """

    @pytest.fixture(scope="module")
    def sandbox(tmp_path_factory: pytest.TempPathFactory, demo: DemoRun) -> Iterator[tuple[Path, dict[str, str]]]:
        where, env = make_sandbox(demo, tmp_path_factory.mktemp(f"docs-{group}"))
        with Zygote(tmp_path_factory.mktemp(f"zygote-{group}"), env, where) as zygote:
            yield where, {**env, "PATH": zygote.path}

    @pytest.mark.slow
    @pytest.mark.parametrize("block", examples_of(group), ids=lambda b: b.id)
    def test_example_runs(block: Block, sandbox: tuple[Path, dict[str, str]]) -> None:
        check_example(block, sandbox)

    return sandbox, test_example_runs
