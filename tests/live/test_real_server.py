"""``apcir converse`` against the organisers' real simulation server (Sim.API, its ``dummy`` task: ``dummy1`` "Why
is the sky blue?" and ``dummy2`` "Why is the sky not green?", one question each, then "Thanks for your
response!"). The server runs in its own environment (tests/sim_api.py): its pins, and import stand-ins for torch,
transformers and sentence_transformers, which the dummy task never calls (tests/sim_api_standins/).

Kills: a proxy in front of the server forwards each request and can hold back a reply the server has already
answered (recorded), so that ``kill -9`` lands exactly after the server recorded an answer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import apcir
from apcir.contract.responses import load_responses
from apcir.live import errors as codes
from apcir.live.client import SimulationClient
from apcir.live.converse import DUMP_FILE, JOURNAL, RUN_FILE
from apcir.live.protocol import PROTOCOLS, count_tokens, fit_tokens

QUESTIONS = {"dummy1": "Why is the sky blue?", "dummy2": "Why is the sky not green?"}


def _journal(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / JOURNAL).read_text(encoding="utf-8").splitlines()]


def _answers(requests: list[dict]) -> list[str]:
    """The non-empty responses sent to a continue endpoint, in order."""
    return [r["body"]["response"] for r in requests if r["route"].endswith("continue") and r["body"]["response"]]


def _converse(run_cli, monkeypatch, token: str, config: Path, api: str, run_id: str, out: Path, *extra: str):
    monkeypatch.setenv("IKAT_API_TOKEN", token)
    return run_cli("converse", str(config), "--api", api, "--run-id", run_id, "-o", str(out), *extra)


def test_a_whole_run_completes_and_the_servers_record_is_apcirs(real_server, real_token, live_toml, tmp_path,
                                                                 run_cli, monkeypatch):
    out = tmp_path / "run"
    code, stdout, err = _converse(run_cli, monkeypatch, real_token, live_toml, real_server.url, "whole", out)
    assert code == 0, err
    assert "recorded: 2 of 2 answers match" in stdout
    client = SimulationClient(real_server.url, real_token, PROTOCOLS[2026])
    status = client.status("whole")
    assert status.status == "complete" and status.open_topics == [] and status.done_topics == ["dummy1", "dummy2"]
    dump = client.dump("whole")
    answered = [r for r in dump if r["responses"][0]["assistant_text"] is not None]
    assert [r["metadata"]["topic_id"] for r in answered] == ["dummy1_1", "dummy2_1"]  # one answer per question
    responses = load_responses(out / "responses.jsonl")
    assert [r["responses"][0]["assistant_text"] for r in answered] == [responses["dummy1_1"].text,
                                                                       responses["dummy2_1"].text]
    assert [r["responses"][0]["user_utterance"] for r in answered] == list(QUESTIONS.values())
    live = apcir.load_run(out / RUN_FILE)
    assert sorted(live) == ["dummy1_1", "dummy2_1"]
    sent = {e["turn_id"]: e for e in _journal(out) if e["event"] == "answer"}
    for record in answered:
        turn = record["metadata"]["topic_id"]
        assert record["responses"][0]["assistant_citations"] == sent[turn]["citations"]
        assert len(sent[turn]["citations"]) == 10  # 2026: the fused ranking's top 10
        assert record["responses"][0]["assistant_meta"] == {"ptkb_provenance": sent[turn]["provenance"]}
        assert record["metadata"]["extra"] == {"track_persona": False}
    saved = [json.loads(line) for line in (out / DUMP_FILE).read_text(encoding="utf-8").splitlines()]
    assert saved == dump  # the server's record, beside the outputs
    assert real_token not in stdout + err + "".join(p.read_text(errors="replace") for p in out.rglob("*")
                                                   if p.is_file())


def test_the_first_turn_prompt_holds_the_current_utterance_once_and_no_earlier_turn(real_server, real_token, live_toml,
                                                                                     tmp_path, run_cli, monkeypatch):
    """The server's history already ends with the current utterance: it is the turn, never an earlier one."""
    from fake_openai import FakeOpenAI

    def answer(body):
        return json.dumps({"reasoning": "r", "level": "a", "rewrite": "why is the sky blue", "response": "light",
                           "third_rewrite": "why is the sky blue", "third_response": "scattering",
                           "ptkb_used": []})

    with FakeOpenAI(content=answer) as llm:
        config = tmp_path / "llm.toml"
        config.write_text(live_toml.read_text() + f'[reformulator]\nmethod = "gpt-test"\nbase_url = "{llm.url}"\n'
                          f'cache_dir = "{tmp_path / "cache"}"\nconcurrency = 1\n')
        monkeypatch.setenv("OPENAI_API_KEY", "unused")
        code, _, err = _converse(run_cli, monkeypatch, real_token, config, real_server.url, "prompt",
                                 tmp_path / "run")
        assert code == 0, err
        first = llm.requests[0]["messages"]
    prompt = "\n".join(m["content"] for m in first)
    assert prompt.count(QUESTIONS["dummy1"]) == 1, prompt
    from apcir.contract.reformulations import load_reformulations

    records = load_reformulations(tmp_path / "run" / "reformulations.jsonl")
    assert sorted(records) == ["dummy1_1", "dummy2_1"]
    turn = next(e for e in _journal(tmp_path / "run") if e["event"] == "utterance")["reply"]
    assert turn["history"] == [{"role": "user", "content": QUESTIONS["dummy1"]}]  # as the server sends it


