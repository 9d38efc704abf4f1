"""Choosing a level's weights from the grid: shrinkage toward pooled weights, the plateau optimum, the evidence.

The hand-made cases set the grid's per-turn values directly (one measure, a few turns), so every answer is
worked out by hand in the comments; the random cases check the rules against brute force on real searches.
"""

from __future__ import annotations

import numpy as np
import pytest
from fusion_cases import random_case

from apcir.contract.weights import WeightsFile, load_weights
from apcir.fusion.grid import GridSearch, divisions, simplex_points
from apcir.fusion.selection import LAMBDAS, SelectionRule, Surface, inner_lambda, paired_standard_errors
from apcir.fusion.tuning import cross_validate, tune_weights, tuning_turns, weights_from_search
from apcir.metrics import parse_measures


class HandGrid(GridSearch):
    """A GridSearch whose per-turn values are given, not computed (one measure)."""

    def __init__(self, step: str, turns: list[str], values: dict[tuple[int, ...], list[float]]) -> None:
        self.turns = turns
        self.measures = parse_measures("nDCG@3")
        self.divisions = divisions(step)
        self.step = step
        self.norm, self.depth, self.rel_threshold = "minmax", 1000, 1
        self.compositions = simplex_points(self.divisions, 3)
        self.weights = self.compositions / self.divisions
        self.values = np.zeros((len(turns), len(self.compositions), 1))
        for composition, per_turn in values.items():
            index = self.point(composition)
            self.values[:, index, 0] = per_turn

    def point(self, composition: tuple[int, ...]) -> int:
        return int(np.flatnonzero((self.compositions == composition).all(axis=1))[0])


# level a: one turn (1_1), best at w = (0, 0, 1); level b: three turns, best at (1, 0, 0), (0.5, 0.5, 0) close
TURNS = ["1_1", "2_1", "3_1", "4_1"]
LEVELS = {"1_1": "a", "2_1": "b", "3_1": "b", "4_1": "b"}
VALUES = {(0, 0, 2): [1.0, 0.0, 0.0, 0.0], (2, 0, 0): [0.0, 1.0, 1.0, 1.0], (1, 1, 0): [0.0, 0.9, 0.9, 0.9]}


def test_lambda_zero_is_the_per_level_argmax_and_a_large_lambda_the_pooled_one():
    search = HandGrid("0.5", TURNS, VALUES)
    paper = weights_from_search(search, LEVELS, TURNS)
    assert paper.levels["a"].weights == [0.0, 0.0, 1.0]
    assert paper.levels["b"].weights == [1.0, 0.0, 0.0]
    # pooled means: (1, 0, 0) 3/4, (0.5, 0.5, 0) 2.7/4, (0, 0, 1) 1/4
    assert paper.all_turns is not None and paper.all_turns.weights == [1.0, 0.0, 0.0]
    assert paper.selection.shrinkage == 0 and paper.selection.select == "argmax"
    # level a maximises mean_a + λ·mean_all: (0, 0, 1) scores 1 + λ/4, (1, 0, 0) scores 3λ/4: they cross at λ = 2
    below = weights_from_search(search, LEVELS, TURNS, rule=SelectionRule(shrinkage=1.0))
    above = weights_from_search(search, LEVELS, TURNS, rule=SelectionRule(shrinkage=3.0))
    huge = weights_from_search(search, LEVELS, TURNS, rule=SelectionRule(shrinkage=1e9))
    assert below.levels["a"].weights == [0.0, 0.0, 1.0]
    assert above.levels["a"].weights == [1.0, 0.0, 0.0]
    assert huge.levels["a"].weights == huge.levels["b"].weights == huge.all_turns.weights == [1.0, 0.0, 0.0]
    assert above.selection.shrinkage == 3.0
    # a level's score stays its own objective at the chosen point: level a at (1, 0, 0) scores 0
    assert above.levels["a"].score == 0.0


