"""Exact sparse top-k engines side by side at 1M passages: scipy, apcir's numba engine, Lucene, Seismic, BMP.

Data sets (generated once, cached under ``bench-cache/``, never committed):

* ``synthetic``: the collection of ``benchmarks/retrieval.py`` (seed 2025):
  1,000,000 passages of 100-200 Zipf(1.0) term draws over 30,522 terms,
  log-normal(-0.5, 0.8) float32 weights (~102 distinct terms each), and its 200
  queries of 20-60 draws (~34 distinct terms).
* ``real``: a *real-distribution* 1M collection from the demo index's
  splade-tiny passage vectors (894 passages of ikat23-provenance, ~245 terms
  each): every synthetic passage copies a random source passage, multiplies
  each weight by log-normal(0, 0.3) noise, drops each term with probability
  0.1, and adds Poisson(8) (term, weight) pairs drawn from the source postings
  (so a term comes with the df-proportional probability and a weight of its own
  real distribution). The real term skew and term/weight coupling are kept.
  Queries: the demo's 332 heuristic rewrites (``runs/demo/reformulations.jsonl``,
  field ``rewrite``) encoded with splade-tiny: real query vectors.

Every engine is measured in its own child process (so peak RSS is its own),
one query at a time for latency (mean and p95 over the queries), at k=1000 and
k=100; recall@k is measured against the exact top k (scipy's float32 product,
ties at the cut aside). Engines:

* ``scipy``: today's ``apcir.retrieval.embedded.search_matrix`` (batches of 64;
  a query's latency is its batch's time / batch size);
* ``engine-1t`` / ``engine-2t``: :class:`apcir.retrieval.engine.SparseEngine`
  with 1 numba thread, and with 2 threads splitting each query's passages;
  ``batch`` also gives the parallel-over-queries throughput;
* ``lucene``: Anserini impact index through pyserini's LuceneImpactSearcher,
  integer impacts round(100*w) for passages and queries (as apcir's
  lucene-splade backend), single thread;
* ``seismic``: pyseismic-lsr, searched as exactly as it allows over its default index, and
  ``seismic-approx`` with its guideline settings (see ``SEISMIC_*`` below);
* ``bmp``: BMP with alpha=beta=1 on 8-bit passage impacts (see ``BMP_*``).

Run (heavy jobs are niced; Lucene, Seismic and BMP indexes are built once and cached, the
Lucene ones take 15-40 min at 1M on 2 cores)::

    nice -n 10 .venv/bin/python benchmarks/retrieval_engines.py prepare
    nice -n 10 .venv/bin/python benchmarks/retrieval_engines.py build-lucene synthetic
    nice -n 10 .venv/bin/python benchmarks/retrieval_engines.py build-lucene real
    nice -n 10 .venv/bin/python benchmarks/retrieval_engines.py run     # all engines, both sets
    .venv/bin/python benchmarks/retrieval_engines.py table              # the table again

``paired`` alternates scipy and the engine batch by batch in one process (robust speed-up on a
shared machine). ``APCIR_BENCH_CACHE`` moves the cache; ``prepare --passages N`` makes small sets.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("APCIR_BENCH_CACHE", ROOT / "bench-cache"))
DEMO_INDEX = Path(os.environ.get("APCIR_DEMO_INDEX", "/work/main/indexes/ikat23-provenance-splade-tiny"))
DEMO_QUERIES = Path(os.environ.get("APCIR_DEMO_QUERIES", "/work/main/runs/demo/reformulations.jsonl"))
PASSAGES = 1_000_000
KS = (1000, 100)
DATASETS = ("synthetic", "real")
ENGINES = ("scipy", "engine-1t", "engine-2t", "lucene", "seismic", "seismic-approx", "bmp", "paired")

# Seismic is approximate by design. Search "as exact as it allows": visit every query term's list
# (query_cut >= query length) and never skip a block (heap_factor 0: a block is skipped only when
# its summary score is below heap_factor x the k-th score). Its index keeps Seismic's default
# list pruning (build-seismic --keep-all keeps every posting, see build_seismic). Scores are
# still not exact: the Python SeismicIndex stores passage weights as f16.
SEISMIC_BUILD = {"centroid_fraction": 0.1, "summary_energy": 0.4, "min_cluster_size": 2, "doc_cut": 15}
SEISMIC_QUERY_CUT = 1000
SEISMIC_HEAP_FACTOR = 0.0
SEISMIC_APPROX = (10, 0.8)  # query_cut, heap_factor of Seismic's guidelines (docs/Guidelines.md), same index
# BMP keeps passage impacts as u8 (its index stores ``score as u8``), query weights are rescaled by
# Searcher.search to ceil(32 * w / max w), scores are u16. alpha=beta=1 is its safe (no-pruning-error) mode.
BMP_BLOCK = 32
BMP_SCALE = 255.0  # passage impact = round(255 * w / max w over the collection)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def dir_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ------------------------------------------------------------------------------------------------
# data sets
# ------------------------------------------------------------------------------------------------


def prepare_synthetic(out: Path, passages: int) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from retrieval import synthetic_matrix  # the generator of benchmarks/retrieval.py

    vocab = 30_522
    rng = np.random.default_rng(2025)
    permutation = rng.permutation(vocab)
    documents = synthetic_matrix(rng, passages, 100, 200, vocab, permutation)
    queries = synthetic_matrix(rng, 200, 20, 60, vocab, permutation)
    save_dataset(out, documents, queries)


def prepare_real(out: Path, passages: int) -> None:
    from apcir.retrieval.embedded import load_embedded

    source = sp.csr_matrix(load_embedded(DEMO_INDEX)[0], copy=True)  # vocabulary x 894
    vocab, n_source = source.shape
    docs = sp.csr_matrix(source.T)
    docs.sort_indices()
    rng = np.random.default_rng(2026)
    blocks = []
    for start in range(0, passages, 100_000):
        size = min(100_000, passages - start)
        pick = rng.integers(0, n_source, size=size)
        lengths = np.diff(docs.indptr)[pick]
        rows = np.repeat(np.arange(size), lengths)
        offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        pos = np.repeat(docs.indptr[pick], lengths) + offsets
        terms = docs.indices[pos]
        weights = docs.data[pos] * rng.lognormal(0.0, 0.3, size=pos.size).astype(np.float32)
        keep = rng.random(pos.size) >= 0.1
        added = rng.poisson(8, size=size)
        extra = rng.integers(0, docs.nnz, size=added.sum())
        rows = np.concatenate([rows[keep], np.repeat(np.arange(size), added)])
        terms = np.concatenate([terms[keep], docs.indices[extra]])
        weights = np.concatenate([weights[keep],
                                  docs.data[extra] * rng.lognormal(0.0, 0.3, size=extra.size).astype(np.float32)])
        block = sp.coo_matrix((weights.astype(np.float32), (rows, terms)), shape=(size, vocab)).tocsr()
        block.sum_duplicates()
        blocks.append(block)
    documents = sp.vstack(blocks, format="csr", dtype=np.float32)
    queries = encode_demo_queries()
    save_dataset(out, documents, queries)


def encode_demo_queries() -> sp.csr_matrix:
    from apcir.retrieval.encoder import SpladeEncoder
    from apcir.retrieval.queries import load_queries

    queries = load_queries(DEMO_QUERIES, "rewrite").queries
    encoder = SpladeEncoder("splade-tiny", device="cpu")
    return sp.csr_matrix(encoder.encode_queries(list(queries.values()), progress=False), dtype=np.float32)


def save_dataset(out: Path, documents: sp.csr_matrix, queries: sp.csr_matrix) -> None:
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    postings = sp.csr_matrix(documents.T, dtype=np.float32)  # what save_embedded does
    postings.sort_indices()
    build = time.perf_counter() - start
    sp.save_npz(out / "postings.npz", postings, compressed=False)
    queries = sp.csr_matrix(queries, dtype=np.float32)
    queries.sort_indices()
    sp.save_npz(out / "queries.npz", queries, compressed=False)
    info = {"passages": documents.shape[0], "vocab": documents.shape[1], "nnz": int(documents.nnz),
            "queries": queries.shape[0], "query_nnz": int(queries.nnz), "postings_build_seconds": build,
            "max_weight": float(postings.data.max())}
    (out / "info.json").write_text(json.dumps(info, indent=1))
    print(json.dumps(info), flush=True)


def load_dataset(name: str) -> tuple[sp.csr_matrix, sp.csr_matrix, dict]:
    folder = CACHE / name
    postings = sp.load_npz(folder / "postings.npz").tocsr()
    queries = sp.load_npz(folder / "queries.npz").tocsr()
    return postings, queries, json.loads((folder / "info.json").read_text())


def token(t: int) -> str:
    return f"t{t}"


def documents_of(postings: sp.csr_matrix) -> sp.csr_matrix:
    docs = sp.csr_matrix(postings.T)
    docs.sort_indices()
    return docs


def write_jsonl(path: Path, docs: sp.csr_matrix, transform) -> None:  # type: ignore[no-untyped-def]
    """JsonVectorCollection lines with tokens ``t<id>``; ``transform`` maps a row's weights."""
    with path.open("w", encoding="utf-8") as out:
        for row in range(docs.shape[0]):
            lo, hi = docs.indptr[row], docs.indptr[row + 1]
            values = transform(docs.data[lo:hi])
            vector = {token(t): v for t, v in zip(docs.indices[lo:hi].tolist(), values) if v}
            out.write(json.dumps({"id": str(row), "contents": "", "vector": vector}) + "\n")


