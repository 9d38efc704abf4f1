"""The growth curve of apcir's SPLADE backends: build, size and search at 1M, 3M and 10M passages, projected to
ClueWeb22-B (116,838,987 passages).

**Data.** A *real-distribution* collection generated chunk by chunk (10,000 passages a chunk, apcir's build chunk),
each chunk deterministically from the seed and its number, so a collection is never held in memory and the first
chunks of 10M are those of 1M (the chunks are cached once under ``bench-cache/scale-curve/<density>/chunks/``, in
apcir's chunk format, and shared by every size). Each passage copies one of the demo index's splade-tiny passage
vectors (894 passages of ikat23-provenance, 244.5 terms each on average), keeps each term with probability
``keep``, multiplies each kept weight by log-normal(0, 0.3) noise and adds Poisson(``added``) (term, weight)
pairs drawn from the demo's postings (a term comes with its real document frequency, with a weight of its own real
distribution): the terms' skew and the term/weight coupling are the real ones. Passage ids are ClueWeb22's
(``clueweb22-en0000-00-00000:0``, 27 bytes), in id order.

**The density knob** (``--passage-terms``, ``--query-terms``): the mean distinct terms a passage, met by
``keep = (T - added) / 244.5`` with ``added = 8`` (or ``keep = 1`` and ``added = T - 244.5`` above the demo's
density); and each query cut to its ``--query-terms`` largest weights (0: as encoded). The default,
``--passage-terms 230`` with queries as encoded, is the ClueWeb22 / SPLADE-v3 setting: SPLADE-v3 gives a
ClueWeb22 passage about 200-250 terms (230 is the middle) and a query 30-60; the rewrite queries as encoded are 57
terms on average (median 52), at that range's top, and are kept as they are rather than cut, because APCIR's own
lists 2 and 3 search with *longer* queries (rewrite + pseudo-response, 159 terms on average), which are measured as
the second kind.

**Queries** (``--queries`` of each kind, all 332 by default): the demo's real query vectors, saved by its
retrieval (``runs/demo/lists/rewrite.qvec.npz``: ``rewrite``; ``rewrite_response.qvec.npz``: ``long``).

**Engines**, each built and searched in its own child process (its peak RSS is its own):

* ``embedded``: apcir's backend (:func:`apcir.retrieval.embedded.write_index` over the chunks on disk, the
  streaming build) and its engine over the memory-mapped arrays (:class:`apcir.retrieval.engine.SparseEngine`).
  Exact: its top k is the reference of every recall.
* ``embedded-compact``: the same backend with ``postings = "compact"`` (:mod:`apcir.retrieval.compact`): 9-bit
  impacts per term and delta-coded offsets, about 2.2 bytes a posting; the exact top k of the quantised scores.
* ``pisa``: PISA through pyterrier-pisa, integer impacts ``round(100 w)`` for passages and queries, ``maxscore``
  (rank-safe: exact on the quantised scores). Until apcir's ``pisa`` backend lands (branch ``backends``) it is
  built with ``PisaIndex(path, stemmer="none").toks_indexer(scale=1)`` (pyterrier-pisa's own Python inverter:
  its build time and memory are that tool's, not apcir's backend's); :class:`Pisa` is the one place to switch.
* ``seismic``: pyseismic-lsr, **approximate**: its index prunes each list (``n_postings`` 3,500 x
  ``max_fraction`` 1.5) and stores weights as 16-bit floats; searched with its guideline settings
  (``query_cut`` 10, ``heap_factor`` 0.8).
* ``lucene-splade``: Anserini's impact index (apcir's ``lucene-splade`` backend, integer impacts ``round(100 w)``),
  through pyserini's ``LuceneImpactSearcher``. Its build takes 15-40 minutes at 1M on 2 cores, so by default
  it is measured up to 1M only (``--lucene-max``).
* ``embedded-in-memory``: the embedded build as it was before it streamed (every chunk stacked, transposed, sorted
  in memory: :func:`apcir.retrieval.embedded.save_embedded`); build time and peak RSS only, up to ``--memory-max``
  (1M: about 16 bytes and more a posting).

**Measured**, for each (size, engine): build time and peak RSS; the index's bytes on disk and per posting; what must
be resident for full speed (embedded: ``local`` + ``data`` + ``bounds``, the arrays a search reads; pisa: the
compressed index, its block-max data and lexicons; seismic: the loaded index, RSS after loading minus before;
lucene: the index folder); per query kind and k in (1000, 100): p50 / p95 / mean ms of one query at a time on one
thread, on two threads where the engine splits a query (embedded), the batch throughput on one and two threads
(ms a query), recall of the exact top k, and the search process's peak RSS and its own memory after the queries
(RssAnon: the index's mapped pages left out; per-query memory must not grow with the collection). Latencies are
warm: one untimed pass over the queries first. Fits use the sizes from 1M up where two are measured.

Run (resumable per (size, engine): a killed run goes on where it stopped; niced)::

    python benchmarks/scale_curve.py run --sizes 1000000 3000000 10000000     # the full curve (see docs/performance.md)
    python benchmarks/scale_curve.py table                                    # tables, fits and projections again
    python benchmarks/scale_curve.py estimate --sizes 3000000 10000000        # time and disk, from what is measured

``run`` prints the tables and writes every figure to ``bench-cache/scale-curve/results.json`` (``--results``);
after each (size, engine) it deletes that index unless ``--keep-indexes`` (the chunks are kept: ``--drop-chunks``
removes them at the end). Run bare (``make bench``) it measures embedded and pisa at 100,000 passages.
``APCIR_BENCH_CACHE`` moves the cache; ``APCIR_DEMO_INDEX`` and ``APCIR_DEMO_LISTS`` the demo's index and lists.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("APCIR_BENCH_CACHE", ROOT / "bench-cache")) / "scale-curve"
DEMO_INDEX = Path(os.environ.get("APCIR_DEMO_INDEX", ROOT / "indexes" / "ikat23-provenance-splade-tiny"))
DEMO_LISTS = Path(os.environ.get("APCIR_DEMO_LISTS", ROOT / "runs" / "demo" / "lists"))
SIZES = (1_000_000, 3_000_000, 10_000_000)
ENGINES = ("embedded", "embedded-compact", "pisa", "seismic", "lucene-splade")
EXTRA_ENGINES = ("embedded-in-memory",)
CLUEWEB22_B = 116_838_987
CHUNK = 10_000
KS = (1000, 100)
QUERY_KINDS = {"rewrite": "rewrite.qvec.npz", "long": "rewrite_response.qvec.npz"}
SCALE = 100  # integer impacts round(100 w), as apcir's lucene-splade and pisa backends
SEISMIC_BUILD = {"n_postings": 3500, "max_fraction": 1.5, "centroid_fraction": 0.1, "summary_energy": 0.4,
                 "min_cluster_size": 2, "doc_cut": 15}
SEISMIC_QUERY = {"query_cut": 10, "heap_factor": 0.8}  # Seismic's guideline (approximate) settings
PISA_ALGORITHM = "maxscore"
ADDED = 8.0
NOISE = 0.3


def demo_file(path: Path) -> Path:
    if not path.exists():
        sys.exit(f"{path} is missing: run `make demo` first (or set APCIR_DEMO_INDEX and APCIR_DEMO_LISTS to the "
                 "demo's index and runs/demo/lists)")
    return path


def rss_mib(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


def current_rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def anon_rss_mib() -> float:
    """The process's own resident memory now (RssAnon: without the pages of mapped files, e.g. an index's)."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("RssAnon:"))
    return int(line.split()[1]) / 1024


