"""The protocol's records as the organisers' server sends them (apcir/live/protocol.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from apcir.errors import ApcirError
from apcir.live.protocol import (
    PROTOCOLS,
    Budget,
    RunStatus,
    Utterance,
    extra_persona,
    named_limit,
    parse_dump,
    protocol_for,
)


def _reply(*history: tuple[str, str]) -> Utterance:
    return Utterance(run_id="r", topic_id="t", user_id="u", utterance=history[-1][1] if history else "",
                     history=[{"role": role, "content": text} for role, text in history])


def test_the_current_utterance_ends_the_history_and_is_never_an_earlier_turn():
    assert _reply(("user", "q1")).earlier() == []
    earlier = _reply(("user", "q1"), ("assistant", "a1"), ("user", "q2")).earlier()
    assert [(m.role, m.content) for m in earlier] == [("user", "q1"), ("assistant", "a1")]
    # a history without the current utterance (none known sends one) is all earlier turns
    assert len(Utterance(run_id="r", topic_id="t", user_id="u", utterance="q2",
                         history=[{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}]).earlier()) == 2


def test_run_status_reads_the_servers_names_and_the_2026_guidelines_where_sent():
    status = RunStatus.read({"status": "complete", "done_topics": ["a", "b"], "open_topics": []})
    assert status.complete and status.done_topics == ["a", "b"]
    assert RunStatus.read({"status": "completed"}).complete  # the README's list says so
    assert not RunStatus.read({"status": "active", "open_topics": ["b"]}).complete
    pairs = RunStatus.read({"status": "active", "open_user_topic_pairs": [["u1", "b"]],
                            "done_user_topic_pairs": [["u0", "a"]]})
    assert pairs.open_topics == ["b"] and pairs.done_topics == ["a"]


def test_the_dump_is_ndjson():
    assert parse_dump('{"a": 1}\n\n{"b": 2}') == [{"a": 1}, {"b": 2}]
    with pytest.raises(ApcirError, match="line 2 is not JSON"):
        parse_dump('{"a": 1}\n{"b": ')
    with pytest.raises(ApcirError, match="not a JSON object"):
        parse_dump("[1]")


def test_each_year_puts_the_persona_flag_and_provenance_where_its_server_reads_them():
    assert PROTOCOLS[2026].start_body("r", "d", True) == {"run_id": "r", "description": "d",
                                                          "extra": {"track_persona": True}}
    assert PROTOCOLS[2026].continue_body("r", "x", {"p": 1}, ["s"])["meta"] == {"ptkb_provenance": ["s"]}
    assert PROTOCOLS[2025].start_body("r", "d", True)["track_persona"] is True
    assert PROTOCOLS[2025].continue_body("r", "x", {}, ["s"])["ptkb_provenance"] == ["s"]
    assert (PROTOCOLS[2025].citations, PROTOCOLS[2026].citations) == (1000, 10)


def test_the_bodies_are_sent_as_before_byte_for_byte():
    """The years as records give the bodies the organisers' server got before, key order included."""
    def sent(body):
        return json.dumps(body)

    assert sent(PROTOCOLS[2026].start_body("r", "d", False)) == \
        '{"run_id": "r", "description": "d", "extra": {"track_persona": false}}'
    assert sent(PROTOCOLS[2025].start_body("r", "d", True)) == \
        '{"run_id": "r", "description": "d", "track_persona": true}'
    assert sent(PROTOCOLS[2026].continue_body("r", "x", {"p": 1}, ("s",))) == \
        '{"run_id": "r", "response": "x", "citations": {"p": 1.0}, "meta": {"ptkb_provenance": ["s"]}}'
    assert sent(PROTOCOLS[2025].continue_body("r", "x", {}, [])) == \
        '{"run_id": "r", "response": "x", "citations": {}, "ptkb_provenance": []}'


def test_a_year_is_one_record_looked_up_outside_the_server():
    assert protocol_for(2026) is PROTOCOLS[2026] and protocol_for(2025).unstored and not protocol_for(2026).unstored
    with pytest.raises(ApcirError, match="--protocol 2024: expected one of 2025, 2026"):
        protocol_for(2024)
    # a new year is a record: the body builders of an existing form, or new ones
    later = replace(PROTOCOLS[2026], year=2027, persona=lambda flag: {"persona": {"track": flag}})
    assert later.start_body("r", "d", True) == {"run_id": "r", "description": "d", "persona": {"track": True}}
    assert extra_persona(True) == {"extra": {"track_persona": True}}
    # the agent's side (client, converse, the protocol) never loads the local simulation server
    code = ("import sys, apcir.live.protocol, apcir.live.client, apcir.live.converse, apcir.cli.live_commands; "
            "sys.exit('apcir.live.server' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_each_year_has_its_response_limit():
    """2025: the 250 tokens its documentation and the snapshot's code check; 2026: 512, as deployed (its OpenAPI
    description of continue) and in the 2026 guidelines."""
    assert (PROTOCOLS[2025].response_tokens, PROTOCOLS[2026].response_tokens) == (250, 512)


@pytest.mark.parametrize(("detail", "limit"), [
    # the organisers' server's detail (src/api/messages.py), as FastAPI words it and as apcir summarises it
    ("Value error, Response is too long (376 tokens). Response exceeds limit of 250 tokens.", 250),
    ("response: Response is too long (376 tokens). Response exceeds limit of 250 tokens.", 250),
    ("response: Response is too long (600 tokens). Response exceeds limit of 512 tokens.; citations.p: bad", 512),
    ("Response exceeds the limit of 1,024 tokens", 1024),
    ("RESPONSE EXCEEDS LIMIT OF 300 TOKENS", 300),
    ("Response is too long (376 tokens).", None),  # the length only: no limit named
    ("response: Response is too long", None),
    ("Response exceeds limit of 0 tokens.", None),
    ("citations.p1: Input should be a valid number", None),
    ("", None),
])
def test_the_limit_a_refusal_names_is_read_from_its_detail(detail, limit):
    assert named_limit(detail) == limit


def test_the_budget_is_read_as_the_server_words_it_and_anything_else_is_one_line():
    payload = {"remaining": {"debug": {"remaining": 97, "unit": "sessions"}, "run": {"remaining": 6, "unit": "runs"}}}
    budget = Budget.read(payload)
    assert budget.line() == "debug: 97 sessions, run: 6 runs"
    assert {k: v.model_dump() for k, v in budget.remaining.items()} == payload["remaining"]
    with pytest.raises(ApcirError, match=r"budget/check answered \{\"debug\": 3\}; expected") as refused:
        Budget.read({"debug": 3})
    assert "\n" not in str(refused.value)
