"""Writing the embedded index's arrays with bounded memory: two passes over the encoded chunks, then a third over
the written postings, a range of terms at a time.

The files are byte for byte those :func:`apcir.retrieval.embedded.save_embedded` writes from the whole collection
in memory (passages sorted by id, each posting list sorted by passage), but no array of the collection's postings
is ever held:

1. **Count** (one pass over the chunks): each term's postings (``np.bincount`` of each chunk's term ids) and the
   passage ids, as fixed-width UTF-8 bytes. The ids are then sorted (a stable ``np.argsort`` of that array: UTF-8
   byte order is Python's string order, and equal ids keep their file order, as ``sorted`` does), which gives each
   passage its number (its rank in id order). ``postings.indptr.npy`` is the running sum of the counts;
   ``ids.npy`` and ``ids.txt`` are written from the sorted ids.
2. **Place** (a second pass): each group of chunks (about :data:`GROUP_POSTINGS` postings) is turned term-major
   (``tocsc``) and each term's run of postings (passage numbers and weights) is written at that term's cursor in
   ``postings.indices.npy`` and ``postings.data.npy`` (``os.pwrite``: the files are not mapped, so their pages
   are the page cache's, not this process's).
3. **Finish** (over the written postings, a range of terms of at most :data:`RANGE_POSTINGS` postings at a time):
   a posting list whose passages are not in order (chunks that are not in id order) is sorted in place; then the
   engine's block-local offsets (``postings.local.npy``) and its term x block table (``postings.bounds.npy``) are
   derived for the range (:func:`apcir.retrieval.engine.engine_arrays`) and appended.

Memory, whatever the collection's size: the working arrays of one group and one range (about 20 bytes a posting of
:data:`GROUP_POSTINGS`, 10 of :data:`RANGE_POSTINGS`, plus a posting list's sort when chunks come out of id
order, 16 bytes a posting of the longest list sorted), the vocabulary's counts and cursors, and per passage: its
id as fixed-width bytes (the longest id's length: 27 bytes for ClueWeb22's ``clueweb22-en0000-00-00000:0``),
8 bytes of the sort's permutation while the ids are written, and 4 bytes of its number (with the sort's own buffer,
up to 4 more): about 40 bytes a passage, 4.7 GB at ClueWeb22-B's 116.8M passages, against 16 bytes or more a
*posting* (about 430 GB there) for the build in memory.

The chunks are iterated twice. A one-shot iterator (a generator) is read once and each chunk is kept in ``work``
for the second pass (as much disk again as the chunks); apcir's build hands the backend its encoded chunks on disk
(:class:`apcir.retrieval.chunks.EncodedChunks`), which are simply read again.
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any

import numba
import numpy as np
import scipy.sparse as sp

from apcir.io import atomic_write
from apcir.retrieval.compact import encode_terms, term_scales
from apcir.retrieval.engine import BLOCK, engine_arrays

GROUP_POSTINGS = 16_000_000
"""Postings placed at a time (pass 2): about 320 MB of working arrays."""
RANGE_POSTINGS = 32_000_000
"""Postings finished at a time (pass 3): about 320 MB of working arrays (one term more when a list is longer)."""
BOUNDS_BYTES = 64 << 20
"""At most this much of the term x block table is computed at a time."""
IDS_AT_ONCE = 1_000_000
SPILL = "embedded-chunks"
SCRATCH = "embedded-scratch"

Chunks = Iterable[tuple[list[str], sp.csr_matrix]]


def _canonical(matrix: Any) -> sp.csr_matrix:
    """A chunk as float32 CSR without repeated (passage, term) entries (weights of a repeated term added)."""
    matrix = sp.csr_matrix(matrix, dtype=np.float32)
    if not matrix.has_canonical_format:
        matrix = matrix.copy()
        matrix.sum_duplicates()
    return matrix


def _reiterable(chunks: Chunks, work: Path) -> tuple[Chunks, Iterator[tuple[list[str], sp.csr_matrix]]]:
    """(the chunks for the second pass, the first pass): a one-shot iterator's chunks are kept in ``work``."""
    if iter(chunks) is not chunks:
        return chunks, iter(chunks)
    folder = work / SPILL
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    kept: list[Path] = []

    def first() -> Iterator[tuple[list[str], sp.csr_matrix]]:
        for number, (ids, matrix) in enumerate(chunks):
            matrix = _canonical(matrix)
            path = folder / f"chunk-{number:06d}.npz"
            sp.save_npz(path, matrix, compressed=False)
            kept.append(path)
            yield ids, matrix

    return _Spilled(kept), first()


