import pytest
from fusion_cases import random_case
from test_fusion_grid import brute_force

from apcir.contract.weights import load_weights
from apcir.errors import ApcirError
from apcir.fusion.grid import select_best
from apcir.fusion.linear import fuse_linear
from apcir.fusion.tuning import conversation_folds, cross_validate, no_third, tune_weights
from apcir.metrics import evaluate, parse_measures


def test_tuned_weights_are_the_brute_force_best_per_level_and_reapply_exactly(tmp_path):
    runs, qrels, levels = random_case(3, ties=True)
    weights = tune_weights(runs, levels, qrels, step="0.1", objective="paper")
    measures = parse_measures("paper")
    for level, lw in weights.levels.items():
        turns = sorted(t for t in set(qrels) & set().union(*runs) if levels[t] == level)
        comps, means = brute_force(runs, qrels, turns, measures, "0.1", 1000)
        best = select_best(comps, means.sum(axis=1))
        assert lw.composition == comps[best].tolist()
        assert lw.score == pytest.approx(means[best].sum(), abs=1e-9)
        assert lw.n_turns == len(turns) and not lw.fallback
    weights.save(tmp_path / "weights.json")
    loaded = load_weights(tmp_path / "weights.json")
    fused = fuse_linear(runs, levels, loaded)
    for level, lw in loaded.levels.items():
        turns = [t for t in fused if t in qrels and levels[t] == level]
        result = evaluate({t: fused[t] for t in turns}, qrels, "paper")
        assert sum(result.measures.values()) == pytest.approx(lw.score, abs=1e-9)


def test_level_without_tuning_turns_falls_back_to_all_turns():
    runs, qrels, levels = random_case(4)
    levels = {t: ("a" if lv == "a" else "b") for t, lv in levels.items()}
    weights = tune_weights(runs, levels, qrels, step="0.1")
    c = weights.levels["c"]
    assert c.fallback and c.n_turns == 0 and "no tuning turn has level c" in c.note
    assert c.weights == weights.all_turns.weights
    assert weights.all_turns.n_turns == weights.levels["a"].n_turns + weights.levels["b"].n_turns


def test_no_personalisation_constraint_keeps_third_weight_zero():
    runs, qrels, levels = random_case(6)
    weights = tune_weights(runs, levels, qrels, step="0.1", constraint=no_third)
    assert all(lw.weights[2] == 0.0 for lw in weights.levels.values())


def test_missing_levels_are_named():
    runs, qrels, levels = random_case(7)
    dropped = sorted(set(qrels) & set(levels))[:2]
    for t in dropped:
        del levels[t]
    with pytest.raises(ApcirError, match=dropped[0]):
        tune_weights(runs, levels, qrels, step="0.1")
    weights = tune_weights(runs, levels, qrels, step="0.1", missing_level="b")
    assert weights.tuned_on.turns > 0


def test_folds_are_by_conversation_and_deterministic():
    turns = [f"{c}-1_{n}" for c in range(1, 8) for n in range(1, 4)]
    folds = conversation_folds(turns, 3, seed=1)
    assert folds == conversation_folds(turns, 3, seed=1)
    assert sorted(c for f in folds for c in f) == sorted({t.split("_")[0] for t in turns})
    assert all(len(f) in (2, 3) for f in folds)  # 7 conversations over 3 folds
    with pytest.raises(ApcirError, match=r"only 7 conversation\(s\)"):
        conversation_folds(turns, 8)


def test_cross_validation_fuses_each_turn_with_weights_tuned_without_it():
    runs, qrels, levels = random_case(8, turns=16)
    result = cross_validate(runs, levels, qrels, k=2, seed=0, step="0.1")
    judged = sorted(set(qrels) & set().union(*runs))
    assert sorted(result.run) == judged
    for fold in result.folds:
        held = set(fold.conversations)
        assert all(t.split("_")[0] in held for t in fold.test_turns)
        assert not set(fold.weights.tuned_on.turn_fingerprints) & set(fold.test_turns)
        part = [{t: r[t] for t in fold.test_turns if t in r} for r in runs]
        expected = fuse_linear(part, levels, fold.weights)
        assert {t: result.run[t] for t in fold.test_turns} == expected
    assert result.label == "out-of-fold"
    again = cross_validate(runs, levels, qrels, k=2, seed=0, step="0.1")
    assert again.evaluation.measures == result.evaluation.measures


def test_cross_validation_can_share_one_search():
    from apcir.fusion.grid import GridSearch
    from apcir.fusion.tuning import tuning_turns

    runs, qrels, levels = random_case(9, turns=16)
    search = GridSearch(runs, qrels, tuning_turns(runs, qrels), parse_measures("paper"), step="0.1")
    shared = cross_validate(runs, levels, qrels, k=2, step="0.1", search=search)
    alone = cross_validate(runs, levels, qrels, k=2, step="0.1")
    assert shared.run == alone.run
    flat = dict.fromkeys(levels, "a")
    assert cross_validate(runs, flat, qrels, k=2, step="0.1", search=search).run == cross_validate(
        runs, flat, qrels, k=2, step="0.1"
    ).run
