"""An exact sparse top-k engine on numba: block-cached term-at-a-time accumulation.

Input is the embedded index's term-major CSR postings (``indptr`` int64,
``indices`` int32 passage ids sorted within each posting list, ``data`` float32)
and queries as (term ids, weights). The result is, per query, the ``k``
passages with the largest dot product, best first.

How it works
------------
The passages are cut into *blocks* of :data:`BLOCK` consecutive ids (32,768 by
default: a 128 KiB float32 accumulator that stays in the L2 cache). At load
the engine derives from the CSR arrays

* ``bounds[t, b]``: where term t's postings for block b start (posting lists
  are sorted by passage id, so block b of list t is one contiguous range), and
* ``local``: each posting's passage id modulo the block size, as uint16, so a
  posting costs 6 bytes to read (uint16 offset + float32 impact) instead of 8.

For each block, every query term's range is scanned and ``weight * impact`` is
added to the block's accumulator (a scatter whose target stays in L2; the loop
is unrolled by four: postings of one list never repeat a passage). Then the
block's passages are offered to a bounded min-heap of size ``k`` and the
accumulator is cleared:

* *dense* blocks (many postings) are scanned whole, then zeroed with a memset;
* *sparse* blocks (fewer postings than a quarter of the block) are visited a
  second time through the same postings (still in cache), so only touched
  entries are read and reset.

Compared with scipy's ``query_matrix @ postings`` (which materialises a
queries x passages sparse product, up to ~1M entries per query, then
partitions it in numpy) nothing but the k-heap is allocated per query, the
random-access accumulator lives in L2 instead of main memory, and 25% fewer
posting bytes are streamed.

Memory: postings cost 6 bytes each (the int32 ids are not kept: the caller may
drop its CSR arrays), plus ``bounds``: n_terms x (n_blocks + 1) int64, 7.5 MiB
for 30,522 terms at 1M passages, 0.8 GiB at 116M (it could be int32 offsets
relative to ``indptr`` there). The accumulator is one block per running query
(128 KiB) whatever the collection size: no ``n_passages``-long array is ever
allocated (a flat float32 accumulator would be 4 MB per thread at 1M passages
and 464 MB per thread at 116M). The heap is ``k`` x 8 bytes. Threads: a batch
is spread over queries (``numba.prange``); a single query asked with
``parallel=True`` has its blocks cut into one contiguous run per thread, each
with its own heap, merged at the end.

Exactness
---------
Every posting of every query term is read: nothing is pruned, so the result is
the exact top k of the float32 scores. A passage's score is the float32 sum,
in ascending term-id order (queries are canonicalised: terms sorted, repeated
terms merged by adding their weights, zero weights dropped), of the float32
products ``query_weight * impact``: the same operations, in the same order, as
scipy's CSR product of a query row with sorted indices, so scores equal
scipy's bit for bit. Against a float64 dot product they differ by float32
rounding only (relative error ~1e-6 for ~30-term queries).

Only passages with a positive score are returned (as in
:func:`apcir.retrieval.embedded.top_k`), so a query with fewer than ``k``
matching passages returns fewer. Ranking: score descending, then passage
index *descending* (trec_eval's order for equal scores: it sorts by score,
then by docno descending).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from apcir.errors import ApcirError

BLOCK = 1 << 15
MAX_K = 1_000_000
SPARSE_FRACTION = 4  # a block is scanned sparsely when postings * SPARSE_FRACTION < block size


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------


@numba.njit(cache=True, inline="always")
def _better(s1: float, d1: int, s2: float, d2: int) -> bool:
    """(s1, d1) ranks before (s2, d2): higher score, then higher passage index."""
    return s1 > s2 or (s1 == s2 and d1 > d2)


@numba.njit(cache=True, inline="always")
def _sift_down(hs: np.ndarray, hd: np.ndarray, size: int, pos: int) -> None:
    """Restore the min-heap (worst entry at the root) below ``pos``."""
    s, d = hs[pos], hd[pos]
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        right = child + 1
        if right < size and _better(hs[child], hd[child], hs[right], hd[right]):
            child = right
        if _better(s, d, hs[child], hd[child]):
            hs[pos], hd[pos] = hs[child], hd[child]
            pos = child
        else:
            break
    hs[pos], hd[pos] = s, d


@numba.njit(cache=True, inline="always")
def _sift_up(hs: np.ndarray, hd: np.ndarray, pos: int) -> None:
    s, d = hs[pos], hd[pos]
    while pos > 0:
        parent = (pos - 1) >> 1
        if _better(hs[parent], hd[parent], s, d):
            hs[pos], hd[pos] = hs[parent], hd[parent]
            pos = parent
        else:
            break
    hs[pos], hd[pos] = s, d


@numba.njit(cache=True, inline="always")
def _offer(hs: np.ndarray, hd: np.ndarray, size: int, k: int, s: float, d: int) -> int:
    """Offer (s, d) to a bounded min-heap holding ``size`` entries; returns the new size."""
    if size < k:
        hs[size] = s
        hd[size] = d
        _sift_up(hs, hd, size)
        return size + 1
    if _better(s, d, hs[0], hd[0]):
        hs[0] = s
        hd[0] = d
        _sift_down(hs, hd, size, 0)
    return size


@numba.njit(cache=True)
def _heap_to_sorted(hs: np.ndarray, hd: np.ndarray, size: int, out_s: np.ndarray, out_d: np.ndarray) -> None:
    """Pop the heap's worst entry into the last free slot: best first in ``out_*[:size]``."""
    n = size
    while n > 0:
        out_s[n - 1] = hs[0]
        out_d[n - 1] = hd[0]
        n -= 1
        if n > 0:
            hs[0] = hs[n]
            hd[0] = hd[n]
            _sift_down(hs, hd, n, 0)