class _Spilled:
    """The chunks a one-shot iterator gave, read back from ``work`` (ids are not needed again)."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths

    def __iter__(self) -> Iterator[tuple[list[str], sp.csr_matrix]]:
        for path in self.paths:
            yield [], sp.load_npz(path).tocsr()


class _Counted:
    """What the first pass learns: the vocabulary's size, each term's postings, the passage ids."""

    def __init__(self) -> None:
        self.vocab: int | None = None
        self.counts = np.zeros(0, dtype=np.int64)
        self.id_parts: list[np.ndarray] = []
        self.rows = 0

    def add(self, ids: list[str], matrix: sp.csr_matrix) -> None:
        if self.vocab is None:
            self.vocab = matrix.shape[1]
            self.counts = np.zeros(self.vocab, dtype=np.int64)
        if matrix.shape[1] != self.vocab:
            raise ValueError(f"a chunk has {matrix.shape[1]} columns, the first {self.vocab}")
        self.counts += np.bincount(matrix.indices, minlength=self.vocab)
        self.rows += matrix.shape[0]
        self.id_parts.append(np.array([pid.encode("utf-8") for pid in ids], dtype=bytes) if ids
                             else np.zeros(0, dtype="S1"))

    def id_array(self) -> np.ndarray:
        """Every passage id as fixed-width bytes, in chunk order (the parts are let go as they are copied)."""
        width = max([1, *(part.itemsize for part in self.id_parts)])
        total = sum(part.shape[0] for part in self.id_parts)
        array = np.empty(total, dtype=f"S{width}")
        at = 0
        while self.id_parts:
            part = self.id_parts.pop(0)
            array[at : at + part.shape[0]] = part
            at += part.shape[0]
        return array


def write_postings(chunks: Chunks, vocab_size: int, *, work: Path, files: dict[str, Path], ids_txt: Path,
                   compact: bool = False) -> int:
    """Write the embedded index's arrays (``files``: array name -> path, ``ids`` the id array) and ``ids_txt``
    from encoded chunks (passages x vocabulary each), with bounded memory; returns the number of postings.

    ``compact``: the postings as :mod:`apcir.retrieval.compact` stores them (``files`` names its arrays instead of
    ``local`` and ``bounds``); the passage numbers and float weights are then
    written in ``work`` only (8 bytes a posting of scratch disk) and removed at the end."""
    again, first = _reiterable(chunks, work)
    counted = _Counted()
    for ids, matrix in first:
        matrix = _canonical(matrix)
        if matrix.shape[0] != len(ids):
            raise ValueError(f"{matrix.shape[0]} vectors for {len(ids)} ids")
        counted.add(ids, matrix)
    vocab = counted.vocab if counted.vocab is not None else vocab_size
    counts = counted.counts if counted.vocab is not None else np.zeros(vocab, dtype=np.int64)
    ids_bytes = counted.id_array()
    n = ids_bytes.shape[0]
    order = np.argsort(ids_bytes, kind="stable")
    in_order = bool(_is_identity(order))
    _write_ids(files["ids"], ids_txt, ids_bytes, order)
    del ids_bytes
    rank = np.empty(n, dtype=np.int32)
    rank[order] = np.arange(n, dtype=np.int32)
    del order
    indptr = np.zeros(vocab + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    nnz = int(indptr[-1])
    _save(files["indptr"], indptr)
    scratch = work / SCRATCH
    if compact:
        scratch.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        indices = _NpyFile(stack, scratch / "indices.npy" if compact else files["indices"], np.dtype(np.int32),
                           (nnz,))
        data = _NpyFile(stack, scratch / "data.npy" if compact else files["data"], np.dtype(np.float32), (nnz,))
        _place(again, rank, indptr, indices, data)
        del rank
        n_blocks = (n + BLOCK - 1) // BLOCK
        if compact:
            _finish(indptr, n, indices, data, sort=not in_order, compact=_CompactFiles(stack, files, vocab, n_blocks, nnz))
        else:
            bounds = _NpyFile(stack, files["bounds"], np.dtype(np.int64), (vocab, n_blocks + 1))
            local = _NpyFile(stack, files["local"], np.dtype(np.uint16), (nnz,))
            _finish(indptr, n, indices, data, sort=not in_order, exact=(local, bounds))
    shutil.rmtree(work / SPILL, ignore_errors=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return nnz


class _NpyFile:
    """A ``.npy`` file written in place (header first, then ``pwrite`` at offsets), replacing its target on
    success (:func:`apcir.io.atomic_write`)."""

    def __init__(self, stack: ExitStack, path: Path, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        self.handle: IO[bytes] = stack.enter_context(atomic_write(path, "wb"))
        np.lib.format.write_array_header_1_0(self.handle, {"descr": np.lib.format.dtype_to_descr(dtype),
                                                           "fortran_order": False, "shape": shape})
        self.handle.flush()
        self.fd = self.handle.fileno()
        self.start = self.handle.tell()
        self.dtype = dtype
        self.size = int(np.prod(shape)) * dtype.itemsize
        os.ftruncate(self.fd, self.start + self.size)
        self.appended = 0

    def write_at(self, position: int, array: np.ndarray) -> None:
        """Write ``array`` at element ``position``."""
        buffer = memoryview(np.ascontiguousarray(array, dtype=self.dtype).view(np.uint8).data)
        offset = self.start + position * self.dtype.itemsize
        while buffer:
            written = os.pwrite(self.fd, buffer, offset)
            buffer, offset = buffer[written:], offset + written

    def read(self, position: int, count: int) -> np.ndarray:
        raw = os.pread(self.fd, count * self.dtype.itemsize, self.start + position * self.dtype.itemsize)
        return np.frombuffer(raw, dtype=self.dtype).copy()

    def append(self, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array, dtype=self.dtype)
        self.write_at(self.appended, array.ravel())
        self.appended += array.size

    def shrink(self, count: int) -> None:
        """Make a one-dimensional file sized for its most elements hold its first ``count`` (the header's shape
        rewritten: numpy pads it to the same length for any count)."""
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": np.lib.format.dtype_to_descr(self.dtype),
                                                      "fortran_order": False, "shape": (count,)})
        if len(header.getvalue()) != self.start:
            raise ValueError("the header's length would change")
        os.pwrite(self.fd, header.getvalue(), 0)
        os.ftruncate(self.fd, self.start + count * self.dtype.itemsize)


def _save(path: Path, array: np.ndarray) -> None:
    with atomic_write(path, "wb") as handle:
        np.save(handle, np.ascontiguousarray(array), allow_pickle=False)


def _write_ids(id_file: Path, text_file: Path, ids_bytes: np.ndarray, order: np.ndarray) -> None:
    """``ids.npy`` (the sorted fixed-width ids) and ``ids.txt`` (one a line), a slice of ids at a time."""
    with atomic_write(id_file, "wb") as binary, atomic_write(text_file, "wb") as text:
        np.lib.format.write_array_header_1_0(binary, {"descr": np.lib.format.dtype_to_descr(ids_bytes.dtype),
                                                      "fortran_order": False, "shape": ids_bytes.shape})
        for start in range(0, order.shape[0], IDS_AT_ONCE):
            part = ids_bytes[order[start : start + IDS_AT_ONCE]]
            binary.write(part.tobytes())
            text.write(b"".join(raw + b"\n" for raw in part.tolist()))


def _groups(chunks: Chunks) -> Iterator[sp.csr_matrix]:
    """The chunks' matrices, stacked a group of about :data:`GROUP_POSTINGS` postings at a time."""
    group: list[sp.csr_matrix] = []
    held = 0
    for _, matrix in chunks:
        matrix = _canonical(matrix)
        group.append(matrix)
        held += matrix.nnz
        if held >= GROUP_POSTINGS:
            yield sp.vstack(group, format="csr", dtype=np.float32) if len(group) > 1 else group[0]
            group, held = [], 0
    if group:
        yield sp.vstack(group, format="csr", dtype=np.float32) if len(group) > 1 else group[0]


