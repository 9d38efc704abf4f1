"""The Pathways of Thoughts responder on the scripted server: the rules of a pathway, the cache (a re-run sends
nothing, N 2 -> 3 sends only the third pathway and the aggregation), the trace, and concurrency."""

from __future__ import annotations

import json

import pytest
from fake_openai import FakeOpenAI

from apcir import datasets
from apcir.contract.responses import load_responses
from apcir.responses.job import ResponseJob
from apcir.responses.pathway_prompts import allowed_actions
from apcir.responses.settings import RespondSettings
from apcir.responses.stage import respond

TURN = next(t for t in datasets.topics("ikat23-test") if t.turn_id == "9-1_1")
JOB = ResponseJob(turn=TURN, level="b", rewrite="what diet suits a vegetarian", statements=list(TURN.ptkb.items()),
                  used=[], passages=[("p-1", "Lentils are rich in protein."), ("p-2", "Tofu is made from soy.")])
STATEMENT = next(iter(TURN.ptkb))
ANSWER = {"response": "Eat lentils [1] and tofu [2].", "ptkb_used": []}


def last_user(body: dict) -> str:
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")


def scripted(choices: dict[int, list[str]], *, fail_answers: set[int] = frozenset()):
    """Answers: pathway p's k-th choice request gets choices[p][k]; performs get a valid result (an answer, unless
    the pathway is in ``fail_answers``: then a citation of no passage, also after the repair)."""
    asked: dict[int, int] = {}

    def content(body: dict) -> str:
        text = last_user(body)
        seed = body.get("seed")
        if text.startswith("Choose the next action"):
            k = asked.get(seed, 0)
            asked[seed] = k + 1
            script = choices[seed]
            return json.dumps({"action": script[min(k, len(script) - 1)]})
        if text.startswith("Your answer could not be used") and "action must be one of" in text:
            k = asked.get(seed, 0)
            asked[seed] = k + 1
            return json.dumps({"action": choices[seed][min(k, len(choices[seed]) - 1)]})
        if "aspects of an answer" in text:
            return json.dumps({"aspects": ["vegetarian protein"]})
        if "Merge the candidates" in text:
            return json.dumps({"response": "Lentils [1], tofu [2].", "ptkb_used": []})
        if text.startswith("Perform personalize"):
            return json.dumps({"text": "she is vegetarian", "statements": [STATEMENT]})
        if any(text.startswith(f"Perform {a}") for a in ("answer", "revise", "finalize")) or "could not be used" in text \
                or text.startswith("Profile statements"):
            if seed in fail_answers:
                return json.dumps({"response": "Eat lentils [7].", "ptkb_used": []})
            return json.dumps(ANSWER)
        return json.dumps({"text": "thinking"})

    return content


def settings(server, tmp_path, **values) -> RespondSettings:
    return RespondSettings(responder="pathways:gpt-test", base_url=server.url, cache_dir=str(tmp_path / "cache"),
                           concurrency=values.pop("concurrency", 1), **values)


def trace_lines(out):
    return [json.loads(line) for line in out.with_name(f"{out.stem}.pathways.jsonl").read_text().splitlines()]


def test_the_allowed_actions():
    assert allowed_actions(0, 8, False) == ["plan"]
    assert "revise" not in allowed_actions(3, 8, False) and "revise" in allowed_actions(3, 8, True)
    assert "plan" not in allowed_actions(3, 8, True)
    assert allowed_actions(7, 8, False) == ["answer", "finalize"]
    assert allowed_actions(7, 8, True) == ["answer", "revise", "finalize"]


