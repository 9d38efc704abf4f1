"""``apcir reformulate`` and ``apcir prompt``: offline models, the fake server, kill and resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from fake_openai import FakeOpenAI, Reply

from apcir import datasets
from apcir.contract.reformulations import load_reformulations

SECRET = "sk-test-SECRET-77e1b0"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "APCIR_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)


def test_heuristic_cli_writes_every_turn(run_cli, tmp_path):
    out = tmp_path / "h.jsonl"
    code, stdout, _ = run_cli(
        "reformulate", "--topics", "ikat23-test", "--llm", "heuristic", "--out", str(out), "--json"
    )
    assert code == 0
    summary = json.loads(stdout)
    assert (
        summary["ok"] == 332 and summary["requests"] == 0 and sum(summary["levels"].values()) == 332
    )
    assert len(load_reformulations(out)) == 332


def test_turns_and_judged_only(run_cli, tmp_path):
    out = tmp_path / "m.jsonl"
    code, _, _ = run_cli(
        "reformulate",
        "-t",
        "ikat23-test",
        "-m",
        "manual",
        "-o",
        str(out),
        "--turns",
        "9-1_1,9-1-2",
        "--turns",
        "9-1_3",
    )
    assert code == 0 and sorted(load_reformulations(out)) == ["9-1_1", "9-1_2", "9-1_3"]
    judged_out = tmp_path / "j.jsonl"
    code, _, _ = run_cli(
        "reformulate",
        "-t",
        "ikat23-test",
        "-m",
        "manual",
        "-o",
        str(judged_out),
        "--judged-only",
        "ikat23-test",
    )
    assert code == 0
    assert set(load_reformulations(judged_out)) == set(datasets.qrels("ikat23-test")) & {
        t.turn_id for t in datasets.topics("ikat23-test")
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--turns", "99-9_1"], "turns not in ikat23-test: 99-9_1"),
        (["--structured", "xml"], "--structured 'xml'"),
        (["--llm", "gpt-4o"], "no API key: set OPENAI_API_KEY"),
    ],
)
def test_user_errors_are_one_line(run_cli, tmp_path, args, message):
    base = {"--topics": "ikat23-test", "--llm": "manual", "--out": str(tmp_path / "x.jsonl")}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    argv = [item for pair in base.items() for item in pair]
    code, _, err = run_cli("reformulate", *argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_cli_against_the_fake_server(run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    out = tmp_path / "g.jsonl"
    with FakeOpenAI() as server:
        server.queue(Reply(status=429))
        code, stdout, err = run_cli(
            "reformulate",
            "-t",
            "ikat23-test",
            "-m",
            "gpt-4o",
            "-o",
            str(out),
            "--turns",
            "9-1_1,9-1_2",
            "--base-url",
            server.url,
            "--cache-dir",
            str(tmp_path / "cache"),
            "--retry-delay",
            "0.001",
            "--no-cot",
            "--demonstrations",
            "1",
        )
        assert code == 0, err
        assert server.count == 3
        assert (
            "reasoning"
            not in server.requests[-1]["response_format"]["json_schema"]["schema"]["properties"]
        )
        assert sum(1 for m in server.requests[-1]["messages"] if m["role"] == "assistant") == 1
    assert "requests sent" in stdout and "gpt-4o" in stdout and "cost $" in stdout
    summary = json.loads((tmp_path / "g.summary.json").read_text())
    assert (
        summary["requests"] == 3
        and summary["retries"] == 1
        and summary["config"]["prompt"]["cot"] is False
    )
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text()
    assert SECRET not in stdout + err


def test_cli_401_is_one_clear_line(run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with FakeOpenAI() as server:
        server.queue(Reply(status=401))
        code, _, err = run_cli(
            "reformulate",
            "-t",
            "ikat23-test",
            "-m",
            "gpt-4o",
            "-o",
            str(tmp_path / "x.jsonl"),
            "--turns",
            "9-1_1",
            "--base-url",
            server.url,
            "--cache-dir",
            str(tmp_path / "c"),
        )
    assert (
        code == 2 and "refused the API key" in err and "Traceback" not in err and SECRET not in err
    )


def test_prompt_command(run_cli):
    code, stdout, _ = run_cli("prompt", "--topics", "ikat23-test", "--turn", "9-1_2", "--json")
    assert code == 0
    payload = json.loads(stdout)
    assert payload["turn_id"] == "9-1_2" and len(payload["demonstrations"]) == 3
    code, stdout, _ = run_cli("prompt", "--topics", "ikat23-train", "--stats", "--json")
    stats = json.loads(stdout)
    assert (
        stats["turns"] == 95
        and stats["tokens"]["min"] <= stats["tokens"]["median"] <= stats["tokens"]["max"]
    )


def _cli(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "from apcir.cli.main import main; main()", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_killed_run_resumes_without_asking_finished_turns_again(tmp_path):
    turns = [t.turn_id for t in datasets.topics("ikat23-test")[:10]]
    out = tmp_path / "r.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "APCIR_"))}
    env["OPENAI_API_KEY"] = SECRET
    with FakeOpenAI(delay=0.3) as server:
        args = [
            "reformulate",
            "-t",
            "ikat23-test",
            "-m",
            "gpt-4o",
            "-o",
            str(out),
            "--turns",
            ",".join(turns),
            "--base-url",
            server.url,
            "--no-cache",
            "--concurrency",
            "1",
            "--no-progress",
        ]
        proc = _cli(args, env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
            not out.exists() or len(out.read_text().splitlines()) < 3
        ):
            time.sleep(0.05)
        proc.kill()
        proc.wait()
        assert proc.returncode != 0  # it really was killed mid-run
        finished = set(load_reformulations(out))
        assert 3 <= len(finished) < 10
        asked_before = server.count
        server.delay = 0.0
        proc = _cli(args, env)
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        new_requests = server.requests[asked_before:]
    assert len(new_requests) == 10 - len(finished)
    asked_again = {
        r["messages"][-1]["content"].rsplit("Current utterance", 1)[1] for r in new_requests
    }
    by_id = {t.turn_id: t for t in datasets.topics("ikat23-test")}
    assert not any(by_id[t].utterance in text for t in finished for text in asked_again)
    records = load_reformulations(out)
    assert set(records) == set(turns) and all(r.status == "ok" for r in records.values())
    assert len(out.read_text().splitlines()) == 10