def test_a_refused_token_then_the_right_one_in_the_same_directory_completes(real_server, real_token, live_toml,
                                                                            tmp_path, run_cli, monkeypatch):
    out = tmp_path / "run"
    code, _, err = _converse(run_cli, monkeypatch, "not base64!", live_toml, real_server.url, "token", out)
    assert code == codes.TOKEN_REFUSED and "400" in err and "base64" in err and err.count("\n") == 1, err
    code, _, err = _converse(run_cli, monkeypatch, "bm90LXRoZS10b2tlbg==", live_toml, real_server.url, "token", out)
    assert code == codes.TOKEN_REFUSED and "401" in err and "bm90LXRoZS10b2tlbg==" not in err, err
    code, stdout, err = _converse(run_cli, monkeypatch, real_token, live_toml, real_server.url, "token", out)
    assert code == 0, err
    assert "recorded: 2 of 2 answers match" in stdout
    assert sorted(apcir.load_run(out / RUN_FILE)) == ["dummy1_1", "dummy2_1"]
    # a taken run id, from another directory: 412, its own exit status, and nothing sent
    code, _, err = _converse(run_cli, monkeypatch, real_token, live_toml, real_server.url, "token", tmp_path / "x")
    assert code == codes.RUN_ID_TAKEN and "412" in err, err


def _long_config(live_toml: Path, folder: Path) -> Path:
    """The live experiment with an extractive responder whose answers run to about 400 words: over the 250 tokens
    the organisers' server takes, within the 512 of the 2026 protocol (the tests check both)."""
    config = folder / "long.toml"
    config.write_text(live_toml.read_text() + '[respond]\ntop_k = 10\nmax_words = 400\nmax_sentences = 50\n')
    return config


def _continues(requests: list[dict]) -> list[dict]:
    return [r for r in requests if r["route"].endswith("continue")]


@pytest.mark.slow
def test_a_2026_run_learns_the_limit_the_server_names_when_it_refuses_and_completes(real_server, real_token,
                                                                                      live_toml, tmp_path, run_cli,
                                                                                      monkeypatch, proxy):
    """The 2026 protocol cuts at 512 tokens; the organisers' snapshot takes 250 and refuses the first answer (422,
    naming its limit): apcir journals the limit, cuts that answer to it, sends it again and cuts every later one
    to it, within the same command."""
    out = tmp_path / "run"
    code, stdout, err = _converse(run_cli, monkeypatch, real_token, _long_config(live_toml, tmp_path), proxy.url,
                                  "learn", out)
    assert code == 0, err
    assert "recorded: 2 of 2 answers match" in stdout
    assert "response limit: 250 tokens, the server's" in " ".join(stdout.split())
    assert "named its limit, 250 tokens" in " ".join(err.split()), err
    sent = _continues(proxy.requests)
    assert [r["status"] for r in sent] == [422, 200, 200, 200], sent  # answer 1, again, closing words, answer 2
    refused = sent[0]["body"]["response"]
    assert 250 < count_tokens(refused) <= 512  # what the 2026 limit let through, and the server refused
    assert sent[1]["body"]["response"] == fit_tokens(refused, 250)[0] and refused.startswith(sent[1]["body"]["response"])
    journal = _journal(out)
    limits = [e for e in journal if e["event"] == "limit"]
    assert len(limits) == 1 and limits[0]["response_tokens"] == 250 and limits[0]["was"] == 512
    assert limits[0]["turn_id"] == "dummy1_1" and "exceeds limit of 250 tokens" in limits[0]["detail"]
    answers = [e for e in journal if e["event"] == "answer"]
    assert [(a["turn_id"], a.get("refitted")) for a in answers] == [("dummy1_1", None), ("dummy1_1", 250),
                                                                   ("dummy2_1", None)]
    assert answers[0]["response"] == refused  # the refused answer is kept, the fitted one after it
    assert answers[2]["trimmed"] and count_tokens(answers[2]["response"]) <= 250  # cut to 250 before it was sent
    dump = SimulationClient(real_server.url, real_token, PROTOCOLS[2026]).dump("learn")
    texts = [r["responses"][0]["assistant_text"] for r in dump if r["responses"][0]["assistant_text"] is not None]
    assert texts == [answers[1]["response"], answers[2]["response"]]  # the server holds the fitted answers


