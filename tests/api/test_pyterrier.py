"""apcir's stages as PyTerrier transformers: composed with >>, evaluated by pt.Experiment, equal to apcir evaluate."""

from __future__ import annotations

import json

import pandas as pd
import pytest

pt = pytest.importorskip("pyterrier")

import apcir  # noqa: E402
from apcir.pyterrier import Fuse, Reformulate, Retrieve, RetrieveLists, run_of  # noqa: E402


@pytest.fixture(scope="module")
def pipeline_inputs(small):
    root, collection, index, chosen = small
    qrels = apcir.qrels("ikat23-test-provenance")
    judged = [t for t in chosen if t in qrels]
    turns = {t.turn_id: t for t in apcir.topics("ikat23-test")}
    topics = pd.DataFrame({"qid": judged, "query": [turns[t].utterance for t in judged]})
    frame = pd.DataFrame([(q, d, g) for q in judged for d, g in qrels[q].items()], columns=["qid", "docno", "label"])
    return root, index, topics, frame, {q: qrels[q] for q in judged}


def test_pt_experiment_on_an_apcir_pipeline_equals_apcir_evaluate(pipeline_inputs, run_cli, tmp_path):
    from pyterrier.measures import RR, R, nDCG

    root, index, topics, qrels_frame, qrels = pipeline_inputs
    reformulate = Reformulate("heuristic", topics="ikat23-test")
    queries = reformulate.transform(topics)
    lists = RetrieveLists(index).transform(queries)
    runs = [run_of(lists[lists["list"] == name]) for name in ("rewrite", "rewrite_response", "third")]
    weights = apcir.tune(runs, dict(zip(queries["qid"], queries["level"])), qrels, step="0.1")
    single = reformulate >> Retrieve(index, field="rewrite")
    fused = reformulate >> Fuse(index, weights)
    table = pt.Experiment([single, fused], topics, qrels_frame, eval_metrics=[nDCG @ 3, RR, R @ 100],
                          names=["single", "apcir"])
    assert list(table["name"]) == ["single", "apcir"]

    for name, transformer in (("single", single), ("apcir", fused)):
        path = tmp_path / f"{name}.run"
        apcir.save_run(run_of(transformer.transform(topics)), path)
        qrels_file = tmp_path / "qrels.txt"
        qrels_file.write_text("".join(f"{q} 0 {d} {g}\n" for q, js in qrels.items() for d, g in js.items()))
        code, out, err = run_cli("evaluate", str(path), "--qrels", str(qrels_file), "-m", "nDCG@3", "-m", "RR",
                                 "-m", "R@100", "--json")
        assert code == 0, err
        means = json.loads(out)["measures"]
        row = table[table["name"] == name].iloc[0]
        assert row["nDCG@3"] == pytest.approx(means["nDCG@3"], abs=1e-9)
        assert row["RR"] == pytest.approx(means["MRR"], abs=1e-9)
        assert row["R@100"] == pytest.approx(means["Recall@100"], abs=1e-9)
    assert table["nDCG@3"].max() > 0  # the runs found judged passages: the comparison is not of zeros


def test_level_fusion_says_when_it_fuses_turns_its_weights_were_tuned_on(capsys):
    """Issue 37: weights tuned on the turns they fuse carry "tuned on test" wherever those runs are scored."""
    from apcir.contract.weights import LevelWeights, TunedOn, WeightsFile
    from apcir.pyterrier import LevelFusion

    weights = WeightsFile(step=0.5, divisions=2, objective=["nDCG@3"],
                          levels={lv: LevelWeights(weights=[0.5, 0.5, 0.0]) for lv in "abc"},
                          tuned_on=TunedOn(qrels="some-qrels", turns=2, turn_fingerprints={"1_1": "x", "1_2": "y"}))
    rows = [(q, f"d{i}", float(i), 2 - i, name, "a") for q in ("1_1", "2_1") for i in range(3)
            for name in ("rewrite", "rewrite_response", "third")]
    frame = pd.DataFrame(rows, columns=["qid", "docno", "score", "rank", "list", "level"])
    fusion = LevelFusion(weights)
    fused = fusion.transform(frame)
    assert set(fused["qid"]) == {"1_1", "2_1"}
    assert "tuned on test" in capsys.readouterr().err and fusion.tuned_on_test == 1
    assert "tuned on 2 turns of some-qrels" in str(fusion)  # the name pt.Experiment shows without names=
    fusion.transform(frame[frame["qid"] == "2_1"])
    assert "tuned on test" not in capsys.readouterr().err and fusion.tuned_on_test == 0


def test_what_pyterrier_prints_for_an_ikat_frame_is_in_the_docs(capsys):
    """The tutorial's frame comes from pt.get_dataset(...).get_topics(), which prints a note about query fields:
    the Python tutorial says why (a docs check that would catch the note appearing unexplained again)."""
    from pathlib import Path

    import apcir.irds  # noqa: F401

    pt.get_dataset("irds:trec-ikat/2023/judged").get_topics()
    printed = capsys.readouterr().out
    page = (Path(__file__).resolve().parents[2] / "docs" / "tutorials" / "python.md").read_text(encoding="utf-8")
    if "multiple query fields" in printed:
        assert "multiple query fields" in page


def test_reformulate_reads_an_ir_datasets_frame_as_it_reads_topics():
    import apcir.irds  # noqa: F401

    dataset = pt.get_dataset("irds:trec-ikat/2023/test")
    frame = dataset.get_topics().head(6)  # every field: text (the utterance), history, ptkb, ...
    from_frame = Reformulate("heuristic").transform(frame)
    plain = frame[["qid", "text"]].rename(columns={"text": "query"})
    from_topics = Reformulate("heuristic", topics="ikat23-test").transform(plain)
    columns = ["qid", "level", "rewrite", "response", "third_rewrite"]
    pd.testing.assert_frame_equal(from_frame[columns].reset_index(drop=True),
                                  from_topics[columns].reset_index(drop=True))
    assert (from_topics["query_0"] == frame["text"].values).all()
    assert (from_frame["level"] != "a").any() or (from_frame["rewrite"] != frame["text"].values).any()


def test_transformers_say_what_they_need():
    from pyterrier.validate import InputValidationError

    with pytest.raises(InputValidationError):
        pt.inspect.transformer_outputs(Retrieve("nowhere"), ["qid"])
    assert "level" in pt.inspect.transformer_outputs(Reformulate("heuristic", topics="ikat23-test"), ["qid", "query"])
