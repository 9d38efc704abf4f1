"""The response stage's settings: the ``[respond]`` config section and the options of ``apcir respond``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from apcir.llm.settings import LLM_FIELDS, LLMSettings, refuse_unused
from apcir.registry import InRegistry
from apcir.responses.registry import RESPONDERS, responder_usages

DEFAULT_MAX_WORDS = 250  # the iKAT guidelines' limit (2023 l.96, 2024 l.122; the 2025 validator's RESPONSE_LIMIT)


class RespondSettings(LLMSettings):
    """Who writes the responses (``responder``) and from what; for a model, how it is asked."""

    responder: Annotated[str, InRegistry(RESPONDERS, open_ended=True, usages=responder_usages,
                                         blank="give 'extractive' or a model name")] = Field(
        "extractive",
        description="extractive (offline baseline: cited sentences of the top passages) or a model name (gpt-4o, ...)",
    )
    top_k: int = Field(5, ge=1, le=20, description="top passages of the final run given to the responder, [1]..[k]")
    max_words: int = Field(
        DEFAULT_MAX_WORDS, ge=10, le=1000, description="word budget of a response (whitespace words, markers included)"
    )
    max_sentences: int = Field(5, ge=1, le=50, description="extractive only: most sentences taken")
    personalisation: Literal["in-context", "none", "cot"] = Field(
        "in-context", description="a model's use of the profile: in-context, none (withheld: the no-personalisation "
        "baseline) or cot (in context, reasoning over it first in the same request)")
    best_of: int = Field(1, ge=1, le=64, description="a model only: N samples per turn (seeded, at temperature "
                                                     "sample_temperature), aggregated as pathways:MODEL aggregates")
    sample_temperature: float = Field(0.7, ge=0, description="best_of > 1: the samples' temperature")
    pathways: int = Field(4, ge=1, le=64, description="pathways:MODEL only: N, the reasoning pathways per turn")
    max_actions: int = Field(8, ge=1, le=32, description="pathways:MODEL only: T, the most steps of a pathway")
    diversify: Literal["plan-temperature", "profile-subsets"] = Field(
        "plan-temperature", description="pathways:MODEL only: plan sampled at plan_temperature (other steps at 0.1), "
        "or each pathway given a random subset of subset_ratio of the profile")
    aggregate: Literal["mixture", "best"] = Field(
        "mixture", description="pathways:MODEL only: merge the pathways' responses in one request, or pick one")
    plan_temperature: float = Field(0.9, ge=0, description="pathways:MODEL only: the plan's sampling temperature")
    subset_ratio: float = Field(0.5, gt=0, le=1, description="pathways:MODEL only: share of the profile a pathway "
                                                             "sees with diversify = profile-subsets")

    @model_validator(mode="after")
    def _only_what_is_used(self) -> RespondSettings:
        from apcir.responses.registry import responder_for, responder_settings

        spec = responder_for(self.responder)
        others = responder_settings() - spec.settings
        if spec.offline:
            refuse_unused(self, LLM_FIELDS | others, f"by the {spec.name} responder (offline, no model)")
        else:
            refuse_unused(self, others, f"by the responder {self.responder!r} ({spec.usage} reads "
                                        f"{', '.join(sorted(spec.settings)) or 'none of them'})")
        if "best_of" in spec.settings and self.best_of == 1:
            refuse_unused(self, {"aggregate", "sample_temperature"}, "with best_of = 1 (one sample, nothing to "
                                                                     "aggregate)")
        return self

    def llm_settings(self) -> LLMSettings:
        """The client part of these settings (server, retries, cache, generation parameters)."""
        return LLMSettings.model_validate(self.model_dump(include=set(LLMSettings.model_fields), exclude_unset=True))
