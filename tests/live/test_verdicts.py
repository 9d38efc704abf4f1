"""``apcir live-report``: what the simulated user thought of each answer, read from a published 2025 run (records
copied from ``irlabamsterdam/ikat2025``: tests/data/ikat25-interactive/README.md), from the local rubric users'
record and replies, and from the organisers' real server (its ``dummy`` task, which scores nothing)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import apcir
from apcir.live.client import SimulationClient
from apcir.live.protocol import PROTOCOLS
from apcir.live.server import Simulation, SimulationServer
from apcir.live.users import LLMScorer, rubric_sessions
from apcir.live.verdicts import (
    load_rubrics,
    read_live,
    read_published,
    read_verdicts,
    report,
    verdicts_of_dump,
    verdicts_of_replies,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "ikat25-interactive"
UVA = DATA / "uva-gpt5mini-no-no-gpt5mini.jsonl"
ORGA = DATA / "orga-no-no-no-llama8b-v2.jsonl"
TOKEN = "dmVyZGljdHMtdG9rZW4="


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_topic_1_1_of_a_published_run_counted_by_hand():
    """uva-gpt5mini-no-no-gpt5mini, topic 1-1, as published: nine answers and the closing record."""
    questions = load_rubrics()["1-1"]
    records = [r["responses"][0] for r in _records(UVA)]
    closing = records[-1]
    assert closing["text"] is None and closing["user_rubrik"] is None and closing["user_rubrik_score"] == 5
    answered = records[:-1]
    # by hand, from the records: a record's score rates its own answer; one scored 3 or less is followed by one
    # pursuing the same rubric (until the third try)
    assert [r["user_rubrik_score"] for r in answered] == [5, 2, 2, 5, 5, 3, 5, 5, 5]
    for this, following in zip(answered, answered[1:]):
        if this["user_rubrik_score"] <= 3:
            assert following["user_rubrik"] == this["user_rubrik"]
    tries = Counter(r["user_rubrik"] for r in answered)
    assert [tries[q] for q in questions] == [1, 3, 1, 2, 1, 1]

    run = report(read_published(UVA), load_rubrics())
    topic = run.topics["1-1"]
    assert list(topic.tries) == questions and list(topic.tries.values()) == [1, 3, 1, 2, 1, 1]
    assert (topic.rubrics_total, topic.rubrics_reached, topic.rubrics_covered) == (6, 6, 6)
    assert (topic.answers, topic.turns, topic.scored, topic.nulls, topic.closed) == (9, 10, 9, 0, True)
    assert topic.mean_score == pytest.approx(37 / 9)  # the closing record's repeated 5 is not an answer
    assert topic.above == 6 and topic.share_above == pytest.approx(6 / 9)  # a 3 is not above the threshold
    assert set(topic.best.values()) == {5}
    assert run.totals.mean_best_unreached_as_0 == pytest.approx(5.0) and run.name == UVA.stem


def test_a_null_score_is_a_try_not_in_the_mean():
    """orga-no-no-no-llama8b-v2, the first three records of topic 1-1: the second answer's grading failed."""
    records = [r["responses"][0] for r in _records(ORGA)]
    assert [r["user_rubrik_score"] for r in records] == [5, None, 5]
    assert records[1]["user_rubrik"] == records[2]["user_rubrik"]  # asked again after the null
    run = report(read_published(ORGA), load_rubrics())
    topic = run.topics["1-1"]
    assert list(topic.tries.values()) == [1, 2] and topic.nulls == 1 and topic.scored == 2
    assert topic.mean_score == 5.0 and topic.rubrics_reached == 2 and topic.rubrics_covered == 2
    assert topic.rubrics_total == 6 and not topic.closed  # an excerpt: the user had not ended the topic
    # the 2026 results' total: over all six rubrics, the four unreached counted as 0
    assert run.totals.mean_best_unreached_as_0 == pytest.approx(10 / 6)
    assert run.totals.mean_best_reached == 5.0


