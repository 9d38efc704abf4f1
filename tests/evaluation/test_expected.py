"""The expected-scores check catches a moved number, a new system and a lost one."""

from __future__ import annotations

import copy

from apcir.evaluation.expected import differences, expected_scores
from apcir.evaluation.results import RunMetrics, SystemResult


def _metrics() -> RunMetrics:
    systems = {name: SystemResult(label=name, groups=["main"], means={"MRR": 0.5, "nDCG@3": 0.4}, per_turn={})
               for name in ("apcir", "rrf")}
    return RunMetrics(name="demo", topics="t", qrels="q", measures=["MRR", "nDCG@3"], rel_threshold=1,
                      complete=False, protocol="cv", systems=systems, turns={})


def test_differences():
    metrics = _metrics()
    expected = expected_scores(metrics)
    assert differences(metrics, expected) == []
    moved = copy.deepcopy(expected)
    moved["systems"]["apcir"]["MRR"] = 0.505
    assert differences(metrics, moved) == ["systems.apcir.MRR: expected 0.505000, got 0.500000"]
    within = copy.deepcopy(expected)
    within["systems"]["apcir"]["MRR"] = 0.5 + 5e-7
    assert differences(metrics, within) == []
    lost = copy.deepcopy(expected)
    lost["systems"]["deps"] = {"MRR": 0.1}
    del lost["systems"]["rrf"]
    assert differences(metrics, lost) == ["systems.deps: expected, not produced",
                                          "systems.rrf: produced, not in the expected file"]
