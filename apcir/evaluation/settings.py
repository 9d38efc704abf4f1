"""The evaluation stage's settings: the ``[evaluation]`` config section.

Its nugget matcher (``nugget_matcher``) carries its own options as ``[rerank]``'s re-ranker does
(:class:`apcir.options.EntrySettings`), each spelt with the section's ``nugget_`` prefix: the thresholded
matchers' ``tau`` is ``nugget_tau``, the embedding matcher's ``encoder`` ``nugget_encoder``, a plugin matcher's
``min_letters`` ``nugget_min_letters``; another matcher's key is refused in one line naming the matchers that read it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, field_validator, model_validator

from apcir.evaluation.nuggets.registry import DEFAULT_MATCHER, MATCHERS
from apcir.evaluation.nuggets.settings import MatcherSettings
from apcir.llm.settings import LLM_FIELDS, LLMSettings, refuse_unused
from apcir.metrics.measures import parse_measures
from apcir.metrics.significance import CorrectionName, SignificanceSettings, TestName
from apcir.options import EntrySettings
from apcir.registry import Registry


class JudgeSettings(LLMSettings):
    """The LLM judge of the responses (``[evaluation.judge]``); off unless ``model`` is set."""

    model: str | None = Field(None, description="the judge model (gpt-4o, ...); none: no judge")

    @model_validator(mode="after")
    def _only_with_a_model(self) -> JudgeSettings:
        if self.model is None:
            refuse_unused(self, LLM_FIELDS, "without a judge model (set model to judge)")
        return self


class EvaluationSettings(EntrySettings):
    """The ``[evaluation]`` section; the keys of its nugget matcher's own options are ``nugget_`` and the key
    (``nugget_tau``), kept in ``options`` (:class:`apcir.evaluation.nuggets.settings.MatcherSettings` for them:
    :meth:`matcher_settings`)."""

    ENTRY_KEY: ClassVar[str] = "nugget_matcher"
    ENTRY_REGISTRY: ClassVar[Registry[Any]] = MATCHERS
    ENTRY_PREFIX: ClassVar[str] = "nugget_"

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
    nugget_matcher: str = Field(DEFAULT_MATCHER, description="nugget matcher of a run: lexical (the default: it "
                                "agreed best with people), embedding, or a plugin's that runs offline (the llm and "
                                "learned matchers: apcir evaluate-responses --matcher); its own keys are spelt "
                                "nugget_KEY (nugget_tau)")

    @classmethod
    def usable(cls, entry: Any) -> bool:
        """A run's matchers: those that run offline with nothing to train (``in_runs``); their keys are the section's."""
        return bool(getattr(entry, "in_runs", False))

    @field_validator("nugget_matcher")
    @classmethod
    def _offline_matcher(cls, value: str) -> str:
        MATCHERS.validate(value)  # an unknown name: the closest matchers
        if not MATCHERS.get(value).in_runs:
            usable = " or ".join(spec.name for spec in MATCHERS if spec.in_runs)
            raise ValueError(f"nugget_matcher {value!r}: a run uses {usable} (the {value} matcher runs from "
                             f"apcir evaluate-responses --matcher {value})")
        return value

    def matcher_settings(self) -> MatcherSettings:
        """The nugget matcher's settings: the chosen matcher and its own keys."""
        return MatcherSettings(matcher=self.nugget_matcher, options=self.options)

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