# ------------------------------------------------------------------------------------------------
# measuring
# ------------------------------------------------------------------------------------------------


def latency_stats(seconds: list[float]) -> dict:
    ms = np.asarray(seconds) * 1000
    return {"mean_ms": float(ms.mean()), "p95_ms": float(np.percentile(ms, 95))}


def recall(found: list[np.ndarray], exact: list[np.ndarray]) -> float:
    """Mean over queries of |found ∩ exact| / |exact| (queries with an empty exact list skipped)."""
    values = [len(np.intersect1d(f, e)) / len(e) for f, e in zip(found, exact) if len(e)]
    return float(np.mean(values)) if values else 1.0


def exact_path(dataset: str, k: int) -> Path:
    return CACHE / dataset / f"exact-k{k}.npz"


def save_exact(dataset: str, k: int, lists: list[np.ndarray]) -> None:
    np.savez(exact_path(dataset, k), *lists)


def load_exact(dataset: str, k: int) -> list[np.ndarray]:
    with np.load(exact_path(dataset, k)) as z:
        return [z[f"arr_{i}"] for i in range(len(z.files))]


def query_rows(queries: sp.csr_matrix) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(queries.indices[queries.indptr[i]:queries.indptr[i + 1]],
             queries.data[queries.indptr[i]:queries.indptr[i + 1]]) for i in range(queries.shape[0])]


