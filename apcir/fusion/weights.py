"""``weights.json``: per-level fusion weights and what they were tuned on."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from apcir.errors import ApcirError


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


class WeightsFile(BaseModel):
    """Contents of ``weights.json``."""

    version: int = 1
    step: float
    divisions: int = Field(description="N = 1/step; every weight is i/N")
    objective: list[str]
    norm: str = "minmax"
    depth: int = 1000
    rel_threshold: int = 1
    tie_rule: str = ""
    tuned_on: TunedOn = Field(default_factory=TunedOn)
    levels: dict[str, LevelWeights]
    all_turns: LevelWeights | None = Field(
        None, description="one vector tuned on every turn (the no-levels ablation)"
    )

    def vector(self, level: str) -> tuple[float, ...]:
        if level not in self.levels:
            raise ApcirError(
                f"weights file has no weights for level {level!r} (it has {', '.join(self.levels)})"
            )
        return tuple(self.levels[level].weights)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")


def load_weights(path: str | Path) -> WeightsFile:
    """Read and validate a ``weights.json``."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ApcirError("weights file not found", path=path) from None
    except json.JSONDecodeError as exc:
        raise ApcirError(f"not JSON: {exc.msg}", path=path, line=exc.lineno) from None
    try:
        weights = WeightsFile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ApcirError(f"not a weights file: {where}: {first['msg']}", path=path) from None
    sizes = {len(lw.weights) for lw in weights.levels.values()}
    if len(sizes) > 1:
        raise ApcirError(
            f"levels have weight vectors of different lengths {sorted(sizes)}", path=path
        )
    return weights
