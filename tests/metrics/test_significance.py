import random

import pytest
from scipy import stats

from apcir.metrics.significance import paired_t_tests


def test_bonferroni_and_markers():
    rng = random.Random(1)
    turns = [f"1_{i}" for i in range(60)]
    base = {t: {"MRR": rng.random() * 0.5} for t in turns}
    better = {t: {"MRR": base[t]["MRR"] + 0.2 + rng.random() * 0.05} for t in turns}
    noise = {t: {"MRR": base[t]["MRR"] + rng.uniform(-0.01, 0.01)} for t in turns}
    results = {r.system: r for r in paired_t_tests({"base": base, "better": better, "noise": noise}, "base", ["MRR"])}
    a = [better[t]["MRR"] for t in turns]
    b = [base[t]["MRR"] for t in turns]
    assert results["better"].p_value == pytest.approx(stats.ttest_rel(a, b).pvalue)
    assert results["better"].p_corrected == pytest.approx(min(1.0, 2 * results["better"].p_value))
    assert results["better"].marker == "†"
    assert results["noise"].n_turns == 60


def test_identical_systems_are_not_significant():
    per_turn = {"a": {"1_1": {"MRR": 0.5}, "1_2": {"MRR": 1.0}}, "b": {"1_1": {"MRR": 0.5}, "1_2": {"MRR": 1.0}}}
    [result] = paired_t_tests(per_turn, "a", ["MRR"])
    assert result.p_value == 1.0 and not result.significant and result.marker == ""


def test_worse_system_gets_down_marker():
    turns = [f"1_{i}" for i in range(30)]
    base = {t: {"nDCG@3": 0.8 + (i % 3) * 0.01} for i, t in enumerate(turns)}
    worse = {t: {"nDCG@3": 0.1 + (i % 5) * 0.01} for i, t in enumerate(turns)}
    [result] = paired_t_tests({"base": base, "worse": worse}, "base", ["nDCG@3"])
    assert result.significant and result.marker == "↓"
