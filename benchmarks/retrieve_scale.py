"""`apcir retrieve` around its engine, and memory-mapped search, at 300,000 and 1,000,000 passages.

For each size, one run measures, on the same synthetic collection (the generator of
``benchmarks/retrieval.py``, seed 2025: passages of 100-200 Zipf(1.0) draws over 30,522 terms, ~102 distinct
terms each; 200 queries of ~34 distinct terms), at k=1000:

* **engine alone**: :class:`apcir.retrieval.engine.SparseEngine` over the index's memory-mapped arrays, in
  process, ``search_matrix`` in batches of 64 queries on 2 threads (warm: after one pass over the queries);
* **apcir retrieve end to end**: the command ``apcir retrieve --index DIR --query-vectors Q.jsonl --k 1000``
  as a user runs it, with 200 queries and with 10; the per-query cost is the difference over 190 queries,
  so process start and index opening cancel out (best of 3 each);
* **scipy product**: ``queries @ postings`` then a partial sort (``apcir.retrieval.embedded.search_matrix``);
* **Lucene**: Anserini's impact index through pyserini's ``LuceneImpactSearcher`` (integer impacts
  round(100 w), one thread, one query at a time), as ``benchmarks/retrieval_engines.py`` measures it;
* **memory-mapped RSS**: a fresh process opens the index (nothing is read) and searches the 200 queries;
  its peak resident memory next to the index's size on disk.

Run::

    nice -n 10 .venv/bin/python benchmarks/retrieve_scale.py prepare   # data, apcir and Lucene indexes (once)
    .venv/bin/python benchmarks/retrieve_scale.py run                   # measures and prints the table
    .venv/bin/python benchmarks/retrieve_scale.py table                 # the table again

Data live in ``bench-cache/scale-<size>/`` (``APCIR_BENCH_CACHE`` moves it); the Lucene index at 1M takes
15-40 minutes to build on 2 cores. Run bare (``make bench``) it measures a 100,000-passage set without Lucene.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import scipy.sparse as sp

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("APCIR_BENCH_CACHE", ROOT / "bench-cache"))
ENGINES = ROOT / "benchmarks" / "retrieval_engines.py"
SIZES = (300_000, 1_000_000)
K = 1000
SMALL, LARGE = 10, 200
REPEATS = 3
APCIR = str(Path(sys.executable).parent / "apcir")


def folder(size: int) -> Path:
    return CACHE / f"scale-{size // 1000}k"


def engines(size: int, *args: str) -> str:
    """Run ``benchmarks/retrieval_engines.py`` on this size's cache; its stdout."""
    env = {**os.environ, "APCIR_BENCH_CACHE": str(folder(size))}
    done = subprocess.run([sys.executable, str(ENGINES), *args], env=env, check=True, capture_output=True, text=True)
    return done.stdout


def dataset(size: int) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    data = folder(size) / "synthetic"
    return sp.load_npz(data / "postings.npz").tocsr(), sp.load_npz(data / "queries.npz").tocsr()


def queries_of(size: int) -> sp.csr_matrix:
    return sp.load_npz(folder(size) / "synthetic" / "queries.npz").tocsr()


def index_dir(size: int) -> Path:
    return folder(size) / "apcir-index"


