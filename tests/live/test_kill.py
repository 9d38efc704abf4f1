"""`apcir converse` killed with SIGKILL at three points, then the same command again: the run finishes,
nothing is answered twice or skipped, run/start is called once, and no LLM answer it had is asked again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from fake_openai import FakeOpenAI, Reply

import apcir
from apcir.live.server import Faults, Simulation, SimulationServer
from apcir.live.users import replay_sessions

pytestmark = pytest.mark.slow
TOKEN = "kill-test-token-0b9e"


def _wait(condition, seconds=120.0):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.05)


def test_kill_9_at_three_points_and_the_same_command_finishes(small, tmp_path):
    _, collection, index, chosen = small
    qrels = apcir.qrels("ikat23-test-provenance")
    turns = [t for t in apcir.topics("ikat23-test") if t.turn_id in set(chosen)]
    conversation = next(c for c in dict.fromkeys(t.conversation_id for t in turns)
                        if sum(t.conversation_id == c for t in turns) >= 6)
    turns = [t for t in turns if t.conversation_id == conversation][:6]
    records = apcir.reformulate(turns, "heuristic")
    lists = [apcir.retrieve(records, index, field=f) for f in ("rewrite", "rewrite_response", "third")]
    apcir.tune(lists, {t: r.output.level for t, r in records.items()}, qrels, step="0.5").save(tmp_path / "w.json")
    faults = Faults(hang_unrecorded={3}, hang_after_record={6}, seconds=4.0)
    simulation = Simulation(lambda: replay_sessions(turns), TOKEN, log=tmp_path / "users.jsonl", faults=faults,
                            send_ptkb=True)  # the users' PTKB, which the fake LLM's answers name (ptkb_used)
    with FakeOpenAI() as llm, SimulationServer(simulation) as server:
        llm.queue(Reply(), Reply(delay=1.5))  # the second request is still in flight when the first kill comes
        config = tmp_path / "live.toml"
        config.write_text(
            f'name = "k9"\n[reformulator]\nmethod = "gpt-test"\nbase_url = "{llm.url}"\n'
            f'cache_dir = "{tmp_path / "cache"}"\nconcurrency = 1\n'
            f'[retrieval]\nindex = "{index}"\ncollection = "{collection}"\nencoder = "splade-tiny"\n'
            f'[fusion]\nbaselines = false\n[fusion.weights]\nsource = "file"\nfile = "{tmp_path / "w.json"}"\n')
        command = [sys.executable, "-m", "apcir", "converse", str(config), "--api", server.url, "--run-id", "k9",
                   "-o", str(tmp_path / "run"), "--json"]
        env = {**os.environ, "IKAT_API_TOKEN": TOKEN, "OPENAI_API_KEY": "unused"}

        def launch():
            return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        # 1. while computing an answer: the second turn's LLM request is in flight
        process = launch()
        _wait(lambda: llm.count >= 2)
        process.send_signal(signal.SIGKILL)
        process.wait()
        # 2. after sending an answer, before the server recorded it (the request hangs, then is dropped)
        process = launch()
        _wait(faults.reached.is_set)
        process.send_signal(signal.SIGKILL)
        process.wait()
        faults.reached.clear()
        # 3. after the server recorded an answer, before its reply arrived
        process = launch()
        _wait(faults.reached.is_set)
        process.send_signal(signal.SIGKILL)
        process.wait()
        # then the same command finishes the run
        process = launch()
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        requests = llm.count
    answered = [(e["topic_id"], e["turn"]) for e in map(json.loads, (tmp_path / "users.jsonl").read_text().splitlines())]
    assert answered == [(t.conversation_id, t.turn_number) for t in turns], "each utterance answered once, in order"
    assert requests == len(turns) + 1, "only the request in flight at the first kill is asked again"
    journal = [json.loads(line) for line in (tmp_path / "run" / "conversation.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "start" for e in journal) == 1
    assert json.loads(out)["answered"] >= 1 and TOKEN not in out + err
