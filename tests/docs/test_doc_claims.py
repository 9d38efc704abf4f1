"""Docs checks that need nothing run (issue 37): what the pages say agrees with what apcir does."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
BLOCK = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```\s*$", re.M | re.S)
ASKS_A_MODEL = re.compile(r"gpt-|--judge|--matcher llm|--matcher-model|rankgpt|OPENAI_API_KEY=|method\s*=\s*\"gpt|"
                          r"--responder (?!extractive)|--method (?!heuristic|manual|file:)", re.I)


def _blocks() -> list[tuple[str, str]]:
    return [(str(page.relative_to(DOCS)), match.group(2)) for page in PAGES
            for match in BLOCK.finditer(page.read_text(encoding="utf-8"))]


MADE_BY_THE_DEMO = ("runs/demo/", "indexes/ikat23-provenance-splade-tiny")
PATH_LIKE = re.compile(r"(?:^|=)(?:[^\s=]*/[^\s]*|[^\s=]+\.(?:json|jsonl|toml|yaml|tsv|run|trec|txt|gguf))$")


def _commands(code: str) -> list[str]:
    """The ``apcir ...`` commands of a block, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line.split(" #")[0].strip() for line in joined.splitlines()
            if re.match(r"\s*(?:[A-Z_]+=\S+\s+)*apcir\s", line)]


def test_a_block_that_needs_an_api_key_runs_no_offline_command():
    """`# needs: OPENAI_API_KEY` over a command that asks no model and reads only what apcir bundles (or the demo
    makes) keeps an offline example from running: each command there asks a model or reads a file of the user's."""
    for page, code in _blocks():
        first = code.lstrip().splitlines()[0] if code.strip() else ""
        if not (first.startswith("# needs:") and "OPENAI_API_KEY" in first):
            continue
        assert ASKS_A_MODEL.search(code), f"{page}: `{first}` over commands that ask no model"
        for command in _commands(code):
            own = [t for t in command.split() if PATH_LIKE.search(t) and not t.startswith(MADE_BY_THE_DEMO)
                   and "runs/demo/" not in t]
            assert ASKS_A_MODEL.search(command) or own or "http" in command, \
                f"{page}: `{command}` is offline and needs nothing of the user's, under `{first}`: give it a " \
                "block of its own that the tests run"


def test_every_install_line_is_the_same_form():
    """From a clone, as the getting-started page installs it: pip install -e '.[EXTRA]' (or make setup)."""
    for page in PAGES:
        for line in re.findall(r"pip install[^`\n]*", page.read_text(encoding="utf-8")):
            if "apcir" in line or ".[" in line:
                assert re.match(r"pip install -e '\.\[[a-z,]+\]'", line), f"{page.name}: {line}"


def test_the_run_directory_files_are_named_as_apcir_writes_them():
    """Lists and systems are written gzipped (RunLayout's RUN_SUFFIX), wherever the docs name them."""
    from apcir.contract.layout import RUN_SUFFIX

    for page in PAGES:
        for name in re.findall(r"`((?:lists|systems)/[^`\s]+?\.run(?:\.gz)?)`", page.read_text(encoding="utf-8")):
            assert name.endswith(RUN_SUFFIX), f"{page.name}: `{name}` (apcir writes {RUN_SUFFIX})"
