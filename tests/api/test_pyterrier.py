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
