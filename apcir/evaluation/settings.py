"""The evaluation stage's settings: the ``[evaluation]`` config section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from apcir.llm.settings import LLM_FIELDS, LLMSettings, refuse_unused
from apcir.metrics.measures import parse_measures
from apcir.metrics.significance import CorrectionName, SignificanceSettings, TestName


class JudgeSettings(LLMSettings):
    """The LLM judge of the responses (``[evaluation.judge]``); off unless ``model`` is set."""

    model: str | None = Field(None, description="the judge model (gpt-4o, ...); none: no judge")

    @model_validator(mode="after")
    def _only_with_a_model(self) -> JudgeSettings:
        if self.model is None:
            refuse_unused(self, LLM_FIELDS, "without a judge model (set model to judge)")
        return self


class EvaluationSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    qrels: str | None = Field(None, description="qrels name or file; no evaluation without it")
    measures: list[str] = Field(default_factory=lambda: ["paper"], description="set names (paper, ikat) or measures")
    rel_threshold: int = Field(1, ge=1, description="lowest grade binary measures count as relevant (trec_eval -l)")
    complete: bool = Field(False, description="count judged turns missing from a run as 0 (trec_eval -c)")
    baseline: str = Field("no-personalisation", description="system the significance tests compare against")
    test: TestName = Field("t-test", description="significance test: t-test (the paper's), randomisation, bootstrap")
    correction: CorrectionName = Field("bonferroni", description="over the systems of the report: none, bonferroni "
                                       "(the paper's), holm")
    alpha: float = Field(0.05, gt=0, lt=1, description="significance level")
    ptkb_qrels: str | None = Field(
        None, description="PTKB statement qrels (ikat23-test-ptkb): evaluate the PTKB ranking and its baselines"
    )
    ptkb_measures: list[str] = Field(default_factory=lambda: ["ptkb"], description="measures of the PTKB ranking")
    judge: JudgeSettings = Field(default_factory=JudgeSettings, description="LLM judge of the responses (off)")
    nuggets: str | None = Field(None, description="gold nuggets (ikat25-test, or a file): the responses' nugget recall")
    nugget_matcher: str = Field("lexical", description="nugget matcher of a run: lexical (the default: it agreed "
                                                       "best with people) or embedding (the llm and learned matchers: "
                                                       "apcir evaluate-responses --matcher)")
    nugget_tau: float | None = Field(None, ge=0, description="the matcher's threshold (default: the matcher's)")

    @field_validator("nugget_matcher")
    @classmethod
    def _offline_matcher(cls, value: str) -> str:
        from apcir.evaluation.nuggets.registry import MATCHERS

        MATCHERS.validate(value)  # an unknown name: the closest matchers
        if not MATCHERS.get(value).in_runs:
            usable = " or ".join(spec.name for spec in MATCHERS if spec.in_runs)
            raise ValueError(f"nugget_matcher {value!r}: a run uses {usable} (the {value} matcher runs from "
                             f"apcir evaluate-responses --matcher {value})")
        return value

    def significance(self) -> SignificanceSettings:
        return SignificanceSettings(test=self.test, correction=self.correction, alpha=self.alpha)

    @field_validator("measures", "ptkb_measures")
    @classmethod
    def _known_measures(cls, value: list[str]) -> list[str]:
        try:
            parse_measures(value)
        except Exception as exc:  # an ApcirError; pydantic wants a ValueError
            raise ValueError(str(exc)) from None
        return value