def dir_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


# ------------------------------------------------------------------------------------------------
# the collection: generated chunk by chunk
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Density:
    passage_terms: float = 230.0
    query_terms: int = 0
    seed: int = 2026

    @property
    def label(self) -> str:
        return f"t{self.passage_terms:g}-q{self.query_terms}-s{self.seed}"


def source_passages() -> sp.csr_matrix:
    """The demo index's passage vectors (passages x vocabulary), sorted term ids."""
    from apcir.retrieval.embedded import load_embedded

    postings, _ = load_embedded(demo_file(DEMO_INDEX))
    docs = sp.csr_matrix(sp.csr_matrix(postings, copy=True).T)
    docs.sort_indices()
    return docs


def keep_and_added(density: Density, source_mean: float) -> tuple[float, float]:
    """(probability a source term is kept, mean terms added) for ``density.passage_terms`` on average."""
    target = density.passage_terms
    if target - ADDED <= source_mean:
        return max(0.0, (target - ADDED) / source_mean), ADDED
    return 1.0, target - source_mean


def chunk_matrix(source: sp.csr_matrix, number: int, rows: int, density: Density) -> sp.csr_matrix:
    """Chunk ``number`` (``rows`` passages): the same for a seed and number whatever the collection's size."""
    rng = np.random.default_rng([density.seed, number])
    keep, added = keep_and_added(density, source.nnz / source.shape[0])
    pick = rng.integers(0, source.shape[0], size=rows)
    lengths = np.diff(source.indptr)[pick]
    row = np.repeat(np.arange(rows), lengths)
    offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    position = np.repeat(source.indptr[pick], lengths) + offsets
    kept = rng.random(position.size) < keep
    row, position = row[kept], position[kept]
    extra = rng.poisson(added, size=rows)
    drawn = rng.integers(0, source.nnz, size=int(extra.sum()))
    rows_all = np.concatenate([row, np.repeat(np.arange(rows), extra)])
    positions = np.concatenate([position, drawn])
    weights = source.data[positions] * rng.lognormal(0.0, NOISE, size=positions.size).astype(np.float32)
    matrix = sp.coo_matrix((weights.astype(np.float32), (rows_all, source.indices[positions])),
                           shape=(rows, source.shape[1])).tocsr()
    matrix.sum_duplicates()
    return matrix


def passage_id(n: int) -> str:
    """ClueWeb22's id layout (27 bytes), 8 passages a document; id order is number order."""
    doc, part = divmod(n, 8)
    return f"clueweb22-en{doc // 10_000_000:04d}-{(doc // 100_000) % 100:02d}-{doc % 100_000:05d}:{part}"


def passage_number(pid: str) -> int:
    head, part = pid.rsplit(":", 1)
    _, stream, file, doc = head.split("-")
    return (int(stream[2:]) * 10_000_000 + int(file) * 100_000 + int(doc)) * 8 + int(part)


def data_dir(density: Density) -> Path:
    return CACHE / density.label


def chunk_path(density: Density, number: int, rows: int) -> Path:
    return data_dir(density) / "chunks" / f"chunk-{number:06d}-{rows}.npz"


def chunk_layout(size: int) -> list[tuple[int, int, int]]:
    """(number, first passage, rows) of each chunk of a collection of ``size`` passages."""
    return [(c, start, min(CHUNK, size - start)) for c, start in enumerate(range(0, size, CHUNK))]


def ensure_chunks(size: int, density: Density) -> dict:
    """Generate (once) the chunks of ``size`` passages; their statistics."""
    from apcir.retrieval.registry import ENCODER_KINDS

    stats_file = data_dir(density) / f"chunks-{size}.json"
    if stats_file.is_file():
        return json.loads(stats_file.read_text())
    source = None
    save = ENCODER_KINDS.get("splade").save
    started = time.perf_counter()
    postings = 0
    for number, _, rows in chunk_layout(size):
        path = chunk_path(density, number, rows)
        if not path.is_file():
            if source is None:
                source = source_passages()
            matrix = chunk_matrix(source, number, rows, density)
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path.with_suffix(".tmp"), "wb") as handle:
                save(handle, matrix)
            os.replace(path.with_suffix(".tmp"), path)
            postings += matrix.nnz
        else:
            with np.load(path) as z:
                postings += int(z["indices"].shape[0])
    stats = {"passages": size, "postings": postings, "terms_per_passage": postings / size,
             "chunk_bytes": sum(chunk_path(density, c, r).stat().st_size for c, _, r in chunk_layout(size)),
             "seconds": time.perf_counter() - started, "density": asdict(density)}
    stats_file.write_text(json.dumps(stats, indent=1))
    return stats


