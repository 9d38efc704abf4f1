"""``weights.json``: per-level fusion weights and what they were tuned on."""

from __future__ import annotations

import math
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from apcir.console import warn
from apcir.contract.reformulations import LEVELS
from apcir.errors import ApcirError
from apcir.io import read_json, write_text


class Plateau(BaseModel):
    """The plateau a level's weights were chosen on (``select = "plateau"``)."""

    epsilon: float = Field(description="width: points within epsilon of the maximum objective form the plateau")
    points: int = Field(description="grid points on the plateau")
    centroid: list[float] = Field(description="their centroid; the chosen weights are the plateau point nearest it")


class Selection(BaseModel):
    """How the level weights were chosen from the grid: the shrinkage λ toward the pooled weights and the rule."""

    shrinkage: float = Field(0.0, description="λ: level ℓ maximises mean_ℓ(w) + λ·mean_all(w); 0 = the paper")
    shrinkage_by: str = Field("fixed", description="fixed, or inner cross-validation by conversation")
    grid: list[float] = Field(default_factory=list, description="inner CV: the λ values tried")
    held_out: list[float] = Field(default_factory=list,
                                  description="inner CV: each λ's mean objective on the inner held-out turns")
    inner_folds: int = 0
    select: str = Field("argmax", description="argmax | plateau")
    epsilon: str = Field("", description="plateau: how its width was set (each level's value is in its plateau)")
    seed: int = 0


class LevelEvidence(BaseModel):
    """Bootstrap evidence of one level: how much its chosen weights move, and whether they beat pooled ones."""

    resamples: int = Field(description="resamples with in-bag and out-of-bag turns of this level")
    intervals: list[list[float]] = Field(default_factory=list,
                                         description="95% percentile interval [low, high] of each weight")
    beats_pooled: float | None = Field(None, description="share of resamples in which the level's own weights "
                                                         "score higher than the pooled weights on its out-of-bag turns")
    ties_pooled: float | None = Field(None, description="share of resamples with equal scores")
    points: list[list[float]] = Field(default_factory=list,
                                      description="the distinct chosen weights [w1, w2, w3, resamples choosing them]")
    note: str = ""


class Evidence(BaseModel):
    """Bootstrap of the tuning turns (B resamples, seeded), per level; λ and ε as chosen on all turns."""

    resamples: int
    seed: int
    shrinkage: float
    levels: dict[str, LevelEvidence]


class LevelWeights(BaseModel):
    """The weight vector of one level and how it was chosen."""

    weights: list[float] = Field(
        description="w1, w2, w3 (one per run, in --runs order); they sum to 1"
    )
    composition: list[int] = Field(
        default_factory=list, description="the weights as integers i/N, N = 1/step"
    )
    score: float | None = Field(
        None, description="objective on the tuning turns (sum of the measures' means)"
    )
    measures: dict[str, float] = Field(
        default_factory=dict, description="each objective measure's mean"
    )
    n_turns: int = Field(0, description="tuning turns of this level (judged, in the runs)")
    # true when the level had no tuning turns and uses the all-turns weights
    fallback: bool = False
    note: str = ""
    plateau: Plateau | None = Field(None, description="select = plateau: the plateau the weights were chosen on")


class TunedOn(BaseModel):
    """What the weights were tuned on, so a report can tell held-out from tuned-on-test numbers."""

    qrels: str = ""
    qrels_fingerprint: str = ""
    runs: list[str] = Field(default_factory=list)
    levels: str = ""
    turns: int = 0
    turn_fingerprints: dict[str, str] = Field(
        default_factory=dict,
        description="tuning turn -> hash of its judgements (to label tuned-on-test reports)",
    )


WEIGHTS_VERSION = 1


