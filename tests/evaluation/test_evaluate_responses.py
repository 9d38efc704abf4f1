"""Response evaluation: ROUGE-L, citation quality from the qrels, the LLM judge (one request per turn, cached,
malformed answers repaired then counted unjudged), per level; and the command's messages on bad input."""

from __future__ import annotations

import json

import pytest
from fake_openai import FakeOpenAI

from apcir import datasets
from apcir.contract.responses import ResponseRecord
from apcir.evaluation.responses import HIT, JUDGE, PRECISION, ROUGE, evaluate_responses
from apcir.llm.settings import LLMSettings

TURNS = [t for t in datasets.topics("ikat23-test") if t.response.strip()][:4]
QRELS = datasets.qrels("ikat23-test")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "APCIR_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-judge")


def judged_turn():
    for turn in datasets.topics("ikat23-test"):
        grades = QRELS.get(turn.turn_id, {})
        relevant = [p for p, g in grades.items() if g >= 1]
        unjudged_or_zero = [p for p, g in grades.items() if g == 0]
        if turn.response.strip() and relevant and unjudged_or_zero:
            return turn, relevant[0], unjudged_or_zero[0]
    raise AssertionError("no turn with both grades")


def records(turns, text=None):
    return {t.turn_id: ResponseRecord(turn_id=t.turn_id, responder="r", text=text or f"{t.response} [1]",
                                      passages=["p"], citations=["p"]) for t in turns}


def test_rouge_and_citations():
    turn, good, bad = judged_turn()
    perfect = ResponseRecord(turn_id=turn.turn_id, responder="r", text=turn.response.rstrip(".") + " [1][2].",
                             passages=[good, bad], citations=[good, bad])
    failed = ResponseRecord(turn_id=TURNS[0].turn_id, responder="r", status="failed", error="x")
    metrics = evaluate_responses({turn.turn_id: perfect, TURNS[0].turn_id: failed}, datasets.topics("ikat23-test"),
                                 topics="ikat23-test", qrels=QRELS, qrels_name="ikat23-test",
                                 levels={turn.turn_id: "b"})
    values = metrics.per_turn[turn.turn_id]
    assert values[ROUGE] == pytest.approx(1.0), "citations are removed before ROUGE"
    assert values[PRECISION] == 0.5 and values[HIT] == 1.0
    assert metrics.turns["failed"] == 1 and TURNS[0].turn_id not in metrics.per_turn
    assert "1 failed response(s) are not scored" in metrics.notes
    assert metrics.per_level == {"b": metrics.measures} and metrics.level_turns["b"][ROUGE] == 1


def test_topics_without_canonical_responses_skip_rouge_and_say_so(run_cli, tmp_path):
    raw = json.loads(datasets.topics_path("ikat23-test").read_text())[:1]
    for turn in raw[0]["turns"]:
        turn["response"] = ""
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps(raw))
    turns = datasets.topics(topics)
    path = tmp_path / "r.jsonl"
    path.write_text("".join(r.model_dump_json() + "\n" for r in records(turns, "An answer [1].").values()))
    code, out, err = run_cli("evaluate-responses", str(path), "--topics", str(topics), "--qrels", "ikat23-test")
    assert code == 0 and "Traceback" not in err
    assert f"ROUGE-L skipped: the topics ({topics}) have no canonical responses" in " ".join(out.split())


def judge_answer(body):
    return json.dumps({"aspects": [{"aspect": "names the diet", "score": 2}, {"aspect": "fits the user", "score": 1}]})