class Chunks:
    """The collection's chunks from disk, ``(ids, matrix)``, as often as it is iterated (one chunk in memory)."""

    def __init__(self, size: int, density: Density) -> None:
        self.size, self.density = size, density

    def __iter__(self) -> Iterator[tuple[list[str], sp.csr_matrix]]:
        for number, start, rows in chunk_layout(self.size):
            matrix = sp.load_npz(chunk_path(self.density, number, rows)).tocsr()
            yield [passage_id(n) for n in range(start, start + rows)], matrix


class Vocabulary:
    vocab_size = 30_522


def token(t: int) -> str:
    return f"t{t}"


def load_queries(kind: str, density: Density, limit: int | None) -> sp.csr_matrix:
    """The demo's query vectors of a kind (rows with no term dropped), each cut to its ``query_terms`` largest."""
    with np.load(demo_file(DEMO_LISTS / QUERY_KINDS[kind])) as z:
        matrix = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]), dtype=np.float32)
    matrix = matrix[np.flatnonzero(np.diff(matrix.indptr))]
    if density.query_terms:
        rows = []
        for q in range(matrix.shape[0]):
            row = matrix[q]
            if row.nnz > density.query_terms:
                cut = np.sort(row.data)[-density.query_terms]
                row = sp.csr_matrix(row.multiply(row >= cut))
            rows.append(row)
        matrix = sp.vstack(rows, format="csr")
    matrix.sort_indices()
    return matrix[:limit] if limit else matrix


def rows_of(queries: sp.csr_matrix) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(queries.indices[queries.indptr[q]:queries.indptr[q + 1]].astype(np.int64),
             queries.data[queries.indptr[q]:queries.indptr[q + 1]]) for q in range(queries.shape[0])]


def impacts(weights: np.ndarray) -> np.ndarray:
    return np.rint(weights * SCALE).astype(np.int64)


# ------------------------------------------------------------------------------------------------
# engines: build and search in a child process each
# ------------------------------------------------------------------------------------------------


def size_dir(size: int, density: Density) -> Path:
    return data_dir(density) / f"n{size}"


def index_dir(size: int, density: Density, engine: str) -> Path:
    return size_dir(size, density) / engine


def exact_file(size: int, density: Density, kind: str, k: int) -> Path:
    return size_dir(size, density) / f"exact-{kind}-k{k}.npz"


def latency(seconds: list[float]) -> dict:
    ms = np.asarray(seconds) * 1000
    return {"p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95)),
            "mean_ms": float(ms.mean())}


def recall(found: list[np.ndarray], exact: list[np.ndarray]) -> float:
    values = [len(np.intersect1d(f, e)) / len(e) for f, e in zip(found, exact) if len(e)]
    return float(np.mean(values)) if values else 1.0


class Engine:
    """One engine: ``build`` writes its index into ``folder``; ``open`` makes it searchable; ``one`` searches a
    query (passage numbers), ``batch`` all of them on ``threads`` threads."""

    exact = False
    two_thread_query = False

    def __init__(self, folder: Path, size: int, density: Density) -> None:
        self.folder, self.size, self.density = folder, size, density

    def build(self, threads: int) -> dict:
        raise NotImplementedError

    def warm(self) -> None:
        """What the first build of a machine pays once and no later one does (compiling), outside the timer."""

    def open(self) -> None:
        raise NotImplementedError

    def resident_bytes(self) -> int:
        return dir_bytes(self.folder)

    def one(self, terms: np.ndarray, weights: np.ndarray, k: int, threads: int) -> np.ndarray:
        raise NotImplementedError

    def batch(self, queries: sp.csr_matrix, k: int, threads: int) -> None:
        raise NotImplementedError


class Embedded(Engine):
    exact = True
    two_thread_query = True

    def build(self, threads: int) -> dict:
        from apcir.retrieval.embedded import write_index

        facts = write_index(self.folder, Chunks(self.size, self.density), Vocabulary(), threads=threads,
                            work=self.folder / "_work")
        shutil.rmtree(self.folder / "_work", ignore_errors=True)
        return facts

    def warm(self) -> None:
        import tempfile

        from apcir.retrieval.embedded import write_index

        with tempfile.TemporaryDirectory() as folder:  # numba compiles (or loads) the build's kernels
            toy = sp.csr_matrix(np.eye(2, Vocabulary.vocab_size, dtype=np.float32))
            write_index(Path(folder), [(["b", "a"], toy)], Vocabulary(), threads=1, work=Path(folder) / "w")

    def open(self) -> None:
        from apcir.retrieval.embedded import open_arrays
        from apcir.retrieval.engine import SparseEngine

        arrays = open_arrays(self.folder)
        self.engine = SparseEngine.mapped(arrays["bounds"], arrays["local"], arrays["data"], arrays["ids"].shape[0])

    def resident_bytes(self) -> int:
        return sum(dir_bytes(self.folder / f"postings.{name}.npy") for name in ("local", "data", "bounds"))

    def one(self, terms: np.ndarray, weights: np.ndarray, k: int, threads: int) -> np.ndarray:
        import numba

        numba.set_num_threads(threads)
        return self.engine.search(terms, weights, k, parallel=threads > 1)[0]

    def batch(self, queries: sp.csr_matrix, k: int, threads: int) -> None:
        import numba

        numba.set_num_threads(threads)
        self.engine.search_matrix(queries, k, parallel=threads > 1)


