"""SPLADE over a PISA index (pyterrier-pisa's engine: C++, no Java, no server).

**What is indexed.** The passage vectors apcir encodes (the chunks of :mod:`apcir.retrieval.chunks`, so a pisa
index is built in shards and resumed as every encoder backend is), quantised to integer impacts
``round(scale x w)`` (``quantization_scale``, 100 by default, recorded in the manifest; weights that round to 0
are dropped). Queries are encoded by the same encoder and quantised the same way; PISA scores a passage as the sum
over shared terms of query impact x passage impact, which apcir divides by ``scale^2`` so scores are on the
embedded index's scale (as :mod:`apcir.retrieval.lucene`'s impact index does).

**Exactness.** Every query algorithm offered (:data:`~apcir.retrieval.options.PisaAlgorithm`) is rank-safe: it
returns the exact top k of the quantised scores, so a pisa run differs from the embedded engine's only where
quantisation moves a passage across another (scores within about ``|q|/scale`` of each other) and, at scale 100 on
the demo, keeps 0.9994 of the embedded top 1000 (``tests/retrieval/test_retrieval_pisa.py`` measures it). The
algorithms differ in speed only; ``maxscore`` is the default. PISA breaks ties by its document number; apcir
numbers passages by passage id *descending*, so the passages kept at a tie at the cut are the embedded engine's
(trec_eval's order), and every run comes out in apcir's one ranking order.

**On disk** (``<index>/pisa/``, a pyterrier-pisa index: ``PisaIndex(path, stemmer="none").quantized()`` opens it
in PyTerrier too): PISA's binary collection (``inv.docs``, ``inv.freqs``, ``inv.sizes``), the lexicons
(``fwd.documents``, ``fwd.terms`` and their ``.doclex``/``.termlex``), ``pt_meta.json``, and the compressed
index with its block-max data (``quantized.q0.bmw.64.block_simdbp``, ``quantized.q0.bmw.64``), which the build
writes so that the first search does not.

**The build streams.** Each encoded chunk is inverted on its own into a *run* under ``_build/pisa-runs`` (its
postings, term-major, as raw uint32 files; the chunk's memory only), written atomically, so a build killed while
inverting resumes after the last run written. The runs are then merged a range of terms at a time, each range
holding at most :data:`MERGE_POSTINGS` postings (a single term with more alone), into the binary collection; only
the per-run term counts (runs x vocabulary x 4 bytes), the passage numbering and sizes (8 bytes a passage) and the
passage ids stay in memory throughout. The last steps are PISA's own (block-max data, compression), which read the
binary collection memory-mapped and write as they go (measured: 11 and 34 million postings, 145 and 156 MB of
anonymous memory).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from apcir.contract.records import Run
from apcir.contract.reformulations import QueryInput
from apcir.contract.runs import ranking
from apcir.errors import ApcirError
from apcir.io import atomic_write, write_json, write_text
from apcir.retrieval.embedded import check_k
from apcir.retrieval.encoder import encode_and_search
from apcir.retrieval.manifest import IndexManifest
from apcir.retrieval.options import PisaOptions
from apcir.retrieval.vectors import quantize

PISA_DIR = "pisa"
RUNS = "pisa-runs"
MERGE_POSTINGS = 16_000_000
"""Postings gathered at a time by the merge (about 32 bytes each in working arrays at the peak: some 0.5 GB)."""
BLOCK_SIZE = 64
"""PISA's block size of the block-max data (pyterrier-pisa's default)."""
ENCODING = "block_simdbp"
U32 = np.uint32


def _pisa() -> Any:
    try:
        import pyterrier_pisa
    except ImportError:
        raise ApcirError("the pisa backend needs pyterrier-pisa: pip install 'apcir[pyterrier]'") from None
    return pyterrier_pisa


# ---- building ------------------------------------------------------------------------------------
def lexicon_order(vocabulary: list[str]) -> tuple[np.ndarray, list[str]]:
    """Each term id's rank among the tokens in byte order (PISA looks terms up in a sorted lexicon), and the
    tokens in that order. A token PISA's line-based lexicon cannot hold (a line break, a repeat) is refused."""
    if len(set(vocabulary)) != len(vocabulary):
        raise ApcirError("the vocabulary repeats a token: a PISA lexicon holds each token once")
    bad = next((t for t in vocabulary if not t or "\n" in t or "\r" in t), None)
    if bad is not None:
        raise ApcirError(f"token {bad!r} cannot be a line of PISA's lexicon (empty, or holding a line break)")
    order = sorted(range(len(vocabulary)), key=lambda t: vocabulary[t].encode("utf-8"))
    rank = np.empty(len(vocabulary), dtype=np.int64)
    rank[order] = np.arange(len(vocabulary))
    return rank, [vocabulary[t] for t in order]