def test_a_pathway_follows_the_rules_and_a_disallowed_choice_is_repaired_once(tmp_path):
    # pathway 0: plan (not asked), revise (not allowed before an answer: repaired to reason), personalize, answer,
    # finalize; pathway 1 chooses revise twice: repaired once, then stopped and counted
    choices = {0: ["revise", "reason", "personalize", "answer", "finalize"], 1: ["revise", "revise"]}
    with FakeOpenAI(content=scripted(choices)) as server:
        out = tmp_path / "responses.jsonl"
        respond([JOB], settings(server, tmp_path, pathways=2, max_actions=6), out, progress=False)
    lines = trace_lines(out)
    first, second, turn = lines[0], lines[1], lines[2]
    assert first["actions"] == ["plan", "reason", "personalize", "answer", "finalize"] and first["finalized"]
    assert first["response"] == ANSWER["response"]
    assert second["actions"] == ["plan"] and second["response"] is None and "no allowed action" in second["stopped"]
    assert turn["method"] == "single" and turn["usage"]["choose"]["requests"] >= 5
    record = load_responses(out)["9-1_1"]
    assert record.status == "ok" and record.citations == ["p-1", "p-2"]
    assert record.ptkb_used == [STATEMENT]  # named by the personalize step
    assert "1 of 2 pathway(s) gave no answer" in record.notes


def test_at_most_t_steps_and_the_last_answer_is_the_response(tmp_path):
    # never finalizes: answer at step 2, then revise, revise; T = 4
    with FakeOpenAI(content=scripted({0: ["answer", "revise", "revise"]})) as server:
        out = tmp_path / "responses.jsonl"
        respond([JOB], settings(server, tmp_path, pathways=1, max_actions=4), out, progress=False)
    first = trace_lines(out)[0]
    assert first["actions"] == ["plan", "answer", "revise", "revise"] and not first["finalized"]
    assert first["response"] == ANSWER["response"]


def test_a_pathway_without_an_answer_gives_no_response_and_the_turn_fails_when_none_does(tmp_path):
    with FakeOpenAI(content=scripted({0: ["reason", "answer"]}, fail_answers={0})) as server:
        out = tmp_path / "responses.jsonl"
        respond([JOB], settings(server, tmp_path, pathways=1, max_actions=3), out, progress=False)
    first = trace_lines(out)[0]
    assert first["actions"] == ["plan", "reason"] and first["response"] is None and "answer" in first["stopped"]
    record = load_responses(out)["9-1_1"]
    assert record.status == "failed" and "no pathway gave an answer" in record.error and record.text == ""


def test_a_rerun_sends_nothing_and_a_third_pathway_only_its_own_and_the_aggregation(tmp_path):
    choices = {i: ["reason", "answer", "finalize"] for i in range(3)}
    with FakeOpenAI(content=scripted(choices)) as server:
        respond([JOB], settings(server, tmp_path, pathways=2, max_actions=5), tmp_path / "a.jsonl", progress=False)
        first = server.count
        respond([JOB], settings(server, tmp_path, pathways=2, max_actions=5), tmp_path / "b.jsonl", progress=False)
        assert server.count == first  # every request from the cache
        respond([JOB], settings(server, tmp_path, pathways=3, max_actions=5), tmp_path / "c.jsonl", progress=False)
        new = server.requests[first:]
    # the third pathway: 3 choices + 4 performs (plan, reason, answer, finalize); then one mixture
    # (the aspects request is the same as before, from the cache)
    assert [b.get("seed") for b in new].count(2) == 7 and len(new) == 8
    assert "Merge the candidates" in last_user(new[-1])
    assert {b.get("seed") for b in new[:-1]} == {2}
    assert load_responses(tmp_path / "c.jsonl")["9-1_1"].text == "Lentils [1], tofu [2]."


def test_lowering_t_reuses_the_steps_it_keeps(tmp_path):
    choices = {0: ["reason", "reason", "reason", "answer", "finalize"]}
    with FakeOpenAI(content=scripted(choices)) as server:
        respond([JOB], settings(server, tmp_path, pathways=1, max_actions=6), tmp_path / "a.jsonl", progress=False)
        first = server.count
        scripted_again = scripted({0: ["reason", "reason", "finalize"]})
        server.content = scripted_again
        respond([JOB], settings(server, tmp_path, pathways=1, max_actions=4), tmp_path / "b.jsonl", progress=False)
        new = server.requests[first:]
    # T = 4 keeps plan, reason, reason (5 requests, cached); its last step offers only answering actions: new
    assert len(new) == 2 and last_user(new[0]).startswith("Choose the next action among: answer, finalize")