class EmbeddedCompact(Embedded):
    """The embedded backend with ``postings = "compact"`` (:mod:`apcir.retrieval.compact`): 9-bit impacts per term,
    delta-coded offsets; the top k of the quantised scores (its recall is measured against ``embedded``)."""

    exact = False

    def build(self, threads: int) -> dict:
        from apcir.retrieval.embedded import write_index
        from apcir.retrieval.options import EmbeddedOptions

        facts = write_index(self.folder, Chunks(self.size, self.density), Vocabulary(), threads=threads,
                            work=self.folder / "_work", options=EmbeddedOptions(postings="compact"))
        shutil.rmtree(self.folder / "_work", ignore_errors=True)
        return facts

    def open(self) -> None:
        from apcir.retrieval.compact import CompactEngine
        from apcir.retrieval.embedded import compact_postings, open_arrays

        arrays = open_arrays(self.folder)
        self.engine = CompactEngine(compact_postings(arrays), arrays["ids"].shape[0])  # type: ignore[assignment]

    def resident_bytes(self) -> int:
        return self.engine.nbytes  # type: ignore[attr-defined]


class InMemory(Embedded):
    """The embedded build before it streamed: every chunk stacked, then ``save_embedded``. Build only."""

    def build(self, threads: int) -> dict:
        from apcir.retrieval.embedded import save_embedded

        ids: list[str] = []
        blocks = []
        for chunk_ids, matrix in Chunks(self.size, self.density):
            ids.extend(chunk_ids)
            blocks.append(matrix)
        documents = sp.vstack(blocks, format="csr", dtype=np.float32)
        save_embedded(self.folder, documents, ids)
        return {"nonzeros": int(documents.nnz)}


class Pisa(Engine):
    """apcir's ``pisa`` backend: :func:`apcir.retrieval.pisa.write_index` over :class:`Chunks` (the streaming build:
    runs on disk, merged a range of terms at a time, then PISA's compression), impacts ``round(scale w)``
    (``--pisa-scale``, 100 by default as the backend's), searched through PISA's own call (what apcir's
    :class:`~apcir.retrieval.pisa.PisaSplade` makes, without the DataFrame around it) with ``maxscore``
    (rank-safe: exact on the quantised scores)."""

    exact = False

    @property
    def scale(self) -> int:
        return int(os.environ.get("APCIR_SCALE_PISA_SCALE", SCALE))

    def build(self, threads: int) -> dict:
        from apcir.retrieval.options import PisaOptions
        from apcir.retrieval.pisa import write_index

        class Tokens(Vocabulary):
            vocabulary = [token(t) for t in range(Vocabulary.vocab_size)]

        work = self.folder / "_build"
        facts = write_index(self.folder, Chunks(self.size, self.density), Tokens(), threads=threads, work=work,
                            options=PisaOptions(quantization_scale=self.scale, query_algorithm=PISA_ALGORITHM))
        shutil.rmtree(work, ignore_errors=True)
        # PISA's uncompressed binary collection (8 bytes a posting) is what pyterrier-pisa's num_docs() reads; a
        # search reads the compressed index and the lexicons only: measured apart (``collection_bytes``)
        collection = sum(p.stat().st_size for p in (self.folder / "pisa").glob("inv.*"))
        return {"scale": self.scale, "tool": "apcir pisa backend", "algorithm": PISA_ALGORITHM,
                "collection_bytes": collection, **{k: v for k, v in facts.items() if k != "quantization_scale"}}

    def open(self) -> None:
        from pyterrier_pisa import PisaIndex

        self.index = PisaIndex(str(self.folder / "pisa"), stemmer="none", stops="none")
        self.retrievers: dict[tuple[int, int], Any] = {}

    def retriever(self, k: int, threads: int) -> Any:
        if (k, threads) not in self.retrievers:
            self.retrievers[k, threads] = self.index.quantized(
                num_results=k, threads=threads, toks_scale=1.0, query_algorithm=PISA_ALGORITHM, query_weighted=True)
        return self.retrievers[k, threads]

    def resident_bytes(self) -> int:
        folder = self.folder / "pisa"
        kept = [p for p in folder.iterdir() if p.name.startswith("quantized") or p.name.endswith("lex")]
        return sum(p.stat().st_size for p in kept)

    def _retrieve(self, toks: list[dict], k: int, threads: int) -> list[np.ndarray]:
        """PISA's own call (what ``PisaRetrieve.transform`` makes, without the DataFrame around it)."""
        from pyterrier_pisa import _pisathon

        retriever = self.retriever(k, threads)
        retriever.reset_retrieval_context()
        shape = (len(toks) * k,)
        qidx, docnos = np.empty(shape, dtype=np.int32), np.empty(shape, dtype=object)
        ranks, scores = np.empty(shape, dtype=np.int32), np.empty(shape, dtype=np.float32)
        size = _pisathon.retrieve(retriever._ctxt, retriever.query_algorithm.value, list(enumerate(toks)), k=k,
                                  threads=threads, query_weighted=1, pretokenised=True, result_qidxs=qidx,
                                  result_docnos=docnos, result_ranks=ranks, result_scores=scores)
        found: list[list[int]] = [[] for _ in toks]
        for q, pid in zip(qidx[:size].tolist(), docnos[:size].tolist()):
            found[q].append(passage_number(pid))
        return [np.array(f, dtype=np.int64) for f in found]

    def toks(self, terms: np.ndarray, weights: np.ndarray) -> dict:
        values = np.rint(weights * self.scale).astype(np.int64)
        return {token(t): float(v) for t, v in zip(terms.tolist(), values.tolist()) if v > 0}

    def one(self, terms: np.ndarray, weights: np.ndarray, k: int, threads: int) -> np.ndarray:
        return self._retrieve([self.toks(terms, weights)], k, threads)[0]

    def batch(self, queries: sp.csr_matrix, k: int, threads: int) -> None:
        self._retrieve([self.toks(t, w) for t, w in rows_of(queries)], k, threads)