def test_the_judge_one_request_per_turn_cached_and_recorded(tmp_path):
    settings = LLMSettings(cache_dir=str(tmp_path / "cache"), retry_delay=0.001)
    with FakeOpenAI(content=judge_answer) as server:
        settings = settings.model_copy(update={"base_url": server.url})
        first = evaluate_responses(records(TURNS), TURNS, topics="t", judge_model="judge-x", judge_settings=settings)
        assert server.count == len(TURNS)
        again = evaluate_responses(records(TURNS), TURNS, topics="t", judge_model="judge-x", judge_settings=settings)
        assert server.count == len(TURNS), "cached: no request on a re-run"
    assert first.judge is not None and first.judge.model == "judge-x" and first.judge.requests == len(TURNS)
    assert again.judge is not None and again.judge.cache_hits == len(TURNS) and again.judge.requests == 0
    assert first.measures[JUDGE] == pytest.approx(0.75) and first.turns[JUDGE] == len(TURNS)
    assert first.judge.aspects[TURNS[0].turn_id] == [("names the diet", 2), ("fits the user", 1)]
    prompts = [r["messages"][1]["content"] for r in server.requests]  # in any order: they run concurrently
    prompt = next(p for p in prompts if p.startswith(f"User's question: {TURNS[0].manual_rewrite.strip()}\n"))
    assert f"Reference answer: {TURNS[0].response.strip()}" in prompt
    assert "[1]" not in prompt.split("Assistant's answer:")[1], "citations removed"


def test_a_malformed_judgement_is_repaired_then_counted_unjudged(tmp_path):
    def answer(body):  # the judge rambles on the second turn, first question and repair alike
        if TURNS[1].response.strip()[:40] in body["messages"][1]["content"]:
            return "I think it is quite good."
        return judge_answer(body)

    settings = LLMSettings(cache_dir=str(tmp_path / "cache"), retry_delay=0.001)
    with FakeOpenAI(content=answer) as server:
        metrics = evaluate_responses(records(TURNS), TURNS, topics="t", judge_model="judge-x",
                                     judge_settings=settings.model_copy(update={"base_url": server.url}))
        assert server.count == len(TURNS) + 1, "one repair for the malformed answer"
    assert metrics.judge is not None and list(metrics.judge.unjudged) == [TURNS[1].turn_id]
    assert TURNS[1].turn_id in metrics.per_turn and JUDGE not in metrics.per_turn[TURNS[1].turn_id], "never scored 0"
    assert metrics.turns[JUDGE] == len(TURNS) - 1
    assert any("1 turn(s) unjudged" in note for note in metrics.notes)


def test_a_judge_score_out_of_range_is_repaired(tmp_path):
    replies = iter([json.dumps({"aspects": [{"aspect": "a", "score": 5}]}), judge_answer(None)])
    settings = LLMSettings(cache_dir=str(tmp_path / "cache"), retry_delay=0.001)
    with FakeOpenAI(content=lambda body: next(replies)) as server:
        metrics = evaluate_responses(records(TURNS[:1]), TURNS[:1], topics="t", judge_model="j",
                                     judge_settings=settings.model_copy(update={"base_url": server.url}))
        assert server.count == 2 and "score 5; a score is 0, 1 or 2" in server.requests[1]["messages"][-1]["content"]
    assert metrics.measures[JUDGE] == pytest.approx(0.75)


