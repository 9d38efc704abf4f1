"""One turn, four front doors: ``apcir run``, ``apcir converse`` (against local replay users), the Python API
(``Experiment.answer``) and the PyTerrier ``Answer`` transformer answer it through the same per-turn pipeline
(apcir.experiment.turns) and give the same ranking and the same response for the same config."""

from __future__ import annotations

import json

import pytest
from shared import cli_code

import apcir
from apcir.contract.runs import ranking
from apcir.contract.weights import LevelWeights, WeightsFile

CANARY = "front-doors-token-5e1b"


@pytest.fixture(scope="module")
def doors(small, tmp_path_factory):
    """A config on the small collection (heuristic reformulator, fixed per-level weights, a tiny cross-encoder
    that re-ranks the submitted run, the extractive responder), and the first turns of three conversations."""
    from tiny_models import tiny_cross_encoder

    _, collection, index, chosen = small
    turns = [t for t in apcir.topics("ikat23-test") if t.turn_id in set(chosen) and t.turn_number == 1]
    turns = turns[:3]
    assert len(turns) >= 2 and all(not t.history for t in turns)
    folder = tmp_path_factory.mktemp("front-doors")
    weights = WeightsFile(step=0.1, divisions=10, objective=["nDCG@3"],
                          levels={"a": LevelWeights(weights=[0.6, 0.3, 0.1]),
                                  "b": LevelWeights(weights=[0.2, 0.5, 0.3]),
                                  "c": LevelWeights(weights=[0.3, 0.3, 0.4])})
    weights.save(folder / "weights.json")
    model = tiny_cross_encoder(folder / "ce")
    config = folder / "doors.toml"
    config.write_text(
        f'name = "doors"\ntopics = "ikat23-test"\nturns = {json.dumps([t.turn_id for t in turns])}\n'
        f'output_dir = "{folder / "runs"}"\n'
        f'[retrieval]\nindex = "{index}"\ncollection = "{collection}"\nencoder = "splade-tiny"\n'
        f'[fusion]\nbaselines = false\n[fusion.weights]\nsource = "file"\nfile = "{folder / "weights.json"}"\n'
        f'[[rerank]]\nreranker = "cross-encoder"\nmodel = "{model}"\ndepth = 5\nsubmit = true\n'
        f'[respond]\nresponder = "extractive"\n', encoding="utf-8")
    return folder, config, turns


@pytest.fixture(scope="module")
def by_run(doors):
    """``apcir run`` (the command, in-process): the submitted run (fused, re-ranked) and the responses."""
    from apcir.contract.responses import load_responses

    folder, config, turns = doors
    assert cli_code("run", str(config), "--no-progress") == 0
    run_dir = folder / "runs"
    submitted = list(run_dir.glob("fused+*.run"))
    assert len(submitted) == 1, "the re-ranked fused run is the one submitted"
    run = apcir.load_run(submitted[0])
    responses = load_responses(run_dir / "responses.jsonl")
    return {t.turn_id: (dict(run[t.turn_id]), responses[t.turn_id].text) for t in turns}


def _same(got: dict[str, dict[str, float]], expected: dict[str, tuple[dict[str, float], str]],
          texts: dict[str, str]) -> None:
    assert set(got) == set(expected)
    for turn_id, (ranked, response) in expected.items():
        assert ranked and response, turn_id
        mine = got[turn_id]
        assert [p for p, _ in ranking(mine)] == [p for p, _ in ranking(ranked)], f"{turn_id}: another ranking"
        assert mine == pytest.approx(ranked, abs=1e-5), f"{turn_id}: other scores"
        assert texts[turn_id] == response, f"{turn_id}: another response"


def test_the_api_answers_a_turn_as_apcir_run_does(doors, by_run, tmp_path):
    _, config, turns = doors
    answers = apcir.Experiment.from_config(config).answer(turns, out=tmp_path / "api")
    _same({t: a.ranking for t, a in answers.items()}, by_run, {t: a.text for t, a in answers.items()})
    assert all(set(a.seconds) >= {"reformulate", "retrieve", "fuse", "rerank", "respond"} for a in answers.values())


