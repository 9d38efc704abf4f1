"""The Milvus backends: SPLADE (``milvus``) or dense (``milvus-dense``) vectors in Milvus.

One code path for Milvus Lite (embedded, a local ``.db``) and a Milvus server or
cluster: only the location differs (:mod:`apcir.retrieval.location`).

The collection apcir writes has two fields: ``id`` (VARCHAR, the primary key:
the passage id) and ``vector`` (``SPARSE_FLOAT_VECTOR`` over the model's
vocabulary, or ``FLOAT_VECTOR`` of the model's dimension). What the server must
support, where the manifest lives and the build's state are in
:mod:`apcir.retrieval.milvus.collection` (the collection is created, and the
server checked, before anything is encoded); a collection apcir did not build is
never written to.

**Building** is resumable and never duplicates a passage: the encoded chunks
(the sharded, resumable encoder's output in ``<folder>/_build``) are written
with *upsert* keyed by passage id, each chunk flushed before the count of
chunks written is recorded; a killed build re-upserts at most the chunk it was
writing, which replaces rows rather than adding them. The build ends by
checking that the collection holds exactly one row per passage.

**Search** is exact where Milvus allows it:

* sparse: index ``SPARSE_INVERTED_INDEX`` (inner product) searched with
  ``drop_ratio_search = 0`` (no query term is dropped) and the default
  ``DAAT_MAXSCORE`` algorithm, whose pruning is rank-safe; scores are float32
  sums as in the embedded engine, but summed in another order, so they can
  differ in the last bit and passages with equal scores at the cut can differ;
* dense: index ``FLAT`` (brute force), inner product.

Milvus returns at most 16,384 hits per query (its ``topk`` limit).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from apcir.console import progress as progress_bar
from apcir.contract.records import Run
from apcir.contract.reformulations import QueryInput
from apcir.contract.runs import ranking
from apcir.errors import ApcirError
from apcir.io import json_loads, read_text, write_json
from apcir.retrieval.encoder import encode_and_search
from apcir.retrieval.location import MilvusLocation, parse_milvus
from apcir.retrieval.manifest import IndexManifest
from apcir.retrieval.milvus.client import call, connect
from apcir.retrieval.milvus.collection import (
    ID_FIELD,
    MAX_ID_LENGTH,
    VECTOR_FIELD,
    building_identity,
    describe,
    stored_manifest,
)

__all__ = ["MilvusIndex", "SparseMilvusIndex", "connect", "open_dense", "open_sparse", "write_dense", "write_sparse"]

PROGRESS = "milvus-progress.json"
MAX_TOPK = 16_384
ROWS_PER_REQUEST = 2_000
QUERIES_PER_REQUEST = 64
SPARSE_SEARCH = {"metric_type": "IP", "params": {"drop_ratio_search": 0.0}}
DENSE_SEARCH = {"metric_type": "IP", "params": {}}
# tested with milvus-lite 3.2.2 and a Milvus 2.3.5 standalone server (milvus-dense), with pymilvus 3.0.2


# ---- building ------------------------------------------------------------------------------------
def write_sparse(out: Path, chunks: Iterable[tuple[list[str], sp.csr_matrix]], encoder: Any, *, threads: int,
                 work: Path, target: str) -> dict[str, Any]:
    """``milvus``'s ``build``: SPLADE vectors into a ``SPARSE_FLOAT_VECTOR`` collection."""
    return _write(target, chunks, encoder, work, sparse=True)


def write_dense(out: Path, chunks: Iterable[tuple[list[str], np.ndarray]], encoder: Any, *, threads: int,
                work: Path, target: str) -> dict[str, Any]:
    """``milvus-dense``'s ``build``: embeddings into a ``FLOAT_VECTOR`` collection (FLAT index, exact)."""
    return _write(target, chunks, encoder, work, sparse=False)


