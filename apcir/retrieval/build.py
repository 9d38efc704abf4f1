"""Building indexes: resumable, and for SPLADE sharded so that encoding can run on many machines.

Work in progress lives in ``<out>/_build/``:

    plan.json                        model, passage budget, precision, collection fingerprint, shard count
    shard-00003-of-00008/chunk-000012.npz, .ids   encoded vectors, ``chunk_size`` passages each
                                     (``.npy``: dense embeddings, for the dense backends)
    shard-00003-of-00008/done.json   written when the shard is complete

A shard ``i/N`` (0-based, ``0 <= i < N``) is the passages whose lines start in
the i-th of N equal byte ranges of the collection file, so a shard job reads
only its part of the file. Chunks are written atomically; an interrupted job
re-run with the same arguments skips the chunks on disk; a chunk found damaged
when the shards are merged (a file cut short by a full disk or a copy) is named
and encoded again. ``build_index``
without ``shard`` encodes whatever shards of the plan are missing (all of them
for a one-machine build: one shard) and merges them into the index, then
removes ``_build``. The manifest is written last.

The encoder is handed the chunks one after another (:meth:`~apcir.retrieval.encoder.TextEncoder.encode_chunks`):
the SPLADE encoder reads and tokenises the next chunk in its worker while it encodes this one, and sorts each
chunk by length into batches (so batches are length-sorted over ``chunk_size`` passages; sorting across
chunks would hold a shard in memory or lose the chunk as the unit of resuming, and gains little: see
docs/performance.md). Every shard encodes in the precision the plan records.
"""

from __future__ import annotations

import os
import shutil
import time
import zipfile
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, NoReturn, TypeAlias

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel

from apcir._version import __version__
from apcir.console import note, warn
from apcir.console import progress as progress_bar
from apcir.contract.records import Passage
from apcir.datasets.collection import _passage as passage_from_record
from apcir.datasets.registry import collection_path
from apcir.datasets.store import OFFSETS, build_offsets
from apcir.errors import ApcirError
from apcir.io import atomic_write, json_loads, write_json, write_text
from apcir.options import Options
from apcir.retrieval.encoder import (
    DEFAULT_MODEL,
    SpladeEncoder,
    TextEncoder,
    canonical_model_name,
    make_encoder,
    resolve_device,
)
from apcir.retrieval.location import is_milvus, parse_milvus
from apcir.retrieval.manifest import (
    MANIFEST,
    CollectionInfo,
    IndexManifest,
    index_status,
    now_iso,
    write_manifest,
)
from apcir.retrieval.precision import check_dtype, resolve_dtype, stored_dtype
from apcir.retrieval.registry import BACKENDS, ENCODER_KINDS, BackendSpec, backend_options, build_values

WORK = "_build"
CHUNK_SIZE = 10_000
OWNED_OUTPUTS = (MANIFEST, f"{MANIFEST}.staged", "postings.npz",
                 *(f"postings.{a}.npy" for a in ("indptr", "indices", "data", "local", "bounds")), "ids.txt", "ids.npy", "lucene", "pisa", "vectors.npy", "docid", "index", WORK, OFFSETS,
                 "vocab.txt")


@dataclass(frozen=True)
class BuildResult:
    """What :func:`build_index` did: ``built``, ``up-to-date`` (nothing to do) or ``shard-done``."""

    status: str
    out_dir: Path
    manifest: IndexManifest | None
    message: str
    passages_encoded: int = 0
    seconds: float = 0.0


class BuildPlan(BaseModel):
    backend: str
    model: str
    doc_max_length: int
    shards: int
    chunk_size: int
    collection: CollectionInfo
    encoder_kind: str = "splade"
    dtype: str = "float32"
    """The precision every shard encodes in (a plan from before apcir recorded it: float32, as all were)."""


def parse_shard(text: str | tuple[int, int] | None) -> tuple[int, int] | None:
    """``"3/8"`` -> ``(3, 8)``; shards are numbered from 0 (SLURM array style)."""
    if text is None or isinstance(text, tuple):
        shard = text
    else:
        parts = text.split("/")
        try:
            shard = (int(parts[0]), int(parts[1])) if len(parts) == 2 else None
        except ValueError:
            shard = None
        if shard is None:
            raise ApcirError(f"--shard {text!r}: expected i/N, e.g. 0/8 for the first of eight shards")
    if shard is not None and not (shard[1] >= 1 and 0 <= shard[0] < shard[1]):
        raise ApcirError(f"--shard {shard[0]}/{shard[1]}: need N >= 1 and 0 <= i < N (shards count from 0)")
    return shard


