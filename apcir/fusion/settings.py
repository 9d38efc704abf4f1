"""The fusion stage's settings: the ``[fusion]`` and ``[fusion.weights]`` config sections.

``apcir tune``, ``apcir fuse`` and ``apcir baseline`` build the same records from their options.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from apcir.errors import ApcirError
from apcir.fusion.normalise import NORMS, norm_help
from apcir.reformulation.registry import METHOD
from apcir.registry import InRegistry

Norm = Annotated[str, InRegistry(NORMS)]
"""A normalisation's name (:data:`apcir.fusion.normalise.NORMS`)."""

if TYPE_CHECKING:
    from apcir.fusion.selection import SelectionRule


class TuningSettings(BaseModel):
    """How the exhaustive weight search runs (shared by every protocol and by ``apcir tune``)."""

    model_config = ConfigDict(extra="forbid")

    step: float = Field(0.01, gt=0, le=1, description="grid step; must divide 1 (0.01 = 5,151 points for 3 lists)")
    objective: str = Field("paper", description="measures summed by the search: a set name or comma-separated names")
    min_turns: int = Field(
        1, ge=0, description="a level with fewer tuning turns uses the weights tuned on all turns (said in weights.json)"
    )
    shrinkage: float | Literal["cv"] = Field(
        0.0, description="λ, shrinking each level's weights toward the pooled ones: level ℓ maximises "
        "mean_ℓ(w) + λ·mean_all(w); 0 = the paper's per-level argmax, \"cv\" = chosen by an inner "
        "cross-validation by conversation")
    select: Literal["argmax", "plateau"] = Field(
        "argmax", description="argmax, or plateau: the grid point nearest the centroid of the points within "
        "epsilon of the maximum")
    epsilon: float | None = Field(
        None, ge=0, description="plateau width in objective units (sum of the measures' means); default: per "
        "point, one bootstrap standard error of its objective's difference from the argmax (paired over the turns)")
    inner_folds: int = Field(5, ge=2, description="shrinkage = \"cv\": folds of the inner cross-validation")
    bootstrap: int = Field(1000, ge=0, description="resamples of the tuning turns for the evidence in "
                           "weights.json; 0: no evidence")
    seed: int = Field(0, ge=0, description="seed of the folds, the inner CV and the bootstraps (and the random "
                      "baseline)")

    @field_validator("shrinkage")
    @classmethod
    def _non_negative(cls, value: float | str) -> float | str:
        if not isinstance(value, str) and value < 0:
            raise ValueError(f"shrinkage must be >= 0 or \"cv\", got {value}")
        return value

    def rule(self, **overrides: Any) -> SelectionRule:
        """The selection rule of these settings (``overrides``: a tuned system's own, e.g. ``shrinkage="cv"``)."""
        from apcir.fusion.selection import SelectionRule

        values = {name: getattr(self, name) for name in ("shrinkage", "select", "epsilon", "inner_folds",
                                                          "bootstrap", "seed")}
        return SelectionRule(**{**values, **overrides})


class FusionParams(BaseModel):
    """How lists are fused and scored, passed as one validated object through the fusion protocol: the
    per-list normalisation, the fused run's depth, the relevance threshold of the binary measures and the level
    of a judged turn the levels lack."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    norm: Norm = Field("minmax", description=f"per-list normalisation: {norm_help()}")
    depth: int = Field(1000, ge=1, description="fused run depth (the cut is evaluated too)")
    rel_threshold: int = Field(1, ge=1, description="lowest grade the binary measures count as relevant")
    missing_level: Literal["a", "b", "c"] | None = Field(
        None, description="the level of a judged turn the levels lack (None: such a turn is an error)")

    @classmethod
    def of(cls, **values: Any) -> FusionParams:
        """Validated, a bad value an :class:`ApcirError` naming the field (as the command options name them)."""
        from pydantic import ValidationError

        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ApcirError(f"{first['loc'][0]}: {str(first['msg']).removeprefix('Value error, ')}") from None


class WeightsSettings(TuningSettings):
    """Where the level weights come from: a file, tuning on another dataset, or cross-validation."""

    source: Literal["file", "tune", "cv"] = Field("cv", description="file | tune (on other topics) | cv (k-fold)")
    file: str | None = Field(None, description="source = file: a weights.json")
    tune_topics: str | None = Field(None, description="source = tune: topics to tune on")
    tune_qrels: str | None = Field(None, description="source = tune: their qrels")
    tune_method: Annotated[str, METHOD] | None = Field(None, description="source = tune: the tuning leg's own reformulator (e.g. "
                                    "file:PATH with the tuning topics' rewrites); default: [reformulator] method; "
                                    "formerly tune_llm")
    folds: int = Field(5, ge=2, description="source = cv: folds, by conversation")

    def search_settings(self) -> TuningSettings:
        """What the grid search and the choice of points read (step, objective, min_turns, the selection rule),
        without where the weights come from."""
        return TuningSettings.model_validate(self.model_dump(include=set(TuningSettings.model_fields)))

    @model_validator(mode="before")
    @classmethod
    def _tune_method_was_tune_llm(cls, data: Any) -> Any:
        from apcir.settings import renamed_key

        return renamed_key(data, "tune_llm", "tune_method", "[fusion.weights]")

    @model_validator(mode="after")
    def _only_what_the_source_uses(self) -> WeightsSettings:
        unused = {"cv": {"file", "tune_topics", "tune_qrels", "tune_method"},
                  "file": {"folds", "tune_topics", "tune_qrels", "tune_method"}, "tune": {"file", "folds"}}[self.source]
        from apcir.llm.settings import refuse_unused

        refuse_unused(self, unused, f"with source = {self.source!r}")
        return self


class FusionSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    norm: Norm = Field("minmax", description=f"per-list normalisation: {norm_help()}")
    depth: int = Field(1000, ge=1, description="fused run depth (the cut is evaluated too)")
    weights: WeightsSettings = Field(default_factory=WeightsSettings)
    baselines: bool | list[str] = Field(
        True, description="also fuse and evaluate the paper's baselines: true (all), false, or a list of system names"
    )
    rrf_k: int = Field(60, ge=0, description="k of reciprocal rank fusion")
    levels: Literal["reformulator", "annotators"] = Field(
        "reformulator", description="whose levels pick the weights: the reformulator's (the method), or "
        "annotators: the topics' PTKB provenance (an oracle for analysis: no statement = a, any = c; the tables "
        "label the systems as using annotations)")

    def params(self, rel_threshold: int, missing_level: str | None = "a") -> FusionParams:
        return FusionParams(norm=self.norm, depth=self.depth, rel_threshold=rel_threshold,
                            missing_level=missing_level)  # type: ignore[arg-type]

    @field_validator("baselines")
    @classmethod
    def _known_systems(cls, value: bool | list[str]) -> bool | list[str]:
        if isinstance(value, list):
            from apcir.fusion.systems import PRIMARY, SYSTEMS
            from apcir.registry import unknown_name

            unknown = [name for name in value if name not in SYSTEMS or name == PRIMARY]
            if unknown:
                raise ValueError(unknown_name("baseline", unknown[0], [n for n in SYSTEMS.names() if n != PRIMARY]))
        return value

    def baseline_names(self) -> list[str]:
        """The systems compared with APCIR, in the registry's order."""
        from apcir.fusion.systems import PRIMARY, SYSTEMS

        if self.baselines is True:
            return [name for name in SYSTEMS.names() if name != PRIMARY]
        if self.baselines is False:
            return []
        wanted = set(self.baselines)
        return [name for name in SYSTEMS.names() if name in wanted]