def _write(target: str, chunks: Iterable[tuple[list[str], Any]], encoder: Any, work: Path, *,
           sparse: bool) -> dict[str, Any]:
    """Upsert the chunks into the collection :func:`~apcir.retrieval.milvus.collection.prepare` created, after
    the chunks already written by an earlier attempt; end by counting one row per passage."""
    location = parse_milvus(target)
    client = connect(location)
    try:
        identity = building_identity(client, location)
        progress_file = work / PROGRESS
        done = _progress(progress_file, identity)
        dimension = None if sparse else int(encoder.dimension)
        call(location, "loading the collection", client.load_collection, location.collection)
        passages = nonzeros = 0
        for number, (ids, vectors) in enumerate(chunks):
            passages += len(ids)
            if sparse:
                nonzeros += int(vectors.nnz)
            if number < done:
                continue
            for pid in ids:
                if len(pid.encode("utf-8")) > MAX_ID_LENGTH:
                    raise ApcirError(f"passage id {pid[:40]!r}... is longer than {MAX_ID_LENGTH} bytes")
            for start in range(0, len(ids), ROWS_PER_REQUEST):
                rows = _rows(ids[start:start + ROWS_PER_REQUEST], vectors[start:start + ROWS_PER_REQUEST], sparse)
                call(location, "writing passages", client.upsert, location.collection, rows)
            call(location, "flushing", client.flush, location.collection)
            write_json(progress_file, {"collection": identity, "chunks": number + 1})
        stored = _count(client, location)
        if stored != passages:
            raise ApcirError(f"Milvus collection {location} holds {stored} rows for {passages} passages; rebuild it "
                             "with --overwrite")
    finally:
        client.close()
    facts: dict[str, Any] = {"location": str(location)}
    if sparse:
        facts["nonzeros"] = nonzeros
    else:
        facts["dimension"] = dimension
    return facts


def _progress(path: Path, identity: str) -> int:
    """Chunks already written into this collection (0 when the record is of another collection)."""
    if not path.exists():
        return 0
    text = read_text(path, "Milvus build progress")
    try:
        recorded = json_loads(text, path)
        return int(recorded["chunks"]) if recorded.get("collection") == identity else 0
    except (ApcirError, AttributeError, KeyError, TypeError, ValueError):
        return 0


def _rows(ids: list[str], vectors: Any, sparse: bool) -> list[dict[str, Any]]:
    if not sparse:
        return [{ID_FIELD: pid, VECTOR_FIELD: row} for pid, row in zip(ids, np.asarray(vectors, np.float32).tolist())]
    matrix = sp.csr_matrix(vectors, dtype=np.float32)
    indptr, indices, data = matrix.indptr, matrix.indices.tolist(), matrix.data.tolist()
    rows = []
    for row, pid in enumerate(ids):
        lo, hi = indptr[row], indptr[row + 1]
        rows.append({ID_FIELD: pid, VECTOR_FIELD: dict(zip(indices[lo:hi], data[lo:hi]))})
    return rows


def _count(client: Any, location: MilvusLocation) -> int:
    result = call(location, "counting rows", client.query, location.collection, filter="",
                   output_fields=["count(*)"])
    return int(result[0]["count(*)"])


# ---- searching -----------------------------------------------------------------------------------
def open_sparse(folder: Path, manifest: IndexManifest | None, encoder: Any, *, threads: int) -> MilvusIndex:
    """``milvus``'s ``open``."""
    return _open(folder, manifest, encoder, sparse=True)


def open_dense(folder: Path, manifest: IndexManifest | None, encoder: Any, *, threads: int) -> MilvusIndex:
    """``milvus-dense``'s ``open``."""
    if encoder is None:
        raise ApcirError("a milvus-dense index needs a query encoder", path=folder)
    return _open(folder, manifest, encoder, sparse=False)


def _open(folder: Path, manifest: IndexManifest | None, encoder: Any, *, sparse: bool) -> MilvusIndex:
    if manifest is None or manifest.location is None:
        raise ApcirError("a Milvus index's manifest names no location; rebuild it", path=folder)
    kind = SparseMilvusIndex if sparse else MilvusIndex
    return kind(parse_milvus(manifest.location), manifest, encoder, sparse=sparse)


