"""Benchmark of the long-form responders: quality and cost with the local LLM, and the Framework-of-Thoughts
speed-ups of Pathways of Thoughts against the scripted server.

1. **Quality and cost**: the first --turns turns of iKAT 2024 (no history), their heuristic rewrites searched in
   the bundled 894-passage collection (none of it is 2024's: the passages are off topic, the path is what is
   measured), answered by SmolLM2-135M on the local llama.cpp server with: no personalisation, in-context,
   in-context + CoT, Best-of-4, PoT (N=1, T=8), PoT (N=4, T=8); judged by the same model against the
   canonical responses. A 135M model's scores do not rank methods: the table shows the path works and what
   each costs.
2. **FoT speed-ups**: PoT (N=4, T=4) on two turns against the scripted server (tests/fake_openai.py), each
   request delayed by --delay seconds: one request at a time, concurrent pathways (concurrency 8), and a
   re-run from the cache. Two CPU cores cannot show a local model's concurrency, so a fixed delay stands in for
   a remote server's latency.

    .venv/bin/python benchmarks/pathways.py [--turns 2] [--delay 0.2] [--skip-llm]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def jobs_for(turns: list, index: Path):
    from apcir import api
    from apcir.responses.job import build_jobs
    from apcir.responses.ptkb import bm25_similarity, rank_statements

    records = api.reformulate(turns, "heuristic")
    run = api.retrieve({t: r.output.rewrite for t, r in records.items() if r.output}, index, k=5)
    plain = {t: dict(h) for t, h in run.items()}
    texts = {p.id: p.contents for p in api.collection("ikat23-provenance")}
    return build_jobs(turns, records, plain, texts, rank_statements(turns, records, bm25_similarity()), 3)


def quality_table(turn_count: int, console) -> None:
    from rich.table import Table

    from apcir import datasets
    from apcir.contract.responses import load_responses
    from apcir.evaluation.responses import evaluate_responses
    from apcir.evaluation.settings import JudgeSettings
    from apcir.llm.local_server import LocalServer
    from apcir.responses.settings import RespondSettings
    from apcir.responses.stage import respond

    turns = [t for t in datasets.topics("ikat24-test") if not t.history][:turn_count]
    jobs = jobs_for(turns, ROOT / "indexes" / "ikat23-provenance-splade-tiny")
    methods = {
        "no personalisation": {"responder": "smollm2", "personalisation": "none"},
        "in-context": {"responder": "smollm2"},
        "in-context + CoT": {"responder": "smollm2", "personalisation": "cot"},
        "Best-of-4": {"responder": "smollm2", "best_of": 4},
        "PoT (N=1, T=8)": {"responder": "pathways:smollm2", "pathways": 1, "max_actions": 8},
        "PoT (N=4, T=8)": {"responder": "pathways:smollm2", "pathways": 4, "max_actions": 8},
    }
    table = Table(title=f"quality and cost: {len(turns)} iKAT 2024 turns, SmolLM2-135M on the local server "
                        "(scores do not rank methods at this size)")
    for column in ("method", "ok", "judge x100", "requests/turn", "tokens/turn", "seconds/turn"):
        table.add_column(column, justify="left" if column == "method" else "right")
    with tempfile.TemporaryDirectory() as scratch, LocalServer(n_ctx=8192) as server:
        for name, values in methods.items():
            out = Path(scratch) / f"{len(table.rows)}.jsonl"
            settings = RespondSettings(base_url=server.url, cache_dir=str(Path(scratch) / "cache"), top_k=3,
                                       max_words=60, max_tokens=160, **values)
            started = time.perf_counter()
            summary = respond(jobs, settings, out, progress=False)
            seconds = time.perf_counter() - started
            records = load_responses(out)
            judge = JudgeSettings(model="smollm2", base_url=server.url, cache_dir=str(Path(scratch) / "cache"),
                                  max_tokens=300)
            metrics = evaluate_responses(records, turns, topics="ikat24-test", judge_model="smollm2",
                                         judge_settings=judge)
            usage = summary.usage[0] if summary.usage else None
            requests = usage.requests if usage else 0
            tokens = (usage.input_tokens + usage.output_tokens) if usage else 0
            score = metrics.measures.get("judge")
            table.add_row(name, f"{summary.ok}/{len(turns)}", "-" if score is None else f"{100 * score:.1f}",
                          f"{requests / len(turns):.1f}", f"{tokens / len(turns):.0f}", f"{seconds / len(turns):.1f}")
    console.print(table)


def speedup_table(delay: float, console) -> None:
    from rich.table import Table

    sys.path.insert(0, str(ROOT / "tests"))
    from fake_openai import FakeOpenAI

    from apcir import datasets
    from apcir.responses.job import ResponseJob
    from apcir.responses.settings import RespondSettings
    from apcir.responses.stage import respond

    turns = [t for t in datasets.topics("ikat24-test") if not t.history][:2]
    jobs = [ResponseJob(turn=t, level="b", rewrite=t.utterance, statements=list(t.ptkb.items()), used=[],
                        passages=[("p-1", "A passage."), ("p-2", "Another passage.")]) for t in turns]
    answer = json.dumps({"response": "An answer [1] with a second source [2].", "ptkb_used": []})

    def content(body: dict) -> str:
        text = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
        if text.startswith("Choose the next action"):
            done = sum(1 for m in body["messages"] if m["role"] == "assistant" and m["content"].startswith('{"action'))
            return json.dumps({"action": ["reason", "answer", "finalize"][min(done, 2)]})
        if "aspects of an answer" in text:
            return json.dumps({"aspects": ["an aspect"]})
        if text.startswith(("Perform answer", "Perform revise", "Perform finalize")) or "Merge the" in text:
            return answer
        return json.dumps({"text": "a step"})

    table = Table(title=f"FoT speed-ups: PoT (N=4, T=4) on 2 turns, scripted server with {delay:g} s per request")
    for column in ("mode", "requests", "seconds/turn", "speed-up"):
        table.add_column(column, justify="left" if column == "mode" else "right")
    with tempfile.TemporaryDirectory() as scratch, FakeOpenAI(delay=delay, content=content) as server:
        timings = []
        for label, concurrency, cache in (("sequential (concurrency 1)", 1, "a"), ("concurrent (concurrency 8)", 8, "b"),
                                          ("re-run from the cache", 8, "b")):
            settings = RespondSettings(responder="pathways:gpt-scripted", base_url=server.url, pathways=4,
                                       max_actions=4, concurrency=concurrency, cache_dir=str(Path(scratch) / cache))
            before = server.count
            started = time.perf_counter()
            respond(jobs, settings, Path(scratch) / f"{len(timings)}.jsonl", progress=False)
            seconds = (time.perf_counter() - started) / len(jobs)
            timings.append(seconds)
            table.add_row(label, str(server.count - before), f"{seconds:.2f}", f"{timings[0] / seconds:.1f}x")
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--skip-llm", action="store_true", help="only the FoT table (no local model)")
    args = parser.parse_args()
    from rich.console import Console

    console = Console()
    speedup_table(args.delay, console)
    if not args.skip_llm:
        quality_table(args.turns, console)


if __name__ == "__main__":
    main()