class Seismic(Engine):
    def build(self, threads: int) -> dict:
        from seismic import SeismicDataset, SeismicIndex

        dataset = SeismicDataset(dim=Vocabulary.vocab_size)
        for ids, matrix in Chunks(self.size, self.density):
            dataset.add_documents_by_id(ids, matrix.indices.astype(np.int64), matrix.data.astype(np.float32),
                                        matrix.indptr.astype(np.int64))
        index = SeismicIndex.build_from_dataset(dataset, **SEISMIC_BUILD, num_threads=threads)
        del dataset
        self.folder.mkdir(parents=True, exist_ok=True)
        index.save(str(self.folder / "index"))
        return {"settings": SEISMIC_BUILD, "query": SEISMIC_QUERY}

    def open(self) -> None:
        from seismic import SeismicIndex, get_seismic_string

        before = current_rss_mib()
        self.index = SeismicIndex.load(str(self.folder / "index.index.seismic"))
        self.loaded_bytes = int((current_rss_mib() - before) * 2**20)
        self.string = get_seismic_string()

    def resident_bytes(self) -> int:
        return self.loaded_bytes

    def one(self, terms: np.ndarray, weights: np.ndarray, k: int, threads: int) -> np.ndarray:
        components = np.array([str(t) for t in terms.tolist()], dtype=self.string)
        hits = self.index.search("q", components, weights.astype(np.float32), k, **SEISMIC_QUERY)
        return np.array([passage_number(h[2]) for h in hits], dtype=np.int64)

    def batch(self, queries: sp.csr_matrix, k: int, threads: int) -> None:
        rows = rows_of(queries)
        ids = np.array([str(q) for q in range(len(rows))], dtype=self.string)
        components = [np.array([str(t) for t in terms.tolist()], dtype=self.string) for terms, _ in rows]
        values = [w.astype(np.float32) for _, w in rows]
        self.index.batch_search(ids, components, values, k, **SEISMIC_QUERY, num_threads=threads)


class Lucene(Engine):
    def build(self, threads: int) -> dict:
        from apcir.retrieval.lucene import run_index_collection

        work = self.folder / "input"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        for part, (ids, matrix) in enumerate(Chunks(self.size, self.density)):
            values = impacts(matrix.data)
            with (work / f"part-{part // 25:04d}.jsonl").open("a", encoding="utf-8") as out:
                for row, pid in enumerate(ids):
                    lo, hi = matrix.indptr[row], matrix.indptr[row + 1]
                    vector = {token(t): v for t, v in zip(matrix.indices[lo:hi].tolist(), values[lo:hi].tolist())
                              if v > 0}
                    out.write(json.dumps({"id": pid, "contents": "", "vector": vector}) + "\n")
        run_index_collection(work, self.folder / "index", "impact", threads, self.folder / "lucene.log")
        shutil.rmtree(work, ignore_errors=True)
        return {"scale": SCALE, "java_peak_rss_mib": rss_mib(resource.RUSAGE_CHILDREN)}

    def open(self) -> None:
        from apcir.retrieval.java import lucene

        self.lucene = lucene()
        self.searchers: dict[str, Any] = {}

    def resident_bytes(self) -> int:
        return dir_bytes(self.folder / "index")

    def _searcher(self, vectors: dict[str, dict[str, int]]) -> Any:
        from apcir.retrieval.lucene import _PrecomputedQueries

        return self.lucene.LuceneImpactSearcher(str(self.folder / "index"), _PrecomputedQueries(vectors), min_idf=-1)

    @staticmethod
    def vector(terms: np.ndarray, weights: np.ndarray) -> dict[str, int]:
        return {token(t): v for t, v in zip(terms.tolist(), impacts(weights).tolist()) if v > 0}

    def one(self, terms: np.ndarray, weights: np.ndarray, k: int, threads: int) -> np.ndarray:
        searcher = self.searchers.get("one")
        if searcher is None:
            self.current: dict[str, dict[str, int]] = {}
            searcher = self.searchers["one"] = self._searcher(self.current)
        self.current["q"] = self.vector(terms, weights)
        hits = searcher.search("q", k=k)
        return np.array([passage_number(h.docid) for h in hits], dtype=np.int64)

    def batch(self, queries: sp.csr_matrix, k: int, threads: int) -> None:
        vectors = {str(q): self.vector(t, w) for q, (t, w) in enumerate(rows_of(queries))}
        self._searcher(vectors).batch_search(list(vectors), list(vectors), k=k, threads=threads)


ENGINE_CLASSES: dict[str, type[Engine]] = {"embedded": Embedded, "embedded-compact": EmbeddedCompact, "pisa": Pisa,
                                           "seismic": Seismic,
                                           "lucene-splade": Lucene, "embedded-in-memory": InMemory}


def child_build(size: int, engine: str, density: Density, threads: int) -> dict:
    folder = index_dir(size, density, engine)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    runner = ENGINE_CLASSES[engine](folder, size, density)
    runner.warm()
    started = time.perf_counter()
    facts = runner.build(threads)
    seconds = time.perf_counter() - started
    built = {"build_s": seconds, "build_peak_rss_mib": max(rss_mib(), rss_mib(resource.RUSAGE_CHILDREN)),
             "disk_bytes": dir_bytes(folder), "threads": threads, "facts": facts}
    (size_dir(size, density) / f"{engine}.build.json").write_text(json.dumps(built, indent=1))
    return built


