"""Where the weights of the tuned systems come from, in one place: tune, cross-validate, or apply given weights.

* :func:`tune_variants`: one exhaustive search over the judged turns of some
  runs, then the best weights of each tuned system (APCIR, no personalisation).
  ``apcir tune`` and the tuning leg of ``apcir run`` (``source = "tune"``) call it.
* :func:`tuned_systems`: the evaluation runs of the tuned systems and the run
  to submit, under the experiment's protocol:

  - ``cv``: k-fold cross-validation by conversation on the evaluation qrels
    (one search serves every fold and variant); evaluation runs are
    out-of-fold, the submission fuses every turn with weights tuned on all
    judged turns;
  - ``file`` / ``tune``: weights given (a weights.json, or those the tuning leg
    wrote); a system is "tuned on test" when an evaluated turn, with the same
    judgements, was one of its tuning turns.

  ``apcir fuse``, ``apcir baseline`` and ``apcir run`` call it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from apcir.contract.records import Qrels, Run
from apcir.contract.weights import TunedOn, WeightsFile
from apcir.errors import ApcirError
from apcir.fusion.grid import GridSearch
from apcir.fusion.linear import fuse_linear, fuse_per_turn
from apcir.fusion.settings import FusionParams, TuningSettings
from apcir.fusion.systems import PRIMARY, SYSTEMS
from apcir.fusion.tuning import (
    cross_validate,
    judged_turns,
    qrels_fingerprint,
    tuned_on_overlap,
    turn_fingerprint,
    weights_from_search,
    with_missing_level,
)
from apcir.metrics import check_judged


@dataclass
class FusionInputs:
    """The lists of one topic set, their turns' levels and (for tuning or CV) judgements, with names for provenance."""

    lists: list[Run]
    levels: Mapping[str, str]
    qrels: Qrels | None = None
    qrels_name: str = ""
    run_names: list[str] = field(default_factory=list)
    levels_name: str = ""


@dataclass
class TunedSystems:
    """The tuned systems of one protocol: evaluation runs, the run to submit, and the weights."""

    runs: dict[str, Run]
    submission: Run
    weights: WeightsFile
    folds: list[WeightsFile] = field(default_factory=list)
    protocol: str = ""
    tuned_on_test: bool = False
    overlap: int | None = 0
    variant_weights: dict[str, WeightsFile] = field(default_factory=dict)
    """The weights of the other searched tuned systems (apcir-shrunk, ...), tuned on every judged turn."""
    turn_weights: dict[str, tuple[float, ...]] = field(default_factory=dict)
    """The APCIR weights each turn of ``runs["apcir"]`` was fused with (out-of-fold under CV): what
    query-representation fusion (``qr-fusion``) weighs its query vectors with."""


def search_for(inputs: FusionInputs, settings: TuningSettings, params: FusionParams,
               progress: bool = False) -> tuple[GridSearch, list[str]]:
    """The exhaustive search over every judged turn of the lists (shared by all variants and folds)."""
    if inputs.qrels is None:
        raise ApcirError("tuning the weights needs qrels")
    turns = judged_turns(inputs.lists, inputs.qrels)
    check_judged(inputs.lists, inputs.qrels, inputs.qrels_name or "the qrels", f"the {len(inputs.lists)} runs'")
    search = GridSearch(inputs.lists, inputs.qrels, turns, settings.objective, step=settings.step, norm=params.norm,
                        depth=params.depth, rel_threshold=params.rel_threshold, progress=progress)
    return search, turns


def tune_variants(
    inputs: FusionInputs,
    settings: TuningSettings,
    variants: Sequence[str],
    params: FusionParams,
    *,
    search: GridSearch | None = None,
    progress: bool = False,
    evidence: bool = True,
) -> dict[str, WeightsFile]:
    """Weights of each tuned system in ``variants`` (``apcir``, ``no-personalisation``, ...) from one search.

    ``no-levels`` needs no weights of its own: it is APCIR's ``all_turns`` vector. ``evidence``: bootstrap
    the tuning turns for each file's evidence (``settings.bootstrap`` resamples; 0 turns it off).
    """
    assert inputs.qrels is not None or search is not None
    if search is None:
        search, turns = search_for(inputs, settings, params, progress=progress)
    else:
        turns = list(search.turns)
    assert inputs.qrels is not None
    levels = with_missing_level(inputs.levels, turns, params.missing_level)
    tuned: dict[str, WeightsFile] = {}
    for name in variants:
        variant = SYSTEMS.get(name).variant
        if variant is None or variant.pooled:
            continue
        weights = weights_from_search(search, levels, turns, variant.constraint, settings.min_turns,
                                      settings.rule(**dict(variant.rule)), with_evidence=evidence)
        weights.tuned_on = TunedOn(
            qrels=inputs.qrels_name,
            qrels_fingerprint=qrels_fingerprint({t: inputs.qrels[t] for t in turns}),
            runs=list(inputs.run_names),
            levels=inputs.levels_name,
            turns=len(turns),
            turn_fingerprints={t: turn_fingerprint(inputs.qrels[t]) for t in turns},
        )
        tuned[name] = weights
    return tuned


