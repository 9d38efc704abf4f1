"""The embedded SPLADE index: a scipy sparse matrix, an id map, a manifest. No server, no Java.

On disk (``indexes/<name>/``)::

    manifest.json   model, length budgets, collection fingerprint, counts
    postings.npz    term-major CSR matrix (vocabulary x passages, float32): an inverted index
    ids.txt         passage ids, one per line, in column order

Search is exact: :class:`~apcir.retrieval.engine.SparseEngine` reads the
posting lists of the query's terms (term-at-a-time accumulation, cache-blocked,
numba) and keeps the k best per query; scores equal scipy's sparse product
bit for bit. Passages are stored sorted by id, so ties come out in apcir's one
ranking order (:mod:`apcir.contract.runs`). :func:`search_matrix` (scipy's product,
then a partial sort) is the reference the benchmark compares with.
"""

from __future__ import annotations

import bisect
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from apcir.console import progress as progress_bar
from apcir.contract.records import Run
from apcir.contract.reformulations import QueryInput
from apcir.contract.runs import ranking
from apcir.errors import ApcirError
from apcir.io import atomic_write, read_text, write_text
from apcir.retrieval.encoder import SpladeEncoder
from apcir.retrieval.engine import SparseEngine, search_runs
from apcir.retrieval.manifest import IndexManifest

POSTINGS = "postings.npz"
IDS = "ids.txt"
QUERY_BATCH = 64


def save_embedded(index_dir: Path, documents: sp.csr_matrix, ids: list[str]) -> None:
    """Write the postings (from a passages x vocabulary matrix) and the id map, passages sorted by id.

    Sorted ids make the passage index order the id order, so the search engine's
    tie order (passage index descending) is trec_eval's (passage id descending).
    """
    if documents.shape[0] != len(ids):
        raise ValueError(f"{documents.shape[0]} vectors for {len(ids)} ids")
    order = sorted(range(len(ids)), key=ids.__getitem__)
    if order != list(range(len(ids))):
        documents = sp.csr_matrix(documents)[order]
        ids = [ids[i] for i in order]
    postings = sp.csr_matrix(documents.T, dtype=np.float32)  # CSC of documents == CSR of its transpose
    postings.sort_indices()
    with atomic_write(index_dir / POSTINGS, "wb") as handle:
        sp.save_npz(handle, postings, compressed=False)
    write_text(index_dir / IDS, "".join(f"{pid}\n" for pid in ids))


def write_index(
    out: Path, chunks: Iterable[tuple[list[str], sp.csr_matrix]], encoder: SpladeEncoder, *, threads: int,
    work: Path,
) -> dict[str, Any]:
    """The backend's ``build``: stack the encoded chunks into the postings of ``out``."""
    ids: list[str] = []
    blocks = []
    for chunk_ids, matrix in chunks:
        ids.extend(chunk_ids)
        blocks.append(matrix)
    documents = (sp.vstack(blocks, format="csr", dtype=np.float32) if blocks
                 else sp.csr_matrix((0, encoder.vocab_size), dtype=np.float32))
    save_embedded(out, documents, ids)
    return {"nonzeros": int(documents.nnz)}


def open_index(folder: Path, manifest: IndexManifest | None, encoder: SpladeEncoder | None, *,
               threads: int) -> EmbeddedIndex:
    """The backend's ``open`` (``encoder`` None: only pre-encoded queries can be searched)."""
    if manifest is None:
        raise ApcirError("an embedded index needs its manifest", path=folder)
    return EmbeddedIndex(folder, manifest, encoder)


def passage_vectors(index_dir: Path) -> tuple[sp.csr_matrix, list[str]]:
    """Every passage's SPLADE vector (passages x vocabulary) and the passage ids."""
    postings, ids = load_embedded(index_dir)
    return sp.csr_matrix(postings.T, dtype=np.float32), ids


def load_embedded(index_dir: Path) -> tuple[sp.csr_matrix, list[str]]:
    """Postings (vocabulary x passages) and the passage ids."""
    for name in (POSTINGS, IDS):
        if not (index_dir / name).is_file():
            raise ApcirError(f"embedded index is incomplete: {name} is missing", path=index_dir)
    try:
        postings = sp.load_npz(index_dir / POSTINGS).tocsr()
    except (zipfile.BadZipFile, ValueError, KeyError, EOFError, OSError) as exc:
        raise ApcirError(
            f"embedded index is corrupt: {POSTINGS} cannot be read ({type(exc).__name__}: {exc}); rebuild it with "
            "`apcir index build ... --overwrite`",
            path=index_dir,
        ) from None
    ids = read_text(index_dir / IDS, "index id map").splitlines()
    if postings.shape[1] != len(ids):
        raise ApcirError(f"embedded index is inconsistent: {postings.shape[1]} columns, {len(ids)} ids", path=index_dir)
    if any(a > b for a, b in zip(ids, ids[1:])):  # an index written before passages were sorted by id
        order = sorted(range(len(ids)), key=ids.__getitem__)
        postings = sp.csr_matrix(postings[:, order])
        ids = [ids[i] for i in order]
    postings.sort_indices()
    return postings, ids