def build_index(
    collection: str | Path,
    backend: str,
    out_dir: str | Path,
    encoder: TextEncoder | str = DEFAULT_MODEL,
    shard: str | tuple[int, int] | None = None,
    *,
    device: str | None = None,
    batch_size: int = 32,
    doc_max_length: int = 256,
    chunk_size: int | None = None,
    threads: int = 2,
    overwrite: bool = False,
    progress: bool = True,
    vectors_from: str | Path | None = None,
    dtype: str | None = "auto",
    options: Options | Mapping[str, Any] | None = None,
) -> BuildResult:
    """Build (or resume, or confirm up to date) an index of a collection.

    ``collection``: a bundled name (``ikat23-provenance``) or a JSONL file in
    either layout apcir reads. ``backend``: a name of
    :data:`~apcir.retrieval.registry.BACKENDS` (``embedded``, ``lucene-splade``,
    ``lucene-bm25``, ``dense``, ``dense-faiss``). ``encoder``: a model name
    (``splade-tiny``, a hub id, a directory) or a loaded encoder of the
    backend's kind (not used for BM25).
    ``shard``: ``"i/N"`` encodes only that shard and returns; run again without
    it, once all shards are done, to merge. ``vectors_from``: an up-to-date
    index of the same collection and model (``embedded`` for SPLADE backends,
    ``dense`` for dense ones) whose passage vectors are reused instead of
    encoding again (e.g. to build ``lucene-splade`` or ``dense-faiss`` from it).
    ``dtype``: the encoder's precision (:mod:`apcir.retrieval.precision`); ``auto`` continues an unfinished
    build in the precision its plan records (the shards of one index are encoded in one precision), and
    accepts an up-to-date index whatever its precision; a precision named explicitly must be the plan's
    and the index's. ``chunk_size``: passages per saved chunk (the unit of resuming); None keeps an unfinished
    build's (else :data:`CHUNK_SIZE`), and one given must be the unfinished build's. ``options``: the backend's own
    (``quantization_scale`` for ``pisa``), validated against its model; those that shape the index are recorded in
    the manifest.
    """
    started = time.perf_counter()
    spec = BACKENDS.get(backend)
    own = backend_options(spec, options)
    if chunk_size is not None and chunk_size < 1:
        raise ApcirError(f"chunk size must be positive, got {chunk_size}")
    _check_target(spec, out_dir)
    path = collection_path(collection)
    name = str(collection)
    shard_spec = parse_shard(shard)
    if path.stat().st_size == 0:
        raise ApcirError("the collection is empty: no passage to index", path=path)
    if spec.encoder is None and shard_spec is not None:
        raise ApcirError(f"--shard splits the encoding of passages; a {backend} index is built in one go")
    model = None
    requested = check_dtype(dtype)
    if spec.encoder is not None:
        if isinstance(encoder, TextEncoder) and encoder.kind != spec.encoder:
            raise ApcirError(f"a {backend} index needs a {spec.encoder} encoder, not a {encoder.kind} one")
        model = encoder.name if isinstance(encoder, TextEncoder) else canonical_model_name(encoder)
        if isinstance(encoder, TextEncoder):
            doc_max_length = encoder.doc_max_length
            requested = encoder.dtype
    loaded = encoder if isinstance(encoder, TextEncoder) else None
    kind = spec.encoder
    precision = {"dtype": resolve_dtype(requested, resolve_device(device))}  # the plan's, once it is known

    def get_encoder() -> TextEncoder:
        nonlocal loaded
        if loaded is None or (loaded is not encoder and loaded.dtype != precision["dtype"]):
            if kind is None:
                raise ApcirError(f"a {backend} index takes no encoder")
            loaded = make_encoder(kind, str(encoder), device=device, doc_max_length=doc_max_length,
                                  batch_size=batch_size, dtype=precision["dtype"])
        return loaded

    # a database backend asks the server what it can do, and creates the collection, before any work
    out, target = _target(spec, out_dir, overwrite=overwrite,
                          dimension=lambda: int(getattr(get_encoder(), "dimension")))  # noqa: B009

    if (out / MANIFEST).exists():
        status = index_status(out, path, backend, model, doc_max_length, build_values(own))
        if status.up_to_date and not overwrite and spec.encoder is not None and requested != "auto":
            recorded = stored_dtype(status.manifest.dtype if status.manifest else None)
            if recorded != requested:
                raise ApcirError(f"an index already exists here and differs: its passages were encoded in "
                                 f"{recorded}, not {requested}; pass --overwrite to encode them again (or leave "
                                 "--dtype out to use it as it is)", path=out)
        if status.up_to_date and not overwrite:
            if not (out / OFFSETS).exists():  # an index from before passage offsets were kept beside it
                build_offsets(path, out / OFFSETS)
            return BuildResult("up-to-date", out, status.manifest, f"{out} is up to date ({status.manifest.describe()})")  # type: ignore[union-attr]
        if not overwrite:
            raise ApcirError(f"an index already exists here and differs: {status.reason}; pass --overwrite to replace it", path=out)
    if overwrite:
        remove_outputs(out)  # a database's collection was replaced by _target
    out.mkdir(parents=True, exist_ok=True)

    if spec.encoder is None:
        return _build_from_texts(spec, path, name, out, threads, started, own)

    info = _collection_info(out, name, path)
    if vectors_from is not None:  # the vectors keep the precision they were encoded in
        source = index_status(vectors_from, path, ENCODER_KINDS.get(spec.encoder).index_backend, model,
                              doc_max_length)
        if source.manifest is not None:
            copied = stored_dtype(source.manifest.dtype)
            if requested not in ("auto", copied):
                raise ApcirError(f"--vectors-from: its passages were encoded in {copied}, not {requested}",
                                 path=Path(vectors_from))
            requested = copied
    plan = _ensure_plan(
        out,
        BuildPlan(
            backend=backend, model=str(model), doc_max_length=doc_max_length,
            shards=shard_spec[1] if shard_spec else 1, chunk_size=chunk_size or CHUNK_SIZE, collection=info,
            encoder_kind=spec.encoder, dtype=resolve_dtype(requested, resolve_device(device)),
        ),
        explicit_shards=shard_spec is not None,
        explicit_dtype=requested != "auto",
        explicit_chunk_size=chunk_size is not None,
    )
    precision["dtype"] = plan.dtype  # an unfinished build continues in the precision it began in
    if vectors_from is not None:
        if shard_spec is not None or plan.shards != 1:
            raise ApcirError("--vectors-from reuses a whole index; it cannot be combined with --shard")
        _copy_vectors(Path(vectors_from), path, plan, out / WORK)
    wanted = [shard_spec[0]] if shard_spec else list(range(plan.shards))
    encoded = 0
    for index in wanted:
        encoded += _encode_shard(path, out / WORK, plan, index, get_encoder, progress)
    if shard_spec is not None:
        missing = [i for i in range(plan.shards) if not (_shard_dir(out / WORK, i, plan.shards) / "done.json").exists()]
        waiting = f"; waiting for shard(s) {', '.join(map(str, missing))}" if missing else "; all shards done"
        return BuildResult(
            "shard-done", out, None,
            f"shard {shard_spec[0]}/{shard_spec[1]} encoded into {out / WORK}{waiting}. "
            "Run the same command without --shard to merge.",
            encoded, time.perf_counter() - started,
        )
    manifest, redone = _merge(out, path, plan, get_encoder(), spec, threads, started, target, own)
    return BuildResult("built", out, manifest, f"built {manifest.describe()} in {out}", encoded + redone,
                       manifest.build_seconds)


