"""The response stage's settings: the ``[respond]`` config section and the options of ``apcir respond``."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from apcir.llm.settings import LLM_FIELDS, LLMSettings, refuse_unused

DEFAULT_MAX_WORDS = 250  # the iKAT guidelines' limit (2023 l.96, 2024 l.122; the 2025 validator's RESPONSE_LIMIT)


class RespondSettings(LLMSettings):
    """Who writes the responses (``responder``) and from what; for a model, how it is asked."""

    responder: str = Field(
        "extractive",
        description="extractive (offline baseline: cited sentences of the top passages) or a model name (gpt-4o, ...)",
    )
    top_k: int = Field(5, ge=1, le=20, description="top passages of the final run given to the responder, [1]..[k]")
    max_words: int = Field(
        DEFAULT_MAX_WORDS, ge=10, le=1000, description="word budget of a response (whitespace words, markers included)"
    )
    max_sentences: int = Field(5, ge=1, le=50, description="extractive only: most sentences taken")

    @field_validator("responder")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("give 'extractive' or a model name")
        return value.strip()

    @model_validator(mode="after")
    def _only_what_is_used(self) -> RespondSettings:
        from apcir.responses.registry import responder_for

        if responder_for(self.responder).offline:
            refuse_unused(self, LLM_FIELDS, "by the extractive responder (offline, no model)")
        else:
            refuse_unused(self, {"max_sentences"}, f"by the LLM responder {self.responder!r} (extractive only)")
        return self

    def llm_settings(self) -> LLMSettings:
        """The client part of these settings (server, retries, cache, generation parameters)."""
        return LLMSettings.model_validate(self.model_dump(include=set(LLMSettings.model_fields), exclude_unset=True))