def write_apcir_index(size: int) -> None:
    """The data set as an apcir embedded index built from vectors (no model: searched with --query-vectors)."""
    from apcir.io import write_text
    from apcir.retrieval.embedded import save_arrays
    from apcir.retrieval.manifest import CollectionInfo, IndexManifest, now_iso, write_manifest
    from apcir.retrieval.vectors import Vocabulary

    out = index_dir(size)
    if (out / "manifest.json").is_file():
        return
    out.mkdir(parents=True, exist_ok=True)
    postings, queries = dataset(size)
    ids = [f"p{i:08d}" for i in range(postings.shape[1])]  # sorted, as the index keeps them
    save_arrays(out, postings, ids)
    write_text(out / "ids.txt", "".join(f"{pid}\n" for pid in ids))
    Vocabulary([f"t{t}" for t in range(postings.shape[0])]).save(out)
    stub = folder(size) / "collection.jsonl"  # the texts are not searched; the manifest names a file
    stub.write_text('{"id": "p00000000", "contents": ""}\n')
    write_manifest(out, IndexManifest(backend="embedded", vocab_size=postings.shape[0],
                                      collection=CollectionInfo.of("synthetic", stub), passages=len(ids),
                                      nonzeros=int(postings.nnz), source="vectors", weights="float",
                                      created=now_iso()))
    for n in (SMALL, LARGE):
        with (folder(size) / f"queries-{n}.jsonl").open("w") as handle:
            for q in range(n):
                lo, hi = queries.indptr[q], queries.indptr[q + 1]
                vector = {f"t{t}": float(w) for t, w in zip(queries.indices[lo:hi].tolist(), queries.data[lo:hi].tolist())}
                handle.write(json.dumps({"id": f"{q + 1}-1_1", "contents": "", "vector": vector}) + "\n")


def prepare(size: int, lucene: bool) -> None:
    engines(size, "prepare", "--datasets", "synthetic", "--passages", str(size))
    write_apcir_index(size)
    if lucene:
        print(f"{size:,}: building the Lucene index (once)", file=sys.stderr, flush=True)
        engines(size, "build-lucene", "synthetic")


# ---- measures (each in its own process) ---------------------------------------------------------
def measure_engine(size: int) -> dict:
    """Engine alone over the memory-mapped index, warm, batches of 64 on 2 threads."""
    import numba

    from apcir.retrieval.backends import open_index
    from apcir.retrieval.embedded import QUERY_BATCH

    numba.set_num_threads(2)
    index = open_index(index_dir(size))
    queries = queries_of(size)
    engine = index.engine  # type: ignore[attr-defined]
    for lo in range(0, queries.shape[0], QUERY_BATCH):  # warm: compile, and the posting pages in cache
        engine.search_matrix(queries[lo:lo + QUERY_BATCH], K)
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for lo in range(0, queries.shape[0], QUERY_BATCH):
            engine.search_matrix(queries[lo:lo + QUERY_BATCH], K)
        best = min(best, time.perf_counter() - t0)
    return {"ms_per_query": 1000 * best / queries.shape[0]}


def measure_rss(size: int) -> dict:
    """A fresh process: open the memory-mapped index, search one query, then all; resident memory at each step
    (RssAnon: the process's own memory; RssFile: index pages mapped in, which the kernel can drop) against the
    index's size on disk."""
    from apcir.retrieval.backends import open_index

    queries = queries_of(size)
    steps = {"start": memory()}
    index = open_index(index_dir(size))
    steps["opened"] = memory()
    turns = [str(q) for q in range(queries.shape[0])]
    index.search_vectors(turns[:1], queries[:1], K, progress=False)  # type: ignore[attr-defined]
    steps["one query"] = memory()
    t0 = time.perf_counter()
    run = index.search_vectors(turns, queries, K, progress=False)  # type: ignore[attr-defined]
    steps["200 queries"] = memory()
    arrays = sum(p.stat().st_size for p in index_dir(size).glob("postings.*.npy"))
    return {"steps": steps, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "index_arrays_mib": arrays / 2**20, "search_s": time.perf_counter() - t0,
            "hits": sum(len(h) for h in run.values())}


def memory() -> dict[str, float]:
    """VmRSS, RssAnon and RssFile of this process, MiB."""
    wanted = {"VmRSS:": "rss", "RssAnon:": "anon", "RssFile:": "file"}
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key = line.split(":")[0] + ":"
        if key in wanted:
            found[wanted[key]] = int(line.split()[1]) / 1024
    return found


def measure_command(size: int) -> dict:
    """``apcir retrieve --query-vectors`` end to end: (time with 200 queries - time with 10) / 190."""
    times: dict[int, float] = {}
    out = folder(size) / "retrieve.run"
    for n in (SMALL, LARGE, SMALL, LARGE, SMALL, LARGE)[: 2 * REPEATS]:
        t0 = time.perf_counter()
        subprocess.run([APCIR, "retrieve", "--index", str(index_dir(size)), "--query-vectors",
                        str(folder(size) / f"queries-{n}.jsonl"), "--k", str(K), "--out", str(out)], check=True,
                       capture_output=True)
        times[n] = min(times.get(n, float("inf")), time.perf_counter() - t0)
    return {"ms_per_query": 1000 * (times[LARGE] - times[SMALL]) / (LARGE - SMALL),
            "seconds_10": times[SMALL], "seconds_200": times[LARGE]}