@pytest.mark.slow
def test_a_resumed_run_keeps_the_limit_it_learned(real_server, real_token, live_toml, tmp_path, proxy):
    """Killed right after the fitted answer was recorded, the same command reads the learned limit back from the
    journal: the next answer goes out cut to 250 tokens, with no refusal."""
    env = {**os.environ, "IKAT_API_TOKEN": real_token}
    out = tmp_path / "run"
    command = _command(_long_config(live_toml, tmp_path), proxy.url, "learn-resume", out)
    proxy.hold = {2}  # the 422, then the fitted answer: recorded, its reply held back
    _kill_when_held(command, env, proxy)
    assert [e["event"] for e in _journal(out)].count("limit") == 1
    before = len(proxy.requests)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["learned_limit"] == 250 and summary["response_tokens"] == 250 and summary["answered"] == 1
    assert summary["record"]["matched"] == 2
    assert "the limit the server named" in " ".join(done.stderr.split()), done.stderr
    resumed = _continues(proxy.requests[before:])
    assert [r["status"] for r in resumed] == [200, 200], resumed  # the closing words, answer 2: no 422
    last = [e for e in _journal(out) if e["event"] == "answer"][-1]
    assert last["turn_id"] == "dummy2_1" and last["trimmed"] and resumed[-1]["body"]["response"] == last["response"]
    assert count_tokens(last["response"]) <= 250


@pytest.mark.slow
def test_a_refusal_that_names_no_lower_limit_stops_with_the_answer_kept(real_server, real_token, live_toml, tmp_path,
                                                                        run_cli, monkeypatch, proxy):
    """The server's own refusals, their wording changed by the proxy: one naming no limit stops at once (exit 7,
    nothing sent again); one naming a limit the server does not apply (300, where it checks 250) is followed
    once, and the second refusal stops (never a loop)."""
    config = _long_config(live_toml, tmp_path)

    def unnamed(route: str, status: int, body: bytes) -> bytes:
        return body.replace(b" Response exceeds limit of 250 tokens.", b"") if status == 422 else body

    proxy.rewrite = unnamed
    out = tmp_path / "unnamed"
    code, _, err = _converse(run_cli, monkeypatch, real_token, config, proxy.url, "unnamed", out)
    assert code == codes.ANSWER_REFUSED, err
    error = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "422" in error[0] and "Response is too long (" in error[0], err
    assert "names no limit" in error[0] and "--response-tokens" in error[0]
    assert [r["status"] for r in _continues(proxy.requests)] == [422]  # nothing sent again
    journal = _journal(out)
    assert not [e for e in journal if e["event"] == "limit"]
    kept = [e for e in journal if e["event"] == "answer"]
    assert len(kept) == 1 and 250 < count_tokens(kept[0]["response"]) <= 512  # the refused answer, kept
    assert kept[0]["response"][:60] not in err  # the error says why, without the answer
    # the same command with a lower --response-tokens cuts the kept answer and completes
    proxy.rewrite = None
    code, stdout, err = _converse(run_cli, monkeypatch, real_token, config, proxy.url, "unnamed", out,
                                  "--response-tokens", "250")
    assert code == 0 and "recorded: 2 of 2 answers match" in stdout, err
    assert kept[0]["response"].startswith(_answers(proxy.requests)[1])  # the journaled answer, cut: not recomputed

    def misnamed(route: str, status: int, body: bytes) -> bytes:
        return body.replace(b"limit of 250 tokens", b"limit of 300 tokens") if status == 422 else body

    proxy.rewrite = misnamed
    before = len(proxy.requests)
    out = tmp_path / "misnamed"
    code, _, err = _converse(run_cli, monkeypatch, real_token, config, proxy.url, "misnamed", out)
    assert code == codes.ANSWER_REFUSED, err
    error = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "again after it was cut to its limit of 300 tokens" in error[0], err
    sent = _continues(proxy.requests[before:])
    assert [r["status"] for r in sent] == [422, 422]  # the answer, then once cut to 300: then it stops
    assert 250 < count_tokens(sent[1]["body"]["response"]) <= 300
    assert [e["response_tokens"] for e in _journal(out) if e["event"] == "limit"] == [300]


