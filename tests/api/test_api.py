"""The public Python API: what `import apcir` offers, checked against the functions the CLI uses."""

from __future__ import annotations

import pydoc
import random

import pytest

import apcir
from apcir import api
from apcir.errors import ApcirError


def test_help_lists_the_whole_api_and_import_stays_light():
    import subprocess
    import sys

    text = pydoc.render_doc(apcir, renderer=pydoc.plaintext)
    for name in ["topics", "qrels", "collection", "load_run", "save_run", "evaluate", "compare", "Experiment",
                 "RunDirectory", "reformulate", "retrieve", "tune", "fuse", "rerank", "respond", "export", "validate"]:
        assert name in apcir.__all__ and f"{name}(" in text or f"class {name}" in text, name
    assert sorted(api.__all__) == sorted(apcir.__all__)
    # `import apcir` loads no model library, pandas or the pipeline: those come on first use
    probe = "import sys, apcir; print(sorted(m for m in ('torch', 'pandas', 'apcir.experiment', 'numpy') " \
            "if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() \
        == "[]"


def _random_run(qrels, seed=0, n=30):
    rng = random.Random(seed)
    docs = sorted({p for judged in qrels.values() for p in judged})
    return {turn: {p: rng.random() for p in rng.sample(docs, n) + list(judged)[:2]}
            for turn, judged in list(qrels.items())[:25]}


def test_evaluate_and_compare_are_the_cli_numbers(tmp_path):
    from apcir.evaluation.stage import compare_runs
    from apcir.metrics.trec_eval import evaluate

    qrels = apcir.qrels("ikat23-test")
    a, b = _random_run(qrels, 1), _random_run(qrels, 2)
    path = apcir.save_run(a, tmp_path / "a.run", tag="a")
    table = apcir.evaluate({"a": path, "b": b}, "ikat23-test", ["nDCG@3", "RR", "Judged@10"])
    assert table.columns == ["run", "nDCG@3", "MRR", "Judged@10", "turns"]
    for name, run in (("a", a), ("b", b)):
        expected = evaluate(run, qrels, ["nDCG@3", "RR", "Judged@10"])
        for measure, value in expected.measures.items():
            assert table.value(name, measure) == pytest.approx(value, abs=1e-12)
    frame = table.to_pandas()
    assert list(frame["run"]) == ["a", "b"] and frame.shape == (2, 5)
    per_turn = apcir.evaluate(a, qrels, "nDCG@3", per_turn=True)
    assert len(per_turn) == 25 and per_turn.columns == ["run", "turn", "nDCG@3"]

    compared = apcir.compare({"a": a, "b": b}, qrels, "paper", baseline="b", test="randomisation", correction="holm")
    from apcir.metrics.significance import SignificanceSettings

    reference = compare_runs({"a": a, "b": b}, qrels, "paper", baseline="b",
                             significance=SignificanceSettings(test="randomisation", correction="holm"))
    assert [(r["measure"], r["p corrected"]) for r in compared.rows] == \
        [(t.measure, t.p_corrected) for t in reference.tests]
    assert "holm" in compared.caption


def test_runs_round_trip_to_file_ranx_and_pandas(tmp_path):
    run = apcir.Run({"1-1_1": {"p1": 2.0, "p2": 3.5}, "1-1_2": {"p3": 1.0}}, name="mine")
    loaded = apcir.load_run(run.save(tmp_path / "mine.run"))
    assert loaded == run and loaded.name == "mine"
    ranx_run = loaded.to_ranx()
    assert ranx_run.name == "mine" and dict(ranx_run.to_dict()["1-1_1"]) == {"p2": 3.5, "p1": 2.0}
    frame = loaded.to_pandas()
    assert list(frame.columns) == ["qid", "docno", "score", "rank"]
    assert list(frame[frame.qid == "1-1_1"]["docno"]) == ["p2", "p1"]


def test_data_by_name_by_ir_datasets_id_and_by_path():
    turns = apcir.topics("trec-ikat/2023/test")
    assert len(turns) == len(apcir.topics("ikat23-test")) and turns[3].history
    assert apcir.qrels("irds:trec-ikat/2024/test") == apcir.qrels("ikat24-test")
    assert sum(1 for _ in apcir.collection("ikat23-provenance")) == 894
    with pytest.raises(ApcirError, match="has no qrels"):
        apcir.qrels("trec-ikat/2023/train")


def test_every_ir_datasets_id_resolves_offline_with_the_bundled_counts():
    import ir_datasets

    import apcir.irds
    from apcir.datasets import IR_DATASETS

    assert apcir.irds.register() == list(IR_DATASETS)
    for dataset_id, entry in IR_DATASETS.items():
        dataset = ir_datasets.load(dataset_id)
        queries = list(dataset.queries_iter())
        expected_turns = apcir.topics(entry.topics)
        if entry.judged_only:
            expected_turns = [t for t in expected_turns if t.turn_id in apcir.qrels(entry.qrels)]
        assert [q.query_id for q in queries] == [t.turn_id for t in expected_turns], dataset_id
        if entry.qrels:
            got: dict[str, dict[str, int]] = {}
            for qrel in dataset.qrels_iter():
                got.setdefault(qrel.query_id, {})[qrel.doc_id] = qrel.relevance
            assert got == apcir.qrels(entry.qrels), dataset_id
        else:
            assert not dataset.has_qrels()
        assert dataset.has_docs() == (entry.collection is not None)
    ptkb = ir_datasets.load("trec-ikat/2023/test/ptkb")
    assert len({q.query_id for q in ptkb.qrels_iter()}) == len(apcir.qrels("ikat23-test-ptkb")) == 98
    assert ir_datasets.load("trec-ikat/2023/test/provenance").docs_count() == 894


