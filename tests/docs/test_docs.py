"""The documentation site: its reference pages match the code, it builds with --strict, and every example is run
(by the group modules tests/docs/test_examples_*.py; tests/docs/doc_examples.py says how)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from doc_examples import DOCS, EXAMPLES, GROUPS, ROOT, group_of

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent


def test_the_examples_are_counted_and_the_unrun_ones_say_why():
    unrun = [b for b in EXAMPLES if b.needs is not None]
    assert EXAMPLES and all(b.needs for b in unrun)
    print(f"{len(EXAMPLES)} examples, {len(EXAMPLES) - len(unrun)} run, {len(unrun)} not run:")
    for block in unrun:
        print(f"  {block.id}: needs {block.needs}")


def test_every_run_example_is_in_one_group_and_every_group_has_its_module():
    run = [b for b in EXAMPLES if b.needs is None]
    counts = {name: sum(1 for b in run if group_of(b.page) == name) for name in GROUPS}
    assert sum(counts.values()) == len(run) and all(counts.values()), counts
    for name in GROUPS:
        module = (HERE / f"test_examples_{name}.py").read_text(encoding="utf-8")
        assert f'group_tests("{name}")' in module, f"test_examples_{name}.py does not run the {name} group"


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
