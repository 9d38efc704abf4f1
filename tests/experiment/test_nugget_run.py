"""`[evaluation] nuggets` in a run: each response's nugget recall in metrics.json, the report's table and the
inspector; a changed nugget file redoes the evaluation."""

from __future__ import annotations

import json

import pytest

from apcir.experiment.config import ExperimentConfig
from apcir.experiment.pipeline import run_experiment

pytestmark = pytest.mark.slow


def test_a_run_scores_its_responses_against_nuggets(small, tmp_path):
    root, collection, index, chosen = small
    first, second = chosen[0], chosen[1]
    nuggets = tmp_path / "nuggets.jsonl"
    nuggets.write_text(json.dumps({"turn_id": first, "nugget_id": "1", "text": "zzzz qqqq never said"}) + "\n"
                       + json.dumps({"turn_id": second, "nugget_id": "1", "text": "xxxx yyyy never said"}) + "\n")
    config = ExperimentConfig.model_validate({
        "name": "nuggets", "topics": "ikat23-test", "turns": chosen, "output_dir": str(root / "nuggets-run"),
        "retrieval": {"index": str(index), "collection": str(collection), "encoder": "splade-tiny"},
        "fusion": {"baselines": False, "weights": {"source": "cv", "folds": 2, "step": 0.1, "bootstrap": 0}},
        "evaluation": {"qrels": "ikat23-test-provenance", "nuggets": str(nuggets), "nugget_matcher": "lexical"},
    })
    report = run_experiment(config, progress=False)
    responses = report.metrics.responses
    assert responses is not None and responses.nuggets is not None
    assert responses.measures["nugget recall"] == 0.0 and responses.turns["nugget recall"] == 2
    assert responses.nuggets.total == {first: 1, second: 1} and responses.nuggets.matcher == "lexical"
    page = (config.run_dir / "inspect.html").read_text()
    assert "zzzz qqqq never said" in page and "Gold nuggets" in page
    assert "nugget recall" in (config.run_dir / "report" / "report.md").read_text()
    # the first response's own words as a nugget: covered; the changed file redoes the evaluation
    text = next(json.loads(line)["text"] for line in (config.run_dir / "responses.jsonl").read_text().splitlines()
                if json.loads(line)["turn_id"] == first)
    words = " ".join(w for w in text.split() if w.isalpha())[:200]
    nuggets.write_text(json.dumps({"turn_id": first, "nugget_id": "1", "text": words}) + "\n"
                       + json.dumps({"turn_id": second, "nugget_id": "1", "text": "xxxx yyyy never said"}) + "\n")
    again = run_experiment(config, progress=False)
    assert [o.name for o in again.outcomes if o.ran] == ["evaluate", "report", "inspect"]
    assert again.metrics.responses.nuggets.covered[first] == ["1"]
    assert again.metrics.responses.measures["nugget recall"] == 0.5
