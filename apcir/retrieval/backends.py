"""One interface over every index: ``open_index(dir).search(queries, k) -> Run``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from apcir.errors import ApcirError
from apcir.models import Run
from apcir.retrieval.encoder import QueryInput, SpladeEncoder, canonical_model_name
from apcir.retrieval.manifest import MANIFEST, SPLADE_BACKENDS, IndexManifest, read_manifest


class Backend(Protocol):
    """A searchable index. ``queries`` maps turn ids to a text or a (query, response-or-None) pair."""

    @property
    def manifest(self) -> IndexManifest | None: ...

    def search(self, queries: Mapping[str, QueryInput], k: int = 1000, *, progress: bool = True) -> Run: ...


def open_index(
    index_dir: str | Path,
    encoder: SpladeEncoder | str | None = None,
    *,
    device: str | None = None,
    threads: int = 2,
    backend: str | None = None,
) -> Backend:
    """Open the index at ``index_dir`` with the backend its manifest names.

    SPLADE indexes load the model recorded in the manifest, with the manifest's
    length budgets, unless ``encoder`` (a loaded :class:`SpladeEncoder` or a
    model name) is given; an encoder other than the index's model is refused.
    A Lucene index without an apcir manifest (e.g. one the iKAT organisers
    distribute) opens as BM25, or, with ``backend="lucene-splade"`` and an
    ``encoder``, as an impact index queried with that encoder (apcir cannot
    check that the index was built with the same model).
    """
    from apcir.retrieval.embedded import EmbeddedIndex
    from apcir.retrieval.lucene import LuceneBM25, LuceneSplade

    folder = Path(index_dir).expanduser()
    if not folder.is_dir():
        raise ApcirError("index directory not found", path=folder)
    if not (folder / MANIFEST).exists() and any(folder.glob("segments_*")):
        if backend == "lucene-splade":
            if encoder is None:
                raise ApcirError(
                    "a Lucene impact index without an apcir manifest needs the query encoder it was built "
                    "with (--encoder, e.g. naver/splade-v3)", path=folder,
                )
            query_encoder = encoder if isinstance(encoder, SpladeEncoder) else SpladeEncoder(encoder, device=device)
            return LuceneSplade(folder, None, query_encoder, threads=threads)
        return LuceneBM25(folder, None, threads=threads)
    manifest = read_manifest(folder)
    if manifest.backend == "lucene-bm25":
        if isinstance(encoder, SpladeEncoder) or encoder:
            raise ApcirError(f"{folder} is a BM25 index; it takes no query encoder", path=folder)
        return LuceneBM25(folder, manifest, threads=threads)
    assert manifest.backend in SPLADE_BACKENDS and manifest.model
    query_encoder = _matching_encoder(folder, manifest, encoder, device)
    if manifest.backend == "embedded":
        return EmbeddedIndex(folder, manifest, query_encoder)
    return LuceneSplade(folder, manifest, query_encoder, threads=threads)


def _matching_encoder(
    folder: Path, manifest: IndexManifest, encoder: SpladeEncoder | str | None, device: str | None
) -> SpladeEncoder:
    assert manifest.model is not None
    if encoder is None:
        return SpladeEncoder(
            manifest.model,
            device=device,
            query_max_length=manifest.query_max_length or 64,
            response_max_length=manifest.response_max_length or 256,
            doc_max_length=manifest.doc_max_length or 256,
        )
    name = encoder.name if isinstance(encoder, SpladeEncoder) else canonical_model_name(encoder)
    if name != manifest.model:
        raise ApcirError(
            f"index was built with SPLADE model {manifest.model} but the query encoder is {name}; "
            "query with the index's model or rebuild the index with this one",
            path=folder,
        )
    if isinstance(encoder, SpladeEncoder):
        return encoder
    return _matching_encoder(folder, manifest, None, device)
