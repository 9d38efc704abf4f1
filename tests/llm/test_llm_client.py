"""The LLM stage against a local OpenAI-protocol server, with the real openai client over HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, Reply

from apcir import datasets
from apcir.contract.reformulations import load_reformulations
from apcir.errors import ApcirError
from apcir.llm.client import LLMAuthError, LLMFatalError
from apcir.reformulation.prompt import PromptOptions
from apcir.reformulation.settings import ReformulatorOptions
from apcir.reformulation.stage import reformulate

SECRET = "sk-test-SECRET-4f9a2c"
KEY_ENV = "APCIR_TEST_SECRET_KEY"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "APCIR_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server():
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="module")
def turns():
    return datasets.topics("ikat23-test")


def options(llm="gpt-4o", **kwargs):
    """Options as a config or the command line would give them (a fast retry policy for the tests)."""
    if llm not in ("heuristic", "manual"):  # an offline reformulator refuses client settings it does not use
        kwargs.setdefault("max_retries", 3)
        kwargs.setdefault("retry_delay", 0.001)
    if "cache_dir" in kwargs:
        kwargs["cache_dir"] = str(kwargs["cache_dir"])
    return ReformulatorOptions(llm=llm, **kwargs)


def run(server, turns, tmp_path, out="out.jsonl", refresh=False, **kwargs):
    import os

    os.environ[KEY_ENV] = SECRET
    kwargs.setdefault("cache_dir", tmp_path / "cache")
    return reformulate(
        turns, options(base_url=server.url, api_key_env=KEY_ENV, **kwargs), tmp_path / out, refresh=refresh,
        progress=False,
    )


def test_exactly_one_request_per_turn(server, turns, tmp_path):
    summary = run(server, turns[:6], tmp_path)
    assert server.count == 6 == summary.requests == summary.ok
    utterances = [json.dumps(r["messages"][-1]) for r in server.requests]
    assert len(set(utterances)) == 6
    for body in server.requests:
        assert body["model"] == "gpt-4o" and body["temperature"] == 0.0
        assert body["response_format"]["type"] == "json_schema"
        assert body["response_format"]["json_schema"]["strict"] is True
    records = load_reformulations(tmp_path / "out.jsonl")
    for turn in turns[:6]:
        record = records[turn.turn_id]
        assert record.output.rewrite == f"{turn.utterance} [rewritten]"
        assert record.usage.requests == 1 and record.usage.input_tokens > 0 and not record.cached
        assert len(record.demonstrations) == 3 and len(record.prompt_hash) == 16


def test_the_sent_prompt_has_ptkb_and_history_but_not_the_turns_own_response(
    server, turns, tmp_path
):
    turn = next(t for t in turns if len(t.history) >= 2)
    run(server, [turn], tmp_path)
    sent = "\n".join(m["content"] for m in server.requests[0]["messages"])
    assert all(statement in sent for statement in turn.ptkb.values())
    assert all(h.utterance in sent and h.response in sent for h in turn.history)
    assert turn.response not in sent


def test_cache_hit_makes_zero_requests(server, turns, tmp_path):
    first = run(server, turns[:4], tmp_path, out="a.jsonl")
    assert server.count == 4 and first.cache_hits == 0
    second = run(server, turns[:4], tmp_path, out="b.jsonl")  # new output file, same cache
    assert server.count == 4 and second.requests == 0 and second.cache_hits == 4
    a, b = load_reformulations(tmp_path / "a.jsonl"), load_reformulations(tmp_path / "b.jsonl")
    assert all(b[t].cached and b[t].output == a[t].output and b[t].usage.requests == 0 for t in a)
    # --refresh asks again; --no-cache neither reads nor writes.
    run(server, turns[:4], tmp_path, out="c.jsonl", refresh=True)
    assert server.count == 8
    run(server, turns[4:6], tmp_path, out="d.jsonl", no_cache=True)
    run(server, turns[4:6], tmp_path, out="e.jsonl")
    assert server.count == 12


def test_a_changed_prompt_is_a_cache_miss(server, turns, tmp_path):
    run(server, turns[:2], tmp_path, out="a.jsonl")
    run(server, turns[:2], tmp_path, out="b.jsonl", prompt=PromptOptions(cot=False))
    assert server.count == 4
    assert (
        "reasoning"
        not in server.requests[-1]["response_format"]["json_schema"]["schema"]["properties"]
    )


def test_429_then_success_is_retried(server, turns, tmp_path):
    server.queue(Reply(status=429), Reply(status=500))
    summary = run(server, turns[:1], tmp_path)
    assert server.count == 3 and summary.ok == 1 and summary.retries == 2 and summary.requests == 3
    record = load_reformulations(tmp_path / "out.jsonl")[turns[0].turn_id]
    assert record.status == "ok" and record.usage.requests == 3


def test_retries_exhausted_fail_the_turn_not_the_run(server, turns, tmp_path, capsys):
    server.queue(*[Reply(status=503)] * 4)
    summary = run(server, turns[:1], tmp_path, concurrency=1)
    assert summary.failed == 1 and server.count == 4
    record = load_reformulations(tmp_path / "out.jsonl")[turns[0].turn_id]
    assert record.status == "failed" and "HTTP 503 after 3 retries" in record.error
    assert f"turn {turns[0].turn_id} failed" in capsys.readouterr().err
    # A re-run asks the failed turn again and the new line wins.
    summary = run(server, turns[:1], tmp_path)
    assert (
        summary.ok == 1
        and load_reformulations(tmp_path / "out.jsonl")[turns[0].turn_id].status == "ok"
    )


def test_401_stops_the_run_with_a_clear_message(server, turns, tmp_path):
    server.queue(Reply(status=401))
    with pytest.raises(LLMAuthError) as caught:
        run(server, turns[:5], tmp_path, concurrency=1)
    message = str(caught.value)
    assert (
        "refused the API key" in message and "HTTP 401" in message and "OPENAI_API_KEY" in message
    )
    assert "sk-te*" not in message  # the server's masked key is scrubbed too
    assert server.count == 1  # no retry, and no other turn was sent
    assert isinstance(caught.value, ApcirError)


def test_404_model_is_fatal(server, turns, tmp_path):
    server.queue(Reply(status=404))
    with pytest.raises(LLMFatalError, match="HTTP 404 for model 'gpt-4o'"):
        run(server, turns[:3], tmp_path, concurrency=1)


def test_invalid_json_is_repaired_once(server, turns, tmp_path):
    server.queue(Reply(content="Sorry, here it is: {level: c"))
    summary = run(server, turns[:1], tmp_path)
    assert server.count == 2 and summary.ok == 1 and summary.repairs == 1
    repair = server.requests[1]["messages"]
    assert repair[-2] == {"role": "assistant", "content": "Sorry, here it is: {level: c"}
    assert "could not be used" in repair[-1]["content"]
    record = load_reformulations(tmp_path / "out.jsonl")[turns[0].turn_id]
    assert record.usage.requests == 2


def test_invalid_twice_is_recorded_as_failed_with_raw_text(server, turns, tmp_path, capsys):
    bad = json.dumps({"level": "z", "rewrite": "x"})
    server.queue(Reply(content="not json"), Reply(content=bad))
    summary = run(server, turns[:1], tmp_path)
    assert server.count == 2 and summary.failed == 1 and summary.repairs == 1
    record = load_reformulations(tmp_path / "out.jsonl")[turns[0].turn_id]
    assert record.status == "failed" and record.raw == bad and record.output is None
    assert "after one repair" in record.error and record.usage.requests == 2
    assert "failed" in capsys.readouterr().err
    # Nothing invalid was cached: a re-run into another file asks the turn again.
    run(server, turns[:1], tmp_path, out="again.jsonl")
    assert server.count == 3


@pytest.mark.parametrize("bound", [3, 8])
def test_concurrency_bound_is_never_exceeded(turns, tmp_path, bound):
    with FakeOpenAI(delay=0.15) as server:
        summary = run(server, turns[:16], tmp_path, concurrency=bound)
    assert summary.ok == 16 and server.count == 16
    assert 1 < server.max_in_flight <= bound


def test_structured_output_falls_back_when_the_server_rejects_it(server, turns, tmp_path):
    server.queue(
        Reply(status=400, message="response_format json_schema is not supported by this model")
    )
    summary = run(server, turns[:3], tmp_path, concurrency=1)
    assert summary.ok == 3 and summary.structured == "json_object_schema"
    assert server.requests[0]["response_format"]["type"] == "json_schema"
    assert all(r["response_format"]["type"] == "json_object" and r["response_format"]["schema"]["properties"]
               for r in server.requests[1:])
    assert server.count == 4


def test_a_llama_cpp_style_500_about_response_format_steps_down_too(server, turns, tmp_path, capsys):
    server.queue(
        Reply(status=500, message="1 validation error: {'type': 'literal_error', 'loc': ('body', 'response_format', "
                                  "'type'), 'msg': \"Input should be 'text' or 'json_object'\"}"),
        Reply(status=400, message="response_format.schema is not supported"),
    )
    summary = run(server, turns[:2], tmp_path, concurrency=1)
    assert summary.ok == 2 and summary.structured == "json_object"
    assert [r["response_format"]["type"] for r in server.requests] == ["json_schema", "json_object", "json_object",
                                                                        "json_object"]
    assert "schema" not in server.requests[-1]["response_format"]
    err = capsys.readouterr().err
    assert "refused structured output 'json_schema'" in err and "'json_object_schema'" in err


def test_structured_none_sends_no_response_format(server, turns, tmp_path):
    run(server, turns[:1], tmp_path, structured="none")
    assert "response_format" not in server.requests[0]


def test_other_400_fails_the_turn_without_fallback(server, turns, tmp_path):
    server.queue(Reply(status=400, message="maximum context length exceeded"))
    summary = run(server, turns[:1], tmp_path)
    assert summary.failed == 1 and server.count == 1


def test_the_api_key_is_never_written(server, turns, tmp_path, capsys):
    server.queue(Reply(content="not json"))
    run(server, turns[:3], tmp_path)
    assert server.headers[0]["authorization"] == f"Bearer {SECRET}"  # it was used...
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".jsonl" for p in written) and any("summary" in p.name for p in written)
    assert len([p for p in written if p.parent.parent.name == "cache"]) == 3
    for path in written:  # ...and is nowhere on disk
        assert SECRET not in path.read_text(encoding="utf-8"), path
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err


def test_missing_key_for_openai_is_a_clear_error(turns, tmp_path):
    with pytest.raises(ApcirError, match="no API key: set OPENAI_API_KEY"):
        reformulate(turns[:1], options(cache_dir=tmp_path / "c"), tmp_path / "o.jsonl", progress=False)
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").rglob("*.json"))


def test_fully_cached_rerun_needs_no_key(server, turns, tmp_path):
    run(server, turns[:2], tmp_path, out="a.jsonl")
    summary = reformulate(turns[:2], options(cache_dir=tmp_path / "cache"), tmp_path / "b.jsonl", progress=False)
    assert summary.cache_hits == 2 and summary.requests == 0


def test_output_of_another_model_is_refused(server, turns, tmp_path):
    reformulate(turns[:2], options("heuristic"), tmp_path / "out.jsonl", progress=False)
    with pytest.raises(ApcirError, match="already holds records of heuristic"):
        run(server, turns[:2], tmp_path)
    assert server.count == 0


def test_torn_last_line_is_cut_and_the_turn_redone(server, turns, tmp_path):
    run(server, turns[:3], tmp_path, no_cache=True)
    out: Path = tmp_path / "out.jsonl"
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:2]) + lines[2][:40])  # as if killed while writing the third
    summary = run(server, turns[:3], tmp_path, no_cache=True)
    assert summary.skipped == 2 and summary.written == 1 and server.count == 4
    assert len(load_reformulations(out)) == 3


def test_a_timeout_is_retried(server, turns, tmp_path):
    server.queue(Reply(delay=1.0))
    summary = run(server, turns[:1], tmp_path, timeout=0.2)
    assert summary.ok == 1 and summary.retries == 1 and server.count == 2


def test_an_answer_without_usage_is_counted(server, turns, tmp_path):
    server.queue(Reply(usage=False))
    summary = run(server, turns[:1], tmp_path)
    (usage,) = summary.usage
    assert summary.ok == 1 and usage.requests_without_usage == 1 and usage.input_tokens == 0


def test_a_literal_newline_inside_a_json_string_is_read():
    """llama.cpp's JSON grammar lets a model put a raw newline in a string; strict JSON would fail the turn."""
    from apcir.llm.answers import extract_json

    assert extract_json('{"rewrite": "first line\nsecond line", "level": "a"}')["rewrite"] == "first line\nsecond line"
