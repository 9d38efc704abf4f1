"""The response stage's settings: the ``[respond]`` config section and the options of ``apcir respond``.

The keys every responder reads are fields here (with the client's, which only a responder that asks a model reads:
:class:`~apcir.llm.batch.ProducerSettings`); the chosen responder's own keys (its spec's ``options`` model: the
extractive one's ``max_sentences``, a model's ``best_of``, ``pathways:MODEL``'s ``pathways``, a plugin's) are given
beside them and kept in ``options`` (:class:`apcir.options.EntrySettings`).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field

from apcir.llm.batch import ProducerSettings
from apcir.registry import InRegistry, Registry
from apcir.responses.registry import RESPONDERS

DEFAULT_MAX_WORDS = 250  # the iKAT guidelines' limit (2023 l.96, 2024 l.122; the 2025 validator's RESPONSE_LIMIT)


class RespondSettings(ProducerSettings):
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

    @property
    def model_name(self) -> str:
        """The model asked: the responder's name for a model's name, ``MODEL`` of ``pathways:MODEL``; "" for a
        responder that asks none."""
        return self.argument
