"""`[fusion] levels = "annotators"`: the oracle levels of the topics' PTKB provenance pick the weights, and every
table says so; the tuning leg uses the tuning topics' annotations too."""

from __future__ import annotations

import pytest

from apcir import datasets
from apcir.contract.fusion import load_fusion_record
from apcir.contract.levels import annotator_levels, load_levels
from apcir.experiment.config import ExperimentConfig
from apcir.experiment.pipeline import run_experiment

pytestmark = pytest.mark.slow


def _config(small, name: str, **fusion) -> ExperimentConfig:
    root, collection, index, chosen = small
    return ExperimentConfig.model_validate({
        "name": name, "topics": "ikat23-test", "turns": chosen, "output_dir": str(root / name),
        "retrieval": {"index": str(index), "collection": str(collection), "encoder": "splade-tiny"},
        "fusion": {"weights": {"source": "cv", "folds": 2, "step": 0.1, "bootstrap": 100},
                   "baselines": ["apcir-shrunk", "apcir-plateau", "no-levels", "equal"], **fusion},
        "evaluation": {"qrels": "ikat23-test-provenance"},
    })


def test_annotator_levels_pick_the_weights_and_are_labelled_everywhere(small, run_cli):
    from apcir.contract.runs import load_run
    from apcir.contract.weights import load_weights
    from apcir.fusion.linear import fuse_linear

    config = _config(small, "oracle", levels="annotators")
    report = run_experiment(config, progress=False)
    run_dir = config.run_dir
    turns = datasets.select_turns("ikat23-test", config.turns)
    oracle = annotator_levels(turns)
    assert load_levels(run_dir / "levels-annotators.tsv") == oracle
    assert load_levels(run_dir / "levels.tsv") != oracle  # the reformulator's levels are kept as they were
    record = load_fusion_record(run_dir / "systems" / "fusion.json")
    assert record.levels == "annotators"
    assert record.annotated == ["apcir", "apcir-shrunk", "apcir-plateau"]
    # the submitted run is fused with the weights of each turn's annotator level
    weights = load_weights(run_dir / "weights.json")
    lists = [load_run(run_dir / "lists" / f"{n}.run.gz") for n in ("rewrite", "rewrite_response", "third")]
    assert load_run(run_dir / "fused.run") == fuse_linear(lists, oracle, weights, "minmax", 1000)
    metrics = report.metrics
    assert metrics is not None and "annotators' PTKB provenance" in metrics.protocol
    assert metrics.systems["apcir"].label == "APCIR [annotator levels]"
    assert metrics.systems["no-levels"].label == "No levels"  # one vector: no level is read
    text = (run_dir / "report" / "report.md").read_text()
    assert "| APCIR [annotator levels] |" in text and "uses annotations" in text
    code, out, err = run_cli("run", str(run_dir / "config.json"), "--no-progress")
    assert code == 0, err
    assert "APCIR [annotator levels]" in out  # the terminal table shows the label as is (no markup eaten)


def test_the_reformulator_levels_are_the_default_and_unlabelled(small):
    config = _config(small, "predicted")
    report = run_experiment(config, progress=False)
    record = load_fusion_record(config.run_dir / "systems" / "fusion.json")
    assert record.levels == "reformulator" and record.annotated == []
    assert report.metrics is not None and report.metrics.systems["apcir"].label == "APCIR"
    assert not (config.run_dir / "levels-annotators.tsv").exists()
