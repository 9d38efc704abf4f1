"""One interface over every index: ``open_index(dir).search(queries, k) -> Run``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import scipy.sparse as sp

from apcir.console import warn
from apcir.contract.records import Run
from apcir.contract.reformulations import QueryInput
from apcir.errors import ApcirError
from apcir.options import Options
from apcir.retrieval.encoder import SpladeEncoder, TextEncoder, canonical_model_name, make_encoder
from apcir.retrieval.location import is_milvus, parse_milvus
from apcir.retrieval.manifest import IndexManifest, foreign_pyterrier, is_foreign_lucene, read_manifest
from apcir.retrieval.precision import stored_dtype
from apcir.retrieval.registry import BACKENDS, BARE_LUCENE, backend_options


class Backend(Protocol):
    """A searchable index. ``queries`` maps turn ids to a text or a (query, response-or-None) pair."""

    @property
    def manifest(self) -> IndexManifest | None: ...

    def search(self, queries: Mapping[str, QueryInput], k: int = 1000, *, progress: bool = True) -> Run: ...


@runtime_checkable
class VectorBackend(Backend, Protocol):
    """A backend that searches query vectors (SPLADE): queries can be encoded once and searched as vectors."""

    @property
    def encoder(self) -> SpladeEncoder | None: ...

    @property
    def vocab_size(self) -> int: ...

    def search_vectors(self, turn_ids: list[str], matrix: sp.csr_matrix, k: int = 1000, *,
                       progress: bool = True) -> Run: ...


def can_encode(backend: Backend) -> bool:
    """Whether the backend can encode text queries itself (a model, not just a vocabulary)."""
    return hasattr(getattr(backend, "encoder", None), "encode_queries")


def passage_vectors(backend: Backend, ids: list[str]) -> sp.csr_matrix | None:
    """The stored vectors of passages ``ids`` when the backend keeps them (the embedded index), else None."""
    lookup = getattr(backend, "passage_vectors", None)
    return lookup(ids) if callable(lookup) and getattr(backend, "keeps_vectors", True) else None


def locate(index: str | Path) -> Path:
    """The local folder of an index (a directory, or a Milvus location's companion folder, restored from the
    collection's manifest when this machine has none)."""
    if is_milvus(index):
        from apcir.retrieval.milvus.collection import locate as locate_collection

        return locate_collection(parse_milvus(index))  # only a complete build; one line otherwise
    return Path(index).expanduser()


def open_index(
    index_dir: str | Path,
    encoder: TextEncoder | str | None = None,
    *,
    device: str | None = None,
    threads: int = 2,
    backend: str | None = None,
    batch_size: int = 32,
    dtype: str | None = "auto",
    options: Options | Mapping[str, Any] | None = None,
) -> Backend:
    """Open the index at ``index_dir`` with the backend its manifest names.

    Indexes built from a model's vectors load the model recorded in the
    manifest, with the manifest's length budgets, unless ``encoder`` (a loaded
    :class:`~apcir.retrieval.encoder.TextEncoder` or a model name) is given; an encoder other than the
    index's model is refused. A Lucene index without an apcir manifest (e.g. one
    the iKAT organisers distribute) opens as BM25, or, with
    ``backend="lucene-splade"`` and an ``encoder``, as an impact index queried
    with that encoder (apcir cannot check that the index was built with the same model). ``dtype`` is the
    query encoder's precision; one other than the one the index's passages were encoded in is reported (a
    warning, one line: the scores move a little, see docs/performance.md). ``options``: the backend's own
    (``query_algorithm``, ``retriever``, ...), validated against its model. A backend whose index apcir does not
    build (``pyterrier``) is named by ``backend`` and opens the folder as it is (its retriever's own index).
    """
    folder = locate(index_dir)
    if backend is not None and BACKENDS.get(backend).build is None:
        spec = BACKENDS.get(backend)
        own = backend_options(spec, options)
        kind = spec.encoder_kind(own)
        query_encoder = None
        if kind is not None:
            if encoder is None:
                raise ApcirError(f"the {spec.name} backend with these options needs a {kind} query encoder "
                                 "(--encoder, retrieval.encoder)", path=folder)
            query_encoder = encoder if isinstance(encoder, TextEncoder) else make_encoder(
                kind, str(encoder), device=device, batch_size=batch_size, dtype=dtype)
        return spec.call_with("open", own, folder, None, query_encoder, threads=threads)  # type: ignore[no-any-return]
    if not folder.is_dir():
        raise ApcirError("index directory not found", path=folder)
    if is_foreign_lucene(folder):
        spec = BACKENDS.get(backend or BARE_LUCENE)
        own = backend_options(spec, options)
        if not spec.opens_bare_lucene:
            able = ", ".join(b.name for b in BACKENDS if b.opens_bare_lucene)
            raise ApcirError(f"a bare Lucene index opens as {able}, not {spec.name}", path=folder)
        query_encoder = None
        if spec.encoder is not None:
            if encoder is None:
                raise ApcirError(
                    "a Lucene impact index without an apcir manifest needs the query encoder it was built "
                    "with (--encoder, e.g. naver/splade-v3)", path=folder,
                )
            query_encoder = (encoder if isinstance(encoder, TextEncoder)
                             else SpladeEncoder(encoder, device=device, batch_size=batch_size, dtype=dtype))
        return spec.call_with("open", own, folder, None, query_encoder, threads=threads)  # type: ignore[no-any-return]
    foreign = foreign_pyterrier(folder)
    if foreign is not None:
        raise ApcirError(f"a {foreign} index apcir did not build (PyTerrier's): search it through the pyterrier backend, "
                         "--backend pyterrier --retriever module:function (a function returning a PyTerrier retriever "
                         "of this folder)", path=folder)
    manifest = read_manifest(folder)
    if is_milvus(index_dir):  # searched where it was reached (another port or host than the build's, maybe)
        manifest = manifest.model_copy(update={"location": str(parse_milvus(index_dir))})
    if manifest.backend not in BACKENDS:
        raise ApcirError(f"index backend {manifest.backend!r} is unknown to this apcir "
                         f"(it knows {', '.join(BACKENDS.names())})", path=folder)
    spec = BACKENDS.get(manifest.backend)
    if backend is not None and backend != spec.name:
        raise ApcirError(f"this is a {spec.name} index, not {backend}", path=folder)
    own = backend_options(spec, options)
    if manifest.source == "vectors" and manifest.model is None:
        from apcir.retrieval.vectors import Vocabulary

        if encoder:
            raise ApcirError("this index was built from precomputed vectors with their own tokens, not with a "
                             "model: it cannot encode text queries; search it with --query-vectors", path=folder)
        return spec.call_with("open", own, folder, manifest, Vocabulary.load(folder),  # type: ignore[no-any-return]
                              threads=threads)
    if spec.encoder is None:
        if isinstance(encoder, TextEncoder) or encoder:
            raise ApcirError(f"{folder} is a {spec.name} index; it takes no query encoder", path=folder)
        return spec.call_with("open", own, folder, manifest, None, threads=threads)  # type: ignore[no-any-return]
    query_encoder = _matching_encoder(folder, manifest, spec.encoder, encoder, device, batch_size, dtype)
    if manifest.source == "texts":
        check_query_dtype(manifest, query_encoder, folder)
    return spec.call_with("open", own, folder, manifest, query_encoder, threads=threads)  # type: ignore[no-any-return]


def check_query_dtype(manifest: IndexManifest, encoder: TextEncoder, folder: Path) -> bool:
    """Warn (one line) when queries are encoded in another precision than the index's passages; True if so."""
    passages = stored_dtype(manifest.dtype)
    queries = getattr(encoder, "dtype", passages)
    if queries == passages:
        return False
    warn(f"{folder}: its passages were encoded in {passages} and the queries are encoded in {queries}; scores "
         f"move a little (see Performance in the docs): for the index's own numbers give --dtype {passages} "
         "(retrieval.dtype)")
    return True


def _matching_encoder(
    folder: Path, manifest: IndexManifest, kind: str, encoder: TextEncoder | str | None, device: str | None,
    batch_size: int = 32, dtype: str | None = "auto",
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
            batch_size=batch_size,
            dtype=dtype,
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
    return _matching_encoder(folder, manifest, kind, None, device, batch_size, dtype)
