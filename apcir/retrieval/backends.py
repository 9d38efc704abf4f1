"""One interface over every index: ``open_index(dir).search(queries, k) -> Run``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from apcir.contract.records import Run
from apcir.contract.reformulations import QueryInput
from apcir.errors import ApcirError
from apcir.retrieval.encoder import SpladeEncoder, TextEncoder, canonical_model_name, make_encoder
from apcir.retrieval.manifest import IndexManifest, is_foreign_lucene, read_manifest
from apcir.retrieval.registry import BACKENDS


class Backend(Protocol):
    """A searchable index. ``queries`` maps turn ids to a text or a (query, response-or-None) pair."""

    @property
    def manifest(self) -> IndexManifest | None: ...

    def search(self, queries: Mapping[str, QueryInput], k: int = 1000, *, progress: bool = True) -> Run: ...


class VectorBackend(Backend, Protocol):
    """A backend that searches with query vectors of its encoder (every backend with an encoder).

    ``search_vectors`` takes the rows of ``encoder.encode_queries(...)`` (or any
    combination of them, e.g. query-representation fusion) for ``turn_ids``.
    """

    @property
    def encoder(self) -> TextEncoder: ...

    def search_vectors(self, turn_ids: Sequence[str], vectors: Any, k: int = 1000, *,
                       progress: bool = True) -> Run: ...


def open_index(
    index_dir: str | Path,
    encoder: TextEncoder | str | None = None,
    *,
    device: str | None = None,
    threads: int = 2,
    backend: str | None = None,
) -> Backend:
    """Open the index at ``index_dir`` with the backend its manifest names.

    Indexes built from a model's vectors load the model recorded in the
    manifest, with the manifest's length budgets, unless ``encoder`` (a loaded
    :class:`~apcir.retrieval.encoder.TextEncoder` or a model name) is given; an encoder other than the
    index's model is refused. A Lucene index without an apcir manifest (e.g. one
    the iKAT organisers distribute) opens as BM25, or, with
    ``backend="lucene-splade"`` and an ``encoder``, as an impact index queried
    with that encoder (apcir cannot check that the index was built with the same model).
    """
    folder = Path(index_dir).expanduser()
    if not folder.is_dir():
        raise ApcirError("index directory not found", path=folder)
    if is_foreign_lucene(folder):
        spec = BACKENDS.get(backend or "lucene-bm25")
        if not spec.name.startswith("lucene-"):
            raise ApcirError(f"a bare Lucene index opens as lucene-bm25 or lucene-splade, not {spec.name}", path=folder)
        query_encoder = None
        if spec.encoder is not None:
            if encoder is None:
                raise ApcirError(
                    "a Lucene impact index without an apcir manifest needs the query encoder it was built "
                    "with (--encoder, e.g. naver/splade-v3)", path=folder,
                )
            query_encoder = encoder if isinstance(encoder, TextEncoder) else SpladeEncoder(encoder, device=device)
        return spec.call("open", folder, None, query_encoder, threads=threads)  # type: ignore[no-any-return]
    manifest = read_manifest(folder)
    if manifest.backend not in BACKENDS:
        raise ApcirError(f"index backend {manifest.backend!r} is unknown to this apcir "
                         f"(it knows {', '.join(BACKENDS.names())})", path=folder)
    spec = BACKENDS.get(manifest.backend)
    if backend is not None and backend != spec.name:
        raise ApcirError(f"this is a {spec.name} index, not {backend}", path=folder)
    if spec.encoder is None:
        if isinstance(encoder, TextEncoder) or encoder:
            raise ApcirError(f"{folder} is a {spec.name} index; it takes no query encoder", path=folder)
        return spec.call("open", folder, manifest, None, threads=threads)  # type: ignore[no-any-return]
    return spec.call(  # type: ignore[no-any-return]
        "open", folder, manifest, _matching_encoder(folder, manifest, spec.encoder, encoder, device), threads=threads
    )


def _matching_encoder(
    folder: Path, manifest: IndexManifest, kind: str, encoder: TextEncoder | str | None, device: str | None
) -> TextEncoder:
    if manifest.model is None:
        raise ApcirError("the index manifest names no model", path=folder)
    if isinstance(encoder, TextEncoder) and encoder.kind != kind:
        raise ApcirError(f"this {manifest.backend} index needs a {kind} query encoder, not a {encoder.kind} one",
                         path=folder)
    if encoder is None:
        return make_encoder(
            kind,
            manifest.model,
            device=device,
            query_max_length=manifest.query_max_length or 64,
            response_max_length=manifest.response_max_length or 256,
            doc_max_length=manifest.doc_max_length or 256,
        )
    name = encoder.name if isinstance(encoder, TextEncoder) else canonical_model_name(encoder)
    if name != manifest.model:
        raise ApcirError(
            f"index was built with model {manifest.model} but the query encoder is {name}; "
            "query with the index's model or rebuild the index with this one",
            path=folder,
        )
    if isinstance(encoder, TextEncoder):
        return encoder
    return _matching_encoder(folder, manifest, kind, None, device)