def measure_scipy(dataset: str) -> dict:
    from apcir.retrieval.embedded import QUERY_BATCH, top_k

    start = time.perf_counter()
    postings, queries, info = load_dataset(dataset)
    load = time.perf_counter() - start
    result = {"build_s": info["postings_build_seconds"], "load_s": load,
              "disk_bytes": dir_bytes(CACHE / dataset / "postings.npz"),
              "memory_bytes": int(postings.data.nbytes + postings.indices.nbytes + postings.indptr.nbytes)}
    ids = [str(i) for i in range(postings.shape[1])]
    for k in KS:
        per_query: list[float] = []
        lists: list[np.ndarray] = []
        for lo in range(0, queries.shape[0], QUERY_BATCH):
            block = queries[lo:lo + QUERY_BATCH]
            t0 = time.perf_counter()
            scores = (block @ postings).tocsr()
            hits = [top_k(scores.indices[scores.indptr[r]:scores.indptr[r + 1]],
                          scores.data[scores.indptr[r]:scores.indptr[r + 1]], ids, k) for r in range(block.shape[0])]
            seconds = time.perf_counter() - t0
            per_query += [seconds / block.shape[0]] * block.shape[0]
            lists += [np.array(sorted(int(d) for d in h), dtype=np.int64) for h in hits]
        save_exact(dataset, k, lists)
        result[f"k{k}"] = {**latency_stats(per_query), "recall": 1.0}
    result["peak_rss_mib"] = rss_mib()
    return result


def measure_engine(dataset: str, threads: int) -> dict:
    import numba

    from apcir.retrieval.engine import SparseEngine

    numba.set_num_threads(threads)
    start = time.perf_counter()
    postings, queries, info = load_dataset(dataset)
    engine = SparseEngine.from_csr(postings)
    load = time.perf_counter() - start
    del postings
    rows = query_rows(queries)
    engine.search(rows[0][0], rows[0][1], 10, parallel=threads > 1)  # compile (cached on disk after the first run)
    engine.search_matrix(queries[:2], 10, parallel=threads > 1)
    result = {"build_s": info["postings_build_seconds"], "load_s": load,
              "disk_bytes": dir_bytes(CACHE / dataset / "postings.npz"), "memory_bytes": engine.nbytes}
    for k in KS:
        exact = load_exact(dataset, k)
        seconds, found = [], []
        for terms, weights in rows:
            t0 = time.perf_counter()
            passages, _ = engine.search(terms, weights, k, parallel=threads > 1)
            seconds.append(time.perf_counter() - t0)
            found.append(np.sort(passages.astype(np.int64)))
        t0 = time.perf_counter()
        engine.search_matrix(queries, k, parallel=threads > 1)
        batch = (time.perf_counter() - t0) / len(rows)
        result[f"k{k}"] = {**latency_stats(seconds), "recall": recall(found, exact), "batch_ms": 1000 * batch}
    result["peak_rss_mib"] = rss_mib()
    return result