def test_the_plateau_centroid_is_the_expected_point():
    # step 0.25; level b's plateau within 0.12 of the best: (1, 0, 0) 1.0, (0.75, 0.25, 0) 0.92, (0.5, 0.5, 0) 0.9
    # -> centroid (0.75, 0.25, 0), a plateau point, chosen although the argmax is (1, 0, 0)
    turns = ["2_1", "3_1"]
    values = {(4, 0, 0): [1.0, 1.0], (3, 1, 0): [0.92, 0.92], (2, 2, 0): [0.9, 0.9], (0, 0, 4): [0.5, 0.5]}
    search = HandGrid("0.25", turns, values)
    levels = dict.fromkeys(turns, "b")
    argmax = weights_from_search(search, levels, turns)
    plateau = weights_from_search(search, levels, turns, rule=SelectionRule(select="plateau", epsilon=0.12))
    assert argmax.levels["b"].weights == [1.0, 0.0, 0.0]
    chosen = plateau.levels["b"]
    assert chosen.weights == [0.75, 0.25, 0.0]
    assert chosen.plateau is not None and chosen.plateau.points == 3
    assert chosen.plateau.centroid == pytest.approx([0.75, 0.25, 0.0])
    assert chosen.score == pytest.approx(0.92)
    # a narrower plateau holds the argmax alone
    narrow = weights_from_search(search, levels, turns, rule=SelectionRule(select="plateau", epsilon=0.05))
    assert narrow.levels["b"].weights == [1.0, 0.0, 0.0] and narrow.levels["b"].plateau.points == 1


def test_a_point_as_good_on_another_hill_is_not_on_the_plateau():
    # (1, 0, 0) and (0, 1, 0) both score 1 with a dip between: the plateau is the argmax's connected region, so
    # the other hill stays out and the centroid cannot fall into the dip at (0.5, 0.5, 0)
    turns = ["2_1"]
    search = HandGrid("0.5", turns, {(2, 0, 0): [1.0], (0, 2, 0): [1.0], (1, 1, 0): [0.2]})
    chosen = weights_from_search(search, {"2_1": "b"}, turns, rule=SelectionRule(select="plateau", epsilon=0.01))
    assert chosen.levels["b"].plateau.points == 1
    assert chosen.levels["b"].plateau.centroid == pytest.approx([1.0, 0.0, 0.0])
    assert chosen.levels["b"].weights == [1.0, 0.0, 0.0]


def test_a_centroid_off_the_grid_takes_the_nearest_plateau_point():
    # an L-shaped plateau (1, 0, 0), (0.5, 0.5, 0), (0.5, 0, 0.5): centroid (2/3, 1/6, 1/6), equally near all three;
    # the tie rule takes the point closest to equal weights, then the larger w1, then the larger w2
    turns = ["2_1"]
    search = HandGrid("0.5", turns, {(2, 0, 0): [1.0], (1, 1, 0): [0.99], (1, 0, 1): [0.99]})
    chosen = weights_from_search(search, {"2_1": "b"}, turns, rule=SelectionRule(select="plateau", epsilon=0.05))
    assert chosen.levels["b"].plateau.points == 3
    assert chosen.levels["b"].plateau.centroid == pytest.approx([2 / 3, 1 / 6, 1 / 6])
    assert chosen.levels["b"].weights == [0.5, 0.5, 0.0]


def test_the_default_epsilon_is_the_paired_bootstrap_standard_error():
    runs, qrels, levels = random_case(5, turns=24)
    turns = tuning_turns(runs, qrels)
    search = GridSearch(runs, qrels, turns, parse_measures("paper"), step="0.1")
    surface = Surface(search, turns, levels)
    level_turns = [t for t in turns if levels[t] == "a"]
    best = search.best(level_turns).index
    closed = paired_standard_errors(surface, level_turns, turns, best, 0.0)
    # Monte Carlo bootstrap of the paired mean difference, many resamples: the closed form is its limit
    rng = np.random.default_rng(1)
    per_turn = search.values[search.turn_index(level_turns)].sum(axis=2)
    difference = per_turn - per_turn[:, [best]]
    draws = rng.integers(0, len(level_turns), size=(20000, len(level_turns)))
    monte_carlo = difference[draws].mean(axis=1).std(axis=0)
    assert closed[best] == 0.0
    varying = monte_carlo > 1e-6
    assert varying.any()
    np.testing.assert_allclose(closed[varying], monte_carlo[varying], rtol=0.05)


