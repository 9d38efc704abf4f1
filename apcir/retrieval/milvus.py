"""The Milvus backends: SPLADE (``milvus``) or dense (``milvus-dense``) vectors in Milvus.

One code path for Milvus Lite (embedded, a local ``.db``) and a Milvus server or
cluster: only the location differs (:mod:`apcir.retrieval.location`).

The collection apcir writes has two fields: ``id`` (VARCHAR, the primary key:
the passage id) and ``vector`` (``SPARSE_FLOAT_VECTOR`` over the model's
vocabulary, or ``FLOAT_VECTOR`` of the model's dimension). Its properties hold
``apcir.manifest`` (the index manifest as JSON) once the build is complete, and
``apcir.build`` while it is running; a collection with neither was not built by
apcir and is never written to.

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

import json
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
from apcir.io import read_text, write_json
from apcir.retrieval.location import MilvusLocation, parse_milvus
from apcir.retrieval.manifest import MANIFEST, IndexManifest, write_manifest

ID_FIELD = "id"
VECTOR_FIELD = "vector"
MANIFEST_PROPERTY = "apcir.manifest"
BUILD_PROPERTY = "apcir.build"
PROGRESS = "milvus-progress.json"
MAX_ID_LENGTH = 512
MAX_TOPK = 16_384
ROWS_PER_REQUEST = 2_000
QUERIES_PER_REQUEST = 64
SPARSE_SEARCH = {"metric_type": "IP", "params": {"drop_ratio_search": 0.0}}
DENSE_SEARCH = {"metric_type": "IP", "params": {}}
TESTED_WITH = "milvus-lite 3.2.2 with pymilvus 3.0.2"


# ---- connecting ---------------------------------------------------------------------------------
def connect(location: MilvusLocation) -> Any:
    """A ``pymilvus.MilvusClient`` for the location; failures are one line."""
    try:
        from pymilvus import MilvusClient
    except ImportError:
        raise ApcirError("the milvus backends need pymilvus (and milvus-lite for milvus:PATH.db): "
                         "pip install pymilvus milvus-lite, or pip install 'apcir[milvus]'") from None
    if location.lite:
        parent = Path(location.uri).parent
        if not parent.is_dir():
            raise ApcirError(f"cannot open Milvus Lite database {location.uri}: folder {parent} does not exist")
    try:
        return MilvusClient(uri=location.uri, token=location.token(), timeout=30)
    except Exception as exc:  # pymilvus raises MilvusException, grpc and OS errors alike
        raise ApcirError(f"cannot reach Milvus at {location}: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return str(message).strip().splitlines()[0]


def _call(location: MilvusLocation, what: str, function: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return function(*args, **kwargs)
    except ApcirError:
        raise
    except Exception as exc:
        raise ApcirError(f"Milvus at {location}: {what} failed: {_reason(exc)}") from None


def properties(client: Any, location: MilvusLocation) -> dict[str, str] | None:
    """The collection's properties, or None when it does not exist."""
    if not _call(location, "listing collections", client.has_collection, location.collection):
        return None
    described = _call(location, "describing the collection", client.describe_collection, location.collection)
    return dict(described.get("properties") or {})


def stored_manifest(client: Any, location: MilvusLocation) -> IndexManifest | None:
    """The manifest a complete apcir build left in the collection (None: no such collection)."""
    props = properties(client, location)
    if props is None:
        return None
    if MANIFEST_PROPERTY not in props:
        state = "an unfinished apcir build" if BUILD_PROPERTY in props else "not built by apcir"
        raise ApcirError(f"Milvus collection {location} is {state}; "
                         + ("re-run `apcir index build` to finish it" if BUILD_PROPERTY in props
                            else "name another collection (apcir never writes into a collection it did not create)"))
    try:
        return IndexManifest.model_validate_json(props[MANIFEST_PROPERTY])
    except ValueError:  # pydantic's ValidationError, a property written by something else
        raise ApcirError(f"Milvus collection {location} holds an unreadable apcir manifest; rebuild it with "
                         "--overwrite") from None


def restore_folder(location: MilvusLocation) -> None:
    """Write the companion folder's manifest from the collection when the folder has none (another machine)."""
    folder = location.folder
    if (folder / MANIFEST).exists():
        return
    client = connect(location)
    try:
        props = properties(client, location)
        unfinished = props is not None and BUILD_PROPERTY in props and MANIFEST_PROPERTY not in props
        manifest = None if unfinished else stored_manifest(client, location)  # an unfinished build resumes
    finally:
        client.close()
    if manifest is not None:
        folder.mkdir(parents=True, exist_ok=True)
        write_manifest(folder, manifest)


# ---- building ------------------------------------------------------------------------------------
def write_sparse(out: Path, chunks: Iterable[tuple[list[str], sp.csr_matrix]], encoder: Any, *, threads: int,
                 work: Path, target: str) -> dict[str, Any]:
    """``milvus``'s ``build``: SPLADE vectors into a ``SPARSE_FLOAT_VECTOR`` collection."""
    return _write(target, chunks, encoder, work, sparse=True)


def write_dense(out: Path, chunks: Iterable[tuple[list[str], np.ndarray]], encoder: Any, *, threads: int,
                work: Path, target: str) -> dict[str, Any]:
    """``milvus-dense``'s ``build``: embeddings into a ``FLOAT_VECTOR`` collection (FLAT index, exact)."""
    return _write(target, chunks, encoder, work, sparse=False)