def build_from_vectors(
    collection: str | Path,
    backend: str,
    out_dir: str | Path,
    encoder: str | None = None,
    *,
    threads: int = 2,
    overwrite: bool = False,
    chunk_size: int | None = None,
    options: Options | Mapping[str, Any] | None = None,
) -> BuildResult:
    """Index a JsonVectorCollection (``{"id", "contents", "vector": {token: weight}}``) as it is: no encoding.

    With ``encoder`` (a model name) tokens map through that model's vocabulary
    (unknown tokens are counted and reported) and queries can be given as
    text; without it the index keeps the file's own vocabulary, as a Lucene
    impact index does, and is searched with pre-encoded queries
    (``apcir retrieve --query-vectors``). The ``contents`` are the passage texts.
    """
    from apcir.retrieval.vectors import Vocabulary, describe_unknown, read_matrix

    started = time.perf_counter()
    spec = BACKENDS.get(backend)
    own = backend_options(spec, options)
    if spec.encoder != "splade":
        what = "indexes texts" if spec.encoder is None else "indexes dense embeddings"
        raise ApcirError(f"{backend} {what}; --vectors builds a backend that searches sparse vectors "
                         f"({', '.join(b.name for b in BACKENDS if b.encoder == 'splade')})")
    _check_target(spec, out_dir)
    path = collection_path(collection)
    model = canonical_model_name(encoder) if encoder else None
    out, target = _target(spec, out_dir, overwrite=overwrite)
    if (out / MANIFEST).exists():
        status = index_status(out, path, backend, model, options=build_values(own))
        if status.up_to_date and not overwrite and status.manifest is not None and status.manifest.source == "vectors":
            return BuildResult("up-to-date", out, status.manifest, f"{out} is up to date ({status.manifest.describe()})")
        if not overwrite:
            raise ApcirError(f"an index already exists here and differs: {status.reason}; pass --overwrite to replace it",
                             path=out)
    if overwrite:
        remove_outputs(out)  # a database's collection was replaced by _target
    out.mkdir(parents=True, exist_ok=True)
    vocabulary: Any = SpladeEncoder(encoder) if encoder else None
    token_ids = {t: i for i, t in enumerate(vocabulary.vocabulary)} if vocabulary is not None else None
    matrix, ids, stats = read_matrix(path, token_ids)
    if not ids:
        raise ApcirError("the vector collection holds no passage: nothing was indexed", path=path)
    check_unique(ids)
    if stats.unknown:
        warn(f"{path}: {describe_unknown(stats)}; they are left out")
    empty = int(np.count_nonzero(np.diff(matrix.indptr) == 0))
    if empty:
        warn(f"{path}: {empty} passage(s) have no token in the vocabulary left; they match no query")
    if vocabulary is None:
        vocabulary = Vocabulary(list(stats.vocabulary))
        vocabulary.save(out)
    work = out / WORK
    work.mkdir(parents=True, exist_ok=True)
    size = chunk_size or CHUNK_SIZE
    chunks = ((ids[i:i + size], matrix[i:i + size]) for i in range(0, len(ids), size))
    facts = spec.call_with("build", own, out, chunks, vocabulary, threads=threads, work=work, **_at(target))
    lengths = {k: getattr(vocabulary, k) for k in ("query_max_length", "response_max_length", "doc_max_length")
               if hasattr(vocabulary, k)}
    manifest = IndexManifest(
        backend=spec.name, model=model, vocab_size=vocabulary.vocab_size, collection=CollectionInfo.of(str(collection),
                                                                                                       path),
        passages=len(ids), source="vectors", weights="integer" if stats.integral else "float",
        build_seconds=round(time.perf_counter() - started, 3), created=now_iso(), apcir_version=__version__,
        **lengths, **facts,
    )
    build_offsets(path, out / OFFSETS)
    _finish(out, manifest, spec, target)
    shutil.rmtree(work, ignore_errors=True)
    return BuildResult("built", out, manifest, f"built {manifest.describe()} from vectors in {out}", 0,
                       manifest.build_seconds)