def top_k(doc_indices: np.ndarray, scores: np.ndarray, ids: list[str], k: int) -> dict[str, float]:
    """The k best (passage id -> score) among positive scores, in the ranking order (ties at the cut included)."""
    positive = scores > 0
    doc_indices, scores = doc_indices[positive], scores[positive]
    if len(scores) > k:
        threshold = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = scores >= threshold
        doc_indices, scores = doc_indices[keep], scores[keep]
    return dict(ranking({ids[d]: float(s) for d, s in zip(doc_indices, scores)}, k))


def search_matrix(
    postings: sp.csr_matrix, ids: list[str], queries: sp.csr_matrix, k: int, progress: bool = False
) -> list[dict[str, float]]:
    """Exact top-k for each row of a query matrix (queries x vocabulary)."""
    results: list[dict[str, float]] = []
    with progress_bar("searching", queries.shape[0], enabled=progress and queries.shape[0] > QUERY_BATCH) as advance:
        for start in range(0, queries.shape[0], QUERY_BATCH):
            block = queries[start : start + QUERY_BATCH]
            scores = (block @ postings).tocsr()  # queries x passages, only matching passages stored
            for row in range(scores.shape[0]):
                lo, hi = scores.indptr[row], scores.indptr[row + 1]
                results.append(top_k(scores.indices[lo:hi], scores.data[lo:hi], ids, k))
            advance(block.shape[0])
    return results


class EmbeddedIndex:
    """Exact SPLADE search over an embedded index (a vector backend: see :class:`~apcir.retrieval.backends.VectorBackend`)."""

    def __init__(self, index_dir: Path, manifest: IndexManifest, encoder: SpladeEncoder | Any | None) -> None:
        self.index_dir = index_dir
        self.manifest = manifest
        self.encoder = encoder
        self.postings, self.ids = load_embedded(index_dir)
        if encoder is not None and self.postings.shape[0] != encoder.vocab_size:
            raise ApcirError(
                f"index vocabulary has {self.postings.shape[0]} entries but {encoder.name} has {encoder.vocab_size}",
                path=index_dir,
            )
        self._engine: SparseEngine | None = None

    @property
    def vocab_size(self) -> int:
        return int(self.postings.shape[0])

    def search(self, queries: Mapping[str, QueryInput], k: int = 1000, *, progress: bool = True) -> Run:
        """Top-k passages per turn: ``{turn_id: {passage_id: score}}``."""
        check_k(k)
        if not hasattr(self.encoder, "encode_queries"):
            raise ApcirError("this index was built from precomputed vectors without a model: search it with "
                             "pre-encoded queries (--query-vectors)", path=self.index_dir)
        turn_ids = list(queries)
        matrix = self.encoder.encode_queries([queries[t] for t in turn_ids], progress=progress)  # type: ignore[union-attr]
        return self.search_vectors(turn_ids, matrix, k, progress=progress)

    def search_vectors(self, turn_ids: list[str], matrix: sp.csr_matrix, k: int = 1000, *,
                       progress: bool = True) -> Run:
        """Top-k passages for already encoded queries (one row of ``matrix`` per turn), exact.

        Searched by :class:`~apcir.retrieval.engine.SparseEngine` (a numba
        term-at-a-time kernel, cache-blocked), whose scores equal scipy's
        sparse product bit for bit.
        """
        check_k(k)
        if matrix.shape[1] != self.vocab_size:
            raise ApcirError(f"query vectors have {matrix.shape[1]} dimensions, the index {self.vocab_size}",
                             path=self.index_dir)
        if self._engine is None:
            self._engine = SparseEngine.from_csr(self.postings)
        matrix = sp.csr_matrix(matrix, dtype=np.float32)
        results: list[dict[str, float]] = []
        with progress_bar("searching", matrix.shape[0], enabled=progress and matrix.shape[0] > QUERY_BATCH) as advance:
            for start in range(0, matrix.shape[0], QUERY_BATCH):
                block = matrix[start : start + QUERY_BATCH]
                results += search_runs(self._engine, self.ids, block, k)
                advance(block.shape[0])
        return dict(zip(turn_ids, results))

    def passage_vectors(self, ids: list[str]) -> sp.csr_matrix:
        """The indexed vectors of passages ``ids`` (one row each; an id not in the index is an error)."""
        columns = []
        for pid in ids:  # the ids are sorted: a binary search each, no id -> position map in memory
            at = bisect.bisect_left(self.ids, pid)
            if at == len(self.ids) or self.ids[at] != pid:
                raise ApcirError(f"passage {pid} is not in the index", path=self.index_dir)
            columns.append(at)
        return sp.csr_matrix(self.postings[:, columns].T, dtype=np.float32)


def check_k(k: int) -> None:
    if k < 1:
        raise ApcirError(f"depth k must be at least 1, got {k}")