def test_pathways_of_many_turns_run_concurrently(tmp_path):
    other = next(t for t in datasets.topics("ikat23-test") if t.turn_id == "9-1_2")
    jobs = [JOB, ResponseJob(turn=other, level="b", rewrite="more", statements=list(other.ptkb.items()), used=[],
                             passages=JOB.passages)]
    with FakeOpenAI(delay=0.2, content=scripted({i: ["answer", "finalize"] for i in range(2)})) as server:
        respond(jobs, settings(server, tmp_path, pathways=2, max_actions=3, concurrency=4), tmp_path / "r.jsonl",
                progress=False)
        assert server.max_in_flight >= 3


@pytest.mark.parametrize("option", [{"pathways": 2}, {"aggregate": "best"}])
def test_pathway_settings_are_refused_for_other_responders(option):
    with pytest.raises(ValueError, match="not used|pathways:MODEL"):
        RespondSettings(responder="gpt-4o", **option)


# ---- the paper's baselines, as settings of the llm responder -------------------------------------------------
def test_no_personalisation_withholds_the_profile_and_cot_reasons_first(tmp_path):
    def content(body: dict) -> str:
        if "reasoning" in body["messages"][0]["content"]:
            return json.dumps({"reasoning": "she is vegetarian", **ANSWER, "ptkb_used": [STATEMENT]})
        return json.dumps({**ANSWER, "ptkb_used": [STATEMENT]})

    job = ResponseJob(turn=JOB.turn, level="b", rewrite="a vegetarian diet for me", statements=JOB.statements,
                      used=[], passages=JOB.passages, neutral_rewrite="a diet")
    with FakeOpenAI(content=content) as server:
        for mode in ("none", "cot", "in-context"):
            out = tmp_path / f"{mode}.jsonl"
            options = RespondSettings(responder="gpt-test", base_url=server.url, cache_dir=str(tmp_path / "c"),
                                      personalisation=mode)
            respond([job], options, out, progress=False)
        bodies = server.requests
    none_user = bodies[0]["messages"][1]["content"]
    assert "(none)" in none_user and "a diet" in none_user and TURN.ptkb[STATEMENT] not in none_user
    assert load_responses(tmp_path / "none.jsonl")["9-1_1"].ptkb_used == []
    assert "reasoning" in json.dumps(bodies[1].get("response_format", {})) or "reasoning" in bodies[1]["messages"][0][
        "content"]
    assert load_responses(tmp_path / "cot.jsonl")["9-1_1"].ptkb_used == [STATEMENT]
    assert TURN.ptkb[STATEMENT] in bodies[2]["messages"][1]["content"]


def test_best_of_n_samples_then_aggregates_as_pathways_do(tmp_path):
    with FakeOpenAI(content=scripted({})) as server:
        options = RespondSettings(responder="gpt-test", base_url=server.url, cache_dir=str(tmp_path / "c"),
                                  best_of=3, aggregate="mixture", concurrency=1)
        respond([JOB], options, tmp_path / "r.jsonl", progress=False)
        seeds = [b.get("seed") for b in server.requests]
        assert sorted(s for s in seeds if s is not None) == [0, 1, 2]
        assert "Merge the candidates" in last_user(server.requests[-1]) and len(server.requests) == 5
        assert all(b["temperature"] == 0.7 for b in server.requests[:3])
    assert load_responses(tmp_path / "r.jsonl")["9-1_1"].text == "Lentils [1], tofu [2]."