def child_search(size: int, engine: str, density: Density, limit: int | None) -> dict:
    folder = index_dir(size, density, engine)
    runner = ENGINE_CLASSES[engine](folder, size, density)
    started = time.perf_counter()
    runner.open()
    result: dict[str, Any] = {"open_s": time.perf_counter() - started, "exact": runner.exact, "kinds": {}}
    for kind in QUERY_KINDS:
        queries = load_queries(kind, density, limit)
        rows = rows_of(queries)
        per_kind: dict[str, Any] = {"queries": len(rows), "mean_terms": float(np.mean([len(t) for t, _ in rows]))}
        for terms, weights in rows:  # warm: the index pages the queries read, compiled code
            runner.one(terms, weights, KS[0], 1)
        for k in KS:
            timed: dict[str, Any] = {}
            found: list[np.ndarray] = []
            for threads in (1, 2):
                if threads == 2 and not runner.two_thread_query:
                    timed["2t"] = None
                    continue
                seconds, cpu = [], []
                for terms, weights in rows:
                    c0, t0 = time.process_time(), time.perf_counter()
                    hits = runner.one(terms, weights, k, threads)
                    seconds.append(time.perf_counter() - t0)
                    cpu.append(time.process_time() - c0)
                    if threads == 1:
                        found.append(np.sort(hits.astype(np.int64)))
                timed[f"{threads}t"] = latency(seconds)
                timed[f"{threads}t"]["cpu"] = latency(cpu)  # the process's CPU time: what a busy machine leaves
            for threads in (1, 2):
                t0 = time.perf_counter()
                runner.batch(queries, k, threads)
                timed[f"batch_{threads}t_ms"] = 1000 * (time.perf_counter() - t0) / len(rows)
            if runner.exact:
                np.savez(exact_file(size, density, kind, k), *found)
                timed["recall"] = 1.0
            else:
                with np.load(exact_file(size, density, kind, k)) as z:
                    exact = [z[f"arr_{i}"] for i in range(len(z.files))]
                timed["recall"] = recall(found, exact)
            per_kind[f"k{k}"] = timed
        result["kinds"][kind] = per_kind
    result["resident_bytes"] = runner.resident_bytes()
    result["search_peak_rss_mib"] = rss_mib()
    result["anon_rss_mib_after"] = anon_rss_mib()  # its own memory, the index's mapped pages left out
    return result


# ------------------------------------------------------------------------------------------------
# the driver
# ------------------------------------------------------------------------------------------------


def child(args: list[str]) -> dict:
    """Run this script as a child process (its own peak RSS); its last stdout line is JSON."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    wall = time.perf_counter() - started
    try:
        value = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        tail = " ".join(done.stderr.strip().splitlines()[-4:])[-600:]
        return {"error": f"exit {done.returncode}: {tail}", "wall_s": wall}
    value["wall_s"] = wall
    return value


def applicable(engine: str, size: int, options: argparse.Namespace) -> str | None:
    """Why ``engine`` is not measured at ``size`` (None: it is)."""
    if engine == "lucene-splade" and size > options.lucene_max:
        return f"not measured above {options.lucene_max:,} passages (--lucene-max): its build takes 15-40 min at 1M"
    if engine == "embedded-in-memory" and size > options.memory_max:
        return f"not measured above {options.memory_max:,} passages (--memory-max): it holds the postings in memory"
    module = {"pisa": "pyterrier_pisa", "seismic": "seismic", "lucene-splade": "pyserini"}.get(engine)
    if module is not None:
        import importlib.util

        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    return None


def run(options: argparse.Namespace) -> dict:
    density = Density(options.passage_terms, options.query_terms, options.seed)
    results = json.loads(options.results.read_text()) if options.results.is_file() else {}
    mine = results.setdefault(density.label, {})
    engines = ["embedded"] + [e for e in options.engines if e != "embedded"]  # the reference first
    for size in sorted(options.sizes):
        stats = ensure_chunks(size, density)
        at = mine.setdefault(str(size), {"collection": stats, "engines": {}})
        at["collection"] = stats
        for engine in engines:
            done = at["engines"].get(engine)
            if done is not None and "error" not in done and not options.force:
                continue
            why = applicable(engine, size, options)
            if why is not None:
                at["engines"][engine] = {"skipped": why}
                continue
            common = ["--size", str(size), "--engine", engine, *density_args(density)]
            build_file = size_dir(size, density) / f"{engine}.build.json"
            kept = build_file.is_file() and index_dir(size, density, engine).is_dir() and not options.force
            built = json.loads(build_file.read_text()) if kept else None  # an index built, not yet searched
            if built is None:
                built = child(["build", *common, "--threads", str(options.threads)])
            value: dict[str, Any] = {"build": built}
            if "error" not in built and engine not in EXTRA_ENGINES:
                search = child(["search", *common, *(["--queries", str(options.queries)] if options.queries else [])])
                value["search"] = search
                if "error" in search:
                    value["error"] = search["error"]
            elif "error" in built:
                value["error"] = built["error"]
            at["engines"][engine] = value
            options.results.parent.mkdir(parents=True, exist_ok=True)
            options.results.write_text(json.dumps(results, indent=1))
            print(f"{size:,} {engine}: {summary(value)}", file=sys.stderr, flush=True)
            if not options.keep_indexes:
                shutil.rmtree(index_dir(size, density, engine), ignore_errors=True)
    if options.drop_chunks:
        shutil.rmtree(data_dir(density) / "chunks", ignore_errors=True)
    return results


def density_args(density: Density) -> list[str]:
    return ["--passage-terms", str(density.passage_terms), "--query-terms", str(density.query_terms),
            "--seed", str(density.seed)]


def summary(value: dict) -> str:
    if "error" in value:
        return f"failed: {value['error']}"
    build = value["build"]
    text = f"build {build['build_s']:.0f} s, peak {build['build_peak_rss_mib']:,.0f} MiB"
    search = value.get("search")
    if search:
        k = search["kinds"]["rewrite"]["k1000"]
        text += f"; rewrite k=1000 p50 {k['1t']['p50_ms']:.1f} ms, recall {k['recall']:.4f}"
    return text


# ------------------------------------------------------------------------------------------------
# tables, fits, projections
# ------------------------------------------------------------------------------------------------


def fmt_bytes(n: float | None) -> str:
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "-"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}" if n < 10 * scale else f"{n / scale:.1f} {unit}"
    return f"{n / 1e3:.0f} kB"


def measures(value: dict, postings: int) -> dict[str, float]:
    """The figures that are fitted against the collection's size."""
    build, search = value["build"], value.get("search") or {}
    out = {"build_s": build["build_s"], "build_peak_rss_bytes": build["build_peak_rss_mib"] * 2**20,
           "disk_bytes": build["disk_bytes"]}
    if search:
        out["resident_bytes"] = search["resident_bytes"]
        for kind, per in search["kinds"].items():
            out[f"{kind}_k1000_p50_ms"] = per["k1000"]["1t"]["p50_ms"]
            if "cpu" in per["k1000"]["1t"]:
                out[f"{kind}_k1000_cpu_p50_ms"] = per["k1000"]["1t"]["cpu"]["p50_ms"]
            if per["k1000"].get("2t"):
                out[f"{kind}_k1000_2t_p50_ms"] = per["k1000"]["2t"]["p50_ms"]
    return out


