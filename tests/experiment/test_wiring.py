"""One wiring: `apcir run` and the stage commands build the same requests, from the same settings records."""

from __future__ import annotations

import json

import pytest
from fake_openai import FakeOpenAI

from apcir import datasets
from apcir.contract.weights import load_weights
from apcir.experiment.config import ExperimentConfig
from apcir.experiment.pipeline import run_experiment

pytestmark = pytest.mark.slow

ABLATIONS = {"cot": False, "level_examples": False, "demonstrations": 1, "history_turns": 2,
             "history_response_chars": 120}
FLAGS = ["--no-cot", "--no-level-examples", "--demonstrations", "1", "--history-turns", "2",
         "--history-response-chars", "120", "--temperature", "0.3", "--max-tokens", "500",
         "--structured", "json_object", "--no-cache"]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "APCIR_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)


def picked(small) -> list[str]:
    """Two judged turns of each of the small collection's four conversations (CV needs two conversations)."""
    judged = datasets.qrels("ikat23-test-provenance")
    by_conversation: dict[str, list[str]] = {}
    for turn in small[3]:
        if turn in judged:
            by_conversation.setdefault(turn.rpartition("_")[0], []).append(turn)
    return [t for turns in by_conversation.values() for t in turns[:2]]


def experiment(small, name, reformulator, **top):
    root, collection, index, chosen = small
    return ExperimentConfig.model_validate({
        "name": name, "topics": "ikat23-test", "turns": picked(small), "output_dir": str(root / name),
        "reformulator": {**({} if reformulator["method"].startswith("file:") or reformulator["method"] in ("heuristic", "manual")
                            else {"cache_dir": str(root / f"cache-{name}"), "concurrency": 1}), **reformulator},
        "retrieval": {"index": str(index), "collection": str(collection), "encoder": "splade-tiny"},
        "fusion": {"weights": {"source": "cv", "folds": 2, "step": 0.1}, "baselines": ["list-rewrite", "equal"]},
        "evaluation": {"qrels": "ikat23-test-provenance"},
        **top,
    })


def canonical(bodies):
    return sorted(json.dumps(b, sort_keys=True) for b in bodies)


def test_run_with_every_ablation_in_its_config_sends_what_reformulate_sends(small, run_cli, tmp_path):
    chosen = picked(small)
    with FakeOpenAI() as server:
        cfg = experiment(small, "ablations", {
            "method": "gpt-test", "base_url": server.url, "prompt": ABLATIONS, "temperature": 0.3, "max_tokens": 500,
            "structured": "json_object", "no_cache": True})
        run_experiment(cfg, progress=False)
        from_run = list(server.requests)
    assert len(from_run) == len(chosen)
    with FakeOpenAI() as server:
        code, _, err = run_cli("reformulate", "--topics", "ikat23-test", "--turns", ",".join(chosen),
                               "--llm", "gpt-test", "--base-url", server.url, "--out", str(tmp_path / "r.jsonl"),
                               "--concurrency", "1", "--no-progress", *FLAGS)
        from_command = list(server.requests)
    assert code == 0, err
    assert canonical(from_run) == canonical(from_command)
    body = from_run[0]
    assert body["temperature"] == 0.3 and body["max_tokens"] == 500
    assert body["response_format"] == {"type": "json_object"}
    assert "reasoning" not in body["messages"][0]["content"], "no chain of thought asked for"
    assert sum(m["role"] == "assistant" for m in body["messages"]) == 1, "one demonstration"


def test_one_word_of_the_system_prompt_redoes_the_reformulation(small, monkeypatch):
    from apcir.reformulation import prompt

    with FakeOpenAI() as server:
        cfg = experiment(small, "promptword", {"method": "gpt-test", "base_url": server.url})
        run_experiment(cfg, progress=False)
        asked = server.count
        assert asked == len(picked(small))
        again = run_experiment(cfg, progress=False)
        assert server.count == asked and not any(o.ran for o in again.outcomes)
        monkeypatch.setattr(prompt, "_TASK", prompt._TASK.replace("search engine", "retrieval engine", 1))
        changed = run_experiment(cfg, progress=False)
    assert server.count == 2 * asked, "every turn is asked again with the new prompt"
    ran = [o.name for o in changed.outcomes if o.ran]
    assert ran[0] == "reformulate" and "retrieve" in ran


def test_run_with_rewrites_from_a_tsv_reports_the_missing_turn(small, capsys):
    root = small[0]
    chosen = picked(small)
    tsv = root / "published-rewrites.tsv"
    turns = {t.turn_id: t for t in datasets.topics("ikat23-test")}
    tsv.write_text("".join(f"{t}\t{turns[t].manual_rewrite or turns[t].utterance}\n" for t in chosen[1:]))
    cfg = experiment(small, "fromtsv", {"method": f"file:{tsv}"})
    report = run_experiment(cfg, progress=False)
    assert report.failed_turns == [chosen[0]]
    out = capsys.readouterr()
    assert chosen[0] in out.err + out.out
    assert report.metrics is not None and "apcir" in report.metrics.systems
    records = [json.loads(line) for line in (cfg.run_dir / "reformulations.jsonl").read_text().splitlines()]
    assert {r["turn_id"]: r["status"] for r in records}[chosen[0]] == "failed"
    assert all("no level in the file" in " ".join(r["notes"]) for r in records if r["status"] == "ok")


def test_weights_json_records_its_provenance_and_min_turns_falls_back(small):
    cfg = experiment(small, "provenance", {"method": "heuristic"})
    run_experiment(cfg, progress=False)
    weights = load_weights(cfg.run_dir / "weights.json")
    assert weights.tuned_on.qrels == "ikat23-test-provenance"
    assert len(weights.tuned_on.runs) == 3 and weights.tuned_on.levels.endswith("levels.tsv")
    assert weights.tuned_on.turns > 0 and weights.tuned_on.turn_fingerprints

    data = cfg.model_dump()
    data["name"], data["output_dir"] = "fewturns", str(cfg.run_dir.parent / "fewturns")
    data["fusion"]["weights"]["min_turns"] = 1000
    few = ExperimentConfig.model_validate(data)
    run_experiment(few, progress=False)
    weights = load_weights(few.run_dir / "weights.json")
    assert weights.min_turns == 1000
    assert all(lw.fallback and "fewer than min_turns = 1000" in lw.note for lw in weights.levels.values()
               if lw.n_turns)
    assert {tuple(lw.weights) for lw in weights.levels.values()} == {tuple(weights.all_turns.weights)}