def lucene_dir(dataset: str) -> Path:
    return CACHE / dataset / "lucene"


def build_lucene(dataset: str, threads: int = 2) -> dict:
    """Build (once) the Lucene impact index; integer impacts round(100 w) as apcir's lucene-splade."""
    from apcir.retrieval.lucene import QUANTIZATION_SCALE, run_index_collection

    target = lucene_dir(dataset)
    stamp = target / "build.json"
    if stamp.is_file():
        return json.loads(stamp.read_text())
    postings, _, _ = load_dataset(dataset)
    docs = documents_of(postings)
    del postings
    work = CACHE / dataset / "lucene-input"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    t0 = time.perf_counter()
    step = 250_000
    for part, lo in enumerate(range(0, docs.shape[0], step)):
        chunk = docs[lo:lo + step]
        with (work / f"part-{part:03d}.jsonl").open("w", encoding="utf-8") as out:
            for row in range(chunk.shape[0]):
                a, b = chunk.indptr[row], chunk.indptr[row + 1]
                impacts = np.rint(chunk.data[a:b] * QUANTIZATION_SCALE).astype(np.int64).tolist()
                vector = {token(t): v for t, v in zip(chunk.indices[a:b].tolist(), impacts) if v > 0}
                out.write(json.dumps({"id": str(lo + row), "contents": "", "vector": vector}) + "\n")
    write_s = time.perf_counter() - t0
    del docs
    index = target / "index"
    shutil.rmtree(index, ignore_errors=True)
    t0 = time.perf_counter()
    run_index_collection(work, index, "impact", threads, target / "lucene.log")
    index_s = time.perf_counter() - t0
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    shutil.rmtree(work, ignore_errors=True)
    built = {"write_jsonl_s": write_s, "index_s": index_s, "threads": threads, "build_peak_rss_mib": children}
    stamp.write_text(json.dumps(built))
    return built


def measure_lucene(dataset: str) -> dict:
    from apcir.retrieval.java import lucene
    from apcir.retrieval.lucene import QUANTIZATION_SCALE, _PrecomputedQueries

    built = build_lucene(dataset)
    _, queries, _ = load_dataset(dataset)
    vectors = {}
    for i, (terms, weights) in enumerate(query_rows(queries)):
        impacts = np.rint(weights * QUANTIZATION_SCALE).astype(np.int64).tolist()
        vectors[str(i)] = {token(t): v for t, v in zip(terms.tolist(), impacts) if v > 0}
    t0 = time.perf_counter()
    searcher = lucene().LuceneImpactSearcher(str(lucene_dir(dataset) / "index"), _PrecomputedQueries(vectors), min_idf=-1)
    load = time.perf_counter() - t0
    result = {"build_s": built["write_jsonl_s"] + built["index_s"], "build_detail": built, "load_s": load,
              "disk_bytes": dir_bytes(lucene_dir(dataset) / "index"), "memory_bytes": None}
    asked = [q for q in vectors if vectors[q]]
    searcher.search(asked[0], k=10)
    for k in KS:
        exact = load_exact(dataset, k)
        seconds, found = [], []
        for q in vectors:
            t0 = time.perf_counter()
            hits = searcher.search(q, k=k) if vectors[q] else []
            seconds.append(time.perf_counter() - t0)
            found.append(np.sort(np.array([int(h.docid) for h in hits], dtype=np.int64)))
        result[f"k{k}"] = {**latency_stats(seconds), "recall": recall(found, exact)}
    result["peak_rss_mib"] = rss_mib()
    return result


def seismic_folder(dataset: str) -> Path:
    return CACHE / dataset / "seismic"


