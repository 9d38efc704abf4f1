"""Stage 3, fusion: normalisation, personalisation-aware linear fusion, exact grid search, baselines.

* :mod:`~apcir.fusion.protocol`: where weights come from (tune, cross-validate, apply) in one place;
* :data:`apcir.fusion.systems.SYSTEMS`: APCIR and every baseline, the single source of their names.
"""

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
from apcir.fusion.linear import align_runs, fuse_linear, fuse_per_turn
from apcir.fusion.normalise import NORMS, normalise
from apcir.fusion.tuning import CVResult, cross_validate, no_third, tune_weights

__all__ = [
    "NORMS",
    "CVResult",
    "GridSearch",
    "align_runs",
    "cross_validate",
    "deps_weights",
    "divisions",
    "entropy_weights",
    "equal_weights",
    "fuse_linear",
    "fuse_per_turn",
    "no_third",
    "normalise",
    "random_fusion",
    "round_robin",
    "rrf",
    "simplex_points",
    "single_list",
    "tune_weights",
]
