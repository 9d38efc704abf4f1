"""The systems an experiment compares: APCIR fusion and the paper's baselines and ablations.

Each system is a fused run built from the three per-turn lists (q', q'+r',
third) and the turns' levels, by one of the fusion layer's functions. Systems
whose weights are tuned follow the experiment's protocol: k-fold
cross-validation by conversation (out-of-fold runs), or weights tuned on
another dataset, or a weights file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from apcir.fusion import (
    WeightsFile,
    cross_validate,
    deps_weights,
    entropy_weights,
    equal_weights,
    fuse_linear,
    fuse_per_turn,
    no_third,
    random_fusion,
    round_robin,
    rrf,
    single_list,
)
from apcir.llm.schema import LIST_NAMES
from apcir.models import Qrels, Run

Encoder = Callable[[list[str]], np.ndarray]


@dataclass(frozen=True)
class SystemSpec:
    label: str
    groups: tuple[str, ...]
    description: str


SYSTEMS: dict[str, SystemSpec] = {
    "apcir": SystemSpec(
        "APCIR", ("overall", "weights", "fusion"), "personalisation-aware linear fusion, weights per level"
    ),
    "manual": SystemSpec("Manual rewrite (HumanQR)", ("overall",), "the annotators' rewrite, retrieved alone"),
    "list-rewrite": SystemSpec("q' alone", ("overall",), "the non-personalised rewrite, retrieved alone"),
    "list-rewrite_response": SystemSpec("q'+r' alone", ("overall",), "rewrite plus pseudo-response alone"),
    "list-third": SystemSpec("third alone", ("overall",), "q^u+r^u (levels b/c) or q''+r'' (level a) alone"),
    "no-personalisation": SystemSpec(
        "No personalisation", ("weights",), "w3 = 0; w1, w2 tuned per level with the same protocol"
    ),
    "random": SystemSpec("Random personalisation", ("weights",), "seeded random weights per turn"),
    "equal": SystemSpec("Equal personalisation", ("weights",), "w1 = w2 = w3 = 1/3"),
    "entropy": SystemSpec(
        "User-profile entropy", ("weights",), "w3 = normalised topic entropy of the profile; w1 = w2 = (1-w3)/2"
    ),
    "deps": SystemSpec(
        "DEPS", ("weights",), "w3 = sigmoid(||E(q^u+r^u) - E(top-10 of q'+r')||); w1 = w2 = (1-w3)/2"
    ),
    "no-levels": SystemSpec("No levels", ("fusion",), "one weight vector for every turn, tuned with the same protocol"),
    "rrf": SystemSpec("Reciprocal rank fusion", ("fusion",), "RRF, k = 60"),
    "round-robin": SystemSpec("Round-robin", ("fusion",), "rank 1 of each list, then rank 2, ..."),
}


@dataclass
class Tuned:
    """APCIR-style systems of one protocol: evaluation runs, submission run and weights."""

    runs: dict[str, Run]
    submission: Run
    weights: WeightsFile
    folds: list[WeightsFile] = field(default_factory=list)
    protocol: str = ""
    tuned_on_test: bool = False


def cross_validated(
    lists: list[Run],
    levels: Mapping[str, str],
    qrels: Qrels,
    *,
    folds: int,
    seed: int,
    step: float,
    objective: str,
    norm: str,
    depth: int,
    rel_threshold: int,
    with_baselines: bool,
) -> Tuned:
    """APCIR (and no-personalisation, no-levels) by k-fold CV by conversation on the evaluation qrels.

    Evaluation runs are out-of-fold; the submission run fuses every turn with
    weights tuned on all judged turns (that run is tuned on these qrels, so it
    is not the one the tables report).
    """
    from apcir.fusion import GridSearch, tune_weights
    from apcir.fusion.tuning import objective_measures, tuning_turns

    # One exhaustive search over every judged turn serves every fold and ablation.
    search = GridSearch(lists, qrels, tuning_turns(lists, qrels), objective_measures(objective), step=step,
                        norm=norm, depth=depth, rel_threshold=rel_threshold)
    common: dict[str, Any] = {"k": folds, "seed": seed, "step": step, "objective": objective, "norm": norm, "depth": depth,
                                  "rel_threshold": rel_threshold, "missing_level": "a", "search": search}
    cv = cross_validate(lists, levels, qrels, **common)
    runs = {"apcir": cv.run}
    if with_baselines:
        runs["no-personalisation"] = cross_validate(lists, levels, qrels, constraint=no_third, **common).run
        same_level = dict.fromkeys(levels, "a")
        runs["no-levels"] = cross_validate(lists, same_level, qrels, **common).run
    weights = tune_weights(lists, levels, qrels, step=step, objective=objective, norm=norm, depth=depth,
                           rel_threshold=rel_threshold, missing_level="a", search=search)
    submission = fuse_linear(lists, levels, weights, norm, depth, missing_level="a")
    return Tuned(runs, submission, weights, [f.weights for f in cv.folds],
                 protocol=f"{folds}-fold cross-validation by conversation (out-of-fold), seed {seed}")


def with_weights(
    lists: list[Run],
    levels: Mapping[str, str],
    weights: WeightsFile,
    *,
    no_personalisation: WeightsFile | None,
    norm: str,
    depth: int,
    protocol: str,
    tuned_on_test: bool,
) -> Tuned:
    """APCIR with given weights (a file, or tuned on another dataset), and the ablations they allow."""
    fused = fuse_linear(lists, levels, weights, norm, depth, missing_level="a")
    runs = {"apcir": fused}
    if no_personalisation is not None:
        runs["no-personalisation"] = fuse_linear(lists, levels, no_personalisation, norm, depth, missing_level="a")
    if weights.all_turns is not None:
        vector = tuple(weights.all_turns.weights)
        runs["no-levels"] = fuse_per_turn(lists, dict.fromkeys(fused, vector), norm=norm, depth=depth)
    return Tuned(runs, fused, weights, protocol=protocol, tuned_on_test=tuned_on_test)


def untuned_baselines(
    lists: list[Run],
    *,
    norm: str,
    depth: int,
    seed: int,
    profiles: Mapping[str, list[str]],
    personalised: Mapping[str, str],
    passages: Mapping[str, str],
    encode: Encoder | None,
) -> dict[str, Run]:
    """Baselines without tuning: single lists, equal, random, RRF, round-robin, entropy and DEPS.

    Entropy needs the profiles and DEPS the passage texts; both need ``encode``
    and are left out when it is ``None`` (or, for DEPS, without passage texts).
    """
    runs: dict[str, Run] = {}
    for index, name in enumerate(LIST_NAMES):
        runs[f"list-{name}"] = single_list(lists, index, norm=norm, depth=depth)
    runs["equal"] = equal_weights(lists, norm=norm, depth=depth)
    runs["random"] = random_fusion(lists, seed, norm=norm, depth=depth)
    runs["rrf"] = rrf(lists, 60, depth)
    runs["round-robin"] = round_robin(lists, depth)
    if encode is not None:
        turns = set(runs["equal"])
        runs["entropy"] = fuse_per_turn(
            lists, entropy_weights({t: profiles[t] for t in turns}, encode), norm=norm, depth=depth
        )
        if passages:
            runs["deps"] = fuse_per_turn(
                lists, deps_weights({t: personalised[t] for t in turns}, lists, passages, encode),
                norm=norm, depth=depth,
            )
    return runs
