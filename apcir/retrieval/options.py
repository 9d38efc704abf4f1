"""The built-in retrieval backends' own options (each :class:`~apcir.retrieval.registry.BackendSpec` names its model):
the keys of ``[retrieval]`` and the options of ``apcir index build`` and ``apcir retrieve`` that only that backend
reads. A key another backend declares is refused (one line) unless it has that backend's default.

Keys listed in a model's ``BUILD_KEYS`` shape the index itself: a build records them in the manifest
(``options``), an index built with other values is not up to date for them, and opening it takes the recorded
values (a different one given explicitly is refused, since the queries must be quantised as the passages were).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from apcir.options import Options

QUANTIZATION_SCALE = 100
"""The default scale of integer impacts: ``round(100 * w)``, as Anserini's SPLADE indexes use."""

PisaAlgorithm = Literal["maxscore", "block_max_wand", "block_max_maxscore", "wand", "ranked_or"]
"""PISA's rank-safe query algorithms: each returns the exact top k of the (quantised) scores. PISA's ``ranked_and``
and ``block_max_ranked_and`` are left out: they score only passages holding every query term."""


class BackendOptions(Options):
    """A backend's options; ``BUILD_KEYS`` are those that shape its index (recorded in the manifest)."""

    BUILD_KEYS: ClassVar[tuple[str, ...]] = ()

    def build_values(self) -> dict[str, object]:
        """The values of the keys that shape the index (what a manifest records)."""
        return {key: getattr(self, key) for key in self.BUILD_KEYS}

    def files(self) -> list[Path]:
        """Files the options name whose content decides the output (the ledger fingerprints them)."""
        return []

    @property
    def encoder_kind(self) -> str | None:
        """What encodes the queries, when the options decide it (None: the spec's ``encoder`` says)."""
        return None


class EmbeddedOptions(BackendOptions):
    """The embedded index's posting layout."""

    BUILD_KEYS: ClassVar[tuple[str, ...]] = ("postings",)

    postings: Literal["exact", "compact"] = Field(
        "exact", description="exact: float32 impacts, 6 bytes a posting searched, the exact top k; compact: 9-bit "
        "impacts per term and delta-coded offsets, about 2.2 bytes a posting (a collection larger than memory: "
        "ClueWeb22-B in under 64 GB), the top k of the quantised scores; set when the index is built and recorded in "
        "its manifest")


class DenseOptions(BackendOptions):
    """``dense`` and ``dense-faiss``: exact inner products over the bi-encoder's embeddings; no key of their own."""


class MilvusOptions(BackendOptions):
    """``milvus`` and ``milvus-dense``: the location is the index (``milvus:PATH.db``, ``milvus://HOST:PORT/NAME``);
    no key of their own."""


class BM25Options(BackendOptions):
    """BM25's parameters, applied when searching (Lucene keeps term frequencies and lengths, not scores)."""

    bm25_k1: float = Field(0.9, gt=0, description="BM25's k1 (term-frequency saturation)")
    bm25_b: float = Field(0.4, ge=0, le=1, description="BM25's b (length normalisation)")


class ImpactOptions(BackendOptions):
    """An index of integer impacts ``round(scale x w)``: queries are quantised the same way, and scores divided by
    ``scale^2`` back to the embedded index's scale."""

    BUILD_KEYS: ClassVar[tuple[str, ...]] = ("quantization_scale",)

    quantization_scale: int = Field(
        QUANTIZATION_SCALE, ge=1, le=10_000,
        description="integer impacts round(scale x weight) of passages and queries (weights that round to 0 are "
        "dropped); set when the index is built and recorded in its manifest")


class PisaOptions(ImpactOptions):
    query_algorithm: PisaAlgorithm = Field(
        "maxscore", description="PISA's query algorithm: maxscore, block_max_wand, block_max_maxscore, wand or "
        "ranked_or (exhaustive); each is rank-safe (the exact top k of the quantised scores): they differ in speed "
        "only")


class PyTerrierOptions(BackendOptions):
    """Any PyTerrier retriever as the retriever of the three lists."""

    retriever: str | None = Field(
        None, validate_default=True, description="module:function (or FILE.py:function) returning the PyTerrier transformer, called once "
        "with the index folder")
    query_form: Literal["text", "toks"] = Field(
        "text", description="what the retriever is given: text (the query column) or toks (query_toks, "
        "{term: weight} from the SPLADE encoder)")

    @field_validator("retriever")
    @classmethod
    def _reference(cls, value: str | None) -> str | None:
        if value is None:
            raise ValueError("the pyterrier backend needs a retriever: module:function or FILE.py:function, a "
                             "function returning a PyTerrier transformer (it is called with the index folder)")
        module, function = value.rsplit(":", 1) if ":" in value else ("", value)
        if not module.strip() or not function.strip() or not function.isidentifier():
            raise ValueError(f"expected module:function or FILE.py:function (a function returning a PyTerrier "
                             f"transformer), not {value!r}")
        return value

    def files(self) -> list[Path]:
        if self.retriever is None:
            return []
        module = self.retriever.rsplit(":", 1)[0]
        return [Path(module).expanduser()] if module.endswith(".py") else []

    @property
    def encoder_kind(self) -> str | None:
        return "splade" if self.query_form == "toks" else None