@numba.njit(cache=True)
def _block_bounds(indptr: np.ndarray, indices: np.ndarray, n_passages: int, block: int) -> np.ndarray:
    """bounds[t, b]: position of term t's first posting with passage >= b * block (b = 0..n_blocks)."""
    n_terms = indptr.shape[0] - 1
    n_blocks = (n_passages + block - 1) // block
    bounds = np.empty((n_terms, n_blocks + 1), dtype=np.int64)
    for t in range(n_terms):
        p = indptr[t]
        e = indptr[t + 1]
        for b in range(n_blocks):
            bounds[t, b] = p
            limit = (b + 1) * block
            while p < e and indices[p] < limit:
                p += 1
        bounds[t, n_blocks] = e
    return bounds


@numba.njit(cache=True)
def _local_ids(indices: np.ndarray, block: int) -> np.ndarray:
    """Passage ids modulo the block size (< 2**16), the offsets into a block's accumulator."""
    local = np.empty(indices.shape[0], dtype=np.uint16)
    for p in range(indices.shape[0]):
        local[p] = indices[p] % block
    return local


@numba.njit(cache=True, inline="always")
def _accumulate(acc: np.ndarray, local: np.ndarray, data: np.ndarray, w: float, p0: int, p1: int) -> None:
    """acc[local[p]] += w * data[p] for p in [p0, p1); unrolled by 4 (one posting list: no repeats)."""
    p = p0
    while p + 4 <= p1:
        i0 = local[p]
        i1 = local[p + 1]
        i2 = local[p + 2]
        i3 = local[p + 3]
        v0 = w * data[p]
        v1 = w * data[p + 1]
        v2 = w * data[p + 2]
        v3 = w * data[p + 3]
        acc[i0] += v0
        acc[i1] += v1
        acc[i2] += v2
        acc[i3] += v3
        p += 4
    while p < p1:
        acc[local[p]] += w * data[p]
        p += 1


