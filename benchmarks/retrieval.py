"""Retrieval speed: index build rate, query encoding rate and search latency.

1. The demo collection (ikat23-provenance, 894 passages) with splade-tiny:
   embedded, lucene-splade (indexed from the embedded index's vectors) and
   lucene-bm25. Queries: the iKAT-23 test turns' manual rewrites with their
   canonical responses as (query, response) pairs.
2. A synthetic embedded index of 1,000,000 passages with SPLADE-like
   statistics: per passage 100-200 distinct term ids (uniform count) drawn
   from a Zipf(1.0) law over a 30,522-term vocabulary (the BERT vocabulary
   size; ranks mapped to term ids by a fixed random permutation), weights
   log-normal(mu=-0.5, sigma=0.8) (median 0.6, a long tail above 3, like
   SPLADE document weights); 200 queries of 20-60 terms drawn the same way.

Run: ``.venv/bin/python benchmarks/retrieval.py [--passages 1000000]``.
Search latency is per query after encoding, single-threaded for Lucene.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def demo_rows(root: Path) -> list[tuple[str, str, str]]:
    from apcir import datasets
    from apcir.retrieval import build_index, open_index
    from apcir.retrieval.embedded import search_matrix
    from apcir.retrieval.encoder import SpladeEncoder
    from apcir.retrieval.lucene import quantize

    encoder = SpladeEncoder("splade-tiny", device="cpu")
    turns = [t for t in datasets.topics("ikat23-test") if t.manual_rewrite]
    queries = {t.turn_id: (t.manual_rewrite, t.response or None) for t in turns}
    rows = []
    result, seconds = timed(lambda: build_index("ikat23-provenance", "embedded", root / "emb", encoder=encoder, progress=False))
    n = result.manifest.passages  # type: ignore[union-attr]
    rows.append(("demo 894 / embedded", "index build (encode + index)", f"{n / seconds:,.1f} passages/s ({seconds:.1f} s)"))
    _, seconds = timed(lambda: build_index("ikat23-provenance", "lucene-splade", root / "imp", encoder=encoder,
                                           progress=False, vectors_from=root / "emb"))
    rows.append(("demo 894 / lucene-splade", "index build from the same vectors (Lucene only)", f"{n / seconds:,.1f} passages/s ({seconds:.1f} s)"))
    _, seconds = timed(lambda: build_index("ikat23-provenance", "lucene-bm25", root / "bm25", progress=False))
    rows.append(("demo 894 / lucene-bm25", "index build", f"{n / seconds:,.1f} passages/s ({seconds:.1f} s)"))

    matrix, seconds = timed(lambda: encoder.encode_queries(list(queries.values()), progress=False))
    rows.append(("demo / splade-tiny", f"query encoding ({len(queries)} query+response pairs)", f"{len(queries) / seconds:,.1f} queries/s"))

    embedded = open_index(root / "emb", encoder)
    _, seconds = timed(lambda: search_matrix(embedded.postings, embedded.ids, matrix, 1000))  # type: ignore[attr-defined]
    rows.append(("demo 894 / embedded", "search latency, k=1000", f"{1000 * seconds / len(queries):.2f} ms/query"))

    impact = open_index(root / "imp", encoder, threads=1)
    vocab = encoder.vocabulary
    q = quantize(matrix)
    vectors = {turn: {vocab[t]: int(w) for t, w in zip(q[i].indices, q[i].data)} for i, turn in enumerate(queries)}
    impact.queries.vectors = vectors  # type: ignore[attr-defined]
    asked = list(queries)
    _, seconds = timed(lambda: impact.searcher.batch_search(asked, asked, k=1000, threads=1))  # type: ignore[attr-defined]
    rows.append(("demo 894 / lucene-splade", "search latency, k=1000", f"{1000 * seconds / len(queries):.2f} ms/query"))

    bm25 = open_index(root / "bm25", threads=1)
    texts = [f"{a} {b or ''}" for a, b in queries.values()]
    _, seconds = timed(lambda: bm25.searcher.batch_search(texts, asked, k=1000, threads=1))  # type: ignore[attr-defined]
    rows.append(("demo 894 / lucene-bm25", "search latency, k=1000", f"{1000 * seconds / len(queries):.2f} ms/query"))
    return rows


def zipf_terms(rng: np.random.Generator, counts: np.ndarray, vocab: int, permutation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row ids and term ids: ``counts[i]`` Zipf-distributed terms for row i (duplicates merged later)."""
    cdf = np.cumsum(1.0 / np.arange(1, vocab + 1))
    cdf /= cdf[-1]
    total = int(counts.sum())
    ranks = np.searchsorted(cdf, rng.random(total))
    rows = np.repeat(np.arange(len(counts)), counts)
    return rows, permutation[np.minimum(ranks, vocab - 1)]