def remove_outputs(out: Path) -> None:
    """Delete what apcir writes into an index directory, and nothing else."""
    for name in OWNED_OUTPUTS:
        target = out / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()


# ---- reading a collection's byte range ---------------------------------------------------------
def iter_shard(path: Path, index: int, shards: int) -> Iterator[tuple[str, Passage]]:
    """Passages whose lines start in byte range ``index`` of ``shards``; yields (location, passage)."""
    size = path.stat().st_size
    start, end = size * index // shards, size * (index + 1) // shards
    seen: set[str] = set()
    with path.open("rb") as handle:
        if start > 0:
            handle.seek(start - 1)
            handle.readline()  # finish the line that started before this range
        number = 0
        while True:
            offset = handle.tell()
            if offset >= end:
                break
            raw = handle.readline()
            if not raw:
                break
            number += 1
            where = f"line {number}" if index == 0 else f"shard {index}/{shards}, byte offset {offset}"
            if not raw.strip():
                continue
            line = number if index == 0 else None
            passage = _parse_line(raw, path, line, where)
            if passage.id in seen:
                _fail(f"duplicate passage id {passage.id!r}", path, line, where)
            seen.add(passage.id)
            yield where, passage


def _fail(message: str, path: Path, line: int | None, where: str) -> NoReturn:
    """Raise naming ``file:line`` (shard 0 counts lines) or the shard and byte offset."""
    if line is not None:
        raise ApcirError(message, path=path, line=line)
    raise ApcirError(f"{message} ({where})", path=path)


