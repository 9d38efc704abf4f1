"""The response stage's settings: the ``[respond]`` config section and the options of ``apcir respond``.

The keys every responder reads are fields here (with the client's, :class:`~apcir.llm.settings.LLMSettings`, which
only a responder that asks a model reads); the chosen responder's own keys (its spec's ``options`` model: the
extractive one's ``max_sentences``, a model's ``best_of``, ``pathways:MODEL``'s ``pathways``, a plugin's) are given
beside them and kept in ``options`` (:class:`apcir.options.EntrySettings`).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field, model_validator

from apcir.llm.settings import LLM_FIELDS, LLMSettings, refuse_unused
from apcir.options import EntrySettings
from apcir.registry import InRegistry, Registry
from apcir.responses.registry import RESPONDERS

DEFAULT_MAX_WORDS = 250  # the iKAT guidelines' limit (2023 l.96, 2024 l.122; the 2025 validator's RESPONSE_LIMIT)


class RespondSettings(EntrySettings, LLMSettings):
    """Who writes the responses (``responder``) and from what; for a model, how it is asked."""

    ENTRY_KEY: ClassVar[str] = "responder"
    ENTRY_REGISTRY: ClassVar[Registry[Any]] = RESPONDERS

    responder: Annotated[str, InRegistry(RESPONDERS, open_ended=True, blank="give 'extractive' or a model name")] = \
        Field("extractive", description="extractive (offline baseline: cited sentences of the top passages), "
              "pathways:MODEL, or a model name (gpt-4o, ...)")
    top_k: int = Field(5, ge=1, le=20, description="top passages of the final run given to the responder, [1]..[k]")
    max_words: int = Field(
        DEFAULT_MAX_WORDS, ge=10, le=1000, description="word budget of a response (whitespace words, markers included)"
    )

    @model_validator(mode="after")
    def _offline_asks_no_model(self) -> RespondSettings:
        spec = self.entry()
        if spec.offline:
            refuse_unused(self, LLM_FIELDS, f"by the {spec.name} responder (offline, no model)")
        return self

    @property
    def model_name(self) -> str:
        """The model asked: the responder's name for a model's name, ``MODEL`` of ``pathways:MODEL``; "" for a
        responder that asks none (:meth:`~apcir.registry.Registry.resolve`)."""
        return RESPONDERS.resolve(self.responder)[1]

    def llm_settings(self) -> LLMSettings:
        """The client part of these settings (server, retries, cache, generation parameters)."""
        return LLMSettings.model_validate(self.model_dump(include=set(LLMSettings.model_fields), exclude_unset=True))
