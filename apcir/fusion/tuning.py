"""Tuning the per-level weights, applying them, and k-fold cross-validation by conversation.

The objective of a level is the sum of the objective measures' means over
the level's tuning turns (= the paper's Eq. 5 sum over turns, divided by the
number of turns, which does not change the best point). Tuning turns are the
turns that are judged and in the runs; a judged turn whose lists are all
empty counts 0. A level without tuning turns falls back to the weights tuned
on all tuning turns, and the weights file says so.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from apcir.contract.levels import check_levels
from apcir.contract.records import Qrels, Run
from apcir.contract.reformulations import LEVELS
from apcir.contract.weights import LevelWeights, TunedOn, WeightsFile
from apcir.errors import ApcirError
from apcir.fusion.folds import conversation_folds
from apcir.fusion.grid import TIE_RULE, GridSearch, Objective, divisions, objective_measures
from apcir.fusion.linear import align_runs, check_runs, fuse_linear
from apcir.fusion.normalise import check_norm
from apcir.fusion.selection import (
    Choice,
    SelectionRule,
    Surface,
    evidence,
    level_choice,
    pooled_choice,
    resolve_lambda,
)
from apcir.ids import split_turn_id
from apcir.metrics import Evaluation, evaluate

Constraint = np.ndarray | Callable[[np.ndarray], np.ndarray] | None


def no_third(compositions: np.ndarray) -> np.ndarray:
    """Constraint of the no-personalisation ablation: the last weight is 0."""
    return compositions[:, -1] == 0


def qrels_fingerprint(qrels: Qrels) -> str:
    """A short hash of the judgements, to tell whether a report's qrels are the tuning qrels."""
    digest = hashlib.sha256()
    for turn in sorted(qrels):
        for passage, grade in sorted(qrels[turn].items()):
            digest.update(f"{turn} {passage} {grade}\n".encode())
    return digest.hexdigest()[:16]