def _parse_line(raw: bytes, path: Path, line: int | None, where: str) -> Passage:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        _fail(f"not UTF-8 text (byte {raw[exc.start:exc.start + 1]!r})", path, line, where)
    try:
        record: Any = json_loads(text, path, line)
    except ApcirError as exc:
        _fail(exc.message, path, line, where)
    if not isinstance(record, dict):
        _fail(f"expected a JSON object, found {type(record).__name__}", path, line, where)
    try:
        passage = passage_from_record(record, path, line)  # type: ignore[arg-type]
    except ApcirError as exc:
        if line is not None:
            raise
        raise ApcirError(f"{exc} ({where})") from None
    return passage


def count_shard(path: Path, index: int, shards: int) -> int:
    """Passages in a shard; validates every line, and warns about passages with an empty text."""
    total = empty = 0
    first_empty = ""
    for where, passage in iter_shard(path, index, shards):
        total += 1
        if not passage.contents.strip():
            empty += 1
            first_empty = first_empty or f"{passage.id} ({where})"
    if empty:
        warn(f"{path}: {empty} passage(s) have an empty text (first: {first_empty}); they are indexed but "
             "match no query")
    return total


# ---- SPLADE: plan, shards, merge ---------------------------------------------------------------
def _collection_info(out: Path, name: str, path: Path) -> CollectionInfo:
    plan_file = out / WORK / "plan.json"
    if plan_file.exists():  # avoid re-hashing a huge file in every shard job
        previous = BuildPlan.model_validate_json(plan_file.read_text(encoding="utf-8")).collection
        if previous.same_file_contents(path):
            return previous
    return CollectionInfo.of(name, path)


def _ensure_plan(out: Path, plan: BuildPlan, explicit_shards: bool, explicit_dtype: bool = False,
                 explicit_chunk_size: bool = False) -> BuildPlan:
    work = out / WORK
    work.mkdir(parents=True, exist_ok=True)
    plan_file = work / "plan.json"
    if plan_file.exists():
        existing = BuildPlan.model_validate_json(plan_file.read_text(encoding="utf-8"))
        # a resumed build keeps the recorded chunk size unless --chunk-size names one, the shard count unless
        # --shard names one, and the precision unless --dtype names one (so that a merge on a machine without a
        # GPU continues a GPU build); one named that differs from the plan's is refused below
        update: dict[str, Any] = {}
        if not explicit_chunk_size:
            update["chunk_size"] = existing.chunk_size
        if not explicit_shards:
            update["shards"] = existing.shards
        if not explicit_dtype:
            update["dtype"] = existing.dtype
        plan = plan.model_copy(update=update)
        mine, theirs = plan.model_dump(), existing.model_dump()
        mine["collection"].pop("mtime_ns"), theirs["collection"].pop("mtime_ns")
        mine["collection"].pop("path"), theirs["collection"].pop("path")
        mine["collection"].pop("name"), theirs["collection"].pop("name")
        nothing_encoded = not any(p.is_file() and p.name != "plan.json" for p in work.rglob("*"))
        if mine != theirs and nothing_encoded:
            existing = plan  # an earlier attempt stopped before encoding anything (e.g. its model failed to load)
            plan_file.unlink()
        elif mine != theirs:
            diffs = [f"{k}: {theirs[k]} -> {mine[k]}" for k in mine if mine[k] != theirs[k]]
            raise ApcirError(
                f"an unfinished build with other settings is in {work} ({'; '.join(diffs)}); "
                "re-run with the same settings to resume, or pass --overwrite to start again",
                path=out,
            )
        if plan_file.exists():
            return existing
    write_text(plan_file, plan.model_dump_json(indent=2))
    return plan


def _shard_dir(work: Path, index: int, shards: int) -> Path:
    return work / f"shard-{index:05d}-of-{shards:05d}"


def _chunk_paths(folder: Path, number: int, kind: str = "splade") -> tuple[Path, Path]:
    """The vectors (``.npz`` sparse, ``.npy`` dense) and the ids of one chunk."""
    return folder / f"chunk-{number:06d}{ENCODER_KINDS.get(kind).suffix}", folder / f"chunk-{number:06d}.ids"


