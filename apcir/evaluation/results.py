"""The evaluation results a run directory keeps (``metrics.json``), read by reports and notebooks."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from apcir.errors import ApcirError

METRICS_FILE = "metrics.json"

# Which paper table a system belongs to.
GROUPS = {
    "overall": "Table 1: overall",
    "weights": "Table 2: weight identification",
    "fusion": "Table 4: fusion strategies",
}


class SystemResult(BaseModel):
    label: str
    groups: list[str]
    description: str = ""
    means: dict[str, float]
    per_turn: dict[str, dict[str, float]]
    tuned_on_test: bool = Field(False, description="weights were tuned on the qrels these numbers use")


class TurnInfo(BaseModel):
    level: str | None = None
    human_personalised: bool = Field(description="the annotators marked PTKB statements as relevant")


class RunMetrics(BaseModel):
    """Everything ``apcir report`` needs from one run directory."""

    name: str
    topics: str
    qrels: str
    measures: list[str]
    rel_threshold: int
    complete: bool
    primary: str = "apcir"
    baseline: str = "no-personalisation"
    protocol: str = Field(description="how the APCIR weights were obtained, e.g. '5-fold CV by conversation'")
    systems: dict[str, SystemResult]
    turns: dict[str, TurnInfo]


def write_metrics(metrics: RunMetrics, run_dir: Path) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / METRICS_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(metrics.model_dump_json(indent=1), encoding="utf-8")
    tmp.replace(path)
    return path


def read_metrics(run_dir: Path) -> RunMetrics:
    path = run_dir / METRICS_FILE
    if not path.exists():
        raise ApcirError(
            f"no {METRICS_FILE} here: is this a run directory of `apcir run` with qrels configured?", path=run_dir
        )
    try:
        return RunMetrics.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, ValidationError) as exc:
        raise ApcirError(f"unreadable metrics: {exc}", path=path) from None
