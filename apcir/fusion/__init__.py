"""Fusion: normalisation, personalisation-aware linear fusion, exact grid search, baselines."""

from apcir.fusion.baselines import (
    deps_weights,
    entropy_weights,
    equal_weights,
    random_fusion,
    round_robin,
    rrf,
    single_list,
)
from apcir.fusion.grid import GridSearch, divisions, simplex_points
from apcir.fusion.levels import load_levels
from apcir.fusion.linear import align_runs, fuse_linear, fuse_per_turn
from apcir.fusion.normalise import NORMS, normalise
from apcir.fusion.tuning import CVResult, cross_validate, no_third, tune_weights
from apcir.fusion.weights import LevelWeights, WeightsFile, load_weights

__all__ = [
    "NORMS",
    "CVResult",
    "GridSearch",
    "LevelWeights",
    "WeightsFile",
    "align_runs",
    "cross_validate",
    "deps_weights",
    "divisions",
    "entropy_weights",
    "equal_weights",
    "fuse_linear",
    "fuse_per_turn",
    "load_levels",
    "load_weights",
    "no_third",
    "normalise",
    "random_fusion",
    "round_robin",
    "rrf",
    "simplex_points",
    "single_list",
    "tune_weights",
]
