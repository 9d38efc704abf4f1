"""The embedded SPLADE index: term-major postings as memory-mapped arrays, an id map, a manifest. No server, no Java.

On disk (``indexes/<name>/``)::

    manifest.json          model, length budgets, collection fingerprint, counts
    postings.indptr.npy    term-major CSR (vocabulary x passages): int64 offsets of each term's postings,
    postings.indices.npy   int32 passage numbers (sorted within a term),
    postings.data.npy      float32 impacts: an inverted index
    postings.local.npy     uint16 passage numbers within their 32,768-passage block  } what the search engine
    postings.bounds.npy    int64 term x block posting ranges                        } reads, derived at build
    ids.txt                passage ids, one per line, in column order (sorted)
    ids.npy                the same ids as fixed-width UTF-8 bytes (memory-mapped, binary-searchable)

With ``postings = "compact"`` (an option of the build) ``indices``, ``data``,
``local`` and ``bounds`` are replaced by ``postings.codes.npy`` (a uint16 a
posting: 9-bit impact, 7-bit gap), ``postings.exceptions.npy`` (the offsets of
long gaps) and their tables and per-term scales (:mod:`apcir.retrieval.compact`):
about 2.2 bytes a posting searched instead of 6, the top k of the quantised
scores, and no passage vectors.

Every array is opened with ``np.load(..., mmap_mode="r")``: nothing is read
until a query touches it, so an index larger than memory is searched with the
memory the queries' posting lists take (the operating system's page cache
keeps the hot ones). A search reads 6 bytes a posting (``local`` + ``data``);
``indices`` is read only to look up passage vectors. An index written before
this layout (``postings.npz``) is converted on first open.

Search is exact: :class:`~apcir.retrieval.engine.SparseEngine` reads the
posting lists of the query's terms (term-at-a-time accumulation, cache-blocked,
numba) and keeps the k best per query; scores equal scipy's sparse product
bit for bit. Passages are stored sorted by id, so ties come out in apcir's one
ranking order (:mod:`apcir.contract.runs`). :func:`search_matrix` (scipy's product,
then a partial sort) is the reference the benchmark compares with.
"""

from __future__ import annotations

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
from apcir.retrieval.compact import CompactEngine, CompactPostings
from apcir.retrieval.encoder import SpladeEncoder, encode_and_search
from apcir.retrieval.engine import BLOCK, SparseEngine, engine_arrays
from apcir.retrieval.manifest import IndexManifest
from apcir.retrieval.options import EmbeddedOptions
from apcir.retrieval.postings_writer import write_postings

POSTINGS = "postings.npz"
"""The layout before memory-mapped arrays (converted on first open)."""
ARRAYS = ("indptr", "indices", "data", "local", "bounds")
COMPACT_ARRAYS = ("codes", "exceptions", "ebase", "cbounds", "ebounds", "scale")
NO_VECTORS = ("a compact embedded index keeps only quantised postings, not passage vectors: build the index with "
              "postings = \"exact\" (the default) for what looks passage vectors up")
"""The arrays of the compact layout (:mod:`apcir.retrieval.compact`), beside ``indptr``."""
IDS = "ids.txt"
ID_ARRAY = "ids.npy"
QUERY_BATCH = 64


def array_path(index_dir: Path, name: str) -> Path:
    return index_dir / f"postings.{name}.npy"


def _save_array(path: Path, array: np.ndarray) -> None:
    with atomic_write(path, "wb") as handle:
        np.save(handle, np.ascontiguousarray(array), allow_pickle=False)