def _encode_shard(path: Path, work: Path, plan: BuildPlan, index: int, get_encoder: Any, progress: bool) -> int:
    folder = _shard_dir(work, index, plan.shards)
    if (folder / "done.json").exists():
        return 0
    folder.mkdir(parents=True, exist_ok=True)
    done = 0
    while _chunk_paths(folder, done, plan.encoder_kind)[0].exists():
        done += 1
    skip = done * plan.chunk_size
    total = count_shard(path, index, plan.shards)  # also validates every line before any encoding
    encoder: TextEncoder = get_encoder()
    label = f"encoding passages (shard {index}/{plan.shards})" if plan.shards > 1 else "encoding passages"
    encoded = 0
    pending: deque[list[str]] = deque()  # ids of the chunks handed to the encoder, in order

    def chunks() -> Iterator[list[str]]:
        """The texts of the chunks still to encode (the encoder may read them in its worker, ahead of it)."""
        ids: list[str] = []
        texts: list[str] = []
        for ordinal, (_, passage) in enumerate(iter_shard(path, index, plan.shards)):
            if ordinal < skip:
                continue
            ids.append(passage.id)
            texts.append(passage.contents)
            if len(ids) == plan.chunk_size:
                pending.append(ids)
                yield texts
                ids, texts = [], []
        if ids:
            pending.append(ids)
            yield texts

    with progress_bar(label, total, enabled=progress and total - skip > encoder.batch_size) as advance:
        advance(min(skip, total))
        for number, matrix in enumerate(encoder.encode_chunks(chunks(), advance=advance), start=done):
            ids = pending.popleft()
            _write_chunk(folder, number, ids, matrix, plan.encoder_kind)
            encoded += len(ids)
    write_json(folder / "done.json", {"passages": total, "dtype": plan.dtype})
    return encoded


def _copy_vectors(source: Path, path: Path, plan: BuildPlan, work: Path) -> None:
    """Chunks of an existing index's passage vectors (embedded: SPLADE; dense: embeddings), as if encoded here."""
    folder = _shard_dir(work, 0, 1)
    if (folder / "done.json").exists():
        return
    kind = ENCODER_KINDS.get(plan.encoder_kind)
    status = index_status(source, path, kind.index_backend, plan.model, plan.doc_max_length)
    if not status.up_to_date:
        raise ApcirError(f"cannot reuse its vectors (it must be a {kind.index_backend} index): {status.reason}",
                         path=source)
    documents, ids = kind.stored_vectors(source)
    folder.mkdir(parents=True, exist_ok=True)
    for number, start in enumerate(range(0, len(ids), plan.chunk_size)):
        _write_chunk(folder, number, ids[start : start + plan.chunk_size],
                     documents[start : start + plan.chunk_size], plan.encoder_kind)
    write_json(folder / "done.json", {"passages": len(ids), "copied_from": str(source)})


Vectors: TypeAlias = sp.csr_matrix | np.ndarray


def _write_chunk(folder: Path, number: int, ids: list[str], matrix: Vectors, kind: str = "splade") -> None:
    vectors, id_file = _chunk_paths(folder, number, kind)
    write_text(id_file, "".join(f"{pid}\n" for pid in ids))
    with atomic_write(vectors, "wb") as handle:  # the vectors appear last: their presence means the chunk is complete
        ENCODER_KINDS.get(kind).save(handle, matrix)


# What reading a damaged chunk raises: a file cut short or overwritten (BadZipFile, zlib.error, EOFError, a
# ValueError from numpy's header or reshape, KeyError for a member missing from the archive, UnicodeDecodeError
# for the ids) or missing (FileNotFoundError). A folder that cannot be read (PermissionError) is not damage.
_DAMAGE = (zipfile.BadZipFile, zlib.error, EOFError, ValueError, KeyError, FileNotFoundError)


def _read_chunk(vectors: Path, id_file: Path, kind: str) -> tuple[list[str], Vectors] | str:
    """A saved chunk's ids and vectors, or what is wrong with it (a damaged file, or a count that differs)."""
    try:
        ids = id_file.read_text(encoding="utf-8").splitlines()
        matrix = ENCODER_KINDS.get(kind).load(vectors)
    except _DAMAGE as exc:
        return f"{type(exc).__name__}: {exc}"
    if matrix.shape[0] != len(ids):
        return f"{matrix.shape[0]} vectors for {len(ids)} passage ids in {id_file.name}"
    return ids, matrix


def _iter_chunks(work: Path, plan: BuildPlan,
                 redo: Callable[[int, int], tuple[list[str], Vectors]]) -> Iterator[tuple[list[str], Vectors]]:
    """Every saved chunk, shard by shard; a damaged one is named and made again by ``redo(shard, chunk)``."""
    for index in range(plan.shards):
        folder = _shard_dir(work, index, plan.shards)
        number = 0
        while True:
            vectors, id_file = _chunk_paths(folder, number, plan.encoder_kind)
            if not vectors.exists():
                break
            chunk = _read_chunk(vectors, id_file, plan.encoder_kind)
            if isinstance(chunk, str):
                note(f"{vectors}: damaged ({chunk}); encoding its passages again")
                chunk = redo(index, number)
            yield chunk
            number += 1


