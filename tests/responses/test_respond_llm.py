"""The LLM responder against the local OpenAI-protocol server: one request per turn, the cache, one repair, resume."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from fake_openai import FakeOpenAI

from apcir import datasets
from apcir.contract.responses import load_responses
from apcir.responses.job import build_jobs
from apcir.responses.ptkb import profile_order, write_ptkb_run
from apcir.responses.settings import RespondSettings
from apcir.responses.stage import respond

SECRET = "sk-test-SECRET-5e0c2a"
TURNS = datasets.topics("ikat23-test")[:6]
IDS = sorted(p.id for p in datasets.iter_collection(datasets.collection_path("ikat23-provenance")))[:40]
RUN = {t.turn_id: {pid: 10.0 - j for j, pid in enumerate(IDS[i: i + 8])} for i, t in enumerate(TURNS)}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "APCIR_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)


@pytest.fixture(scope="module")
def texts():
    return datasets.passage_texts(datasets.collection_path("ikat23-provenance"), IDS)


def answer(body) -> str:
    """A valid response: cites [1] and [2], uses the first statement listed."""
    user = body["messages"][1]["content"]
    first = re.search(r"^\((\w+)\) ", user, re.M)
    return json.dumps({"response": "The first passage says so [1]. The second agrees [2].",
                       "ptkb_used": [first.group(1)] if first else []})


def jobs(texts, turns=TURNS):
    return build_jobs(turns, {}, RUN, texts, profile_order(turns), 5)


def settings(server, tmp_path, **extra):
    return RespondSettings(responder="gpt-test", base_url=server.url, cache_dir=str(tmp_path / "cache"),
                           retry_delay=0.001, **extra)


def test_one_request_per_turn_then_none(texts, tmp_path):
    out = tmp_path / "r.jsonl"
    with FakeOpenAI(content=answer) as server:
        first = respond(jobs(texts), settings(server, tmp_path), out, progress=False)
        assert server.count == len(TURNS) == first.requests == first.ok
        again = respond(jobs(texts), settings(server, tmp_path), out, progress=False)
        assert server.count == len(TURNS) and again.skipped == len(TURNS) and again.requests == 0
        elsewhere = respond(jobs(texts), settings(server, tmp_path), tmp_path / "other.jsonl", progress=False)
        assert server.count == len(TURNS) and elsewhere.cache_hits == len(TURNS), "a new file: all from the cache"
        assert server.requests[0]["response_format"]["json_schema"]["name"] == "apcir_response"
    records = load_responses(out)
    for turn in TURNS:
        record = records[turn.turn_id]
        top = [p for p, _ in sorted(RUN[turn.turn_id].items(), key=lambda kv: -kv[1])[:5]]
        assert record.status == "ok" and record.passages == top and record.citations == top[:2]
        assert record.ptkb_used == [next(iter(turn.ptkb))] and record.responder == "gpt-test"
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace")


def test_a_citation_of_no_given_passage_is_repaired_once_then_failed(texts, tmp_path):
    bad = json.dumps({"response": "As shown in [7], yes [1].", "ptkb_used": []})
    with FakeOpenAI(content=lambda body: bad) as server:
        summary = respond(jobs(texts, TURNS[:1]), settings(server, tmp_path), tmp_path / "r.jsonl", progress=False)
        assert server.count == 2, "the question, then one repair"
        repair = server.requests[1]["messages"][-1]["content"]
        assert "[7]" in repair and "only [1]..[5] were given" in repair
    assert summary.failed == 1 and summary.repairs == 1 and summary.failed_turns == [TURNS[0].turn_id]
    record = load_responses(tmp_path / "r.jsonl")[TURNS[0].turn_id]
    assert record.status == "failed" and record.raw == bad and "[7]" in (record.error or "")
    assert record.text == "" and record.citations == []


def test_a_statement_outside_the_profile_is_repaired(texts, tmp_path):
    replies = iter([json.dumps({"response": "Yes [1].", "ptkb_used": ["99"]}),
                    json.dumps({"response": "Yes [1].", "ptkb_used": ["1"]})])
    with FakeOpenAI(content=lambda body: next(replies)) as server:
        summary = respond(jobs(texts, TURNS[:1]), settings(server, tmp_path), tmp_path / "r.jsonl", progress=False)
        assert server.count == 2
        assert "['99'] that are not in the profile" in server.requests[1]["messages"][-1]["content"]
    assert summary.ok == 1 and summary.repairs == 1


def test_over_the_word_budget_and_uncited_answers_are_repaired(texts, tmp_path):
    long = json.dumps({"response": " ".join(["word"] * 40) + " [1].", "ptkb_used": []})
    bare = json.dumps({"response": "No citation at all.", "ptkb_used": []})
    with FakeOpenAI(content=lambda body: long if len(body["messages"]) == 2 else bare) as server:
        summary = respond(jobs(texts, TURNS[:1]), settings(server, tmp_path, max_words=20), tmp_path / "r.jsonl",
                          progress=False)
        assert "41 words, more than the 20 allowed" in server.requests[1]["messages"][-1]["content"]
    record = load_responses(tmp_path / "r.jsonl")[TURNS[0].turn_id]
    assert summary.failed == 1 and "cites no passage" in (record.error or "")


def test_a_turn_without_passage_texts_fails_without_a_request(texts, tmp_path):
    with FakeOpenAI(content=answer) as server:
        summary = respond(jobs({}, TURNS[:2]), settings(server, tmp_path), tmp_path / "r.jsonl", progress=False)
        assert server.count == 0
    records = load_responses(tmp_path / "r.jsonl")
    assert summary.failed == 2
    assert all("none of the top 5 passages has a text" in (r.error or "") for r in records.values())


def _cli(args, env):
    return subprocess.Popen([sys.executable, "-c", "from apcir.cli.main import main; main()", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_killed_respond_resumes_without_asking_finished_turns_again(tmp_path):
    turns = datasets.topics("ikat23-test")[:10]
    run = tmp_path / "run.trec"
    run.write_text("".join(f"{t.turn_id} Q0 {pid} {j + 1} {10 - j} t\n"
                           for i, t in enumerate(turns) for j, pid in enumerate(IDS[i: i + 6])))
    ptkb = tmp_path / "ptkb.run"
    write_ptkb_run(profile_order(turns), ptkb)
    out = tmp_path / "r.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "APCIR_"))}
    env["OPENAI_API_KEY"] = SECRET
    with FakeOpenAI(content=answer, delay=0.3) as server:
        args = ["respond", str(run), "-t", "ikat23-test", "--turns", ",".join(t.turn_id for t in turns),
                "--collection", "ikat23-provenance", "--ptkb-run", str(ptkb), "--responder", "gpt-test",
                "--base-url", server.url, "--no-cache", "--concurrency", "1", "--no-progress", "-o", str(out)]
        proc = _cli(args, env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 3):
            time.sleep(0.05)
        proc.kill()  # SIGKILL
        proc.wait()
        assert proc.returncode != 0
        finished = set(load_responses(out))
        assert 3 <= len(finished) < 10
        asked_before = server.count
        server.delay = 0.0
        proc = _cli(args, env)
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        new_requests = server.requests[asked_before:]
    assert len(new_requests) == 10 - len(finished)
    by_id = {t.turn_id: t for t in turns}
    asked_again = [r["messages"][1]["content"].split("Current utterance: ", 1)[1].split("\n", 1)[0]
                   for r in new_requests]
    assert not any(by_id[t].utterance == u for t in finished for u in asked_again)
    records = load_responses(out)
    assert set(records) == {t.turn_id for t in turns} and all(r.status == "ok" for r in records.values())