def test_protocol_2025_fields_the_server_ignores_are_reported_not_lost(real_server, real_token, live_toml, tmp_path,
                                                                       run_cli, monkeypatch):
    code, stdout, err = _converse(run_cli, monkeypatch, real_token, live_toml, real_server.url, "y2025",
                                  tmp_path / "run", "--protocol", "2025", "--track-persona")
    assert code == codes.RECORD_DIFFERS, err
    assert "recorded: 2 of 2 answers match" in stdout  # texts and citations arrived
    assert "track_persona: sent true, the server stored null" in err and "--protocol 2025" in err, err
    dump = SimulationClient(real_server.url, real_token, PROTOCOLS[2025]).dump("y2025")
    assert all(r["metadata"]["extra"] is None for r in dump)
    assert len(dump[0]["responses"][0]["assistant_citations"]) > 10  # 2025: up to 1,000 (2026: 10)


def _command(config: Path, api: str, run_id: str, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "apcir", "converse", str(config), "--api", api, "--run-id", run_id, "-o", str(out),
            "--json", *extra]


def _kill_when_held(command: list[str], env: dict[str, str], proxy) -> None:
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not proxy.held.is_set():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the held reply was never reached"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    proxy.hold.clear()
    proxy.release.set()


@pytest.mark.slow
def test_kill_9_right_after_the_server_recorded_the_last_answer_then_the_same_command(real_server, real_token,
                                                                                    live_toml, tmp_path, proxy):
    env = {**os.environ, "IKAT_API_TOKEN": real_token}
    out = tmp_path / "run"
    command = _command(live_toml, proxy.url, "kill-last", out)
    proxy.hold = {3}  # answer 1, the closing words' empty answer, answer 2: the run's last answer
    _kill_when_held(command, env, proxy)
    assert not (out / RUN_FILE).exists()
    before = len(proxy.requests)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["answered"] == 0 and summary["record"] == {"total": 2, "matched": 2, "differences": [],
                                                              "error": None}
    after = [r["route"] for r in proxy.requests[before:]]
    assert after == ["run/session", "run/status", "run/dump"], after  # 500 between topics: status at once
    assert proxy.requests[before]["status"] == 500
    assert len(_answers(proxy.requests)) == 2, "nothing sent twice"
    assert sorted(apcir.load_run(out / RUN_FILE)) == ["dummy1_1", "dummy2_1"]
    assert (out / "responses.jsonl").exists() and (out / DUMP_FILE).exists()
    client = SimulationClient(real_server.url, real_token, PROTOCOLS[2026])
    assert client.status("kill-last").status == "complete"
    assert real_token not in done.stdout + done.stderr


@pytest.mark.slow
def test_a_killed_debug_run_resumes_through_debug_session_and_completes(real_server, real_token, live_toml, tmp_path,
                                                                       proxy):
    env = {**os.environ, "IKAT_API_TOKEN": real_token}
    out = tmp_path / "run"
    command = _command(live_toml, proxy.url, "kill-debug", out, "--debug")
    proxy.hold = {1}  # the first answer, recorded
    _kill_when_held(command, env, proxy)
    before = len(proxy.requests)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    after = [r["route"] for r in proxy.requests[before:] if r["route"] != "budget/check"]
    assert after == ["debug/session", "debug/continue", "debug/continue"], after  # no run/session, no status
    assert proxy.requests[before + 1]["status"] == 500  # (after budget/check) no session open: between topics
    answers = [r["body"] for r in proxy.requests if r["route"] == "debug/continue" and r["body"]["response"]]
    assert len(answers) == 2, "each question answered once"
    assert json.loads(done.stdout)["record"] is None  # a debug run has no dump
    assert sorted(apcir.load_run(out / RUN_FILE)) == ["dummy1_1", "dummy2_1"]
    events = [e["event"] for e in _journal(out)]
    assert events.count("start") == 1 and events[-1] == "end"