def synthetic_matrix(rng: np.random.Generator, n: int, low: int, high: int, vocab: int, permutation: np.ndarray) -> sp.csr_matrix:
    blocks = []
    for start in range(0, n, 100_000):
        size = min(100_000, n - start)
        counts = rng.integers(low, high + 1, size=size)
        rows, terms = zipf_terms(rng, counts, vocab, permutation)
        weights = rng.lognormal(-0.5, 0.8, size=len(rows)).astype(np.float32)
        block = sp.coo_matrix((weights, (rows, terms)), shape=(size, vocab)).tocsr()  # merges repeats
        block.sum_duplicates()
        blocks.append(block)
    return sp.vstack(blocks, format="csr", dtype=np.float32)


def synthetic_rows(root: Path, passages: int) -> list[tuple[str, str, str]]:
    from apcir.retrieval.embedded import load_embedded, save_embedded, search_matrix
    from apcir.retrieval.engine import SparseEngine, search_runs

    vocab = 30_522
    rng = np.random.default_rng(2025)
    permutation = rng.permutation(vocab)
    documents, gen_seconds = timed(lambda: synthetic_matrix(rng, passages, 100, 200, vocab, permutation))
    ids = [f"doc{i}:0" for i in range(passages)]
    _, seconds = timed(lambda: save_embedded(root / "synthetic", documents, ids))
    label = f"synthetic {passages:,} / embedded"
    rows = [
        (label, "collection", f"{documents.nnz / passages:.0f} nonzeros/passage, {documents.nnz:,} in all (generated in {gen_seconds:.0f} s)"),
        (label, "index build from vectors (transpose + save)", f"{passages / seconds:,.0f} passages/s ({seconds:.1f} s)"),
    ]
    documents = None  # free it before loading the index back
    (postings, loaded_ids), seconds = timed(lambda: load_embedded(root / "synthetic"))
    rows.append((label, "index load", f"{seconds:.1f} s, {(postings.data.nbytes + postings.indices.nbytes) / 2**30:.2f} GiB in memory"))
    queries = synthetic_matrix(rng, 200, 20, 60, vocab, permutation)
    engine, seconds = timed(lambda: SparseEngine.from_csr(postings))
    rows.append((label, "search engine load (block bounds, 16-bit offsets)", f"{seconds:.1f} s"))
    search_runs(engine, loaded_ids, queries[:8], 10)  # numba's first call compiles (cached on disk after)
    for k in (10, 1000):
        _, seconds = timed(lambda k=k: search_runs(engine, loaded_ids, queries, k))
        rows.append((label, f"search latency, k={k} (200 queries, exact)", f"{1000 * seconds / queries.shape[0]:.1f} ms/query"))
        _, seconds = timed(lambda k=k: search_matrix(postings, loaded_ids, queries, k))
        rows.append((label.replace("embedded", "scipy product (the peer)"), f"search latency, k={k}",
                     f"{1000 * seconds / queries.shape[0]:.1f} ms/query"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=1_000_000, help="size of the synthetic collection")
    parser.add_argument("--skip-demo", action="store_true")
    args = parser.parse_args()
    import torch
    from rich.console import Console
    from rich.table import Table

    root = Path(tempfile.mkdtemp(prefix="apcir-bench-"))
    try:
        rows = [] if args.skip_demo else demo_rows(root)
        rows += synthetic_rows(root, args.passages)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    table = Table(title=f"apcir retrieval benchmark: {os.cpu_count()} cores ({cpu}), torch threads {torch.get_num_threads()}, "
                        f"GPU {'yes' if torch.cuda.is_available() else 'no'}")
    for column in ("setting", "measure", "result"):
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