def test_pathways_from_python(tmp_path):
    from apcir import api

    with FakeOpenAI(content=scripted({0: ["answer", "finalize"]})) as server:
        records = api.respond([TURN], {}, {"9-1_1": {"p-1": 2.0, "p-2": 1.0}},
                              {"p-1": "Lentils are rich in protein.", "p-2": "Tofu is made from soy."},
                              responder="pathways:gpt-test", base_url=server.url, cache_dir=str(tmp_path / "c"),
                              pathways=1, max_actions=3, out=tmp_path / "r.jsonl")
    assert records["9-1_1"].status == "ok" and records["9-1_1"].citations == ["p-1", "p-2"]
    assert (tmp_path / "r.pathways.jsonl").exists()


def test_an_echoed_key_never_reaches_a_file_and_an_unwritable_cache_is_one_line(tmp_path, monkeypatch, run_cli):
    key = "sk-canary-POT-445566"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with FakeOpenAI(content=lambda body: f"you sent Authorization: Bearer {key}") as server:
        out = tmp_path / "r.jsonl"
        respond([JOB], RespondSettings(responder="pathways:gpt-test", base_url=server.url,
                                       cache_dir=str(tmp_path / "cache"), pathways=2, max_actions=3), out,
                progress=False)
        again = server.count
        respond([JOB], RespondSettings(responder="pathways:gpt-test", base_url=server.url,
                                       cache_dir=str(tmp_path / "cache"), pathways=2, max_actions=3),
                tmp_path / "r2.jsonl", progress=False)
        assert server.count == again  # the unusable answers are replayed, not asked again
    stored = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    assert key not in stored and "redacted" in stored
    assert load_responses(out)["9-1_1"].status == "failed"
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with FakeOpenAI() as server:
        code, _, err = run_cli("respond", "--topics", "ikat23-test", "--turns", "9-1_1", "--responder",
                               "pathways:gpt-test", "--base-url", server.url, "--cache-dir", str(blocker), "-o",
                               str(tmp_path / "x.jsonl"))
        assert server.count == 0
    errors = [line for line in err.splitlines() if line.startswith("error:")]  # err also holds the warnings above
    assert code == 2 and "Traceback" not in err and len(errors) == 1 and "cache folder is a file" in errors[0], err


def test_kill_9_mid_run_then_the_same_command_finishes_and_sends_no_finished_request_again(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    turns = "9-1_1,9-1_2,9-1_3"
    run = tmp_path / "run.trec"
    ids = sorted(p.id for p in datasets.iter_collection(datasets.collection_path("ikat23-provenance")))[:3]
    run.write_text("".join(f"{t} Q0 {p} {r + 1} {3 - r} x\n" for t in turns.split(",") for r, p in enumerate(ids)))
    with FakeOpenAI(delay=0.3, content=scripted({i: ["answer", "finalize"] for i in range(2)})) as server:
        command = [sys.executable, "-m", "apcir", "respond", str(run), "-t", "ikat23-test", "--turns", turns,
                   "--collection", "ikat23-provenance", "--responder", "pathways:gpt-test", "--pathways", "2",
                   "--max-actions", "3", "--base-url", server.url, "--cache-dir", str(tmp_path / "cache"),
                   "--concurrency", "1", "-o", str(tmp_path / "r.jsonl"), "--no-progress"]
        env = {**os.environ, "OPENAI_API_KEY": "sk-unused-1234"}
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while server.count < 9 and time.monotonic() < deadline:  # past the first turn's pathways
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait()
        first = [json.dumps(b["messages"], sort_keys=True) + str(b.get("seed")) for b in server.requests]
        finished = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert finished.returncode == 0, finished.stderr
        second = [json.dumps(b["messages"], sort_keys=True) + str(b.get("seed")) for b in server.requests[len(first):]]
    records = load_responses(tmp_path / "r.jsonl")
    assert sorted(records) == ["9-1_1", "9-1_2", "9-1_3"] and all(r.status == "ok" for r in records.values())
    # at most the one request in flight at the kill (concurrency 1) is sent again; every finished one came from cache
    assert len(set(first) & set(second)) <= 1