def build_seismic(dataset: str, keep_all: bool = False) -> dict:
    """Build (once) and save the Seismic index; run as its own process.

    Default: Seismic's own defaults (each list cut to its 3,500 x 1.5 = 5,250 largest postings).
    ``keep_all``: every posting kept (n_postings x vocabulary >= all postings, n_postings x
    max_fraction >= the longest list); summaries then merge every passage vector into one
    summary per list it is in (work ~ sum of squared passage lengths): too slow here at 1M."""
    from seismic import SeismicIndex

    folder = seismic_folder(dataset)
    stamp = folder / "build.json"
    if stamp.is_file() and "settings" in json.loads(stamp.read_text()):
        return json.loads(stamp.read_text())
    postings, _, _ = load_dataset(dataset)
    settings = dict(SEISMIC_BUILD)
    longest = float(np.diff(postings.indptr).max())
    if keep_all:
        settings["n_postings"] = postings.nnz // postings.shape[0] + 1
        settings["max_fraction"] = float(np.ceil(longest / settings["n_postings"]) + 1)
        # Seismic stores centroid ids as u16: centroid_fraction x the longest list must stay below 65,536
        settings["centroid_fraction"] = min(settings["centroid_fraction"], 60_000 / longest)
    else:
        settings.update(n_postings=3500, max_fraction=1.5)
    docs = documents_of(postings)
    del postings
    folder.mkdir(parents=True, exist_ok=True)
    jsonl = folder / "collection.jsonl"
    written = folder / "collection.json"
    if not (jsonl.is_file() and written.is_file()):
        t0 = time.perf_counter()
        write_jsonl(jsonl.with_suffix(".tmp"), docs, lambda w: w.tolist())
        jsonl.with_suffix(".tmp").rename(jsonl)
        written.write_text(json.dumps({"write_jsonl_s": time.perf_counter() - t0}))
    write_s = json.loads(written.read_text())["write_jsonl_s"]
    del docs
    t0 = time.perf_counter()
    index = SeismicIndex.build(str(jsonl), **settings, load_content=False, num_threads=2)
    index_s = time.perf_counter() - t0
    index.save(str(folder / "index"))  # writes index.index.seismic
    built = {"build_s": write_s + index_s, "write_jsonl_s": write_s, "index_s": index_s, "settings": settings,
             "build_peak_rss_mib": rss_mib()}
    stamp.write_text(json.dumps(built))
    return built


def seismic_search(dataset: str, query_cut: int, heap_factor: float) -> dict:
    from seismic import SeismicIndex, get_seismic_string

    folder = seismic_folder(dataset)
    if not (folder / "build.json").is_file() or "settings" not in json.loads((folder / "build.json").read_text()):
        subprocess.run([sys.executable, __file__, "build-seismic", dataset], check=True, stdout=subprocess.DEVNULL)
    built = json.loads((folder / "build.json").read_text())
    _, queries, _ = load_dataset(dataset)
    saved = folder / "index.index.seismic"
    t0 = time.perf_counter()
    index = SeismicIndex.load(str(saved))
    load = time.perf_counter() - t0
    string_type = get_seismic_string()
    rows = query_rows(queries)
    comps = [np.array([token(t) for t in terms.tolist()], dtype=string_type) for terms, _ in rows]
    vals = [np.asarray(w, dtype=np.float32) for _, w in rows]
    result = {"build_s": built["build_s"], "load_s": load, "disk_bytes": dir_bytes(saved), "memory_bytes": None,
              "build_detail": {**built, "query_cut": query_cut, "heap_factor": heap_factor}}
    for k in KS:
        exact = load_exact(dataset, k)
        seconds, found = [], []
        for i, (c, v) in enumerate(zip(comps, vals)):
            t0 = time.perf_counter()
            hits = index.search(str(i), c, v, k, query_cut, heap_factor) if len(c) else []
            seconds.append(time.perf_counter() - t0)
            found.append(np.sort(np.array([int(h[2]) for h in hits], dtype=np.int64)))
        result[f"k{k}"] = {**latency_stats(seconds), "recall": recall(found, exact)}
    result["peak_rss_mib"] = rss_mib()
    return result


def measure_seismic(dataset: str) -> dict:
    return seismic_search(dataset, SEISMIC_QUERY_CUT, SEISMIC_HEAP_FACTOR)


def measure_seismic_approx(dataset: str) -> dict:
    """The same index searched with Seismic's own guideline (approximate) settings."""
    return seismic_search(dataset, *SEISMIC_APPROX)


def bmp_query(weights: np.ndarray) -> np.ndarray:
    """BMP's Searcher.search: ceil(w * 32 / max w) (see python/src/lib.rs, MAX_TERM_WEIGHT = 32)."""
    scale = np.float32(32.0) / np.float32(weights.max())
    return np.ceil(weights.astype(np.float32) * scale)