def pooled_run(lists: Sequence[Run], weights: WeightsFile) -> Run:
    """The no-levels run: every turn fused with the weights' ``all_turns`` vector."""
    if weights.all_turns is None:
        raise ApcirError("the weights file has no all-turns weights (needed by the no-levels system)")
    turns = sorted(set().union(*(set(r) for r in lists)))
    vector = tuple(weights.all_turns.weights)
    return fuse_per_turn(lists, dict.fromkeys(turns, vector), norm=weights.norm, depth=weights.depth)


def tuned_systems(
    source: Literal["file", "tune", "cv"],
    target: FusionInputs,
    names: Sequence[str],
    params: FusionParams,
    *,
    settings: TuningSettings,
    folds: int = 5,
    seed: int = 0,
    given: Mapping[str, WeightsFile] | None = None,
    protocol: str = "",
) -> TunedSystems:
    """The runs of the tuned systems among ``names`` (``apcir`` always) under one protocol; see the module doc."""
    wanted = [n for n in names if SYSTEMS.get(n).kind == "tuned" and n != PRIMARY]
    if source == "cv":
        return _cross_validated(target, wanted, params, settings=settings, folds=folds, seed=seed)
    if not given or PRIMARY not in given:
        raise ApcirError(f"weights source {source!r} needs a weights file")
    weights = given[PRIMARY]
    runs = {PRIMARY: fuse_linear(target.lists, target.levels, weights, params.norm, params.depth,
                                 missing_level=params.missing_level)}
    for name in wanted:
        variant = SYSTEMS.get(name).variant
        assert variant is not None
        if variant.pooled:
            if weights.all_turns is not None:
                runs[name] = pooled_run(target.lists, weights.model_copy(update={"norm": params.norm,
                                                                                   "depth": params.depth}))
        elif name in given:
            runs[name] = fuse_linear(target.lists, target.levels, given[name], params.norm, params.depth,
                                     missing_level=params.missing_level)
    overlap = None
    if target.qrels is not None:
        evaluated = {t: target.qrels[t] for t in target.levels if t in target.qrels}
        overlap = tuned_on_overlap(weights, evaluated)
    label = protocol + (" (tuning turns unknown)" if overlap is None and target.qrels is not None else "")
    variant_weights = {n: w for n, w in (given or {}).items() if n != PRIMARY and n in runs}
    return TunedSystems(runs, runs[PRIMARY], weights, protocol=label, tuned_on_test=bool(overlap), overlap=overlap,
                        variant_weights=variant_weights,
                        turn_weights=_turn_weights(runs[PRIMARY], target.levels, weights, params.missing_level))


def _turn_weights(run: Run, levels: Mapping[str, str], weights: WeightsFile,
                  missing_level: str | None) -> dict[str, tuple[float, ...]]:
    """Each turn's weight vector under ``weights`` (by its level), for the turns of ``run``."""
    out = {}
    for turn in run:
        level = levels.get(turn, missing_level)
        if level is not None and level in weights.levels:
            out[turn] = tuple(weights.levels[level].weights)
    return out


def _cross_validated(target: FusionInputs, wanted: Sequence[str], params: FusionParams, *, settings: TuningSettings,
                     folds: int, seed: int) -> TunedSystems:
    norm, depth, rel_threshold, missing_level = params.norm, params.depth, params.rel_threshold, params.missing_level
    if target.qrels is None:
        raise ApcirError("cross-validation tunes on the evaluation qrels: configure evaluation.qrels")
    search, _ = search_for(target, settings, params)
    common: dict[str, Any] = {"k": folds, "seed": seed, "step": settings.step, "objective": settings.objective,
                              "norm": norm, "depth": depth, "rel_threshold": rel_threshold,
                              "missing_level": missing_level, "search": search, "min_turns": settings.min_turns}
    cv = cross_validate(target.lists, target.levels, target.qrels, rule=settings.rule(), **common)
    runs = {PRIMARY: cv.run}
    for name in wanted:
        variant = SYSTEMS.get(name).variant
        assert variant is not None
        levels = dict.fromkeys(target.levels, "a") if variant.pooled else target.levels
        runs[name] = cross_validate(target.lists, levels, target.qrels, constraint=variant.constraint,
                                    rule=settings.rule(**dict(variant.rule)), **common).run
    searched = tune_variants(target, settings, [PRIMARY, *wanted], params, search=search)
    weights = searched.pop(PRIMARY)
    submission = fuse_linear(target.lists, target.levels, weights, norm, depth, missing_level=missing_level)
    turn_weights: dict[str, tuple[float, ...]] = {}
    for fold in cv.folds:
        turn_weights.update(_turn_weights({t: {} for t in fold.test_turns}, target.levels, fold.weights,
                                          missing_level))
    return TunedSystems(runs, submission, weights, [f.weights for f in cv.folds],
                        protocol=f"{folds}-fold cross-validation by conversation (out-of-fold), seed {seed}",
                        variant_weights=searched, turn_weights=turn_weights)