def fit(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """Least squares of log y = log a + b log n: (a, b); None with fewer than two sizes."""
    points = [(n, y) for n, y in points if y and y > 0]
    if len({n for n, _ in points}) < 2:
        return None
    x = np.log([n for n, _ in points])
    y = np.log([v for _, v in points])
    b, log_a = np.polyfit(x, y, 1)
    return float(math.exp(log_a)), float(b)


def rows_by_engine(mine: dict) -> dict[str, list[tuple[int, dict, dict]]]:
    out: dict[str, list[tuple[int, dict, dict]]] = {}
    for size, at in sorted(mine.items(), key=lambda item: int(item[0])):
        for engine, value in at["engines"].items():
            out.setdefault(engine, []).append((int(size), value, at["collection"]))
    return out


def tables(results: dict) -> str:
    lines = []
    for label, mine in results.items():
        by_engine = rows_by_engine(mine)
        sizes = sorted(int(s) for s in mine)
        first = mine[str(sizes[0])]["collection"] if sizes else {}
        lines.append(f"\n### Density {label}: {first.get('terms_per_passage', 0):.1f} terms a passage\n")
        lines.append("**Build and size**\n")
        lines.append("| engine | passages | postings | build s | build peak RSS | disk | bytes/posting | resident for "
                     "full speed | search peak RSS (own, without mapped index pages) |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for engine, entries in by_engine.items():
            for size, value, collection in entries:
                if "skipped" in value or "error" in value:
                    lines.append(f"| {engine} | {size:,} | | {value.get('skipped') or 'failed: ' + value['error']} "
                                 "| | | | | |")
                    continue
                build, search = value["build"], value.get("search") or {}
                postings = collection["postings"]
                resident = fmt_bytes(search.get("resident_bytes")) if search else "-"
                peak = f"{search['search_peak_rss_mib']:,.0f} MiB" if search else "-"
                if "anon_rss_mib_after" in search:
                    peak += f" ({search['anon_rss_mib_after']:,.0f} MiB)"
                lines.append(f"| {engine} | {size:,} | {postings:,} | {build['build_s']:,.0f} | "
                             f"{build['build_peak_rss_mib']:,.0f} MiB | {fmt_bytes(build['disk_bytes'])} | "
                             f"{build['disk_bytes'] / postings:.2f} | {resident} | {peak} |")
        for kind in QUERY_KINDS:
            lines.append(f"\n**Queries: {kind}** (ms a query; p50 / p95 one at a time, wall clock, and the CPU "
                         "time's p50 in brackets (what a shared machine leaves of a query); batch: the whole set "
                         "at once)\n")
            lines.append("| engine | passages | queries | terms | k=1000 1 thread | k=1000 2 threads | batch 1t / 2t | "
                         "recall@1000 | k=100 1 thread | k=100 2 threads | recall@100 |")
            lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for engine, entries in by_engine.items():
                for size, value, _ in entries:
                    search = value.get("search")
                    if not search or "kinds" not in search:
                        continue
                    per = search["kinds"][kind]
                    cells = []
                    for k in KS:
                        v = per[f"k{k}"]
                        two = (f"{v['2t']['p50_ms']:.1f} / {v['2t']['p95_ms']:.1f}{cpu_p50(v['2t'])}" if v["2t"]
                               else "one thread a query")
                        cells.append(f"{v['1t']['p50_ms']:.1f} / {v['1t']['p95_ms']:.1f}{cpu_p50(v['1t'])} | {two}")
                        if k == 1000:
                            cells.append(f"{v['batch_1t_ms']:.1f} / {v['batch_2t_ms']:.1f}")
                        cells.append(f"{v['recall']:.4f}" + (" (exact)" if search["exact"] else ""))
                    lines.append(f"| {engine} | {size:,} | {per['queries']} | {per['mean_terms']:.0f} | "
                                 + " | ".join(cells) + " |")
        lines.append(projection_table(by_engine))
    return "\n".join(lines)


def cpu_p50(timed: dict) -> str:
    return f" ({timed['cpu']['p50_ms']:.1f})" if "cpu" in timed else ""


PROJECTED = {"disk_bytes": "index on disk", "resident_bytes": "resident for full speed",
             "build_peak_rss_bytes": "build peak RSS", "build_s": "build time",
             "rewrite_k1000_p50_ms": "rewrite query, k=1000, p50 (1 thread)",
             "long_k1000_p50_ms": "long query, k=1000, p50 (1 thread)",
             "rewrite_k1000_cpu_p50_ms": "rewrite query, k=1000, CPU p50 (1 thread)",
             "long_k1000_cpu_p50_ms": "long query, k=1000, CPU p50 (1 thread)",
             "rewrite_k1000_2t_p50_ms": "rewrite query, k=1000, p50 (2 threads)"}


def show(measure: str, value: float) -> str:
    if measure.endswith("_bytes"):
        return fmt_bytes(value)
    if measure == "build_s":
        return f"{value / 3600:.1f} h" if value >= 3600 else f"{value:,.0f} s"
    return f"{value:,.1f} ms"


FIT_FROM = 1_000_000
"""Fits use the sizes from this one up (where two are measured): below it fixed costs (start-up, a tool's batch)
weigh more than the collection."""


def fitted_sizes(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    large = [(n, y) for n, y in points if n >= FIT_FROM]
    return large if len({n for n, _ in large}) >= 2 else points


def projection_table(by_engine: dict[str, list[tuple[int, dict, dict]]]) -> str:
    lines = [f"\n**Growth** (power law y = a n^b fitted over the sizes measured, from {FIT_FROM:,} passages up where "
             f"two are; projected to ClueWeb22-B's {CLUEWEB22_B:,} passages)\n",
             "| engine | measure | sizes | b | at the largest size | projected |", "|---|---|---|---:|---:|---:|"]
    for engine, entries in by_engine.items():
        good = [(size, measures(value, collection["postings"])) for size, value, collection in entries
                if "build" in value and "error" not in value and "skipped" not in value]
        for measure, label in PROJECTED.items():
            points = fitted_sizes([(size, m[measure]) for size, m in good if measure in m])
            fitted = fit(points)
            if fitted is None:
                continue
            a, b = fitted
            lines.append(f"| {engine} | {label} | {', '.join(f'{n / 1e6:g}M' for n, _ in points)} | {b:.2f} | "
                         f"{show(measure, points[-1][1])} | {show(measure, a * CLUEWEB22_B ** b)} |")
    return "\n".join(lines)


def estimate(results: dict, label: str, targets: list[int]) -> str:
    """Time and disk each size needs, scaled linearly from the largest size measured (build + search wall time
    per engine; the engines' figures grow about linearly, and a fit over small sizes underestimates them)."""
    mine = results.get(label, {})
    by_engine = rows_by_engine(mine)
    largest_chunks = max(((int(s), at["collection"]["chunk_bytes"]) for s, at in mine.items()), default=None)
    lines = ["| passages | chunks on disk | largest index (deleted after its measure) | time: " +
             " + ".join(by_engine) + " | scaled from |", "|---:|---:|---:|---|---|"]
    for target in targets:
        chunks = largest_chunks[1] * target / largest_chunks[0] if largest_chunks else float("nan")
        largest, times, sources = 0.0, [], []
        for engine, entries in by_engine.items():
            good = [(size, value) for size, value, _ in entries if "build" in value and "error" not in value
                    and "skipped" not in value]
            if not good:
                times.append("-")
                continue
            size, value = good[-1]
            largest = max(largest, value["build"]["disk_bytes"] * target / size)
            wall = value["build"].get("wall_s", value["build"]["build_s"]) + value.get("search", {}).get("wall_s", 0)
            times.append(show("build_s", wall * target / size))
            sources.append(f"{engine} {size / 1e6:g}M")
        lines.append(f"| {target:,} | {fmt_bytes(chunks)} | {fmt_bytes(largest)} | {' + '.join(times)} | "
                     f"{', '.join(sources)} |")
    return "\n".join(lines)


def machine() -> str:
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def add_density(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--passage-terms", type=float, default=Density.passage_terms,
                        help="mean distinct terms a passage (230: SPLADE-v3 on ClueWeb22)")
    parser.add_argument("--query-terms", type=int, default=Density.query_terms,
                        help="keep each query's N largest weights (0: as encoded)")
    parser.add_argument("--seed", type=int, default=Density.seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=CACHE / "results.json")
    sub = parser.add_subparsers(dest="command")
    go = sub.add_parser("run", help="measure every (size, engine) not yet measured; print the tables")
    go.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    go.add_argument("--engines", nargs="+", default=list(ENGINES), choices=[*ENGINES, *EXTRA_ENGINES])
    go.add_argument("--threads", type=int, default=2, help="threads of the builds")
    go.add_argument("--queries", type=int, default=0, help="the first N queries of each kind (0: all)")
    go.add_argument("--lucene-max", type=int, default=1_000_000)
    go.add_argument("--memory-max", type=int, default=1_000_000)
    go.add_argument("--keep-indexes", action="store_true")
    go.add_argument("--drop-chunks", action="store_true")
    go.add_argument("--force", action="store_true", help="measure again what is already measured")
    go.add_argument("--nice", type=int, default=10, help="niceness of the run and its children")
    go.add_argument("--pisa-scale", type=int, default=SCALE, help="pisa: the quantisation scale, round(scale w)")
    add_density(go)
    for name in ("build", "search"):
        one = sub.add_parser(name, help=f"(child) {name} one engine at one size; JSON on stdout")
        one.add_argument("--size", type=int, required=True)
        one.add_argument("--engine", required=True, choices=list(ENGINE_CLASSES))
        one.add_argument("--threads", type=int, default=2)
        one.add_argument("--queries", type=int, default=0)
        add_density(one)
    sub.add_parser("table", help="the tables, fits and projections of the saved results")
    est = sub.add_parser("estimate", help="time and disk for sizes not measured yet, from the fits")
    est.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    add_density(est)
    options = parser.parse_args()
    if options.command is None:  # `make bench`: a quick run at 100,000 passages
        options = parser.parse_args(["--results", str(CACHE.parent / "scale-curve-quick.json"), "run", "--sizes",
                                     "100000", "--engines", "embedded", "pisa"])
    if options.command in ("build", "search"):
        density = Density(options.passage_terms, options.query_terms, options.seed)
        value = (child_build(options.size, options.engine, density, options.threads) if options.command == "build"
                 else child_search(options.size, options.engine, density, options.queries or None))
        print(json.dumps(value))
        return
    if options.command == "run":
        os.nice(options.nice)
        os.environ["APCIR_SCALE_PISA_SCALE"] = str(options.pisa_scale)  # read by the children's pisa engine
        CACHE.mkdir(parents=True, exist_ok=True)
        if not (CACHE.parent / ".gitignore").is_file():  # generated data and indexes are never committed
            (CACHE.parent / ".gitignore").write_text("*\n")
        results = run(options)
    else:
        results = json.loads(options.results.read_text())
    print(f"Machine: {machine()}")
    if options.command == "estimate":
        label = Density(options.passage_terms, options.query_terms, options.seed).label
        print(estimate(results, label, options.sizes))
        return
    print(tables(results))


if __name__ == "__main__":
    main()