def bmp_quantised(dataset: str) -> tuple[sp.csr_matrix, sp.csr_matrix, float]:
    """Postings with BMP's 8-bit passage impacts round(255 w / max w), the queries, the scale."""
    postings, queries, info = load_dataset(dataset)
    scale = BMP_SCALE / info["max_weight"]
    postings.data = np.minimum(np.rint(postings.data * scale), 255).astype(np.float32)
    postings.eliminate_zeros()
    return postings, queries, scale


def bmp_path(dataset: str) -> Path:
    return CACHE / dataset / "bmp" / f"index-b{BMP_BLOCK}.bmp"


def build_bmp(dataset: str) -> dict:
    """Build (once) BMP's index through its Python Indexer; run as its own process (it peaks high)."""
    from bmp import Indexer

    path = bmp_path(dataset)
    stamp = path.with_suffix(".json")
    if stamp.is_file() and path.is_file():
        return json.loads(stamp.read_text())
    quantised, _, scale = bmp_quantised(dataset)
    docs = documents_of(quantised)
    del quantised
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    indexer = Indexer(str(path), BMP_BLOCK, False)
    for row in range(docs.shape[0]):
        lo, hi = docs.indptr[row], docs.indptr[row + 1]
        indexer.add_document(str(row), {token(t): int(v) for t, v in
                                        zip(docs.indices[lo:hi].tolist(), docs.data[lo:hi].tolist())})
    indexer.finish()
    built = {"build_s": time.perf_counter() - t0, "build_peak_rss_mib": rss_mib(), "passage_scale": scale}
    stamp.write_text(json.dumps(built))
    return built


def measure_bmp(dataset: str) -> dict:
    from bmp import Searcher

    from apcir.retrieval.engine import SparseEngine

    if not bmp_path(dataset).with_suffix(".json").is_file():
        subprocess.run([sys.executable, __file__, "build-bmp", dataset], check=True, stdout=subprocess.DEVNULL)
    built = build_bmp(dataset)
    quantised, queries, scale = bmp_quantised(dataset)
    path = bmp_path(dataset)
    build_s = built["build_s"]
    t0 = time.perf_counter()
    searcher = Searcher(str(path))
    load = time.perf_counter() - t0
    rows = query_rows(queries)
    # exact top k of BMP's own integer problem (u8 passages x ceil(32 w / max) queries), by the engine
    engine = SparseEngine.from_csr(quantised)
    result = {"build_s": build_s, "load_s": load, "disk_bytes": dir_bytes(path), "memory_bytes": None,
              "build_detail": {"block": BMP_BLOCK, "passage_scale": scale, "alpha": 1.0, "beta": 1.0,
                               "build_peak_rss_mib": built["build_peak_rss_mib"]}}
    for k in KS:
        exact = load_exact(dataset, k)
        seconds, found, own = [], [], []
        same_scores = overflow = 0
        for terms, weights in rows:
            query = {token(t): float(w) for t, w in zip(terms.tolist(), weights.tolist())}
            t0 = time.perf_counter()
            ids, scores = searcher.search(query, k, 1.0, 1.0) if query else ([], [])
            seconds.append(time.perf_counter() - t0)
            found.append(np.sort(np.array([int(d) for d in ids], dtype=np.int64)))
            qp, qs = engine.search(terms, bmp_query(weights), k) if len(terms) else (np.zeros(0, np.int32), np.zeros(0))
            own.append(np.sort(qp.astype(np.int64)))
            overflow += int(len(qs) > 0 and qs[0] > 65535)
            # exact on its own integer scores = the same k scores (which passages fill a tie at the cut is free)
            same_scores += int(np.array_equal(np.sort(np.asarray(scores, dtype=np.float64)), np.sort(qs.astype(np.float64))))
        result[f"k{k}"] = {**latency_stats(seconds), "recall": recall(found, exact),
                           "recall_vs_own_integer_exact": recall(found, own),
                           "queries_with_exact_integer_scores": same_scores / len(rows), "queries_over_u16": overflow}
    result["peak_rss_mib"] = rss_mib()
    return result