@numba.njit(cache=True)
def _search_range(
    bounds: np.ndarray, local: np.ndarray, data: np.ndarray, n_passages: int,
    terms: np.ndarray, weights: np.ndarray, k: int, first_block: int, last_block: int, block: int,
    hs: np.ndarray, hd: np.ndarray,
) -> int:
    """Top-k heap of the passages of blocks [first_block, last_block) for one query; returns the heap size."""
    nt = terms.shape[0]
    acc = np.zeros(block, dtype=np.float32)
    size = 0
    for b in range(first_block, last_block):
        b0 = b * block
        b1 = min(b0 + block, n_passages)
        touched = 0
        for j in range(nt):
            t = terms[j]
            p0 = bounds[t, b]
            p1 = bounds[t, b + 1]
            _accumulate(acc, local, data, weights[j], p0, p1)
            touched += p1 - p0
        if touched == 0:
            continue
        if touched * SPARSE_FRACTION < b1 - b0:
            for j in range(nt):
                t = terms[j]
                for p in range(bounds[t, b], bounds[t, b + 1]):
                    size = _take(acc, local[p], b0, hs, hd, size, k)
        else:
            size = _offer_block(acc, b1 - b0, b0, hs, hd, size, k)
    return size


@numba.njit(cache=True, inline="always")
def _take(acc: np.ndarray, i: int, b0: int, hs: np.ndarray, hd: np.ndarray, size: int, k: int) -> int:
    """A sparse block's entry ``i``: offered when positive, then cleared (a later posting of it finds 0)."""
    s = acc[i]
    if s != 0:
        acc[i] = 0
        if s > 0:
            size = _offer(hs, hd, size, k, s, b0 + i)
    return size


@numba.njit(cache=True, inline="always")
def _offer_block(acc: np.ndarray, n: int, b0: int, hs: np.ndarray, hd: np.ndarray, size: int, k: int) -> int:
    """Offer a dense block's ``n`` accumulated scores (passages ``b0 + i``) to the heap, then clear them."""
    if size < k:
        for i in range(n):
            s = acc[i]
            if s > 0:
                size = _offer(hs, hd, size, k, s, b0 + i)
    else:
        threshold = hs[0]
        for i in range(n):
            s = acc[i]
            if s >= threshold and s > 0:
                size = _offer(hs, hd, size, k, s, b0 + i)
                threshold = hs[0]
    acc[:n] = 0
    return size


