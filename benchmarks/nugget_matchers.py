"""Benchmark of the nugget matchers on the bundled iKAT 2025 judgments: cost, the runs' order, and (with --llm)
how often the batched LLM form agrees with one request per nugget.

1. lexical and embedding (MiniLM) on the three bundled 2025 runs (45 turns, 2,241 nuggets, 6,723 pairs):
   seconds, each run's nugget recall, and Kendall's τ between the two matchers' run orderings.
2. --llm: the local SmolLM2 server (llama.cpp), the three runs on the --turns turns with the fewest nuggets,
   once batched (one request per turn and run) and once per nugget: requests, seconds, and the share of the
   nugget decisions on which the two forms agree (over the pairs both decided).

    .venv/bin/python benchmarks/nugget_matchers.py [--llm] [--turns 6]
"""

from __future__ import annotations

import argparse
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llm", action="store_true", help="also measure the llm matcher on the local server")
    parser.add_argument("--turns", type=int, default=6, help="turns (fewest nuggets first) for the llm matcher")
    args = parser.parse_args()

    from rich.console import Console
    from rich.table import Table

    from apcir.evaluation.nuggets.gold import NuggetSet, load_nuggets, load_response_runs
    from apcir.evaluation.nuggets.scores import match, score_runs
    from apcir.evaluation.nuggets.settings import MatcherSettings

    console = Console()
    nuggets = load_nuggets("ikat25-test")
    runs = load_response_runs(["ikat25-runs"])
    table = Table(title=f"nugget matchers on ikat25-test ({nuggets.count} nuggets, {len(nuggets.by_turn)} turns, "
                        f"{len(runs)} runs)")
    table.add_column("matcher")
    table.add_column("seconds", justify="right")
    for run in sorted(runs):
        table.add_column(run[:24], justify="right")
    recalls = {}
    for matcher in ("lexical", "embedding"):
        started = time.perf_counter()
        report = score_runs(nuggets, runs, matcher)
        seconds = time.perf_counter() - started
        recalls[matcher] = {r: v.recall for r, v in report.runs.items()}
        table.add_row(f"{matcher} (τ = {report.matcher.tau:g})", f"{seconds:.1f}",
                      *(f"{100 * recalls[matcher][r]:.1f}" for r in sorted(runs)))
    console.print(table)
    from scipy.stats import kendalltau

    names = sorted(runs)
    tau = kendalltau([recalls["lexical"][r] for r in names], [recalls["embedding"][r] for r in names]).statistic
    console.print(f"Kendall's τ, lexical vs embedding run orderings: {tau:.3f} (3 runs)")
    if not args.llm:
        return

    from apcir.llm.local_server import LocalServer
    from apcir.llm.settings import LLMSettings

    chosen = sorted(nuggets.by_turn, key=lambda t: (len(nuggets.by_turn[t]), t))[:args.turns]
    subset = NuggetSet(name="ikat25-test (subset)", by_turn={t: nuggets.by_turn[t] for t in chosen})
    with tempfile.TemporaryDirectory() as cache, LocalServer(n_ctx=4096) as server:
        llm = LLMSettings(base_url=server.url, cache_dir=cache, concurrency=1, max_tokens=256)
        results = {}
        timing = Table(title=f"llm matcher, SmolLM2-135M on the local server: {len(chosen)} turns "
                             f"({sum(len(v) for v in subset.by_turn.values())} nuggets) x {len(runs)} runs")
        for column in ("form", "requests", "seconds", "decided", "covered"):
            timing.add_column(column, justify="left" if column == "form" else "right")
        for batched in (True, False):
            started = time.perf_counter()
            scores, info = match(subset, runs, "llm", MatcherSettings.model_validate(
                {"matcher": "llm", "model": "smollm2", "batched": batched, "llm": llm}))
            seconds = time.perf_counter() - started
            flat = [(r, t, i, s) for r, by_turn in scores.items() for t, values in by_turn.items()
                    for i, s in enumerate(values)]
            results[batched] = {(r, t, i): s for r, t, i, s in flat}
            decided = [s for *_, s in flat if s is not None]
            timing.add_row("batched" if batched else "per nugget", str(info.requests), f"{seconds:.0f}",
                           f"{len(decided)}/{len(flat)}", f"{100 * sum(decided) / max(1, len(decided)):.0f}%")
        console.print(timing)
        both = [k for k in results[True] if results[True][k] is not None and results[False].get(k) is not None]
        same = sum(1 for k in both if results[True][k] == results[False][k])
        console.print(f"batched and per-nugget agree on {same} of {len(both)} decisions both made "
                      f"({100 * same / max(1, len(both)):.1f}%)")


if __name__ == "__main__":
    main()
