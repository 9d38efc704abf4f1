"""Peak memory of `apcir run` over a large synthetic collection: it must not hold the collection.

For each size N the collection is the 894 real demo passages (with their splade-tiny vectors from the
demo index, so that some turns have judged passages) plus N synthetic passages with texts and
SPLADE-like vectors over splade-tiny's vocabulary (Zipf term ids, log-normal weights, ~100 terms a
passage). The index is built from those vectors (`apcir index build --vectors --encoder splade-tiny`,
no encoding), then `apcir run` runs the demo experiment on it (heuristic reformulator, every
baseline, 5-fold CV on the provenance qrels). `/usr/bin/time -v` gives each command's peak resident
memory. The table compares the run's peak with the index's own size: the difference must not grow
with N.

    python benchmarks/pipeline_memory.py                      # N = 100,000 and 1,000,000
    python benchmarks/pipeline_memory.py --sizes 20000 --cache /tmp/apcir-mem   # default cache: bench-cache/memory
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def apcir(*args: str) -> list[str]:
    return [sys.executable, "-m", "apcir", *args]


def timed(command: list[str], cwd: Path) -> tuple[float, float]:
    """(seconds, peak resident MiB) of a command, from /usr/bin/time -v."""
    started = time.perf_counter()
    result = subprocess.run(["/usr/bin/time", "-v", *command], cwd=cwd, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}): {' '.join(command)}\n{result.stderr[-3000:]}")
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", result.stderr)
    return seconds, int(peak.group(1)) / 1024 if peak else float("nan")


def tiny_vocabulary() -> list[str]:
    """splade-tiny's tokens by id (from its tokenizer.json)."""
    from apcir.retrieval.encoder import splade_tiny_path

    vocab = json.loads((splade_tiny_path() / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    tokens = [""] * len(vocab)
    for token, index in vocab.items():
        tokens[index] = token
    return tokens


def demo_vectors() -> list[dict]:
    """The 894 demo passages with their texts and their vectors from an embedded splade-tiny index."""
    from apcir import datasets
    from apcir.retrieval.build import build_index
    from apcir.retrieval.embedded import load_embedded

    index = ROOT / "indexes" / "ikat23-provenance-splade-tiny"
    build_index("ikat23-provenance", "embedded", index, "splade-tiny", progress=False)
    postings, ids = load_embedded(index)
    documents = postings.T.tocsr()
    vocab = tiny_vocabulary()
    texts = {p.id: p.contents for p in datasets.iter_collection(datasets.collection_path("ikat23-provenance"))}
    rows = []
    for row, pid in enumerate(ids):
        lo, hi = documents.indptr[row], documents.indptr[row + 1]
        vector = {vocab[t]: float(w) for t, w in zip(documents.indices[lo:hi], documents.data[lo:hi])}
        rows.append({"id": pid, "contents": texts[pid], "vector": vector})
    return rows


def write_collection(path: Path, n: int, seed: int = 0) -> None:
    vocab = tiny_vocabulary()
    usable = [t for t in vocab if t.isalpha() and not t.startswith("[")]
    rng = np.random.default_rng(seed)
    zipf = 1.0 / np.arange(1, len(usable) + 1)
    zipf /= zipf.sum()
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        for row in demo_vectors():
            out.write(json.dumps(row) + "\n")
        batch = 10_000
        for start in range(0, n, batch):
            size = min(batch, n - start)
            lengths = rng.integers(60, 140, size=size)
            terms = rng.choice(len(usable), size=int(lengths.sum()), p=zipf)
            weights = rng.lognormal(-0.5, 0.8, size=terms.size)
            offset = 0
            for i, length in enumerate(lengths):
                chosen = terms[offset:offset + length]
                vector = {usable[t]: round(float(w), 4) for t, w in zip(chosen, weights[offset:offset + length])}
                offset += length
                words = " ".join(usable[t] for t in chosen[:40])
                out.write(json.dumps({"id": f"clueweb22-en9999-{(start + i) // 100000:02d}-{(start + i) % 100000:05d}:1",
                                      "contents": words, "vector": vector}) + "\n")
    tmp.replace(path)


def index_in_memory(index: Path) -> float:
    """MiB the loaded index takes: postings, the search engine's offsets and block table, the passage ids."""
    from apcir.retrieval.embedded import load_embedded
    from apcir.retrieval.engine import SparseEngine

    postings, ids = load_embedded(index)
    engine = SparseEngine.from_csr(postings)
    size = postings.data.nbytes + postings.indices.nbytes + postings.indptr.nbytes
    size += engine.local.nbytes + engine.bounds.nbytes + sum(sys.getsizeof(i) for i in ids) + 8 * len(ids)
    return size / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--cache", type=Path, default=None, help="keep collections and indexes here between runs")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 8],
                        help="retrieval.batch_size of the runs (the query encoder's memory)")
    args = parser.parse_args()
    cache = args.cache or ROOT / "bench-cache" / "memory"  # git-ignored; collections are reused between runs
    cache.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in args.sizes:
        collection = cache / f"collection-{n}.jsonl"
        if not collection.exists():
            print(f"generating {n:,} synthetic passages ...", file=sys.stderr, flush=True)
            write_collection(collection, n)
        index = cache / f"index-{n}"
        cached = (index / "manifest.json").exists()
        build_s, build_peak = timed(apcir("index", "build", "--collection", str(collection), "--vectors",
                                          "--encoder", "splade-tiny", "--out", str(index)), cache)
        index_mb = index_in_memory(index)
        build = "cached" if cached else f"{build_s:,.0f} s, peak {build_peak:,.0f} MiB"
        for batch in args.batch_sizes:
            config = cache / f"run-{n}-{batch}.toml"
            run_dir = cache / f"run-{n}-{batch}"
            shutil.rmtree(run_dir, ignore_errors=True)
            config.write_text(
                f'name = "memory-{n}"\noutput_dir = "{run_dir}"\n[retrieval]\nindex = "{index}"\n'
                f'collection = "{collection}"\nbatch_size = {batch}\n[fusion.weights]\nsource = "cv"\n'
                '[evaluation]\nqrels = "ikat23-test-provenance"\n'
            )
            run_s, run_peak = timed(apcir("run", str(config), "--no-progress"), cache)
            rows.append((n + 894, index_mb, build, batch, run_s, run_peak, run_peak - index_mb))
    print()
    print(f"`apcir run` memory: {os.cpu_count()} cores; the demo experiment over N passages (embedded backend, "
          "index built from precomputed vectors)\n")
    print("| passages | index in memory MiB | index build (from vectors) | query batch | run s | run peak MiB | "
          "run peak - index MiB |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for n, index_mb, build, batch, run_s, run_peak, extra in rows:
        print(f"| {n:,} | {index_mb:,.0f} | {build} | {batch} | {run_s:,.0f} | {run_peak:,.0f} | {extra:,.0f} |")


if __name__ == "__main__":
    main()
