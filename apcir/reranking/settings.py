"""The re-ranking stage's settings: the ``[rerank]`` config section and the options of ``apcir rerank``.

A config may hold one ``[rerank]`` table or several (``[[rerank]]``, e.g. monoT5
and RankGPT over the same retrieval, the retriever x re-ranker grid of the
paper's Fig. 5); each re-ranks the systems it names.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from apcir.contract.reformulations import LIST_NAMES
from apcir.options import EntrySettings
from apcir.registry import InRegistry, Registry
from apcir.reranking.options import RANKGPT_WINDOWS, WindowMode
from apcir.reranking.registry import RERANKERS

__all__ = ["RANKGPT_WINDOWS", "RerankSettings", "WindowMode"]


class RerankSettings(EntrySettings):
    """The keys every re-ranker shares; the chosen re-ranker's own keys (its spec's ``options`` model: monoT5's
    ``true_token``, RankGPT's ``window``, a plugin's) are given beside them and kept in ``options``."""

    ENTRY_KEY: ClassVar[str] = "reranker"
    ENTRY_REGISTRY: ClassVar[Registry[Any]] = RERANKERS

    reranker: Annotated[str, InRegistry(RERANKERS)] = Field("monot5", description=f"one of: {RERANKERS.help()}")
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

    @property
    def model_name(self) -> str:
        """The model used: ``model``, else the re-ranker's default."""
        return self.model or RERANKERS.get(self.reranker).default_model

    @property
    def label(self) -> str:
        """The name in system names (``apcir+<label>``) and file names."""
        return self.name or self.reranker
