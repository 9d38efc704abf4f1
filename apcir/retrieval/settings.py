"""The retrieval stage's settings: the ``[retrieval]`` config section.

The keys every backend shares are fields here; the chosen backend's own keys (its spec's options model:
``pisa``'s ``query_algorithm``, ``pyterrier``'s ``retriever``, ``lucene-bm25``'s ``bm25_k1``) are given beside them
and kept in ``options`` (:class:`apcir.options.EntrySettings`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator

from apcir.options import EntrySettings
from apcir.registry import InRegistry, Registry
from apcir.retrieval.options import BackendOptions
from apcir.retrieval.precision import DTYPE_HELP, Dtype
from apcir.retrieval.registry import BACKENDS, EncoderKind


class RetrievalSettings(EntrySettings):
    ENTRY_KEY: ClassVar[str] = "backend"
    ENTRY_REGISTRY: ClassVar[Registry[Any]] = BACKENDS

    backend: Annotated[str, InRegistry(BACKENDS)] = Field("embedded", description=f"one of: {BACKENDS.help()}")
    index: str = Field(
        "indexes/ikat23-provenance-splade-tiny",
        description="index directory; built from `collection` when missing (backends with an encoder); pyterrier: "
        "the retriever's own index folder, given to the retriever function",
    )
    collection: str | None = Field("ikat23-provenance", description="collection to build the index from if missing")
    encoder: str = Field("splade-tiny", description="the model that encodes passages and queries (not used by BM25)")
    k: int = Field(1000, ge=1, description="passages retrieved per list")
    batch_size: int = Field(
        32, ge=1, description="texts per forward pass of the query encoder; a SPLADE batch holds batch x 64 x "
        "vocabulary logits at a time (32 x 64 x 30,522 x 4 B = 250 MB in float32): lower it on a small machine",
    )
    dtype: Dtype = Field(
        "auto", description=f"precision of the encoder (queries, passages when the index is built, PTKB "
        f"statements): {DTYPE_HELP}; the index records the one its passages were encoded in",
    )
    passages: str | None = Field(
        None, description="collection JSONL with passage texts for the submission (default: `collection`)"
    )

    @field_validator("encoder")
    @classmethod
    def _model(cls, value: str) -> str:
        return check_encoder(value)

    @property
    def encoder_kind(self) -> EncoderKind | None:
        """What encodes the queries (and, for an index apcir builds, the passages); None: the backend needs none."""
        return BACKENDS.get(self.backend).encoder_kind(self.options)

    @property
    def uses_encoder(self) -> bool:
        return self.encoder_kind is not None

    @property
    def option_files(self) -> list[Path]:
        """Files the backend's options name (a retriever's Python file): their content stands for them."""
        return self.options.files() if isinstance(self.options, BackendOptions) else []

    @property
    def passages_source(self) -> str | None:
        """Where passage texts come from: ``passages``, else ``collection``."""
        return self.passages or self.collection


def check_encoder(model: str, others: tuple[str, ...] = ()) -> str:
    """``model`` unless it nearly spells the name of a model apcir packages (``splade-tny``) or of ``others``
    (``tfidf``): a hub id (``org/name``) or an existing directory is taken as it is; a ``ValueError`` otherwise
    (for validators)."""
    from pathlib import Path

    from apcir.registry import near_miss
    from apcir.retrieval.encoder import MINILM, SPLADE_TINY

    if "/" in model or "\\" in model or Path(model).expanduser().exists():
        return model
    problem = near_miss("encoder", model, [SPLADE_TINY, MINILM, *others], other="a hub id or a model directory")
    if problem is not None:
        raise ValueError(problem)
    return model
