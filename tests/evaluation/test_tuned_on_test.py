"""Which runs of a run directory are scored on the turns their weights were tuned on (apcir.evaluation.tuned)."""

from __future__ import annotations

import json

from fusion_cases import random_case

from apcir.contract.runs import write_run
from apcir.evaluation.tuned import TUNED_ON_TEST, run_tuned_on_test, weights_of
from apcir.fusion.tuning import tune_weights


def _run_directory(tmp_path, source: str):
    runs, qrels, levels = random_case(3)
    weights = tune_weights(runs, levels, qrels, step="0.5")
    folder = tmp_path / source
    (folder / "systems").mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"fusion": {"weights": {"source": source}}}))
    weights.save(folder / "weights.json")
    write_run(runs[0], folder / "fused.run", "fused")
    write_run(runs[0], folder / "systems" / "apcir.run.gz", "apcir")
    write_run(runs[0], folder / "systems" / "equal.run.gz", "equal")
    return folder, runs[0], qrels


def test_fused_run_and_tuned_systems_are_tuned_on_test_unless_cross_validated(tmp_path):
    folder, run, qrels = _run_directory(tmp_path, "cv")
    assert weights_of(folder / "fused.run") == folder / "weights.json"  # fused with the weights of every turn
    assert weights_of(folder / "systems" / "apcir.run.gz") is None  # out-of-fold under cross-validation
    assert weights_of(folder / "systems" / "equal.run.gz") is None  # a fixed baseline has no tuned weights
    found = run_tuned_on_test(folder / "fused.run", run, qrels)
    judged = sum(1 for t in run if t in qrels)
    assert found is not None and found.judged == judged and 0 < found.turns <= judged
    assert TUNED_ON_TEST in found.note("fused")
    # weights given as a file: the tuned system is fused with them, so it is tuned on test too
    folder, run, qrels = _run_directory(tmp_path, "file")
    assert weights_of(folder / "systems" / "apcir+monot5.run.gz") == folder / "weights.json"
    # scored on other turns (other judgements): not tuned on test
    other = {t: dict.fromkeys(list(grades)[:1], 3) for t, grades in qrels.items()}
    assert run_tuned_on_test(folder / "fused.run", run, other) is None
    assert weights_of(tmp_path / "elsewhere.run") is None