def test_apcir_converse_answers_a_turn_as_apcir_run_does(doors, by_run, tmp_path, monkeypatch, capsys):
    from apcir.live.converse import JOURNAL, RUN_FILE
    from apcir.live.server import Simulation, SimulationServer
    from apcir.live.users import replay_sessions

    _, config, turns = doors
    server = SimulationServer(Simulation(lambda: replay_sessions(turns), CANARY, send_ptkb=True)).start()
    monkeypatch.setenv("IKAT_API_TOKEN", CANARY)
    try:
        code = cli_code("converse", str(config), "--api", server.url, "--run-id", "doors", "-o", str(tmp_path / "live"))
    finally:
        server.stop()
    assert code == 0, capsys.readouterr().err
    live = apcir.load_run(tmp_path / "live" / RUN_FILE)
    answers = [json.loads(line) for line in (tmp_path / "live" / JOURNAL).read_text().splitlines()]
    sent = {a["turn_id"]: a["response"] for a in answers if a["event"] == "answer"}
    assert not any(a["trimmed"] for a in answers if a["event"] == "answer")
    _same({t: dict(hits) for t, hits in live.items()}, by_run, sent)


def test_the_pyterrier_answer_transformer_answers_a_turn_as_apcir_run_does(doors, by_run, tmp_path):
    pytest.importorskip("pyterrier")
    from apcir.pyterrier import Answer, topics_frame

    _, config, turns = doors
    frame = Answer(config, out=tmp_path / "pt")(topics_frame(turns))
    got: dict[str, dict[str, float]] = {}
    texts: dict[str, str] = {}
    for row in frame.to_dict("records"):
        got.setdefault(row["qid"], {})[row["docno"]] = float(row["score"])
        texts[row["qid"]] = row["answer"]
    _same(got, by_run, texts)
    assert list(frame["rank"][frame["qid"] == turns[0].turn_id]) == list(range(len(got[turns[0].turn_id])))


def test_a_turn_budget_skips_the_reranker_and_the_answer_says_so(doors, tmp_path):
    """The composition's optional stage is skipped when the budget hook says so: the ranking is then the fused
    one (what ``apcir run`` without ``[[rerank]]`` submits), and the answer names what was skipped."""
    from apcir.experiment.config import load_config
    from apcir.experiment.turns import open_turn_pipeline

    _, config, turns = doors
    pipeline = open_turn_pipeline(load_config(config), tmp_path)
    full = pipeline.answer(turns[:1])[turns[0].turn_id]
    skipped = pipeline.answer(turns[:1], skip=lambda started, stage: stage == "rerank")[turns[0].turn_id]
    assert skipped.skipped == ["rerank:cross-encoder"] and full.skipped == []
    top = [p for p, _ in ranking(full.ranking, 5)]
    assert sorted(top) == sorted(p for p, _ in ranking(skipped.ranking, 5))  # the same five, re-ordered or not
    assert "rerank" not in skipped.seconds and "rerank" in full.seconds


def test_a_live_turn_reads_no_earlier_record_from_disk(doors, tmp_path, reads):
    """The per-turn pipeline keeps its reformulation and response logs indexed in memory: answering the turns one
    at a time (as ``apcir converse`` does) reads neither log from disk again, whatever came before."""
    from apcir.experiment.config import load_config
    from apcir.experiment.turns import open_turn_pipeline

    _, config, turns = doors
    first = open_turn_pipeline(load_config(config), tmp_path)
    first.answer(turns[:1])  # a log with a record in it, then a new pipeline over the same folder
    pipeline = open_turn_pipeline(load_config(config), tmp_path)
    answers = {}
    for turn in turns:
        answers.update(pipeline.answer([turn]))
    assert set(answers) == {t.turn_id for t in turns} and all(a.response is not None for a in answers.values())
    assert reads(tmp_path / "reformulations.jsonl") == 1  # the one record written before: read once in all
    assert reads(tmp_path / "responses.jsonl") == 1