def _encode_chunk_again(path: Path, work: Path, plan: BuildPlan, encoder: TextEncoder, index: int,
                        number: int) -> tuple[list[str], Vectors]:
    """Encode chunk ``number`` of shard ``index`` again from the collection and save it in place of the damaged
    one (the same passages, in the same order)."""
    first = number * plan.chunk_size
    passages = [passage for _, passage in islice(iter_shard(path, index, plan.shards), first, first + plan.chunk_size)]
    ids, texts = [p.id for p in passages], [p.contents for p in passages]
    folder = _shard_dir(work, index, plan.shards)
    vectors = _chunk_paths(folder, number, plan.encoder_kind)[0]
    if not ids:  # no chunk of this collection's shard: the build folder holds files it did not write
        raise ApcirError(f"damaged, and past the end of shard {index}/{plan.shards} (chunk {number} of "
                         f"{plan.chunk_size} passages); pass --overwrite to start the build again", path=vectors)
    matrix = next(iter(encoder.encode_chunks([texts])))
    _write_chunk(folder, number, ids, matrix, plan.encoder_kind)
    return ids, matrix


@dataclass(frozen=True)
class EncodedChunks:
    """A plan's encoded chunks in collection order, read from disk at each iteration, one at a time (a damaged one
    is made again by ``redo`` and saved in its place): a backend may read them more than once (the embedded one
    counts postings, then places them)."""

    work: Path
    plan: BuildPlan
    redo: Callable[[int, int], tuple[list[str], Vectors]]

    def __iter__(self) -> Iterator[tuple[list[str], Vectors]]:
        return _iter_chunks(self.work, self.plan, self.redo)

    @property
    def ids(self) -> Iterable[str]:
        """The passage ids alone (the chunks' ``.ids`` files, once the chunks have been read), as often as they are
        iterated."""
        return _Reread(lambda: (pid for id_file in self._id_files()
                                for pid in id_file.read_text(encoding="utf-8").splitlines()))

    def _id_files(self) -> Iterator[Path]:
        for index in range(self.plan.shards):
            folder = _shard_dir(self.work, index, self.plan.shards)
            number = 0
            while (paths := _chunk_paths(folder, number, self.plan.encoder_kind))[0].exists():
                yield paths[1]
                number += 1


class _Reread:
    def __init__(self, make: Callable[[], Iterator[str]]) -> None:
        self.make = make

    def __iter__(self) -> Iterator[str]:
        return self.make()


def check_unique(ids: Iterable[str]) -> int:
    """Raise on a passage id that occurs twice (across shards); returns the number of ids.

    Holds an 8-byte hash an id, not the ids: ``ids`` (a list, or :attr:`EncodedChunks.ids`) is read a second time
    only when two hashes are equal, to tell a repeated id from two ids of one hash."""
    hashes = np.fromiter((hash(i) for i in ids), dtype=np.int64)
    count = int(hashes.size)
    hashes.sort()
    repeated = set(hashes[1:][hashes[1:] == hashes[:-1]].tolist())
    del hashes
    if repeated:
        seen: dict[int, list[tuple[int, str]]] = {}
        for position, pid in enumerate(ids):
            key = hash(pid)
            if key in repeated:
                for earlier, other in seen.setdefault(key, []):
                    if other == pid:
                        raise ApcirError(f"duplicate passage id {pid!r} (passages {earlier} and {position} of the "
                                         "collection, in file order)")
                seen[key].append((position, pid))
    return count


