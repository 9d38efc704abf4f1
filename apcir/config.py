"""Experiment configuration: one TOML or YAML file per experiment.

Every field has a default that runs the embedded demo offline, so the
smallest config is a name. Relative paths are resolved against the working
directory of ``apcir run``. The resolved config is saved into the run
directory, and each stage records a fingerprint of the parts of it that it
depends on, so a re-run redoes only stages whose inputs changed.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from apcir.errors import ApcirError


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReformulatorConfig(_Section):
    llm: str = Field("heuristic", description="heuristic, manual, or a model name (gpt-4o, ...)")
    base_url: str | None = Field(None, description="OpenAI-compatible server; default OPENAI_BASE_URL or OpenAI")
    concurrency: int = 8
    cache_dir: str | None = Field(None, description="LLM cache; default APCIR_CACHE_DIR or ~/.cache/apcir/llm")


class RetrievalConfig(_Section):
    backend: Literal["embedded", "lucene-splade", "lucene-bm25"] = "embedded"
    index: str = Field(
        "indexes/ikat23-provenance-splade-tiny",
        description="index directory; built from `collection` when missing (embedded and lucene-splade)",
    )
    collection: str | None = Field("ikat23-provenance", description="collection to build the index from if missing")
    encoder: str = "splade-tiny"
    k: int = 1000
    passages: str | None = Field(
        None, description="collection JSONL with passage texts for the submission (default: `collection`)"
    )


class WeightsConfig(_Section):
    """Where the level weights come from: a file, tuning on another dataset, or cross-validation."""

    source: Literal["file", "tune", "cv"] = "cv"
    file: str | None = None
    tune_topics: str | None = None
    tune_qrels: str | None = None
    folds: int = 5
    seed: int = 0
    step: float = 0.01
    objective: str = Field("paper", description="measures summed by the grid search: a set name or comma-separated names")


class FusionConfig(_Section):
    norm: Literal["minmax", "max", "zscore", "none"] = "minmax"
    depth: int = 1000
    weights: WeightsConfig = Field(default_factory=WeightsConfig)
    baselines: bool = Field(True, description="also fuse and evaluate the paper's baselines")


class EvaluationConfig(_Section):
    qrels: str | None = Field(None, description="qrels name or file; no evaluation without it")
    measures: list[str] = Field(default_factory=lambda: ["paper"])
    rel_threshold: int = 1
    complete: bool = Field(False, description="count judged turns missing from a run as 0 (trec_eval -c)")
    baseline: str = Field("no-personalisation", description="system the significance tests compare against")


class ExportConfig(_Section):
    format: Literal["ikat23", "ikat24", "ikat25"] = "ikat24"
    text: Literal["pseudo", "passage"] = "pseudo"
    run_type: str = "automatic"
    team_id: str = "apcir"


class ExperimentConfig(_Section):
    name: str
    topics: str = "ikat23-test"
    turns: list[str] | None = Field(None, description="restrict to these turn ids")
    output_dir: str | None = Field(None, description="default runs/<name>")
    reformulator: ReformulatorConfig = Field(default_factory=ReformulatorConfig)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    fusion: FusionConfig = Field(default_factory=FusionConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    export: ExportConfig = Field(default_factory=ExportConfig)

    @field_validator("name")
    @classmethod
    def _name_is_a_word(cls, value: str) -> str:
        if not value or any(c.isspace() or c in "/\\" for c in value):
            raise ValueError("must be one word without slashes (it names the run directory and the run tag)")
        return value

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) if self.output_dir else Path("runs") / self.name


def load_config(path: Path) -> ExperimentConfig:
    """Read a TOML (.toml) or YAML (.yaml/.yml) experiment file; errors name the file and the field."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ApcirError("config file not found", path=path) from None
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text) or {}
        else:
            raise ApcirError("config must be .toml, .yaml or .yml", path=path)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ApcirError(f"malformed config: {exc}", path=path) from None
    if not isinstance(data, dict):
        raise ApcirError("config must be a table/mapping at the top level", path=path)
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        lines = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise ApcirError("invalid config: " + "; ".join(lines), path=path) from None