class WeightsFile(BaseModel):
    """Contents of ``weights.json``."""

    version: int = WEIGHTS_VERSION
    step: float
    divisions: int = Field(description="N = 1/step; every weight is i/N")
    objective: list[str]
    norm: str = "minmax"
    depth: int = 1000
    rel_threshold: int = 1
    tie_rule: str = ""
    min_turns: int = Field(1, description="a level with fewer tuning turns uses the all-turns weights")
    tuned_on: TunedOn = Field(default_factory=TunedOn)
    levels: dict[str, LevelWeights]
    all_turns: LevelWeights | None = Field(
        None, description="one vector tuned on every turn (the no-levels ablation)"
    )
    selection: Selection = Field(default_factory=Selection, description="how the points were chosen (λ, rule)")
    evidence: Evidence | None = Field(None, description="bootstrap evidence per level")

    def vector(self, level: str) -> tuple[float, ...]:
        if level not in self.levels:
            raise ApcirError(
                f"weights file has no weights for level {level!r} (it has {', '.join(self.levels)})"
            )
        return tuple(self.levels[level].weights)

    @property
    def n_weights(self) -> int:
        """Weights per level (= the number of runs these weights fuse)."""
        return len(next(iter(self.levels.values())).weights)

    def save(self, path: str | Path) -> None:
        write_text(Path(path), self.model_dump_json(indent=2) + "\n")


def weight_problems(weights: WeightsFile) -> tuple[list[str], list[str]]:
    """(errors, warnings) about the weight vectors.

    Errors: no levels, vectors of different lengths, a weight that is not a
    finite number, a vector of zeros (every fused score would be 0). Warnings:
    a negative weight or a vector that does not sum to 1 (the fusion still
    works, as trec_eval accepts any scores, but the grid search never makes them).
    """
    errors: list[str] = []
    warnings: list[str] = []
    if not weights.levels:
        return ["no levels: expected weight vectors for levels a, b and c"], []
    unknown = sorted(set(weights.levels) - set(LEVELS))
    if unknown:
        errors.append(f"level(s) {', '.join(map(repr, unknown))} are not personalisation levels ({', '.join(LEVELS)})")
    if weights.version > WEIGHTS_VERSION:
        errors.append(f"version {weights.version} is newer than this apcir reads ({WEIGHTS_VERSION}); upgrade apcir")
    vectors = dict(weights.levels)
    if weights.all_turns is not None:
        vectors["all_turns"] = weights.all_turns
    sizes = {len(lw.weights) for lw in vectors.values()}
    if len(sizes) > 1:
        errors.append(f"weight vectors of different lengths {sorted(sizes)}")
    for name, lw in vectors.items():
        where = f"level {name}" if name != "all_turns" else "all_turns"
        if not lw.weights:
            errors.append(f"{where}: empty weight vector")
            continue
        if not all(math.isfinite(w) for w in lw.weights):
            errors.append(f"{where}: weights {lw.weights} are not all finite numbers")
            continue
        if all(w == 0 for w in lw.weights):
            errors.append(f"{where}: all weights are 0, so every fused score would be 0")
            continue
        if any(w < 0 for w in lw.weights):
            warnings.append(f"{where}: negative weight in {lw.weights}")
        if abs(sum(lw.weights) - 1.0) > 1e-6:
            warnings.append(f"{where}: weights {lw.weights} sum to {sum(lw.weights):g}, not 1")
    return errors, warnings


def load_weights(path: str | Path) -> WeightsFile:
    """Read and validate a ``weights.json``; unusable weights are an error, unusual ones a warning."""
    path = Path(path)
    raw = read_json(path, "weights file")
    try:
        weights = WeightsFile.model_validate(raw, strict=True)  # true is not 1.0, "0.5" is not 0.5
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ApcirError(f"not a weights file: {where}: {first['msg']}", path=path) from None
    errors, warnings = weight_problems(weights)
    if errors:
        raise ApcirError("unusable weights: " + "; ".join(errors), path=path)
    for message in warnings:
        warn(f"{path}: {message}")
    return weights