def test_the_command_with_a_judge_that_answers_no_json(run_cli, tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text("".join(r.model_dump_json() + "\n" for r in records(TURNS[:2]).values()))
    levels = tmp_path / "levels.tsv"
    levels.write_text("".join(f"{t.turn_id}\tc\n" for t in TURNS[:2]))
    with FakeOpenAI(content=lambda body: "not json at all") as server:
        code, out, err = run_cli("evaluate-responses", str(path), "--topics", "ikat23-test", "--levels", str(levels),
                                 "--judge", "judge-x", "--base-url", server.url, "--cache-dir", str(tmp_path / "c"),
                                 "--retry-delay", "0.001", "--out", str(tmp_path / "m.json"))
        assert server.count == 4, "one request and one repair per turn"
    assert code == 1 and "Traceback" not in err, "unjudged turns are failed turns"
    text = " ".join(out.split())
    assert "judge: 2 turn(s) unjudged" in text and "judge judge-x: 0 turns judged, 2 unjudged" in text
    saved = json.loads((tmp_path / "m.json").read_text())
    assert saved["judge"]["model"] == "judge-x" and "no JSON object found" in saved["judge"]["unjudged"][TURNS[0].turn_id]
    assert "level c" in out


def test_responses_for_other_topics_are_a_clear_error(run_cli, tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text("".join(r.model_dump_json() + "\n" for r in records(TURNS[:1]).values()))
    code, _, err = run_cli("evaluate-responses", str(path), "--topics", "ikat24-test")
    assert code == 2 and "no response is for a turn of ikat24-test" in " ".join(err.split())


def test_two_runs_of_apcir_are_named_after_their_directories_or_as_given(run_cli, tmp_path):
    """Issue 37: `evaluate-responses a/responses.jsonl b/responses.jsonl` failed ("two responses files hold a run
    named 'responses'"); now each is its directory's name, or NAME=PATH's."""
    from apcir.evaluation.nuggets.gold import load_response_runs

    turns = datasets.topics("ikat25-test")[:3]
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "responses.jsonl").write_text(
            "".join(r.model_dump_json() + "\n" for r in records(turns, text=f"answer of {folder}").values()))
    a, b = str(tmp_path / "a" / "responses.jsonl"), str(tmp_path / "b" / "responses.jsonl")
    assert set(load_response_runs([a, b])) == {"a", "b"}
    assert set(load_response_runs([f"mine={a}", b])) == {"mine", "b"}
    code, out, err = run_cli("evaluate-responses", f"mine={a}", b, "--topics", "ikat25-test", "--nuggets",
                             "ikat25-test", "--matcher", "lexical", "--json")
    assert code == 0, err
    assert set(json.loads(out)["runs"]) == {"mine", "b"}
    code, _, err = run_cli("evaluate-responses", a, a, "--topics", "ikat25-test", "--nuggets", "ikat25-test",
                           "--matcher", "lexical")
    assert code == 2 and "name them NAME=PATH" in err
def test_responses_partly_for_other_topics_are_named_in_one_warning_and_left_out_of_the_means(run_cli, tmp_path):
    """A file that mixes topic sets (here three iKAT-24 turns answered with their canonical responses: ROUGE-L 1,
    which would lift the mean), evaluated on a topics file: one warning with the count and examples, exit 0, and
    every mean is the mean of the file's own turns alone."""
    own = records(TURNS, text="A short answer [1].")
    others = [t for t in datasets.topics("ikat24-test") if t.response.strip()][:3]
    foreign = {t.turn_id: ResponseRecord(turn_id=t.turn_id, responder="r", text=f"{t.response} [1]",
                                         passages=["p"], citations=["p"]) for t in others}
    topics = tmp_path / "t23.json"
    topics.write_text(datasets.topics_path("ikat23-test").read_text())
    alone, mixed = tmp_path / "alone.jsonl", tmp_path / "mix.jsonl"
    alone.write_text("".join(r.model_dump_json() + "\n" for r in own.values()))
    mixed.write_text("".join(r.model_dump_json() + "\n" for r in [*own.values(), *foreign.values()]))
    code, out, err = run_cli("evaluate-responses", str(mixed), "--topics", str(topics), "--json")
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, err
    assert f"3 of 7 response(s) are for turns outside {topics}" in " ".join(err.split())
    assert all(t.turn_id in err for t in others) and "left out of every mean" in err
    scored = json.loads(out)
    code, out, err = run_cli("evaluate-responses", str(alone), "--topics", str(topics), "--json")
    assert code == 0 and "warning:" not in err, err
    expected = json.loads(out)
    assert scored["measures"] == expected["measures"] and scored["measures"][ROUGE] < 1.0
    assert scored["per_turn"] == expected["per_turn"] and scored["turns"]["not in the topics"] == 3