def measure_paired(dataset: str) -> dict:
    """scipy and the engine timed alternately on the same batches of 64 queries, in one process.

    On a shared machine the load changes between child processes; alternating batch by batch
    exposes both to the same load, so the ratio is the robust speed-up figure."""
    import numba

    from apcir.retrieval.embedded import QUERY_BATCH, top_k
    from apcir.retrieval.engine import SparseEngine

    postings, queries, _ = load_dataset(dataset)
    engine = SparseEngine.from_csr(postings)
    ids = [str(i) for i in range(postings.shape[1])]
    rows = query_rows(queries)
    engine.search(rows[0][0], rows[0][1], 10)
    engine.search_matrix(queries[:2], 10)
    threads = numba.get_num_threads()
    result: dict = {"threads": threads}
    for k in KS:
        times = {"scipy": 0.0, "engine-1t": 0.0, f"engine-batch-{threads}t": 0.0}
        ratios = []
        for lo in range(0, queries.shape[0], QUERY_BATCH):
            block = queries[lo:lo + QUERY_BATCH]
            t0 = time.perf_counter()
            scores = (block @ postings).tocsr()
            for r in range(block.shape[0]):
                top_k(scores.indices[scores.indptr[r]:scores.indptr[r + 1]],
                      scores.data[scores.indptr[r]:scores.indptr[r + 1]], ids, k)
            t_scipy = time.perf_counter() - t0
            del scores
            t0 = time.perf_counter()
            for terms, weights in rows[lo:lo + QUERY_BATCH]:
                engine.search(terms, weights, k)
            t_one = time.perf_counter() - t0
            t0 = time.perf_counter()
            engine.search_matrix(block, k)
            t_batch = time.perf_counter() - t0
            times["scipy"] += t_scipy
            times["engine-1t"] += t_one
            times[f"engine-batch-{threads}t"] += t_batch
            ratios.append(t_scipy / t_one)
        n = queries.shape[0]
        result[f"k{k}"] = {name: 1000 * t / n for name, t in times.items()}
        result[f"k{k}"]["speedup_1t"] = times["scipy"] / times["engine-1t"]
        result[f"k{k}"]["speedup_batch"] = times["scipy"] / times[f"engine-batch-{threads}t"]
        result[f"k{k}"]["speedup_1t_per_batch_min_max"] = [min(ratios), max(ratios)]
    result["peak_rss_mib"] = rss_mib()
    return result


MEASURES = {
    "scipy": measure_scipy,
    "engine-1t": lambda d: measure_engine(d, 1),
    "engine-2t": lambda d: measure_engine(d, 2),
    "lucene": measure_lucene,
    "seismic": measure_seismic,
    "seismic-approx": measure_seismic_approx,
    "bmp": measure_bmp,
    "paired": measure_paired,
}


# ------------------------------------------------------------------------------------------------
# driver and table
# ------------------------------------------------------------------------------------------------