class MilvusIndex:
    """Search over a collection apcir built in Milvus (sparse: a vector backend, like the embedded index)."""

    def __init__(self, location: MilvusLocation, manifest: IndexManifest, encoder: Any, *, sparse: bool) -> None:
        self.location = location
        self.manifest = manifest
        self.encoder = encoder
        self.sparse = sparse
        self.client = connect(location)
        try:
            stored = stored_manifest(location, describe(self.client, location))  # only a complete build is searched
            mine = (manifest.model, manifest.vocab_size, manifest.dimension, manifest.passages, manifest.collection.sha256)
            theirs = (stored.model, stored.vocab_size, stored.dimension, stored.passages, stored.collection.sha256)
            if mine != theirs:
                raise ApcirError(f"Milvus collection {location} holds another index ({stored.describe()}) than its "
                                 f"local manifest says ({manifest.describe()}); rebuild it, or open it again by its location")
            if encoder is not None:
                size = getattr(encoder, "vocab_size", None) if sparse else getattr(encoder, "dimension", None)
                want = manifest.vocab_size if sparse else manifest.dimension
                if size is not None and want is not None and size != want:
                    what = "vocabulary entries" if sparse else "dimensions"
                    raise ApcirError(f"the Milvus index has {want} {what} but {encoder.name} has {size}")
            call(location, "loading the collection", self.client.load_collection, location.collection)
        except BaseException:
            self.client.close()
            raise

    def close(self) -> None:
        self.client.close()

    def search(self, queries: Mapping[str, QueryInput], k: int = 1000, *, progress: bool = True) -> Run:
        return encode_and_search(self, queries, k, progress=progress)

    def search_vectors(self, turn_ids: Sequence[str], vectors: Any, k: int = 1000, *, progress: bool = True) -> Run:
        """Top-k passages for already encoded queries (one row per turn)."""
        if not 1 <= k <= MAX_TOPK:
            raise ApcirError(f"depth k must be between 1 and {MAX_TOPK:,} for Milvus, got {k}")
        turn_ids = list(turn_ids)
        if self.sparse:
            matrix = sp.csr_matrix(vectors, dtype=np.float32)
            if matrix.shape[1] != self.manifest.vocab_size:
                raise ApcirError(f"query vectors have {matrix.shape[1]} dimensions, the index "
                                 f"{self.manifest.vocab_size}")
            data: list[Any] = [dict(zip(matrix.indices[lo:hi].tolist(), matrix.data[lo:hi].tolist()))
                               for lo, hi in zip(matrix.indptr[:-1], matrix.indptr[1:])]
        else:
            rows = np.asarray(vectors, dtype=np.float32)
            if rows.ndim != 2 or rows.shape[1] != self.manifest.dimension:
                raise ApcirError(f"query vectors have shape {rows.shape}, the index {self.manifest.dimension} "
                                 "dimensions")
            data = rows.tolist()
        run: Run = {}
        asked = [i for i, query in enumerate(data) if query]  # an empty sparse query matches nothing
        run.update({turn_ids[i]: {} for i in range(len(data)) if not data[i]})
        with progress_bar("searching Milvus", len(asked), enabled=progress and len(asked) > QUERIES_PER_REQUEST) as advance:
            for start in range(0, len(asked), QUERIES_PER_REQUEST):
                block = asked[start:start + QUERIES_PER_REQUEST]
                hits = call(self.location, "searching", self.client.search, self.location.collection,
                             data=[data[i] for i in block], anns_field=VECTOR_FIELD, limit=k,
                             search_params=SPARSE_SEARCH if self.sparse else DENSE_SEARCH, output_fields=[ID_FIELD])
                for i, found in zip(block, hits):
                    scores = {hit[ID_FIELD]: float(hit["distance"]) for hit in found}
                    if self.sparse:
                        scores = {pid: score for pid, score in scores.items() if score > 0}
                    run[turn_ids[i]] = dict(ranking(scores, k))
                advance(len(block))
        return {turn: run[turn] for turn in turn_ids}



class SparseMilvusIndex(MilvusIndex):
    """A ``milvus`` (SPLADE) index: searched by query vectors, like the embedded index."""

    @property
    def vocab_size(self) -> int:
        return int(self.manifest.vocab_size or 0)

    def passage_vectors(self, ids: list[str]) -> sp.csr_matrix:
        """The stored SPLADE vectors of passages ``ids``."""
        rows = call(self.location, "reading vectors", self.client.get, self.location.collection, ids=ids,
                     output_fields=[VECTOR_FIELD])
        found = {row[ID_FIELD]: row[VECTOR_FIELD] for row in rows}
        missing = [pid for pid in ids if pid not in found]
        if missing:
            raise ApcirError(f"passage {missing[0]} is not in Milvus collection {self.location}")
        matrix = sp.lil_matrix((len(ids), self.vocab_size), dtype=np.float32)
        for r, pid in enumerate(ids):
            for term, weight in found[pid].items():
                matrix[r, int(term)] = weight
        return matrix.tocsr()