def turn_fingerprint(grades: Mapping[str, int]) -> str:
    """A short hash of one turn's judgements."""
    text = "".join(f"{p} {g}\n" for p, g in sorted(grades.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def tuned_on_overlap(weights: WeightsFile, qrels: Qrels) -> int | None:
    """How many judged turns of ``qrels`` the weights were tuned on (same id, same judgements).

    ``None`` when the weights file does not list its tuning turns.
    """
    tuned = weights.tuned_on.turn_fingerprints
    if not tuned:
        return None
    return sum(1 for t, grades in qrels.items() if tuned.get(t) == turn_fingerprint(grades))


def tuning_turns(runs: Sequence[Run], qrels: Qrels) -> list[str]:
    """Turns that are judged and in at least one run, sorted."""
    return sorted(t for t in align_runs(runs).turns if t in qrels)


def judged_turns(runs: Sequence[Run], qrels: Qrels, turns: Sequence[str] | None = None) -> list[str]:
    """``turns``, or else every turn that is judged and in at least one run (:func:`tuning_turns`); none is an error."""
    chosen = list(turns) if turns is not None else tuning_turns(runs, qrels)
    if not chosen:
        raise ApcirError("no turn is both judged and in the runs: check that the qrels belong to these runs")
    return chosen


def tune_weights(
    runs: Sequence[Run],
    levels: Mapping[str, str],
    qrels: Qrels,
    step: float | str = 0.01,
    objective: Objective = "paper",
    norm: str = "minmax",
    depth: int = 1000,
    *,
    rel_threshold: int = 1,
    missing_level: str | None = None,
    constraint: Constraint = None,
    turns: Sequence[str] | None = None,
    search: GridSearch | None = None,
    progress: bool = False,
    qrels_name: str = "",
    run_names: Sequence[str] = (),
    levels_name: str = "",
    min_turns: int = 1,
    rule: SelectionRule | None = None,
    with_evidence: bool = False,
) -> WeightsFile:
    """Best weights per level (and over all turns) by exhaustive search over the simplex.

    ``turns`` restricts tuning to those turns (default: every judged turn of
    the runs); ``search`` reuses a finished :class:`GridSearch`; ``constraint``
    limits the eligible points (e.g. :func:`no_third`).
    """
    check_runs(runs)
    check_norm(norm)
    objective_measures(objective)  # a bad objective is refused first, before the turns are looked at
    chosen = judged_turns(runs, qrels, turns)
    levels = with_missing_level(levels, chosen, missing_level)
    if search is None:
        search = GridSearch(runs, qrels, chosen, objective, step=step, norm=norm, depth=depth,
                            rel_threshold=rel_threshold, progress=progress)
    weights = weights_from_search(search, levels, chosen, constraint, min_turns, rule, with_evidence=with_evidence)
    weights.tuned_on = TunedOn(
        qrels=qrels_name,
        qrels_fingerprint=qrels_fingerprint({t: qrels[t] for t in chosen}),
        runs=list(run_names),
        levels=levels_name,
        turns=len(chosen),
        turn_fingerprints={t: turn_fingerprint(qrels[t]) for t in chosen},
    )
    return weights


def weights_from_search(
    search: GridSearch,
    levels: Mapping[str, str],
    turns: Sequence[str],
    constraint: Constraint = None,
    min_turns: int = 1,
    rule: SelectionRule | None = None,
    *,
    with_evidence: bool = False,
) -> WeightsFile:
    """Per-level points of a finished search over ``turns``, chosen by ``rule`` (default: the per-level argmax).

    A level with fewer than ``min_turns`` tuning turns (at least 1) uses the
    weights tuned on all ``turns``, and says so in its ``note``. ``with_evidence``:
    bootstrap the turns for the evidence of :mod:`apcir.fusion.selection`.
    """
    if min_turns < 0:
        raise ApcirError(f"min_turns must be >= 0, got {min_turns}")
    rule = rule or SelectionRule()
    allowed = constraint(search.compositions) if callable(constraint) else constraint
    surface = Surface(search, turns, levels)
    pooled_scores = surface.scores(turns)
    selection = resolve_lambda(surface, turns, levels, allowed, rule, min_turns)
    lam = selection.shrinkage
    overall_choice = pooled_choice(surface, turns, allowed, rule)
    overall = _level_weights(search, turns, overall_choice)
    epsilons: dict[str, float | np.ndarray | None] = {"all": overall_choice.epsilon}
    by_level: dict[str, LevelWeights] = {}
    names = list(LEVELS) + sorted({levels[t] for t in turns} - set(LEVELS))
    for level in names:
        level_turns = [t for t in turns if levels[t] == level]
        if level_turns and len(level_turns) >= min_turns:
            choice = level_choice(surface, level_turns, turns, pooled_scores, allowed, lam, rule)
            epsilons[level] = choice.epsilon
            by_level[level] = _level_weights(search, level_turns, choice)
        else:
            why = (f"no tuning turn has level {level}" if not level_turns
                   else f"level {level} has {len(level_turns)} tuning turn(s), fewer than min_turns = {min_turns}")
            by_level[level] = overall.model_copy(
                update={
                    "fallback": True,
                    "n_turns": len(level_turns),
                    "score": None,
                    "measures": {},
                    "note": f"{why}: uses the weights tuned on all {len(turns)} tuning turns",
                }
            )
    return WeightsFile(
        step=1 / search.divisions,
        divisions=search.divisions,
        objective=[m.name for m in search.measures],
        norm=search.norm,
        depth=search.depth,
        rel_threshold=search.rel_threshold,
        tie_rule=TIE_RULE,
        min_turns=min_turns,
        levels=by_level,
        all_turns=overall,
        selection=selection,
        evidence=evidence(surface, turns, levels, allowed, rule, lam, epsilons, min_turns) if with_evidence else None,
    )


def _level_weights(search: GridSearch, turns: Sequence[str], choice: Choice) -> LevelWeights:
    """The weights of a chosen point, with the objective and each measure's mean over ``turns`` there."""
    means = search.means(turns)[choice.index]
    return LevelWeights(
        weights=[float(w) for w in search.weights[choice.index]],
        composition=[int(c) for c in search.compositions[choice.index]],
        score=float(means.sum()),
        measures={m.name: float(means[j]) for j, m in enumerate(search.measures)},
        n_turns=len(turns),
        plateau=choice.plateau,
    )


def with_missing_level(
    levels: Mapping[str, str], turns: Sequence[str], missing_level: str | None
) -> dict[str, str]:
    if missing_level is not None:
        if missing_level not in LEVELS:
            raise ApcirError(
                f"--missing-level must be one of {', '.join(LEVELS)}, got {missing_level!r}"
            )
        return {**dict.fromkeys(turns, missing_level), **levels}
    check_levels(dict(levels), list(turns), what="the runs that are judged")
    return dict(levels)


@dataclass
class Fold:
    """One fold of a cross-validation: its held-out conversations and the weights tuned without them."""

    index: int
    conversations: list[str]
    test_turns: list[str]
    weights: WeightsFile


@dataclass
class CVResult:
    """Out-of-fold fused run (every judged turn fused with weights tuned on the other folds)."""

    k: int
    seed: int
    folds: list[Fold]
    run: Run
    evaluation: Evaluation
    label: str = "out-of-fold"
    measures: list[str] = field(default_factory=list)


def cross_validate(
    runs: Sequence[Run],
    levels: Mapping[str, str],
    qrels: Qrels,
    k: int = 5,
    seed: int = 0,
    step: float | str = 0.01,
    objective: Objective = "paper",
    norm: str = "minmax",
    depth: int = 1000,
    *,
    rel_threshold: int = 1,
    missing_level: str | None = None,
    constraint: Constraint = None,
    report: Sequence[str] | str = "paper",
    search: GridSearch | None = None,
    progress: bool = False,
    min_turns: int = 1,
    rule: SelectionRule | None = None,
) -> CVResult:
    """k-fold cross-validation by conversation: tune on k-1 folds, fuse the held-out fold.

    The search runs once over all judged turns; each fold's weights are the
    best points over its training turns. ``report`` names the measures of the
    out-of-fold evaluation. ``search`` reuses a :class:`GridSearch` built over
    the judged turns of these runs with the same settings (levels and
    constraints do not enter the search, so one search serves the ablations).
    """
    check_runs(runs)
    objective_measures(objective)  # a bad objective is refused first, before the turns are looked at
    divisions(step)
    turns = judged_turns(runs, qrels)
    levels = with_missing_level(levels, turns, missing_level)
    folds = conversation_folds(turns, k, seed)
    if search is None:
        search = GridSearch(runs, qrels, turns, objective, step=step, norm=norm, depth=depth,
                            rel_threshold=rel_threshold, progress=progress)
    elif set(turns) - set(search.turns):
        raise ApcirError("the given grid search does not cover every judged turn of these runs")
    fused: Run = {}
    results: list[Fold] = []
    for index, conversations in enumerate(folds):
        held = set(conversations)
        test = [t for t in turns if split_turn_id(t)[0] in held]
        train = [t for t in turns if split_turn_id(t)[0] not in held]
        weights = weights_from_search(search, levels, train, constraint, min_turns, rule)
        weights.tuned_on = TunedOn(
            qrels_fingerprint=qrels_fingerprint({t: qrels[t] for t in train}),
            turns=len(train),
            turn_fingerprints={t: turn_fingerprint(qrels[t]) for t in train},
        )
        subset = [{t: r[t] for t in test if t in r} for r in runs]
        fused.update(fuse_linear(subset, levels, weights, norm, depth))
        results.append(
            Fold(index=index, conversations=conversations, test_turns=test, weights=weights)
        )
    wanted = report if isinstance(report, str) else list(report)
    evaluation = evaluate(fused, {t: qrels[t] for t in turns}, wanted, rel_threshold=rel_threshold, check=False)
    return CVResult(
        k=k,
        seed=seed,
        folds=results,
        run=dict(sorted(fused.items())),
        evaluation=evaluation,
        measures=list(evaluation.measures),
    )
