"""A local LLM behind llama.cpp's server, stage by stage: cost, validity and what it does to retrieval.

For SmolLM2-135M-Instruct (packaged) or any GGUF given with ``--model``, on the first ``--turns`` judged turns of
iKAT-23 test (default 12), against a fresh answer cache:

* **reformulate** and **respond** (and **judge**): seconds per turn, prompt and completion tokens per turn,
  JSON valid before any repair (the first answer parsed and passed the stage's checks), repair rate, failure
  rate, and the level distribution;
* **retrieval**: MRR and nDCG@3 (x100) on the demo qrels of the q' list and of APCIR fusion (the paper's
  iKAT-23 weights per level, nothing tuned on these turns), for this model against the offline heuristic
  reformulator and the annotators' manual rewrites on the same turns and index.

The demo index (``indexes/ikat23-provenance-splade-tiny``, built by ``make demo``) is built if missing.

Run: ``.venv/bin/python benchmarks/local_llm.py [--model F.gguf] [--turns 12] [--n-ctx 8192]``. Prints Markdown.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

PAPER_WEIGHTS = {"a": (0.36, 0.17, 0.47), "b": (0.35, 0.20, 0.45), "c": (0.25, 0.20, 0.55)}  # iKAT-23, Table 3
INDEX = Path("indexes/ikat23-provenance-splade-tiny")


def judged_turns(count: int) -> list:  # type: ignore[type-arg]
    from apcir import datasets

    qrels = datasets.qrels("ikat23-test-provenance")
    return [t for t in datasets.topics("ikat23-test") if t.turn_id in qrels][:count]


def stage_row(name: str, records: list, seconds: float) -> dict[str, object]:  # type: ignore[type-arg]
    turns = len(records)
    first_ok = sum(1 for r in records if r.status == "ok" and r.usage.requests == 1)
    repaired = sum(1 for r in records if r.usage.requests > 1)
    failed = sum(1 for r in records if r.status != "ok")
    return {
        "stage": name, "turns": turns, "s/turn": seconds / max(turns, 1),
        "prompt tok/turn": statistics.fmean(r.usage.input_tokens for r in records) if records else 0.0,
        "completion tok/turn": statistics.fmean(r.usage.output_tokens for r in records) if records else 0.0,
        "valid before repair": first_ok / max(turns, 1), "repair rate": repaired / max(turns, 1),
        "failure rate": failed / max(turns, 1),
    }


def retrieval_rows(records_by_system: dict[str, dict], turns: list) -> list[tuple[str, float, float, float, float]]:  # type: ignore[type-arg]
    from apcir import datasets
    from apcir.contract.reformulations import LIST_NAMES, with_fallbacks
    from apcir.fusion.linear import fuse_linear
    from apcir.metrics import evaluate
    from apcir.retrieval.backends import open_index
    from apcir.retrieval.stage import list_queries, retrieve_lists

    qrels = datasets.qrels("ikat23-test-provenance")
    backend = open_index(INDEX)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for system, records in records_by_system.items():
            records = with_fallbacks(records, turns)
            queries = {field: list_queries(records, field) for field in LIST_NAMES}
            outs = {field: Path(folder) / f"{system}-{field}.run" for field in LIST_NAMES}
            runs = retrieve_lists(backend, queries, outs, {f: f for f in LIST_NAMES}, k=1000, progress=False)
            levels = {t: r.output.level for t, r in records.items() if r.output is not None}
            fused = fuse_linear([runs[f] for f in LIST_NAMES], levels, PAPER_WEIGHTS)
            first = evaluate(runs["rewrite"], qrels, ["MRR", "nDCG@3"], check=False).measures
            apcir = evaluate(fused, qrels, ["MRR", "nDCG@3"], check=False).measures
            rows.append((system, 100 * first["MRR"], 100 * first["nDCG@3"], 100 * apcir["MRR"],
                         100 * apcir["nDCG@3"]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="a GGUF file, or smollm2 (packaged)")
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--max-tokens", type=int, default=1024)
    args = parser.parse_args()

    from apcir.contract.reformulations import load_reformulations
    from apcir.contract.responses import load_responses
    from apcir.evaluation.judge import judge_all
    from apcir.llm.local_server import LocalServer
    from apcir.reformulation.settings import ReformulatorOptions
    from apcir.reformulation.stage import reformulate
    from apcir.responses.job import build_jobs
    from apcir.responses.ptkb import bm25_similarity, rank_statements
    from apcir.responses.settings import RespondSettings
    from apcir.responses.stage import respond
    from apcir.retrieval.build import build_index

    if not (INDEX / "manifest.json").exists():
        build_index("ikat23-provenance", "embedded", INDEX, "splade-tiny", progress=False)
    turns = judged_turns(args.turns)
    budget = args.n_ctx - args.max_tokens
    with tempfile.TemporaryDirectory() as folder, LocalServer(args.model, n_ctx=args.n_ctx) as server:
        work = Path(folder)
        name = "smollm2" if args.model == "smollm2" else Path(args.model).stem
        common = {"base_url": server.url, "cache_dir": str(work / "cache"), "max_tokens": args.max_tokens,
                  "max_prompt_tokens": budget}
        started = time.perf_counter()
        summary = reformulate(turns, ReformulatorOptions(llm=name, **common), work / "refs.jsonl", progress=False)
        reform_seconds = time.perf_counter() - started
        refs = load_reformulations(work / "refs.jsonl")
        rows = [stage_row("reformulate", list(refs.values()), reform_seconds)]
        levels = Counter(r.output.level for r in refs.values() if r.output is not None)

        heuristic_refs, manual_refs = work / "heuristic.jsonl", work / "manual.jsonl"
        reformulate(turns, ReformulatorOptions(llm="heuristic"), heuristic_refs, progress=False)
        reformulate(turns, ReformulatorOptions(llm="manual"), manual_refs, progress=False)
        quality = retrieval_rows({name: refs, "heuristic": load_reformulations(heuristic_refs),
                                  "manual": load_reformulations(manual_refs)}, turns)

        from apcir.retrieval.backends import open_index
        from apcir.retrieval.stage import list_queries

        backend = open_index(INDEX)
        run = backend.search(list_queries(refs, "rewrite"), 5, progress=False)
        from apcir import datasets

        texts = datasets.passage_texts(datasets.collection_path("ikat23-provenance"),
                                       {p for hits in run.values() for p in hits})
        jobs = build_jobs(turns, refs, run, texts, rank_statements(turns, refs, bm25_similarity()), 3)
        started = time.perf_counter()
        respond(jobs, RespondSettings(responder=name, top_k=3, max_words=120, **common), work / "responses.jsonl",
                progress=False)
        respond_seconds = time.perf_counter() - started
        answers = load_responses(work / "responses.jsonl")
        rows.append(stage_row("respond", list(answers.values()), respond_seconds))

        from apcir.evaluation.settings import JudgeSettings

        pairs = [(t, answers[t.turn_id]) for t in turns if t.turn_id in answers and answers[t.turn_id].status == "ok"
                 and t.response.strip()]
        started = time.perf_counter()
        judged = judge_all(pairs, name, JudgeSettings(model=name, **common))
        judge_seconds = time.perf_counter() - started
        usage = judged.accounting.summary()
        judge_requests = sum(u.requests for u in usage)
        judge_row = {"stage": "judge", "turns": len(pairs), "s/turn": judge_seconds / max(len(pairs), 1),
                     "prompt tok/turn": sum(u.input_tokens for u in usage) / max(len(pairs), 1),
                     "completion tok/turn": sum(u.output_tokens for u in usage) / max(len(pairs), 1),
                     "valid before repair": (len(judged.judgements) - sum(u.repairs for u in usage)) / max(len(pairs), 1),
                     "repair rate": sum(u.repairs for u in usage) / max(len(pairs), 1),
                     "failure rate": len(judged.unjudged) / max(len(pairs), 1)}
        rows.append(judge_row)

    print(f"## Local LLM: {name} (llama.cpp server, n_ctx {args.n_ctx}, {os.cpu_count()} CPU threads), "
          f"{len(turns)} judged iKAT-23 turns, a fresh cache\n")
    print(f"Structured output in use: {summary.structured}; judge requests: {judge_requests}.\n")
    print("| stage | turns | s/turn | prompt tok/turn | completion tok/turn | JSON valid before repair | repair rate "
          "| failure rate |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['stage']} | {row['turns']} | {row['s/turn']:.1f} | {row['prompt tok/turn']:.0f} | "
              f"{row['completion tok/turn']:.0f} | {100 * row['valid before repair']:.0f}% | "  # type: ignore[operator]
              f"{100 * row['repair rate']:.0f}% | {100 * row['failure rate']:.0f}% |")  # type: ignore[operator]
    print(f"\nLevels from {name}: " + ", ".join(f"{lv} {levels.get(lv, 0)}" for lv in "abc") + "\n")
    print("| reformulator | q' MRR | q' nDCG@3 | APCIR MRR | APCIR nDCG@3 |")
    print("|---|---:|---:|---:|---:|")
    for system, *values in quality:
        print(f"| {system} | " + " | ".join(f"{v:.1f}" for v in values) + " |")
    print("\nAPCIR here: the paper's iKAT-23 weights per level (nothing tuned on these turns); x100, trec_eval's "
          "numbers on the demo qrels. A 135M model's numbers rank nothing: they show the path works and its cost.")


if __name__ == "__main__":
    main()
