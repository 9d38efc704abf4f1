"""The retrieval stage: an index (built if missing), then one run per retrieval input.

``apcir index build`` / ``apcir retrieve`` and ``apcir run`` call these functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp

from apcir.console import shown, warn
from apcir.contract.layout import RunLayout
from apcir.contract.records import Run
from apcir.contract.reformulations import ReformulationRecord
from apcir.contract.stage import Stage, StageContext, StageResult, an_output, not_an_input
from apcir.errors import ApcirError
from apcir.io import atomic_write
from apcir.retrieval.backends import Backend, VectorBackend, locate, open_index
from apcir.retrieval.location import is_milvus
from apcir.retrieval.manifest import is_foreign_lucene
from apcir.retrieval.settings import RetrievalSettings


def ensure_index(settings: RetrievalSettings, *, progress: bool = True) -> tuple[Path, str]:
    """The index directory of ``settings``, built from ``collection`` if missing; and what was done.

    A Lucene index apcir did not build (the organisers') is used as it is and
    never built into; without a collection the index must exist. A backend whose index apcir does not build
    (``pyterrier``: its retriever's own) takes the folder as it is, which must exist.
    """
    from apcir.retrieval.build import build_index
    from apcir.retrieval.registry import BACKENDS

    if BACKENDS.get(settings.backend).build is None:
        folder = Path(settings.index).expanduser()
        if not folder.exists():
            raise ApcirError(f"index not found: the {settings.backend} backend's retriever opens an index of its "
                             "own, which apcir does not build (build it first, e.g. with PyTerrier)", path=folder)
        return folder, f"{folder}: the {settings.backend} retriever's own index, used as it is"

    if is_milvus(settings.index):
        if settings.collection is None:
            return locate(settings.index), f"{settings.index} (no collection configured: used as it is)"
        result = build_index(settings.collection, settings.backend, settings.index, settings.encoder,
                             progress=progress, dtype=settings.dtype, options=settings.options)
        return result.out_dir, result.message
    index_dir = Path(settings.index).expanduser()
    if is_foreign_lucene(index_dir):
        return index_dir, f"{index_dir} is a Lucene index apcir did not build; used as it is"
    if settings.collection is None:
        if not index_dir.exists():
            raise ApcirError("index directory not found and no collection configured to build it", path=index_dir)
        return index_dir, f"{index_dir} (no collection configured: used as it is)"
    result = build_index(settings.collection, settings.backend, index_dir, settings.encoder, progress=progress,
                         dtype=settings.dtype, options=settings.options)
    return index_dir, result.message


def open_backend(settings: RetrievalSettings, index_dir: Path) -> Backend:
    """The index opened with the configured backend and, if it has one, encoder (a Milvus index through the
    configured location, which may be another address than the one it was built through)."""
    where: str | Path = settings.index if is_milvus(settings.index) else index_dir
    return open_index(where, settings.encoder if settings.uses_encoder else None, backend=settings.backend,
                      batch_size=settings.batch_size, dtype=settings.dtype, options=settings.options)


def resolved_dtype(settings: RetrievalSettings) -> str | None:
    """The precision the configured encoder runs in on this machine (``auto`` resolved), None without one."""
    if not settings.uses_encoder:
        return None
    from apcir.retrieval.encoder import default_device
    from apcir.retrieval.precision import resolve_dtype

    return resolve_dtype(settings.dtype, default_device())


def save_query_vectors(path: Path, turn_ids: list[str], matrix: sp.csr_matrix) -> None:
    """Query vectors of one list (turn ids and a CSR matrix) as an ``.npz``."""
    matrix = sp.csr_matrix(matrix, dtype=np.float32)
    with atomic_write(path, "wb") as handle:
        np.savez(handle, turns=np.array(turn_ids, dtype=str), data=matrix.data, indices=matrix.indices,
                 indptr=matrix.indptr, shape=np.array(matrix.shape))


def load_query_vectors(path: Path) -> dict[str, sp.csr_matrix]:
    """``{turn: 1 x vocabulary vector}`` saved by :func:`save_query_vectors`."""
    try:
        with np.load(path) as data:
            matrix = sp.csr_matrix((data["data"], data["indices"], data["indptr"]), shape=tuple(data["shape"]))
            turns = [str(t) for t in data["turns"]]
    except (OSError, ValueError, KeyError) as exc:
        raise ApcirError(f"unreadable query vectors ({exc})", path=path) from None
    return {turn: matrix[row] for row, turn in enumerate(turns)}


class PassageTexts(Protocol):
    """Where passage texts come from: only the ones asked for are read."""

    def texts(self, ids: Iterable[str]) -> dict[str, str]: ...


def passage_texts_for(settings: RetrievalSettings, index_dir: Path) -> PassageTexts | None:
    """The texts of the configured passages file (``passages``, else ``collection``), read by byte offset.

    The offsets of the index's own collection are kept beside the index; any
    other file gets its offsets cached once (see :mod:`apcir.datasets.store`).
    Without a file, a Lucene index that stores its documents (BM25) answers
    from them; otherwise there are no texts (None).
    """
    from apcir.datasets.registry import collection_path
    from apcir.datasets.store import OFFSETS, store_for
    from apcir.retrieval.manifest import MANIFEST, read_manifest
    from apcir.retrieval.registry import BACKENDS, BARE_LUCENE

    source = settings.passages_source
    if source is None:
        spec = BACKENDS.get(BARE_LUCENE if is_foreign_lucene(index_dir) else settings.backend)
        return spec.text_store(index_dir)  # type: ignore[no-any-return]
    path = collection_path(source)
    offsets = None
    if (index_dir / MANIFEST).exists() and (index_dir / OFFSETS).exists():
        if read_manifest(index_dir).collection.same_file_contents(path):
            offsets = index_dir / OFFSETS
    return store_for(path, offsets)


def search_query_vectors(backend: Backend, path: Path, k: int) -> Run:
    """Search pre-encoded queries: a JsonVectorCollection whose ids are turn ids (``--query-vectors``).

    Tokens map through the index's vocabulary (unknown ones are counted and
    reported); a query left with no token is warned about and gets no passages,
    as an empty text query does (none left at all is an error). Queries
    quantised otherwise than the index (weights written as JSON integers for a
    float index, or the reverse) are refused: their scores would not compare.
    """
    from apcir.ids import canonical_turn_id
    from apcir.retrieval.vectors import describe_unknown, read_matrix

    if not isinstance(backend, VectorBackend):
        raise ApcirError("pre-encoded queries need an index of vectors (embedded or lucene-splade), not BM25")
    vocabulary = getattr(backend.encoder, "vocabulary", None)
    if vocabulary is None:
        raise ApcirError("this index has no vocabulary to map query tokens through")
    matrix, ids, stats = read_matrix(path, {token: i for i, token in enumerate(vocabulary)}, what="query")
    if not ids:
        raise ApcirError("no query vector in the file", path=path)
    turn_ids = []
    for raw in ids:
        try:
            turn_ids.append(canonical_turn_id(raw))
        except ApcirError:
            turn_ids.append(raw)
    if len(set(turn_ids)) != len(turn_ids):
        raise ApcirError("a turn id appears twice", path=path)
    matrix = sp.csr_matrix(matrix[:, : backend.vocab_size], shape=(matrix.shape[0], backend.vocab_size))
    matrix.eliminate_zeros()
    kept = (np.diff(matrix.indptr) > 0).tolist()
    empty = [turn for turn, has_terms in zip(turn_ids, kept) if not has_terms]
    if stats.unknown:
        warn(f"{path}: {describe_unknown(stats)}; they are left out")
    if len(empty) == len(turn_ids):
        raise ApcirError("no query has a token in the index's vocabulary: nothing to search",
                         path=path)
    manifest = backend.manifest
    index_integer = manifest is not None and manifest.weights == "integer"
    if stats.integral != index_integer:
        index_kind = "quantised (integer) weights" if index_integer else "float weights"
        query_kind = "integer weights" if stats.integral else "float weights"
        raise ApcirError(f"the index holds {index_kind} but the queries have {query_kind} (a weight written as "
                         "37 is an integer, 37.0 or 0.37 a float): quantise both the same way (e.g. round(100 * w)), "
                         "or neither", path=path)
    if empty:
        listed = shown(empty)
        warn(f"{path}: {len(empty)} turn(s) have no query token left in the index's vocabulary and get no passages: "
             f"{listed}")
    asked = [turn for turn, has_terms in zip(turn_ids, kept) if has_terms]
    run = backend.search_vectors(asked, sp.csr_matrix(matrix[np.flatnonzero(kept)]), k)
    run.update({turn: {} for turn in empty})
    return run


def export_vectors(backend: Backend, out: Path, *, integer_scale: float | None = None, with_text: bool = False) -> int:
    """The passage vectors an index keeps, as a JsonVectorCollection; returns the number of passages."""
    from apcir.datasets.store import store_for
    from apcir.retrieval.vectors import write_vectors

    ids = getattr(backend, "ids", None)
    vectors = getattr(backend, "passage_vectors", None)
    vocabulary = getattr(getattr(backend, "encoder", None), "vocabulary", None)
    if ids is None or vectors is None or vocabulary is None:
        raise ApcirError("only an embedded index keeps its passage vectors; export them from one")
    contents = None
    if with_text:
        manifest = backend.manifest
        assert manifest is not None
        texts = store_for(Path(manifest.collection.path)).texts(ids)
        contents = [texts.get(pid, "") for pid in ids]
    return write_vectors(out, list(ids), vectors(list(ids)), list(vocabulary), contents=contents,
                         integer_scale=integer_scale)


@dataclass
class RetrieveStage(Stage):
    """``apcir run``'s retrieval: one run per ``outs`` key, searching the records' input ``fields[key]``
    (rewrite, rewrite_response, third), with the query vectors kept beside each run when there is an encoder."""

    label: str
    reformulations: Path
    index: Path
    """The index's content stands for the collection and the passage encoder."""
    k: int
    backend: str
    encoder: str | None
    """The query encoder (None: the backend has none, e.g. BM25)."""
    fields: dict[str, str]
    experiment: str
    """The run tags are ``<experiment>-<key>``."""
    outs: dict[str, Path] = an_output()
    records: dict[str, ReformulationRecord] = not_an_input()
    dtype: str | None = None
    """The query encoder's precision, resolved on this machine (None: no encoder)."""
    options: dict[str, Any] = dataclass_field(default_factory=dict)
    """The backend's own options (a PyTerrier retriever's reference, PISA's query algorithm, ...)."""
    option_files: list[Path] = dataclass_field(default_factory=list)
    """Files the options name (a retriever's Python file), standing for their content."""

    @classmethod
    def of(cls, label: str, settings: RetrievalSettings, index: Path, reformulations: Path,
           records: dict[str, ReformulationRecord], fields: dict[str, str], outs: dict[str, Path],
           experiment: str) -> RetrieveStage:
        own = settings.options.model_dump(mode="json") if settings.options is not None else {}
        return cls(label, reformulations, index, settings.k, settings.backend,
                   settings.encoder if settings.uses_encoder else None, fields, experiment, outs, records,
                   resolved_dtype(settings), own, settings.option_files)

    @property
    def name(self) -> str:
        return self.label

    def vectors(self) -> dict[str, Path]:
        return {key: RunLayout.query_vectors(p) for key, p in self.outs.items()} if self.encoder else {}

    def outputs(self) -> list[Path]:
        return [*self.outs.values(), *self.vectors().values()]

    def run(self, context: StageContext) -> StageResult:
        from apcir.retrieval.core import ListRetrieval, list_queries

        queries = {key: list_queries(self.records, field) for key, field in self.fields.items()}
        runs, vectors = ListRetrieval(context.backend(), self.k, context.progress).search_keeping_vectors(queries)
        keep = self.vectors()
        for key, run in runs.items():
            context.write_run(run, self.outs[key], f"{self.experiment}-{key}", self.k)
            if key in keep and key in vectors:
                save_query_vectors(keep[key], *vectors[key])
        count = sum(len(q) for q in queries.values())
        context.counts.retrieval_calls += count
        return StageResult(f"{count} queries")