def _place(chunks: Chunks, rank: np.ndarray, indptr: np.ndarray, indices: _NpyFile, data: _NpyFile) -> None:
    """Pass 2: each group's postings, term-major, written at each term's cursor (passage numbers by ``rank``)."""
    cursor = indptr[:-1].copy()
    row = 0
    for group in _groups(chunks):
        by_term = group.tocsc()
        numbers = rank[row : row + group.shape[0]][by_term.indices]
        row += group.shape[0]
        present = np.flatnonzero(np.diff(by_term.indptr))
        for term, lo, hi in zip(present.tolist(), by_term.indptr[present].tolist(),
                                by_term.indptr[present + 1].tolist()):
            indices.write_at(int(cursor[term]), numbers[lo:hi])
            data.write_at(int(cursor[term]), by_term.data[lo:hi])
            cursor[term] += hi - lo
    if row != rank.shape[0] or not np.array_equal(cursor, indptr[1:]):
        raise ValueError("the chunks changed between the two passes over them")


def _ranges(indptr: np.ndarray, terms_at_once: int) -> Iterator[tuple[int, int]]:
    """Consecutive term ranges of at most :data:`RANGE_POSTINGS` postings (a longer list alone) and at most
    ``terms_at_once`` terms."""
    n_terms = indptr.shape[0] - 1
    start = 0
    while start < n_terms:
        limit = min(n_terms, start + terms_at_once)
        end = int(np.searchsorted(indptr, indptr[start] + RANGE_POSTINGS, side="right")) - 1
        end = max(start + 1, min(end, limit))
        yield start, end
        start = end


