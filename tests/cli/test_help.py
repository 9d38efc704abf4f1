"""`apcir --help` quick (no command module imported), the command list read from the modules as they register
their commands, and boolean flags shown as flags (issue 37)."""

from __future__ import annotations

import json
import subprocess
import sys

import typer

from apcir.cli.lazy import command_index
from apcir.cli.main import app


def test_the_top_level_help_imports_no_command_and_nothing_heavy():
    """What makes `apcir --help` take seconds is importing the commands (numpy, scipy, pydantic, ...): none is.
    (Its time is measured, not asserted: `time .venv/bin/apcir --help`.)"""
    code = ("import sys, json\nfrom apcir.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(json.dumps(sorted(sys.modules)), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    loaded = set(json.loads(done.stderr.strip().splitlines()[-1]))
    assert "Commands" in done.stdout and "evaluate-responses" in done.stdout
    assert not [m for m in loaded if m.startswith("apcir.cli.") and m.endswith("_commands")]
    assert not {"numpy", "scipy", "pydantic", "torch", "pandas"} & loaded


def test_the_command_list_is_what_the_modules_register():
    """The index read from the source (names and help) equals the commands the modules register for real."""
    real = typer.main.get_command(app)
    loaded = dict(real.commands.items())  # reading them all imports them all
    index = command_index()
    assert list(index) == list(loaded)
    for name, entry in index.items():
        assert (entry.help or "").strip() == (loaded[name].help or "").strip(), name


def test_flags_are_shown_as_flags(run_cli):
    real = typer.main.get_command(app)

    def leaves(prefix, command):
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                yield from leaves([*prefix, name], sub)
        else:
            yield prefix

    for path in [[], *leaves([], real)]:
        code, out, err = run_cli(*path, "--help")
        assert code == 0, (path, err)
        assert "<bool>" not in out, f"apcir {' '.join(path)} --help shows a flag as taking a value"
    code, out, _ = run_cli("evaluate", "--help")
    assert "--complete" in out