def _run_paths(runs: Path, number: int) -> dict[str, Path]:
    stem = f"run-{number:06d}"
    return {part: runs / f"{stem}.{part}" for part in ("docs", "freqs", "sizes", "counts")}


def _write_raw(path: Path, array: np.ndarray) -> None:
    with atomic_write(path, "wb") as handle:
        handle.write(np.ascontiguousarray(array).tobytes())


def write_run(runs: Path, number: int, matrix: sp.csr_matrix, first: int, rank: np.ndarray, scale: int) -> None:
    """One chunk's postings, term-major by lexicon rank then passage ordinal (``first`` + row): raw uint32
    ``docs`` (ordinals), ``freqs`` (impacts) and ``sizes`` (each passage's impact sum), then ``counts`` (postings
    per term, an .npy), whose presence marks the run complete."""
    impacts = quantize(matrix, scale)
    rows = np.repeat(np.arange(impacts.shape[0], dtype=np.int64), np.diff(impacts.indptr))
    terms = rank[impacts.indices]
    order = np.lexsort((rows, terms))
    paths = _run_paths(runs, number)
    _write_raw(paths["docs"], (rows[order] + first).astype(U32))
    _write_raw(paths["freqs"], impacts.data[order].astype(U32))
    _write_raw(paths["sizes"], np.asarray(impacts.sum(axis=1), dtype=np.int64).ravel().astype(U32))
    with atomic_write(paths["counts"], "wb") as handle:
        np.save(handle, np.bincount(terms, minlength=len(rank)).astype(U32), allow_pickle=False)


def _runs_state(runs: Path, scale: int, lexicon: list[str]) -> None:
    """Keep the runs of an earlier attempt only when they were quantised and numbered as this one's."""
    import hashlib

    state = {"scale": scale, "lexicon": hashlib.sha256("\n".join(lexicon).encode()).hexdigest()}
    marker = runs / "state.json"
    if runs.exists() and (not marker.exists() or json.loads(marker.read_text(encoding="utf-8")) != state):
        shutil.rmtree(runs)
    runs.mkdir(parents=True, exist_ok=True)
    if not marker.exists():
        write_json(marker, state)


def write_index(out: Path, chunks: Iterable[tuple[list[str], sp.csr_matrix]], encoder: Any, *, threads: int,
                work: Path, options: PisaOptions) -> dict[str, Any]:
    """``pisa``'s ``build``: invert each chunk into a run (skipping those an interrupted build wrote), merge the
    runs into PISA's binary collection, then compress it (see the module doc)."""
    scale = options.quantization_scale
    rank, lexicon = lexicon_order(list(encoder.vocabulary))
    runs = work / RUNS
    _runs_state(runs, scale, lexicon)
    id_parts: list[np.ndarray] = []
    passages = number = 0
    for number, (chunk_ids, matrix) in enumerate(chunks, start=1):  # noqa: B007 - the count is used below
        id_parts.append(np.array([pid.encode("utf-8") for pid in chunk_ids], dtype=bytes))
        if not _run_paths(runs, number - 1)["counts"].exists():
            write_run(runs, number - 1, sp.csr_matrix(matrix), passages, rank, scale)
        passages += len(chunk_ids)
    if passages >= 2**32 - 1:
        raise ApcirError(f"{passages} passages: a PISA index numbers at most 2^32 - 2")
    ids = np.concatenate(id_parts) if id_parts else np.zeros(0, dtype="S1")
    target = out / PISA_DIR
    if target.exists():
        shutil.rmtree(target)
    staging = work / "pisa-index"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    nonzeros, _ = merge_runs(runs, number, ids, lexicon, staging)
    _finish_index(staging, threads, work / "pisa.log")
    os.replace(staging, target)
    shutil.rmtree(runs, ignore_errors=True)
    return {"nonzeros": nonzeros, "quantization_scale": scale}


def passage_numbers(ids: np.ndarray) -> np.ndarray:
    """PISA's number of each passage (by its ordinal in the collection): passages by id descending, so PISA's tie
    order (number ascending) is trec_eval's (id descending)."""
    order = np.argsort(ids, kind="stable")[::-1]
    numbers = np.empty(len(ids), dtype=U32)
    numbers[order] = np.arange(len(ids), dtype=U32)
    return numbers