@numba.njit(cache=True)
def _part_heaps(parts: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each part's k-heap (scores, passages) and its size."""
    return np.empty((parts, k), dtype=np.float32), np.empty((parts, k), dtype=np.int32), np.zeros(parts, dtype=np.int64)


@numba.njit(cache=True)
def _merge_parts(all_s: np.ndarray, all_d: np.ndarray, sizes: np.ndarray, k: int, out_d: np.ndarray,
                 out_s: np.ndarray) -> int:
    """The k best of the parts' heaps, best first in ``out_*``; returns how many."""
    hs = np.empty(k, dtype=np.float32)
    hd = np.empty(k, dtype=np.int32)
    size = 0
    for part in range(all_s.shape[0]):
        for i in range(sizes[part]):
            size = _offer(hs, hd, size, k, all_s[part, i], all_d[part, i])
    _heap_to_sorted(hs, hd, size, out_s, out_d)
    return size


@numba.njit(cache=True, inline="always")
def part_range(part: int, parts: int, n_blocks: int) -> tuple[int, int]:
    """The blocks [first, last) of part ``part`` of ``parts`` contiguous runs."""
    per = (n_blocks + parts - 1) // parts
    return min(part * per, n_blocks), min((part + 1) * per, n_blocks)


@numba.njit(cache=True, parallel=True)
def _search_batch(
    bounds, local, data, n_passages, q_indptr, q_terms, q_weights, k, block, out_d, out_s, counts,
):  # type: ignore[no-untyped-def]
    nq = q_indptr.shape[0] - 1
    n_blocks = bounds.shape[1] - 1
    for q in numba.prange(nq):
        hs = np.empty(k, dtype=np.float32)
        hd = np.empty(k, dtype=np.int32)
        lo, hi = q_indptr[q], q_indptr[q + 1]
        size = _search_range(bounds, local, data, n_passages, q_terms[lo:hi], q_weights[lo:hi], k, 0, n_blocks,
                             block, hs, hd)
        _heap_to_sorted(hs, hd, size, out_s[q], out_d[q])
        counts[q] = size


@numba.njit(cache=True, parallel=True)
def _search_split(bounds, local, data, n_passages, terms, weights, k, block, parts, out_d, out_s):  # type: ignore[no-untyped-def]
    """One query, its blocks cut into ``parts`` contiguous runs searched in parallel, heaps merged."""
    all_s, all_d, sizes = _part_heaps(parts, k)
    for part in numba.prange(parts):
        first, last = part_range(part, parts, bounds.shape[1] - 1)
        if first < last:
            sizes[part] = _search_range(bounds, local, data, n_passages, terms, weights, k, first, last, block,
                                        all_s[part], all_d[part])
    return _merge_parts(all_s, all_d, sizes, k, out_d, out_s)


@numba.njit(cache=True)
def _lists_sorted(indptr: np.ndarray, indices: np.ndarray) -> bool:
    for t in range(indptr.shape[0] - 1):
        for p in range(indptr[t] + 1, indptr[t + 1]):
            if indices[p] <= indices[p - 1]:
                return False
    return True


# --------------------------------------------------------------------------------------------
# Python API
# --------------------------------------------------------------------------------------------


@contextmanager
def _threads(n: int | None) -> Iterator[None]:
    """Run numba's parallel kernels on ``n`` threads (None: as configured) in this block."""
    if n is None:
        yield
        return
    before = numba.get_num_threads()
    numba.set_num_threads(min(n, before))
    try:
        yield
    finally:
        numba.set_num_threads(before)


@dataclass
class TopK:
    """Per query, the ``counts[q]`` best passages: ``passages[q, :counts[q]]`` (indices into the
    collection) with ``scores[q, :counts[q]]``, best first; the rest is padding (-1, 0)."""

    passages: np.ndarray  # (queries, k) int32
    scores: np.ndarray  # (queries, k) float32
    counts: np.ndarray  # (queries,) int64

    def row(self, q: int) -> tuple[np.ndarray, np.ndarray]:
        n = int(self.counts[q])
        return self.passages[q, :n], self.scores[q, :n]


def engine_arrays(indptr: np.ndarray, indices: np.ndarray, n_passages: int,
                  block: int = BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """What the search reads besides the weights: ``bounds`` (term x block posting ranges) and the postings'
    block-local uint16 offsets, from term-major CSR ``indptr`` / ``indices``."""
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    indices = np.ascontiguousarray(indices, dtype=np.int32)
    return _block_bounds(indptr, indices, int(n_passages), block), _local_ids(indices, block)


def canonical_query(terms: np.ndarray, weights: np.ndarray, n_terms: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Sort terms, add up repeated terms' weights, drop zero weights and terms outside ``[0, n_terms)``.

    Returns (terms int64, weights float32, number of query terms dropped as absent from the index)."""
    terms = np.asarray(terms, dtype=np.int64).ravel()
    weights = np.asarray(weights, dtype=np.float32).ravel()
    if terms.shape != weights.shape:
        raise ApcirError(f"query has {terms.size} term ids but {weights.size} weights")
    if weights.size and not np.all(np.isfinite(weights)):
        raise ApcirError("query weights must be finite numbers")
    inside = (terms >= 0) & (terms < n_terms)
    absent = int((~inside).sum())
    terms, weights = terms[inside], weights[inside]
    if terms.size:
        order = np.argsort(terms, kind="stable")
        terms, weights = terms[order], weights[order]
        unique, first = np.unique(terms, return_index=True)
        if unique.size != terms.size:
            weights = np.add.reduceat(weights, first).astype(np.float32)
            terms = unique
        keep = weights != 0
        terms, weights = terms[keep], weights[keep]
    return terms, weights, absent


class BlockSearch:
    """The search API of a block-at-a-time engine over ``n_terms`` terms and ``n_passages`` passages: a layout
    (:class:`SparseEngine`, :class:`apcir.retrieval.compact.CompactEngine`) gives its query form and its kernels."""

    n_terms: int
    n_passages: int
    block: int

    def _query(self, terms: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A query as the kernels take it (canonical: :func:`canonical_query`)."""
        terms, weights, _ = canonical_query(terms, weights, self.n_terms)
        return terms, weights

    def _split(self, terms: np.ndarray, weights: np.ndarray, k: int, parts: int, out_d: np.ndarray,
               out_s: np.ndarray) -> int:
        """One query, its blocks in ``parts`` runs searched in parallel: the count written to ``out_*``."""
        raise NotImplementedError

    def _batch(self, q_indptr: np.ndarray, terms: np.ndarray, weights: np.ndarray, k: int, out_d: np.ndarray,
               out_s: np.ndarray, counts: np.ndarray) -> None:
        """Queries in CSR form, in parallel over the queries."""
        raise NotImplementedError

    @staticmethod
    def _check_k(k: int) -> int:
        if not 1 <= k <= MAX_K:
            raise ApcirError(f"depth k must be between 1 and {MAX_K:,}, got {k}")
        return int(k)

    def search(self, terms: np.ndarray, weights: np.ndarray, k: int = 1000, *, parallel: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """One query: (passage indices int32, scores float32), best first, at most k."""
        k = self._check_k(k)
        terms, weights = self._query(terms, weights)
        out_d = np.full(k, -1, dtype=np.int32)
        out_s = np.zeros(k, dtype=np.float32)
        if terms.size == 0 or self.n_passages == 0:
            return out_d[:0], out_s[:0]
        parts = numba.get_num_threads() if parallel else 1
        with _threads(None if parallel else 1):
            size = self._split(terms, weights, k, parts, out_d, out_s)
        return out_d[:size], out_s[:size]

    def search_batch(
        self, q_indptr: np.ndarray, q_terms: np.ndarray, q_weights: np.ndarray, k: int = 1000, *,
        parallel: bool = True,
    ) -> TopK:
        """Queries in CSR form (query q's terms are ``q_terms[q_indptr[q]:q_indptr[q+1]]``)."""
        k = self._check_k(k)
        q_indptr = np.asarray(q_indptr, dtype=np.int64)
        nq = q_indptr.shape[0] - 1
        c_indptr = np.zeros(nq + 1, dtype=np.int64)
        c_terms, c_weights = [], []
        for q in range(nq):
            t, w = self._query(q_terms[q_indptr[q] : q_indptr[q + 1]], q_weights[q_indptr[q] : q_indptr[q + 1]])
            c_terms.append(t)
            c_weights.append(w)
            c_indptr[q + 1] = c_indptr[q] + t.size
        terms = np.concatenate(c_terms) if c_terms else np.zeros(0, np.int64)
        weights = np.concatenate(c_weights) if c_weights else np.zeros(0, np.float32)
        out_d = np.full((nq, k), -1, dtype=np.int32)
        out_s = np.zeros((nq, k), dtype=np.float32)
        counts = np.zeros(nq, dtype=np.int64)
        if nq and self.n_passages:
            with _threads(None if parallel else 1):
                self._batch(c_indptr, terms, weights, k, out_d, out_s, counts)
        return TopK(out_d, out_s, counts)

    def search_matrix(self, queries: sp.csr_matrix, k: int = 1000, *, parallel: bool = True) -> TopK:
        """Rows of a sparse query matrix (queries x vocabulary)."""
        queries = sp.csr_matrix(queries)
        if queries.shape[1] > self.n_terms:
            raise ApcirError(f"queries have {queries.shape[1]} columns but the index {self.n_terms} terms")
        return self.search_batch(queries.indptr, queries.indices, queries.data, k, parallel=parallel)


class SparseEngine(BlockSearch):
    """Exact top-k over term-major CSR postings (vocabulary x passages)."""

    def __init__(
        self, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, n_passages: int, *,
        block: int = BLOCK, check: bool = True,
    ) -> None:
        self.indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        indices = np.ascontiguousarray(indices, dtype=np.int32)
        self.data = np.ascontiguousarray(data, dtype=np.float32)
        self.n_passages = int(n_passages)
        self.n_terms = self.indptr.shape[0] - 1
        if block < 1:
            raise ValueError("block must be positive")
        self.block = int(block)
        if indices.shape != self.data.shape or self.indptr[-1] != indices.shape[0]:
            raise ApcirError("postings are inconsistent: indptr, indices and data do not agree")
        if check:
            if indices.size and (indices.min() < 0 or indices.max() >= self.n_passages):
                raise ApcirError(f"postings name passages outside [0, {self.n_passages})")
            if not _lists_sorted(self.indptr, indices):
                raise ApcirError("posting lists must be sorted by passage id without repeats (call sort_indices())")
        if self.block > 1 << 16:
            raise ValueError("block must be at most 65,536 passages (offsets are stored as uint16)")
        # what the search reads: per (term, block) posting ranges, block-local uint16 offsets, weights
        self.bounds, self.local = engine_arrays(self.indptr, indices, self.n_passages, self.block)

    @classmethod
    def mapped(cls, bounds: np.ndarray, local: np.ndarray, data: np.ndarray, n_passages: int, *,
               block: int = BLOCK) -> SparseEngine:
        """An engine over arrays already derived (:func:`engine_arrays`), e.g. memory-mapped from an index
        directory: nothing is computed or copied, so only the pages a query touches are read."""
        engine = cls.__new__(cls)
        engine.bounds, engine.local, engine.data = bounds, local, data
        engine.n_passages, engine.block = int(n_passages), int(block)
        engine.n_terms = bounds.shape[0]
        engine.indptr = np.empty(0, dtype=np.int64)  # not read by the search
        if bounds.ndim != 2 or local.shape != data.shape or local.dtype != np.uint16 or data.dtype != np.float32:
            raise ApcirError("engine arrays are inconsistent (bounds, local offsets and weights)")
        return engine

    @classmethod
    def from_csr(cls, postings: sp.csr_matrix | sp.csr_array, **kwargs: object) -> SparseEngine:
        """From the embedded index's postings matrix (vocabulary x passages)."""
        postings = sp.csr_matrix(postings)
        if not postings.has_sorted_indices:
            postings = postings.copy()
            postings.sort_indices()
        return cls(postings.indptr, postings.indices, postings.data, postings.shape[1], **kwargs)  # type: ignore[arg-type]

    @property
    def nbytes(self) -> int:
        return int(self.local.nbytes + self.data.nbytes + self.bounds.nbytes)

    def _split(self, terms: np.ndarray, weights: np.ndarray, k: int, parts: int, out_d: np.ndarray,
               out_s: np.ndarray) -> int:
        return int(_search_split(self.bounds, self.local, self.data, self.n_passages, terms, weights, k, self.block,
                                 parts, out_d, out_s))

    def _batch(self, q_indptr: np.ndarray, terms: np.ndarray, weights: np.ndarray, k: int, out_d: np.ndarray,
               out_s: np.ndarray, counts: np.ndarray) -> None:
        _search_batch(self.bounds, self.local, self.data, self.n_passages, q_indptr, terms, weights, k, self.block,
                      out_d, out_s, counts)


def search_runs(engine: SparseEngine, ids: list[str], queries: sp.csr_matrix, k: int, *, parallel: bool = True) -> list[dict[str, float]]:
    """Like :func:`apcir.retrieval.embedded.search_matrix`: per query ``{passage id: score}``, best first."""
    top = engine.search_matrix(queries, k, parallel=parallel)
    runs = []
    for q in range(top.counts.shape[0]):
        passages, scores = top.row(q)
        runs.append({ids[d]: float(s) for d, s in zip(passages.tolist(), scores.tolist())})
    return runs