def measure_peer(size: int, engine: str) -> dict:
    value = json.loads(engines(size, "measure", "synthetic", engine).strip().splitlines()[-1])
    return {"ms_per_query": value[f"k{K}"]["mean_ms"], "peak_rss_mib": value.get("peak_rss_mib")}


MEASURES = {"engine": measure_engine, "command": measure_command, "rss": measure_rss}


def measure(size: int, what: str) -> dict:
    if what in MEASURES:
        return MEASURES[what](size)
    return measure_peer(size, what)


def run(sizes: list[int], lucene: bool, results_path: Path) -> dict:
    results: dict = {}
    for size in sizes:
        prepare(size, lucene)
        wanted = ["rss", "engine", "command", "scipy"] + (["lucene"] if lucene else [])
        for what in wanted:
            done = subprocess.run([sys.executable, __file__, "measure", str(size), what], capture_output=True,
                                  text=True)
            try:
                value = json.loads(done.stdout.strip().splitlines()[-1])
            except (IndexError, json.JSONDecodeError):
                value = {"error": " ".join(done.stderr.strip().splitlines()[-3:])[-300:]}
            results.setdefault(str(size), {})[what] = value
            print(f"{size:,} {what}: {json.dumps(value)}", file=sys.stderr, flush=True)
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps(results, indent=1))
    return results


def table(results: dict) -> str:
    rows = ["| passages | engine alone (ms/query) | `apcir retrieve` end to end (ms/query) | ratio | scipy product "
            "(ms/query) | Lucene impact (ms/query) | index arrays | RSS after open | after 1 query | "
            "after 200 queries (of it: index pages) |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for size, r in results.items():
        def ms(name: str, r: dict = r) -> str:
            value = r.get(name, {}).get("ms_per_query")
            return f"{value:.2f}" if isinstance(value, float) else "-"
        ratio = (r["command"]["ms_per_query"] / r["engine"]["ms_per_query"]
                 if "ms_per_query" in r.get("command", {}) and "ms_per_query" in r.get("engine", {}) else None)
        rss = r.get("rss", {})
        steps = rss.get("steps", {})

        def mib(step: str, part: str = "rss", steps: dict = steps) -> str:
            return f"{steps[step][part]:,.0f} MiB" if step in steps else "-"
        rows.append(f"| {int(size):,} | {ms('engine')} | {ms('command')} | "
                    f"{f'{ratio:.2f}x' if ratio else '-'} | {ms('scipy')} | {ms('lucene')} | "
                    f"{rss.get('index_arrays_mib', 0):,.0f} MiB | {mib('opened')} | {mib('one query')} | "
                    f"{mib('200 queries')} ({mib('200 queries', 'file')}) |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    prep = sub.add_parser("prepare")
    prep.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    prep.add_argument("--no-lucene", action="store_true")
    one = sub.add_parser("measure")
    one.add_argument("size", type=int)
    one.add_argument("what")
    go = sub.add_parser("run")
    go.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    go.add_argument("--no-lucene", action="store_true")
    sub.add_parser("table")
    args = parser.parse_args()
    results_path = CACHE / "retrieve-scale.json"
    if args.command is None:  # `make bench`: a quick run at 100,000 passages, no Lucene
        print(table(run([100_000], False, CACHE / "retrieve-scale-quick.json")))
    elif args.command == "prepare":
        for size in args.sizes:
            prepare(size, not args.no_lucene)
    elif args.command == "measure":
        print(json.dumps(measure(args.size, args.what)))
    elif args.command == "run":
        print(table(run(args.sizes, not args.no_lucene, results_path)))
    else:
        print(table(json.loads(results_path.read_text())))


if __name__ == "__main__":
    main()