def merge_runs(runs: Path, count: int, ids: np.ndarray, lexicon: list[str], folder: Path) -> tuple[int, int]:
    """Write PISA's binary collection (``inv.docs``, ``inv.freqs``, ``inv.sizes``) and lexicons from ``count`` runs,
    a range of terms at a time; returns the postings and the terms written (terms with no posting are left out)."""
    numbers = passage_numbers(ids)
    counts = np.stack([np.load(_run_paths(runs, n)["counts"]) for n in range(count)]) if count else \
        np.zeros((0, len(lexicon)), dtype=U32)
    totals = counts.sum(axis=0, dtype=np.int64)
    sizes = np.zeros(len(ids), dtype=U32)
    first = 0
    for n in range(count):
        part = np.fromfile(_run_paths(runs, n)["sizes"], dtype=U32)
        sizes[numbers[first : first + len(part)]] = part
        first += len(part)
    with (folder / "inv.sizes").open("wb") as handle:
        np.asarray([len(ids)], dtype=U32).tofile(handle)
        sizes.tofile(handle)
    position = np.zeros(count, dtype=np.int64)  # each run's postings read so far
    written = 0
    with (folder / "inv.docs").open("wb") as docs_out, (folder / "inv.freqs").open("wb") as freqs_out:
        np.asarray([1, len(ids)], dtype=U32).tofile(docs_out)
        for start, end in term_ranges(totals, MERGE_POSTINGS):
            docs, freqs = _merge_range(runs, counts[:, start:end], position, numbers)
            if docs is None or freqs is None:
                continue
            df = totals[start:end]
            present = df[df > 0].astype(U32)
            heads = np.concatenate([[0], np.cumsum(present, dtype=np.int64)[:-1]])
            np.insert(docs, heads, present).tofile(docs_out)
            np.insert(freqs, heads, present).tofile(freqs_out)
            written += len(docs)
    kept = [token for token, total in zip(lexicon, totals.tolist()) if total > 0]
    write_text(folder / "fwd.terms", "".join(f"{token}\n" for token in kept))
    order = np.argsort(numbers)
    with (folder / "fwd.documents").open("wb") as handle:
        for raw in ids[order].tolist():
            handle.write(raw + b"\n")
    return written, len(kept)


def _merge_range(runs: Path, span: np.ndarray, position: np.ndarray,
                 numbers: np.ndarray) -> tuple[np.ndarray, np.ndarray] | tuple[None, None]:
    """The postings of a range of terms (``span``: postings per run and term) from every run, sorted by term, then
    by PISA's passage number: about 32 bytes a posting at the peak (numbers and impacts, a sort key, its order)."""
    sizes = span.sum(axis=1, dtype=np.int64)
    total = int(sizes.sum())
    if not total:
        return None, None
    docs = np.empty(total, dtype=U32)
    freqs = np.empty(total, dtype=U32)
    key = np.empty(total, dtype=np.int64)
    at = 0
    for run in np.flatnonzero(sizes).tolist():
        size, offset = int(sizes[run]), int(position[run]) * 4
        paths = _run_paths(runs, run)
        docs[at : at + size] = numbers[np.fromfile(paths["docs"], dtype=U32, count=size, offset=offset)]
        freqs[at : at + size] = np.fromfile(paths["freqs"], dtype=U32, count=size, offset=offset)
        key[at : at + size] = np.repeat(np.arange(span.shape[1], dtype=np.int64), span[run].astype(np.int64))
        position[run] += size
        at += size
    key <<= 32
    key |= docs
    order = np.argsort(key, kind="stable")
    del key
    return docs[order], freqs[order]


def term_ranges(totals: np.ndarray, budget: int) -> Iterable[tuple[int, int]]:
    """Consecutive ranges of terms, each holding at most ``budget`` postings (a single larger term alone)."""
    start, held = 0, 0
    for term, count in enumerate(totals.tolist()):
        if held and held + count > budget:
            yield start, term
            start, held = term, 0
        held += count
    if start < len(totals):
        yield start, len(totals)


def _finish_index(folder: Path, threads: int, log: Path) -> None:
    """The lexicons' binary forms, pyterrier-pisa's metadata, then PISA's block-max data and compressed index
    (written by opening a retriever once). PISA logs to the process's own stdout and stderr: both go to ``log``
    meanwhile, so a command's output (``--json``) stays its own."""
    pisa = _pisa()
    from pyterrier_pisa import _pisathon

    write_json(folder / "pt_meta.json", {"type": "sparse_index", "format": "pisa", "package_hint": "pyterrier-pisa",
                                         "stemmer": "none"})
    with _output_to(log):
        for lines, binary in (("fwd.documents", "fwd.doclex"), ("fwd.terms", "fwd.termlex")):
            _pisathon.build_binlex(str(folder / lines), str(folder / binary))
        pisa.PisaRetrieve(_open(folder, threads), scorer="quantized", threads=threads)


def _open(folder: Path, threads: int) -> Any:
    """pyterrier-pisa's view of the index: no stemming, no stopwords (the terms are the encoder's tokens)."""
    return _pisa().PisaIndex(str(folder), stemmer="none", stops="none", threads=threads)


