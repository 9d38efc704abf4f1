"""End to end: `apcir run` over a small real collection, with the LLM stage against a local OpenAI-protocol server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, Reply, default_content

from apcir import datasets
from apcir.contract.levels import load_levels
from apcir.contract.runs import load_run
from apcir.experiment.config import ExperimentConfig
from apcir.experiment.pipeline import run_experiment

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "APCIR_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)


def config(small, server, name="t", **fusion):
    root, collection, index, chosen = small
    return ExperimentConfig.model_validate(
        {
            "name": name,
            "topics": "ikat23-test",
            "turns": chosen,
            "output_dir": str(root / name),
            "reformulator": {"method": "gpt-test", "base_url": server.url, "cache_dir": str(root / f"cache-{name}"),
                             "concurrency": 1},
            "retrieval": {"index": str(index), "collection": str(collection), "encoder": "splade-tiny"},
            "fusion": {"weights": {"source": "cv", "folds": 2, "step": 0.1}, **fusion},
            "evaluation": {"qrels": "ikat23-test-provenance"},
        }
    )


def test_second_run_makes_no_llm_requests_and_no_retrieval_calls(small, tmp_path):
    _, _, _, chosen = small
    with FakeOpenAI() as server:
        cfg = config(small, server)
        first = run_experiment(cfg, progress=False)
        assert server.count == len(chosen) == first.llm_requests
        run_dir = cfg.run_dir
        qr_fusion = load_run(run_dir / "systems" / "qr-fusion.run.gz")  # one search per evaluated turn
        assert first.retrieval_calls == 4 * len(chosen) + len(qr_fusion)  # three lists, the manual rewrite
        for name in ("fused.run", "submission.json", "metrics.json", "weights.json", "weights-folds.json",
                     "levels.tsv", "environment.json", "config.json", "timings.json", "responses.jsonl", "ptkb.run",
                     "ptkb/profile.run", "ptkb/heuristic.run"):
            assert (run_dir / name).exists(), name
        metrics = first.metrics
        assert metrics is not None and "apcir" in metrics.systems and "rrf" in metrics.systems
        assert metrics.protocol.startswith("2-fold cross-validation")
        assert "entropy" in metrics.systems and "deps" in metrics.systems

        second = run_experiment(cfg, progress=False)
        assert server.count == len(chosen), "no LLM request on the second run"
        assert second.llm_requests == 0 and second.retrieval_calls == 0
        assert not any(outcome.ran for outcome in second.outcomes)
        assert second.metrics == metrics

        changed = run_experiment(config(small, server, norm="max"), progress=False)
        assert [o.name for o in changed.outcomes if o.ran] == ["fuse", "respond", "export", "evaluate", "validate", "report", "inspect"]
        assert server.count == len(chosen)


def test_interrupted_run_continues_where_it_stopped(small, capsys):
    _, _, _, chosen = small
    with FakeOpenAI() as server:
        server.queue(Reply(), Reply(), Reply(), Reply(status=401))  # the fourth request: key revoked
        cfg = config(small, server, name="resume")
        with pytest.raises(Exception, match="401|rejected|key"):
            run_experiment(cfg, progress=False)
        done = sum(1 for _ in (cfg.run_dir / "reformulations.jsonl").open())
        assert done == 3
        report = run_experiment(cfg, progress=False)
        assert server.count == 4 + (len(chosen) - 3), "only the unfinished turns are asked again"
        assert report.metrics is not None


def test_submission_validates_and_broken_copies_fail(small, run_cli, tmp_path):
    with FakeOpenAI() as server:
        cfg = config(small, server, name="valid")
        run_experiment(cfg, progress=False)
    _, _, _, chosen = small
    subset = tmp_path / "topics.json"
    conversations = {t.split("_")[0] for t in chosen}
    topics = [c for c in json.loads((ROOT / "apcir/datasets/topics/ikat23-test.json").read_text())
              if c["number"] in conversations]
    subset.write_text(json.dumps(topics))
    submission = cfg.run_dir / "submission.json"
    code, out, err = run_cli("validate", str(submission), "--topics", str(subset))
    assert code == 0, err
    data = json.loads(submission.read_text())
    missing = data["turns"].pop(1)["turn_id"]
    data["turns"][0]["responses"][0]["passage_provenance"][0]["id"] = "not-a-clueweb-id"
    data["turns"][2]["responses"].append(dict(data["turns"][2]["responses"][0]))  # rank 1 again
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(data))
    code, out, err = run_cli("validate", str(broken), "--topics", str(subset))
    assert code == 1
    problems = [line for line in err.splitlines() if line.startswith("problem:")]
    assert len(problems) == 3, err
    assert any(missing in p for p in problems)
    assert any("not-a-clueweb-id" in p for p in problems)
    assert any("rank 1 does not increase" in p for p in problems)


def test_report_command_on_a_run_directory(small, run_cli):
    with FakeOpenAI() as server:
        cfg = config(small, server, name="nb")
        run_experiment(cfg, progress=False)
    code, out, err = run_cli("report", str(cfg.run_dir), "--out", str(cfg.run_dir / "again"))
    assert code == 0, err
    text = (cfg.run_dir / "again" / "report.md").read_text()
    for title in ("Table 1", "Table 2", "Table 4", "Table 5", "Table 6"):
        assert title in text
    assert (cfg.run_dir / "again" / "nb-levels.png").exists()


def test_a_failed_turn_is_searched_with_its_utterance_and_asked_again_next_run(small):
    _, _, _, chosen = small
    target = next(t for t in datasets.topics("ikat23-test") if t.turn_id == chosen[0])
    marker = f"Current utterance (turn {target.turn_number}): {target.utterance}"
    broken = {"on": True}

    def answer(body):  # the target turn gets no JSON, first ask and repair alike, while `broken` holds
        asked = any(marker in m["content"] for m in body["messages"] if m["role"] == "user")
        return "not json" if asked and broken["on"] else default_content(body)

    with FakeOpenAI(content=answer) as server:
        cfg = config(small, server, name="failed")
        first = run_experiment(cfg, progress=False)
        assert first.failed_turns == [chosen[0]]
        levels = load_levels(cfg.run_dir / "levels.tsv")
        assert levels[chosen[0]] == "a", "a failed turn falls back to level a"
        assert chosen[0] in load_run(cfg.run_dir / "lists" / "rewrite.run.gz"), "the failed turn is still searched"
        requests = server.count
        broken["on"] = False
        second = run_experiment(cfg, progress=False)
        assert server.count == requests + 1, "only the failed turn is asked again"
        assert second.failed_turns == [] and second.retrieval_calls > 0
        third = run_experiment(cfg, progress=False)
        assert third.llm_requests == 0 and third.retrieval_calls == 0


def test_tune_on_other_conversations_then_apply_a_weights_file(small, tmp_path):
    root, collection, index, chosen = small
    conversations = sorted({t.split("_")[0] for t in chosen})
    tune_convs, test_convs = conversations[:2], conversations[2:]
    topics = [c for c in json.loads((ROOT / "apcir/datasets/topics/ikat23-test.json").read_text())
              if c["number"] in tune_convs]
    tune_topics = tmp_path / "tune-topics.json"
    tune_topics.write_text(json.dumps(topics))
    with FakeOpenAI() as server:
        base = config(small, server, name="tuned").model_dump()
        base["turns"] = [t for t in chosen if t.split("_")[0] in test_convs]
        base["fusion"]["weights"] = {"source": "tune", "tune_topics": str(tune_topics),
                                     "tune_qrels": "ikat23-test-provenance", "step": 0.1}
        tuned_cfg = ExperimentConfig.model_validate(base)
        tuned = run_experiment(tuned_cfg, progress=False)
        assert tuned.metrics is not None
        assert tuned.metrics.protocol == f"tuned on {tune_topics} / ikat23-test-provenance"
        assert "no-personalisation" in tuned.metrics.systems and "no-levels" in tuned.metrics.systems
        # the same qrels file, but none of the evaluated turns was tuned on: held out, not "tuned on test"
        assert all(t.split("_")[0] in test_convs for t in tuned.metrics.systems["apcir"].per_turn)
        assert not any(s.tuned_on_test for s in tuned.metrics.systems.values())
        assert (tuned_cfg.run_dir / "tune" / "lists" / "third.run.gz").exists()

        base["name"], base["output_dir"] = "fromfile", str(root / "fromfile")
        base["fusion"]["weights"] = {"source": "file", "file": str(tuned_cfg.run_dir / "weights.json")}
        from_file = run_experiment(ExperimentConfig.model_validate(base), progress=False)
    assert from_file.metrics is not None
    assert from_file.metrics.systems["apcir"].means == tuned.metrics.systems["apcir"].means

    base["name"], base["output_dir"] = "ontest", str(root / "ontest")
    base["turns"] = chosen  # now the evaluated turns include the tuning conversations
    with FakeOpenAI() as server:
        base["reformulator"]["base_url"] = server.url
        on_test = run_experiment(ExperimentConfig.model_validate(base), progress=False)
    assert on_test.metrics is not None and on_test.metrics.systems["apcir"].tuned_on_test


def respond_or_reformulate(body):
    """The fake model: a cited response, a judgement or a reformulation, as the system message asks."""
    system = body["messages"][0]["content"]
    if "conversational search assistant" in system:
        return json.dumps({"response": "From the passages [1], and also [2].", "ptkb_used": ["1"]})
    if "You grade the answer" in system:
        return json.dumps({"aspects": [{"aspect": "a", "score": 2}, {"aspect": "b", "score": 0}]})
    return default_content(body)


def test_an_llm_responder_one_request_per_turn_and_none_on_a_rerun(small):
    _, _, _, chosen = small
    with FakeOpenAI(content=respond_or_reformulate) as server:
        base = config(small, server, name="llm-respond").model_dump()
        base["respond"] = {"responder": "gpt-respond", "base_url": server.url,
                           "cache_dir": base["reformulator"]["cache_dir"], "concurrency": 1}
        base["evaluation"]["ptkb_qrels"] = "ikat23-test-ptkb"
        base["evaluation"]["judge"] = {"model": "judge-test", "base_url": server.url,
                                       "cache_dir": base["reformulator"]["cache_dir"]}
        cfg = ExperimentConfig.model_validate(base)
        first = run_experiment(cfg, progress=False)
        asked = [r for r in server.requests if "conversational search assistant" in r["messages"][0]["content"]]
        assert len(asked) == len(chosen), "one response request per turn"
        judged = [t for t in datasets.topics("ikat23-test") if t.turn_id in chosen and t.response.strip()]
        assert first.llm_requests == 2 * len(chosen) + len(judged) and first.failed_turns == []
        again = run_experiment(cfg, progress=False)
        assert again.llm_requests == 0 and server.count == 2 * len(chosen) + len(judged)
    metrics = first.metrics
    assert metrics is not None and metrics.responses is not None and metrics.ptkb is not None
    assert metrics.responses.responder == "gpt-respond" and metrics.responses.turns["ok"] == len(chosen)
    assert metrics.responses.judge is not None and metrics.responses.judge.model == "judge-test"
    assert metrics.responses.measures["judge"] == 0.5
    assert set(metrics.ptkb.systems) == {"apcir", "heuristic", "profile"}
    data = json.loads((cfg.run_dir / "submission.json").read_text())
    for entry in data["turns"]:
        response = entry["responses"][0]
        assert response["text"] == "From the passages [1], and also [2]."
        assert [p["used"] for p in response["passage_provenance"][:3]] == [True, True, False]
    report = (cfg.run_dir / "report" / "report.md").read_text()
    assert "## Responses" in report and "## PTKB statement ranking" in report


def test_a_failing_judge_leaves_the_evaluation_unfinished_and_the_next_run_asks_it_again(small):
    _, _, _, chosen = small
    judge_down = {"down": True}

    def reply(body):
        if "You grade the answer" in body["messages"][0]["content"] and judge_down["down"]:
            return Reply(status=500)
        return None

    with FakeOpenAI(content=respond_or_reformulate, reply=reply) as server:
        base = config(small, server, name="judge-down").model_dump()
        base["evaluation"]["judge"] = {"model": "judge-test", "base_url": server.url, "max_retries": 0,
                                       "cache_dir": base["reformulator"]["cache_dir"]}
        cfg = ExperimentConfig.model_validate(base)
        first = run_experiment(cfg, progress=False)
        judged = [t.turn_id for t in datasets.topics("ikat23-test") if t.turn_id in chosen and t.response.strip()]
        assert sorted(first.unjudged_turns) == sorted(judged) and first.failed_turns == []
        assert first.metrics is not None and first.metrics.responses is not None
        assert any("HTTP 500" in note for note in first.metrics.responses.notes), "the real cause is given"
        judge_down["down"] = False
        before = server.count
        again = run_experiment(cfg, progress=False)
        assert again.unjudged_turns == [] and server.count - before == len(judged), "only the judge is asked again"
        settled = run_experiment(cfg, progress=False)
        assert settled.llm_requests == 0 and all(not o.ran for o in settled.outcomes)
    assert again.metrics is not None and again.metrics.responses is not None
    assert again.metrics.responses.measures["judge"] == 0.5