class _CompactFiles:
    """The compact layout's files (:mod:`apcir.retrieval.compact`), written a range of terms at a time."""

    def __init__(self, stack: ExitStack, files: dict[str, Path], vocab: int, n_blocks: int, nnz: int) -> None:
        self.codes = _NpyFile(stack, files["codes"], np.dtype(np.uint16), (nnz,))
        self.exceptions = _NpyFile(stack, files["exceptions"], np.dtype(np.uint16), (nnz,))  # shrunk at the end
        self.cbounds = _NpyFile(stack, files["cbounds"], np.dtype(np.uint32), (vocab, n_blocks + 1))
        self.ebounds = _NpyFile(stack, files["ebounds"], np.dtype(np.uint32), (vocab, n_blocks + 1))
        self.scale = _NpyFile(stack, files["scale"], np.dtype(np.float32), (vocab,))
        self.ebase_path = files["ebase"]
        self.ebase = [np.zeros(1, dtype=np.int64)]
        self.written = 0

    def add(self, lo: int, relative: np.ndarray, table: np.ndarray, offsets: np.ndarray, weights: np.ndarray) -> None:
        scale = term_scales(relative, weights)
        codes, exceptions, cbounds, ebounds, counts = encode_terms(relative, table, offsets, weights, scale)
        self.codes.write_at(lo, codes)
        self.exceptions.write_at(self.written, exceptions)
        self.ebase.append(self.written + np.cumsum(counts))
        self.written += exceptions.size
        self.cbounds.append(cbounds)
        self.ebounds.append(ebounds)
        self.scale.append(scale)

    def close(self) -> None:
        self.exceptions.shrink(self.written)
        _save(self.ebase_path, np.concatenate(self.ebase))


def _finish(indptr: np.ndarray, n: int, indices: _NpyFile, data: _NpyFile, *, sort: bool,
            exact: tuple[_NpyFile, _NpyFile] | None = None, compact: _CompactFiles | None = None) -> None:
    """Pass 3: sort the posting lists that need it, then the engine's offsets and term x block table (``exact``:
    the ``local`` and ``bounds`` files), or the compact layout's arrays (``compact``)."""
    n_blocks = (n + BLOCK - 1) // BLOCK
    for t0, t1 in _ranges(indptr, max(1, BOUNDS_BYTES // (8 * (n_blocks + 1)))):
        lo, hi = int(indptr[t0]), int(indptr[t1])
        numbers = indices.read(lo, hi - lo)
        relative = indptr[t0 : t1 + 1] - lo
        unsorted = sort and not _lists_sorted(relative, numbers)
        weights = data.read(lo, hi - lo) if unsorted or compact is not None else None
        if unsorted:
            assert weights is not None
            _sort_lists(relative, numbers, weights)
            indices.write_at(lo, numbers)
            data.write_at(lo, weights)
        table, offsets = engine_arrays(relative, numbers, n, BLOCK)
        if compact is not None:
            assert weights is not None
            compact.add(lo, relative, table, offsets, weights)
        else:
            assert exact is not None
            local, bounds = exact
            table += lo
            local.append(offsets)
            bounds.append(table)
    if compact is not None:
        compact.close()


@numba.njit(cache=True)
def _is_identity(order: np.ndarray) -> bool:
    for i in range(order.shape[0]):
        if order[i] != i:
            return False
    return True


@numba.njit(cache=True)
def _lists_sorted(indptr: np.ndarray, numbers: np.ndarray) -> bool:
    for t in range(indptr.shape[0] - 1):
        for p in range(indptr[t] + 1, indptr[t + 1]):
            if numbers[p] < numbers[p - 1]:
                return False
    return True


@numba.njit(cache=True)
def _sort_lists(indptr: np.ndarray, numbers: np.ndarray, weights: np.ndarray) -> None:
    """Sort each posting list by passage number, its weights along (numbers are distinct within a list)."""
    for t in range(indptr.shape[0] - 1):
        lo, hi = indptr[t], indptr[t + 1]
        ordered = True
        for p in range(lo + 1, hi):
            if numbers[p] < numbers[p - 1]:
                ordered = False
                break
        if ordered:
            continue
        order = np.argsort(numbers[lo:hi])
        numbers[lo:hi] = numbers[lo:hi][order]
        weights[lo:hi] = weights[lo:hi][order]
