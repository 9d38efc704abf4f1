"""The grid search must return exactly what fusing and evaluating each point with pytrec_eval returns."""

import numpy as np
import pytest
import pytrec_eval
from fusion_cases import random_case

from apcir.errors import ApcirError
from apcir.fusion.grid import GridSearch, divisions, select_best, simplex_points
from apcir.fusion.linear import fuse_per_turn
from apcir.metrics import evaluate, parse_measures

OBJECTIVES = ["paper", "nDCG@3", "MRR", "P@5,MAP@10,nDCG", "Recall@1000,nDCG@1000"]


def brute_force(runs, qrels, turns, measures, step, depth, threshold=1):
    """Fuse every point with fuse_per_turn and evaluate it with pytrec_eval (through apcir.evaluation)."""
    n = divisions(step)
    comps = simplex_points(n, len(runs))
    all_turns = sorted(set().union(*runs))
    means = np.zeros((len(comps), len(measures)))
    for p, comp in enumerate(comps):
        vector = tuple(c / n for c in comp)
        run = fuse_per_turn(runs, dict.fromkeys(all_turns, vector), depth=depth)
        result = evaluate(
            {t: run[t] for t in turns},
            {t: qrels[t] for t in turns},
            measures,
            rel_threshold=threshold,
        )
        means[p] = [result.measures[m.name] for m in measures]
    return comps, means


@pytest.mark.parametrize("step", ["0.1", "0.05"])
@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grid_equals_brute_force(step, objective, seed):
    runs, qrels, _ = random_case(seed, ties=seed != 1)
    turns = sorted(set(qrels) & set().union(*runs))
    measures = parse_measures(objective)
    depth = 1000 if seed != 2 else 9
    search = GridSearch(runs, qrels, turns, measures, step=step, depth=depth)
    comps, expected = brute_force(runs, qrels, turns, measures, step, depth)
    assert np.array_equal(search.compositions, comps)
    got = search.means(turns)
    assert np.abs(got - expected).max() <= 1e-9
    best = search.best(turns)
    reference = select_best(comps, expected.sum(axis=1))
    assert best.index == reference
    assert best.score == pytest.approx(expected[reference].sum(), abs=1e-9)


def test_grid_equals_brute_force_with_threshold_two():
    runs, qrels, _ = random_case(5, ties=True)
    turns = sorted(set(qrels) & set().union(*runs))
    measures = parse_measures("paper")
    search = GridSearch(runs, qrels, turns, measures, step="0.1", rel_threshold=2)
    _, expected = brute_force(runs, qrels, turns, measures, "0.1", 1000, threshold=2)
    assert np.abs(search.means(turns) - expected).max() <= 1e-9


def test_scores_tied_at_float32_rank_like_pytrec_eval():
    """1 + 2**-30 and 1.0 are equal to trec_eval (float32); the larger passage id wins the tie."""
    runs = [
        {"t_1": {"a": 1.0 + 2**-30, "b": 1.0, "c": 0.0}},
        {"t_1": {"a": 0.0, "b": 0.0, "c": 0.0}},
    ]
    qrels = {"t_1": {"a": 1}}
    raw = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(
        {"t_1": {"a": 1.0 + 2**-30, "b": 1.0}}
    )
    assert raw["t_1"]["recip_rank"] == 0.5
    search = GridSearch(runs, qrels, ["t_1"], parse_measures("MRR"), step="1", norm="none")
    assert search.compositions.tolist() == [[0, 1], [1, 0]]
    # (0, 1): every score is 0, so c, b, a; (1, 0): a ties b at float32 and b ranks first
    assert search.means(["t_1"])[:, 0].tolist() == [1 / 3, 0.5]


def test_judged_turn_without_candidates_counts_zero():
    runs = [{"t_1": {"a": 1.0}, "t_2": {}}, {"t_1": {"a": 2.0}}]
    qrels = {"t_1": {"a": 1}, "t_2": {"a": 1}}
    search = GridSearch(runs, qrels, ["t_1", "t_2"], parse_measures("MRR"), step="0.5")
    assert search.means(["t_1", "t_2"])[:, 0].tolist() == [0.5, 0.5, 0.5]


@pytest.mark.parametrize(
    ("step", "points"), [("0.01", 5151), ("0.1", 66), ("0.05", 231), ("1", 3), (0.2, 21)]
)
def test_every_composition_is_enumerated(step, points):
    comps = simplex_points(divisions(step), 3)
    assert len(comps) == points
    assert (comps.sum(axis=1) == divisions(step)).all()
    assert len({tuple(c) for c in comps}) == points
    if len(comps) > 1:  # neighbours move one unit between two weights
        assert (np.abs(np.diff(comps, axis=0)).sum(axis=1) == 2).all()


@pytest.mark.parametrize("step", ["0.03", "0", "1.5", "abc", "0.3"])
def test_step_must_divide_one(step):
    with pytest.raises(ApcirError, match="step"):
        divisions(step)


def test_tie_rule_prefers_equal_weights_then_larger_w1():
    comps = simplex_points(2, 3)  # (0,0,2) ... all 6 points
    scores = np.ones(len(comps))
    best = comps[select_best(comps, scores)]
    assert tuple(best) in {(1, 1, 0), (1, 0, 1), (0, 1, 1)}  # equally close to (2/3, 2/3, 2/3)
    assert tuple(best) == (1, 1, 0)  # larger w1, then larger w2
    scores[np.flatnonzero((comps == [0, 0, 2]).all(axis=1))[0]] = (
        1.0 + 1e-12
    )  # within tolerance: still a tie
    assert tuple(comps[select_best(comps, scores)]) == (1, 1, 0)
    scores[np.flatnonzero((comps == [0, 0, 2]).all(axis=1))[0]] = 1.1
    assert tuple(comps[select_best(comps, scores)]) == (0, 0, 2)