def fmt_bytes(n: int | None) -> str:
    return "-" if not n else f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def table(results: dict) -> str:
    lines = []
    for dataset, engines in results.items():
        info = json.loads((CACHE / dataset / "info.json").read_text())
        lines.append(f"\n**{dataset}**: {info['passages']:,} passages, {info['nnz'] / info['passages']:.0f} nonzeros/passage, "
                     f"{info['queries']} queries of {info['query_nnz'] / info['queries']:.1f} terms\n")
        lines.append("| engine | k=1000 mean / p95 ms | recall@1000 | k=100 mean / p95 ms | recall@100 | "
                     "speed-up k=1000 (mean) | build s | disk | postings in memory | peak RSS |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
        base = engines.get("scipy", {}).get("k1000", {}).get("mean_ms")
        for name, r in engines.items():
            if name == "paired":
                continue
            if "error" in r:
                lines.append(f"| {name} | failed: {r['error']} | | | | | | | | |")
                continue
            a, b = r["k1000"], r["k100"]
            speed = f"{base / a['mean_ms']:.1f}x" if base else "-"
            extra = f" (batch {a['batch_ms']:.1f})" if "batch_ms" in a else ""
            lines.append(f"| {name} | {a['mean_ms']:.1f} / {a['p95_ms']:.1f}{extra} | {a['recall']:.4f} | "
                         f"{b['mean_ms']:.1f} / {b['p95_ms']:.1f} | {b['recall']:.4f} | {speed} | {r['build_s']:.0f} | "
                         f"{fmt_bytes(r.get('disk_bytes'))} | {fmt_bytes(r.get('memory_bytes'))} | {r['peak_rss_mib']:,.0f} MiB |")
    paired = {d: e["paired"] for d, e in results.items() if "paired" in e and "error" not in e["paired"]}
    if paired:
        lines.append("\n**Paired** (scipy and the engine alternated batch by batch in one process; ms/query):\n")
        lines.append("| data set | k | scipy | engine 1 thread | engine batch, all threads | speed-up 1 thread "
                     "(per-batch min-max) | speed-up batch |")
        lines.append("|---|---|---|---|---|---|---|")
        for d, r in paired.items():
            for k in KS:
                v = r[f"k{k}"]
                batch = next(x for x in v if x.startswith("engine-batch"))
                lo, hi = v["speedup_1t_per_batch_min_max"]
                lines.append(f"| {d} | {k} | {v['scipy']:.1f} | {v['engine-1t']:.1f} | {v[batch]:.1f} | "
                             f"{v['speedup_1t']:.1f}x ({lo:.1f}-{hi:.1f}) | {v['speedup_batch']:.1f}x |")
    return "\n".join(lines)


def machine() -> str:
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    prep = sub.add_parser("prepare", help="generate the data sets into bench-cache/")
    prep.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    prep.add_argument("--passages", type=int, default=PASSAGES)
    lb = sub.add_parser("build-lucene", help="build (once) the Lucene impact index of a data set")
    lb.add_argument("dataset", choices=DATASETS)
    lb.add_argument("--threads", type=int, default=2)
    bs = sub.add_parser("build-seismic", help="build (once) the Seismic index of a data set")
    bs.add_argument("dataset", choices=DATASETS)
    bs.add_argument("--keep-all", action="store_true", help="keep every posting (exact-as-possible, slow)")
    bb = sub.add_parser("build-bmp", help="build (once) the BMP index of a data set")
    bb.add_argument("dataset", choices=DATASETS)
    one = sub.add_parser("measure", help="measure one engine on one data set (JSON on stdout)")
    one.add_argument("dataset", choices=DATASETS)
    one.add_argument("engine", choices=ENGINES)
    run = sub.add_parser("run", help="measure engines in child processes and print the Markdown table")
    run.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    run.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    run.add_argument("--results", type=Path, default=CACHE / "results.json")
    sub.add_parser("table", help="print the table of the saved results")
    args = parser.parse_args()
    if args.command is None:  # `make bench` runs every script bare: a quick scipy-vs-engine check at 100,000
        quick = CACHE / "quick"
        env = {**os.environ, "APCIR_BENCH_CACHE": str(quick)}
        for command in (["prepare", "--datasets", "synthetic", "--passages", "100000"],
                        ["run", "--datasets", "synthetic", "--engines", "scipy", "engine-1t", "paired"]):
            subprocess.run([sys.executable, __file__, *command], env=env, check=True)
        print("\n(quick run at 100,000 synthetic passages; the 1M comparison with Lucene, Seismic and BMP: see "
              "the module docstring)")
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    if not (CACHE / ".gitignore").is_file():  # generated data and indexes are never committed
        (CACHE / ".gitignore").write_text("*\n")

    if args.command == "prepare":
        for name in args.datasets:
            if (CACHE / name / "info.json").is_file():
                print(f"{name}: cached", flush=True)
                continue
            (prepare_synthetic if name == "synthetic" else prepare_real)(CACHE / name, args.passages)
    elif args.command == "build-lucene":
        print(json.dumps(build_lucene(args.dataset, args.threads)))
    elif args.command == "build-seismic":
        print(json.dumps(build_seismic(args.dataset, args.keep_all)))
    elif args.command == "build-bmp":
        print(json.dumps(build_bmp(args.dataset)))
    elif args.command == "measure":
        print(json.dumps(MEASURES[args.engine](args.dataset)))
    elif args.command == "run":
        results = json.loads(args.results.read_text()) if args.results.is_file() else {}
        for name in args.datasets:
            for engine in ["scipy"] + [e for e in args.engines if e != "scipy"]:
                if engine == "scipy" and "scipy" not in args.engines and exact_path(name, KS[0]).is_file():
                    continue
                proc = subprocess.run([sys.executable, __file__, "measure", name, engine], capture_output=True, text=True)
                try:
                    value = json.loads(proc.stdout.strip().splitlines()[-1])
                except (IndexError, json.JSONDecodeError):
                    tail = " ".join(proc.stderr.strip().splitlines()[-3:])[-300:]
                    value = {"error": f"exit {proc.returncode}: {tail}"}
                results.setdefault(name, {})[engine] = value
                args.results.write_text(json.dumps(results, indent=1))
                print(f"{name} {engine}: {json.dumps(value)[:300]}", file=sys.stderr, flush=True)
        print(f"Machine: {machine()}\n")
        print(table(results))
    else:
        print(f"Machine: {machine()}\n")
        print(table(json.loads((CACHE / "results.json").read_text())))


if __name__ == "__main__":
    main()