def test_lambda_zero_reproduces_the_per_level_argmax_of_a_real_search():
    runs, qrels, levels = random_case(8, turns=30)
    turns = tuning_turns(runs, qrels)
    search = GridSearch(runs, qrels, turns, parse_measures("paper"), step="0.05")
    weights = weights_from_search(search, levels, turns)
    for level, chosen in weights.levels.items():
        best = search.best([t for t in turns if levels[t] == level])
        assert tuple(chosen.weights) == best.weights and chosen.score == best.score


def test_the_inner_cv_scores_lambda_zero_as_the_out_of_fold_run_of_the_paper_protocol():
    runs, qrels, levels = random_case(11, turns=40)
    turns = tuning_turns(runs, qrels)
    search = GridSearch(runs, qrels, turns, parse_measures("paper"), step="0.1")
    rule = SelectionRule(shrinkage="cv", inner_folds=4, seed=3)
    lam, held_out, folds = inner_lambda(Surface(search, turns, levels), turns, levels, None, rule, 1)
    assert folds == 4 and len(held_out) == len(LAMBDAS)
    # the inner folds are cross_validate's folds over the same turns: λ = 0 is that out-of-fold run's objective
    outer = cross_validate(runs, levels, qrels, k=4, seed=3, step="0.1", search=search)
    assert held_out[0] == pytest.approx(sum(outer.evaluation.measures.values()), abs=1e-12)
    best = max(held_out)
    assert lam == max(value for value, score in zip(LAMBDAS, held_out) if score >= best - 1e-9)
    weights = weights_from_search(search, levels, turns, rule=rule)
    assert weights.selection.shrinkage == lam and weights.selection.held_out == held_out
    assert weights.selection.shrinkage_by.startswith("inner cross-validation")


def test_evidence_reports_intervals_and_how_often_levels_beat_the_pooled_weights(tmp_path):
    runs, qrels, levels = random_case(3, turns=40)
    weights = tune_weights(runs, levels, qrels, step="0.1", rule=SelectionRule(bootstrap=300, seed=2),
                           with_evidence=True)
    evidence = weights.evidence
    assert evidence is not None and evidence.resamples == 300 and evidence.seed == 2
    for item in evidence.levels.values():
        assert 0 < item.resamples <= 300
        assert len(item.intervals) == 3
        assert all(0.0 <= low <= high <= 1.0 for low, high in item.intervals)
        assert 0.0 <= item.beats_pooled <= 1.0 and 0.0 <= item.ties_pooled <= 1.0
        assert item.beats_pooled + item.ties_pooled <= 1.0
        assert sum(p[3] for p in item.points) == item.resamples
    # the same seed gives the same evidence; the file round-trips through the strict reader
    again = tune_weights(runs, levels, qrels, step="0.1", rule=SelectionRule(bootstrap=300, seed=2),
                         with_evidence=True)
    assert again.evidence == evidence
    weights.save(tmp_path / "weights.json")
    assert load_weights(tmp_path / "weights.json").evidence == evidence
    # with the pooled weights everywhere (huge λ) a level never beats them: every resample ties
    pooled = tune_weights(runs, levels, qrels, step="0.1", rule=SelectionRule(shrinkage=1e9, bootstrap=200),
                          with_evidence=True)
    assert pooled.evidence is not None
    assert all(e.beats_pooled == 0.0 and e.ties_pooled == 1.0 for e in pooled.evidence.levels.values())


def test_weights_files_without_the_new_fields_still_load(tmp_path):
    old = {"version": 1, "step": 0.5, "divisions": 2, "objective": ["nDCG@3"],
           "levels": {lv: {"weights": [0.5, 0.5, 0.0]} for lv in "abc"}}
    path = tmp_path / "old.json"
    path.write_text(__import__("json").dumps(old))
    loaded = load_weights(path)
    assert isinstance(loaded, WeightsFile) and loaded.evidence is None and loaded.selection.shrinkage == 0