def publish(target: str, manifest: IndexManifest) -> None:
    """Mark the build complete: the manifest becomes the collection's ``apcir.manifest`` property."""
    location = parse_milvus(target)
    client = connect(location)
    try:
        _call(location, "recording the manifest", client.alter_collection_properties, location.collection,
              properties={MANIFEST_PROPERTY: manifest.model_dump_json()})
        _call(location, "recording the manifest", client.drop_collection_properties, location.collection,
              property_keys=[BUILD_PROPERTY])
    finally:
        client.close()


def drop(target: str) -> None:
    """Remove a collection apcir built (``--overwrite``); a collection apcir did not build is refused."""
    location = parse_milvus(target)
    client = connect(location)
    try:
        props = properties(client, location)
        if props is None:
            return
        if MANIFEST_PROPERTY not in props and BUILD_PROPERTY not in props:
            raise ApcirError(f"Milvus collection {location} was not built by apcir; it is not replaced")
        _call(location, "dropping the collection", client.drop_collection, location.collection)
    finally:
        client.close()


def _write(target: str, chunks: Iterable[tuple[list[str], Any]], encoder: Any, work: Path, *,
           sparse: bool) -> dict[str, Any]:
    location = parse_milvus(target)
    client = connect(location)
    try:
        progress_file = work / PROGRESS
        done = _progress(progress_file, location)
        props = properties(client, location)
        dimension = None if sparse else int(encoder.dimension)
        if props is not None and BUILD_PROPERTY not in props:
            if MANIFEST_PROPERTY not in props:
                raise ApcirError(f"Milvus collection {location} exists and was not built by apcir; name another "
                                 "collection")
            _call(location, "dropping the previous index", client.drop_collection, location.collection)
            props = None
        if props is None:
            done = 0
            _create(client, location, sparse, dimension)
        _call(location, "loading the collection", client.load_collection, location.collection)
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
                _call(location, "writing passages", client.upsert, location.collection, rows)
            _call(location, "flushing", client.flush, location.collection)
            write_json(progress_file, {"location": str(location), "chunks": number + 1})
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


def _progress(path: Path, location: MilvusLocation) -> int:
    if not path.exists():
        return 0
    try:
        recorded = json.loads(read_text(path, "Milvus build progress"))
        return int(recorded["chunks"]) if recorded.get("location") == str(location) else 0
    except (ValueError, KeyError, TypeError):
        return 0


def _create(client: Any, location: MilvusLocation, sparse: bool, dimension: int | None) -> None:
    from pymilvus import DataType

    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field(ID_FIELD, DataType.VARCHAR, is_primary=True, max_length=MAX_ID_LENGTH)
    if sparse:
        schema.add_field(VECTOR_FIELD, DataType.SPARSE_FLOAT_VECTOR)
    else:
        schema.add_field(VECTOR_FIELD, DataType.FLOAT_VECTOR, dim=dimension)
    index = client.prepare_index_params()
    if sparse:
        index.add_index(field_name=VECTOR_FIELD, index_type="SPARSE_INVERTED_INDEX", metric_type="IP")
    else:
        index.add_index(field_name=VECTOR_FIELD, index_type="FLAT", metric_type="IP")
    _call(location, "creating the collection", client.create_collection, location.collection, schema=schema,
          index_params=index, consistency_level="Strong", properties={BUILD_PROPERTY: "1"})


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
    result = _call(location, "counting rows", client.query, location.collection, filter="",
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
        stored = stored_manifest(self.client, location)
        if stored is None:
            raise ApcirError(f"Milvus collection {location} does not exist (was it dropped?); rebuild it with "
                             "`apcir index build`")
        mine = (manifest.model, manifest.vocab_size, manifest.dimension, manifest.passages, manifest.collection.sha256)
        theirs = (stored.model, stored.vocab_size, stored.dimension, stored.passages, stored.collection.sha256)
        if mine != theirs:
            raise ApcirError(f"Milvus collection {location} holds another index ({stored.describe()}) than its "
                             f"local manifest says ({manifest.describe()}); rebuild, or remove {location.folder}")
        if encoder is not None:
            size = getattr(encoder, "vocab_size", None) if sparse else getattr(encoder, "dimension", None)
            want = manifest.vocab_size if sparse else manifest.dimension
            if size is not None and want is not None and size != want:
                what = "vocabulary entries" if sparse else "dimensions"
                raise ApcirError(f"the Milvus index has {want} {what} but {encoder.name} has {size}")
        _call(location, "loading the collection", self.client.load_collection, location.collection)

    def close(self) -> None:
        self.client.close()

    def search(self, queries: Mapping[str, QueryInput], k: int = 1000, *, progress: bool = True) -> Run:
        if not hasattr(self.encoder, "encode_queries"):
            raise ApcirError("this index was built from precomputed vectors without a model: search it with "
                             "pre-encoded queries (--query-vectors)")
        turn_ids = list(queries)
        vectors = self.encoder.encode_queries([queries[t] for t in turn_ids], progress=progress)
        return self.search_vectors(turn_ids, vectors, k, progress=progress)

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
                hits = _call(self.location, "searching", self.client.search, self.location.collection,
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
        rows = _call(self.location, "reading vectors", self.client.get, self.location.collection, ids=ids,
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
