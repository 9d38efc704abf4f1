"""Building indexes: resumable, and for SPLADE sharded so that encoding can run on many machines.

``build_index`` with ``shard`` encodes that shard of the collection (:mod:`apcir.retrieval.shards`) into the
build's work folder (:mod:`apcir.retrieval.chunks`, which holds the plan and the encoded chunks); without
``shard`` it encodes whatever shards of the plan are missing (all of them for a one-machine build: one shard)
and merges them into the index, then removes ``_build``. The manifest is written last. A backend that indexes
texts (BM25) is built in one go; a database backend (Milvus) is prepared on its server before anything is encoded.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from apcir._version import __version__
from apcir.console import warn
from apcir.datasets.registry import collection_path
from apcir.datasets.store import OFFSETS, build_offsets
from apcir.errors import ApcirError
from apcir.io import write_json
from apcir.options import Options
from apcir.retrieval.chunks import (
    CHUNK_SIZE,
    WORK,
    BuildPlan,
    EncodedChunks,
    Vectors,
    check_unique,
    collection_info,
    copy_vectors,
    encode_chunk_again,
    encode_shard,
    ensure_plan,
    shard_dir,
)
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
from apcir.retrieval.shards import count_shard, iter_shard, parse_shard

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
    build's (else :data:`~apcir.retrieval.chunks.CHUNK_SIZE`), and one given must be the unfinished build's. ``options``: the backend's own
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

    info = collection_info(out, name, path)
    if vectors_from is not None:  # the vectors keep the precision they were encoded in
        source = index_status(vectors_from, path, ENCODER_KINDS.get(spec.encoder).index_backend, model,
                              doc_max_length)
        if source.manifest is not None:
            copied = stored_dtype(source.manifest.dtype)
            if requested not in ("auto", copied):
                raise ApcirError(f"--vectors-from: its passages were encoded in {copied}, not {requested}",
                                 path=Path(vectors_from))
            requested = copied
    plan = ensure_plan(
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
        copy_vectors(Path(vectors_from), path, plan, out / WORK)
    wanted = [shard_spec[0]] if shard_spec else list(range(plan.shards))
    encoded = 0
    for index in wanted:
        encoded += encode_shard(path, out / WORK, plan, index, get_encoder, progress)
    if shard_spec is not None:
        missing = [i for i in range(plan.shards) if not (shard_dir(out / WORK, i, plan.shards) / "done.json").exists()]
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

def _merge(out: Path, path: Path, plan: BuildPlan, encoder: TextEncoder, spec: BackendSpec, threads: int,
           started: float, target: str | None = None, options: Options | None = None) -> tuple[IndexManifest, int]:
    """Index every saved chunk (a damaged one encoded again); the manifest, and how many passages were encoded
    again."""
    work = out / WORK
    missing = [i for i in range(plan.shards) if not (shard_dir(work, i, plan.shards) / "done.json").exists()]
    if missing:
        raise ApcirError(f"cannot merge: shard(s) {', '.join(map(str, missing))} of {plan.shards} are not encoded", path=work)
    redone: list[int] = []

    def redo(index: int, number: int) -> tuple[list[str], Vectors]:
        chunk = encode_chunk_again(path, work, plan, encoder, index, number)
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