@contextmanager
def _output_to(log: Path) -> Iterator[None]:
    """The process's file descriptors 1 and 2 (what C++ code writes to) sent to ``log`` for the block."""
    import sys

    log.parent.mkdir(parents=True, exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with log.open("ab") as handle:
            os.dup2(handle.fileno(), 1)
            os.dup2(handle.fileno(), 2)
            yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


# ---- searching -----------------------------------------------------------------------------------
class PisaSplade:
    """SPLADE over a pisa index (a vector backend: see :class:`~apcir.retrieval.backends.VectorBackend`)."""

    def __init__(self, index_dir: Path, manifest: IndexManifest, encoder: Any, options: PisaOptions,
                 threads: int = 2) -> None:
        self.index_dir = index_dir
        self.manifest = manifest
        self.encoder = encoder
        self.threads = threads
        recorded = manifest.options.get("quantization_scale", manifest.quantization_scale)
        if recorded is None:
            raise ApcirError("the index manifest records no quantization_scale", path=index_dir)
        if "quantization_scale" in options.model_fields_set and options.quantization_scale != recorded:
            raise ApcirError(f"this pisa index was built with quantization_scale {recorded}, not "
                             f"{options.quantization_scale}: its queries are quantised as its passages were (leave "
                             "quantization_scale out, or build the index again with it)", path=index_dir)
        self.scale = int(recorded)
        self.algorithm = options.query_algorithm
        folder = index_dir / PISA_DIR
        if not (folder / "pt_meta.json").is_file():
            raise ApcirError(f"pisa index is incomplete: {PISA_DIR}/pt_meta.json is missing; rebuild it with "
                             "`apcir index build ... --overwrite`", path=index_dir)
        self.index = _open(folder, threads)
        self._retrievers: dict[int, Any] = {}
        if encoder is not None and int(encoder.vocab_size) != int(manifest.vocab_size or encoder.vocab_size):
            raise ApcirError(f"index vocabulary has {manifest.vocab_size} entries but the encoder has "
                             f"{encoder.vocab_size}", path=index_dir)

    @property
    def vocab_size(self) -> int:
        return int(self.encoder.vocab_size if self.encoder is not None else self.manifest.vocab_size or 0)

    def retriever(self, k: int) -> Any:
        """pyterrier-pisa's retriever of the top ``k`` (quantised query weights as they are: ``toks_scale`` 1)."""
        if k not in self._retrievers:
            self._retrievers[k] = self.index.quantized(num_results=k, threads=self.threads, toks_scale=1.0,
                                                       query_algorithm=self.algorithm, query_weighted=True)
        return self._retrievers[k]

    def search(self, queries: Mapping[str, QueryInput], k: int = 1000, *, progress: bool = True) -> Run:
        check_k(k)
        return encode_and_search(self, queries, k, progress=progress, where=self.index_dir)

    def search_vectors(self, turn_ids: list[str], matrix: sp.csr_matrix, k: int = 1000, *,
                       progress: bool = True) -> Run:
        """Top-k passages for already encoded queries, quantised as the index's impacts were."""
        import pandas as pd

        check_k(k)
        impacts = quantize(sp.csr_matrix(matrix), self.scale)
        vocabulary = self.encoder.vocabulary
        toks = []
        for row in range(impacts.shape[0]):
            lo, hi = impacts.indptr[row], impacts.indptr[row + 1]
            toks.append({vocabulary[t]: float(w) for t, w in zip(impacts.indices[lo:hi].tolist(),
                                                                  impacts.data[lo:hi].tolist())})
        run: Run = {turn: {} for turn in turn_ids}
        asked = [row for row, terms in enumerate(toks) if terms]
        if not asked:
            return run
        frame = pd.DataFrame({"qid": [str(row) for row in asked], "query_toks": [toks[row] for row in asked]})
        results = self.retriever(k).transform(frame)
        divisor = float(self.scale * self.scale)
        scored: dict[str, dict[str, float]] = {}
        for qid, docno, score in zip(results["qid"].tolist(), results["docno"].tolist(), results["score"].tolist()):
            scored.setdefault(qid, {})[str(docno)] = float(score) / divisor
        for row in asked:
            run[turn_ids[row]] = dict(ranking(scored.get(str(row), {}), k))
        return run


def open_index(folder: Path, manifest: IndexManifest | None, encoder: Any, *, threads: int,
               options: PisaOptions) -> PisaSplade:
    """``pisa``'s ``open`` (``encoder`` a SPLADE encoder, or a vocabulary for pre-encoded queries)."""
    if manifest is None:
        raise ApcirError("a pisa index needs its manifest", path=folder)
    if encoder is None:
        raise ApcirError("a pisa index needs the query encoder it was built with", path=folder)
    return PisaSplade(folder, manifest, encoder, options, threads=threads)