def test_the_command_names_runs_compares_them_over_rubrics_and_prints_coverage_beside_the_score(run_cli):
    from scipy import stats

    code, out, err = run_cli("live-report", f"uva={UVA}", f"orga={ORGA}", "--json")
    assert code == 0, err
    data = json.loads(out)
    uva, orga = data["runs"]
    assert (uva["name"], orga["name"]) == ("uva", "orga")
    for run in (uva, orga):
        assert {"rubrics_total", "rubrics_reached", "tries", "mean_score", "answers"} <= set(run["topics"]["1-1"])
    assert orga["topics"]["1-1"]["tries"] == {"What  food is good for stomach acid reflux and some that I should "
                                              "avoid?": 1, "What are some fruits good for acid reflux?": 2}
    # paired over the six rubrics either run reached; orga did not reach four (counted 0, not covered)
    comparison = data["comparison"]
    assert comparison["baseline"] == "uva" and comparison["rubrics"] == 6 and comparison["topics"] == ["1-1"]
    best = next(t for t in comparison["tests"] if t["measure"].startswith("best"))
    covered = next(t for t in comparison["tests"] if t["measure"].startswith("covered"))
    assert best["mean_system"] == pytest.approx(10 / 6) and best["mean_baseline"] == 5.0
    assert best["p_value"] == pytest.approx(stats.ttest_rel([5, 5, 0, 0, 0, 0], [5] * 6).pvalue)
    assert covered["mean_system"] == pytest.approx(2 / 6) and covered["mean_baseline"] == 1.0
    code, out, err = run_cli("live-report", str(UVA), str(ORGA))
    assert code == 0, err
    text = " ".join(out.split())
    assert "2 of 6 (33%) rubrics reached" in text and "mean 5.00 over 2 scored answers (1 without a score" in text
    assert "1.67 over all 6 rubrics with an unreached one counted as 0" in text
    assert "topic 1-1: no closing words recorded" in err


def test_what_is_not_a_run_is_one_line(run_cli, tmp_path):
    other = tmp_path / "other.jsonl"
    other.write_text('{"turn_id": "1-1_1", "text": "x"}\n')
    code, _, err = run_cli("live-report", str(other))
    assert code == 2 and "neither a run/dump record" in err and err.count("\n") == 1, err
    code, _, err = run_cli("live-report", str(tmp_path))
    assert code == 2 and "not a live run directory" in err and err.count("\n") == 1, err
    bad = tmp_path / "rubrics.json"
    bad.write_text('["q"]')
    code, _, err = run_cli("live-report", str(UVA), "--rubrics", str(bad))
    assert code == 2 and "a rubrics file is" in err, err


def test_a_report_without_scores_prints_no_score_columns(capsys):
    """A record whose user_meta holds no rubric_score (the shape the organisers' dummy task stores; the real
    server's own record is read in the last test) is reported as unscored, never as zeros."""
    from apcir.cli.live_report import print_report

    records = [{"metadata": {"topic_id": "dummy1_1"}, "responses": [{"user_utterance": "Why is the sky blue?",
                                                                     "user_meta": {}, "assistant_text": "Light."}]},
               {"metadata": {"topic_id": "dummy1_2"}, "responses": [{"user_utterance": "Thanks!",
                                                                     "user_meta": {"dummy_meta": True},
                                                                     "assistant_text": None}]}]
    run = report(verdicts_of_dump(records, load_rubrics(), name="dummy", path="dump.jsonl"), load_rubrics())
    assert not run.scored and run.totals.mean_score is None and run.topics["dummy1"].rubrics_total is None
    print_report(run)
    out = " ".join(capsys.readouterr().out.split())
    assert "dummy (a run/dump record, dump.jsonl): 1 answer over 1 topic; the run carries no rubric scores" in out
    assert "mean" not in out


def _scorer(question: str, answer: str) -> int | None:
    """Scores each answer by its last word (``?``: grading failed): the scores the test plays."""
    last = answer.split()[-1]
    return None if last == "?" else int(last)


def test_the_local_rubric_users_record_user_meta_where_the_organisers_server_does():
    """Topic 1-1 answered with scores 5, 2, null, 4, 3, 3, 3, 5, 5, 5: its record (run/dump) carries, with each
    answer, its score and the rubric of the next utterance; the last answer and the closing record the score only
    (the organisers' run/continue stores session.user_meta[-2], the new utterance's meta)."""
    rubrics = load_rubrics()
    q = rubrics["1-1"]
    plan = [5, 2, None, 4, 3, 3, 3, 5, 5, 5]
    simulation = Simulation(lambda: rubric_sessions(apcir.topics("ikat25-test"), _scorer, conversations=1),
                            TOKEN, send_verdicts=True)
    with SimulationServer(simulation) as server:
        client = SimulationClient(server.url, TOKEN, PROTOCOLS[2026])
        replies = [client.start("meta", "verdicts").model_dump(mode="json")]
        for value in plan:
            replies.append(client.send("meta", f"answer {'?' if value is None else value}", {}, []).model_dump(
                mode="json"))
        dump = client.dump("meta")
    assert replies[-1]["last_response_of_run"]
    # rubric 1 passes; rubric 2 after a 2, a null and a 4; rubric 3 three times not above 3, then moved on
    pursued = [q[0], q[1], q[1], q[1], q[2], q[2], q[2], q[3], q[4], q[5]]
    metas = [r["responses"][0]["user_meta"] for r in dump]
    assert metas == [{"rubric_score": s, "rubric": r} for s, r in zip(plan[:-1], pursued[1:])] + [
        {"rubric_score": 5}, {"rubric_score": 5}]
    assert dump[-1]["responses"][0]["assistant_text"] is None
    # the replies carry each utterance's own meta (--send-verdicts): its rubric, the score of the answer before
    assert replies[0]["user_meta"]["rubric"] == q[0] and "rubric_score" not in replies[0]["user_meta"]
    assert [r["user_meta"]["rubric"] for r in replies[1:-1]] == pursued[1:]
    from_dump = verdicts_of_dump(dump, rubrics, name="d", path="d")
    from_replies = verdicts_of_replies(replies, name="r", path="r")
    assert [(v.rubric, v.score) for v in from_dump.by_turn().values()] == list(zip(pursued, plan))
    assert from_dump.by_turn() == from_replies.by_turn()
    topic = report(from_dump, rubrics).topics["1-1"]
    assert list(topic.tries.values()) == [1, 3, 3, 1, 1, 1] and topic.nulls == 1
    assert (topic.rubrics_reached, topic.rubrics_covered, topic.closed) == (6, 5, True)
    assert topic.mean_score == pytest.approx(35 / 9)


