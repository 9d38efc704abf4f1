"""LaMP-QA as a topic set: answered without retrieval (no passages, no citations) and judged on its given rubric
aspects, 0-2 each, normalised by 2 and averaged (LaMP-QA section 3.2): hand-computed over scripted judgements."""

from __future__ import annotations

import json

import pytest
from fake_openai import FakeOpenAI

from apcir import datasets
from apcir.contract.responses import load_responses
from apcir.datasets.lampqa import PREFIX
from apcir.errors import ApcirError

QUESTIONS = [
    {"id": "q1", "question": "How do I start running at 50?", "narrative": "I have bad knees and little time.",
     "profile": [{"text": "Best shoes for flat feet?", "description": "I overpronate."}, "Is yoga good for backs?"],
     "rubric_aspects": [{"aspect": "knee-friendly plan", "reason": "bad knees", "evidence": "..."},
                        {"aspect": "short sessions"}, {"aspect": "shoe advice"}]},
    {"id": "q2", "question": "Which novel should I read next?", "narrative": "I loved Dune.",
     "profile": [{"question": "Books like Foundation?", "detail": "I like big ideas."}],
     "rubric_aspects": ["science fiction", "big ideas"]},
]
SCORES = {"How do I start running at 50?": [2, 1, 0], "Which novel should I read next?": [2, 2]}


@pytest.fixture
def lampqa(tmp_path):
    path = tmp_path / "lampqa.json"
    path.write_text(json.dumps(QUESTIONS))
    return f"{PREFIX}{path}"


def content(body: dict) -> str:
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    if "Score each aspect" in system:
        question = user.split("\n")[0].removeprefix("User's question: ")
        return json.dumps({"scores": SCORES[question]})
    assert "Passages:" not in user and "no passages are given" in system
    return json.dumps({"response": "Start with brisk walks, then short runs.", "ptkb_used": ["1"]})


def test_the_questions_become_turns_with_their_profile_and_aspects(lampqa):
    turns = datasets.topics(lampqa)
    assert [t.turn_id for t in turns] == ["lampqa-q1_1", "lampqa-q2_1"]
    assert turns[0].ptkb == {"1": "Best shoes for flat feet? — I overpronate.", "2": "Is yoga good for backs?"}
    assert turns[1].ptkb == {"1": "Books like Foundation? — I like big ideas."} and not turns[0].history
    assert datasets.given_aspects(lampqa) == {"lampqa-q1_1": ["knee-friendly plan", "short sessions", "shoe advice"],
                                              "lampqa-q2_1": ["science fiction", "big ideas"]}


def test_answered_without_passages_and_judged_on_the_given_aspects(lampqa, tmp_path, run_cli):
    out = tmp_path / "responses.jsonl"
    with FakeOpenAI(content=content) as server:
        common = ["--base-url", server.url, "--cache-dir", str(tmp_path / "cache")]
        code, _, err = run_cli("respond", "--topics", lampqa, "--responder", "gpt-test", "-o", str(out),
                               "--no-progress", *common)
        assert code == 0, err
        records = load_responses(out)
        assert all(r.status == "ok" and r.citations == [] and r.passages == [] for r in records.values())
        code, stdout, err = run_cli("evaluate-responses", str(out), "--topics", lampqa, "--judge", "gpt-test",
                                    "--json", *common)
    assert code == 0, err
    metrics = json.loads(stdout)
    # q1: (2 + 1 + 0) / (2 * 3) = 0.5; q2: (2 + 2) / (2 * 2) = 1; mean 0.75
    assert metrics["per_turn"]["lampqa-q1_1"]["judge"] == pytest.approx(0.5)
    assert metrics["per_turn"]["lampqa-q2_1"]["judge"] == pytest.approx(1.0)
    assert metrics["measures"]["judge"] == pytest.approx(0.75)
    assert "ROUGE-L" not in metrics["measures"]


def test_a_file_with_other_field_names_is_one_line(tmp_path, run_cli):
    path = tmp_path / "other.json"
    path.write_text(json.dumps([{"qid": 1, "query": "x"}]))
    with pytest.raises(ApcirError, match="lacks id, question, profile, rubric_aspects"):
        datasets.topics(f"lampqa:{path}")
    code, _, err = run_cli("respond", "--topics", f"lampqa:{path}", "--responder", "gpt-test", "-o",
                           str(tmp_path / "r.jsonl"))
    assert code == 2 and "Traceback" not in err
