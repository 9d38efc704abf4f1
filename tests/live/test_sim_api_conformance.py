"""``apcir simulate-user`` (the local server) against the organisers' real server: the same requests get the
same answers, and ``apcir converse`` sees the same conversation (turn ids, history, status, record).

The local server plays the real server's ``dummy`` task here: replay users of its two topics, with its closing
words. User ids differ by design (the real server draws a uuid per user), so they are compared by pattern."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from apcir.contract.records import Turn
from apcir.live.client import SimulationClient
from apcir.live.converse import DUMP_FILE, JOURNAL, Converse
from apcir.live.errors import LiveError
from apcir.live.protocol import PROTOCOLS, Utterance
from apcir.live.server import Simulation, SimulationServer
from apcir.live.users import replay_sessions

DUMMY = {"dummy1": "Why is the sky blue?", "dummy2": "Why is the sky not green?"}
DUMMY_CLOSING = "Thanks for your response!"
LOCAL_TOKEN = base64.b64encode(b"local-conformance-token").decode()


@pytest.fixture
def local_server():
    turns = [Turn(turn_id=f"{topic}_1", conversation_id=topic, turn_number=1, utterance=text)
             for topic, text in DUMMY.items()]
    with SimulationServer(Simulation(lambda: replay_sessions(turns, closing=DUMMY_CLOSING), LOCAL_TOKEN)) as server:
        yield server


def _users(replies: list[dict[str, Any]]) -> list[int]:
    """Each reply's user as the order of its first appearance (the ids themselves differ)."""
    seen: dict[str, int] = {}
    return [seen.setdefault(r["user_id"], len(seen)) for r in replies]


def _outcome(call) -> Any:  # type: ignore[no-untyped-def]
    """What a client call gets, without what differs by design (timestamps, user ids)."""
    try:
        result = call()
    except LiveError as exc:
        return ("refused", exc.status, exc.detail if exc.status != 500 else "")
    if hasattr(result, "history"):
        return ("utterance", result.topic_id, result.utterance, [(m.role, m.content) for m in result.history],
                result.last_response_of_session, result.last_response_of_run, result.user_meta)
    if hasattr(result, "status") and hasattr(result, "open_topics"):
        return ("status", result.model_dump())
    if isinstance(result, list):  # a dump
        return ("dump", [{**r["metadata"], "team_id": "", "responses": [
            {k: v for k, v in x.items() if k != "user_meta"} for x in r["responses"]]} for r in result])
    return ("other", result)


def _script(url: str, token: str, run: str) -> list[Any]:
    """One conversation with every case the protocol has, request by request."""
    client = SimulationClient(url, token, PROTOCOLS[2026], retries=0)
    wrong = base64.b64encode(b"not-a-team-token").decode()
    steps = [
        lambda: SimulationClient(url, "not base64!", PROTOCOLS[2026]).verify(),
        lambda: SimulationClient(url, wrong, PROTOCOLS[2026]).verify(),
        lambda: client.start(run, ""),
        lambda: client.start(run, "conformance", track_persona=True),
        lambda: client.start(run, "again"),
        lambda: client.session(run),
        lambda: client.status(run),
        lambda: client.send(run, "word " * 300, {}, []),
        lambda: client.send(run, "Rayleigh scattering [1].", {"p1": 0.5, "p2": 0.25}, ["I like skies."]),
        lambda: client.session(run),  # no session open: 500
        lambda: client.status(run),
        lambda: client.dump(run),
        lambda: client.send(run, "", {}, []),  # the closing words' answer: the next topic opens
        lambda: client.status(run),
        lambda: client.session(run),
        lambda: client.send(run, "Green light is scattered less.", {}, []),
        lambda: client.session(run),
        lambda: client.send(run, "", {}, []),  # after the run: 400
        lambda: client.start(run, "conformance"),  # a finished run id: 412
        lambda: client.status(run),
        lambda: client.dump(run),
        lambda: client.session(run + "-unknown"),
        lambda: client.send(run + "-unknown", "x", {}, []),
        lambda: client.status(run + "-unknown"),
        lambda: client.dump(run + "-unknown"),
        lambda: client.start(run + "-debug", "debug", debug=True),
        lambda: client.session(run + "-debug", debug=True),
        lambda: client.status(run + "-debug"),  # a debug run has no status
        lambda: client.session(run + "-debug"),  # nor a run/session
    ]
    return [_outcome(step) for step in steps]


@pytest.mark.slow
def test_the_local_server_answers_each_request_as_the_real_one_does(real_server, real_token, local_server):
    real = _script(real_server.url, real_token, "conformance")
    local = _script(local_server.url, LOCAL_TOKEN, "conformance")
    assert [r[:2] for r in local] == [r[:2] for r in real]  # the same kind of answer and status, step by step
    for step, (mine, theirs) in enumerate(zip(local, real, strict=True)):
        assert mine == theirs, f"step {step}"


def _journal(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / JOURNAL).read_text(encoding="utf-8").splitlines()]


def _seen(folder: Path) -> dict[str, Any]:
    """What ``apcir converse`` saw and did, without timestamps and user ids."""
    journal = _journal(folder)
    replies = [e["reply"] for e in journal if e["event"] == "utterance"]
    return {
        "events": [e["event"] for e in journal],
        "replies": [{k: v for k, v in r.items() if k not in ("timestamp", "user_id")} for r in replies],
        "users": _users(replies),
        "answers": [(e["turn_id"], e["key"][0], e["key"][2], e["response"], e["citations"])
                    for e in journal if e["event"] == "answer"],
        "dump": [{**r["metadata"], "team_id": ""} | {"responses": [{k: v for k, v in x.items() if k != "user_meta"}
                                                                  for x in r["responses"]]}
                 for r in map(json.loads, (folder / DUMP_FILE).read_text(encoding="utf-8").splitlines())],
    }


def test_simulate_user_and_the_real_server_give_converse_the_same_turns_and_history(real_server, real_token,
                                                                                   local_server, live_toml, tmp_path):
    from apcir.experiment.config import load_config

    config = load_config(live_toml)
    seen = {}
    for name, url, token in (("real", real_server.url, real_token), ("local", local_server.url, LOCAL_TOKEN)):
        client = SimulationClient(url, token, PROTOCOLS[2026])
        converse = Converse(config, client, tmp_path / name, run_id="same-conversation")
        summary = converse.play()
        assert summary.record is not None and summary.record.ok, summary.record
        assert client.status("same-conversation").status == "complete"
        seen[name] = _seen(tmp_path / name)
        questions = [Utterance.model_validate(e["reply"]) for e in _journal(tmp_path / name)
                     if e["event"] == "utterance" and not e["reply"]["last_response_of_session"]]
        seen[name]["turns"] = [converse.turn_of(q).model_dump() for q in questions]  # what the stages get
    real, local = seen["real"], seen["local"]
    assert [a[0] for a in real["answers"]] == ["dummy1_1", "dummy2_1"]
    assert [t["history"] for t in real["turns"]] == [[], []] and [t["turn_id"] for t in real["turns"]] == [
        "dummy1_1", "dummy2_1"]
    for part in real:
        assert local[part] == real[part], part
