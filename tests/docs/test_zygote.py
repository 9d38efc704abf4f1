"""The pre-imported ``apcir`` the documentation's examples run through (tests/docs/zygote.py) hands a command over
as the console script would run it: the same output, errors and exit status, in the caller's working directory and
environment, with a SIGTERM passed on."""

from __future__ import annotations

import subprocess

import pytest
from shared import clean_env
from zygote import Zygote

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shell(tmp_path_factory):
    """``run(command, real=False)``: a bash line in a scratch folder, with the zygote's ``apcir`` first on PATH
    (``real``: the console script instead)."""
    where = tmp_path_factory.mktemp("zygote-work")
    env = clean_env(where / ".cache" / "llm")
    with Zygote(tmp_path_factory.mktemp("zygote"), env, where) as zygote:
        handed = {**env, "PATH": zygote.path}

        def run(command: str, real: bool = False) -> subprocess.CompletedProcess[str]:
            return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", command], cwd=where,
                                  env=env if real else handed, capture_output=True, text=True, timeout=300)

        run.where = where  # type: ignore[attr-defined]
        yield run


def test_the_apcir_on_path_is_the_handing_over_script(shell):
    path = shell("command -v apcir").stdout.strip()
    assert "zygote" in open(path, encoding="utf-8").read()
    assert shell("command -v apcir", real=True).stdout.strip() != path


@pytest.mark.parametrize("command", [
    "apcir --help",
    "apcir --version",
    "apcir index build --help",
    "COLUMNS=60 apcir evaluate --help",  # the caller's environment, not the zygote's (COLUMNS=200)
    "apcir evaluate no-such.run --qrels ikat23-test-provenance",
    "apcir run no-such-config",
    "apcir frobnicate",
])
def test_a_command_prints_and_exits_as_the_console_script_does(shell, command):
    handed, real = shell(command), shell(command, real=True)
    assert (handed.returncode, handed.stdout, handed.stderr) == (real.returncode, real.stdout, real.stderr)


def test_a_command_works_in_the_callers_folder(shell):
    (shell.where / "sub").mkdir(exist_ok=True)
    done = shell("cd sub && apcir prompt --topics ikat23-test --stats > stats.txt && wc -l < stats.txt")
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0 and (shell.where / "sub" / "stats.txt").exists()


def test_a_sigterm_reaches_the_command_and_its_status_says_so(shell):
    done = shell("export IKAT_API_TOKEN=local\n"
                 "apcir simulate-user --topics ikat23-test --conversations 1 --port 0 > sim.log 2>&1 &\n"
                 "for _ in $(seq 100); do grep -q 127.0.0.1 sim.log 2>/dev/null && break; sleep 0.2; done\n"
                 "kill %1\nstatus=0; wait %1 || status=$?\necho \"status $status\"\n")
    assert "status 143" in done.stdout, done.stdout + done.stderr + (shell.where / "sim.log").read_text()
    running = subprocess.run(["pgrep", "-f", "simulate-user --topics ikat23-test --conversations 1 --port 0"],
                             capture_output=True, text=True).stdout.split()
    assert not running, running  # the command itself ended, not only the script that handed it over