def test_experiment_from_a_dict_and_the_run_directory(small, tmp_path):
    _, collection, index, chosen = small
    result = apcir.Experiment.from_config({
        "name": "api", "topics": "ikat23-test", "turns": chosen[::3], "output_dir": str(tmp_path / "api"),
        "reformulator": {"method": "heuristic"},
        "retrieval": {"index": str(index), "collection": str(collection), "encoder": "splade-tiny"},
        "fusion": {"weights": {"source": "cv", "folds": 2, "step": 0.1}},
        "evaluation": {"qrels": "ikat23-test-provenance"},
    }).run()
    assert isinstance(result, apcir.RunDirectory) and result.path == tmp_path / "api"
    assert "apcir" in result.systems and result.metrics.systems["apcir"].means
    judged = next(iter(result.metrics.systems["apcir"].per_turn))
    view = result.turn(judged, top=3)
    assert view.turn.turn_id == judged and view.level in ("a", "b", "c")
    assert len(view.lists["rewrite"]) == 3 and view.systems["apcir"] and view.metrics["apcir"]
    assert view.response is not None and view.reformulation is not None
    assert set(result.weights.levels) <= {"a", "b", "c"}
    table = result.table()
    assert table.value("apcir", "MRR") == result.metrics.systems["apcir"].means["MRR"]
    with pytest.raises(ApcirError, match="not in this run"):
        result.turn("99-9_9")


def test_the_stage_functions_chain_from_topics_to_a_valid_submission(small, tmp_path):
    _, collection, index, chosen = small
    turns = [t for t in apcir.topics("ikat23-test") if t.turn_id in set(chosen[:8])]
    records = apcir.reformulate(turns, "heuristic", out=tmp_path / "refs.jsonl")
    assert set(records) == {t.turn_id for t in turns} and (tmp_path / "refs.jsonl").exists()
    lists = [apcir.retrieve(records, index, field=f, k=50) for f in ("rewrite", "rewrite_response", "third")]
    assert all(len(r) == len(turns) for r in lists)
    levels = {t: r.output.level for t, r in records.items()}
    qrels = apcir.qrels("ikat23-test-provenance")
    weights = apcir.tune(lists, levels, qrels, step="0.5")
    fused = apcir.fuse(lists, levels, weights)
    assert set(fused) == {t.turn_id for t in turns} and all(50 <= len(h) <= 150 for h in fused.values())
    responses = apcir.respond(turns, records, fused, collection)
    assert all(r.status == "ok" for r in responses.values())
    out = apcir.export(fused, turns, tmp_path / "submission.json", responses=responses, reformulations=records,
                       passages=collection, year=2023)
    assert apcir.validate(out, turns, year=2023) == []


def test_rerank_keeps_the_unranked_passages_in_place(small, tmp_path):
    from tiny_models import tiny_cross_encoder

    _, collection, index, chosen = small
    run = apcir.retrieve(dict.fromkeys(chosen[:2], "a question about food"), index, k=20)
    model = tiny_cross_encoder(tmp_path / "ce")
    reranked = apcir.rerank(run, dict.fromkeys(chosen[:2], "a question about food"), collection, "cross-encoder",
                            model=str(model), depth=5, field="rewrite")
    for turn, hits in run.items():
        order = [p for p, _ in sorted(hits.items(), key=lambda x: -x[1])]
        new = [p for p, _ in sorted(reranked[turn].items(), key=lambda x: -x[1])]
        assert set(new[:5]) == set(order[:5]) and new[5:] == order[5:]


def test_tune_with_a_selection_rule_and_nugget_recall_from_python(tmp_path):
    from fusion_cases import random_case

    from apcir.fusion.selection import SelectionRule
    from apcir.fusion.tuning import tune_weights

    runs, qrels, levels = random_case(4, turns=30)
    weights = apcir.tune(runs, levels, qrels, step="0.1", shrinkage="cv", select="plateau", bootstrap=100)
    expected = tune_weights(runs, levels, qrels, step="0.1",
                            rule=SelectionRule(shrinkage="cv", select="plateau", bootstrap=100))
    assert weights.selection.shrinkage == expected.selection.shrinkage
    assert {lv: w.weights for lv, w in weights.levels.items()} == {lv: w.weights for lv, w in expected.levels.items()}
    assert weights.evidence is not None and weights.evidence.resamples == 100
    report = apcir.nugget_recall("ikat25-runs", "ikat25-test", "ikat25-test", "lexical", baseline="cfda-auto-1")
    assert report.ranking()[0] == "UCSC-base-ensemble" and len(report.runs) == 3