def save_arrays(index_dir: Path, postings: sp.csr_matrix, ids: list[str]) -> None:
    """Write the memory-mappable arrays of term-major ``postings`` (sorted indices) and the id array."""
    bounds, local = engine_arrays(postings.indptr, postings.indices, postings.shape[1], BLOCK)
    for name, array in (("indptr", postings.indptr.astype(np.int64)), ("indices", postings.indices.astype(np.int32)),
                        ("data", postings.data.astype(np.float32)), ("local", local), ("bounds", bounds)):
        _save_array(array_path(index_dir, name), array)
    encoded = [pid.encode("utf-8") for pid in ids]
    width = max((len(b) for b in encoded), default=1)
    _save_array(index_dir / ID_ARRAY, np.array(encoded, dtype=f"S{max(width, 1)}"))


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
    save_arrays(index_dir, postings, ids)
    write_text(index_dir / IDS, "".join(f"{pid}\n" for pid in ids))


def write_index(
    out: Path, chunks: Iterable[tuple[list[str], sp.csr_matrix]], encoder: SpladeEncoder, *, threads: int,
    work: Path, options: EmbeddedOptions | None = None,
) -> dict[str, Any]:
    """The backend's ``build``: the postings of ``out`` from the encoded chunks, with bounded memory
    (:mod:`apcir.retrieval.postings_writer`: the files :func:`save_embedded` writes from them all in memory), in
    the layout ``options.postings`` names."""
    compact = options is not None and options.postings == "compact"
    names = ("indptr", *COMPACT_ARRAYS) if compact else ARRAYS
    files = {name: array_path(out, name) for name in names} | {"ids": out / ID_ARRAY}
    nonzeros = write_postings(chunks, encoder.vocab_size, work=work, files=files, ids_txt=out / IDS, compact=compact)
    return {"nonzeros": nonzeros}


def open_index(folder: Path, manifest: IndexManifest | None, encoder: SpladeEncoder | None, *,
               threads: int, options: EmbeddedOptions | None = None) -> EmbeddedIndex:
    """The backend's ``open`` (``encoder`` None: only pre-encoded queries can be searched)."""
    if manifest is None:
        raise ApcirError("an embedded index needs its manifest", path=folder)
    recorded = layout(manifest)
    if options is not None and "postings" in options.model_fields_set and options.postings != recorded:
        raise ApcirError(f"this embedded index was built with postings {recorded}, not {options.postings} (leave "
                         "postings out, or build the index again with it)", path=folder)
    return EmbeddedIndex(folder, manifest, encoder)


def layout(manifest: IndexManifest) -> str:
    """The index's posting layout: ``exact`` or ``compact`` (recorded in its manifest)."""
    return str(manifest.options.get("postings", "exact"))


def passage_vectors(index_dir: Path) -> tuple[sp.csr_matrix, list[str]]:
    """Every passage's SPLADE vector (passages x vocabulary) and the passage ids."""
    postings, ids = load_embedded(index_dir)
    return sp.csr_matrix(postings.T, dtype=np.float32), ids


def load_embedded(index_dir: Path) -> tuple[sp.csr_matrix, list[str]]:
    """Postings (vocabulary x passages, over the memory-mapped arrays) and the passage ids."""
    arrays = open_arrays(index_dir)
    if "codes" in arrays:
        raise ApcirError(NO_VECTORS, path=index_dir)
    ids = read_text(index_dir / IDS, "index id map").splitlines()
    postings = sp.csr_matrix((arrays["data"], arrays["indices"], arrays["indptr"]),
                             shape=(arrays["indptr"].shape[0] - 1, arrays["ids"].shape[0]), copy=False)
    return postings, ids


