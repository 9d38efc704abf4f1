"""The evaluation results a run directory keeps (``metrics.json``), read by reports and notebooks."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from apcir.errors import ApcirError
from apcir.evaluation.responses import ResponseMetrics
from apcir.io import read_json, write_text
from apcir.metrics.significance import SignificanceSettings

METRICS_FILE = "metrics.json"

# Which paper table a system belongs to.
GROUPS = {
    "overall": "Table 1: overall",
    "weights": "Table 2: weight identification",
    "fusion": "Table 4: fusion strategies",
    "rerank": "+Reranking (Table 1): each system before and after re-ranking",
}


class SystemResult(BaseModel):
    label: str
    groups: list[str]
    description: str = ""
    means: dict[str, float]
    per_turn: dict[str, dict[str, float]]
    tuned_on_test: bool = Field(False, description="weights were tuned on the qrels these numbers use")
    base: str | None = Field(None, description="a re-ranked system: the system it re-ranks")
    reranker: str | None = Field(None, description="a re-ranked system: the key of its re-ranker in `rerankers`")


class RerankerInfo(BaseModel):
    """One re-ranker of an experiment, as the report names it."""

    reranker: str
    label: str
    model: str
    depth: int
    field: str


class TurnInfo(BaseModel):
    level: str | None = None
    human_personalised: bool = Field(description="the annotators marked PTKB statements as relevant")


class PtkbMetrics(BaseModel):
    """The PTKB statement rankings against the PTKB qrels: apcir's and its two reference orders."""

    qrels: str
    measures: list[str]
    systems: dict[str, SystemResult]


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
    backend: str | None = Field(None, description="the retrieval backend (the grid's rows)")
    encoder: str | None = Field(None, description="its model (None for BM25)")
    rerankers: dict[str, RerankerInfo] = Field(default_factory=dict, description="re-rankers by key (grid columns)")
    responses: ResponseMetrics | None = Field(None, description="the responses' ROUGE-L, citations and judge scores")
    ptkb: PtkbMetrics | None = Field(None, description="the PTKB statement rankings (with ptkb_qrels)")
    significance: SignificanceSettings = Field(default_factory=SignificanceSettings,
                                               description="how the report tests systems against the baseline")


def write_metrics(metrics: RunMetrics, run_dir: Path) -> Path:
    path = run_dir / METRICS_FILE
    write_text(path, metrics.model_dump_json(indent=1))
    return path


def read_metrics(run_dir: Path) -> RunMetrics:
    path = run_dir / METRICS_FILE
    if not path.exists():
        raise ApcirError(
            f"no {METRICS_FILE} here: is this a run directory of `apcir run` with qrels configured?", path=run_dir
        )
    data = read_json(path, "metrics file")
    try:
        return RunMetrics.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ApcirError(f"unreadable metrics: {where}: {first['msg']}", path=path) from None