def _merge(out: Path, path: Path, plan: BuildPlan, encoder: TextEncoder, spec: BackendSpec, threads: int,
           started: float, target: str | None = None, options: Options | None = None) -> tuple[IndexManifest, int]:
    """Index every saved chunk (a damaged one encoded again); the manifest, and how many passages were encoded
    again."""
    work = out / WORK
    missing = [i for i in range(plan.shards) if not (_shard_dir(work, i, plan.shards) / "done.json").exists()]
    if missing:
        raise ApcirError(f"cannot merge: shard(s) {', '.join(map(str, missing))} of {plan.shards} are not encoded", path=work)
    redone: list[int] = []

    def redo(index: int, number: int) -> tuple[list[str], Vectors]:
        chunk = _encode_chunk_again(path, work, plan, encoder, index, number)
        redone.append(len(chunk[0]))
        return chunk

    chunks = EncodedChunks(work, plan, redo)  # from disk at each pass: one chunk in memory
    own = backend_options(spec, options)
    facts = spec.call_with("build", own, out, chunks, encoder, threads=threads, work=work, **_at(target))
    passages = check_unique(chunks.ids)  # every chunk was read (a damaged one made again): their ids are sound
    if not passages:
        raise ApcirError("the collection holds no passage (only blank lines?): nothing was indexed",
                         path=plan.collection.path)
    manifest = IndexManifest(
        backend=spec.name,
        model=encoder.name,
        query_max_length=encoder.query_max_length,
        response_max_length=encoder.response_max_length,
        doc_max_length=encoder.doc_max_length,
        vocab_size=getattr(encoder, "vocab_size", None),
        dtype=plan.dtype,
        collection=plan.collection,
        passages=passages,
        build_seconds=round(time.perf_counter() - started, 3),
        created=now_iso(),
        apcir_version=__version__,
        options=build_values(own),
        **facts,
    )
    build_offsets(Path(plan.collection.path), out / OFFSETS)
    _finish(out, manifest, spec, target)
    shutil.rmtree(work, ignore_errors=True)
    return manifest, sum(redone)


def check_buildable(spec: BackendSpec) -> None:
    """One line for a backend whose index apcir does not build (``pyterrier``: its retriever's own)."""
    if spec.build is None:
        raise ApcirError(f"apcir builds no {spec.name} index: its retriever opens an index of its own (build that "
                         "with its own tool, e.g. PyTerrier); give its folder as the index")


def _check_target(spec: BackendSpec, out_dir: str | Path) -> None:
    """A database backend needs a location, a directory backend a directory."""
    check_buildable(spec)
    if is_milvus(out_dir) != (spec.remote is not None):
        able = ", ".join(b.name for b in BACKENDS if b.remote is not None)
        if spec.remote is not None:
            raise ApcirError(f"a {spec.name} index lives in Milvus: give --out milvus:PATH.db (Milvus Lite) or "
                             "milvus://HOST:PORT/COLLECTION (a server)")
        raise ApcirError(f"{out_dir} is a Milvus location; build it with --backend {able}")


def _target(spec: BackendSpec, out_dir: str | Path, *, overwrite: bool = False,
            dimension: Callable[[], int] | None = None) -> tuple[Path, str | None]:
    """The local folder of an index and, for a backend that keeps it in a database, its location.

    For a database, this is where the build first talks to the server: it checks what the server can do and
    creates the (empty) collection, or replaces it (``overwrite``), before anything is encoded; the local folder
    is the collection's companion folder, named by the collection's identity."""
    _check_target(spec, out_dir)
    if spec.remote is None:
        return Path(out_dir).expanduser(), None
    location = str(parse_milvus(out_dir))
    folder = spec.call_remote("prepare", location, spec.name, dimension=dimension, overwrite=overwrite)
    return folder, location


def _finish(out: Path, manifest: IndexManifest, spec: BackendSpec, target: str | None) -> None:
    """Write the manifest, the mark of a complete index. For a database, the local manifest is staged first,
    the server records its copy, and only then is the local one put in place: a failure on either side leaves
    the build unfinished on both."""
    if target is None:
        write_manifest(out, manifest)
        return
    staged = out / f"{MANIFEST}.staged"
    write_json(staged, manifest.model_dump(), indent=2)
    try:
        spec.call_remote("publish", target, manifest)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    os.replace(staged, out / MANIFEST)


def _at(target: str | None) -> dict[str, str]:
    return {} if target is None else {"target": target}


# ---- backends that index texts ------------------------------------------------------------------
def _build_from_texts(spec: BackendSpec, path: Path, name: str, out: Path, threads: int, started: float,
                      options: Options) -> BuildResult:
    work = out / WORK
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    count_shard(path, 0, 1)  # validates every line and warns about empty texts
    facts = spec.call_with("build", options, out, (p for _, p in iter_shard(path, 0, 1)), threads=threads, work=work)
    if not facts.get("passages"):
        raise ApcirError("the collection holds no passage (only blank lines?): nothing was indexed", path=path)
    manifest = IndexManifest(
        backend=spec.name,
        collection=CollectionInfo.of(name, path),
        build_seconds=round(time.perf_counter() - started, 3),
        created=now_iso(),
        apcir_version=__version__,
        options=build_values(options),
        **facts,
    )
    build_offsets(path, out / OFFSETS)
    write_manifest(out, manifest)
    shutil.rmtree(work, ignore_errors=True)
    return BuildResult("built", out, manifest, f"built {manifest.describe()} in {out}", 0, manifest.build_seconds)