def open_arrays(index_dir: Path) -> dict[str, np.ndarray]:
    """The index's arrays, memory-mapped (``ids``: the id array); an index in the older ``postings.npz`` layout is
    converted first."""
    if not (index_dir / IDS).is_file():
        raise ApcirError(f"embedded index is incomplete: {IDS} is missing", path=index_dir)
    if array_path(index_dir, "codes").is_file():
        return _open_compact(index_dir)
    if not all(array_path(index_dir, name).is_file() for name in ARRAYS) or not (index_dir / ID_ARRAY).is_file():
        _convert(index_dir)
    arrays = {name: _load(path, index_dir)
              for name, path in [*((n, array_path(index_dir, n)) for n in ARRAYS), ("ids", index_dir / ID_ARRAY)]}
    n_terms, nnz = arrays["indptr"].shape[0] - 1, arrays["data"].shape[0]
    if (arrays["indices"].shape[0] != nnz or arrays["local"].shape[0] != nnz or int(arrays["indptr"][-1]) != nnz
            or arrays["bounds"].shape[0] != n_terms):
        raise ApcirError("embedded index is inconsistent: its posting arrays disagree; rebuild it with "
                         "`apcir index build ... --overwrite`", path=index_dir)
    return arrays


def _load(path: Path, index_dir: Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False).view(np.ndarray)
    except (ValueError, OSError, EOFError) as exc:
        raise ApcirError(f"embedded index is corrupt: {path.name} cannot be read ({exc}); rebuild it with "
                         "`apcir index build ... --overwrite`", path=index_dir) from None


def _open_compact(index_dir: Path) -> dict[str, np.ndarray]:
    names = [("indptr", array_path(index_dir, "indptr")), *((n, array_path(index_dir, n)) for n in COMPACT_ARRAYS),
             ("ids", index_dir / ID_ARRAY)]
    missing = [path.name for _, path in names if not path.is_file()]
    if missing:
        raise ApcirError(f"compact embedded index is incomplete: {', '.join(missing)} missing; rebuild it with "
                         "`apcir index build ... --overwrite`", path=index_dir)
    arrays = {name: _load(path, index_dir) for name, path in names}
    try:
        CompactEngine(compact_postings(arrays), arrays["ids"].shape[0], BLOCK)
    except ApcirError:
        raise ApcirError("compact embedded index is inconsistent: its arrays disagree; rebuild it with "
                         "`apcir index build ... --overwrite`", path=index_dir) from None
    return arrays


def compact_postings(arrays: dict[str, np.ndarray]) -> CompactPostings:
    """The compact layout's arrays among an index's (:func:`open_arrays`)."""
    return CompactPostings(**{name: arrays[name] for name in ("indptr", *COMPACT_ARRAYS)})


