"""Compact postings for the embedded engine: about 2.2 bytes a posting instead of 6, for collections larger than memory.

The exact layout (:mod:`apcir.retrieval.engine`) reads a uint16 block-local offset and a float32 impact per
posting. At ClueWeb22-B's 116.8M passages and about 230 SPLADE terms a passage that is 27 billion postings and
160 GB, which no 64 GB machine keeps in its page cache. The compact layout (``postings = "compact"``, a build
option of the ``embedded`` backend) keeps the engine's algorithm (blocks of :data:`~apcir.retrieval.engine.BLOCK`
passages, a term x block table of posting ranges, term-at-a-time accumulation into a cache-resident block
accumulator) and stores each posting in one uint16 *code*, plus a uint16 *exception* for the few with a long gap:

* **impacts**: 9-bit integers, per term: ``q = round(w / s_t)`` clamped to ``[1, 511]``, with ``s_t`` the term's
  largest weight / 511 (``postings.scale.npy``). A query weight ``w_j`` is multiplied by ``s_t`` once, so the
  score of a passage is the float32 sum of ``(w_j s_t) q`` in ascending term order: the dot product with every
  impact rounded to the nearest of 511 steps of its term's range (at most half a step, 1/1022 of the term's largest
  weight, per posting).
* **offsets**: within a (term, block) range, passages ascend; the code is ``gap << 9 | q`` where ``gap`` is the
  distance to the previous passage (the first's from -1) when it is at most 127; otherwise the code's gap is 0 and
  the block-local offset itself is the range's next *exception* (``postings.exceptions.npy``, read in order).

Each posting's code sits at its position in the term-major order (``postings.indptr.npy``), so the code stream has
no pointer chain to follow and is read like the exact layout's arrays. The tables are uint32, relative to their
term's start: ``postings.cbounds.npy`` (terms x (blocks + 1): where each (term, block) range of codes starts,
from ``indptr[t]``) and ``postings.ebounds.npy`` (the same for exceptions, from ``postings.ebase.npy[t]``).

What it costs: the ranking is the exact top k of the *quantised* scores, not of the float ones. Measured on the
scale curve's collections (``benchmarks/scale_curve.py``, engine ``embedded-compact``, docs/performance.md), it keeps
more than 0.99 of the exact top 1000 (0.995 at 10M passages), about 35% slower than the exact layout. Passage vectors are not kept (only the
quantised postings): what looks them up needs an exact index.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from apcir.errors import ApcirError
from apcir.retrieval.engine import (
    BLOCK,
    SPARSE_FRACTION,
    BlockSearch,
    _merge_parts,
    _offer_block,
    _part_heaps,
    _take,
    engine_arrays,
    part_range,
)

LEVELS = 511
"""The largest 9-bit impact; a term's largest weight maps to it."""
SHORT_GAP = 127
"""The longest gap a code holds (7 bits)."""
IMPACT_BITS = 9


@dataclass(frozen=True)
class CompactPostings:
    """The compact layout's arrays (see the module's text)."""

    indptr: np.ndarray  # int64 (terms + 1): where each term's codes start
    codes: np.ndarray  # uint16 per posting: gap << 9 | q
    exceptions: np.ndarray  # uint16: the block-local offsets of postings whose gap exceeds 127
    ebase: np.ndarray  # int64 (terms + 1): where each term's exceptions start
    cbounds: np.ndarray  # uint32 (terms, blocks + 1): a (term, block) range's first code, from indptr[t]
    ebounds: np.ndarray  # uint32 (terms, blocks + 1): its first exception, from ebase[t]
    scale: np.ndarray  # float32 per term: the step of its impacts

    @property
    def nbytes(self) -> int:
        """What a search reads: the codes, exceptions, tables and scales."""
        return int(sum(a.nbytes for a in (self.indptr, self.codes, self.exceptions, self.ebase, self.cbounds,
                                          self.ebounds, self.scale)))


# --------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------