@pytest.mark.slow
def test_kill_9_between_a_start_the_server_accepted_and_its_reply_then_the_same_command(real_server, real_token,
                                                                                       live_toml, tmp_path, proxy):
    """The start's fate is unknown to the journal (its intent only): the next command gets 412 and, the server's
    session being at the run's first utterance with nothing answered, goes on with that run."""
    env = {**os.environ, "IKAT_API_TOKEN": real_token}
    out = tmp_path / "run"
    command = _command(live_toml, proxy.url, "kill-start", out)
    proxy.hold = {"run/start"}
    _kill_when_held(command, env, proxy)
    assert [e["event"] for e in _journal(out)] == ["starting"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert [r["route"] for r in proxy.requests][:4] == ["run/start", "run/start", "run/session", "run/status"]
    assert proxy.requests[1]["status"] == 412
    assert len(_answers(proxy.requests)) == 2
    assert json.loads(done.stdout)["record"]["matched"] == 2


def test_check_verifies_the_token_and_shows_the_budget_spending_nothing(real_server, real_token, tmp_path, run_cli,
                                                                        monkeypatch, proxy):
    """--check needs no config and no run id: auth/verify and budget/check only; the budget is the same after."""
    client = SimulationClient(real_server.url, real_token, PROTOCOLS[2026])
    before = client.budget()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IKAT_API_TOKEN", real_token)
    code, stdout, err = run_cli("converse", "--api", proxy.url, "--check")
    assert code == 0, err
    left = before["remaining"]
    assert stdout.splitlines() == [f"token accepted: team apcir-tests ({proxy.url})",
                                   f"budget left: debug: {left['debug']['remaining']} sessions, "
                                   f"run: {left['run']['remaining']} runs"]
    code, stdout, err = run_cli("converse", "--api", proxy.url, "--check", "--json")
    assert code == 0, err
    assert json.loads(stdout) == {"api": proxy.url, "team_id": "apcir-tests", "budget": before["remaining"]}
    assert proxy.routes() == ["auth/verify", "budget/check"] * 2  # no start, no continue, nothing else
    assert client.budget() == before
    assert list(tmp_path.iterdir()) == []  # nothing written
    assert real_token not in stdout + err
    # the token refused: exit 5, one line, the token not in it
    monkeypatch.setenv("IKAT_API_TOKEN", "bm90LXRoZS10b2tlbg==")
    code, stdout, err = run_cli("converse", "--api", real_server.url, "--check")
    assert code == codes.TOKEN_REFUSED and "401" in err and err.count("\n") == 1, err
    monkeypatch.setenv("IKAT_API_TOKEN", "not base64!")
    code, _, err = run_cli("converse", "--api", real_server.url, "--check")
    assert code == codes.TOKEN_REFUSED and "base64" in err and "not base64!" not in err, err
    # no server there: exit 9, at once (one retry); an address that is not the API's: one line, exit 2
    monkeypatch.setenv("IKAT_API_TOKEN", real_token)
    import sim_api

    started = time.monotonic()
    code, _, err = run_cli("converse", "--api", f"http://127.0.0.1:{sim_api.free_port()}/", "--check")
    assert code == codes.SERVER_FAILING and "cannot reach" in err and err.count("\n") == 1, err
    assert time.monotonic() - started < 10
    code, _, err = run_cli("converse", "--api", f"http://127.0.0.1:{real_server.port}/no-api-here/", "--check")
    assert code == codes.USER_ERROR and "no auth/verify there (404)" in err and err.count("\n") == 1, err
    assert client.budget() == before


@pytest.mark.slow
def test_a_second_converse_on_the_same_directory_is_refused_at_once_and_the_first_completes(real_server, real_token,
                                                                                            live_toml, tmp_path,
                                                                                            proxy):
    """Two commands on one run directory: the second stops in one line before it reads the journal or asks the
    server anything (apcir run's lock); the first, its answer's reply held meanwhile, then completes."""
    env = {**os.environ, "IKAT_API_TOKEN": real_token}
    out = tmp_path / "run"
    command = _command(live_toml, proxy.url, "two", out)
    proxy.hold = {1}  # the first answer: recorded, its reply held while the second command tries
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not proxy.held.is_set():
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "the held reply was never reached"
        time.sleep(0.05)
    journal = (out / JOURNAL).read_bytes()
    requests = len(proxy.requests)
    started = time.monotonic()
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    assert second.returncode == codes.USER_ERROR, second.stderr
    assert second.stderr.count("\n") == 1 and "being written by another apcir process" in second.stderr
    assert f"held by pid {first.pid}" in second.stderr, second.stderr
    assert (out / JOURNAL).read_bytes() == journal and len(proxy.requests) == requests  # nothing touched
    assert took < 30, took  # at once: no index loaded, no retries (the process's start is most of it)
    proxy.hold.clear()
    proxy.release.set()  # the first command's reply is lost: it asks where the run stands and goes on
    stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr
    assert json.loads(stdout)["record"]["matched"] == 2
    events = [e["event"] for e in _journal(out)]
    assert events.count("starting") == 1 and events.count("start") == 1 and events[-1] == "end"