def _convert(index_dir: Path) -> None:
    """Write the memory-mapped layout of an index saved as ``postings.npz`` (before it existed)."""
    if not (index_dir / POSTINGS).is_file():
        raise ApcirError("embedded index is incomplete: its posting arrays are missing", path=index_dir)
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
        write_text(index_dir / IDS, "".join(f"{pid}\n" for pid in ids))
    postings.sort_indices()
    save_arrays(index_dir, postings, ids)
    (index_dir / POSTINGS).unlink()


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
    """Exact SPLADE search over an embedded index (a vector backend: see :class:`~apcir.retrieval.backends.VectorBackend`).

    The postings stay memory-mapped: opening reads no posting, and a search
    reads the posting lists of its queries' terms."""

    def __init__(self, index_dir: Path, manifest: IndexManifest, encoder: SpladeEncoder | Any | None) -> None:
        self.index_dir = index_dir
        self.manifest = manifest
        self.encoder = encoder
        self.arrays = open_arrays(index_dir)
        self.ids = IdArray(self.arrays["ids"])
        if encoder is not None and self.vocab_size != encoder.vocab_size:
            raise ApcirError(
                f"index vocabulary has {self.vocab_size} entries but {encoder.name} has {encoder.vocab_size}",
                path=index_dir,
            )
        self.compact = "codes" in self.arrays
        self.keeps_vectors = not self.compact
        """A compact index keeps quantised postings only (DEPS then encodes the passages' texts)."""
        self._engine: SparseEngine | CompactEngine | None = None

    @property
    def vocab_size(self) -> int:
        return int(self.arrays["indptr"].shape[0] - 1)

    @property
    def postings(self) -> sp.csr_matrix:
        """The term-major postings as a CSR matrix over the mapped arrays (no copy)."""
        if self.compact:
            raise ApcirError(NO_VECTORS, path=self.index_dir)
        return sp.csr_matrix((self.arrays["data"], self.arrays["indices"], self.arrays["indptr"]),
                             shape=(self.vocab_size, len(self.ids)), copy=False)

    @property
    def engine(self) -> SparseEngine | CompactEngine:
        if self._engine is None and self.compact:
            self._engine = CompactEngine(compact_postings(self.arrays), len(self.ids), BLOCK)
        if self._engine is None:
            self._engine = SparseEngine.mapped(self.arrays["bounds"], self.arrays["local"], self.arrays["data"],
                                               len(self.ids))
        return self._engine

    def search(self, queries: Mapping[str, QueryInput], k: int = 1000, *, progress: bool = True) -> Run:
        """Top-k passages per turn: ``{turn_id: {passage_id: score}}``."""
        check_k(k)
        return encode_and_search(self, queries, k, progress=progress, where=self.index_dir)

    def search_vectors(self, turn_ids: list[str], matrix: sp.csr_matrix, k: int = 1000, *,
                       progress: bool = True) -> Run:
        """Top-k passages for already encoded queries (one row of ``matrix`` per turn), exact.

        Searched by :class:`~apcir.retrieval.engine.SparseEngine` (a numba
        term-at-a-time kernel, cache-blocked), whose scores equal scipy's
        sparse product bit for bit. Each turn's hits come in the ranking order.
        """
        check_k(k)
        if matrix.shape[1] != self.vocab_size:
            raise ApcirError(f"query vectors have {matrix.shape[1]} dimensions, the index {self.vocab_size}",
                             path=self.index_dir)
        matrix = sp.csr_matrix(matrix, dtype=np.float32)
        run: Run = {}
        with progress_bar("searching", matrix.shape[0], enabled=progress and matrix.shape[0] > QUERY_BATCH) as advance:
            for start in range(0, matrix.shape[0], QUERY_BATCH):
                block = matrix[start : start + QUERY_BATCH]
                top = self.engine.search_matrix(block, k)
                for q in range(block.shape[0]):
                    passages, scores = top.row(q)
                    run[turn_ids[start + q]] = dict(zip(self.ids.take(passages), scores.tolist()))
                advance(block.shape[0])
        return run

    def passage_vectors(self, ids: list[str]) -> sp.csr_matrix:
        """The indexed vectors of passages ``ids`` (one row each; an id not in the index is an error)."""
        columns = self.ids.positions(ids, self.index_dir)
        return sp.csr_matrix(self.postings[:, columns].T, dtype=np.float32)


class IdArray:
    """Passage ids as a sorted fixed-width bytes array (memory-mapped): position -> id, id -> position."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __len__(self) -> int:
        return int(self.array.shape[0])

    def __getitem__(self, position: int) -> str:
        return bytes(self.array[position]).decode("utf-8")

    def take(self, positions: np.ndarray) -> list[str]:
        """The ids at ``positions``, in that order."""
        return [raw.decode("utf-8") for raw in self.array[positions].tolist()]

    def positions(self, ids: list[str], where: Path | None = None) -> np.ndarray:
        """The positions of ``ids`` (binary search; an id not in the index is an error)."""
        wanted = np.array([pid.encode("utf-8") for pid in ids], dtype=self.array.dtype) if ids else \
            np.zeros(0, dtype=self.array.dtype)
        at = np.searchsorted(self.array, wanted)
        for pid, raw, position in zip(ids, wanted.tolist(), at.tolist()):
            if position >= len(self) or self.array[position] != raw or len(pid.encode("utf-8")) > self.array.itemsize:
                raise ApcirError(f"passage {pid} is not in the index", path=where)
        return at


def check_k(k: int) -> None:
    if k < 1:
        raise ApcirError(f"depth k must be at least 1, got {k}")
