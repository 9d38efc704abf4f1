"""The re-ranking stage's settings: the ``[rerank]`` config section and the options of ``apcir rerank``.

A config may hold one ``[rerank]`` table or several (``[[rerank]]``, e.g. monoT5
and RankGPT over the same retrieval, the retriever x re-ranker grid of the
paper's Fig. 5); each re-ranks the systems it names.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from apcir.contract.reformulations import LIST_NAMES
from apcir.llm.settings import LLMSettings, refuse_unused
from apcir.reranking.registry import RERANKERS
from apcir.retrieval.precision import DTYPE_HELP, Dtype

WindowMode = Literal["rankgpt", "cover"]
RANKGPT_WINDOWS: WindowMode = "rankgpt"
"""RankGPT's own loop: floor((depth - window) / step) + 1 windows."""


class RerankSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reranker: str = Field("monot5", description=f"one of: {RERANKERS.help()}")
    model: str | None = Field(
        None, description="monot5 / cross-encoder: a hub id or a local directory; rankgpt: the LLM's name "
        "(default: castorini/monot5-base-msmarco-10k, cross-encoder/ms-marco-MiniLM-L-6-v2, gpt-4o-mini)")
    name: str | None = Field(
        None, description="name in system names and tables, e.g. apcir+NAME (default: the re-ranker's name)")
    depth: int = Field(100, ge=1, description="passages re-ranked per turn (the paper: 100); the rest keep their order")
    field: str = Field(
        "rewrite", description=f"the query a re-ranker reads: {', '.join(LIST_NAMES)} (of the reformulations)")
    systems: list[str] | Literal["all"] = Field(
        default_factory=lambda: ["apcir"], description="apcir run: systems to re-rank, or 'all' (every system built)")
    submit: bool = Field(False, description="apcir run: re-rank fused.run too and export the re-ranked run")
    batch_size: int = Field(16, ge=1, description="monot5 / cross-encoder: (query, passage) pairs per forward pass")
    device: str | None = Field(None, description="cpu, cuda, cuda:1, ... (default: the GPU when present)")
    dtype: Dtype = Field("auto", description=f"monot5 / cross-encoder: the model's precision: {DTYPE_HELP}")
    max_length: int = Field(512, ge=8, description="monot5 / cross-encoder: input tokens; longer inputs are cut")
    true_token: str = Field("true", description="monot5: the answer word whose probability is the score")
    false_token: str = Field("false", description="monot5: the other answer word (mT5 models: yes / no)")
    window: int = Field(20, ge=2, description="rankgpt: passages per request")
    step: int = Field(10, ge=1, description="rankgpt: how far the window moves up each time")
    windows: WindowMode = Field(
        "rankgpt", description="rankgpt: RankGPT's loop (floor((depth-window)/step)+1 windows) or 'cover' "
        "(rank_llm's: one more window clamped to the top when step does not divide depth-window)")
    max_words: int = Field(300, ge=1, description="rankgpt: words of each passage sent (RankGPT's 300)")
    llm: LLMSettings = Field(default_factory=LLMSettings, description="rankgpt: server, cache and client settings")

    @field_validator("reranker")
    @classmethod
    def _registered(cls, value: str) -> str:
        return RERANKERS.validate(value)

    @field_validator("field")
    @classmethod
    def _known_field(cls, value: str) -> str:
        if value not in LIST_NAMES:
            from apcir.registry import unknown_name

            raise ValueError(unknown_name("field", value, LIST_NAMES))
        return value

    @field_validator("name")
    @classmethod
    def _one_word(cls, value: str | None) -> str | None:
        if value is not None and (not value or any(c.isspace() or c in "/\\+" for c in value)):
            raise ValueError("must be one word without slashes or '+' (it names files and systems)")
        return value

    @field_validator("systems")
    @classmethod
    def _known_systems(cls, value: list[str] | str) -> list[str] | str:
        if isinstance(value, list):
            from apcir.fusion.systems import SYSTEMS

            if not value:
                raise ValueError("no system to re-rank: name at least one (e.g. ['apcir']) or 'all'")
            unknown = [n for n in value if n not in SYSTEMS]
            if unknown:
                from apcir.registry import unknown_name

                raise ValueError(unknown_name("system", unknown[0], SYSTEMS.names(), hint=", or 'all'"))
        return value

    @field_validator("false_token")
    @classmethod
    def _two_answer_words(cls, value: str, info: ValidationInfo) -> str:
        true_token = info.data.get("true_token")
        if isinstance(true_token, str) and true_token.strip() == value.strip():
            raise ValueError(f"the same word as true_token ({true_token!r}): every monoT5 score would be equal; give "
                             "two different words (true / false; mT5: yes / no)")
        return value

    @model_validator(mode="after")
    def _only_what_the_reranker_uses(self) -> RerankSettings:
        own = RERANKERS.get(self.reranker).settings
        every = frozenset().union(*(spec.settings for spec in RERANKERS))
        refuse_unused(self, every - own, f"by the {self.reranker} re-ranker")
        return self

    @model_validator(mode="after")
    def _window_covers_step(self) -> RerankSettings:
        if self.step > self.window:
            raise ValueError(f"step {self.step} is larger than window {self.window}: passages between windows "
                             "would never be ranked")
        return self

    @property
    def model_name(self) -> str:
        """The model used: ``model``, else the re-ranker's default."""
        return self.model or RERANKERS.get(self.reranker).default_model

    @property
    def label(self) -> str:
        """The name in system names (``apcir+<label>``) and file names."""
        return self.name or self.reranker
