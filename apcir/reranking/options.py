"""The built-in re-rankers' own options (each :class:`~apcir.reranking.registry.RerankerSpec` names its model):
the keys of ``[rerank]`` and the options of ``apcir rerank`` that only that re-ranker reads."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from apcir.llm.settings import LLMSettings
from apcir.options import Options
from apcir.retrieval.precision import DTYPE_HELP, Dtype

WindowMode = Literal["rankgpt", "cover"]
RANKGPT_WINDOWS: WindowMode = "rankgpt"
"""RankGPT's own loop: floor((depth - window) / step) + 1 windows."""


class PointwiseOptions(Options):
    """A local model scoring (query, passage) pairs."""

    batch_size: int = Field(16, ge=1, description="(query, passage) pairs per forward pass")
    device: str | None = Field(None, description="cpu, cuda, cuda:1, ... (default: the GPU when present)")
    dtype: Dtype = Field("auto", description=f"the model's precision: {DTYPE_HELP}")
    max_length: int = Field(512, ge=8, description="input tokens; longer inputs are cut")


class MonoT5Options(PointwiseOptions):
    true_token: str = Field("true", description="the answer word whose probability is the score")
    false_token: str = Field("false", description="the other answer word (mT5 models: yes / no)")

    @field_validator("false_token")
    @classmethod
    def _two_answer_words(cls, value: str, info: ValidationInfo) -> str:
        true_token = info.data.get("true_token")
        if isinstance(true_token, str) and true_token.strip() == value.strip():
            raise ValueError(f"the same word as true_token ({true_token!r}): every monoT5 score would be equal; give "
                             "two different words (true / false; mT5: yes / no)")
        return value


class RankGPTOptions(Options):
    window: int = Field(20, ge=2, description="passages per request")
    step: int = Field(10, ge=1, description="how far the window moves up each time")
    windows: WindowMode = Field(
        "rankgpt", description="RankGPT's loop (floor((depth-window)/step)+1 windows) or 'cover' (rank_llm's: one "
        "more window clamped to the top when step does not divide depth-window)")
    max_words: int = Field(300, ge=1, description="words of each passage sent (RankGPT's 300)")
    llm: LLMSettings = Field(default_factory=LLMSettings, description="server, cache and client settings")

    @model_validator(mode="after")
    def _window_covers_step(self) -> RankGPTOptions:
        if self.step > self.window:
            raise ValueError(f"step {self.step} is larger than window {self.window}: passages between windows "
                             "would never be ranked")
        return self
