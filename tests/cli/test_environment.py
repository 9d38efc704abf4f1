"""Environment variables apcir reads, and those libraries it loads read: a value that cannot be used is one line
naming the variable (exit 2), or a warning, never an internal error or a message about something else (issue 49).

SOURCE_DATE_EPOCH is read by numpy when scipy is first imported and by matplotlib's writers, which fail with a bare
ValueError or OSError: these tests run apcir in a fresh process, where nothing has imported them yet."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from apcir.errors import ApcirError
from apcir.settings import (
    LATEST_SOURCE_DATE,
    MAX_THREADS,
    check_environment,
    secret_from_env,
    source_date_epoch,
    threads_from_env,
)

APCIR = str(Path(sys.executable).parent / "apcir")


def fresh(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``args`` run in a new process (the console script, or python) under this environment plus ``env``."""
    environment = {**os.environ, **env}
    return subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, env=environment, timeout=120)


def one_line(proc: subprocess.CompletedProcess[str], expected: str) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], proc.stderr
    return lines[0]


@pytest.fixture(autouse=True)
def _unset(monkeypatch):
    for name in ("SOURCE_DATE_EPOCH", "APCIR_THREADS", "OPENAI_API_KEY", "OPENAI_BASE_URL", "APCIR_MILVUS_TOKEN",
                 "IKAT_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)


# ---- SOURCE_DATE_EPOCH -------------------------------------------------------------------------------
NOT_A_NUMBER = "expected seconds since 1970-01-01 UTC as a whole number in ASCII digits"
TOO_LARGE = f"too large; the largest value accepted is {LATEST_SOURCE_DATE}"


@pytest.mark.parametrize("value, expected", [
    ("abc", f"SOURCE_DATE_EPOCH='abc': {NOT_A_NUMBER}"),
    ("1.7e9", f"SOURCE_DATE_EPOCH='1.7e9': {NOT_A_NUMBER}"),
    ("²", f"SOURCE_DATE_EPOCH='²': {NOT_A_NUMBER}"),  # str.isdigit() takes it, int() does not
    ("", "SOURCE_DATE_EPOCH is set but empty"),  # numpy's int('') fails too
    ("99999999999999999", f"SOURCE_DATE_EPOCH=99999999999999999: {TOO_LARGE}"),  # was "Value too large ..."
    (str(LATEST_SOURCE_DATE + 1), TOO_LARGE),  # year 10000: datetime cannot write it
    ("9" * 5000, f"SOURCE_DATE_EPOCH=99999999999999999999...(5000 characters): {TOO_LARGE}"),  # past int()'s limit
])
def test_a_bad_source_date_epoch_is_one_line_before_numpy_reads_it(tmp_path, value, expected):
    # `apcir report` imports scipy (so numpy.f2py, which reads the variable) before it reads the run directory
    one_line(fresh([APCIR, "report", str(tmp_path / "no-run")], tmp_path, SOURCE_DATE_EPOCH=value), expected)


def test_apcir_run_checks_it_too(tmp_path):
    one_line(fresh([APCIR, "run", "demo"], tmp_path, SOURCE_DATE_EPOCH="1.7e9"), "SOURCE_DATE_EPOCH='1.7e9'")
    assert not (tmp_path / "runs").exists()


def test_the_python_api_refuses_it_in_one_error_naming_it(tmp_path):
    code = ("import apcir\n"
            "from apcir.errors import ApcirError\n"
            "try:\n"
            "    apcir.evaluate({'1_1': {'d': 1.0}}, {'1_1': {'d': 1}}, 'ndcg_cut_3')\n"
            "except ApcirError as exc:\n"
            "    print('refused:', exc)\n")
    proc = fresh([sys.executable, "-c", code], tmp_path, SOURCE_DATE_EPOCH="abc")
    assert proc.returncode == 0, proc.stderr
    expected = f"refused: SOURCE_DATE_EPOCH='abc': {NOT_A_NUMBER} (e.g. 1700000000), or leave it unset"
    assert proc.stdout.strip() == expected


@pytest.mark.slow
def test_the_largest_value_accepted_is_one_every_reader_can_date(tmp_path):
    """numpy (time.gmtime), apcir's records (datetime) and matplotlib's PDF and SVG writers all take it."""
    code = ("import scipy.sparse\n"  # numpy.f2py reads the variable here
            "from pathlib import Path\n"
            "from apcir.io import timestamp\n"
            "from apcir.evaluation.plots import _pyplot, write_figure\n"
            "fig, axis = _pyplot().subplots(figsize=(1, 1))\n"
            "axis.plot([0, 1], [1, 0])\n"
            "write_figure(fig, Path('a.pdf'))\n"
            "write_figure(fig, Path('a.svg'))\n"
            "print(timestamp())\n")
    proc = fresh([sys.executable, "-c", code], tmp_path, SOURCE_DATE_EPOCH=str(LATEST_SOURCE_DATE))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "9999-12-31T23:59:59+00:00"
    assert b"/CreationDate (D:99991231235959Z)" in (tmp_path / "a.pdf").read_bytes()
    assert b"9999-12-31T23:59:59" in (tmp_path / "a.svg").read_bytes()


@pytest.mark.parametrize("value, expected", [("0", 0), (" 1000000000\n", 1_000_000_000), ("0001", 1),
                                             (str(LATEST_SOURCE_DATE), LATEST_SOURCE_DATE)])
def test_whole_numbers_up_to_the_largest_are_read(monkeypatch, value, expected):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    assert source_date_epoch() == expected
    check_environment()


@pytest.mark.parametrize("value", ["-1", "+5", "1_000", "١٢٣", " ", "12 34"])
def test_what_int_would_take_but_is_not_ascii_digits_is_refused(monkeypatch, value):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    with pytest.raises(ApcirError, match="SOURCE_DATE_EPOCH"):
        source_date_epoch()


# ---- APCIR_THREADS -----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["²", "١", "99999999999999999999", "0", str(MAX_THREADS + 1), "9" * 5000, "2.0"])
def test_apcir_threads_outside_ascii_digits_from_1_to_the_limit_is_one_line(monkeypatch, run_cli, value):
    monkeypatch.setenv("APCIR_THREADS", value)
    rule = f"positive whole number of CPU threads, at most {MAX_THREADS}"
    with pytest.raises(ApcirError, match=f"APCIR_THREADS=.*{rule}"):
        threads_from_env(2)
    code, _, err = run_cli("datasets")  # refused by the CLI before any command (and before a long run starts)
    assert code == 2 and err.startswith("error: APCIR_THREADS=") and len(err.strip().splitlines()) == 1, err


def test_apcir_threads_within_the_range_is_read(monkeypatch):
    assert threads_from_env(3) == 3
    for value, expected in (("1", 1), (f" {MAX_THREADS} ", MAX_THREADS), ("08", 8)):
        monkeypatch.setenv("APCIR_THREADS", value)
        assert threads_from_env(3) == expected


# ---- keys and tokens ---------------------------------------------------------------------------------
@pytest.mark.parametrize("value, expected", [
    ("sk-test\n", "holds a line break at character 8 of 8"),
    ("sk-\r\ntest", "holds a line break at character 4 of 9"),
    ("sk-tést", "holds a character outside ASCII at character 5 of 7"),
    ("sk-\x1btest", "holds a control character at character 4 of 8"),
    (" sk-test", "starts or ends with a space"),
])
def test_a_key_that_cannot_be_sent_is_refused_naming_the_variable_not_the_value(monkeypatch, value, expected):
    monkeypatch.setenv("SOME_KEY", value)
    with pytest.raises(ApcirError, match=expected) as raised:
        secret_from_env("SOME_KEY")
    assert str(raised.value).startswith("SOME_KEY ") and "test" not in str(raised.value)


def test_keys_and_tokens_as_they_are_sent_pass(monkeypatch):
    assert secret_from_env("SOME_KEY") == ""
    monkeypatch.setenv("SOME_KEY", "user:pass word~!")
    assert secret_from_env("SOME_KEY") == "user:pass word~!"


def test_an_openai_key_with_a_line_end_is_refused_before_any_request(monkeypatch, run_cli, tmp_path):
    """Sent, it failed every turn as "APIConnectionError: Connection error.", which says nothing of the key (the
    key is read once the cache has no answer: a progress bar may come first)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-1234\n")
    code, _, err = run_cli("reformulate", "-t", "ikat23-test", "-m", "gpt-4o-mini", "--turns", "9-1_1", "--no-cache",
                           "--base-url", "http://127.0.0.1:9/v1", "-o", str(tmp_path / "r.jsonl"))
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1, err
    assert "OPENAI_API_KEY holds a line break at character 15 of 15" in errors[0]
    assert "secret" not in err and "Connection error" not in err
    monkeypatch.setenv("MY_KEY", "k\x7f")
    code, _, err = run_cli("reformulate", "-t", "ikat23-test", "-m", "gpt-4o-mini", "--turns", "9-1_1", "--no-cache",
                           "--api-key-env", "MY_KEY", "-o", str(tmp_path / "r.jsonl"))
    assert code == 2 and "MY_KEY holds a control character at character 2 of 2" in err, err


@pytest.mark.slow
def test_a_milvus_token_with_a_line_end_is_refused_as_such_not_as_an_unreachable_server(monkeypatch, run_cli,
                                                                                        tmp_path):
    pytest.importorskip("pymilvus")
    monkeypatch.setenv("APCIR_MILVUS_TOKEN", "root:Milvus\n")
    (tmp_path / "q.tsv").write_text("9-1_1\tquery\n")
    code, _, err = run_cli("retrieve", "--index", "milvus://127.0.0.1:9/c", "--queries", str(tmp_path / "q.tsv"),
                           "--out", str(tmp_path / "x.run"))
    assert code == 2 and "APCIR_MILVUS_TOKEN holds a line break" in err and "cannot reach" not in err, err
    assert "Milvus\n" not in err


def test_a_live_token_with_a_line_end_is_refused_before_the_server_is_asked(monkeypatch, run_cli, tmp_path):
    monkeypatch.setenv("IKAT_API_TOKEN", "dGVhbQ==\n")
    code, _, err = run_cli("converse", "demo", "--api", "http://127.0.0.1:9", "--run-id", "r1",
                           "--out", str(tmp_path / "live"))
    assert code == 2 and "IKAT_API_TOKEN holds a line break at character 9 of 9" in err, err


# ---- COLUMNS and LINES (read by rich) ----------------------------------------------------------------
@pytest.mark.parametrize("name, value", [("COLUMNS", "²"), ("COLUMNS", "0"), ("COLUMNS", "9" * 5000),
                                         ("LINES", "²")])
def test_a_terminal_size_that_is_not_one_is_ignored_with_a_warning(tmp_path, name, value):
    """COLUMNS=² (or LINES=²) was a traceback from rich at start-up, COLUMNS=0 printed every table empty."""
    proc = fresh([APCIR, "datasets"], tmp_path, **{name: value})
    assert proc.returncode == 0, proc.stderr
    assert "ikat23-test" in proc.stdout
    assert proc.stderr.startswith(f"warning: {name}=") and "is not a terminal size" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