def test_the_llm_scorer_gives_no_score_for_a_reply_without_a_grade():
    from fake_openai import FakeOpenAI, Reply

    with FakeOpenAI() as llm:
        llm.queue(Reply(content="Grade: 4"), Reply(content="I cannot grade this."))
        scorer = LLMScorer("fake", base_url=llm.url)
        assert scorer("Why?", "Because.") == 4
        assert scorer("Why?", "Because.") is None
        assert "Question: Why?" in llm.requests[0]["messages"][0]["content"]


GRADES = ["4", "no idea", "2", "5"]
"""What the scoring LLM (the fake server) answers to the four answers of a run: 4, no grade, 2, 5."""


@pytest.fixture(scope="module")
def rubric_runs(live_toml, tmp_path_factory):
    """apcir converse against simulate-user's rubric users (patience 4, one conversation, replies with their
    user_meta), the scores from an LLM: a run, and a debug run (which has no dump)."""
    from fake_openai import FakeOpenAI, Reply

    from apcir.experiment.config import load_config
    from apcir.live.converse import Converse

    folder = tmp_path_factory.mktemp("rubric-runs")
    outs = {"run": folder / "run", "debug": folder / "debug"}
    with FakeOpenAI() as llm:
        scorer = LLMScorer("fake", base_url=llm.url)
        simulation = Simulation(lambda: rubric_sessions(apcir.topics("ikat25-test"), scorer, conversations=1,
                                                        patience=4), TOKEN, send_verdicts=True)
        with SimulationServer(simulation) as server:
            client = SimulationClient(server.url, TOKEN, PROTOCOLS[2026])
            for mode, out in outs.items():
                llm.queue(*(Reply(content=g) for g in GRADES))
                Converse(load_config(live_toml), client, out, run_id=mode, debug=mode == "debug").play()
    return outs


@pytest.mark.slow
def test_a_run_and_a_debug_run_against_rubric_users_give_the_same_report(rubric_runs, run_cli):
    """The run's record (dump.jsonl) and the debug run's replies (the journal) give the same verdicts."""
    assert (rubric_runs["run"] / "dump.jsonl").exists() and not (rubric_runs["debug"] / "dump.jsonl").exists()
    code, out, err = run_cli("live-report", str(rubric_runs["run"]), str(rubric_runs["debug"]), "--json")
    assert code == 0, err
    run, debug = json.loads(out)["runs"]
    assert run["source"].startswith("user_meta of the server's record")
    assert debug["source"].startswith("user_meta of the server's replies")
    q = load_rubrics()["1-1"]
    for got in (run, debug):
        topic = got["topics"]["1-1"]
        # rubric 1 scored 4 (covered); rubric 2: no grade, 2, then 5 (covered at the third try); patience 4: ended
        assert topic["tries"] == {q[0]: 1, q[1]: 3} and topic["nulls"] == 1 and topic["answers"] == 4
        assert topic["mean_score"] == pytest.approx(11 / 3) and topic["rubrics_covered"] == 2
        assert topic["closed"] and topic["rubrics_total"] == 6 and topic["turns"] == 5
    assert json.loads(out)["comparison"]["tests"][0]["p_value"] == 1.0  # the same verdicts: no difference