@numba.njit(cache=True)
def term_scales(indptr: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Per term of ``indptr``'s range, its largest weight / :data:`LEVELS` (0 for a term without postings)."""
    n_terms = indptr.shape[0] - 1
    scale = np.zeros(n_terms, dtype=np.float32)
    for t in range(n_terms):
        top = np.float32(0)
        for p in range(indptr[t], indptr[t + 1]):
            if data[p] > top:
                top = data[p]
        scale[t] = top / np.float32(LEVELS)
    return scale


@numba.njit(cache=True)
def _encode(indptr: np.ndarray, bounds: np.ndarray, local: np.ndarray, data: np.ndarray, scale: np.ndarray,
            codes: np.ndarray, exceptions: np.ndarray, ebounds: np.ndarray, counts: np.ndarray) -> int:
    """Codes of every posting, exceptions (returns how many), exception ranges and counts per term."""
    n_terms, n_edges = bounds.shape
    e = 0
    for t in range(n_terms):
        inverse = np.float32(1) / scale[t] if scale[t] > 0 else np.float32(0)
        first = e
        for b in range(n_edges - 1):
            ebounds[t, b] = e - first
            prev = -1
            for p in range(bounds[t, b], bounds[t, b + 1]):
                offset = int(local[p])
                q = int(np.floor(data[p] * inverse + np.float32(0.5)))
                q = min(max(q, 1), LEVELS)
                gap = offset - prev
                if gap <= SHORT_GAP:
                    codes[p] = (gap << IMPACT_BITS) | q
                else:
                    codes[p] = q
                    exceptions[e] = offset
                    e += 1
                prev = offset
        ebounds[t, n_edges - 1] = e - first
        counts[t] = e - first
    return e


def encode_terms(indptr: np.ndarray, bounds: np.ndarray, local: np.ndarray, data: np.ndarray,
                 scale: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The compact arrays of a range of whole terms (``indptr``, ``bounds`` and ``local``: their postings as the
    exact layout has them, positions from the range's first posting; ``data``: their weights): (codes uint16,
    exceptions uint16, cbounds uint32, ebounds uint32, exceptions per term int64)."""
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    bounds = np.ascontiguousarray(bounds, dtype=np.int64)
    codes = np.empty(local.shape[0], dtype=np.uint16)
    exceptions = np.empty(local.shape[0], dtype=np.uint16)
    ebounds = np.zeros(bounds.shape, dtype=np.uint32)
    counts = np.zeros(bounds.shape[0], dtype=np.int64)
    n = _encode(indptr, bounds, local, data, scale, codes, exceptions, ebounds, counts)
    cbounds = (bounds - indptr[:-1, None]).astype(np.uint32)
    return codes, exceptions[:n].copy(), cbounds, ebounds, counts


def compact_arrays(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, n_passages: int,
                   block: int = BLOCK) -> CompactPostings:
    """The compact layout of term-major CSR postings (passage numbers sorted within each term), in memory."""
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    data = np.ascontiguousarray(data, dtype=np.float32)
    bounds, local = engine_arrays(indptr, indices, n_passages, block)
    scale = term_scales(indptr, data)
    codes, exceptions, cbounds, ebounds, counts = encode_terms(indptr, bounds, local, data, scale)
    ebase = np.zeros(indptr.shape[0], dtype=np.int64)
    np.cumsum(counts, out=ebase[1:])
    return CompactPostings(indptr, codes, exceptions, ebase, cbounds, ebounds, scale)


# --------------------------------------------------------------------------------------------
# Searching
# --------------------------------------------------------------------------------------------


@numba.njit(cache=True, inline="always")
def _accumulate(acc: np.ndarray, codes: np.ndarray, exceptions: np.ndarray, products: np.ndarray, p0: int, p1: int,
                e: int) -> None:
    """acc[offset] += w * q for the codes [p0, p1), whose long gaps are the exceptions from ``e``; ``products[q]``
    is the query term's ``w * q`` (a look-up in L1 instead of a conversion and a product a posting)."""
    current = -1
    for p in range(p0, p1):
        code = int(codes[p])
        gap = code >> IMPACT_BITS
        if gap == 0:
            current = int(exceptions[e])
            e += 1
        else:
            current += gap
        acc[current] += products[code & LEVELS]


@numba.njit(cache=True)
def _search_range(indptr, codes, exceptions, ebase, cbounds, ebounds, n_passages, terms, weights, k, first_block,
                  last_block, block, hs, hd):  # type: ignore[no-untyped-def]
    """Top-k heap of the passages of blocks [first_block, last_block) for one query (weights already scaled)."""
    nt = terms.shape[0]
    products = np.empty((nt, LEVELS + 1), dtype=np.float32)  # w_j * q for every q, in float32
    for j in range(nt):
        for q in range(LEVELS + 1):
            products[j, q] = weights[j] * np.float32(q)
    acc = np.zeros(block, dtype=np.float32)
    size = 0
    for b in range(first_block, last_block):
        b0 = b * block
        n = min(b0 + block, n_passages) - b0
        touched = 0
        for j in range(nt):
            t = terms[j]
            p0 = indptr[t] + np.int64(cbounds[t, b])
            p1 = indptr[t] + np.int64(cbounds[t, b + 1])
            _accumulate(acc, codes, exceptions, products[j], p0, p1, ebase[t] + np.int64(ebounds[t, b]))
            touched += p1 - p0
        if touched == 0:
            continue
        if touched * SPARSE_FRACTION < n:  # few postings: visit them again (in cache), reading what they touched
            for j in range(nt):
                t = terms[j]
                e = ebase[t] + np.int64(ebounds[t, b])
                current = -1
                for p in range(indptr[t] + np.int64(cbounds[t, b]), indptr[t] + np.int64(cbounds[t, b + 1])):
                    gap = int(codes[p]) >> IMPACT_BITS
                    if gap == 0:
                        current = int(exceptions[e])
                        e += 1
                    else:
                        current += gap
                    size = _take(acc, current, b0, hs, hd, size, k)
        else:
            size = _offer_block(acc, n, b0, hs, hd, size, k)
    return size


@numba.njit(cache=True, parallel=True)
def _search_split(indptr, codes, exceptions, ebase, cbounds, ebounds, n_passages, terms, weights, k, block, parts,
                  out_d, out_s):  # type: ignore[no-untyped-def]
    """One query, its blocks cut into ``parts`` contiguous runs searched in parallel, heaps merged."""
    all_s, all_d, sizes = _part_heaps(parts, k)
    for part in numba.prange(parts):
        first, last = part_range(part, parts, cbounds.shape[1] - 1)
        if first < last:
            sizes[part] = _search_range(indptr, codes, exceptions, ebase, cbounds, ebounds, n_passages, terms,
                                        weights, k, first, last, block, all_s[part], all_d[part])
    return _merge_parts(all_s, all_d, sizes, k, out_d, out_s)


class CompactEngine(BlockSearch):
    """Top k of the quantised scores over compact postings (the search API of
    :class:`~apcir.retrieval.engine.SparseEngine`)."""

    def __init__(self, postings: CompactPostings, n_passages: int, block: int = BLOCK) -> None:
        n_terms = postings.indptr.shape[0] - 1
        n_blocks = (int(n_passages) + block - 1) // block
        if (postings.cbounds.shape != (n_terms, n_blocks + 1) or postings.ebounds.shape != postings.cbounds.shape
                or postings.scale.shape[0] != n_terms or postings.ebase.shape[0] != n_terms + 1
                or postings.codes.shape[0] != int(postings.indptr[-1]) or postings.codes.dtype != np.uint16
                or postings.exceptions.shape[0] != int(postings.ebase[-1])):
            raise ApcirError("compact postings are inconsistent: their arrays disagree")
        self.postings = postings
        self.scale = np.ascontiguousarray(postings.scale, dtype=np.float32)
        self.n_passages, self.block, self.n_terms = int(n_passages), int(block), n_terms

    @property
    def nbytes(self) -> int:
        return self.postings.nbytes

    def _arrays(self) -> tuple[np.ndarray, ...]:
        c = self.postings
        return c.indptr, c.codes, c.exceptions, c.ebase, c.cbounds, c.ebounds

    def _query(self, terms: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        terms, weights = super()._query(terms, weights)
        return terms, (weights * self.scale[terms]).astype(np.float32)

    def _split(self, terms: np.ndarray, weights: np.ndarray, k: int, parts: int, out_d: np.ndarray,
               out_s: np.ndarray) -> int:
        return int(_search_split(*self._arrays(), self.n_passages, terms, weights, k, self.block, parts,  # type: ignore[call-arg]
                                 out_d, out_s))

    def _batch(self, q_indptr: np.ndarray, terms: np.ndarray, weights: np.ndarray, k: int, out_d: np.ndarray,
               out_s: np.ndarray, counts: np.ndarray) -> None:
        """One query after the other, each split over the threads (the same top k as one at a time)."""
        parts = numba.get_num_threads()
        for q in range(q_indptr.shape[0] - 1):
            lo, hi = q_indptr[q], q_indptr[q + 1]
            if hi > lo:
                counts[q] = self._split(terms[lo:hi], weights[lo:hi], k, parts, out_d[q], out_s[q])
