"""A build's work folder: its plan, and the passage vectors its shards encode, chunk by chunk.

Work in progress lives in ``<out>/_build/``:

    plan.json                        model, passage budget, precision, collection fingerprint, shard count
    shard-00003-of-00008/chunk-000012.npz, .ids   encoded vectors, ``chunk_size`` passages each
                                     (``.npy``: dense embeddings, for the dense backends)
    shard-00003-of-00008/done.json   written when the shard is complete

Chunks are written atomically; an interrupted job re-run with the same arguments skips the chunks on disk; a
chunk found damaged when the shards are merged (a file cut short by a full disk or a copy) is named and encoded
again (:class:`EncodedChunks`).

The encoder is handed the chunks one after another (:meth:`~apcir.retrieval.encoder.TextEncoder.encode_chunks`):
the SPLADE encoder reads and tokenises the next chunk in its worker while it encodes this one, and sorts each
chunk by length into batches (so batches are length-sorted over ``chunk_size`` passages; sorting across
chunks would hold a shard in memory or lose the chunk as the unit of resuming, and gains little: see
docs/performance.md). Every shard encodes in the precision the plan records.
"""

from __future__ import annotations

import zipfile
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel

from apcir.console import note
from apcir.console import progress as progress_bar
from apcir.errors import ApcirError
from apcir.io import atomic_write, write_json, write_text
from apcir.retrieval.encoder import TextEncoder
from apcir.retrieval.manifest import CollectionInfo, index_status
from apcir.retrieval.registry import ENCODER_KINDS
from apcir.retrieval.shards import count_shard, iter_shard

WORK = "_build"
CHUNK_SIZE = 10_000


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


def collection_info(out: Path, name: str, path: Path) -> CollectionInfo:
    plan_file = out / WORK / "plan.json"
    if plan_file.exists():  # avoid re-hashing a huge file in every shard job
        previous = BuildPlan.model_validate_json(plan_file.read_text(encoding="utf-8")).collection
        if previous.same_file_contents(path):
            return previous
    return CollectionInfo.of(name, path)


def ensure_plan(out: Path, plan: BuildPlan, explicit_shards: bool, explicit_dtype: bool = False,
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


def shard_dir(work: Path, index: int, shards: int) -> Path:
    return work / f"shard-{index:05d}-of-{shards:05d}"


def chunk_paths(folder: Path, number: int, kind: str = "splade") -> tuple[Path, Path]:
    """The vectors (``.npz`` sparse, ``.npy`` dense) and the ids of one chunk."""
    return folder / f"chunk-{number:06d}{ENCODER_KINDS.get(kind).suffix}", folder / f"chunk-{number:06d}.ids"


def encode_shard(path: Path, work: Path, plan: BuildPlan, index: int, get_encoder: Any, progress: bool) -> int:
    folder = shard_dir(work, index, plan.shards)
    if (folder / "done.json").exists():
        return 0
    folder.mkdir(parents=True, exist_ok=True)
    done = 0
    while chunk_paths(folder, done, plan.encoder_kind)[0].exists():
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
            write_chunk(folder, number, ids, matrix, plan.encoder_kind)
            encoded += len(ids)
    write_json(folder / "done.json", {"passages": total, "dtype": plan.dtype})
    return encoded


def copy_vectors(source: Path, path: Path, plan: BuildPlan, work: Path) -> None:
    """Chunks of an existing index's passage vectors (embedded: SPLADE; dense: embeddings), as if encoded here."""
    folder = shard_dir(work, 0, 1)
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
        write_chunk(folder, number, ids[start : start + plan.chunk_size],
                     documents[start : start + plan.chunk_size], plan.encoder_kind)
    write_json(folder / "done.json", {"passages": len(ids), "copied_from": str(source)})


Vectors: TypeAlias = sp.csr_matrix | np.ndarray


def write_chunk(folder: Path, number: int, ids: list[str], matrix: Vectors, kind: str = "splade") -> None:
    vectors, id_file = chunk_paths(folder, number, kind)
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
        folder = shard_dir(work, index, plan.shards)
        number = 0
        while True:
            vectors, id_file = chunk_paths(folder, number, plan.encoder_kind)
            if not vectors.exists():
                break
            chunk = _read_chunk(vectors, id_file, plan.encoder_kind)
            if isinstance(chunk, str):
                note(f"{vectors}: damaged ({chunk}); encoding its passages again")
                chunk = redo(index, number)
            yield chunk
            number += 1


def encode_chunk_again(path: Path, work: Path, plan: BuildPlan, encoder: TextEncoder, index: int,
                        number: int) -> tuple[list[str], Vectors]:
    """Encode chunk ``number`` of shard ``index`` again from the collection and save it in place of the damaged
    one (the same passages, in the same order)."""
    first = number * plan.chunk_size
    passages = [passage for _, passage in islice(iter_shard(path, index, plan.shards), first, first + plan.chunk_size)]
    ids, texts = [p.id for p in passages], [p.contents for p in passages]
    folder = shard_dir(work, index, plan.shards)
    vectors = chunk_paths(folder, number, plan.encoder_kind)[0]
    if not ids:  # no chunk of this collection's shard: the build folder holds files it did not write
        raise ApcirError(f"damaged, and past the end of shard {index}/{plan.shards} (chunk {number} of "
                         f"{plan.chunk_size} passages); pass --overwrite to start the build again", path=vectors)
    matrix = next(iter(encoder.encode_chunks([texts])))
    write_chunk(folder, number, ids, matrix, plan.encoder_kind)
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
            folder = shard_dir(self.work, index, self.plan.shards)
            number = 0
            while (paths := chunk_paths(folder, number, self.plan.encoder_kind))[0].exists():
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