@pytest.mark.slow
def test_the_inspector_shows_the_users_verdict_on_each_live_turn(rubric_runs, live_toml, tmp_path, run_cli):
    from browser import browser, open_page
    from selenium.webdriver.common.by import By

    from apcir.live.inspect import gather_live

    data = gather_live([rubric_runs["run"]], load_rubrics())
    verdicts = [t["runs"]["run"]["verdict"] for t in data["turns"]]
    assert [t["id"] for t in data["turns"]] == ["1-1_1", "1-1_2", "1-1_3", "1-1_4"]
    assert [v["score"] for v in verdicts] == [4, None, 2, 5] and [v["try"] for v in verdicts] == [1, 1, 2, 3]
    assert all(len(t["runs"]["run"]["fused"]) == 10 and t["runs"]["run"]["response"]["text"] for t in data["turns"])
    page = tmp_path / "live.html"
    code, _, err = run_cli("inspect", str(rubric_runs["run"]), "--out", str(page), "--config", str(live_toml))
    assert code == 0, err
    q = load_rubrics()["1-1"]
    driver = browser()
    try:
        open_page(driver, page)
        badges = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#turn-list .score")]
        assert badges == ["4/5", "∅/5", "2/5", "5/5"]
        driver.find_element(By.CSS_SELECTOR, '#turn-list li[data-turn="1-1_3"]').click()
        verdict = driver.find_element(By.CSS_SELECTOR, ".verdict")
        assert driver.find_element(By.CSS_SELECTOR, ".verdict-score").text == "2"
        assert "not above 3" in verdict.text and "try 2" in verdict.text
        assert driver.find_element(By.CSS_SELECTOR, ".verdict-rubric").text == " ".join(q[1].split())
        assert "10 citations sent" in driver.find_element(By.ID, "turn-view").text
        assert "(no text)" not in driver.find_element(By.ID, "turn-view").text  # --config: the passages' texts
        driver.find_element(By.CSS_SELECTOR, '#turn-list li[data-turn="1-1_2"]').click()
        assert "no score (grading failed" in driver.find_element(By.CSS_SELECTOR, ".verdict").text
        driver.save_screenshot(str(tmp_path / "live.png"))
        assert (tmp_path / "live.png").stat().st_size > 10_000
    finally:
        driver.quit()


@pytest.mark.slow
def test_converse_points_to_the_report_when_the_user_scored_the_answers(live_toml, tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("IKAT_API_TOKEN", TOKEN)
    simulation = Simulation(lambda: rubric_sessions(apcir.topics("ikat25-test"), _scorer_of_5, conversations=1,
                                                    patience=1), TOKEN)
    with SimulationServer(simulation) as server:
        code, stdout, err = run_cli("converse", str(live_toml), "--api", server.url, "--run-id", "hint",
                                    "-o", str(tmp_path / "hint"))
    assert code == 0, err
    assert f"the simulated user scored the answers: apcir live-report {tmp_path / 'hint'}" in stdout


def _scorer_of_5(question: str, answer: str) -> int:
    return 5


@pytest.mark.slow
def test_a_run_of_the_organisers_dummy_task_carries_no_scores_and_says_so(real_server, real_token, live_toml,
                                                                          tmp_path, run_cli, monkeypatch):
    """The real server's dummy users record ``{"dummy_meta": true}`` and no rubric: the report says the run
    carries no rubric scores (no zeros taken for scores), for the run directory and for its dump alone."""
    monkeypatch.setenv("IKAT_API_TOKEN", real_token)
    out = tmp_path / "dummy"
    code, stdout, err = run_cli("converse", str(live_toml), "--api", real_server.url, "--run-id", "verdicts-dummy",
                                "-o", str(out))
    assert code == 0, err
    assert "live-report" not in stdout
    metas = [json.loads(line)["responses"][0]["user_meta"] for line in (out / "dump.jsonl").read_text().splitlines()]
    assert metas == [{}, {"dummy_meta": True}, {}, {"dummy_meta": True}]  # as the organisers' server stores them
    for given in (out, out / "dump.jsonl"):
        code, text, err = run_cli("live-report", str(given))
        assert code == 0, err
        assert "2 answers over 2 topics; the run carries no rubric scores" in " ".join(text.split())
        assert "mean" not in text and "0.00" not in text
    code, text, err = run_cli("live-report", str(out), "--json")
    run = json.loads(text)["runs"][0]
    assert run["scored"] is False and run["totals"]["mean_score"] is None and run["totals"]["answers"] == 2
    assert run["totals"]["mean_best_unreached_as_0"] is None
    assert read_verdicts(out, load_rubrics()).scored is False and read_live(out, load_rubrics()).topics[0].closed
    from apcir.live.inspect import gather_live

    views = [t["runs"]["dummy"] for t in gather_live([out], load_rubrics())["turns"]]
    assert len(views) == 2 and all(v["verdict"] is None and v["scored"] is False for v in views)
